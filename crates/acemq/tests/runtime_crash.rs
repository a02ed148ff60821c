//! On RabbitMQ: a consumer process killed with SIGKILL while its handler runs loses nothing;
//! the broker redelivers the message it held.
//!
//! The test runs this test binary again as the consumer process (the ignored test
//! `child_consumer`, selected by name), waits for it to report that its handler started,
//! kills it, and consumes the message itself.

mod common;

use acemq::{AceMq, Message};
use common::LIMIT;
use futures_util::StreamExt;
use polyq_amqp::{ConsumeOptions, QueueSpec};

const QUEUE_VAR: &str = "ACEMQ_CRASH_TEST_QUEUE";
const STARTED: &str = "handler started: ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_handler_loses_nothing() {
    let url = polyq_testkit::amqp_url();
    let mq = AceMq::connect(&url).await.unwrap();
    let queue = polyq_testkit::unique_name("acemq.rt.crash");
    mq.client()
        .declare_queue(&QueueSpec::new(queue.clone()))
        .await
        .unwrap();
    let sent = mq
        .publisher::<str>("", queue.as_str())
        .send("precious")
        .await
        .unwrap();

    let (mut child, handled) =
        common::spawn_child_consumer(&[(QUEUE_VAR, queue.as_str())], STARTED).await;
    assert_eq!(handled, sent.id());

    polyq_testkit::child::kill_9(&mut child).await;

    let mut consumer = mq
        .client()
        .consume(&queue, &ConsumeOptions::default())
        .await
        .unwrap();
    let again = tokio::time::timeout(LIMIT, consumer.next())
        .await
        .expect("redelivered in time")
        .unwrap()
        .unwrap();
    assert!(again.redelivered);
    assert_eq!(&again.body[..], br#""precious""#);
    assert_eq!(again.properties.message_id.as_deref(), Some(sent.id()));
    again.ack().await.unwrap();
    consumer.cancel().await.unwrap();
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
}

/// The consumer process of [`kill_9_mid_handler_loses_nothing`]: reports its handler started,
/// then blocks until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as the child process of kill_9_mid_handler_loses_nothing"]
async fn child_consumer() {
    let queue = std::env::var(QUEUE_VAR).expect("started by kill_9_mid_handler_loses_nothing");
    let mq = AceMq::connect(&polyq_testkit::amqp_url()).await.unwrap();
    let _consumer = mq
        .consume(queue.as_str(), |message: Message<String>| async move {
            println!("{STARTED}{}", message.envelope().id());
            std::future::pending::<()>().await;
        })
        .await
        .unwrap();
    std::future::pending::<()>().await;
}
