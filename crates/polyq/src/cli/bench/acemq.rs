//! `polyq bench acemq`: the acemq publisher and consumer beside raw lapin doing the same work,
//! in alternating slices of one run, and acemq's publish-to-handler latency at a steady rate.
//!
//! Both phases alternate between the sides slice by slice in ABBA order, each slice on a
//! connection of its own, as `polyq bench amqp` does and for the same reasons. Both have a third
//! side, raw lapin queuing its writes as polyq-amqp does, reported beside the ratio. The
//! publish phase is confirmed publishing with a window of confirms outstanding; the end-to-end
//! phase publishes the same way while a consumer with the prefetch applied takes and
//! acknowledges every message (acemq: a no-op handler). A side's figure is the median of its
//! slice rates.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acemq::codec::Raw as RawCodec;
use acemq::{AceMq, Message};
use bytes::Bytes;
use clap::Args;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::Notify;

use super::phases::{
    Measure, PUBLISH_SIDES, Settings, Side, cpu_since, in_turn, process_cpu, queued_clause, slices,
};
use super::raw::Raw;
use super::through_polyq::Polyq;

/// How long an end-to-end slice may wait for its last message before the run fails.
const SLICE_DEADLINE: Duration = Duration::from_secs(120);

/// Arguments of `polyq bench acemq`.
#[derive(Debug, Args)]
pub(crate) struct AcemqArgs {
    /// Broker URL: `amqp://`, `amqps://` or `memory://` (acemq figures only).
    #[arg(long, env = "POLYQ_AMQP_URL")]
    url: String,
    /// Messages per side and phase.
    #[arg(long, default_value_t = 100_000)]
    messages: u32,
    /// Body size in bytes (at least 8: the latency phase carries the send time in the body).
    #[arg(long, default_value_t = 366)]
    size: usize,
    /// Publishes awaiting their confirm at most.
    #[arg(long, default_value_t = 500)]
    window: usize,
    /// Consumer prefetch.
    #[arg(long, default_value_t = 1000)]
    prefetch: u16,
    /// Messages per slice: raw and acemq take turns every this many messages.
    #[arg(long, default_value_t = 2_000)]
    slice: u32,
    /// Publish rate of the latency phase, messages per second.
    #[arg(long, default_value_t = 5_000)]
    latency_rate: u32,
    /// Messages of the latency phase.
    #[arg(long, default_value_t = 10_000)]
    latency_messages: u32,
}

/// Runs `polyq bench acemq`.
pub(super) async fn run(args: AcemqArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.messages > 0, "--messages must be at least 1");
    anyhow::ensure!(args.window > 0, "--window must be at least 1");
    anyhow::ensure!(args.prefetch > 0, "--prefetch must be at least 1");
    anyhow::ensure!(args.slice > 0, "--slice must be at least 1");
    anyhow::ensure!(args.latency_rate > 0, "--latency-rate must be at least 1");
    anyhow::ensure!(
        args.latency_messages > 0,
        "--latency-messages must be at least 1"
    );
    anyhow::ensure!(
        args.size >= 8,
        "--size must be at least 8 bytes (the send time rides in the body)"
    );
    let settings = Settings {
        messages: args.messages,
        body: Bytes::from(vec![b'x'; args.size]),
        window: args.window,
        prefetch: args.prefetch,
        slice: args.slice,
        raw_properties: envelope_properties(),
    };
    let with_raw = !args.url.to_ascii_lowercase().starts_with("memory://");
    println!(
        "polyq bench acemq: {} messages of {} bytes, window {}, prefetch {}, slices of {}, {}",
        args.messages,
        args.size,
        args.window,
        args.prefetch,
        args.slice,
        polyq_amqp::redact_url(&args.url)
    );

    let admin = Polyq::connect(&args.url).await?;
    let mut queues = Vec::new();
    for _ in 0..2 * PUBLISH_SIDES.len() + 1 {
        queues.push(admin.declare_queue().await?);
    }
    let measured = measure(&args, &settings, with_raw, &queues).await;
    for queue in &queues {
        admin.delete_queue(queue).await?;
    }
    admin.close().await?;
    let Measured {
        phases: [publish, end_to_end],
        latency,
    } = measured?;

    let mut ratios = Vec::new();
    for (name, [raw_side, raw_queued, acemq_side]) in
        [("confirmed publish", publish), ("end to end", end_to_end)]
    {
        let acemq_rate = acemq_side.median_rate();
        if with_raw {
            let raw_rate = raw_side.median_rate();
            let ratio = acemq_rate / raw_rate;
            let cpu = match (
                raw_side.cpu_per_message(args.messages),
                acemq_side.cpu_per_message(args.messages),
            ) {
                (Some(raw), Some(acemq)) => {
                    format!("; client CPU per message raw {raw:.1} µs, acemq {acemq:.1} µs")
                }
                _ => String::new(),
            };
            let queued = queued_clause(&raw_queued, acemq_rate, args.messages);
            println!(
                "{name}: median slice raw lapin {raw_rate:.0} msg/s, acemq {acemq_rate:.0} msg/s, ratio {ratio:.3}{cpu}{queued}"
            );
            ratios.push(ratio);
        } else {
            println!("{name}: acemq {acemq_rate:.0} msg/s");
        }
    }
    println!(
        "acemq publish-to-handler latency at {} msg/s over {} messages: p50 {:.2} ms, p99 {:.2} ms",
        args.latency_rate,
        args.latency_messages,
        latency.p50.as_secs_f64() * 1e3,
        latency.p99.as_secs_f64() * 1e3
    );
    if with_raw {
        println!(
            "ratio: {:.3}",
            ratios.iter().copied().fold(f64::INFINITY, f64::min)
        );
    }
    Ok(())
}

/// Runs both phases and the latency phase, each side's process CPU counted over its timed part
/// only. `queues`: one per side of the publish phase, one per side of the end-to-end phase (in
/// [`PUBLISH_SIDES`] order), then the latency phase's.
async fn measure(
    args: &AcemqArgs,
    settings: &Settings,
    with_raw: bool,
    queues: &[String],
) -> anyhow::Result<Measured> {
    let mut phases: [[Measure; 3]; 2] = Default::default();
    let sides: &[Side] = if with_raw {
        &PUBLISH_SIDES
    } else {
        &[Side::Library]
    };
    for (phase, phase_queues) in queues.chunks(PUBLISH_SIDES.len()).take(2).enumerate() {
        for (index, count) in slices(settings).enumerate() {
            for side in in_turn(sides, index) {
                let queue = &phase_queues[side as usize];
                let (elapsed, cpu) = match (side, phase) {
                    (Side::Library, 0) => {
                        let mq = connect(&args.url, settings.window).await?;
                        let before = process_cpu();
                        let elapsed = publish(&mq, queue, count, settings).await?;
                        let cpu = cpu_since(before);
                        mq.close().await?;
                        (elapsed, cpu)
                    }
                    (Side::Library, _) => {
                        let mq = connect(&args.url, settings.window).await?;
                        let before = process_cpu();
                        let elapsed = end_to_end(&mq, queue, count, settings).await?;
                        let cpu = cpu_since(before);
                        mq.close().await?;
                        (elapsed, cpu)
                    }
                    (raw_side, 0) => {
                        let raw = Raw::connect(&args.url).await?;
                        let before = process_cpu();
                        let elapsed = raw.publish(raw_side, queue, count, settings).await?;
                        let cpu = cpu_since(before);
                        raw.close().await?;
                        (elapsed, cpu)
                    }
                    (raw_side, _) => {
                        raw_end_to_end(&args.url, raw_side, queue, count, settings).await?
                    }
                };
                phases[phase][side as usize].add(count, elapsed, cpu);
            }
        }
    }
    let latency = latency(
        &args.url,
        &queues[2 * PUBLISH_SIDES.len()],
        settings,
        args.latency_rate,
        args.latency_messages,
    )
    .await?;
    Ok(Measured { phases, latency })
}

/// What [`measure`] found: the slices of the two phases (`[publish, end to end]`, each indexed
/// by [`Side`]), and the latency figures.
struct Measured {
    phases: [[Measure; 3]; 2],
    latency: Latency,
}

/// What a hand-written AceMQ-compatible publisher sends with each message: an envelope's headers
/// and `message-id`, transient. Built once, so the raw side pays nothing for building envelopes.
fn envelope_properties() -> lapin::BasicProperties {
    use lapin::types::{AMQPValue, FieldTable, LongString};

    let envelope = acemq::Envelope::of("bench.message")
        .origin(acemq::provenance::origin("polyq-bench-raw"))
        .build()
        .expect("a typed envelope with defaults is valid");
    let mut properties = polyq_amqp::Properties::default();
    envelope.write_properties(&mut properties);
    let mut headers = FieldTable::default();
    for (name, value) in &properties.headers {
        let value = match value {
            polyq_amqp::FieldValue::I32(v) => AMQPValue::LongInt(*v),
            polyq_amqp::FieldValue::I64(v) => AMQPValue::LongLongInt(*v),
            polyq_amqp::FieldValue::LongString(v) => {
                AMQPValue::LongString(LongString::from(v.clone()))
            }
            other => unreachable!("the envelope writes only strings and integers, not {other:?}"),
        };
        headers.insert(name.as_str().into(), value);
    }
    let mut raw = lapin::BasicProperties::default()
        .with_headers(headers)
        .with_content_type(acemq::codec::BYTES_CONTENT_TYPE.into())
        .with_delivery_mode(1);
    if let Some(id) = properties.message_id {
        raw = raw.with_message_id(id.into());
    }
    raw
}

/// An acemq connection allowing `window` confirms outstanding.
pub(super) async fn connect(url: &str, window: usize) -> anyhow::Result<AceMq> {
    Ok(AceMq::builder()
        .url(url)
        .client_name("polyq-bench-acemq")
        .max_outstanding_confirms(window)
        .connect()
        .await?)
}

/// Raw lapin publishing into `queue` while a consumer on the same connection acks every
/// message; the wall time runs until both are done, and the process CPU over the same span.
async fn raw_end_to_end(
    url: &str,
    side: Side,
    queue: &str,
    count: u32,
    settings: &Settings,
) -> anyhow::Result<(Duration, Option<Duration>)> {
    let raw = Raw::connect(url).await?;
    let before = process_cpu();
    let started = Instant::now();
    let both = tokio::time::timeout(
        SLICE_DEADLINE,
        futures_util::future::try_join(
            raw.publish(side, queue, count, settings),
            raw.consume(queue, count, settings),
        ),
    )
    .await;
    let elapsed = started.elapsed();
    let cpu = cpu_since(before);
    raw.close().await?;
    both.map_err(|_| anyhow::anyhow!("raw end-to-end slice took over {SLICE_DEADLINE:?}"))??;
    Ok((elapsed, cpu))
}

/// Publishes `count` transient mandatory messages through an acemq publisher with `window`
/// confirms outstanding, until the last confirm.
async fn publish(
    mq: &AceMq,
    queue: &str,
    count: u32,
    settings: &Settings,
) -> anyhow::Result<Duration> {
    let publisher = mq
        .publisher_with::<[u8], _>("", queue, RawCodec)
        .transient();
    let mut in_flight = FuturesUnordered::new();
    let started = Instant::now();
    for _ in 0..count {
        if in_flight.len() >= settings.window
            && let Some(confirm) = in_flight.next().await
        {
            confirm?;
        }
        in_flight.push(publisher.send_async(&settings.body[..]).await?);
    }
    while let Some(confirm) = in_flight.next().await {
        confirm?;
    }
    Ok(started.elapsed())
}

/// Publishes `count` messages into `queue` while an acemq consumer with a no-op handler takes
/// them; the time runs from starting the consumer to the last handler call.
pub(super) async fn end_to_end(
    mq: &AceMq,
    queue: &str,
    count: u32,
    settings: &Settings,
) -> anyhow::Result<Duration> {
    let countdown = Countdown::new(count);
    let started = Instant::now();
    let consumer = mq
        .consumer_with::<Bytes>(queue, RawCodec)
        .prefetch(settings.prefetch)
        .declare(false)
        .start(countdown.handler())
        .await?;
    publish(mq, queue, count, settings).await?;
    let finished = countdown.finished(SLICE_DEADLINE).await;
    let elapsed = started.elapsed();
    let report = consumer.drain(Duration::from_secs(10)).await;
    finished.map_err(|handled| {
        anyhow::anyhow!(
            "acemq end-to-end slice handled {handled} of {count} messages in {SLICE_DEADLINE:?}"
        )
    })?;
    anyhow::ensure!(report.is_clean(), "acemq consumer drain: {report:?}");
    Ok(elapsed)
}

/// A handler that does nothing but count its calls, and wakes whoever waits at the `count`th.
pub(super) struct Countdown {
    handled: Arc<AtomicU32>,
    done: Arc<Notify>,
    count: u32,
}

impl Countdown {
    pub(super) fn new(count: u32) -> Self {
        Self {
            handled: Arc::new(AtomicU32::new(0)),
            done: Arc::new(Notify::new()),
            count,
        }
    }

    /// The counting handler, for `ConsumerBuilder::start`.
    pub(super) fn handler(
        &self,
    ) -> impl Fn(Message<Bytes>) -> std::future::Ready<()> + Send + Sync + 'static {
        let handled = Arc::clone(&self.handled);
        let done = Arc::clone(&self.done);
        let count = self.count;
        move |_: Message<Bytes>| {
            if handled.fetch_add(1, Ordering::Relaxed) + 1 == count {
                done.notify_one();
            }
            std::future::ready(())
        }
    }

    /// Waits for the last call for at most `deadline`; on time-out, how many calls came.
    pub(super) async fn finished(&self, deadline: Duration) -> Result<(), u32> {
        tokio::time::timeout(deadline, self.done.notified())
            .await
            .map_err(|_| self.handled.load(Ordering::Relaxed))
    }
}

/// Percentiles of the publish-to-handler latency.
struct Latency {
    p50: Duration,
    p99: Duration,
}

/// Publishes `count` messages at `per_second` (each carrying its send time, nanoseconds since
/// a common start, in its first 8 bytes) while an acemq consumer records, in its handler, how
/// long each took to arrive.
async fn latency(
    url: &str,
    queue: &str,
    settings: &Settings,
    per_second: u32,
    count: u32,
) -> anyhow::Result<Latency> {
    let mq = connect(url, settings.window).await?;
    let base = Instant::now();
    let samples = Arc::new(Mutex::new(Vec::with_capacity(count as usize)));
    let done = Arc::new(Notify::new());
    let consumer = mq
        .consumer_with::<Bytes>(queue, RawCodec)
        .prefetch(settings.prefetch)
        .declare(false)
        .start({
            let samples = Arc::clone(&samples);
            let done = Arc::clone(&done);
            move |message: Message<Bytes>| {
                let now = nanos_since(base);
                let sent = message
                    .payload()
                    .get(..8)
                    .and_then(|stamp| stamp.try_into().ok())
                    .map(u64::from_le_bytes);
                if let Ok(mut samples) = samples.lock() {
                    samples.push(sent.map(|sent| now.saturating_sub(sent)));
                    if samples.len() == count as usize {
                        done.notify_one();
                    }
                }
                std::future::ready(())
            }
        })
        .await?;

    let publisher = mq
        .publisher_with::<[u8], _>("", queue, RawCodec)
        .transient();
    let (confirms_tx, mut confirms_rx) = tokio::sync::mpsc::unbounded_channel();
    let confirms = tokio::spawn(async move {
        while let Some(confirm) = confirms_rx.recv().await {
            let confirm: acemq::PendingConfirm = confirm;
            confirm.await?;
        }
        Ok::<_, acemq::RuntimeError>(())
    });
    let mut body = settings.body.to_vec();
    let start = tokio::time::Instant::now();
    for index in 0..count {
        let due = start + Duration::from_secs_f64(f64::from(index) / f64::from(per_second));
        tokio::time::sleep_until(due).await;
        body[..8].copy_from_slice(&nanos_since(base).to_le_bytes());
        // The receiver lives until this sender is dropped below.
        let _ = confirms_tx.send(publisher.send_async(&body[..]).await?);
    }
    drop(confirms_tx);
    confirms.await??;
    let finished = tokio::time::timeout(SLICE_DEADLINE, done.notified()).await;
    let report = consumer.drain(Duration::from_secs(10)).await;
    mq.close().await?;
    finished.map_err(|_| anyhow::anyhow!("the latency phase lost messages"))?;
    anyhow::ensure!(report.is_clean(), "acemq consumer drain: {report:?}");

    let samples = std::mem::take(&mut *samples.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
    let mut latencies = samples
        .into_iter()
        .map(|sample| sample.ok_or_else(|| anyhow::anyhow!("a body lost its send time")))
        .collect::<anyhow::Result<Vec<u64>>>()?;
    latencies.sort_unstable();
    let at = |quantile: f64| {
        let index = ((quantile * latencies.len() as f64).ceil() as usize).saturating_sub(1);
        Duration::from_nanos(latencies.get(index).copied().unwrap_or_default())
    };
    Ok(Latency {
        p50: at(0.50),
        p99: at(0.99),
    })
}

fn nanos_since(base: Instant) -> u64 {
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
