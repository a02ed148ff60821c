//! Setting messages aside: exhaustion and the age limit into `.dlq` with the reason, fatal
//! rejections straight to `.dlq`, undecodable bodies and handler parks into `.parked`, and a
//! panicking handler caught.

mod common;

use std::time::Duration;

use acemq::retry::RetryPolicy;
use acemq::time::OffsetDateTime;
use acemq::{Envelope, Message, Outcome};
use common::{Env, LIMIT};
use polyq_amqp::{FieldValue, OutgoingMessage, Properties};
use tokio::sync::mpsc;

fn error_of(properties: &Properties) -> String {
    properties.headers["x-acemq-error"]
        .as_str()
        .expect("x-acemq-error is text")
        .to_owned()
}

async fn exhaustion_dead_letters_with_the_error(env: &'static Env) {
    let queue = env.queue("exhausted").await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer::<u32>(queue.as_str())
        .retry(RetryPolicy::fixed(3, Duration::from_millis(10)).unwrap())
        .start(move |message: Message<u32>| {
            let tx = tx.clone();
            async move {
                tx.send(message.envelope().attempt()).unwrap();
                "x".parse::<u8>().map(drop)
            }
        })
        .await
        .unwrap();
    let sent = env
        .mq
        .publisher::<u32>("", queue.as_str())
        .send(&5)
        .await
        .unwrap();
    for attempt in 1..=3 {
        assert_eq!(
            tokio::time::timeout(LIMIT, rx.recv()).await.unwrap(),
            Some(attempt)
        );
    }
    let dead = env.next_in(&format!("{queue}.dlq")).await;
    assert_eq!(
        error_of(&dead.properties),
        "exhausted 3 attempts: ParseIntError: invalid digit found in string"
    );
    let envelope = Envelope::from_properties(&dead.properties, &dead.routing_key);
    assert_eq!((envelope.id(), envelope.attempt()), (sent.id(), 3));
    assert_eq!(envelope.first_seen(), sent.first_seen());
    assert_eq!(&dead.body[..], b"5");
    assert!(consumer.drain(LIMIT).await.is_clean());
    assert_eq!(env.count(&queue).await, 0);
}
polyq_testkit::both_brokers!(exhaustion_dead_letters_with_the_error);

async fn without_a_policy_one_failure_dead_letters(env: &'static Env) {
    let queue = env.queue("no-policy").await;
    let consumer = env
        .mq
        .consume(queue.as_str(), |_: Message<u32>| async {
            Err::<(), _>("boom")
        })
        .await
        .unwrap();
    env.mq
        .publisher::<u32>("", queue.as_str())
        .send(&1)
        .await
        .unwrap();
    let dead = env.next_in(&format!("{queue}.dlq")).await;
    assert_eq!(
        error_of(&dead.properties),
        "exhausted 1 attempts: Error: boom"
    );
    assert!(consumer.drain(LIMIT).await.is_clean());
}
polyq_testkit::both_brokers!(without_a_policy_one_failure_dead_letters);

async fn fatal_goes_straight_to_the_dlq(env: &'static Env) {
    let queue = env.queue("fatal").await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer::<u32>(queue.as_str())
        .retry(RetryPolicy::fixed(5, Duration::from_millis(10)).unwrap())
        .start(move |message: Message<u32>| {
            let tx = tx.clone();
            async move {
                tx.send(message.envelope().attempt()).unwrap();
                Outcome::reject("order 9 does not exist")
            }
        })
        .await
        .unwrap();
    env.mq
        .publisher::<u32>("", queue.as_str())
        .send(&9)
        .await
        .unwrap();
    let dead = env.next_in(&format!("{queue}.dlq")).await;
    assert_eq!(
        error_of(&dead.properties),
        "the handler reported an unprocessable message: Error: order 9 does not exist"
    );
    assert_eq!(rx.recv().await, Some(1));
    assert!(rx.try_recv().is_err(), "a fatal message is not retried");
    assert!(consumer.drain(LIMIT).await.is_clean());
}
polyq_testkit::both_brokers!(fatal_goes_straight_to_the_dlq);

async fn a_panicking_handler_is_caught(env: &'static Env) {
    let queue = env.queue("panic").await;
    let consumer = env
        .mq
        .consumer::<u32>(queue.as_str())
        .retry(RetryPolicy::fixed(5, Duration::from_millis(10)).unwrap())
        .start(|message: Message<u32>| async move {
            if *message.payload() == 1 {
                panic!("handler bug");
            }
        })
        .await
        .unwrap();
    let publisher = env.mq.publisher::<u32>("", queue.as_str());
    publisher.send(&1).await.unwrap();
    let dead = env.next_in(&format!("{queue}.dlq")).await;
    assert_eq!(
        error_of(&dead.properties),
        "the handler panicked: handler bug"
    );
    // The consumer is still alive.
    publisher.send(&2).await.unwrap();
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
}
polyq_testkit::both_brokers!(a_panicking_handler_is_caught);

async fn undecodable_is_parked_with_its_bytes(env: &'static Env) {
    let queue = env.queue("undecodable").await;
    let consumer = env
        .mq
        .consume(queue.as_str(), |message: Message<u32>| async move {
            assert_eq!(
                *message.payload(),
                u32::MAX,
                "never called for an undecodable body"
            );
        })
        .await
        .unwrap();
    let body: &[u8] = &[b'{', 0xff, 0x00, b'x'];
    let mut properties = Properties::default().with_content_type("application/json");
    properties
        .headers
        .insert("x-acemq-id".into(), FieldValue::from("m-1"));
    properties
        .headers
        .insert("x-tenant".into(), FieldValue::from("acme"));
    properties.delivery_mode = Some(2);
    let confirm = env
        .client()
        .publish(OutgoingMessage::new(
            "",
            queue.as_str(),
            properties.clone(),
            body.to_vec(),
        ))
        .await
        .unwrap();
    confirm.await.unwrap();
    let parked = env.next_in(&format!("{queue}.parked")).await;
    assert_eq!(&parked.body[..], body, "original bytes");
    let error = error_of(&parked.properties);
    assert!(
        error.starts_with("could not be decoded: invalid JSON"),
        "{error}"
    );
    let mut without_error = parked.properties.clone();
    without_error.headers.remove("x-acemq-error");
    assert_eq!(without_error, properties, "original properties");

    // A content type no decoder reads is parked too.
    let xml = Properties::default().with_content_type("application/xml");
    env.client()
        .publish(OutgoingMessage::new("", queue.as_str(), xml, "<a/>"))
        .await
        .unwrap()
        .await
        .unwrap();
    let parked = env.next_in(&format!("{queue}.parked")).await;
    assert_eq!(
        error_of(&parked.properties),
        "could not be decoded: no codec reads content type `application/xml`"
    );
    assert!(consumer.drain(LIMIT).await.is_clean());
}
polyq_testkit::both_brokers!(undecodable_is_parked_with_its_bytes);

async fn a_handler_can_park(env: &'static Env) {
    let queue = env.queue("park").await;
    let consumer = env
        .mq
        .consume(queue.as_str(), |_: Message<String>| async {
            Outcome::park("schema 3 is not supported")
        })
        .await
        .unwrap();
    env.mq
        .publisher::<str>("", queue.as_str())
        .send("v3")
        .await
        .unwrap();
    let parked = env.next_in(&format!("{queue}.parked")).await;
    assert_eq!(
        error_of(&parked.properties),
        "the handler parked it: Error: schema 3 is not supported"
    );
    assert!(consumer.drain(LIMIT).await.is_clean());
}
polyq_testkit::both_brokers!(a_handler_can_park);

async fn the_age_limit_dead_letters(env: &'static Env) {
    let queue = env.queue("too-old").await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer::<u32>(queue.as_str())
        .retry(
            RetryPolicy::fixed(5, Duration::from_millis(10))
                .unwrap()
                .give_up_after(Duration::from_secs(60)),
        )
        .start(move |message: Message<u32>| {
            let tx = tx.clone();
            async move {
                tx.send(message.envelope().attempt()).unwrap();
                Err::<(), _>("still failing")
            }
        })
        .await
        .unwrap();
    let old = Envelope::of("order.placed")
        .first_seen(OffsetDateTime::now_utc() - Duration::from_secs(3600))
        .build()
        .unwrap();
    env.mq
        .publisher::<u32>("", queue.as_str())
        .send_with(&1, old)
        .await
        .unwrap();
    let dead = env.next_in(&format!("{queue}.dlq")).await;
    assert_eq!(
        error_of(&dead.properties),
        "exceeded the maximum message age of 1m: Error: still failing"
    );
    assert_eq!(rx.recv().await, Some(1));
    assert!(
        rx.try_recv().is_err(),
        "a message past the age limit is not retried"
    );
    assert!(consumer.drain(LIMIT).await.is_clean());
}
polyq_testkit::both_brokers!(the_age_limit_dead_letters);

/// A message sent with a per-message TTL keeps it while it waits in its queue, but not in
/// `.dlq`: set aside with it, it would expire there and be lost. RabbitMQ's own dead-lettering
/// drops `expiration` for the same reason.
async fn a_message_set_aside_loses_its_expiration(env: &'static Env) {
    let queue = env.queue("expiring").await;
    let consumer = env
        .mq
        .consume(queue.as_str(), |_: Message<u32>| async {
            Outcome::reject("order 3 does not exist")
        })
        .await
        .unwrap();
    env.mq
        .publisher::<u32>("", queue.as_str())
        .expiring_after(Duration::from_secs(60))
        .send(&3)
        .await
        .unwrap();
    let dead = env.next_in(&format!("{queue}.dlq")).await;
    assert_eq!(&dead.body[..], b"3");
    assert_eq!(
        dead.properties.expiration, None,
        "a dead-lettered message must not expire in `.dlq`"
    );
    assert!(consumer.drain(LIMIT).await.is_clean());
}
polyq_testkit::both_brokers!(a_message_set_aside_loses_its_expiration);
