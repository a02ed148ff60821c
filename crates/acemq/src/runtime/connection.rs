//! The entry point: one connection to a broker, chosen by URL, from which publishers and
//! consumers are made.

use std::sync::Arc;
use std::time::Duration;

use polyq_amqp::{Client, ClientOptions, TlsOptions};
use polyq_amqp::{OutgoingMessage, PublishOutcome};
use polyq_runtime::InterceptorChain;
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;

use std::future::Future;

use crate::contract::codec::{Composite, Decode, Encode, Json};
use crate::contract::provenance;
use crate::error::RuntimeError;
use crate::runtime::consumer::{Consumer, ConsumerBuilder, IntoOutcome, Message};
use crate::runtime::interceptor::{ConsumeInterceptor, PublishInterceptor};
use crate::runtime::publisher::Publisher;

/// The URL used when none is configured: the embedded broker.
pub const DEFAULT_URL: &str = "memory://";

/// Confirms a connection lets be outstanding at once by default.
pub const DEFAULT_MAX_OUTSTANDING_CONFIRMS: usize = 1000;

/// How long a publish whose confirm was lost with the connection is sent again by default
/// ([`AceMqBuilder::resend_lost`]): as long as an operation waits for recovery.
pub const DEFAULT_RESEND_LOST: Duration = Duration::from_secs(30);

/// A connection to an AceMQ estate: `memory://[name]` (the embedded broker, the default),
/// `amqp://` or `amqps://` (RabbitMQ). Cheap to clone; clones share the connection.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), acemq::RuntimeError> {
/// use acemq::AceMq;
///
/// let mq = AceMq::builder().client_name("checkout").connect().await?;
/// assert_eq!(mq.url(), "memory://");
/// assert!(mq.origin().starts_with("checkout@"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AceMq {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) origin: String,
    pub(crate) transport: &'static str,
    pub(crate) outstanding: Arc<Semaphore>,
    pub(crate) publish_interceptors: InterceptorChain<dyn PublishInterceptor>,
    pub(crate) consume_interceptors: InterceptorChain<dyn ConsumeInterceptor>,
}

impl std::fmt::Debug for AceMq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AceMq")
            .field("url", &self.url())
            .field("origin", &self.shared.origin)
            .finish()
    }
}

impl AceMq {
    /// Connects to `url` with every default.
    pub async fn connect(url: &str) -> Result<AceMq, RuntimeError> {
        AceMq::builder().url(url).connect().await
    }

    /// A builder; with nothing configured it connects to the embedded broker `memory://`.
    pub fn builder() -> AceMqBuilder {
        AceMqBuilder::default()
    }

    /// The broker URL, credentials redacted.
    pub fn url(&self) -> String {
        self.shared.client.url()
    }

    /// The origin stamped on every message this connection publishes without one:
    /// `<client name>@<hostname>`.
    pub fn origin(&self) -> &str {
        &self.shared.origin
    }

    /// The transport client underneath, for declarations and inspection this crate does not
    /// wrap.
    pub fn client(&self) -> &Client {
        &self.shared.client
    }

    /// The connection's health: up (and whether the broker blocks publishing), recovering, or
    /// closed; [`Client::health_watch`] waits for changes.
    pub fn health(&self) -> polyq_amqp::Health {
        self.shared.client.health()
    }

    /// A publisher of `T` as JSON to `exchange` (`""` is the default exchange) with
    /// `routing_key`; see [`Publisher`] for its options.
    pub fn publisher<T: serde::Serialize + ?Sized>(
        &self,
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
    ) -> Publisher<T, Json> {
        Publisher::new(self.clone(), exchange.into(), routing_key.into(), Json)
    }

    /// A publisher of `T` through `codec` ([`Text`](crate::codec::Text),
    /// [`Raw`](crate::codec::Raw) or a codec of your own) to `exchange` with `routing_key`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), acemq::RuntimeError> {
    /// use acemq::AceMq;
    /// use acemq::codec::Raw;
    ///
    /// let mq = AceMq::connect("memory://doc-publisher-with").await?;
    /// let bytes = mq.publisher_with::<[u8], _>("", "blobs", Raw).allow_unroutable();
    /// let sent = bytes.send(&[0xde, 0xad]).await?;
    /// assert_eq!(sent.message_type(), "blobs");
    /// # Ok(())
    /// # }
    /// ```
    pub fn publisher_with<T: ?Sized, E: Encode<T>>(
        &self,
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
        codec: E,
    ) -> Publisher<T, E> {
        Publisher::new(self.clone(), exchange.into(), routing_key.into(), codec)
    }

    /// A consumer of `queue` decoding JSON into `T`; configure it, then
    /// [`start`](ConsumerBuilder::start) it with a handler.
    pub fn consumer<T: DeserializeOwned + Send + 'static>(
        &self,
        queue: impl Into<String>,
    ) -> ConsumerBuilder<T> {
        ConsumerBuilder::new(self.clone(), queue.into(), Composite::of(Json))
    }

    /// A consumer of `queue` reading bodies with `decoder`, for payloads that are not JSON
    /// ([`Text`](crate::codec::Text), [`Raw`](crate::codec::Raw), a codec of your own) or in
    /// several formats ([`Composite`]: the first decoder that accepts the message's content
    /// type reads it; a content type none reads is parked in `Q.parked` with its bytes).
    pub fn consumer_with<T: Send + 'static>(
        &self,
        queue: impl Into<String>,
        decoder: impl Decode<T>,
    ) -> ConsumerBuilder<T> {
        ConsumerBuilder::new(self.clone(), queue.into(), Composite::of(decoder))
    }

    /// Starts a consumer of `queue` decoding JSON into `T` with every default (no retries,
    /// prefetch 50, one handler at a time); see [`AceMq::consumer`] to configure one.
    pub async fn consume<T, F, Fut, O>(
        &self,
        queue: impl Into<String>,
        handler: F,
    ) -> Result<Consumer, RuntimeError>
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(Message<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = O> + Send + 'static,
        O: IntoOutcome + 'static,
    {
        self.consumer::<T>(queue).start(handler).await
    }

    /// Closes the connection. Unsettled deliveries go back to their queues.
    pub async fn close(&self) -> Result<(), RuntimeError> {
        self.shared.close().await
    }
}

impl Shared {
    /// Publishes one of the retry engine's messages (a retry, or a set-aside into `.dlq` or
    /// `.parked`) and waits for the broker's answer, so that the engine acknowledges the
    /// original only once the copy is routed. The client attributes every returned message to
    /// its own publish, so these share the connection with every other publish.
    pub(crate) async fn republish(
        &self,
        message: OutgoingMessage,
        timeout: Duration,
    ) -> Result<PublishOutcome, RuntimeError> {
        let (exchange, routing_key) = (message.exchange.clone(), message.routing_key.clone());
        let confirm = self.client.publish(message).await?;
        match tokio::time::timeout(timeout, confirm).await {
            Ok(outcome) => Ok(outcome?),
            Err(_) => Err(RuntimeError::ConfirmTimeout {
                exchange,
                routing_key,
                timeout,
            }),
        }
    }

    async fn close(&self) -> Result<(), RuntimeError> {
        Ok(self.client.close().await?)
    }
}

/// Configures an [`AceMq`] connection. Every setter documents its default.
#[must_use]
pub struct AceMqBuilder {
    url: String,
    client_name: String,
    max_outstanding_confirms: usize,
    recovery_wait: Duration,
    blocked_timeout: Duration,
    resend_lost: Option<Duration>,
    tls: TlsOptions,
    publish_interceptors: InterceptorChain<dyn PublishInterceptor>,
    consume_interceptors: InterceptorChain<dyn ConsumeInterceptor>,
}

impl Default for AceMqBuilder {
    fn default() -> Self {
        Self {
            url: DEFAULT_URL.to_owned(),
            client_name: provenance::DEFAULT_CLIENT_NAME.to_owned(),
            max_outstanding_confirms: DEFAULT_MAX_OUTSTANDING_CONFIRMS,
            recovery_wait: Duration::from_secs(30),
            blocked_timeout: ClientOptions::default().blocked_timeout,
            resend_lost: Some(DEFAULT_RESEND_LOST),
            tls: TlsOptions::default(),
            publish_interceptors: InterceptorChain::new(),
            consume_interceptors: InterceptorChain::new(),
        }
    }
}

impl std::fmt::Debug for AceMqBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AceMqBuilder")
            .field("url", &polyq_amqp::redact_url(&self.url))
            .field("client_name", &self.client_name)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl AceMqBuilder {
    /// The broker: `memory://[name]`, `amqp://…` or `amqps://…`. Default `memory://`.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = url.into();
        self
    }

    /// The service name: the broker shows it as the connection name, and published messages
    /// carry `<name>@<hostname>` as their origin. Default `acemq`.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }

    /// Most publishes awaiting their confirm at once, across the connection's publishers;
    /// a publish beyond it waits for a confirm (backpressure). Default 1000.
    pub fn max_outstanding_confirms(mut self, max: usize) -> Self {
        self.max_outstanding_confirms = max;
        self
    }

    /// How long an operation waits for a lost RabbitMQ connection to come back before
    /// failing. Default 30 s.
    pub fn recovery_wait(mut self, wait: Duration) -> Self {
        self.recovery_wait = wait;
        self
    }

    /// How long a publish waits while RabbitMQ blocks the connection (a memory or disk alarm)
    /// before failing with [`polyq_amqp::Error::Blocked`], which names the broker's reason and
    /// whether the message may have been published. Default 30 s, as in the Java library.
    /// `memory://` never blocks.
    pub fn blocked_timeout(mut self, timeout: Duration) -> Self {
        self.blocked_timeout = timeout;
        self
    }

    /// Publishes that outlive a connection loss: a message whose confirm was lost with the
    /// RabbitMQ connection is sent again after recovery, with the same message id and bytes,
    /// until `within` after it was published; the publish fails only when that passes, or
    /// when the broker nacks or returns it. Consumers may then see it twice and dedupe on the
    /// id (see the idempotent consumer). `None` fails the publish at once with
    /// [`polyq_amqp::Error::Unconfirmed`]. Default 30 s.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let builder = acemq::AceMq::builder().resend_lost(Some(Duration::from_secs(120)));
    /// # drop(builder);
    /// ```
    pub fn resend_lost(mut self, within: Option<Duration>) -> Self {
        self.resend_lost = within;
        self
    }

    /// The TLS settings of `amqps://`: authorities to trust beside the system's roots, a client
    /// certificate for a broker that verifies its clients. Default: neither. Connecting another
    /// URL with settings here fails.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// Adds a publish interceptor; they run in the order added.
    pub fn publish_interceptor(mut self, interceptor: impl PublishInterceptor) -> Self {
        let name = std::any::type_name_of_val(&interceptor);
        self.publish_interceptors.push(name, Box::new(interceptor));
        self
    }

    /// Adds a consume interceptor; `before_handle` runs in the order added, `after_handle` in
    /// reverse.
    pub fn consume_interceptor(mut self, interceptor: impl ConsumeInterceptor) -> Self {
        let name = std::any::type_name_of_val(&interceptor);
        self.consume_interceptors.push(name, Box::new(interceptor));
        self
    }

    /// Connects. Errors name the URL with its credentials redacted.
    pub async fn connect(self) -> Result<AceMq, RuntimeError> {
        let client_name = if self.client_name.is_empty() {
            provenance::DEFAULT_CLIENT_NAME.to_owned()
        } else {
            self.client_name
        };
        if self.max_outstanding_confirms == 0 {
            return Err(RuntimeError::Config {
                option: "max_outstanding_confirms",
                reason: "must be at least 1".to_owned(),
            });
        }
        let options = ClientOptions::default()
            .connection_name(client_name.clone())
            .recovery_wait(self.recovery_wait)
            .blocked_timeout(self.blocked_timeout)
            .resend_lost(self.resend_lost)
            .tls(self.tls);
        let client = Client::connect_with(&self.url, options).await?;
        let transport = if client.url().starts_with("memory:") {
            "memory"
        } else {
            "rabbitmq"
        };
        tracing::debug!(url = %client.url(), client = %client_name, "acemq connected");
        Ok(AceMq {
            shared: Arc::new(Shared {
                client,
                origin: provenance::origin(&client_name),
                transport,
                outstanding: Arc::new(Semaphore::new(self.max_outstanding_confirms)),
                publish_interceptors: self.publish_interceptors,
                consume_interceptors: self.consume_interceptors,
            }),
        })
    }
}
