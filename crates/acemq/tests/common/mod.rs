//! The fixture of the runtime tests: an `AceMq` on the test's broker, and source queues whose
//! `.dlq`, `.parked` and rungs are removed with them at the end of the test, even when it fails
//! (the harness is `polyq_testkit::brokers`).
//!
//! The managed exchanges `acemq.dlx` and `acemq.retry` are shared by every AceMQ consumer of a
//! broker (of any language) and are left in place on RabbitMQ; each memory:// test has its own
//! broker.

#![allow(dead_code)]

use std::time::Duration;

use acemq::AceMq;
use futures_util::StreamExt as _;
use polyq_amqp::{Client, ConsumeOptions, Delivery, QueueSpec};
use polyq_testkit::brokers::{Fixture, TestBroker};

/// Upper bound for anything a test awaits; reaching it fails the test.
pub const LIMIT: Duration = Duration::from_secs(20);

/// One test's connection and the queues it declared.
pub struct Env {
    pub url: String,
    pub mq: AceMq,
    broker: TestBroker,
}

impl Fixture for Env {
    async fn set_up(broker: TestBroker) -> Self {
        let mq = AceMq::builder()
            .url(broker.url())
            .client_name("acemq-runtime-test")
            .connect()
            .await
            .expect("connect");
        Self {
            url: broker.url().to_owned(),
            mq,
            broker,
        }
    }

    fn broker(&self) -> &TestBroker {
        &self.broker
    }

    async fn tear_down(&self) {
        self.mq.close().await.expect("close");
    }
}

impl Env {
    /// A source queue with a unique name; its `.dlq`, `.parked` and rungs are removed with it.
    pub async fn queue(&self, what: &str) -> String {
        let name = self.broker.name(&format!("acemq.rt.{what}"));
        self.declare(QueueSpec::new(name.clone())).await;
        name
    }

    /// Declares `spec` and remembers to delete it, with the `.dlq`, `.parked` and rungs the
    /// runtime may make for it.
    pub async fn declare(&self, spec: QueueSpec) {
        self.mq
            .client()
            .declare_queue(&spec)
            .await
            .unwrap_or_else(|e| panic!("declare {}: {e}", spec.name));
        for related in [".dlq", ".parked", ".retry.1s", ".retry.500ms"] {
            self.broker
                .remember_queue(format!("{}{related}", spec.name));
        }
        self.broker.remember_queue(spec.name);
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
}

/// Runs this test binary again as its ignored test `child_consumer`, with `env`, and waits (up
/// to [`LIMIT`]) for the child to print a line starting with `started`, returning the child
/// (killed when dropped) and the rest of that line.
pub async fn spawn_child_consumer(
    env: &[(&str, &str)],
    started: &str,
) -> (tokio::process::Child, String) {
    spawn_child("child_consumer", env, started).await
}

/// [`spawn_child_consumer`] for the ignored test `test` of this binary.
pub async fn spawn_child(
    test: &str,
    env: &[(&str, &str)],
    started: &str,
) -> (tokio::process::Child, String) {
    polyq_testkit::child::spawn(test, env, started, LIMIT).await
}
