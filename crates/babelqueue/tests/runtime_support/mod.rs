//! What the runtime tests share: a scene on the test's broker, and a queue on the test's
//! binding, whose queues are removed at the end of the test even when it fails (the harness is
//! `polyq_testkit::brokers`).

#![allow(dead_code)]

use std::time::Duration;

use babelqueue::BabelQueue;
use babelqueue::transport::{
    AnyReceipt, AnyTransport, Capabilities, ConnectOptions, Health, RedisLayout, Reserved,
    Transport,
};
use babelqueue::worker::Job;
use bytes::Bytes;
use polyq_amqp::{Client, Delivery, OutgoingMessage, Properties};
use polyq_testkit::brokers::{Broker, TestBroker};
use tokio::sync::mpsc;

/// Upper bound for anything awaited in a test.
pub const PATIENCE: Duration = Duration::from_secs(10);
/// How long a bounded consume waits for one more message before it returns.
pub const IDLE: Duration = Duration::from_millis(500);

/// A queue with a unique name and a plain client beside it to look at the broker; the queue,
/// its dead-letter queue and the scene's other queues are deleted at the end of the test.
pub struct Scene {
    pub queue: BabelQueue,
    pub client: Client,
    broker: &'static TestBroker,
}

impl Scene {
    pub async fn new(broker: &'static TestBroker) -> Self {
        let name = broker.remember_queue(broker.name("bq-rt"));
        broker.remember_queue(format!("{name}.dlq"));
        let queue = BabelQueue::builder(broker.url())
            .queue(&name)
            .connect()
            .await
            .unwrap();
        let client = broker.connect().await;
        Self {
            queue,
            client,
            broker,
        }
    }

    pub fn name(&self) -> &str {
        self.queue.queue()
    }

    pub fn dlq(&self) -> String {
        format!("{}.dlq", self.name())
    }

    /// Another queue of this scene, deleted at the end.
    pub fn other(&self, suffix: &str) -> String {
        self.broker
            .remember_queue(format!("{}.{suffix}", self.name()))
    }

    /// Publishes raw bytes with raw properties, as a foreign producer would.
    pub async fn publish_raw(&self, queue: &str, properties: Properties, body: impl Into<Bytes>) {
        self.client
            .declare_queue(&polyq_amqp::QueueSpec::new(queue))
            .await
            .unwrap();
        let confirm = self
            .client
            .publish(OutgoingMessage::new("", queue, properties, body))
            .await
            .unwrap();
        assert_eq!(confirm.await.unwrap(), polyq_amqp::PublishOutcome::Acked);
    }

    /// Takes the next message of `queue`, waiting up to [`PATIENCE`], and acknowledges it.
    pub async fn take(&self, queue: &str) -> Delivery {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(delivery) = self.poll(queue).await {
                return delivery;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no message arrived on {queue} within {PATIENCE:?}"
            );
            tokio::task::yield_now().await;
        }
    }

    /// The next message of `queue` if one is ready now, acknowledged.
    pub async fn poll(&self, queue: &str) -> Option<Delivery> {
        match self.client.get(queue).await {
            Ok(Some(delivery)) => {
                delivery.ack().await.unwrap();
                Some(delivery)
            }
            Ok(None) | Err(polyq_amqp::Error::NotFound { .. }) => None,
            Err(error) => panic!("get from {queue}: {error}"),
        }
    }

    /// Asserts that `queue` holds nothing ready.
    pub async fn assert_empty(&self, queue: &str) {
        if let Some(delivery) = self.poll(queue).await {
            panic!(
                "{queue} should be empty but holds {}",
                String::from_utf8_lossy(&delivery.body)
            );
        }
    }
}

/// A queue with a unique name on the test's binding (`memory://`, RabbitMQ, or Redis in the
/// layout the broker's kind names), looked at only through the `Transport` trait, so the same
/// assertions hold on every binding. Its queues (RabbitMQ) or keys (Redis) are removed, and its
/// connection closed, when the test ends.
pub struct Bound {
    pub queue: BabelQueue,
}

impl Bound {
    /// A fresh queue on `broker` with default options.
    pub async fn new(broker: &'static TestBroker) -> Self {
        Self::with(broker, ConnectOptions::default()).await
    }

    /// A fresh queue on `broker` with `options` (the Redis layout is set from the broker's
    /// kind).
    pub async fn with(broker: &'static TestBroker, options: ConnectOptions) -> Self {
        // On Redis every key whose name holds the queue's goes: its dead-letter list too.
        let name = broker.remember_queue(broker.name("bq-bind"));
        Self {
            queue: connect(broker, &name, options).await,
        }
    }

    /// Another connection to this queue, as a second process would have: on RabbitMQ its
    /// consumer and prefetch window are its own, where clones of one transport share one.
    pub async fn another_connection(
        &self,
        broker: &'static TestBroker,
        options: ConnectOptions,
    ) -> BabelQueue {
        connect(broker, self.name(), options).await
    }

    /// Options whose Redis dead-letter suffix is `suffix`.
    #[cfg(feature = "redis")]
    pub fn dlq_suffix(suffix: &str) -> ConnectOptions {
        ConnectOptions::default()
            .redis(babelqueue::transport::redis::RedisOptions::new().dlq_suffix(suffix))
    }

    pub fn name(&self) -> &str {
        self.queue.queue()
    }

    pub fn transport(&self) -> &AnyTransport {
        self.queue.transport()
    }

    /// Takes the next message of `queue`, waiting up to [`PATIENCE`]; the caller settles it.
    pub async fn take(&self, queue: &str) -> Reserved<AnyReceipt> {
        let taken = self.transport().reserve(queue, PATIENCE).await.unwrap();
        taken.unwrap_or_else(|| panic!("no message arrived on {queue} within {PATIENCE:?}"))
    }

    /// Takes the next message of `queue` and acknowledges it.
    pub async fn take_and_ack(&self, queue: &str) -> Reserved<AnyReceipt> {
        let taken = self.take(queue).await;
        self.transport().ack(&taken.receipt).await.unwrap();
        taken
    }

    /// How many messages `queue` holds ready.
    pub async fn depth(&self, queue: &str) -> u64 {
        self.transport().depth(queue).await.unwrap()
    }
}

/// The body of a delivery, decoded.
pub fn envelope_of(delivery: &Delivery) -> babelqueue::Envelope {
    babelqueue::decode(&delivery.body).unwrap().envelope
}

/// The body as JSON.
pub fn json_of(delivery: &Delivery) -> serde_json::Value {
    serde_json::from_slice(&delivery.body).unwrap()
}

/// A handler that reports every job it receives and succeeds.
pub fn recorder() -> (
    impl Fn(Job) -> std::future::Ready<Result<(), String>> + Send + Sync + 'static,
    mpsc::UnboundedReceiver<Job>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        move |job: Job| {
            let _ = tx.send(job);
            std::future::ready(Ok(()))
        },
        rx,
    )
}

/// A transport whose chosen operations refuse to work (publishes to one queue, acks,
/// dead-letter writes); everything else is `inner`'s.
pub struct Refusing<T> {
    pub inner: T,
    /// Publishes to this queue fail.
    pub publish_to: Option<String>,
    pub ack: bool,
    pub dead_letter: bool,
}

impl<T> Refusing<T> {
    /// `inner` with nothing refused yet.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            publish_to: None,
            ack: false,
            dead_letter: false,
        }
    }

    fn refused(queue: &str) -> babelqueue::Error {
        babelqueue::Error::NotPublished {
            queue: queue.to_owned(),
            why: "refused by the test".to_owned(),
        }
    }
}

impl<T: Transport> Transport for Refusing<T> {
    type Receipt = T::Receipt;

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn publish(
        &self,
        queue: &str,
        body: Bytes,
        headers: &[(String, String)],
    ) -> babelqueue::Result<()> {
        if self.publish_to.as_deref() == Some(queue) {
            return Err(Self::refused(queue));
        }
        self.inner.publish(queue, body, headers).await
    }

    async fn reserve(
        &self,
        queue: &str,
        wait: Duration,
    ) -> babelqueue::Result<Option<Reserved<Self::Receipt>>> {
        self.inner.reserve(queue, wait).await
    }

    async fn ack(&self, receipt: &Self::Receipt) -> babelqueue::Result<()> {
        if self.ack {
            return Err(Self::refused("ack"));
        }
        self.inner.ack(receipt).await
    }

    async fn retry(
        &self,
        receipt: &Self::Receipt,
        queue: &str,
        body: Bytes,
        headers: &[(String, String)],
        delay: Duration,
    ) -> babelqueue::Result<()> {
        self.inner.retry(receipt, queue, body, headers, delay).await
    }

    async fn release(&self, receipt: &Self::Receipt, delay: Duration) -> babelqueue::Result<()> {
        self.inner.release(receipt, delay).await
    }

    async fn move_to_end(&self, receipt: &Self::Receipt) -> babelqueue::Result<()> {
        self.inner.move_to_end(receipt).await
    }

    async fn move_all_to_end(&self, receipts: &[&Self::Receipt]) -> Vec<babelqueue::Result<()>> {
        self.inner.move_all_to_end(receipts).await
    }

    async fn depth(&self, queue: &str) -> babelqueue::Result<u64> {
        self.inner.depth(queue).await
    }

    async fn dead_letter(
        &self,
        receipt: &Self::Receipt,
        dlq: &str,
        body: Bytes,
    ) -> babelqueue::Result<()> {
        if self.dead_letter {
            return Err(Self::refused(dlq));
        }
        self.inner.dead_letter(receipt, dlq, body).await
    }

    fn schema_version(&self, receipt: &Self::Receipt) -> Option<String> {
        self.inner.schema_version(receipt)
    }

    fn reservation_limit(&self) -> Option<usize> {
        self.inner.reservation_limit()
    }

    fn health(&self) -> Option<Health> {
        self.inner.health()
    }

    fn health_watch(&self) -> Option<tokio::sync::watch::Receiver<Health>> {
        self.inner.health_watch()
    }

    async fn unsubscribe(&self, queue: &str) -> babelqueue::Result<()> {
        self.inner.unsubscribe(queue).await
    }
}

/// The interpreter of the Python peer: `POLYQ_PYTHON`, which `scripts/test` sets up.
pub fn python() -> String {
    std::env::var("POLYQ_PYTHON").unwrap_or_else(|_| {
        panic!(
            "POLYQ_PYTHON is not set: run scripts/test (which sets it), or scripts/python-peer and \
             export POLYQ_PYTHON=$PWD/.venv/bin/python"
        )
    })
}

/// Runs one command of `tests/python/<script>` with its JSON arguments and returns its JSON
/// answer, waiting at most a minute.
pub async fn python_peer(
    script: &str,
    command: &str,
    args: serde_json::Value,
) -> serde_json::Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(python())
            .arg(script)
            .arg(command)
            .arg(args.to_string())
            .output(),
    )
    .await
    .expect("the Python peer finishes within a minute")
    .unwrap_or_else(|error| panic!("cannot run the Python peer: {error}"));
    assert!(
        output.status.success(),
        "Python peer `{command}` failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "Python peer `{command}` printed no JSON ({error}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// A BabelQueue on `name` at `broker` (the Redis layout from the broker's kind), its dead-letter
/// queue and connection removed and closed when the test ends.
async fn connect(broker: &'static TestBroker, name: &str, options: ConnectOptions) -> BabelQueue {
    let layout = if broker.kind() == Broker::RedisLaravel {
        RedisLayout::Laravel
    } else {
        RedisLayout::Default
    };
    let queue = BabelQueue::builder(broker.url())
        .queue(name)
        .options(options.redis_layout(layout))
        .connect()
        .await
        .unwrap();
    if let AnyTransport::Amqp(amqp) = &**queue.transport() {
        broker.remember_queue(amqp.dead_letter_queue(name));
        broker.close_at_end(amqp.client().clone());
    }
    queue
}
