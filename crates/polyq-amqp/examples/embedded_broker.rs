//! The embedded broker on its own: no service to start.
//!
//! A work queue dead-letters into a `.dlq` through a dead-letter exchange; a retry rung holds a
//! message for its TTL and dead-letters it back to the work queue. One message is published
//! with a confirm, consumed, sent once round the rung, then rejected into the `.dlq`, where its
//! `x-death` history says how it got there, as RabbitMQ would say it.
//!
//! ```sh
//! cargo run -p polyq-amqp --example embedded_broker
//! ```

use std::time::Duration;

use futures_util::StreamExt as _;
use polyq_amqp::{
    Binding, Client, ConsumeOptions, ExchangeKind, ExchangeSpec, FieldValue, OutgoingMessage,
    Properties, PublishOutcome, QueueSpec,
};

const WORK: &str = "orders";
const RUNG: &str = "orders.retry.50ms";
const DLQ: &str = "orders.dlq";
const DLX: &str = "orders.dlx";

#[tokio::main]
async fn main() -> Result<(), polyq_amqp::Error> {
    // Every `memory://NAME` of one process is the same broker; another name is another one.
    let client = Client::connect("memory://example").await?;

    client
        .declare_exchange(&ExchangeSpec::new(DLX, ExchangeKind::Direct))
        .await?;
    client
        .declare_queue(
            &QueueSpec::new(WORK)
                .argument("x-dead-letter-exchange", FieldValue::from(DLX))
                .argument("x-dead-letter-routing-key", FieldValue::from(DLQ)),
        )
        .await?;
    client.declare_queue(&QueueSpec::new(DLQ)).await?;
    client.bind_queue(&Binding::new(DLQ, DLX, DLQ)).await?;
    // The rung: a message waits out the TTL, then the default exchange takes it back to WORK.
    client
        .declare_queue(
            &QueueSpec::new(RUNG)
                .argument("x-message-ttl", FieldValue::I32(50))
                .argument("x-dead-letter-exchange", FieldValue::from(""))
                .argument("x-dead-letter-routing-key", FieldValue::from(WORK)),
        )
        .await?;

    let properties = Properties::default()
        .with_content_type("application/json")
        .persistent();
    let outcome = client
        .publish(OutgoingMessage::new(
            "",
            WORK,
            properties,
            r#"{"order":1042}"#,
        ))
        .await?
        .await?;
    assert_eq!(outcome, PublishOutcome::Acked);
    println!("published to `{WORK}`: {outcome:?}");

    let mut deliveries = client
        .consume(WORK, &ConsumeOptions::default().prefetch(10))
        .await?;

    // First delivery: "fails", and goes round the retry rung.
    let first = next(&mut deliveries).await?;
    let retry = OutgoingMessage::new("", RUNG, first.properties.clone(), first.body.clone());
    assert_eq!(client.publish(retry).await?.await?, PublishOutcome::Acked);
    first.ack().await?;
    println!("attempt 1 failed: waiting 50 ms in `{RUNG}`");

    // Second delivery, back from the rung: fails for good, and is rejected into the `.dlq`.
    let second = next(&mut deliveries).await?;
    second.reject(false).await?;
    println!("attempt 2 failed: rejected into `{DLQ}`");
    deliveries.cancel().await?;

    let dead = client
        .get(DLQ)
        .await?
        .expect("the rejected message is in the dead-letter queue");
    assert_eq!(&dead.body[..], br#"{"order":1042}"#);
    let Some(FieldValue::Array(deaths)) = dead.properties.headers.get("x-death") else {
        panic!("a dead-lettered message carries x-death");
    };
    for death in deaths {
        if let FieldValue::Table(death) = death {
            let field = |name: &str| match death.get(name) {
                Some(FieldValue::LongString(text)) => String::from_utf8_lossy(text).into_owned(),
                _ => String::new(),
            };
            println!(
                "x-death: queue `{}`, reason `{}`",
                field("queue"),
                field("reason")
            );
        }
    }
    dead.ack().await?;

    for queue in [WORK, RUNG, DLQ] {
        client.delete_queue(queue).await?;
    }
    client.delete_exchange(DLX).await?;
    client.close().await
}

/// The consumer's next delivery, within a bound so that a mistake ends the example.
async fn next(
    deliveries: &mut polyq_amqp::Consumer,
) -> Result<polyq_amqp::Delivery, polyq_amqp::Error> {
    tokio::time::timeout(Duration::from_secs(5), deliveries.next())
        .await
        .expect("a delivery within 5 s")
        .expect("the consumer is open")
}
