//! A worker on Redis handling a job a Python service produced: the body below is pushed exactly
//! as the Python SDK writes it (an `RPUSH` onto the queue's list, the default layout every SDK
//! shares), and the Rust worker reserves it, hands it to its handler and acknowledges it.
//!
//! Needs Redis (`POLYQ_REDIS_URL`, default `redis://127.0.0.1:6379/0`); the queue's keys are
//! removed at the end:
//!
//! ```sh
//! cargo run -p babelqueue --example redis_worker
//! ```

use std::time::Duration;

use anyhow::{Context, ensure};
use babelqueue::BabelQueue;
use babelqueue::worker::Job;
use redis::AsyncCommands;
use tokio::sync::mpsc;

const CREATED: &str = "urn:babel:orders:created";
/// What the Python SDK 1.24 writes for
/// `BabelQueue(transport=RedisTransport(url), queue="example-redis-worker")
///     .publish("urn:babel:orders:created", {"order_id": 1042, "amount": 99.9, "currency": "EUR"},
///              trace_id="checkout-7f3a")`,
/// byte for byte, as read back from Redis. `meta.queue` names the queue Python published to; a
/// worker takes the job from whichever queue it is on.
const PYTHON_BODY: &str = r#"{"job":"urn:babel:orders:created","trace_id":"checkout-7f3a","data":{"order_id":1042,"amount":99.9,"currency":"EUR"},"meta":{"id":"5dcf0dd1-9f06-4a2d-b745-d5cc83ac9358","queue":"example-redis-worker","lang":"python","schema_version":1,"created_at":1796198361691},"attempts":0}"#;

#[derive(Debug, serde::Deserialize)]
struct Order {
    order_id: u64,
    amount: f64,
    currency: String,
}

/// What the handler saw of the job.
#[derive(Debug)]
struct Seen {
    order_id: u64,
    trace_id: Option<String>,
    producer: Option<String>,
    attempts: i64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let url =
        std::env::var("POLYQ_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned());
    let mut redis = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await
        .context("cannot reach Redis; set POLYQ_REDIS_URL")?;
    // A queue of this run's own, so that two runs on one Redis never take each other's jobs.
    let queue = format!("example-redis-worker.{}", std::process::id());
    let result = run(&url, &mut redis, &queue).await;
    // The list, its `:processing` list and deadlines, and any `<queue>.…` (not another run's
    // `<queue>7`).
    let mut keys = Vec::new();
    let pattern = redis::ScanOptions::default().with_pattern(format!("{queue}*"));
    let mut scan = redis.scan_options::<String>(pattern).await?;
    while let Some(key) = scan.next_item().await {
        let key = key?;
        if let Some(rest) = key.strip_prefix(queue.as_str())
            && (rest.is_empty() || rest.starts_with([':', '.']))
        {
            keys.push(key);
        }
    }
    drop(scan);
    if !keys.is_empty() {
        redis.del::<_, ()>(keys).await?;
    }
    result
}

async fn run(
    url: &str,
    redis: &mut redis::aio::MultiplexedConnection,
    queue: &str,
) -> anyhow::Result<()> {
    // The Python producer's side, done by hand: its exact bytes at the tail of the list.
    redis.rpush::<_, _, ()>(queue, PYTHON_BODY).await?;
    println!("pushed the Python SDK's {CREATED} job onto {queue}");

    let orders = BabelQueue::builder(url).queue(queue).connect().await?;
    let (seen, mut jobs) = mpsc::unbounded_channel();
    let report = orders
        .worker()
        .handle(CREATED, move |job: Job| {
            let seen = seen.clone();
            async move {
                let order: Order = job.data_as()?;
                println!(
                    "order {}: {} {} (trace {}, from {}, attempts={})",
                    order.order_id,
                    order.amount,
                    order.currency,
                    job.trace_id().unwrap_or_default(),
                    job.meta().and_then(|meta| meta.lang()).unwrap_or_default(),
                    job.attempts()
                );
                seen.send(Seen {
                    order_id: order.order_id,
                    trace_id: job.trace_id().map(str::to_owned),
                    producer: job.meta().and_then(|meta| meta.lang()).map(str::to_owned),
                    attempts: job.attempts(),
                })
                .ok();
                Ok::<_, babelqueue::Error>(())
            }
        })
        // One job; the idle timeout only bounds a run that goes wrong.
        .consume(1, Duration::from_secs(10))
        .await?;
    println!(
        "worker report: {} received, {} succeeded",
        report.received, report.succeeded
    );
    ensure!(report.succeeded == 1, "the job was not handled: {report:?}");

    let seen = jobs.try_recv().context("the handler never ran")?;
    ensure!(
        seen.order_id == 1042
            && seen.trace_id.as_deref() == Some("checkout-7f3a")
            && seen.producer.as_deref() == Some("python")
            && seen.attempts == 0,
        "the handler saw something else than the Python job: {seen:?}"
    );
    // Acknowledged: nothing left waiting, nothing left in flight.
    let waiting: u64 = redis.llen(queue).await?;
    let in_flight: u64 = redis.llen(format!("{queue}:processing")).await?;
    ensure!(
        waiting == 0 && in_flight == 0,
        "{waiting} job(s) waiting and {in_flight} in flight after the worker"
    );
    Ok(())
}
