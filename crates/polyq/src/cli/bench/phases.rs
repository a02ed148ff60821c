//! The side-by-side comparison. In each round, raw lapin and polyq-amqp each run a confirmed
//! publish phase into a fresh non-durable queue and then a consume + ack phase that drains it;
//! odd rounds run polyq first, so drift (broker memory, other load on the machine) hits both
//! sides alike. Figures are means over the rounds.

use std::time::Duration;

use bytes::Bytes;

use super::{rate, raw, through_polyq};

/// What every phase does.
pub(super) struct Settings {
    pub(super) messages: u32,
    pub(super) body: Bytes,
    pub(super) window: usize,
    pub(super) prefetch: u16,
}

/// Runs `rounds` rounds and prints each phase's rate, the best and mean rate of each side, and
/// `ratio: R`, the lower of the publish and consume polyq/raw ratios of the best rates. Other
/// load on the machine can only slow a phase down, so the best round is the least disturbed
/// measurement of each side.
pub(super) async fn compare(url: &str, settings: &Settings, rounds: u32) -> anyhow::Result<()> {
    let raw = raw::Raw::connect(url).await?;
    let polyq = through_polyq::Polyq::connect(url).await?;
    // [publish, consume] x [raw, polyq] x rounds
    let mut samples: [[Vec<f64>; 2]; 2] = Default::default();
    for round in 0..rounds {
        // Each side publishes into an empty broker and then drains its queue, so neither
        // publishes against the other's backlog; the side going first alternates.
        let ((raw_publish, raw_consume), (polyq_publish, polyq_consume)) = if round % 2 == 0 {
            let r = raw_side(&raw, settings).await?;
            (r, polyq_side(&polyq, settings).await?)
        } else {
            let p = polyq_side(&polyq, settings).await?;
            (raw_side(&raw, settings).await?, p)
        };
        let figures = [
            [
                rate(settings.messages, raw_publish),
                rate(settings.messages, polyq_publish),
            ],
            [
                rate(settings.messages, raw_consume),
                rate(settings.messages, polyq_consume),
            ],
        ];
        println!(
            "round {}: publish raw {:.0} / polyq {:.0} msg/s; consume+ack raw {:.0} / polyq {:.0} msg/s",
            round + 1,
            figures[0][0],
            figures[0][1],
            figures[1][0],
            figures[1][1]
        );
        for (phase, figure) in samples.iter_mut().zip(figures) {
            phase[0].push(figure[0]);
            phase[1].push(figure[1]);
        }
    }
    let best = |rates: &[f64]| rates.iter().copied().fold(0.0, f64::max);
    let mean = |rates: &[f64]| rates.iter().sum::<f64>() / rates.len() as f64;
    let mut ratios = Vec::new();
    for (name, [raw_rates, polyq_rates]) in
        ["confirmed publish", "consume + ack"].iter().zip(&samples)
    {
        let ratio = best(polyq_rates) / best(raw_rates);
        println!(
            "{name}: raw lapin best {:.0} (mean {:.0}) msg/s, polyq-amqp best {:.0} (mean {:.0}) \
             msg/s, ratio of best {ratio:.3}, of means {:.3}",
            best(raw_rates),
            mean(raw_rates),
            best(polyq_rates),
            mean(polyq_rates),
            mean(polyq_rates) / mean(raw_rates)
        );
        ratios.push(ratio);
    }
    polyq.close().await?;
    raw.close().await?;
    println!(
        "ratio: {:.3}",
        ratios.iter().copied().fold(f64::INFINITY, f64::min)
    );
    Ok(())
}

async fn raw_side(raw: &raw::Raw, settings: &Settings) -> anyhow::Result<(Duration, Duration)> {
    let queue = raw.declare_queue().await?;
    let publish = raw.publish(&queue, settings).await?;
    let consume = raw.consume(&queue, settings).await?;
    raw.delete_queue(&queue).await?;
    Ok((publish, consume))
}

async fn polyq_side(
    polyq: &through_polyq::Polyq,
    settings: &Settings,
) -> anyhow::Result<(Duration, Duration)> {
    let queue = polyq.declare_queue().await?;
    let publish = polyq.publish(&queue, settings).await?;
    let consume = polyq.consume(&queue, settings).await?;
    polyq.delete_queue(&queue).await?;
    Ok((publish, consume))
}
