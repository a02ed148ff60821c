//! Each text format end to end, on RabbitMQ and `memory://`: published in the format, consumed
//! through a composite of every format, failed into a retry, dead-lettered into `Q.dlq`, and
//! replayed from there, with the body's bytes and content type unchanged at every hop; a
//! content type the consumer does not read, and a body its format does not parse, are parked
//! in `Q.parked` with their bytes.

mod common;

use std::time::Duration;

use acemq::codec::{Composite, Decode, Encode, Json, Toml, Xml, Yaml};
use acemq::patterns::replay::Replay;
use acemq::retry::RetryPolicy;
use acemq::{Message, Outcome};
use bytes::Bytes;
use common::{Env, LIMIT};
use polyq_amqp::{OutgoingMessage, Properties};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderPlaced {
    order_id: String,
    customer: String,
    total_cents: i64,
    items: Vec<String>,
}

fn order() -> OrderPlaced {
    OrderPlaced {
        order_id: "o-1".into(),
        customer: "Ana Söderström".into(),
        total_cents: 4250,
        items: vec!["widget".into(), "gasket".into()],
    }
}

/// What a consumer accepting every format of this crate reads with.
fn every_format() -> Composite<OrderPlaced> {
    Composite::of(Json)
        .with(Yaml)
        .with(Toml)
        .with(Xml::default())
}

/// Publishes the order through `codec`, fails it once into a retry and once more into
/// `Q.dlq`, replays it from there and reads it off the source queue: the same bytes and
/// content type as published, each time.
async fn survives_retry_dead_letter_and_replay<C>(env: &'static Env, name: &str, codec: C)
where
    C: Encode<OrderPlaced> + Decode<OrderPlaced> + Clone,
{
    let queue = env.queue(&format!("codec.{name}")).await;
    let body = codec.encode(&order()).unwrap();
    let content_type = codec.content_type().to_owned();

    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer_with(queue.as_str(), every_format())
        .retry(RetryPolicy::fixed(2, Duration::from_millis(10)).unwrap())
        .start(move |message: Message<OrderPlaced>| {
            let tx = tx.clone();
            async move {
                tx.send((message.envelope().attempt(), message.payload().clone()))
                    .unwrap();
                Outcome::retry("the warehouse is down")
            }
        })
        .await
        .unwrap();
    let sent = env
        .mq
        .publisher_with("", queue.as_str(), codec.clone())
        .send(&order())
        .await
        .unwrap();
    for attempt in 1..=2 {
        let seen = tokio::time::timeout(LIMIT, rx.recv()).await.unwrap();
        assert_eq!(seen, Some((attempt, order())), "{name}: attempt {attempt}");
    }

    let dlq = format!("{queue}.dlq");
    let dead = env.next_in(&dlq).await;
    assert_eq!(dead.body, body, "{name}: the bytes in {dlq}");
    assert_eq!(
        dead.properties.content_type.as_deref(),
        Some(content_type.as_str()),
        "{name}: the content type in {dlq}"
    );
    assert!(consumer.drain(LIMIT).await.is_clean());

    // Back into the dead-letter queue as it was, then replayed to the source queue.
    republish(env, &dlq, &dead.properties, &dead.body).await;
    let report = Replay::dead_letters(&env.mq, &queue).run().await.unwrap();
    assert_eq!(report.moved, 1, "{name}");
    let replayed = env.next_in(&queue).await;
    assert_eq!(replayed.body, body, "{name}: the bytes replayed");
    assert_eq!(
        replayed.properties.content_type.as_deref(),
        Some(content_type.as_str()),
        "{name}: the content type replayed"
    );
    assert_eq!(
        replayed.properties.message_id.as_deref(),
        Some(sent.id()),
        "{name}"
    );
    assert_eq!(
        every_format()
            .decode_for(replayed.properties.content_type.as_deref(), &replayed.body)
            .unwrap(),
        order()
    );
}

async fn republish(env: &Env, queue: &str, properties: &Properties, body: &Bytes) {
    env.client()
        .publish(OutgoingMessage::new(
            "",
            queue,
            properties.clone(),
            body.to_vec(),
        ))
        .await
        .unwrap()
        .await
        .unwrap();
}

async fn yaml_survives_every_hop(env: &'static Env) {
    survives_retry_dead_letter_and_replay(env, "yaml", Yaml).await;
}
polyq_testkit::both_brokers!(yaml_survives_every_hop);

async fn toml_survives_every_hop(env: &'static Env) {
    survives_retry_dead_letter_and_replay(env, "toml", Toml).await;
}
polyq_testkit::both_brokers!(toml_survives_every_hop);

async fn xml_survives_every_hop(env: &'static Env) {
    survives_retry_dead_letter_and_replay(env, "xml", Xml::default()).await;
}
polyq_testkit::both_brokers!(xml_survives_every_hop);

async fn unreadable_bodies_are_parked_with_their_bytes(env: &'static Env) {
    let queue = env.queue("codec.unread").await;
    let consumer = env
        .mq
        .consumer_with(queue.as_str(), every_format())
        .start(|message: Message<OrderPlaced>| async move {
            let id = message.envelope().id().to_owned();
            assert!(id.is_empty(), "never called for an unreadable body ({id})");
        })
        .await
        .unwrap();
    let parked_queue = format!("{queue}.parked");
    for (content_type, body, error) in [
        (
            "application/cbor",
            &b"\xa1\x67orderId\x63o-1"[..],
            "could not be decoded: no codec reads content type `application/cbor`",
        ),
        (
            "text/x-yaml",
            &b"orderId: [o-1\n"[..],
            "could not be decoded: invalid YAML: ",
        ),
        (
            "text/toml",
            &b"orderId = 'o-1\n"[..],
            "could not be decoded: invalid TOML: ",
        ),
        (
            "text/xml",
            &b"<OrderPlaced><orderId>o-1</OrderPlaced>"[..],
            "could not be decoded: invalid XML: ",
        ),
    ] {
        let properties = Properties::default().with_content_type(content_type);
        republish(env, &queue, &properties, &Bytes::from_static(body)).await;
        let parked = env.next_in(&parked_queue).await;
        assert_eq!(&parked.body[..], body, "{content_type}: the original bytes");
        assert_eq!(
            parked.properties.content_type.as_deref(),
            Some(content_type)
        );
        let reason = parked.properties.headers["x-acemq-error"]
            .as_str()
            .expect("x-acemq-error is text");
        assert!(reason.starts_with(error), "{content_type}: {reason}");
    }
    assert!(consumer.drain(LIMIT).await.is_clean());
    assert_eq!(env.count(&queue).await, 0);
}
polyq_testkit::both_brokers!(unreadable_bodies_are_parked_with_their_bytes);
