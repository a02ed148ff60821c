//! A consumer whose handler fails while a payment gateway is down: the message is retried by
//! the consumer's policy, set aside into `orders.dlq` once the policy gives up, and replayed
//! back to `orders` once the gateway is up again, where it succeeds.
//!
//! Runs on the embedded broker, no service needed:
//!
//! ```sh
//! cargo run -p acemq --example retry_and_replay
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use acemq::patterns::replay::Replay;
use acemq::retry::RetryPolicy;
use acemq::topology::{SourceQueue, Topology, dead_letter_queue};
use acemq::{AceMq, Message};
use anyhow::{bail, ensure};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

const QUEUE: &str = "orders";
/// Three attempts 50 ms apart: below the broker-wait threshold, so the consumer holds the waits
/// itself and no rung queues are needed.
const POLICY: &str = "fixed(3, 50ms)";
/// The upper bound on any one step; each takes well under a second.
const STEP: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: u32,
}

/// The failure the handler reports; its text is what the message carries in `x-acemq-error`.
#[derive(Debug)]
struct GatewayDown;

impl fmt::Display for GatewayDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("payment gateway unavailable")
    }
}

impl std::error::Error for GatewayDown {}

/// What the handler saw of one delivery.
struct Attempt {
    order: u32,
    attempt: u32,
    succeeded: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mq = AceMq::connect("memory://retry-and-replay").await?;
    let policy: RetryPolicy = POLICY.parse()?;

    // `orders` (quorum, dead-letters to `orders.dlq`), `orders.dlq` and `orders.parked`.
    let plan = Topology::new()
        .queue(SourceQueue::new(QUEUE).with_dead_letter())
        .consumer(QUEUE, policy.clone())
        .plan()?;
    let applied = acemq::topology_apply::apply(mq.client(), &plan).await?;
    ensure!(applied.is_clean(), "declaring the queues failed");

    let gateway_up = Arc::new(AtomicBool::new(false));
    let (attempts, mut seen) = mpsc::unbounded_channel();
    let handler = {
        let gateway_up = Arc::clone(&gateway_up);
        move |message: Message<Order>| {
            let gateway_up = Arc::clone(&gateway_up);
            let attempts = attempts.clone();
            async move {
                let envelope = message.envelope();
                let succeeded = gateway_up.load(Ordering::SeqCst);
                println!(
                    "order {}: attempt {}{}: {}",
                    message.payload().id,
                    envelope.attempt(),
                    envelope
                        .replayed_from()
                        .map(|queue| format!(
                            " (replayed from {queue}, set aside for: {})",
                            envelope.error().unwrap_or("no error recorded")
                        ))
                        .unwrap_or_default(),
                    if succeeded { "paid" } else { "gateway down" },
                );
                attempts
                    .send(Attempt {
                        order: message.payload().id,
                        attempt: envelope.attempt(),
                        succeeded,
                    })
                    .ok();
                if succeeded { Ok(()) } else { Err(GatewayDown) }
            }
        }
    };

    // The gateway is down: three attempts, then `orders.dlq`.
    let consumer = mq
        .consumer::<Order>(QUEUE)
        .retry(policy.clone())
        .start(handler.clone())
        .await?;
    mq.publisher::<Order>("", QUEUE)
        .send(&Order { id: 1042 })
        .await?;
    for expected in 1..=3 {
        let seen = next(&mut seen).await?;
        ensure!(
            seen.order == 1042 && seen.attempt == expected && !seen.succeeded,
            "expected failed attempt {expected} of order 1042"
        );
    }
    // Draining waits for the last attempt's settlement: the move into `orders.dlq`.
    let report = consumer.drain(STEP).await;
    ensure!(report.is_clean(), "the consumer did not drain cleanly");

    let replay = Replay::dead_letters(&mq, QUEUE);
    let waiting = replay.pending().await?;
    println!("{}: {waiting} message(s) waiting", dead_letter_queue(QUEUE));
    ensure!(waiting == 1, "expected order 1042 in {}", replay.source());

    // The gateway is back: replay the dead letter, which now succeeds on its first attempt.
    gateway_up.store(true, Ordering::SeqCst);
    let consumer = mq
        .consumer::<Order>(QUEUE)
        .retry(policy)
        .start(handler)
        .await?;
    let report = replay.run().await?;
    println!(
        "replayed {} message(s) from {} to {}",
        report.moved,
        replay.source(),
        replay.destination()
    );
    ensure!(report.moved == 1, "expected one message replayed");
    let seen = next(&mut seen).await?;
    ensure!(
        seen.order == 1042 && seen.attempt == 1 && seen.succeeded,
        "expected order 1042 paid on its first attempt after the replay"
    );

    let report = consumer.drain(STEP).await;
    ensure!(report.is_clean(), "the consumer did not drain cleanly");
    ensure!(
        replay.pending().await? == 0,
        "{} should be empty",
        replay.source()
    );
    mq.close().await?;
    Ok(())
}

async fn next(seen: &mut mpsc::UnboundedReceiver<Attempt>) -> anyhow::Result<Attempt> {
    match tokio::time::timeout(STEP, seen.recv()).await {
        Ok(Some(attempt)) => Ok(attempt),
        Ok(None) => bail!("the handler is gone"),
        Err(_) => bail!("the handler saw no delivery within {STEP:?}"),
    }
}
