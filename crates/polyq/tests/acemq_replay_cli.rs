//! `polyq acemq peek` and `polyq acemq replay`, run as the built binary against RabbitMQ on a
//! message the library dead-lettered.

use std::time::Duration;

use acemq::{AceMq, Envelope, Message, Outcome};
use futures_util::StreamExt as _;
use polyq_amqp::{ConsumeOptions, Delivery, FieldValue, QueueSpec};
use serde_json::{Value, json};
use tokio::sync::mpsc;

mod common;
use common::{failure, polyq, success_lines};

/// Upper bound for anything awaited; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(20);

fn run(args: &[&str]) -> Vec<String> {
    success_lines(polyq(args), args)
}

/// What `replay --dry-run` says it would move from `queue`'s dead-letter queue. It reads the
/// messages, so it sees ones a peek just gave back, which a queue inspection may not yet.
fn would_move(url: &str, queue: &str) -> String {
    let args = [
        "acemq",
        "replay",
        "--url",
        url,
        "--queue",
        queue,
        "--dry-run",
    ];
    run(&args).join("\n")
}

/// The next message in `queue`, acknowledged.
async fn next_in(mq: &AceMq, queue: &str) -> Delivery {
    let mut consumer = mq
        .client()
        .consume(queue, &ConsumeOptions::default().prefetch(1))
        .await
        .unwrap();
    let delivery = tokio::time::timeout(LIMIT, consumer.next())
        .await
        .unwrap_or_else(|_| panic!("nothing reached {queue} in time"))
        .expect("consumer open")
        .expect("delivery");
    delivery.ack().await.unwrap();
    consumer.cancel().await.unwrap();
    delivery
}

/// Dead-letters one message from `queue` through a consumer whose handler rejects it.
async fn dead_letter_one(mq: &AceMq, queue: &str) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = mq
        .consumer::<Value>(queue)
        .start(move |message: Message<Value>| {
            let tx = tx.clone();
            async move {
                tx.send(message.into_payload()).unwrap();
                Outcome::reject("order 7 has no customer")
            }
        })
        .await
        .unwrap();
    mq.publisher::<Value>("", queue)
        .send(&json!({"order": 7}))
        .await
        .unwrap();
    let handled = tokio::time::timeout(LIMIT, rx.recv()).await.unwrap();
    assert_eq!(handled, Some(json!({"order": 7})));
    // The drain waits for the rejection to be settled into the dead-letter queue.
    assert!(consumer.drain(LIMIT).await.is_clean());
}

async fn scenario(url: &str, mq: &AceMq, queue: &str) {
    let dlq = format!("{queue}.dlq");
    mq.client()
        .declare_queue(&QueueSpec::new(queue))
        .await
        .unwrap();
    dead_letter_one(mq, queue).await;

    let args = [
        "acemq", "peek", "--url", url, "--queue", &dlq, "--count", "5",
    ];
    let lines = run(&args);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let peeked: Value = serde_json::from_str(&lines[0]).expect("one JSON object per line");
    assert_eq!(peeked["routing_key"], json!(dlq));
    let envelope = &peeked["envelope"];
    assert_eq!(envelope["payload"], json!({"order": 7}));
    assert_eq!(envelope["replay_count"], 0);
    let error = envelope["error"].as_str().expect("the dead-letter reason");
    assert!(error.contains("order 7 has no customer"), "{error}");

    // The peek gave it back, and a dry run moves nothing.
    let expected = format!("would move 1 message(s) from {dlq} to {queue} (the queue was drained)");
    assert_eq!(would_move(url, queue), expected);
    assert_eq!(would_move(url, queue), expected);

    let args = ["acemq", "replay", "--url", url, "--queue", queue];
    assert_eq!(
        run(&args),
        [format!(
            "moved 1 message(s) from {dlq} to {queue} (the queue was drained)"
        )]
    );
    assert_eq!(
        would_move(url, queue),
        format!("would move 0 message(s) from {dlq} to {queue} (the queue was drained)")
    );

    let replayed = next_in(mq, queue).await;
    assert_eq!(&replayed.body[..], br#"{"order":7}"#);
    let headers = &replayed.properties.headers;
    assert_eq!(
        headers["acemq-replayed-from"],
        FieldValue::from(dlq.as_str())
    );
    assert_eq!(headers["acemq-replay-count"], FieldValue::I32(1));
    let envelope = Envelope::from_properties(&replayed.properties, &replayed.routing_key);
    assert_eq!(envelope.attempt(), 1);
    assert_eq!(envelope.replay_count(), 1);
    assert_eq!(envelope.replayed_from(), Some(dlq.as_str()));
    assert!(envelope.replayed_at().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peek_shows_a_dead_letter_and_replay_moves_it_back_stamped() {
    let url = polyq_testkit::amqp_url();
    let queue = polyq_testkit::unique_name("polyq.cli.replay");
    let mq = AceMq::connect(&url).await.unwrap();
    let outcome = tokio::spawn({
        let (url, mq, queue) = (url.clone(), mq.clone(), queue.clone());
        async move { scenario(&url, &mq, &queue).await }
    })
    .await;
    for name in [
        queue.clone(),
        format!("{queue}.dlq"),
        format!("{queue}.parked"),
    ] {
        match mq.client().delete_queue(&name).await {
            Ok(_) | Err(polyq_amqp::Error::NotFound { .. }) => {}
            Err(e) => panic!("delete {name}: {e}"),
        }
    }
    mq.close().await.unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
}

#[test]
fn bad_input_is_refused_with_what_was_wrong() {
    let url = polyq_testkit::amqp_url();
    let missing = polyq_testkit::unique_name("polyq.cli.replay.missing");

    let err = failure(&["acemq", "replay", "--url", &url, "--queue", &missing]);
    assert!(
        err.contains(&format!("--queue {missing}")) && err.contains(&format!("{missing}.dlq")),
        "{err}"
    );
    let dlq = format!("{missing}.dlq");
    let err = failure(&["acemq", "peek", "--url", &url, "--queue", &dlq]);
    assert!(err.contains(&format!("--queue {dlq}")), "{err}");

    let err = failure(&[
        "acemq", "peek", "--url", &url, "--queue", &dlq, "--count", "many",
    ]);
    assert!(err.contains("--count") && err.contains("many"), "{err}");
    let err = failure(&["acemq", "replay", "--url", &url]);
    assert!(err.contains("--queue"), "{err}");
    let err = failure(&[
        "acemq",
        "replay",
        "--url",
        "nats://127.0.0.1",
        "--queue",
        "q",
    ]);
    assert!(err.contains("--url"), "{err}");
}
