//! The RabbitMQ binding (reference §3.3), one type for `amqp://`, `amqps://` and the embedded
//! `memory://` broker, both reached through [`polyq_amqp::Client`].
//!
//! Topology is what every other SDK declares, so their declarations and ours always agree: the
//! default exchange, routing key = queue name, durable queues with no arguments, `<queue>.dlq`
//! beside each. Delays (retry backoff, delayed releases), which the upstream RabbitMQ SDKs cannot
//! do, use one extra queue per delay, `<queue>.delay.<ms>`: durable, `x-message-ttl` = the delay,
//! `x-dead-letter-exchange` `""` and `x-dead-letter-routing-key` `<queue>`, so an expired message
//! lands back on the work queue; `x-expires` (the delay plus one minute) removes a delay queue
//! nobody has used for that long, so jittered delays do not leave queues behind.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use futures_util::future::join_all;
use polyq_amqp::{
    Acker, Client, ClientOptions, Confirm, ConsumeOptions, Consumer, FieldValue, OutgoingMessage,
    Properties, PublishOutcome, QueueSpec,
};
use tracing::{debug, warn};

use super::{Capabilities, Headers, Health, Reserved, TlsOptions, Transport};
use crate::projection;
use crate::{Error, Result};

/// The contract headers of the property projection; every other header is out-of-band.
const CONTRACT_HEADERS: [&str; 3] = ["x-schema-version", "x-source-lang", "x-attempts"];
/// How long an unused delay queue outlives its delay.
const DELAY_QUEUE_EXPIRY: Duration = Duration::from_secs(60);
/// RabbitMQ's reply code for a mandatory message that matched no queue.
const NO_ROUTE: u16 = 312;

/// Options of the AMQP binding. Every setter documents its default.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AmqpOptions {
    /// Deliveries the broker hands one queue's consumer before they are settled. Default 100.
    pub prefetch: u16,
    /// Trusted authorities and client certificate of `amqps://`. Default: the system's roots,
    /// no client certificate.
    pub tls: TlsOptions,
    /// How long a publish whose confirm was lost with the connection is sent again after
    /// recovery (same message id and bytes; consumers dedupe on `meta.id`); the publish fails
    /// only once this passes, or when the broker nacks or returns it. `None` fails it at once.
    /// Default 30 s. Applies to [`AmqpTransport::connect_with`], not to a client passed to
    /// [`AmqpTransport::with_client`], which keeps its own setting.
    pub resend_lost: Option<Duration>,
}

/// The default of [`AmqpOptions::resend_lost`].
pub const DEFAULT_RESEND_LOST: Duration = Duration::from_secs(30);

impl Default for AmqpOptions {
    fn default() -> Self {
        Self {
            prefetch: 100,
            tls: TlsOptions::default(),
            resend_lost: Some(DEFAULT_RESEND_LOST),
        }
    }
}

impl AmqpOptions {
    /// Sets the prefetch window of each queue's consumer (default 100). A worker keeps at most
    /// this many messages in flight.
    pub fn prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Sets the TLS settings of `amqps://` (default: the system's roots, no client
    /// certificate). Connecting another URL with settings here fails.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// Sets how long a publish whose confirm was lost with the connection is sent again
    /// (default 30 s; `None` fails it at once), see [`AmqpOptions::resend_lost`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use babelqueue::transport::AmqpOptions;
    ///
    /// let options = AmqpOptions::default().resend_lost(Some(Duration::from_secs(120)));
    /// assert_eq!(options.resend_lost, Some(Duration::from_secs(120)));
    /// ```
    pub fn resend_lost(mut self, within: Option<Duration>) -> Self {
        self.resend_lost = within;
        self
    }
}

/// The RabbitMQ binding over [`polyq_amqp::Client`]: `amqp://` / `amqps://` and `memory://`.
/// Cheap to clone; clones share the connection and the consumers.
///
/// Consumes with `basic.consume` and a prefetch window (one consumer per queue, started on the
/// first [`Transport::reserve`]); every publish waits for the broker's confirm.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> babelqueue::Result<()> {
/// use std::time::Duration;
/// use babelqueue::transport::{AmqpTransport, Transport};
///
/// let transport = AmqpTransport::connect("memory://doc-amqp-transport").await?;
/// transport.publish("jobs", "{}".into(), &[]).await?;
/// let reserved = transport.reserve("jobs", Duration::from_secs(1)).await?.expect("a message");
/// assert_eq!(&reserved.body[..], b"{}");
/// transport.ack(&reserved.receipt).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AmqpTransport {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    options: AmqpOptions,
    declared: Mutex<HashSet<String>>,
    /// Held while a queue is declared, so that concurrent first publishes to it (a window of
    /// them) declare it once.
    declaring: tokio::sync::Mutex<()>,
    consumers: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Consumer>>>>,
}

impl std::fmt::Debug for AmqpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpTransport")
            .field("url", &self.inner.client.url())
            .field("options", &self.inner.options)
            .finish()
    }
}

/// Settles one AMQP reservation; keeps what a release republishes. Dropped without being
/// settled, it requeues its delivery at once ([`polyq_amqp::Acker`]'s drop).
#[derive(Debug)]
pub struct AmqpReceipt {
    acker: Acker,
    queue: String,
    // Boxed: receipts travel in enums and tasks, the properties are only read on release.
    properties: Box<Properties>,
    body: Bytes,
}

impl AmqpReceipt {
    /// The queue the message was reserved from.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The AMQP properties and headers it arrived with.
    pub fn properties(&self) -> &Properties {
        &self.properties
    }
}

impl AmqpTransport {
    /// Connects with default options.
    ///
    /// # Errors
    /// [`Error::Amqp`] when the URL is not `memory://`, `amqp://` or `amqps://`, or the broker
    /// cannot be reached.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, AmqpOptions::default()).await
    }

    /// Connects with the given options.
    ///
    /// # Errors
    /// As [`AmqpTransport::connect`].
    pub async fn connect_with(url: &str, options: AmqpOptions) -> Result<Self> {
        let client_options = ClientOptions::default()
            .tls(options.tls.clone())
            .resend_lost(options.resend_lost);
        Ok(Self::with_client(
            Client::connect_with(url, client_options).await?,
            options,
        ))
    }

    /// A binding over an existing client (its connection is shared).
    pub fn with_client(client: Client, options: AmqpOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                options,
                declared: Mutex::new(HashSet::new()),
                declaring: tokio::sync::Mutex::new(()),
                consumers: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The underlying client (for topology inspection and clean-up).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The delay queue that holds messages for `queue` for `delay` (whole milliseconds, at least
    /// one), then dead-letters them back to it.
    pub fn delay_queue_name(queue: &str, delay: Duration) -> String {
        format!("{queue}.delay.{}", delay_millis(delay))
    }

    async fn ensure_queue(&self, queue: &str) -> Result<()> {
        if self.declared().contains(queue) {
            return Ok(());
        }
        let _declaring = self.inner.declaring.lock().await;
        if self.declared().contains(queue) {
            return Ok(());
        }
        self.inner
            .client
            .declare_queue(&QueueSpec::new(queue))
            .await?;
        self.declared().insert(queue.to_owned());
        Ok(())
    }

    fn declared(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.inner
            .declared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The delay queue for `queue`.
    fn delay_queue(queue: &str, delay: Duration) -> QueueSpec {
        let millis = delay_millis(delay);
        let expires = millis.saturating_add(delay_millis(DELAY_QUEUE_EXPIRY));
        QueueSpec::new(Self::delay_queue_name(queue, delay))
            .argument("x-message-ttl", amqp_integer(millis))
            .argument("x-expires", amqp_integer(expires))
            .argument("x-dead-letter-exchange", FieldValue::from(""))
            .argument("x-dead-letter-routing-key", FieldValue::from(queue))
    }

    /// Publishes to a work or dead-letter queue and waits for the confirm; a queue deleted
    /// behind our back is declared again, once.
    async fn publish_confirmed(
        &self,
        queue: &str,
        properties: Properties,
        body: Bytes,
    ) -> Result<()> {
        self.ensure_queue(queue).await?;
        let message = OutgoingMessage::new("", queue, properties, body);
        match self.inner.client.publish(message.clone()).await?.await? {
            PublishOutcome::Returned(returned) if returned.reply_code == NO_ROUTE => {
                self.declared().remove(queue);
                self.ensure_queue(queue).await?;
                let outcome = self.inner.client.publish(message).await?.await?;
                confirmed(queue, outcome)
            }
            outcome => confirmed(queue, outcome),
        }
    }

    /// Publishes to `queue` now, or through its delay queue, declared on every use so that it
    /// does not expire while it holds a message.
    async fn publish_after(
        &self,
        queue: &str,
        properties: Properties,
        body: Bytes,
        delay: Duration,
    ) -> Result<()> {
        if delay.is_zero() {
            return self.publish_confirmed(queue, properties, body).await;
        }
        self.ensure_queue(queue).await?;
        let holding = Self::delay_queue(queue, delay);
        self.inner.client.declare_queue(&holding).await?;
        let message = OutgoingMessage::new("", &holding.name, properties, body);
        let outcome = self.inner.client.publish(message).await?.await?;
        confirmed(&holding.name, outcome)
    }

    /// Publishes the reserved message unchanged (body and properties) to the end of its queue,
    /// after `delay`, and waits for the confirm; the reservation is still to be settled.
    async fn copy_to_end(&self, receipt: &AmqpReceipt, delay: Duration) -> Result<()> {
        self.publish_after(
            &receipt.queue,
            (*receipt.properties).clone(),
            receipt.body.clone(),
            delay,
        )
        .await
    }

    /// Queues an unchanged copy of the reserved message (body and properties) for the end of its
    /// queue; the confirm is still to be awaited.
    async fn queue_copy(&self, receipt: &AmqpReceipt) -> Result<Confirm> {
        self.ensure_queue(&receipt.queue).await?;
        let message = OutgoingMessage::new(
            "",
            &receipt.queue,
            (*receipt.properties).clone(),
            receipt.body.clone(),
        );
        Ok(self.inner.client.publish(message).await?)
    }

    fn consumer(&self, queue: &str) -> Option<Arc<tokio::sync::Mutex<Consumer>>> {
        self.inner
            .consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(queue)
            .cloned()
    }

    async fn start_consumer(&self, queue: &str) -> Result<Arc<tokio::sync::Mutex<Consumer>>> {
        self.ensure_queue(queue).await?;
        let options = ConsumeOptions::default().prefetch(self.inner.options.prefetch);
        let consumer = self.inner.client.consume(queue, &options).await?;
        let mut consumers = self
            .inner
            .consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Two reservers may have raced to start one; the first one in is kept.
        Ok(consumers
            .entry(queue.to_owned())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(consumer)))
            .clone())
    }

    fn forget_consumer(&self, queue: &str) -> Option<Arc<tokio::sync::Mutex<Consumer>>> {
        self.inner
            .consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(queue)
    }
}

fn confirmed(queue: &str, outcome: PublishOutcome) -> Result<()> {
    match outcome {
        PublishOutcome::Acked => Ok(()),
        PublishOutcome::Nacked => Err(Error::NotPublished {
            queue: queue.to_owned(),
            why: "negative publisher confirm (the queue refused it: over its length limit, or on a cluster without a leader)"
                .to_owned(),
        }),
        PublishOutcome::Returned(returned) => Err(Error::NotPublished {
            queue: queue.to_owned(),
            why: format!("returned {} {}", returned.reply_code, returned.reply_text),
        }),
    }
}

fn delay_millis(delay: Duration) -> i64 {
    i64::try_from(delay.as_millis()).unwrap_or(i64::MAX).max(1)
}

fn amqp_integer(value: i64) -> FieldValue {
    i32::try_from(value).map_or(FieldValue::I64(value), FieldValue::I32)
}

/// The properties of a body written by this binding: the contract projection when it decodes,
/// the fixed content properties otherwise (a poison record, an undecodable raw body); the
/// out-of-band headers ride with either.
fn properties_for(body: &[u8], headers: &[(String, String)]) -> Properties {
    let out_of_band: Vec<(&str, &str)> = headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    match crate::decode(body) {
        Ok(decoded) => projection::rabbitmq_properties(&decoded.envelope, &out_of_band),
        Err(_) => {
            let mut props = Properties::default()
                .with_content_type(projection::CONTENT_TYPE)
                .persistent();
            props.app_id = Some(projection::APP_ID.to_owned());
            for (name, value) in out_of_band {
                if !name.is_empty() && !value.is_empty() {
                    props
                        .headers
                        .insert(name.to_owned(), FieldValue::from(value));
                }
            }
            props
        }
    }
}

/// Header values as text, as the Python SDK surfaces them; other types are not out-of-band
/// headers any SDK writes.
fn header_text(value: &FieldValue) -> Option<String> {
    value
        .as_str()
        .map(str::to_owned)
        .or_else(|| value.as_i64().map(|n| n.to_string()))
}

fn out_of_band(properties: &Properties) -> Headers {
    properties
        .headers
        .iter()
        .filter(|(name, _)| !CONTRACT_HEADERS.contains(&name.as_str()))
        .filter_map(|(name, value)| header_text(value).map(|text| (name.clone(), text)))
        .collect()
}

impl Transport for AmqpTransport {
    type Receipt = AmqpReceipt;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            delay: true,
            headers: true,
        }
    }

    async fn publish(&self, queue: &str, body: Bytes, headers: &[(String, String)]) -> Result<()> {
        let properties = properties_for(&body, headers);
        self.publish_confirmed(queue, properties, body).await
    }

    async fn reserve(&self, queue: &str, wait: Duration) -> Result<Option<Reserved<AmqpReceipt>>> {
        let consumer = match self.consumer(queue) {
            Some(consumer) => consumer,
            None => self.start_consumer(queue).await?,
        };
        let mut stream = consumer.lock().await;
        let next = match tokio::time::timeout(wait, stream.next()).await {
            Err(_elapsed) => return Ok(None),
            Ok(next) => next,
        };
        drop(stream);
        let delivery = match next {
            Some(Ok(delivery)) => delivery,
            Some(Err(error)) => {
                self.forget_consumer(queue);
                return Err(error.into());
            }
            None => {
                debug!(queue, "consumer ended; the next reserve starts another");
                self.forget_consumer(queue);
                return Ok(None);
            }
        };
        let broker_attempts = delivery
            .properties
            .headers
            .get("x-attempts")
            .and_then(FieldValue::as_i64);
        Ok(Some(Reserved {
            body: delivery.body.clone(),
            headers: out_of_band(&delivery.properties),
            broker_attempts,
            receipt: AmqpReceipt {
                acker: delivery.acker,
                queue: queue.to_owned(),
                properties: Box::new(delivery.properties),
                body: delivery.body,
            },
        }))
    }

    async fn ack(&self, receipt: &AmqpReceipt) -> Result<()> {
        Ok(receipt.acker.ack().await?)
    }

    async fn retry(
        &self,
        receipt: &AmqpReceipt,
        queue: &str,
        body: Bytes,
        headers: &[(String, String)],
        delay: Duration,
    ) -> Result<()> {
        let properties = properties_for(&body, headers);
        self.publish_after(queue, properties, body, delay).await?;
        Ok(receipt.acker.ack().await?)
    }

    /// Republishes the unchanged message (body and properties) to the end of its queue, through
    /// the delay queue when delayed, and acknowledges the original once the copy is confirmed,
    /// as the Go and Python SDKs release: a `basic.nack` with requeue would put it back at the
    /// head, where the consumer that released it meets it again before anything queued behind
    /// it. A copy that cannot be published leaves the delivery requeued in place (logged), so
    /// it is never held.
    async fn release(&self, receipt: &AmqpReceipt, delay: Duration) -> Result<()> {
        if let Err(error) = self.copy_to_end(receipt, delay).await {
            warn!(queue = %receipt.queue, %error, "could not republish a released message to the end of its queue; requeueing it in place");
            return Ok(receipt.acker.nack(true).await?);
        }
        Ok(receipt.acker.ack().await?)
    }

    /// Publishes a copy with the same body and properties, then acknowledges the original: a
    /// crash in between leaves both, never neither.
    async fn move_to_end(&self, receipt: &AmqpReceipt) -> Result<()> {
        self.copy_to_end(receipt, Duration::ZERO).await?;
        Ok(receipt.acker.ack().await?)
    }

    /// The copies are queued on the one publishing channel in the order given, so the broker
    /// appends them in that order, and their confirms are awaited together; each original is
    /// acknowledged once its own copy is confirmed. (A copy the client must send again after a
    /// lost connection may land out of order, never lost.)
    async fn move_all_to_end(&self, receipts: &[&AmqpReceipt]) -> Vec<Result<()>> {
        let mut queued = Vec::with_capacity(receipts.len());
        for receipt in receipts {
            queued.push(self.queue_copy(receipt).await);
        }
        join_all(
            queued
                .into_iter()
                .zip(receipts)
                .map(|(queued, receipt)| async move {
                    confirmed(&receipt.queue, queued?.await?)?;
                    Ok(receipt.acker.ack().await?)
                }),
        )
        .await
    }

    /// The passive declare's message count.
    async fn depth(&self, queue: &str) -> Result<u64> {
        match self.inner.client.inspect_queue(queue).await {
            Ok(info) => Ok(u64::from(info.message_count)),
            Err(polyq_amqp::Error::NotFound { .. }) => Ok(0),
            Err(error) => Err(error.into()),
        }
    }

    /// Publishes to the dead-letter queue with the headers the message came with (`traceparent`,
    /// `tracestate`, `bq-replay-bypass`), as the default Redis layout keeps them in its frame,
    /// then acknowledges.
    async fn dead_letter(&self, receipt: &AmqpReceipt, dlq: &str, body: Bytes) -> Result<()> {
        let properties = properties_for(&body, &out_of_band(&receipt.properties));
        self.publish_confirmed(dlq, properties, body).await?;
        Ok(receipt.acker.ack().await?)
    }

    /// The prefetch window: the broker delivers no more until some are settled (0 is
    /// unbounded).
    fn reservation_limit(&self) -> Option<usize> {
        Some(usize::from(self.inner.options.prefetch)).filter(|&prefetch| prefetch > 0)
    }

    fn health(&self) -> Option<Health> {
        Some(self.inner.client.health())
    }

    fn health_watch(&self) -> Option<tokio::sync::watch::Receiver<Health>> {
        Some(self.inner.client.health_watch())
    }

    async fn unsubscribe(&self, queue: &str) -> Result<()> {
        let Some(consumer) = self.forget_consumer(queue) else {
            return Ok(());
        };
        // Reservers still holding it finish their wait first; their deliveries stay valid.
        let consumer = Arc::try_unwrap(consumer).map_or_else(
            |_shared| {
                debug!(
                    queue,
                    "consumer still shared; it ends when the last reserver drops it"
                );
                None
            },
            |mutex| Some(mutex.into_inner()),
        );
        match consumer {
            Some(consumer) => Ok(consumer.cancel().await?),
            None => Ok(()),
        }
    }
}
