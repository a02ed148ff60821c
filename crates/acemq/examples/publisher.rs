//! A publisher whose every send returns once the broker confirmed it, with a publish interceptor
//! stamping the tenant on every message and refusing test traffic, and a consume interceptor
//! that fails any delivery arriving without a tenant.
//!
//! Runs on the embedded broker, or on the broker given as the first argument:
//!
//! ```sh
//! cargo run -p acemq --example publisher
//! cargo run -p acemq --example publisher -- amqp://guest:guest@127.0.0.1:5672/%2f
//! ```

use std::time::Duration;

use acemq::interceptor::{BoxError, ConsumeInterceptor, PublishContext, PublishInterceptor};
use acemq::topology::{dead_letter_queue, parked_queue};
use acemq::{AceMq, Envelope, Message, RuntimeError};
use anyhow::{Context, bail, ensure};
use polyq_amqp::QueueSpec;
use serde::{Deserialize, Serialize};

const TENANT: &str = "x-tenant";
/// The upper bound on any one step; each takes well under a second.
const STEP: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: u32,
}

/// Stamps the tenant on every message; a message marked `x-test` never reaches the broker.
struct StampTenant;

impl PublishInterceptor for StampTenant {
    fn before_publish(&self, publish: &mut PublishContext<'_>) -> Result<(), BoxError> {
        if publish.envelope().headers().contains_key("x-test") {
            return Err("test messages are not sent".into());
        }
        let stamped = publish
            .envelope()
            .to_builder()
            .header(TENANT, "acme")
            .build()?;
        publish.set_envelope(stamped);
        Ok(())
    }
}

/// Fails a delivery without a tenant before the handler sees it: it is retried, then set aside.
struct RequireTenant;

impl ConsumeInterceptor for RequireTenant {
    fn before_handle(&self, _queue: &str, envelope: &Envelope) -> Result<(), BoxError> {
        if envelope.headers().contains_key(TENANT) {
            Ok(())
        } else {
            Err("a message without a tenant".into())
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::args().nth(1);
    let mq = AceMq::builder()
        .url(url.as_deref().unwrap_or("memory://example-publisher"))
        .publish_interceptor(StampTenant)
        .consume_interceptor(RequireTenant)
        .connect()
        .await?;
    // A queue of this run's own, removed at the end whatever happened.
    let queue = format!("example.publisher.{}", std::process::id());
    let result = run(&mq, &queue).await;
    for name in [dead_letter_queue(&queue), parked_queue(&queue), queue] {
        mq.client().delete_queue(&name).await?;
    }
    mq.close().await?;
    result
}

async fn run(mq: &AceMq, queue: &str) -> anyhow::Result<()> {
    mq.client().declare_queue(&QueueSpec::new(queue)).await?;
    let orders = mq.publisher::<Order>("", queue);

    // `send` returns once the broker confirmed: the message is in the queue.
    let sent = orders.send(&Order { id: 1 }).await?;
    println!("order 1 confirmed as message {}", sent.id());
    ensure!(
        tenant(&sent) == Some("acme"),
        "order 1 was sent without the tenant"
    );
    // A batch is published at once, then every confirm awaited.
    let batch = orders.send_all([Order { id: 2 }, Order { id: 3 }]).await?;
    println!("orders 2 and 3 confirmed as one batch of {}", batch.len());

    let test = Envelope::of(queue).header("x-test", true).build()?;
    let Err(refused @ RuntimeError::Refused { .. }) =
        orders.send_with(&Order { id: 99 }, test).await
    else {
        bail!("order 99, marked x-test, was not refused by the interceptor");
    };
    println!("order 99: {refused}");
    // Publishers are mandatory by default: a message no queue takes is an error, not lost.
    let nowhere = mq.publisher::<Order>("", "example.nobody-listens");
    let Err(unroutable @ RuntimeError::Unroutable { .. }) = nowhere.send(&Order { id: 100 }).await
    else {
        bail!("order 100, which no queue takes, was not reported unroutable");
    };
    println!("order 100: {unroutable}");

    let (ids, mut received) = tokio::sync::mpsc::unbounded_channel();
    let consumer = mq
        .consumer::<Order>(queue)
        .start(move |message: Message<Order>| {
            let ids = ids.clone();
            async move {
                let (id, tenant) = (message.payload().id, tenant(message.envelope()));
                println!(
                    "received order {id} for tenant {}",
                    tenant.unwrap_or_default()
                );
                ids.send(id).ok();
            }
        })
        .await?;
    let mut ids = Vec::new();
    while ids.len() < 3 {
        ids.push(
            tokio::time::timeout(STEP, received.recv())
                .await
                .context("no delivery")?,
        );
    }
    ensure!(
        ids == [Some(1), Some(2), Some(3)],
        "expected orders 1, 2, 3, got {ids:?}"
    );
    ensure!(
        consumer.drain(STEP).await.is_clean(),
        "the consumer did not drain cleanly"
    );
    Ok(())
}

fn tenant(envelope: &Envelope) -> Option<&str> {
    envelope
        .headers()
        .get(TENANT)
        .and_then(|value| value.as_str())
}
