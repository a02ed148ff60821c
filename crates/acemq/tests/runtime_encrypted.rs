//! Encrypted JSON through the runtime, on RabbitMQ and `memory://`: the ciphertext and its
//! content type survive retry, dead-lettering and replay unchanged (never re-encrypted); a
//! rotated key ring still reads messages written with the old key; a message whose key id is
//! unknown or whose tag does not verify is parked with its bytes and an error naming the key
//! id, never delivered.

mod common;

use std::sync::Arc;
use std::time::Duration;

use acemq::codec::Json;
use acemq::codec::encrypted::{ENCRYPTED_CONTENT_TYPE, Encrypted, seal};
use acemq::codec::keyring::KeyRing;
use acemq::patterns::replay::Replay;
use acemq::retry::RetryPolicy;
use acemq::{Envelope, Message};
use common::{Env, LIMIT};
use polyq_amqp::{Delivery, FieldValue, OutgoingMessage, Properties};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const OLD_KEY: [u8; 32] = [0x11; 32];
const NEW_KEY: [u8; 32] = [0x22; 32];

fn old_ring() -> Arc<KeyRing> {
    Arc::new(KeyRing::new("orders-2026-06", &OLD_KEY).unwrap())
}

/// The ring after rotation: a new current key, the old one kept for reading.
fn rotated_ring() -> Arc<KeyRing> {
    Arc::new(
        KeyRing::new("orders-2026-09", &NEW_KEY)
            .unwrap()
            .with_key("orders-2026-06", &OLD_KEY)
            .unwrap(),
    )
}

fn error_of(delivery: &Delivery) -> String {
    delivery.properties.headers["x-acemq-error"]
        .as_str()
        .expect("x-acemq-error is text")
        .to_owned()
}

/// Publishes `body` as an encrypted AceMQ message through the transport client.
async fn publish_raw(env: &Env, queue: &str, id: &str, body: Vec<u8>) {
    let mut properties = Properties::default().with_content_type(ENCRYPTED_CONTENT_TYPE);
    properties
        .headers
        .insert("x-acemq-id".into(), FieldValue::from(id));
    env.client()
        .publish(OutgoingMessage::new("", queue, properties, body))
        .await
        .unwrap()
        .await
        .unwrap();
}

async fn ciphertext_survives_retry_dead_letter_and_replay(env: &'static Env) {
    let queue = env.queue("encrypted-hops").await;
    // Written before the rotation, with the old key.
    let original = seal(&old_ring(), br#"{"order":"o-1","card":"4111"}"#).unwrap();
    publish_raw(env, &queue, "m-1", original.clone()).await;

    // Read after the rotation: the failing handler sees the plaintext on every attempt.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer_with::<Value>(queue.as_str(), Encrypted::new(Json, rotated_ring()))
        .retry(RetryPolicy::fixed(2, Duration::from_millis(10)).unwrap())
        .start(move |message: Message<Value>| {
            let tx = tx.clone();
            async move {
                tx.send((message.envelope().attempt(), message.payload().clone()))
                    .unwrap();
                Err::<(), _>("card store down")
            }
        })
        .await
        .unwrap();
    for attempt in 1..=2 {
        let (seen, payload) = tokio::time::timeout(LIMIT, rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(seen, attempt);
        assert_eq!(payload, json!({"order": "o-1", "card": "4111"}));
    }
    assert!(consumer.drain(LIMIT).await.is_clean());
    assert_eq!(env.count(&format!("{queue}.dlq")).await, 1);

    // Replayed from the dead-letter queue: the very bytes written, never re-encrypted.
    let report = Replay::dead_letters(&env.mq, &queue).run().await.unwrap();
    assert_eq!(report.moved, 1);
    let replayed = env.next_in(&queue).await;
    assert_eq!(
        &replayed.body[..],
        &original[..],
        "the same bytes after every hop"
    );
    assert_eq!(
        replayed.properties.content_type.as_deref(),
        Some(ENCRYPTED_CONTENT_TYPE)
    );
    let envelope = Envelope::from_properties(&replayed.properties, &replayed.routing_key);
    assert_eq!(envelope.id(), "m-1");
    assert_eq!(envelope.replay_count(), 1);

    // The library's publisher, still on the old ring, and a consumer on the rotated one.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer_with::<Value>(queue.as_str(), Encrypted::new(Json, rotated_ring()))
        .start(move |message: Message<Value>| {
            let tx = tx.clone();
            async move {
                tx.send(message.payload().clone()).unwrap();
            }
        })
        .await
        .unwrap();
    env.mq
        .publisher_with::<Value, _>("", queue.as_str(), Encrypted::new(Json, old_ring()))
        .send(&json!({"order": "o-5"}))
        .await
        .unwrap();
    let payload = tokio::time::timeout(LIMIT, rx.recv()).await.unwrap();
    assert_eq!(payload, Some(json!({"order": "o-5"})));
    assert!(consumer.drain(LIMIT).await.is_clean());
    assert_eq!(env.count(&format!("{queue}.parked")).await, 0);
}
polyq_testkit::both_brokers!(ciphertext_survives_retry_dead_letter_and_replay);

async fn unknown_keys_and_forged_tags_are_parked_with_their_bytes(env: &'static Env) {
    let queue = env.queue("encrypted-parked").await;
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let consumer = env
        .mq
        .consumer_with::<Value>(queue.as_str(), Encrypted::new(Json, old_ring()))
        .retry(RetryPolicy::fixed(3, Duration::from_millis(10)).unwrap())
        .start(move |message: Message<Value>| {
            let tx = tx.clone();
            async move {
                tx.send(message.payload().clone()).unwrap();
            }
        })
        .await
        .unwrap();

    let unknown = KeyRing::new("orders-2027-01", &NEW_KEY).unwrap();
    let unknown_body = seal(&unknown, br#"{"order":"o-2"}"#).unwrap();
    publish_raw(env, &queue, "unknown-key", unknown_body.clone()).await;
    let parked = env.next_in(&format!("{queue}.parked")).await;
    assert_eq!(&parked.body[..], &unknown_body[..], "original bytes");
    assert_eq!(
        parked.properties.content_type.as_deref(),
        Some(ENCRYPTED_CONTENT_TYPE)
    );
    assert_eq!(
        error_of(&parked),
        "could not be decoded: encrypted with key `orders-2027-01`, which is not in the key ring \
         (it holds orders-2026-06): either the key was retired while messages written with it \
         were still queued, or the message came from a service with another key ring"
    );

    let mut forged = seal(&old_ring(), br#"{"order":"o-3"}"#).unwrap();
    let last = forged.len() - 1;
    forged[last] ^= 0x01;
    publish_raw(env, &queue, "forged-tag", forged.clone()).await;
    let parked = env.next_in(&format!("{queue}.parked")).await;
    assert_eq!(&parked.body[..], &forged[..], "original bytes");
    let error = error_of(&parked);
    assert_eq!(
        error,
        "could not be decoded: did not decrypt with key `orders-2026-06`: either that is not the \
         key it was written with, or the message was altered after it was written"
    );
    assert!(!error.contains("1111") && !error.contains("o-3"));

    // A good message after them is delivered: the consumer carried on.
    publish_raw(
        env,
        &queue,
        "good",
        seal(&old_ring(), br#"{"order":"o-4"}"#).unwrap(),
    )
    .await;
    let delivered = tokio::time::timeout(LIMIT, rx.recv()).await.unwrap();
    assert_eq!(delivered, Some(json!({"order": "o-4"})));
    assert!(
        rx.try_recv().is_err(),
        "the parked messages never reached the handler"
    );
    assert!(consumer.drain(LIMIT).await.is_clean());
    assert_eq!(env.count(&format!("{queue}.dlq")).await, 0);
}
polyq_testkit::both_brokers!(unknown_keys_and_forged_tags_are_parked_with_their_bytes);
