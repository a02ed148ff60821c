//! Messages with values no AMQP property can hold, as another port may legitimately send them:
//! an `x-acemq-id` over the 255 bytes of `message-id` is retried, dead-lettered and parked with
//! the id in its header and the property left out; a delivery the broker took but that cannot
//! be published back as it is (an `expiration` RabbitMQ reads but refuses on a publish from
//! polyq) is parked as it came, with the reason, instead of being held and tried forever.
//!
//! The Python peer is `POLYQ_PYTHON`, which `scripts/test` sets up (`scripts/python-peer`).

mod common;

use std::time::Duration;

use acemq::retry::RetryPolicy;
use acemq::{Message, Outcome};
use common::{Env, LIMIT};
use polyq_amqp::{FieldValue, OutgoingMessage, Properties};
use tokio::sync::mpsc;

/// An id of 300 bytes, as a Python or Go producer may set it.
fn long_id() -> String {
    format!("order-{}", "7".repeat(294))
}

async fn send_with_id(env: &Env, queue: &str, id: &str) {
    let mut properties = Properties::default()
        .with_content_type("application/json")
        .persistent();
    properties
        .headers
        .insert("x-acemq-id".into(), FieldValue::from(id));
    env.client()
        .publish(OutgoingMessage::new("", queue, properties, "7"))
        .await
        .unwrap()
        .await
        .unwrap();
}

fn text_header<'a>(properties: &'a Properties, name: &str) -> &'a str {
    properties.headers[name].as_str().expect("a text header")
}

async fn a_long_id_is_retried_then_dead_lettered(env: &'static Env) {
    let queue = env.queue("long-id").await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer::<u32>(queue.as_str())
        .retry(RetryPolicy::fixed(2, Duration::from_millis(10)).unwrap())
        .start(move |message: Message<u32>| {
            let tx = tx.clone();
            async move {
                let envelope = message.envelope();
                tx.send((envelope.attempt(), envelope.id().to_owned()))
                    .unwrap();
                Err::<(), _>("still failing")
            }
        })
        .await
        .unwrap();
    let id = long_id();
    send_with_id(env, &queue, &id).await;
    for attempt in 1..=2 {
        let seen = tokio::time::timeout(LIMIT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("attempt {attempt} never ran: the retry did not land"));
        assert_eq!(seen, Some((attempt, id.clone())));
    }
    let dead = env.next_in(&format!("{queue}.dlq")).await;
    assert_eq!(text_header(&dead.properties, "x-acemq-id"), id);
    assert_eq!(dead.properties.message_id, None, "the id does not fit");
    assert_eq!(
        text_header(&dead.properties, "x-acemq-error"),
        "exhausted 2 attempts: Error: still failing"
    );
    assert_eq!(&dead.body[..], b"7");
    assert!(consumer.drain(LIMIT).await.is_clean());
    assert_eq!(env.count(&queue).await, 0);
}

async fn a_long_id_can_be_parked(env: &'static Env) {
    let queue = env.queue("long-id-park").await;
    let consumer = env
        .mq
        .consume(queue.as_str(), |_: Message<u32>| async {
            Outcome::park("not today")
        })
        .await
        .unwrap();
    let id = long_id();
    send_with_id(env, &queue, &id).await;
    let parked = env.next_in(&format!("{queue}.parked")).await;
    assert_eq!(text_header(&parked.properties, "x-acemq-id"), id);
    assert_eq!(parked.properties.message_id, None);
    assert_eq!(&parked.body[..], b"7");
    assert!(consumer.drain(LIMIT).await.is_clean());
}

polyq_testkit::both_brokers!(
    a_long_id_is_retried_then_dead_lettered,
    a_long_id_can_be_parked
);

/// pika publishes an `expiration` of `+60000`, which RabbitMQ reads as a TTL and delivers as
/// it is, and which polyq refuses to publish (digits only, as the property is documented).
const PIKA_PUBLISH: &str = r#"
import sys, pika
queue = sys.argv[1]
connection = pika.BlockingConnection(pika.URLParameters(sys.argv[2]))
channel = connection.channel()
channel.confirm_delivery()
channel.basic_publish("", queue, b"7", pika.BasicProperties(
    content_type="application/json", delivery_mode=2, expiration="+60000",
    headers={"x-acemq-id": "m-plus", "x-tenant": "acme"}))
connection.close()
"#;

async fn a_message_that_cannot_be_published_back_is_parked_as_it_came(env: &'static Env) {
    let queue = env.queue("unsendable").await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer::<u32>(queue.as_str())
        .retry(RetryPolicy::fixed(3, Duration::from_millis(10)).unwrap())
        .start(move |message: Message<u32>| {
            let tx = tx.clone();
            async move {
                tx.send(message.envelope().attempt()).unwrap();
                Err::<(), _>("failing")
            }
        })
        .await
        .unwrap();
    let python = std::env::var("POLYQ_PYTHON").unwrap_or_else(|_| {
        panic!(
            "POLYQ_PYTHON is not set: run scripts/test (which sets it), or scripts/python-peer \
             and export POLYQ_PYTHON=$PWD/.venv/bin/python"
        )
    });
    let published = tokio::process::Command::new(python)
        .args(["-c", PIKA_PUBLISH, &queue, &env.url])
        .output()
        .await
        .expect("the Python peer runs");
    assert!(
        published.status.success(),
        "{}",
        String::from_utf8_lossy(&published.stderr)
    );
    let parked = env.next_in(&format!("{queue}.parked")).await;
    assert_eq!(&parked.body[..], b"7", "original bytes");
    let error = text_header(&parked.properties, "x-acemq-error");
    assert!(
        error.starts_with(&format!("could not be republished into `{queue}`: "))
            && error.contains("property `expiration` is `+60000`"),
        "{error}"
    );
    assert_eq!(text_header(&parked.properties, "x-acemq-id"), "m-plus");
    assert_eq!(text_header(&parked.properties, "x-tenant"), "acme");
    assert_eq!(
        parked.properties.headers.get("x-acemq-attempt"),
        None,
        "as it came: the attempt the retry would have written is not there"
    );
    assert_eq!(
        parked.properties.expiration, None,
        "a parked message does not expire"
    );
    assert_eq!(rx.recv().await, Some(1));
    assert!(rx.try_recv().is_err(), "the handler ran once");
    assert!(consumer.drain(LIMIT).await.is_clean());
    assert_eq!(env.count(&queue).await, 0);
}

polyq_testkit::both_brokers!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)] rabbitmq only;
    a_message_that_cannot_be_published_back_is_parked_as_it_came
);

/// RabbitMQ refuses a publish whose `user_id` is not the publishing connection's user, so a
/// message another user sent with its `user_id` could not be retried or set aside by this
/// connection if the property were carried: it is left out of every republish.
async fn a_message_from_another_user_is_moved_without_its_user_id(env: &'static Env) {
    let queue = env.queue("other-user").await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer::<u32>(queue.as_str())
        .retry(RetryPolicy::fixed(2, Duration::from_millis(10)).unwrap())
        .start(move |message: Message<u32>| {
            let tx = tx.clone();
            async move {
                tx.send(message.envelope().attempt()).unwrap();
                Err::<(), _>("failing")
            }
        })
        .await
        .unwrap();
    let user = polyq_testkit::rabbitmq::TestUser::create("acemq-other");
    let other = polyq_amqp::Client::connect(&user.url()).await.unwrap();
    let mut properties = Properties::default().with_content_type("application/json");
    properties.user_id = Some(user.name().to_owned());
    other
        .publish(OutgoingMessage::new("", queue.as_str(), properties, "7"))
        .await
        .unwrap()
        .await
        .unwrap();
    other.close().await.unwrap();
    for attempt in 1..=2 {
        let seen = tokio::time::timeout(LIMIT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("attempt {attempt} never ran: the retry did not land"));
        assert_eq!(seen, Some(attempt));
    }
    let dead = env.next_in(&format!("{queue}.dlq")).await;
    assert_eq!(&dead.body[..], b"7");
    assert_eq!(dead.properties.user_id, None);
    assert!(consumer.drain(LIMIT).await.is_clean());
}

polyq_testkit::both_brokers!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)] rabbitmq only;
    a_message_from_another_user_is_moved_without_its_user_id
);
