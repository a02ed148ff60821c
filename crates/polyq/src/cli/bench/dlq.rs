//! `polyq bench dlq`: what a dead-letter queue costs `polyq dlq show` / `groups` / `delete` and a
//! page of the console on a large queue, in one run: a page read alone (only its messages taken),
//! the non-consuming read of the whole queue (the floor any full display pays), the read messages
//! decoded into rows, their fingerprint groups, the console page rendered, and the delete of one
//! error pattern in ten (as `polyq dlq delete --error`). The queue is filled to each size in turn
//! (AceMQ messages on RabbitMQ, BabelQueue jobs on Redis, ten error patterns), measured, and
//! removed at the end.

use std::time::{Duration, Instant};

use acemq::time::OffsetDateTime;
use clap::Args;
use polyq_amqp::QueueSpec;
use polyq_amqp::{Client, FieldValue, MessageJson, OutgoingMessage, Properties, PublishOutcome};

use crate::cli::console::pages;
use crate::cli::dlq::render;
use crate::cli::dlq::row::{Row, Selection};
use crate::cli::dlq::store::{BrokerArgs, Store};
use crate::cli::dlq::{delete, selected, selected_of};

/// Publishes awaiting their confirm at most while filling a RabbitMQ queue.
const WINDOW: usize = 1_000;

/// Arguments of `polyq bench dlq`.
#[derive(Debug, Args)]
pub(crate) struct DlqArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// Dead-letter queue sizes to measure (comma-separated or repeated), measured smallest
    /// first on one queue topped up between sizes.
    #[arg(long, value_delimiter = ',', default_value = "1000,100000")]
    messages: Vec<u64>,
    /// Messages in a page.
    #[arg(long, default_value_t = 50)]
    page: u64,
    /// Rounds at each size; the figures are their medians.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// One round's times.
#[derive(Clone, Copy)]
struct Round {
    page: Duration,
    read: Duration,
    rows: Duration,
    groups: Duration,
    render: Duration,
}

/// Runs `polyq bench dlq`.
pub(crate) async fn run(mut args: DlqArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    anyhow::ensure!(args.page > 0, "--page must be at least 1");
    anyhow::ensure!(
        !args.messages.is_empty() && !args.messages.contains(&0),
        "--messages: give sizes of at least 1"
    );
    args.messages.sort_unstable();
    args.messages.dedup();
    let store = Store::open(&args.broker).await?;
    let dlq = format!("polyq.bench.dlq.{}.dlq", uuid::Uuid::new_v4().simple());
    println!(
        "polyq bench dlq: {:?} messages, pages of {}, {} rounds, {}",
        args.messages,
        args.page,
        args.rounds,
        polyq_amqp::redact_url(&args.broker.url)
    );
    println!(
        "messages  page ms  read ms  decode ms  groups ms  render ms  console ms  console/read  \
         groups  delete ms  deleted"
    );
    let outcome = measure(&args, &store, &dlq).await;
    let purged = store.purge(&dlq).await;
    if !store.is_redis() {
        let client = Client::connect(&args.broker.url).await?;
        client.delete_queue(&dlq).await.ok();
        client.close().await.ok();
    }
    outcome?;
    purged.map(drop)
}

async fn measure(args: &DlqArgs, store: &Store, dlq: &str) -> anyhow::Result<()> {
    if !store.is_redis() {
        let client = Client::connect(&args.broker.url).await?;
        client.declare_queue(&QueueSpec::new(dlq)).await?;
        client.close().await.ok();
    }
    let mut filled = 0;
    for &size in &args.messages {
        fill(args, store, dlq, filled, size).await?;
        filled = size;
        let mut rounds = Vec::with_capacity(args.rounds);
        let mut group_count = 0;
        for _ in 0..args.rounds {
            let (round, groups) = round(store, dlq, size, args.page).await?;
            group_count = groups;
            rounds.push(round);
        }
        let median = |pick: fn(&Round) -> Duration| {
            let mut times: Vec<Duration> = rounds.iter().map(pick).collect();
            times.sort();
            times[times.len() / 2]
        };
        let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
        let (page, read, rows, groups, render) = (
            median(|r| r.page),
            median(|r| r.read),
            median(|r| r.rows),
            median(|r| r.groups),
            median(|r| r.render),
        );
        let console = read + rows + groups + render;
        let (deleted, delete_time) = delete_one_pattern(store, dlq).await?;
        println!(
            "{size:>8}  {:>7.1}  {:>7.1}  {:>9.1}  {:>9.1}  {:>9.1}  {:>10.1}  {:>12.2}  \
             {group_count:>6}  {:>9.1}  {deleted:>7}",
            ms(page),
            ms(read),
            ms(rows),
            ms(groups),
            ms(render),
            ms(console),
            console.as_secs_f64() / read.as_secs_f64(),
            ms(delete_time),
        );
    }
    Ok(())
}

/// A page read alone, then one page of the console timed step by step; answers the times and
/// the groups it saw, after checking every message was read.
async fn round(store: &Store, dlq: &str, size: u64, page: u64) -> anyhow::Result<(Round, usize)> {
    let start = Instant::now();
    let paged = selected_of(store, dlq, &Selection::default(), Some(page)).await?;
    let page_time = start.elapsed();
    anyhow::ensure!(
        paged.len() as u64 == page.min(size),
        "a page of {} read",
        paged.len()
    );
    let start = Instant::now();
    let stored = store.read(dlq, None).await?;
    let read = start.elapsed();
    let start = Instant::now();
    let now = OffsetDateTime::now_utc();
    let redis = store.is_redis();
    let rows: Vec<Row> = stored
        .into_iter()
        .enumerate()
        .map(|(position, stored)| Row::read(position, stored, redis, now))
        .collect();
    let decoded = start.elapsed();
    anyhow::ensure!(
        rows.len() as u64 == size,
        "read {} of {size} messages",
        rows.len()
    );
    let start = Instant::now();
    let groups = render::groups(&rows);
    let grouped = start.elapsed();
    let start = Instant::now();
    let reader = pages::Reader {
        csrf: Some("bench"),
        read_only: false,
    };
    let view = pages::QueuePage {
        broker: 0,
        broker_label: "bench",
        queue: dlq,
        rows: &rows,
        total: rows.len(),
        groups: &groups,
        filters: &[],
        page: 0,
        done: None,
    };
    let html = pages::queue(&reader, &view).into_string();
    let render = start.elapsed();
    anyhow::ensure!(!html.is_empty(), "the page rendered empty");
    let round = Round {
        page: page_time,
        read,
        rows: decoded,
        groups: grouped,
        render,
    };
    Ok((round, groups.len()))
}

/// Deletes the messages of one error pattern in ten, as `polyq dlq delete --error` does, timed,
/// then puts the same messages back (at the tail) so that the queue keeps its size and contents;
/// answers how many went and how long the delete took.
async fn delete_one_pattern(store: &Store, dlq: &str) -> anyhow::Result<(u64, Duration)> {
    let selection = Selection {
        error: Some("ValueError3:".to_owned()),
        ..Selection::default()
    };
    let doomed: Vec<MessageJson> = selected(store, dlq, &selection)
        .await?
        .into_iter()
        .map(|row| row.message)
        .collect();
    let start = Instant::now();
    let deleted = delete(store, dlq, &selection).await?;
    let took = start.elapsed();
    anyhow::ensure!(
        deleted == doomed.len() as u64,
        "deleted {deleted} of the {} selected",
        doomed.len()
    );
    store.push(dlq, &doomed, || {}).await?;
    Ok((deleted, took))
}

/// Tops `dlq` up from `from` to `to` messages, dead-lettered as each family does it.
async fn fill(args: &DlqArgs, store: &Store, dlq: &str, from: u64, to: u64) -> anyhow::Result<()> {
    let error = |n: u64| format!("ValueError{}: order o-{n} has no line '{n}x'", n % 10);
    if store.is_redis() {
        let jobs: Vec<MessageJson> = (from..to)
            .map(|n| {
                let mut envelope = babelqueue::make(
                    "urn:babel:orders:created",
                    &serde_json::json!({"n": n}),
                    babelqueue::MakeOptions::new().queue("orders"),
                )?;
                envelope.annotate(
                    &babelqueue::DeadLetter::new(babelqueue::DeadLetterReason::Failed, "orders", 3)
                        .error(error(n)),
                );
                let body = envelope.encode()?;
                Ok(MessageJson::new(
                    "",
                    dlq,
                    Properties::default(),
                    body.into_bytes(),
                ))
            })
            .collect::<anyhow::Result<_>>()?;
        return store.push(dlq, &jobs, || {}).await;
    }
    let client = Client::connect(&args.broker.url).await?;
    // Confirms awaited in windows, so the fill is quick without an unbounded backlog.
    for window in (from..to).collect::<Vec<_>>().chunks(WINDOW) {
        let mut confirms = Vec::with_capacity(window.len());
        for &n in window {
            let mut properties = Properties {
                message_id: Some(format!("m-{n}")),
                content_type: Some("application/json".to_owned()),
                ..Properties::default()
            };
            for (name, value) in [
                ("x-acemq-id", FieldValue::from(format!("m-{n}"))),
                ("x-acemq-type", FieldValue::from("orders.new")),
                ("x-acemq-attempt", FieldValue::from(3_i64)),
                ("x-acemq-error", FieldValue::from(error(n))),
            ] {
                properties.headers.insert(name.to_owned(), value);
            }
            let body = format!(r#"{{"order":{n},"lines":[{{"sku":"sku-{n}","qty":1}}]}}"#);
            let message = OutgoingMessage::new("", dlq, properties, body.into_bytes());
            confirms.push(client.publish(message).await?);
        }
        for confirm in confirms {
            anyhow::ensure!(
                confirm.await? == PublishOutcome::Acked,
                "a publish was refused"
            );
        }
    }
    client.close().await.ok();
    Ok(())
}
