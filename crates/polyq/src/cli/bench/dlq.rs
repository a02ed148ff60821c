//! `polyq bench dlq`: what a dead-letter queue page of the console (and `polyq dlq show` /
//! `groups`) costs on a large queue, in one run: the non-consuming read alone (the floor any
//! display pays), the read messages decoded into rows, their fingerprint groups, and the page
//! rendered. The queue is filled to each size in turn (AceMQ messages on RabbitMQ, BabelQueue
//! jobs on Redis, ten error patterns), measured, and removed at the end.

use std::time::{Duration, Instant};

use acemq::time::OffsetDateTime;
use clap::Args;
use polyq_amqp::{Client, FieldValue, MessageJson, OutgoingMessage, Properties, QueueSpec};

use crate::cli::babel::Layout;
use crate::cli::connect::TlsArgs;
use crate::cli::console::pages;
use crate::cli::dlq::render;
use crate::cli::dlq::row::Row;
use crate::cli::dlq::store::{BrokerArgs, Store};

/// Arguments of `polyq bench dlq`.
#[derive(Debug, Args)]
pub(crate) struct DlqArgs {
    /// The broker: amqp://, amqps:// or redis://.
    #[arg(long)]
    url: String,
    /// Queue sizes to measure, in order (repeatable).
    #[arg(long = "messages", default_values_t = [1_000, 100_000])]
    sizes: Vec<usize>,
    /// Rounds at each size; the figures are their medians.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// One round's times.
#[derive(Clone, Copy)]
struct Round {
    read: Duration,
    rows: Duration,
    groups: Duration,
    render: Duration,
}

/// Runs `polyq bench dlq`.
pub(crate) async fn run(args: DlqArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    anyhow::ensure!(
        args.sizes.windows(2).all(|pair| pair[0] < pair[1]) && !args.sizes.is_empty(),
        "--messages: give increasing sizes"
    );
    let broker = BrokerArgs::new(args.url.clone(), Layout::Default, TlsArgs::default());
    let store = Store::open(&broker).await?;
    let dlq = format!("polyq.bench.{}.dlq", uuid::Uuid::new_v4().simple());
    println!(
        "polyq bench dlq: {:?} messages, {} rounds, {}",
        args.sizes,
        args.rounds,
        polyq_amqp::redact_url(&args.url)
    );
    println!("messages  read ms  decode ms  groups ms  render ms  page ms  page/read  groups");
    let outcome = measure(&args, &store, &dlq).await;
    if store.is_redis() {
        store.purge(&dlq).await.ok();
    } else {
        let client = Client::connect(&args.url).await?;
        client.delete_queue(&dlq).await.ok();
        client.close().await.ok();
    }
    outcome
}

async fn measure(args: &DlqArgs, store: &Store, dlq: &str) -> anyhow::Result<()> {
    if !store.is_redis() {
        let client = Client::connect(&args.url).await?;
        client.declare_queue(&QueueSpec::new(dlq)).await?;
        client.close().await.ok();
    }
    let mut filled = 0;
    for &size in &args.sizes {
        fill(args, store, dlq, filled, size).await?;
        filled = size;
        let mut rounds = Vec::with_capacity(args.rounds);
        let mut group_count = 0;
        for _ in 0..args.rounds {
            let (round, groups, seen) = round(store, dlq).await?;
            anyhow::ensure!(seen == size, "read {seen} of {size} messages");
            group_count = groups;
            rounds.push(round);
        }
        let median = |pick: fn(&Round) -> Duration| {
            let mut times: Vec<Duration> = rounds.iter().map(pick).collect();
            times.sort();
            times[times.len() / 2]
        };
        let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
        let (read, rows, groups, render) = (
            median(|r| r.read),
            median(|r| r.rows),
            median(|r| r.groups),
            median(|r| r.render),
        );
        let page = read + rows + groups + render;
        println!(
            "{size:>8}  {:>7.1}  {:>9.1}  {:>9.1}  {:>9.1}  {:>7.1}  {:>9.2}  {group_count:>6}",
            ms(read),
            ms(rows),
            ms(groups),
            ms(render),
            ms(page),
            page.as_secs_f64() / read.as_secs_f64()
        );
    }
    Ok(())
}

/// One page of the console, timed step by step; answers the groups and messages it saw.
async fn round(store: &Store, dlq: &str) -> anyhow::Result<(Round, usize, usize)> {
    let start = Instant::now();
    let stored = store.read(dlq).await?;
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
        read,
        rows: decoded,
        groups: grouped,
        render,
    };
    Ok((round, groups.len(), rows.len()))
}

/// Tops `dlq` up from `from` to `to` messages.
async fn fill(
    args: &DlqArgs,
    store: &Store,
    dlq: &str,
    from: usize,
    to: usize,
) -> anyhow::Result<()> {
    let error = |n: usize| format!("ValueError{}: order o-{n} has no line '{n}x'", n % 10);
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
    let client = Client::connect(&args.url).await?;
    // Confirms awaited in windows, so the fill is quick without an unbounded backlog.
    for window in (from..to).collect::<Vec<_>>().chunks(1_000) {
        let mut confirms = Vec::with_capacity(window.len());
        for &n in window {
            let mut properties = Properties {
                message_id: Some(format!("m-{n}")),
                content_type: Some("application/json".to_owned()),
                ..Properties::default()
            };
            for (name, value) in [
                ("x-acemq-id", format!("m-{n}")),
                ("x-acemq-type", "orders.new".to_owned()),
                ("x-acemq-error", error(n)),
            ] {
                properties
                    .headers
                    .insert(name.to_owned(), FieldValue::from(value));
            }
            let body = format!("{{\"order\":{n}}}").into_bytes();
            let message = OutgoingMessage::new("", dlq, properties, body);
            confirms.push(client.publish(message).await?);
        }
        for confirm in confirms {
            confirm.await?;
        }
    }
    client.close().await.ok();
    Ok(())
}
