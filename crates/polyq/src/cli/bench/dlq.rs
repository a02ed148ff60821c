//! `polyq bench dlq`: how long `polyq dlq` takes to show a page of a dead-letter queue and to
//! read and group all of it, at each size asked for, on RabbitMQ or Redis.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use polyq_amqp::{Client, FieldValue, OutgoingMessage, Properties, PublishOutcome, QueueSpec};

use crate::cli::dlq::render::groups;
use crate::cli::dlq::row::Selection;
use crate::cli::dlq::store::{BrokerArgs, Store};
use crate::cli::dlq::{selected, selected_of};

/// Publishes awaiting their confirm at most while filling a RabbitMQ queue.
const WINDOW: usize = 1000;

/// Arguments of `polyq bench dlq`.
#[derive(Debug, Args)]
pub(crate) struct DlqArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// Dead-letter queue sizes to measure, each on a queue of its own.
    #[arg(long, value_delimiter = ',', default_value = "1000,100000")]
    messages: Vec<u64>,
    /// Messages in a page.
    #[arg(long, default_value_t = 50)]
    page: u64,
}

/// Fills a dead-letter queue of each size, times a page and a read and group of the whole
/// queue, then deletes it.
pub(crate) async fn run(args: DlqArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.page > 0, "--page must be at least 1");
    let url = &args.broker.url;
    println!(
        "polyq bench dlq: {}, pages of {}",
        polyq_amqp::redact_url(url),
        args.page
    );
    let store = Store::open(&args.broker).await?;
    for &count in &args.messages {
        anyhow::ensure!(count > 0, "--messages: each size must be at least 1");
        let queue = format!("{}.dlq", fresh_queue_name());
        let filled = Instant::now();
        if store.is_redis() {
            fill_redis(url, &queue, count).await?;
        } else {
            fill_rabbitmq(url, &queue, count).await?;
        }
        let filled = filled.elapsed();
        let measured = measure(&store, &queue, count, args.page).await;
        let removed = store.purge(&queue).await;
        if !store.is_redis() {
            let client = Client::connect(url).await?;
            client.delete_queue(&queue).await.ok();
            client.close().await.ok();
        }
        let (page, grouped, group_count) = measured?;
        removed?;
        println!(
            "{count} messages (filled in {:.1} s): page of {} in {:.1} ms; read + group of all in \
             {:.2} s ({:.0} msg/s, {group_count} groups)",
            filled.as_secs_f64(),
            args.page.min(count),
            millis(page),
            grouped.as_secs_f64(),
            count as f64 / grouped.as_secs_f64(),
        );
    }
    Ok(())
}

/// The time of a page, of a read and group of everything, and the number of groups; checks
/// that every message was read.
async fn measure(
    store: &Store,
    queue: &str,
    count: u64,
    page: u64,
) -> anyhow::Result<(Duration, Duration, usize)> {
    let everything = Selection::default();
    let started = Instant::now();
    let rows = selected_of(store, queue, &everything, Some(page)).await?;
    let paged = started.elapsed();
    anyhow::ensure!(
        rows.len() as u64 == page.min(count),
        "a page of {} read",
        rows.len()
    );
    let started = Instant::now();
    let rows = selected(store, queue, &everything).await?;
    let found = groups(&rows);
    let grouped = started.elapsed();
    anyhow::ensure!(
        found.iter().map(|group| group.count).sum::<u64>() == count,
        "{} of {count} messages read",
        rows.len()
    );
    Ok((paged, grouped, found.len()))
}

fn fresh_queue_name() -> String {
    format!("polyq.bench.dlq.{}", uuid::Uuid::new_v4().simple())
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The error of dead-lettered message `n`: two failure groups, their numbers varying.
fn error_of(n: u64) -> String {
    if n.is_multiple_of(2) {
        format!("ValueError: order o-{n} has no line '{n}x'")
    } else {
        format!("TimeoutError: no answer after {} ms", 100 + n % 900)
    }
}

/// `count` AceMQ messages as AceMQ dead-letters them, `WINDOW` confirms outstanding.
async fn fill_rabbitmq(url: &str, queue: &str, count: u64) -> anyhow::Result<()> {
    let client = Client::connect(url).await?;
    client.declare_queue(&QueueSpec::new(queue)).await?;
    let mut pending = Vec::with_capacity(WINDOW);
    for n in 0..count {
        let mut properties = Properties {
            message_id: Some(format!("m-{n}")),
            content_type: Some("application/json".to_owned()),
            ..Properties::default()
        };
        for (name, value) in [
            ("x-acemq-id", FieldValue::from(format!("m-{n}"))),
            ("x-acemq-type", FieldValue::from("orders.new")),
            ("x-acemq-attempt", FieldValue::from(3_i64)),
            ("x-acemq-error", FieldValue::from(error_of(n))),
        ] {
            properties.headers.insert(name.to_owned(), value);
        }
        let body = format!(r#"{{"order":{n},"lines":[{{"sku":"sku-{n}","qty":1}}]}}"#);
        pending.push(
            client
                .publish(OutgoingMessage::new("", queue, properties, body))
                .await?,
        );
        if pending.len() == WINDOW || n + 1 == count {
            for confirm in pending.drain(..) {
                anyhow::ensure!(
                    confirm.await? == PublishOutcome::Acked,
                    "a publish was refused"
                );
            }
        }
    }
    client.close().await.ok();
    Ok(())
}

/// `count` BabelQueue jobs as a worker dead-letters them, pushed 1,000 at a time.
async fn fill_redis(url: &str, queue: &str, count: u64) -> anyhow::Result<()> {
    let client = redis::Client::open(url).context("--url")?;
    let mut redis = client.get_multiplexed_async_connection().await?;
    let source = queue.trim_end_matches(".dlq");
    let mut n = 0;
    while n < count {
        let mut pipe = redis::pipe();
        for n in n..count.min(n + 1000) {
            let error = serde_json::to_string(&error_of(n))?;
            pipe.rpush(
                queue,
                format!(
                    r#"{{"job":"urn:babel:orders:created","trace_id":"t-{n}","data":{{"order":{n}}},"meta":{{"id":"j-{n}","schema_version":1,"lang":"rust"}},"attempts":3,"dead_letter":{{"reason":"failed","error":{error},"failed_at":{},"attempts":3,"original_queue":"{source}","lang":"rust"}}}}"#,
                    1_767_323_045_678 + n
                ),
            )
            .ignore();
        }
        pipe.query_async::<()>(&mut redis).await?;
        n = count.min(n + 1000);
    }
    Ok(())
}
