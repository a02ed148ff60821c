//! The hot paths whose instruction counts `scripts/instructions` compares with the committed
//! baselines: `instructions <path> <n>` runs one path `n` times and nothing else, so the
//! difference between the counts of two runs of different `n`, divided, is the cost of one run
//! without the process start and the setup. Inputs and iteration counts are fixed and nothing in
//! a counted run reads a timer, so a count moves only when the code does.
//!
//! Paths:
//! - `codec`: BabelQueue `make` + `encode` + `decode` (and `data` read back into its type) of
//!   the reference payload, as the codec bench's round trip;
//! - `envelope`: AceMQ `Envelope::to_headers` then `Envelope::from_headers_at` of the
//!   `populated` envelope fixture, as the envelope bench;
//! - `broker`: one message through the embedded broker, publish -> deliver -> ack, with 500
//!   confirms outstanding while one consumer (prefetch 1000) acks, as `polyq bench amqp --url
//!   memory://` does, on a single-threaded runtime so that the scheduling is the same each run;
//! - `broker-publish`: the publishing half alone (routed, queued, confirmed, dropped with the
//!   queue), so that a regression there is not diluted by the delivery's cost.
//!
//! Only the crates' public APIs are used, so moving files inside a crate leaves this alone.

use std::hint::black_box;

use acemq::Envelope;
use acemq::time::OffsetDateTime;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use polyq_amqp::{
    Client, ConsumeOptions, FieldTable, FieldValue, OutgoingMessage, Properties, PublishOutcome,
    QueueSpec,
};
use serde::{Deserialize, Serialize};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` runs every bench target with `--bench`; this one only counts when asked.
    let (Some(path), Some(n)) = (args.first(), args.get(1).and_then(|n| n.parse().ok())) else {
        println!(
            "usage: instructions <codec|envelope|broker|broker-publish> <n> (see scripts/instructions)"
        );
        return;
    };
    match path.as_str() {
        "codec" => codec(n),
        "envelope" => envelope(n),
        "broker" => broker(n, true),
        "broker-publish" => broker(n, false),
        other => panic!("unknown path `{other}`: codec, envelope, broker or broker-publish"),
    }
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Order {
    order_id: u64,
    amount: f64,
    currency: String,
    note: String,
}

fn codec(n: u32) {
    let order = Order {
        order_id: 1042,
        amount: 99.9,
        currency: "EUR".into(),
        note: "café ☕".into(),
    };
    for _ in 0..n {
        let envelope = babelqueue::make(
            "urn:babel:orders:created",
            black_box(&order),
            babelqueue::MakeOptions::new().queue("orders"),
        )
        .expect("the payload is an object");
        let body = envelope.encode().expect("the envelope has a URN");
        let decoded = babelqueue::decode(body.as_bytes()).expect("a canonical body decodes");
        let back: Order = decoded.envelope.data_as().expect("data is the payload");
        assert_eq!(back.order_id, order.order_id);
    }
}

/// The `populated` case of `fixtures/acemq/envelope-fixtures.json`, written out.
fn populated() -> FieldTable {
    let text = |value: &str| FieldValue::from(value);
    [
        ("x-acemq-attempt", FieldValue::I64(1)),
        ("x-acemq-causation", text("cause-1")),
        ("x-acemq-correlation", text("corr-1")),
        ("x-acemq-first-seen", FieldValue::I64(1_767_323_045_678)),
        ("x-acemq-id", text(MESSAGE_ID)),
        ("x-acemq-origin", text("orders@host-7")),
        ("x-acemq-type", text("order.placed")),
        ("x-acemq-version", FieldValue::I64(3)),
        ("x-tenant", text("acme")),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

const MESSAGE_ID: &str = "11111111-2222-3333-4444-555555555555";

fn envelope(n: u32) {
    // A fixed reading time: the envelope falls back to it where a header is missing.
    let now = OffsetDateTime::from_unix_timestamp(1_767_323_050).expect("a valid timestamp");
    let envelope = Envelope::from_headers_at(&populated(), "fx.rich", Some(MESSAGE_ID), now);
    for _ in 0..n {
        let headers = black_box(&envelope).to_headers();
        let read = Envelope::from_headers_at(&headers, "fx.rich", Some(MESSAGE_ID), now);
        assert_eq!(read.id(), envelope.id());
    }
}

const WINDOW: usize = 500;
const PREFETCH: u16 = 1000;

/// Publishes `n` messages, consumed and acked concurrently when `consuming`.
fn broker(n: u32, consuming: bool) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let client = Client::connect("memory://instructions")
            .await
            .expect("memory:// connects");
        let mut spec = QueueSpec::new("instructions");
        spec.durable = false;
        let queue = client.declare_queue(&spec).await.expect("declared").name;
        let body = Bytes::from(vec![b'x'; 366]);
        if consuming {
            tokio::join!(
                publish(&client, &queue, n, &body),
                consume(&client, &queue, n)
            );
        } else {
            publish(&client, &queue, n, &body).await;
        }
        client.delete_queue(&queue).await.expect("deleted");
        client.close().await.expect("closed");
    });
}

async fn publish(client: &Client, queue: &str, n: u32, body: &Bytes) {
    let mut in_flight = FuturesUnordered::new();
    for _ in 0..n {
        if in_flight.len() >= WINDOW
            && let Some(outcome) = in_flight.next().await
        {
            assert!(matches!(outcome, Ok(PublishOutcome::Acked)), "{outcome:?}");
        }
        let message = OutgoingMessage::new("", queue, Properties::default(), body.clone());
        in_flight.push(client.publish(message).await.expect("published"));
    }
    while let Some(outcome) = in_flight.next().await {
        assert!(matches!(outcome, Ok(PublishOutcome::Acked)), "{outcome:?}");
    }
}

async fn consume(client: &Client, queue: &str, n: u32) {
    let mut consumer = client
        .consume(queue, &ConsumeOptions::default().prefetch(PREFETCH))
        .await
        .expect("consuming");
    for _ in 0..n {
        let delivery = consumer
            .next()
            .await
            .expect("a delivery")
            .expect("delivered");
        delivery.ack().await.expect("acked");
    }
    consumer.cancel().await.expect("cancelled");
}
