//! The side-by-side comparison of raw lapin and polyq-amqp.
//!
//! Each side gets a fresh non-durable queue. The publish phase and then the consume + ack phase
//! alternate between the sides in slices (`--slice` messages): raw, polyq, polyq, raw, raw,
//! polyq, ... so that drift and other load on the machine, which on a shared 2-core box changes
//! from one second to the next, hits every side alike. The publish phase has a third side, raw
//! lapin queuing its writes as polyq-amqp does ([`Side::RawQueued`]), so that the figures show
//! how much of polyq's lead is that technique. A side's figure is the median of its
//! slice rates (the rate over the whole phase is printed too). Each slice starts from an idle
//! pipeline (publish: no confirm outstanding; consume: a new consumer), which costs both sides
//! the same. Every slice runs on a fresh connection (see [`run_slice`]).

use std::time::Duration;

use bytes::Bytes;

use super::{rate, raw, through_polyq};

/// What every phase does.
pub(super) struct Settings {
    pub(super) messages: u32,
    pub(super) body: Bytes,
    pub(super) window: usize,
    pub(super) prefetch: u16,
    pub(super) slice: u32,
    /// Properties of every raw lapin publish: empty for `bench amqp`; for `bench acemq` the
    /// envelope headers a hand-written AceMQ-compatible publisher sends, so both sides put the
    /// same bytes on the wire.
    pub(super) raw_properties: lapin::BasicProperties,
}

/// Who works in a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    /// lapin as its documentation shows it: each `basic_publish` awaited (lapin's io loop has
    /// written the frames), then its confirm.
    Raw = 0,
    /// lapin with each `basic_publish` polled once, which queues the frames, and awaited later
    /// together with its confirm, as polyq-amqp publishes. Only where the raw side publishes
    /// (not `bench amqp`'s consume phase).
    RawQueued = 1,
    /// The library being measured.
    Library = 2,
}

/// The sides of a publish phase and of a consuming phase.
pub(super) const PUBLISH_SIDES: [Side; 3] = [Side::Raw, Side::RawQueued, Side::Library];
pub(super) const CONSUME_SIDES: [Side; 2] = [Side::Raw, Side::Library];

/// `sides` in the order they take slice `index`: as given, then reversed (ABBA), so that no
/// side is always first.
pub(super) fn in_turn(sides: &[Side], index: usize) -> Vec<Side> {
    let mut order = sides.to_vec();
    if !index.is_multiple_of(2) {
        order.reverse();
    }
    order
}

/// The publish-phase clause comparing with [`Side::RawQueued`].
pub(super) fn queued_clause(raw_queued: &Measure, library_rate: f64, messages: u32) -> String {
    let rate = raw_queued.median_rate();
    let cpu = raw_queued
        .cpu_per_message(messages)
        .map(|cpu| format!(", client CPU per message {cpu:.1} µs"))
        .unwrap_or_default();
    format!(
        "; raw lapin queuing its writes {rate:.0} msg/s{cpu}, ratio {:.3}",
        library_rate / rate
    )
}

/// Measures both phases and prints each side's rate and `ratio: R`, the lower of the publish and
/// consume polyq/raw ratios.
pub(super) async fn compare(url: &str, settings: &Settings) -> anyhow::Result<()> {
    // The queues are declared and deleted through a polyq client, which outlives a broker-side
    // close of every connection, so they are removed even when a phase fails.
    let admin = through_polyq::Polyq::connect(url).await?;
    let mut queues = Vec::new();
    for _ in PUBLISH_SIDES {
        queues.push(admin.declare_queue().await?);
    }
    let measured = measure(url, settings, &queues).await;
    for queue in &queues {
        admin.delete_queue(queue).await?;
    }
    admin.close().await?;
    let [publish, consume] = measured?;

    let mut ratios = Vec::new();
    for (name, [raw_side, raw_queued, polyq_side]) in
        [("confirmed publish", publish), ("consume + ack", consume)]
    {
        let raw_rate = raw_side.median_rate();
        let polyq_rate = polyq_side.median_rate();
        let ratio = polyq_rate / raw_rate;
        let overall = format!(
            " (over the whole phase raw {:.0}, polyq {:.0} msg/s)",
            rate(settings.messages, raw_side.elapsed()),
            rate(settings.messages, polyq_side.elapsed())
        );
        let cpu = match (
            raw_side.cpu_per_message(settings.messages),
            polyq_side.cpu_per_message(settings.messages),
        ) {
            (Some(raw_cpu), Some(polyq_cpu)) => {
                format!("; client CPU per message raw {raw_cpu:.1} µs, polyq {polyq_cpu:.1} µs")
            }
            _ => String::new(),
        };
        let queued = if raw_queued.is_empty() {
            String::new()
        } else {
            queued_clause(&raw_queued, polyq_rate, settings.messages)
        };
        println!(
            "{name}: median slice raw lapin {raw_rate:.0} msg/s, polyq-amqp {polyq_rate:.0} msg/s, \
             ratio {ratio:.3}{overall}{cpu}{queued}"
        );
        ratios.push(ratio);
    }
    println!(
        "ratio: {:.3}",
        ratios.iter().copied().fold(f64::INFINITY, f64::min)
    );
    Ok(())
}

/// Message counts of the slices: `slice` each, the last one what remains.
pub(super) fn slices(settings: &Settings) -> impl Iterator<Item = u32> + '_ {
    let full = settings.messages / settings.slice;
    let rest = settings.messages % settings.slice;
    (0..full)
        .map(|_| settings.slice)
        .chain((rest > 0).then_some(rest))
}

/// Both phases, every side: `[publish, consume]`, each indexed by [`Side`]. Each side consumes
/// from the queue it published to.
async fn measure(
    url: &str,
    settings: &Settings,
    queues: &[String],
) -> anyhow::Result<[[Measure; 3]; 2]> {
    let mut measures: [[Measure; 3]; 2] = Default::default();
    for (phase, sides) in [
        (Phase::Publish, &PUBLISH_SIDES[..]),
        (Phase::Consume, &CONSUME_SIDES[..]),
    ] {
        for (index, count) in slices(settings).enumerate() {
            for side in in_turn(sides, index) {
                let queue = &queues[side as usize];
                let (elapsed, cpu) = run_slice(url, side, phase, queue, count, settings).await?;
                measures[phase as usize][side as usize].add(count, elapsed, cpu);
            }
        }
    }
    Ok(measures)
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Publish = 0,
    Consume = 1,
}

/// One slice of one side on a connection of its own, opened before and closed after the timed
/// part. lapin's I/O loop can settle into a slower rhythm on one connection for its whole life
/// (one write per frame rather than batched writes) depending on scheduling; a connection per
/// slice keeps that from favouring one side for a whole run. Returns the slice's wall time and
/// the process CPU time it used.
async fn run_slice(
    url: &str,
    side: Side,
    phase: Phase,
    queue: &str,
    count: u32,
    settings: &Settings,
) -> anyhow::Result<(Duration, Option<Duration>)> {
    if side != Side::Library {
        let raw = raw::Raw::connect(url).await?;
        let before = process_cpu();
        let elapsed = match phase {
            Phase::Publish => raw.publish(side, queue, count, settings).await?,
            Phase::Consume => raw.consume(queue, count, settings).await?,
        };
        let cpu = cpu_since(before);
        raw.close().await?;
        Ok((elapsed, cpu))
    } else {
        let polyq = through_polyq::Polyq::connect(url).await?;
        let before = process_cpu();
        let elapsed = match phase {
            Phase::Publish => polyq.publish(queue, count, settings).await?,
            Phase::Consume => polyq.consume(queue, count, settings).await?,
        };
        let cpu = cpu_since(before);
        polyq.close().await?;
        Ok((elapsed, cpu))
    }
}

/// The slices of one side in one phase.
#[derive(Debug, Default)]
pub(super) struct Measure {
    /// Rate of each slice, msg/s.
    rates: Vec<f64>,
    elapsed: Duration,
    cpu: Option<Duration>,
}

impl Measure {
    /// Adds a slice of `count` messages that took `elapsed` and `cpu`.
    pub(super) fn add(&mut self, count: u32, elapsed: Duration, cpu: Option<Duration>) {
        self.rates.push(rate(count, elapsed));
        self.elapsed += elapsed;
        self.cpu = match (self.cpu.or(Some(Duration::ZERO)), cpu) {
            (Some(total), Some(cpu)) => Some(total + cpu),
            _ => None,
        };
    }

    fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// Whether no slice was measured (a side the phase does not have).
    pub(super) fn is_empty(&self) -> bool {
        self.rates.is_empty()
    }

    /// The median slice rate. Other load on the machine stalls random slices for far longer than
    /// the difference being measured; the median ignores those stalls where a mean or total
    /// would not.
    pub(super) fn median_rate(&self) -> f64 {
        let mut rates = self.rates.clone();
        rates.sort_by(f64::total_cmp);
        match rates.len() {
            0 => 0.0,
            n if n % 2 == 1 => rates[n / 2],
            n => (rates[n / 2 - 1] + rates[n / 2]) / 2.0,
        }
    }

    pub(super) fn cpu_per_message(&self, messages: u32) -> Option<f64> {
        self.cpu
            .map(|cpu| cpu.as_secs_f64() * 1e6 / f64::from(messages))
    }
}

pub(super) fn cpu_since(before: Option<Duration>) -> Option<Duration> {
    Some(process_cpu()?.saturating_sub(before?))
}

/// User + system CPU time of this process so far, from `/proc/self/stat` (Linux; `None`
/// elsewhere). Only the side being measured is busy during a slice, so the difference over a
/// slice is that side's client cost, including lapin's I/O thread. Clock ticks are taken as the
/// usual 100 per second.
pub(super) fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th fields
    // of the line, the 12th and 13th after the name.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}
