//! `polyq bench babel`: BabelQueue jobs per second through `babelqueue` on any broker, with the
//! Python SDK and acemq measured in the same run for the ratios.
//!
//! Three timed phases on a fresh queue of unique name: publish N jobs (at most `--window`
//! publishes awaiting the broker), consume them with a worker (no-op handler), then publish N
//! more while a worker consumes them concurrently (end to end). The Python SDK has no concurrent
//! publisher, so it publishes N and then consumes N; its figure is compared with ours over the
//! same two phases (N over publish time plus consume time). `--compare-raw` measures lapin used
//! directly publishing the same bodies with the same properties to the same durable queue
//! (confirmed, no envelope logic), both awaiting each publish and queuing its writes as
//! polyq-amqp does. N over publish time plus consume time is below N over publish time alone, so
//! the faster of the two bounds what a lapin-based client that waits for confirms can reach over
//! both phases on this broker, and so the ratio over the Python SDK such a client could show.

use std::convert::Infallible;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use babelqueue::BabelQueue;
use babelqueue::idempotency::Idempotency;
use babelqueue::transport::redis::RedisOptions;
use babelqueue::transport::{AnyTransport, ConnectOptions, RedisLayout, Transport as _};
use bytes::Bytes;
use clap::{Args, ValueEnum};
use futures_util::{StreamExt, TryStreamExt};
use serde::Deserialize;

use super::phases::{Settings, Side};
use super::rate;
use super::through_polyq::Polyq;

/// The job every phase publishes.
const URN: &str = "urn:babel:orders:created";

/// How long a worker waits for a job before it decides the queue ran dry.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The Python side, next to this crate in the repository.
const PYTHON_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scripts/bench-python-sdk.py"
);

/// The reference payload.
fn payload() -> serde_json::Value {
    serde_json::json!({"order_id": 1042, "amount": 99.9, "currency": "EUR", "note": "café ☕"})
}

/// Arguments of `polyq bench babel`.
#[derive(Debug, Args)]
pub(crate) struct BabelArgs {
    /// Broker URL: `memory://`, `amqp://`, `amqps://`, `redis://` or `rediss://`.
    #[arg(long)]
    url: String,
    /// Jobs per phase.
    #[arg(long, default_value_t = 20_000)]
    messages: u32,
    /// Redis key layout.
    #[arg(long, value_enum, default_value_t = Layout::Default)]
    layout: Layout,
    /// Handlers running at once in the worker.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// AMQP prefetch, or messages one Redis reserve takes (default layout, at most 1,000).
    #[arg(long, default_value_t = 1000)]
    prefetch: u16,
    /// Publishes awaiting the broker at once.
    #[arg(long, default_value_t = 500)]
    window: usize,
    /// The Python interpreter with `babelqueue[redis,amqp]` installed (`scripts/python-peer`
    /// makes one at `.venv/bin/python`): runs the Python SDK on the same broker and payload.
    #[arg(long, env = "POLYQ_PYTHON")]
    python: Option<PathBuf>,
    /// Jobs of the Python SDK's run.
    #[arg(long, default_value_t = 2_000)]
    python_messages: u32,
    /// Also runs acemq's end-to-end phase (same body size, window and prefetch) in this run
    /// (`memory://`, `amqp://`, `amqps://`).
    #[arg(long)]
    compare_acemq: bool,
    /// Also runs raw lapin's publish phase on the same queue and bodies in this run, awaiting
    /// each publish and queuing its writes (`amqp://`, `amqps://`): the faster bounds a
    /// lapin-based confirming client's publish-then-consume rate.
    #[arg(long)]
    compare_raw: bool,
}

/// The Redis key layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Layout {
    /// `<queue>` and `<queue>:processing`.
    Default,
    /// Laravel's `queues:<queue>` and friends.
    Laravel,
}

/// What the Python script prints.
#[derive(Debug, Deserialize)]
struct PythonFigures {
    publish: f64,
    consume: f64,
    publish_then_consume: f64,
}

/// Runs `polyq bench babel`.
pub(super) async fn run(args: BabelArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.messages > 0, "--messages must be at least 1");
    anyhow::ensure!(args.window > 0, "--window must be at least 1");
    anyhow::ensure!(args.prefetch > 0, "--prefetch must be at least 1");
    anyhow::ensure!(
        args.python_messages > 0,
        "--python-messages must be at least 1"
    );
    let scheme = args
        .url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase())
        .unwrap_or_default();
    let redis = scheme.starts_with("redis");
    anyhow::ensure!(
        !(args.compare_acemq && redis),
        "--compare-acemq needs an AMQP broker (memory://, amqp://, amqps://)"
    );
    println!(
        "polyq bench babel: {} jobs, concurrency {}, prefetch {}, window {}{}, {}",
        args.messages,
        args.concurrency,
        args.prefetch,
        args.window,
        if redis {
            format!(", {:?} layout", args.layout).to_lowercase()
        } else {
            String::new()
        },
        polyq_amqp::redact_url(&args.url)
    );

    anyhow::ensure!(
        !args.compare_raw || scheme.starts_with("amqp"),
        "--compare-raw needs a RabbitMQ broker (amqp://, amqps://)"
    );
    let queue = BabelQueue::builder(&args.url)
        .queue(unique_queue())
        .options(connect_options(&args))
        .connect()
        .await?;
    let figures = measure(&queue, &args).await;
    let raw = match (&figures, args.compare_raw) {
        (Ok(_), true) => Some(raw_publish(&queue, &args).await),
        _ => None,
    };
    remove(&queue).await?;
    let figures = figures?;
    let raw = raw.transpose()?;
    let sequential = sequential_rate(args.messages, figures.publish, figures.consume);
    println!("publish: {:.0} jobs/s", figures.publish);
    println!("consume: {:.0} jobs/s", figures.consume);
    println!("publish then consume: {sequential:.0} jobs/s");
    println!("end-to-end: {:.0} jobs/s", figures.end_to_end);
    let raw = raw.map(|[awaited, queued]| {
        println!(
            "raw lapin publish: {awaited:.0} msg/s awaiting each publish, {queued:.0} msg/s \
             queuing its writes (the faster bounds a lapin-based confirming client's publish \
             then consume)"
        );
        println!(
            "publish ratio vs raw lapin: {:.3}, vs raw lapin queuing its writes: {:.3}",
            figures.publish / awaited,
            figures.publish / queued
        );
        awaited.max(queued)
    });

    if let Some(python) = &args.python {
        let python_queue = queue.on_queue(unique_queue());
        let figures = run_python(python, &python_queue, &args).await;
        remove(&python_queue).await?;
        let figures = figures?;
        println!(
            "python SDK ({} jobs): publish {:.0} jobs/s, consume {:.0} jobs/s, publish then consume {:.0} jobs/s",
            args.python_messages, figures.publish, figures.consume, figures.publish_then_consume
        );
        println!(
            "ratio vs python SDK: {:.1}",
            sequential / figures.publish_then_consume
        );
        if let Some(raw) = raw {
            println!(
                "ceiling (raw lapin publish) vs python SDK: {:.1}",
                raw / figures.publish_then_consume
            );
        }
    }
    if args.compare_acemq {
        let body = queue_body(&queue)?;
        let acemq_rate = acemq_end_to_end(&args, body).await?;
        println!("acemq end-to-end: {acemq_rate:.0} msg/s");
        println!("ratio vs acemq: {:.3}", figures.end_to_end / acemq_rate);
    }
    Ok(())
}

/// N over the time of publishing N and then consuming N, from the two phases' rates.
fn sequential_rate(messages: u32, publish: f64, consume: f64) -> f64 {
    let messages = f64::from(messages);
    messages / (messages / publish + messages / consume)
}

/// Raw lapin publishing `--messages` reference bodies with the binding's properties (confirmed,
/// mandatory, window `--window`) to `queue`'s own durable queue, which is deleted afterwards,
/// awaiting each publish and then queuing its writes, each into the emptied queue: messages per
/// second of each.
async fn raw_publish(queue: &BabelQueue, args: &BabelArgs) -> anyhow::Result<[f64; 2]> {
    let settings = one_phase(
        args,
        queue_body(queue)?,
        lapin::BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into()),
    );
    let mut rates = [0.0; 2];
    for (rate_of, side) in rates.iter_mut().zip([Side::Raw, Side::RawQueued]) {
        let raw = super::raw::Raw::connect(&args.url).await?;
        let published = raw
            .publish(side, queue.queue(), args.messages, &settings)
            .await;
        raw.close().await?;
        *rate_of = rate(args.messages, published?);
        // Each side starts from the empty queue the other found.
        if let AnyTransport::Amqp(amqp) = queue.transport().as_ref() {
            amqp.client().purge_queue(queue.queue()).await?;
        }
    }
    Ok(rates)
}

/// The rates of the three phases, jobs per second.
struct Figures {
    publish: f64,
    consume: f64,
    end_to_end: f64,
}

async fn measure(queue: &BabelQueue, args: &BabelArgs) -> anyhow::Result<Figures> {
    let started = Instant::now();
    publish(queue, args.messages, args.window).await?;
    let publish_rate = rate(args.messages, started.elapsed());

    let started = Instant::now();
    consume(queue, args.messages, args.concurrency, None).await?;
    let consume_rate = rate(args.messages, started.elapsed());

    let started = Instant::now();
    futures_util::future::try_join(
        publish(queue, args.messages, args.window),
        consume(queue, args.messages, args.concurrency, None),
    )
    .await?;
    Ok(Figures {
        publish: publish_rate,
        consume: consume_rate,
        end_to_end: rate(args.messages, started.elapsed()),
    })
}

fn connect_options(args: &BabelArgs) -> ConnectOptions {
    ConnectOptions::default()
        .prefetch(args.prefetch)
        .redis_layout(match args.layout {
            Layout::Default => RedisLayout::Default,
            Layout::Laravel => RedisLayout::Laravel,
        })
        .redis(RedisOptions::new().prefetch(usize::from(args.prefetch)))
}

/// Publishes `count` jobs of the reference payload, `window` at a time.
pub(super) async fn publish(queue: &BabelQueue, count: u32, window: usize) -> anyhow::Result<()> {
    let data = payload();
    futures_util::stream::iter(0..count)
        .map(|_| queue.publish(URN, &data))
        .buffer_unordered(window)
        .try_for_each(|_| std::future::ready(Ok(())))
        .await?;
    Ok(())
}

/// Handles `count` jobs with a no-op handler, under `idempotency` when given.
pub(super) async fn consume(
    queue: &BabelQueue,
    count: u32,
    concurrency: usize,
    idempotency: Option<Idempotency>,
) -> anyhow::Result<()> {
    let mut worker = queue.worker().concurrency(concurrency);
    if let Some(idempotency) = idempotency {
        worker = worker.idempotent(idempotency);
    }
    let report = worker
        .handle(URN, |_job| async { Ok::<_, Infallible>(()) })
        .consume(u64::from(count), IDLE_TIMEOUT)
        .await?;
    anyhow::ensure!(
        report.succeeded == u64::from(count),
        "the worker handled {} of {count} jobs: {report:?}",
        report.succeeded
    );
    Ok(())
}

/// The Python SDK publishing and then consuming `--python-messages` jobs on `queue`.
async fn run_python(
    python: &PathBuf,
    queue: &BabelQueue,
    args: &BabelArgs,
) -> anyhow::Result<PythonFigures> {
    let mut command = tokio::process::Command::new(python);
    command
        .arg(PYTHON_SCRIPT)
        .args(["--url", &args.url, "--queue", queue.queue()])
        .args(["--messages", &args.python_messages.to_string()]);
    if args.layout == Layout::Laravel && args.url.to_ascii_lowercase().starts_with("redis") {
        command.arg("--laravel");
    }
    let output = command
        .output()
        .await
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", python.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "the Python SDK benchmark failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .map_err(|e| anyhow::anyhow!("the Python SDK benchmark printed {line:?}: {e}"))
}

/// Settings for one phase of `--messages` bodies like `body`, with the run's window and prefetch.
fn one_phase(args: &BabelArgs, body: Bytes, raw_properties: lapin::BasicProperties) -> Settings {
    Settings {
        messages: args.messages,
        body,
        window: args.window,
        prefetch: args.prefetch,
        slice: args.messages,
        raw_properties,
    }
}

/// The body of one reference job, for acemq to move bodies of the same size.
fn queue_body(queue: &BabelQueue) -> anyhow::Result<Bytes> {
    let envelope = babelqueue::make(
        URN,
        &payload(),
        babelqueue::MakeOptions::new().queue(queue.queue()),
    )?;
    Ok(Bytes::from(envelope.encode()?))
}

/// acemq's end-to-end rate on the same broker: bodies of `body`'s size, the same window and
/// prefetch, one phase of `--messages`.
async fn acemq_end_to_end(args: &BabelArgs, body: Bytes) -> anyhow::Result<f64> {
    let settings = one_phase(args, body, lapin::BasicProperties::default());
    let admin = Polyq::connect(&args.url).await?;
    let queue = admin.declare_queue().await?;
    let mq = super::acemq::connect(&args.url, settings.window).await;
    let elapsed = match mq {
        Ok(mq) => {
            let elapsed = super::acemq::end_to_end(&mq, &queue, args.messages, &settings).await;
            mq.close().await?;
            elapsed
        }
        Err(error) => Err(error),
    };
    admin.delete_queue(&queue).await?;
    admin.close().await?;
    Ok(rate(args.messages, elapsed?))
}

/// Deletes what the queue's binding keeps for `queue`: the queue and its dead-letter queue.
pub(super) async fn remove(queue: &BabelQueue) -> anyhow::Result<()> {
    let name = queue.queue();
    match queue.transport().as_ref() {
        AnyTransport::Amqp(amqp) => {
            for queue in [name.to_owned(), amqp.dead_letter_queue(name)] {
                amqp.client().delete_queue(&queue).await?;
            }
        }
        AnyTransport::Redis(redis) => {
            redis.delete_queue(name).await?;
        }
        AnyTransport::Laravel(laravel) => {
            laravel.delete_queue(name).await?;
        }
        other => anyhow::bail!("cannot clean up after an unknown binding: {other:?}"),
    }
    Ok(())
}

/// A queue name no other run uses.
pub(super) fn unique_queue() -> String {
    format!("polyq.bench.babel.{}", uuid::Uuid::new_v4().simple())
}
