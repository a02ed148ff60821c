//! Pause and resume: a paused consumer takes nothing new (what arrives waits in the queue),
//! lets its running handler finish and acknowledge, drains cleanly, stays paused through a
//! reconnect, and after resume handles every waiting message exactly once.

mod common;

use std::sync::Arc;
use std::time::Duration;

use acemq::{AceMq, Message};
use common::{Env, LIMIT};
use polyq_amqp::{Health, QueueSpec};
use tokio::sync::{Notify, mpsc};
use tokio::time::timeout;

/// The next `n` values from `rx`, sorted, each bounded by [`LIMIT`].
async fn next_sorted(rx: &mut mpsc::UnboundedReceiver<u32>, n: usize) -> Vec<u32> {
    let mut values = Vec::with_capacity(n);
    for _ in 0..n {
        let value = timeout(LIMIT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {values:?} of {n} values came in time"))
            .expect("sender alive");
        values.push(value);
    }
    values.sort_unstable();
    values
}

/// A handler that reports each payload it handles on `seen`.
fn reporting(seen: mpsc::UnboundedSender<u32>) -> impl Fn(Message<u32>) -> std::future::Ready<()> {
    move |message: Message<u32>| {
        seen.send(*message.payload()).expect("test alive");
        std::future::ready(())
    }
}

async fn messages_wait_while_paused_and_are_handled_once_after_resume(env: &'static Env) {
    let queue = env.queue("pause").await;
    let (seen, mut handled) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consume(queue.as_str(), reporting(seen))
        .await
        .unwrap();
    consumer.pause().await;
    consumer.pause().await;

    env.mq
        .publisher::<u32>("", queue.as_str())
        .send_all(0..3)
        .await
        .unwrap();
    assert_eq!(env.count(&queue).await, 3, "nothing is taken while paused");
    assert!(handled.try_recv().is_err());

    consumer.resume().await.unwrap();
    consumer.resume().await.unwrap();
    assert_eq!(next_sorted(&mut handled, 3).await, [0, 1, 2]);
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
    assert!(handled.try_recv().is_err(), "each message handled once");
    assert_eq!(env.count(&queue).await, 0);
}
polyq_testkit::both_brokers!(messages_wait_while_paused_and_are_handled_once_after_resume);

async fn pause_lets_the_running_handler_finish_and_acknowledge(env: &'static Env) {
    let queue = env.queue("pause-running").await;
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
                    let value = *message.payload();
                    started.send(value).unwrap();
                    if value == 0 {
                        release.notified().await;
                    }
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
    assert_eq!(timeout(LIMIT, started_rx.recv()).await.unwrap(), Some(0));

    consumer.pause().await;
    assert_eq!(consumer.in_flight(), 1, "the running handler carries on");
    release.notify_one();
    assert!(
        started_rx.try_recv().is_err(),
        "no handler starts while paused"
    );

    // Message 0 was acknowledged by its handler: after resume only the four given back at the
    // pause come again, and nothing is left once they are handled.
    consumer.resume().await.unwrap();
    assert_eq!(next_sorted(&mut started_rx, 4).await, [1, 2, 3, 4]);
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
    assert!(started_rx.try_recv().is_err(), "each message handled once");
    assert_eq!(env.count(&queue).await, 0);
}
polyq_testkit::both_brokers!(pause_lets_the_running_handler_finish_and_acknowledge);

async fn a_paused_consumer_drains_cleanly(env: &'static Env) {
    let queue = env.queue("pause-drain").await;
    let (seen, mut handled) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consume(queue.as_str(), reporting(seen))
        .await
        .unwrap();
    consumer.pause().await;
    env.mq
        .publisher::<u32>("", queue.as_str())
        .send(&7)
        .await
        .unwrap();
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!((report.completed, report.returned), (0, 0), "{report:?}");
    assert!(handled.try_recv().is_err());
    assert_eq!(
        env.count(&queue).await,
        1,
        "the message waits for the next consumer"
    );
}
polyq_testkit::both_brokers!(a_paused_consumer_drains_cleanly);

/// On RabbitMQ, the broker closes this test's connection (and only it) while the consumer is
/// paused: the recovered connection re-creates the client's consumers, but not this one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_consumer_stays_paused_through_a_reconnect() {
    let connection_name = polyq_testkit::unique_name("acemq-pause-test");
    let mq = AceMq::builder()
        .url(polyq_testkit::amqp_url())
        .client_name(connection_name.as_str())
        .recovery_wait(Duration::from_secs(30))
        .connect()
        .await
        .unwrap();
    let queue = polyq_testkit::unique_name("acemq.rt.pause-reconnect");
    mq.client()
        .declare_queue(&QueueSpec::new(queue.clone()))
        .await
        .unwrap();
    let (seen, mut handled) = mpsc::unbounded_channel();
    let consumer = mq
        .consumer::<u32>(queue.as_str())
        .declare(false)
        .start(reporting(seen))
        .await
        .unwrap();
    consumer.pause().await;

    let mut health = mq.client().health_watch();
    let closed = polyq_testkit::rabbitmq::close_connections_named(&connection_name).await;
    assert_eq!(closed, 1);
    timeout(
        LIMIT,
        health.wait_for(|h| matches!(h, Health::Up { generation, .. } if *generation >= 1)),
    )
    .await
    .expect("reconnected in time")
    .expect("client alive");

    mq.publisher::<u32>("", queue.as_str())
        .send(&1)
        .await
        .unwrap();
    assert_eq!(
        mq.client()
            .inspect_queue(&queue)
            .await
            .unwrap()
            .message_count,
        1,
        "the recovered connection did not resume the paused consumer"
    );
    assert!(handled.try_recv().is_err());

    consumer.resume().await.unwrap();
    assert_eq!(next_sorted(&mut handled, 1).await, [1]);
    assert!(consumer.drain(LIMIT).await.is_clean());
    mq.client().delete_queue(&queue).await.unwrap();
    mq.close().await.unwrap();
}
