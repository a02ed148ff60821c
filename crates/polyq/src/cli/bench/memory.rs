//! `memory://`: there is no raw client to compare with, so the embedded broker is measured end
//! to end: publishing with a window of confirms while a consumer acks concurrently.

use std::time::Instant;

use super::phases::Settings;
use super::rate;
use super::through_polyq::{Polyq, consume, publish};

/// Prints each round's end-to-end rate and a last line `end-to-end: X msg/s`, the mean.
pub(super) async fn run(url: &str, settings: &Settings, rounds: u32) -> anyhow::Result<()> {
    let polyq = Polyq::connect(url).await?;
    let mut total = 0.0;
    for round in 0..rounds {
        let queue = polyq.declare_queue().await?;
        let started = Instant::now();
        let (published, consumed) = tokio::join!(
            publish(polyq.client(), &queue, settings.messages, settings),
            consume(polyq.client(), &queue, settings.messages, settings)
        );
        let elapsed = started.elapsed();
        published?;
        consumed?;
        polyq.delete_queue(&queue).await?;
        let figure = rate(settings.messages, elapsed);
        println!("round {}: end-to-end {figure:.0} msg/s", round + 1);
        total += figure;
    }
    polyq.close().await?;
    println!("end-to-end: {:.0} msg/s", total / f64::from(rounds));
    Ok(())
}
