//! Runs one test body against RabbitMQ and against the embedded broker, with unique names and
//! removal of every queue the test declared, even when it fails.
//!
//! The managed exchanges `acemq.dlx` and `acemq.retry` are shared by every AceMQ consumer of a
//! broker (of any language) and are left in place on RabbitMQ; each memory:// test has its own
//! broker.

#![allow(dead_code)]

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::time::Duration;

use acemq::AceMq;
use futures_util::FutureExt as _;
use futures_util::StreamExt as _;
use polyq_amqp::{Client, ConsumeOptions, Delivery, QueueSpec};

/// Upper bound for anything a test awaits; reaching it fails the test.
pub const LIMIT: Duration = Duration::from_secs(20);

/// One test's connection and the queues it declared.
pub struct Env {
    pub url: String,
    pub mq: AceMq,
    queues: Mutex<Vec<String>>,
}

impl Env {
    /// A source queue with a unique name; its `.dlq`, `.parked` and rungs are removed with it.
    pub async fn queue(&self, what: &str) -> String {
        let name = polyq_testkit::unique_name(&format!("acemq.rt.{what}"));
        self.declare(QueueSpec::new(name.clone())).await;
        name
    }

    /// Declares `spec` and remembers to delete it.
    pub async fn declare(&self, spec: QueueSpec) {
        self.mq
            .client()
            .declare_queue(&spec)
            .await
            .unwrap_or_else(|e| panic!("declare {}: {e}", spec.name));
        self.queues.lock().unwrap().push(spec.name);
    }

    /// The client underneath.
    pub fn client(&self) -> &Client {
        self.mq.client()
    }

    /// Waits for the next `n` messages in `queue` (a plain consumer, bounded by [`LIMIT`]) and
    /// acknowledges them.
    pub async fn take(&self, queue: &str, n: usize) -> Vec<Delivery> {
        let mut consumer = self
            .client()
            .consume(
                queue,
                &ConsumeOptions::default().prefetch(n.try_into().unwrap()),
            )
            .await
            .unwrap_or_else(|e| panic!("consume {queue}: {e}"));
        let mut taken = Vec::new();
        while taken.len() < n {
            let delivery = tokio::time::timeout(LIMIT, consumer.next())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "only {} of {n} messages reached {queue} in time",
                        taken.len()
                    )
                })
                .expect("consumer open")
                .expect("delivery");
            delivery.ack().await.expect("ack");
            taken.push(delivery);
        }
        consumer.cancel().await.expect("cancel");
        taken
    }

    /// The next message in `queue`, acknowledged.
    pub async fn next_in(&self, queue: &str) -> Delivery {
        self.take(queue, 1).await.pop().expect("one message")
    }

    /// Messages ready in `queue`.
    pub async fn count(&self, queue: &str) -> u32 {
        self.client()
            .inspect_queue(queue)
            .await
            .expect("inspect")
            .message_count
    }

    async fn cleanup(&self) {
        let cleaner = Client::connect(&self.url)
            .await
            .expect("connect to clean up");
        let queues: Vec<String> = std::mem::take(&mut *self.queues.lock().unwrap());
        for queue in queues {
            let mut related = vec![
                format!("{queue}.dlq"),
                format!("{queue}.parked"),
                format!("{queue}.retry.1s"),
                format!("{queue}.retry.500ms"),
            ];
            related.insert(0, queue);
            for name in related {
                match cleaner.delete_queue(&name).await {
                    Ok(_) | Err(polyq_amqp::Error::NotFound { .. }) => {}
                    Err(e) => panic!("delete {name}: {e}"),
                }
            }
        }
        self.mq.close().await.expect("close");
        cleaner.close().await.expect("close cleaner");
    }
}

/// Runs this test binary again as its ignored test `child_consumer`, with `env`, and waits (up
/// to [`LIMIT`]) for the child to print a line starting with `started`, returning the child
/// (killed when dropped) and the rest of that line.
pub async fn spawn_child_consumer(
    env: &[(&str, &str)],
    started: &str,
) -> (tokio::process::Child, String) {
    use tokio::io::{AsyncBufReadExt as _, BufReader};
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "child_consumer", "--nocapture"])
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the test binary runs again as the consumer");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let rest = tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix(started) {
                return rest.to_owned();
            }
        }
        panic!("the consumer process ended before its handler started");
    })
    .await
    .expect("the consumer process started handling the message in time");
    (child, rest)
}

/// A fresh embedded broker for one test.
pub fn memory_url() -> String {
    format!("memory://{}", polyq_testkit::unique_name("acemq-rt"))
}

/// Runs `body` against the broker at `url`, then removes what it declared.
pub async fn run<F, Fut>(url: String, body: F)
where
    F: FnOnce(&'static Env) -> Fut,
    Fut: Future<Output = ()>,
{
    let mq = AceMq::builder()
        .url(url.as_str())
        .client_name("acemq-runtime-test")
        .connect()
        .await
        .expect("connect");
    // Leaked so handlers and spawned tasks may borrow it; one small value per test.
    let env: &'static Env = Box::leak(Box::new(Env {
        url,
        mq,
        queues: Mutex::new(Vec::new()),
    }));
    let outcome = AssertUnwindSafe(body(env)).catch_unwind().await;
    env.cleanup().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// One test body, run against both brokers: `both!(name)` makes `name::memory` and
/// `name::rabbitmq` from `async fn name(env: &'static Env)`.
#[macro_export]
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                $crate::common::run($crate::common::memory_url(), super::$name).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn rabbitmq() {
                $crate::common::run(polyq_testkit::amqp_url(), super::$name).await;
            }
        }
    };
}
