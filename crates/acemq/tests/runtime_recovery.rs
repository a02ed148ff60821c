//! On RabbitMQ: consumers and publishers carry on after the broker closes their connection, as
//! an operator's `rabbitmqctl close_connection` does. Only the test's own, uniquely named
//! connection is closed, so tests running at the same time are not touched.

mod common;

use std::time::Duration;

use acemq::{AceMq, Message};
use common::LIMIT;
use polyq_amqp::QueueSpec;
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_resume_after_the_broker_closes_the_connection() {
    let client_name = polyq_testkit::unique_name("acemq-recovery-test");
    let mq = AceMq::builder()
        .url(polyq_testkit::amqp_url())
        .client_name(client_name.as_str())
        .recovery_wait(Duration::from_secs(30))
        .connect()
        .await
        .unwrap();
    let queue = polyq_testkit::unique_name("acemq.rt.recovery");
    mq.client()
        .declare_queue(&QueueSpec::new(queue.clone()))
        .await
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = mq
        .consume(queue.as_str(), move |message: Message<u32>| {
            let tx = tx.clone();
            async move {
                tx.send(*message.payload()).unwrap();
            }
        })
        .await
        .unwrap();
    let publisher = mq.publisher::<u32>("", queue.as_str());
    publisher.send(&1).await.unwrap();
    assert_eq!(
        tokio::time::timeout(LIMIT, rx.recv()).await.unwrap(),
        Some(1)
    );

    let closed = polyq_testkit::rabbitmq::close_connections_named(&client_name).await;
    assert_eq!(closed, 1, "the broker closed the service's one connection");

    // The publish waits for the recovered connection; the re-created consumer handles it.
    // A publish whose confirm was lost with the connection is sent again.
    let mut sent = false;
    for _ in 0..5 {
        match publisher.send(&2).await {
            Ok(_) => {
                sent = true;
                break;
            }
            Err(error) if error.may_have_been_published() => continue,
            Err(error) => panic!("publish after recovery failed: {error}"),
        }
    }
    assert!(sent, "published after recovery");
    let mut seen = Vec::new();
    while !seen.contains(&2) {
        seen.push(
            tokio::time::timeout(LIMIT, rx.recv())
                .await
                .expect("consumer resumed")
                .unwrap(),
        );
    }
    assert!(seen.iter().all(|n| *n == 1 || *n == 2), "{seen:?}");
    assert!(consumer.drain(LIMIT).await.interrupted == 0);
    for name in [
        queue.clone(),
        format!("{queue}.dlq"),
        format!("{queue}.parked"),
    ] {
        mq.client().delete_queue(&name).await.unwrap();
    }
    mq.close().await.unwrap();
}
