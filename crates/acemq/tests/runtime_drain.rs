//! Drain: stop taking deliveries, let running handlers finish, give unhandled deliveries
//! back, and interrupt (giving back) what is still running at the deadline; on request, or
//! when a [`Shutdown`] asks for a stop: graceful, immediate, or by SIGTERM.

mod common;

use std::sync::Arc;
use std::time::Duration;

use acemq::{Consumer, Message, Shutdown};
use common::{Env, LIMIT};
use tokio::sync::{Notify, mpsc};

/// A consumer handling one delivery at a time (prefetch 10) whose handler reports each payload
/// as it starts, then waits to be released; made with the payloads `0..messages` published and
/// the handler of `0` started.
struct Held {
    consumer: Consumer,
    release: Arc<Notify>,
    started: mpsc::UnboundedReceiver<u32>,
}

impl Held {
    async fn start(env: &Env, queue: &str, messages: u32) -> Self {
        let release = Arc::new(Notify::new());
        let (started, mut started_rx) = mpsc::unbounded_channel();
        let consumer = env
            .mq
            .consumer::<u32>(queue)
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
            .publisher::<u32>("", queue)
            .send_all(0..messages)
            .await
            .unwrap();
        assert_eq!(next_started(&mut started_rx).await, Some(0));
        Self {
            consumer,
            release,
            started: started_rx,
        }
    }
}

/// The payload of the next handler to start.
async fn next_started(started: &mut mpsc::UnboundedReceiver<u32>) -> Option<u32> {
    tokio::time::timeout(LIMIT, started.recv()).await.unwrap()
}

/// The bodies of the next `n` messages in `queue`, sorted.
async fn left_in(env: &Env, queue: &str, n: usize) -> Vec<bytes::Bytes> {
    let mut left: Vec<_> = env
        .take(queue, n)
        .await
        .into_iter()
        .map(|d| d.body)
        .collect();
    left.sort();
    left
}

async fn drain_lets_the_running_handler_finish(env: &'static Env) {
    let queue = env.queue("drain").await;
    let Held {
        consumer,
        release,
        mut started,
    } = Held::start(env, &queue, 5).await;
    // The first poll of `drain` tells the consumer to stop before the handler is released,
    // so the handler's completion cannot let the next delivery in.
    let mut draining = Box::pin(consumer.drain(LIMIT));
    assert!(futures_util::poll!(&mut draining).is_pending());
    release.notify_one();
    let report = tokio::time::timeout(LIMIT, draining).await.unwrap();
    assert_eq!((report.completed, report.interrupted), (1, 0), "{report:?}");
    assert!(report.returned <= 4, "{report:?}");
    assert!(
        started.try_recv().is_err(),
        "no handler started after the drain began"
    );

    // Everything not handled is back in the queue.
    assert_eq!(left_in(env, &queue, 4).await, [&b"1"[..], b"2", b"3", b"4"]);
}
polyq_testkit::both_brokers!(drain_lets_the_running_handler_finish);

async fn drain_interrupts_at_the_deadline(env: &'static Env) {
    let queue = env.queue("drain-deadline").await;
    let (consumer, _started) = start_never_finishing(env, &queue).await;
    let report = consumer.drain(Duration::from_millis(100)).await;
    assert_eq!((report.completed, report.interrupted), (0, 1), "{report:?}");
    given_back(env, &queue).await;
}
polyq_testkit::both_brokers!(drain_interrupts_at_the_deadline);

/// A consumer of `queue` whose handler never finishes, once its one delivery (`1`) started;
/// the receiver of its start reports must outlive it.
async fn start_never_finishing(env: &Env, queue: &str) -> (Consumer, mpsc::UnboundedReceiver<()>) {
    let (started, mut started_rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consume(queue, move |_: Message<u32>| {
            let started = started.clone();
            async move {
                started.send(()).unwrap();
                std::future::pending::<()>().await;
            }
        })
        .await
        .unwrap();
    env.mq.publisher::<u32>("", queue).send(&1).await.unwrap();
    tokio::time::timeout(LIMIT, started_rx.recv())
        .await
        .unwrap();
    (consumer, started_rx)
}

/// The interrupted delivery `1` is back in `queue`, given back rather than republished.
async fn given_back(env: &Env, queue: &str) {
    let back = env.next_in(queue).await;
    assert_eq!(&back.body[..], b"1");
    assert!(
        back.redelivered,
        "given back to the broker, not republished"
    );
}

/// How a test asks for the stop.
#[derive(Clone, Copy)]
enum Stop {
    /// `Shutdown::stop`.
    Asked,
    /// SIGTERM to the test's own process, heard by `Shutdown::on_signals`.
    #[cfg(unix)]
    Signal,
}

/// Held while a test listens for signals: every listener in the process hears every signal, so
/// the two brokers' runs take turns.
#[cfg(unix)]
static SIGNALS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `drain_on` leaves the consumer running until the stop, then drains: the running handler
/// finishes, the rest goes back.
async fn drains_on_the_stop(env: &'static Env, stop: Stop) {
    #[cfg(unix)]
    let _listening = match stop {
        Stop::Signal => Some(SIGNALS.lock().await),
        Stop::Asked => None,
    };
    let queue = env.queue("drain-on").await;
    let Held {
        consumer,
        release,
        mut started,
    } = Held::start(env, &queue, 5).await;

    let shutdown = match stop {
        Stop::Asked => Shutdown::new(),
        #[cfg(unix)]
        Stop::Signal => Shutdown::on_signals(),
    };
    let mut draining = Box::pin(consumer.drain_on(&shutdown, LIMIT));
    assert!(futures_util::poll!(&mut draining).is_pending());
    // Until the stop, the consumer carries on.
    release.notify_one();
    assert_eq!(next_started(&mut started).await, Some(1));

    match stop {
        Stop::Asked => shutdown.stop(),
        #[cfg(unix)]
        Stop::Signal => {
            let status = tokio::process::Command::new("kill")
                .arg("-TERM")
                .arg(std::process::id().to_string())
                .status()
                .await
                .unwrap();
            assert!(status.success());
        }
    }
    tokio::time::timeout(LIMIT, shutdown.stopping())
        .await
        .expect("the stop was asked for");
    // This poll sees the stop and tells the consumer to drain, before the handler finishes.
    assert!(futures_util::poll!(&mut draining).is_pending());
    release.notify_one();
    let report = tokio::time::timeout(LIMIT, draining).await.unwrap();
    assert_eq!((report.completed, report.interrupted), (1, 0), "{report:?}");
    assert!(report.is_clean(), "{report:?}");
    assert!(
        started.try_recv().is_err(),
        "no handler started after the stop"
    );
    assert_eq!(left_in(env, &queue, 3).await, [&b"2"[..], b"3", b"4"]);
}

async fn a_shutdown_drains_the_running_handler(env: &'static Env) {
    drains_on_the_stop(env, Stop::Asked).await;
}
polyq_testkit::both_brokers!(a_shutdown_drains_the_running_handler);

#[cfg(unix)]
async fn sigterm_drains_the_running_handler(env: &'static Env) {
    drains_on_the_stop(env, Stop::Signal).await;
}
#[cfg(unix)]
polyq_testkit::both_brokers!(sigterm_drains_the_running_handler);

async fn an_immediate_stop_interrupts_the_running_handler(env: &'static Env) {
    let queue = env.queue("drain-on-now").await;
    let (consumer, _started) = start_never_finishing(env, &queue).await;
    let shutdown = Shutdown::new();
    // A deadline far beyond LIMIT: only the immediate stop can end this drain in time.
    let mut draining = Box::pin(consumer.drain_on(&shutdown, 10 * LIMIT));
    shutdown.stop();
    assert!(futures_util::poll!(&mut draining).is_pending());
    shutdown.stop_now();
    let report = tokio::time::timeout(LIMIT, draining).await.unwrap();
    assert_eq!((report.completed, report.interrupted), (0, 1), "{report:?}");
    given_back(env, &queue).await;
}
polyq_testkit::both_brokers!(an_immediate_stop_interrupts_the_running_handler);
