//! The AceMQ part: a consumer with a short retry policy (waits held by the consumer), a message
//! that succeeds on its third attempt, one that exhausts its retries into `.dlq`, and a
//! malformed body parked with its bytes intact.

use std::fmt;
use std::time::Duration;

use acemq::retry::RetryPolicy;
use acemq::topology::{SourceQueue, Topology, dead_letter_queue, parked_queue};
use acemq::{AceMq, Envelope, Message};
use anyhow::{Context as _, anyhow, bail};
use futures_util::StreamExt as _;
use polyq_amqp::{ConsumeOptions, OutgoingMessage, Properties, PublishOutcome};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Timeline, unique};

const PART: &str = "acemq";
/// Three attempts, 100 ms apart: short enough for a demo, and below the broker-wait threshold,
/// so the consumer holds the waits.
const POLICY: &str = "fixed(3, 100ms)";
/// The upper bound on any one step; the demo takes well under a second per step.
const STEP: Duration = Duration::from_secs(10);

/// The failure the demo's handler reports; its type name is what `x-acemq-error` shows.
#[derive(Debug)]
struct PaymentDeclined(&'static str);

impl fmt::Display for PaymentDeclined {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for PaymentDeclined {}

/// Runs the AceMQ part on `url`.
pub(crate) async fn run(url: &str, timeline: &Timeline) -> anyhow::Result<()> {
    let mq = AceMq::builder()
        .url(url)
        .client_name("polyq-demo")
        .connect()
        .await
        .with_context(|| format!("--url {}", polyq_amqp::redact_url(url)))?;
    timeline.event(PART, "connected", mq.url());
    let queue = unique("orders");
    let outcome = steps(&mq, &queue, timeline).await;
    for name in [
        queue.clone(),
        dead_letter_queue(&queue),
        parked_queue(&queue),
    ] {
        mq.client().delete_queue(&name).await.ok();
    }
    mq.close().await.ok();
    outcome
}

async fn steps(mq: &AceMq, queue: &str, timeline: &Timeline) -> anyhow::Result<()> {
    let policy: RetryPolicy = POLICY.parse()?;
    let plan = Topology::new()
        .queue(SourceQueue::new(queue).with_dead_letter())
        .consumer(queue, policy.clone())
        .plan()?;
    let applied = acemq::topology_apply::apply(mq.client(), &plan).await?;
    if !applied.is_clean() {
        bail!(
            "declaring the demo's queues failed: {}",
            serde_json::to_string(&applied)?
        );
    }
    timeline.event(
        PART,
        "declared",
        format!("{queue} (quorum, dead-letters to .dlq), {queue}.dlq, {queue}.parked"),
    );

    let options = ConsumeOptions::default();
    let mut dead_letters = mq
        .client()
        .consume(&dead_letter_queue(queue), &options)
        .await?;
    let mut parked = mq.client().consume(&parked_queue(queue), &options).await?;
    let (handled, mut attempts) = mpsc::unbounded_channel();
    let at = *timeline;
    let consumer = mq
        .consumer::<Value>(queue)
        .retry(policy)
        .start(move |message: Message<Value>| {
            let handled = handled.clone();
            async move {
                let order = message.payload()["order"].clone();
                let attempt = message.envelope().attempt();
                let result = match message.payload()["scenario"].as_str() {
                    Some("flaky") if attempt < 3 => {
                        Err(PaymentDeclined("payment gateway timed out"))
                    }
                    Some("broken") => Err(PaymentDeclined("card reported stolen")),
                    _ => Ok(()),
                };
                match &result {
                    Ok(()) => at.event(
                        PART,
                        "handled",
                        format!("order {order}, attempt {attempt}: succeeded"),
                    ),
                    Err(e) => at.event(
                        PART,
                        "failed",
                        format!("order {order}, attempt {attempt}: {e}"),
                    ),
                }
                handled.send((order, attempt, result.is_ok())).ok();
                result
            }
        })
        .await?;
    timeline.event(
        PART,
        "consuming",
        format!("{queue} with retry policy {POLICY}"),
    );

    let publisher = mq.publisher::<Value>("", queue);
    publish(&publisher, timeline, 1042, "flaky").await?;
    loop {
        let (order, attempt, ok) = next(&mut attempts).await?;
        if order == 1042 && attempt == 3 && ok {
            break;
        }
    }

    publish(&publisher, timeline, 1043, "broken").await?;
    let delivery = within(dead_letters.next(), ".dlq").await?;
    let envelope = Envelope::from_properties(&delivery.properties, &delivery.routing_key);
    timeline.event(
        PART,
        "dead-lettered",
        format!(
            "order 1043 in {queue}.dlq: x-acemq-error = {}",
            envelope.error().unwrap_or("(none)")
        ),
    );
    delivery.ack().await?;

    let malformed: &[u8] = br#"{"order": 1044, "scenario": "#;
    let properties = Properties::default()
        .with_content_type("application/json")
        .persistent();
    timeline.event(
        PART,
        "publish",
        format!(
            "a malformed body ({} bytes of truncated JSON), raw through the transport",
            malformed.len()
        ),
    );
    let confirm = mq
        .client()
        .publish(OutgoingMessage::new("", queue, properties, malformed))
        .await?;
    if confirm.await? != PublishOutcome::Acked {
        bail!("the broker did not take the malformed body");
    }
    let delivery = within(parked.next(), ".parked").await?;
    let envelope = Envelope::from_properties(&delivery.properties, &delivery.routing_key);
    let intact = if delivery.body[..] == *malformed {
        "original bytes intact"
    } else {
        "bytes CHANGED"
    };
    timeline.event(
        PART,
        "parked",
        format!(
            "in {queue}.parked, {intact}: x-acemq-error = {}",
            envelope.error().unwrap_or("(none)")
        ),
    );
    delivery.ack().await?;

    let report = consumer.drain(STEP).await;
    dead_letters.cancel().await.ok();
    parked.cancel().await.ok();
    timeline.event(
        PART,
        "drained",
        format!("{} handler(s) interrupted", report.interrupted),
    );
    Ok(())
}

/// Announces, then publishes, an order: the handler may run before the confirm comes back, so
/// the announcement comes first to keep the timeline in causal order.
async fn publish(
    publisher: &acemq::Publisher<Value>,
    timeline: &Timeline,
    order: u32,
    scenario: &str,
) -> anyhow::Result<()> {
    let envelope = Envelope::of(publisher.routing_key()).build()?;
    timeline.event(
        PART,
        "publish",
        format!("order {order} (id {}, {scenario})", envelope.id()),
    );
    publisher
        .send_with(&json!({"order": order, "scenario": scenario}), envelope)
        .await?;
    Ok(())
}

async fn next(
    handled: &mut mpsc::UnboundedReceiver<(Value, u32, bool)>,
) -> anyhow::Result<(Value, u32, bool)> {
    tokio::time::timeout(STEP, handled.recv())
        .await
        .ok()
        .flatten()
        .ok_or_else(|| anyhow!("the handler was not called within {STEP:?}"))
}

async fn within<T>(
    next: impl Future<Output = Option<polyq_amqp::Result<T>>>,
    queue: &str,
) -> anyhow::Result<T> {
    match tokio::time::timeout(STEP, next).await {
        Ok(Some(item)) => Ok(item?),
        Ok(None) => bail!("the {queue} watcher stopped"),
        Err(_) => bail!("nothing arrived in {queue} within {STEP:?}"),
    }
}
