//! Drain: stop taking deliveries, let running handlers finish, give unhandled deliveries
//! back, and interrupt (giving back) what is still running at the deadline.

mod common;

use std::sync::Arc;
use std::time::Duration;

use acemq::Message;
use common::{Env, LIMIT};
use tokio::sync::{Notify, mpsc};

async fn drain_lets_the_running_handler_finish(env: &'static Env) {
    let queue = env.queue("drain").await;
    let release = Arc::new(Notify::new());
    let (started, mut started_rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer::<u32>(queue.as_str())
        .prefetch(10)
        .start({
            let release = release.clone();
            move |message: Message<u32>| {
                let (release, started) = (release.clone(), started.clone());
                async move {
                    started.send(*message.payload()).unwrap();
                    release.notified().await;
                }
            }
        })
        .await
        .unwrap();
    env.mq
        .publisher::<u32>("", queue.as_str())
        .send_all(0..5)
        .await
        .unwrap();
    assert_eq!(
        tokio::time::timeout(LIMIT, started_rx.recv())
            .await
            .unwrap(),
        Some(0)
    );
    // The first poll of `drain` tells the consumer to stop before the handler is released,
    // so the handler's completion cannot let the next delivery in.
    let mut draining = Box::pin(consumer.drain(LIMIT));
    assert!(futures_util::poll!(&mut draining).is_pending());
    release.notify_one();
    let report = tokio::time::timeout(LIMIT, draining).await.unwrap();
    assert_eq!((report.completed, report.interrupted), (1, 0), "{report:?}");
    assert!(report.returned <= 4, "{report:?}");
    assert!(
        started_rx.try_recv().is_err(),
        "no handler started after the drain began"
    );

    // Everything not handled is back in the queue.
    let mut left: Vec<_> = env
        .take(&queue, 4)
        .await
        .into_iter()
        .map(|d| d.body)
        .collect();
    left.sort();
    assert_eq!(left, [&b"1"[..], b"2", b"3", b"4"]);
}
polyq_testkit::both_brokers!(drain_lets_the_running_handler_finish);

async fn drain_interrupts_at_the_deadline(env: &'static Env) {
    let queue = env.queue("drain-deadline").await;
    let (started, mut started_rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consume(queue.as_str(), move |_: Message<u32>| {
            let started = started.clone();
            async move {
                started.send(()).unwrap();
                std::future::pending::<()>().await;
            }
        })
        .await
        .unwrap();
    env.mq
        .publisher::<u32>("", queue.as_str())
        .send(&1)
        .await
        .unwrap();
    tokio::time::timeout(LIMIT, started_rx.recv())
        .await
        .unwrap();
    let report = consumer.drain(Duration::from_millis(100)).await;
    assert_eq!((report.completed, report.interrupted), (0, 1), "{report:?}");
    let back = env.next_in(&queue).await;
    assert_eq!(&back.body[..], b"1");
    assert!(
        back.redelivered,
        "given back to the broker, not republished"
    );
}
polyq_testkit::both_brokers!(drain_interrupts_at_the_deadline);
