//! The side-by-side comparison of raw lapin and polyq-amqp.
//!
//! Each side gets a fresh non-durable queue. The publish phase and then the consume + ack phase
//! alternate between the sides in slices (`--slice` messages): raw, polyq, polyq, raw, raw,
//! polyq, ... so that drift and other load on the machine, which on a shared 2-core box changes
//! from one second to the next, hits both sides alike. A side's figure is the median of its
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

/// Measures both phases and prints each side's rate and `ratio: R`, the lower of the publish and
/// consume polyq/raw ratios.
pub(super) async fn compare(url: &str, settings: &Settings) -> anyhow::Result<()> {
    // The queues are declared and deleted through a polyq client, which outlives a broker-side
    // close of every connection, so they are removed even when a phase fails.
    let admin = through_polyq::Polyq::connect(url).await?;
    let queues = [admin.declare_queue().await?, admin.declare_queue().await?];
    let measured = measure(url, settings, &queues).await;
    for queue in &queues {
        admin.delete_queue(queue).await?;
    }
    admin.close().await?;
    let [publish, consume] = measured?;

    let mut ratios = Vec::new();
    for (name, [raw_side, polyq_side]) in
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
        println!(
            "{name}: median slice raw lapin {raw_rate:.0} msg/s, polyq-amqp {polyq_rate:.0} msg/s, \
             ratio {ratio:.3}{overall}{cpu}"
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

/// Both phases, both sides: `[publish, consume]`, each `[raw, polyq]`.
async fn measure(
    url: &str,
    settings: &Settings,
    queues: &[String; 2],
) -> anyhow::Result<[[Measure; 2]; 2]> {
    let mut measures: [[Measure; 2]; 2] = Default::default();
    for phase in [Phase::Publish, Phase::Consume] {
        for (index, count) in slices(settings).enumerate() {
            for side in order(index) {
                let (elapsed, cpu) =
                    run_slice(url, side, phase, &queues[side], count, settings).await?;
                measures[phase as usize][side].add(count, elapsed, cpu);
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
    side: usize,
    phase: Phase,
    queue: &str,
    count: u32,
    settings: &Settings,
) -> anyhow::Result<(Duration, Option<Duration>)> {
    if side == 0 {
        let raw = raw::Raw::connect(url).await?;
        let before = process_cpu();
        let elapsed = match phase {
            Phase::Publish => raw.publish(queue, count, settings).await?,
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

/// Which side goes first in slice `index` (0 = raw, 1 = polyq): ABBA, so neither side is
/// always first.
fn order(index: usize) -> [usize; 2] {
    if index.is_multiple_of(2) {
        [0, 1]
    } else {
        [1, 0]
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
