//! Protobuf, fixed-schema Avro and registered Avro through a real RabbitMQ and `memory://`:
//! published, consumed, failed by the handler, retried, dead-lettered and replayed from
//! `Q.dlq`, with the bytes and the content type the publisher wrote at every delivery; and a
//! registered body whose schema id the consumer's registry does not know, parked with its
//! bytes and read once the schema is registered and the message replayed.

mod common;

use std::fmt::Debug;
use std::sync::Mutex;
use std::time::Duration;

use acemq::Message;
use acemq::codec::{Avro, CodecError, Decode, Encode, Preparation, Protobuf};
use acemq::patterns::replay::Replay;
use acemq::retry::RetryPolicy;
use acemq::schema_registry::{InMemorySchemaStore, SchemaRegistry};
use bytes::Bytes;
use common::{Env, LIMIT};
use polyq_amqp::{Delivery, OutgoingMessage};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

const SCHEMA: &str = r#"{"type":"record","name":"OrderPlaced","namespace":"org.acemq.test","fields":[{"name":"orderId","type":"string"},{"name":"totalCents","type":"long"},{"name":"tenant","type":"string"}]}"#;

#[derive(Clone, PartialEq, prost::Message)]
struct OrderPlacedProto {
    #[prost(string, tag = "1")]
    order_id: String,
    #[prost(int64, tag = "2")]
    total_cents: i64,
    #[prost(string, tag = "3")]
    tenant: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderPlaced {
    order_id: String,
    total_cents: i64,
    tenant: String,
}

fn order() -> OrderPlaced {
    OrderPlaced {
        order_id: "o-1".into(),
        total_cents: 4250,
        tenant: "Ana Söderström".into(),
    }
}

/// A decoder reporting the content type and the bytes of every body it is given.
struct Recording<C> {
    codec: C,
    content_type: Mutex<Option<String>>,
    seen: mpsc::UnboundedSender<(Option<String>, Bytes)>,
}

impl<C> Recording<C> {
    fn new(codec: C) -> (Self, mpsc::UnboundedReceiver<(Option<String>, Bytes)>) {
        let (seen, rx) = mpsc::unbounded_channel();
        let recording = Self {
            codec,
            content_type: Mutex::new(None),
            seen,
        };
        (recording, rx)
    }
}

impl<T, C: Decode<T>> Decode<T> for Recording<C> {
    fn accepts(&self, content_type: Option<&str>) -> bool {
        *self.content_type.lock().unwrap() = content_type.map(str::to_owned);
        self.codec.accepts(content_type)
    }

    fn decode(&self, body: &Bytes) -> Result<T, CodecError> {
        let content_type = self.content_type.lock().unwrap().clone();
        self.seen.send((content_type, body.clone())).unwrap();
        self.codec.decode(body)
    }

    fn prepare(&self, body: &Bytes) -> Option<Preparation> {
        self.codec.prepare(body)
    }
}

/// The next message in `queue`, taken and put back as it was (properties, headers and body),
/// with the broker's confirm awaited.
async fn peek(env: &Env, queue: &str) -> Delivery {
    let delivery = env.next_in(queue).await;
    env.client()
        .publish(OutgoingMessage::new(
            "",
            queue,
            delivery.properties.clone(),
            delivery.body.clone(),
        ))
        .await
        .expect("published")
        .await
        .expect("confirmed");
    delivery
}

async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(LIMIT, rx.recv())
        .await
        .expect("in time")
        .expect("open")
}

/// Publishes `payload` with `writer`; a consumer reading with `reader` fails it twice, it is
/// dead-lettered, replayed, and read by a second consumer: every delivery has the bytes and
/// the content type the publisher wrote, and decodes to `payload`.
async fn survives_retry_dead_letter_and_replay<T, W, R>(
    env: &'static Env,
    what: &str,
    writer: W,
    reader: R,
    payload: T,
) where
    T: Clone + PartialEq + Debug + Send + Sync + 'static,
    W: Encode<T>,
    R: Decode<T> + Clone,
{
    let queue = env.queue(what).await;
    let body = writer.encode(&payload).unwrap();
    let written = (Some(writer.content_type().to_owned()), body.clone());
    let (recording, mut seen) = Recording::new(reader.clone());
    let (handled, mut attempts) = mpsc::unbounded_channel();
    let failing = env
        .mq
        .consumer_with(queue.as_str(), recording)
        .retry(RetryPolicy::fixed(2, Duration::from_millis(20)).unwrap())
        .start(move |message: Message<T>| {
            let handled = handled.clone();
            async move {
                handled
                    .send((message.envelope().attempt(), message.payload().clone()))
                    .unwrap();
                Err::<(), _>("refused")
            }
        })
        .await
        .expect("consumer starts");
    env.mq
        .publisher_with("", queue.as_str(), writer)
        .send(&payload)
        .await
        .expect("published");
    for attempt in 1..=2 {
        assert_eq!(next(&mut attempts).await, (attempt, payload.clone()));
        assert_eq!(next(&mut seen).await, written, "attempt {attempt}");
    }
    let report = failing.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(env.count(&format!("{queue}.dlq")).await, 1, "dead-lettered");

    let replayed = Replay::dead_letters(&env.mq, &queue).run().await.unwrap();
    assert_eq!(replayed.moved, 1);
    let (recording, mut seen) = Recording::new(reader);
    let (handled, mut resumed) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer_with(queue.as_str(), recording)
        .start(move |message: Message<T>| {
            let handled = handled.clone();
            async move {
                handled.send(message.payload().clone()).unwrap();
            }
        })
        .await
        .expect("consumer starts");
    assert_eq!(next(&mut resumed).await, payload);
    assert_eq!(next(&mut seen).await, written, "after the replay");
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
}

async fn protobuf_survives_every_hop(env: &'static Env) {
    let order = order();
    let payload = OrderPlacedProto {
        order_id: order.order_id,
        total_cents: order.total_cents,
        tenant: order.tenant,
    };
    survives_retry_dead_letter_and_replay(env, "protobuf", Protobuf, Protobuf, payload).await;
}
polyq_testkit::both_brokers!(protobuf_survives_every_hop);

async fn fixed_avro_survives_every_hop(env: &'static Env) {
    let avro = Avro::new(SCHEMA).unwrap();
    survives_retry_dead_letter_and_replay(env, "avro", avro.clone(), avro, order()).await;
}
polyq_testkit::both_brokers!(fixed_avro_survives_every_hop);

async fn registered_avro_survives_every_hop(env: &'static Env) {
    let store = InMemorySchemaStore::new();
    let writer = SchemaRegistry::new(store.clone())
        .codec(SCHEMA)
        .await
        .unwrap();
    // The consumer's own registry on the same store, with a reader schema of its own (the
    // same record, written differently, so another id): the writer's schema is fetched by id
    // on the first delivery.
    let reader = SchemaRegistry::new(store)
        .codec(&SCHEMA.replace(',', ", "))
        .await
        .unwrap();
    assert_ne!(reader.schema_id(), writer.schema_id());
    survives_retry_dead_letter_and_replay(env, "avro-registered", writer, reader, order()).await;
}
polyq_testkit::both_brokers!(registered_avro_survives_every_hop);

async fn an_unknown_schema_id_is_parked_with_its_bytes(env: &'static Env) {
    let queue = env.queue("avro-unknown-id").await;
    let producers = InMemorySchemaStore::new();
    producers.insert(42, SCHEMA).unwrap();
    let writer = SchemaRegistry::new(producers).codec(SCHEMA).await.unwrap();
    assert_eq!(writer.schema_id(), 42);
    let consumers = InMemorySchemaStore::new();
    // The consumer's registry holds only its own reader schema (the same record, written
    // differently), under id 1.
    let reader = SchemaRegistry::new(consumers.clone())
        .codec(&SCHEMA.replace(',', ", "))
        .await
        .unwrap();
    assert_eq!(reader.schema_id(), 1);

    let (handled, mut orders) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer_with(queue.as_str(), reader)
        .start(move |message: Message<OrderPlaced>| {
            let handled = handled.clone();
            async move {
                handled.send(message.payload().clone()).unwrap();
            }
        })
        .await
        .expect("consumer starts");
    env.mq
        .publisher_with("", queue.as_str(), writer.clone())
        .send(&order())
        .await
        .unwrap();
    let parked_queue = format!("{queue}.parked");
    let parked = peek(env, &parked_queue).await;
    assert_eq!(
        parked.body,
        writer.encode(&order()).unwrap(),
        "original bytes"
    );
    assert_eq!(
        parked.properties.content_type.as_deref(),
        Some("application/vnd.acemq.avro")
    );
    let error = parked.properties.headers["x-acemq-error"]
        .as_str()
        .expect("x-acemq-error is text");
    assert!(
        error.contains("schema id 42 is not in the schema registry"),
        "{error}"
    );
    assert!(orders.try_recv().is_err(), "the handler never ran");

    // Registered, then replayed: the same bytes now read.
    consumers.insert(42, SCHEMA).unwrap();
    let replayed = Replay::parked(&env.mq, &queue).run().await.unwrap();
    assert_eq!(replayed.moved, 1);
    assert_eq!(next(&mut orders).await, order());
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
}
polyq_testkit::both_brokers!(an_unknown_schema_id_is_parked_with_its_bytes);
