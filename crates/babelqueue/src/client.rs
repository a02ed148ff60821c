//! The entry point: a queue on a broker named by URL.

use std::sync::Arc;

use serde::Serialize;
use tracing::{Instrument as _, Span};

use crate::payload::{PayloadRules, SharedProvider};
use crate::redrive::{RedriveOptions, RedriveReport};
use crate::telemetry;
use crate::transport::{AnyTransport, ConnectOptions, Health, RedisLayout, Transport};
use crate::worker::Worker;
use crate::{Envelope, MakeOptions, Message, Result};

/// One queue on one broker: publish to it, run workers on it, redrive its dead-letter queue.
/// Cheap to clone; clones share the connection.
///
/// [`BabelQueue::connect`] picks the binding from the URL (see [`AnyTransport`]); any other
/// [`Transport`] can be used with [`BabelQueue::with_transport`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> babelqueue::Result<()> {
/// use std::time::Duration;
/// use serde_json::json;
///
/// let queue = babelqueue::BabelQueue::builder("memory://doc-client")
///     .queue("orders")
///     .connect()
///     .await?;
/// let sent = queue.publish("urn:babel:orders:created", &json!({"order_id": 7})).await?;
/// assert_eq!(sent.meta().unwrap().queue(), Some("orders"));
///
/// let report = queue
///     .worker()
///     .handle("urn:babel:orders:created", |job| async move {
///         assert_eq!(job.data().unwrap().as_str(), r#"{"order_id":7}"#);
///         Ok::<_, std::convert::Infallible>(())
///     })
///     .consume(1, Duration::from_secs(1))
///     .await?;
/// assert_eq!(report.succeeded, 1);
/// # Ok(())
/// # }
/// ```
pub struct BabelQueue<T: Transport = AnyTransport> {
    transport: Arc<T>,
    queue: String,
    payload: PayloadRules,
}

impl<T: Transport> Clone for BabelQueue<T> {
    fn clone(&self) -> Self {
        Self {
            transport: self.transport.clone(),
            queue: self.queue.clone(),
            payload: self.payload.clone(),
        }
    }
}

impl<T: Transport> std::fmt::Debug for BabelQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BabelQueue")
            .field("queue", &self.queue)
            .field("payload", &self.payload)
            .finish_non_exhaustive()
    }
}

/// Builds a [`BabelQueue`] from a URL. Every setter documents its default.
#[derive(Debug, Clone)]
pub struct BabelQueueBuilder {
    url: String,
    queue: String,
    options: ConnectOptions,
}

impl BabelQueueBuilder {
    /// The queue to publish to and consume from (default `default`, as in every SDK).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// The AMQP prefetch window (default 100; `memory://`, `amqp://`, `amqps://`).
    pub fn prefetch(mut self, prefetch: u16) -> Self {
        self.options = self.options.prefetch(prefetch);
        self
    }

    /// The Redis key layout (default [`RedisLayout::Default`]; `redis://`, `rediss://`).
    pub fn redis_layout(mut self, layout: RedisLayout) -> Self {
        self.options = self.options.redis_layout(layout);
        self
    }

    /// The TLS settings of `amqps://` and `rediss://`: authorities to trust, a client
    /// certificate (default: the system's roots, none). See
    /// [`TlsOptions`](crate::transport::TlsOptions).
    pub fn tls(mut self, tls: crate::transport::TlsOptions) -> Self {
        self.options = self.options.tls(tls);
        self
    }

    /// All connection options at once.
    pub fn options(mut self, options: ConnectOptions) -> Self {
        self.options = options;
        self
    }

    /// Connects.
    ///
    /// # Errors
    /// As [`AnyTransport::connect`].
    pub async fn connect(self) -> Result<BabelQueue> {
        let transport = AnyTransport::connect(&self.url, self.options).await?;
        Ok(BabelQueue::with_transport(transport, self.queue))
    }
}

impl BabelQueue {
    /// Connects to `url` with the queue `default` and default options.
    ///
    /// # Errors
    /// As [`AnyTransport::connect`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// A builder for `url` (`memory://` when empty).
    pub fn builder(url: impl Into<String>) -> BabelQueueBuilder {
        BabelQueueBuilder {
            url: url.into(),
            queue: "default".to_owned(),
            options: ConnectOptions::default(),
        }
    }
}

impl<T: Transport> BabelQueue<T> {
    /// A queue on an existing binding.
    pub fn with_transport(transport: T, queue: impl Into<String>) -> Self {
        Self::with_shared_transport(Arc::new(transport), queue)
    }

    /// A queue on a binding shared with others.
    pub fn with_shared_transport(transport: Arc<T>, queue: impl Into<String>) -> Self {
        Self {
            transport,
            queue: queue.into(),
            payload: PayloadRules::default(),
        }
    }

    /// The same connection and payload options, another queue.
    pub fn on_queue(&self, queue: impl Into<String>) -> Self {
        Self {
            queue: queue.into(),
            ..self.clone()
        }
    }

    /// Refuses to publish a payload that breaks its URN's schema (ADR-0024, producer side):
    /// [`BabelQueue::publish`], [`publish_with`](BabelQueue::publish_with) and
    /// [`publish_message`](BabelQueue::publish_message) validate `data` against `provider`'s
    /// schema for the URN before anything reaches the broker; a URN with no schema is published
    /// unchecked. [`BabelQueue::publish_envelope`] sends an envelope as it is. Default: off.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> babelqueue::Result<()> {
    /// use std::sync::Arc;
    /// use babelqueue::schema::MapProvider;
    /// use serde_json::json;
    ///
    /// let schemas = MapProvider::new().with(
    ///     "urn:babel:orders:created",
    ///     json!({"type": "object", "required": ["order_id"]}),
    /// );
    /// let queue = babelqueue::BabelQueue::builder("memory://doc-validate")
    ///     .queue("orders")
    ///     .connect()
    ///     .await?
    ///     .validate_payloads(Arc::new(schemas));
    /// let refused = queue.publish("urn:babel:orders:created", &json!({"note": "no id"})).await;
    /// let error = refused.unwrap_err();
    /// assert!(error.is_invalid_payload());
    /// assert!(error.to_string().contains("/order_id: missing_required"));
    /// queue.publish("urn:babel:orders:created", &json!({"order_id": 7})).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn validate_payloads(mut self, provider: SharedProvider) -> Self {
        self.payload.validate_with(provider);
        self
    }

    /// Encrypts, on publish, each field the URN's schema in `provider` marks
    /// `x-gdpr-sensitive` with `cipher` (ADR-0030, feature `gdpr`), after validation when
    /// [`BabelQueue::validate_payloads`] is set; see [`crate::gdpr::protect`]. Applies to the
    /// same publish methods as validation. Default: off.
    #[cfg(feature = "gdpr")]
    pub fn protect_payloads(
        mut self,
        provider: SharedProvider,
        cipher: Arc<dyn crate::gdpr::Cipher>,
    ) -> Self {
        self.payload.protect_with(provider, cipher);
        self
    }

    /// The queue name.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The binding.
    pub fn transport(&self) -> &Arc<T> {
        &self.transport
    }

    /// The state of the binding's connection (see [`Transport::health`]): for `memory://` and
    /// `amqp://` the client's [`Health`] (up, blocked, recovering with its last error, or
    /// closed), `None` for Redis, whose bindings keep no connection state and reconnect on the
    /// next command.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> babelqueue::Result<()> {
    /// use babelqueue::transport::{AnyTransport, Health};
    ///
    /// let queue = babelqueue::BabelQueue::connect("memory://doc-health").await?;
    /// assert!(matches!(queue.health(), Some(Health::Up { blocked: None, .. })));
    ///
    /// let mut health = queue.health_watch().expect("memory:// reports its health");
    /// if let AnyTransport::Amqp(amqp) = queue.transport().as_ref() {
    ///     amqp.client().close().await?;
    /// }
    /// let closed = health.wait_for(|h| *h == Health::Closed).await.is_ok();
    /// assert!(closed);
    /// assert_eq!(queue.health(), Some(Health::Closed));
    /// # Ok(())
    /// # }
    /// ```
    pub fn health(&self) -> Option<Health> {
        self.transport.health()
    }

    /// A watch that sees every change of [`BabelQueue::health`], for a readiness probe or code
    /// that waits for the connection to come back; `None` where `health` is `None`.
    pub fn health_watch(&self) -> Option<tokio::sync::watch::Receiver<Health>> {
        self.transport.health_watch()
    }

    /// Builds the envelope for `urn` and `data` (see [`crate::make`]) with `meta.queue` set to
    /// this queue, publishes it, waits for the broker to take it, and returns it.
    ///
    /// # Errors
    /// As [`crate::make`]; [`crate::Error::InvalidPayload`] or (feature `gdpr`)
    /// `Error::Gdpr` under the payload options; the binding's error when the broker does not
    /// take it.
    pub async fn publish<D: Serialize + ?Sized>(&self, urn: &str, data: &D) -> Result<Envelope> {
        self.publish_with(urn, data, MakeOptions::new(), &[]).await
    }

    /// [`BabelQueue::publish`] with envelope options (trace continuation, meta extension keys)
    /// and out-of-band headers (`traceparent`, …). `meta.queue` is always this queue.
    ///
    /// Every publish runs in a PRODUCER span `publish <urn>`. With the `otel` feature and an
    /// OpenTelemetry layer installed, the envelope's `trace_id` is the span's TraceID (unless
    /// `options` continue a trace) and the span's context travels as `traceparent` /
    /// `tracestate` headers (unless `headers` carry a `traceparent` already): see
    /// [`otel`](crate#feature-flags).
    ///
    /// # Errors
    /// As [`BabelQueue::publish`].
    pub async fn publish_with<D: Serialize + ?Sized>(
        &self,
        urn: &str,
        data: &D,
        options: MakeOptions,
        headers: &[(String, String)],
    ) -> Result<Envelope> {
        let span = telemetry::publish_span(urn);
        let options = options.queue(self.queue.as_str());
        let options = match trace_of_span(&span, options.continued_trace()) {
            Some(trace_id) => options.trace_id(trace_id),
            None => options,
        };
        let mut envelope = recorded(&span, crate::make(urn, data, options))?;
        self.payload.outgoing(&mut envelope)?;
        self.send_traced(&span, &envelope, headers).await?;
        Ok(envelope)
    }

    /// Publishes a typed [`Message`] (its URN, payload and trace id), in a `publish <urn>` span
    /// as [`BabelQueue::publish_with`].
    ///
    /// # Errors
    /// As [`BabelQueue::publish`].
    pub async fn publish_message<M: Message + ?Sized>(&self, message: &M) -> Result<Envelope> {
        let span = telemetry::publish_span(message.urn());
        let options = MakeOptions::new().queue(self.queue.as_str());
        let options = match trace_of_span(&span, message.trace_id()) {
            Some(trace_id) => options.trace_id(trace_id),
            None => options,
        };
        let mut envelope = recorded(&span, message.to_envelope(options))?;
        self.payload.outgoing(&mut envelope)?;
        self.send_traced(&span, &envelope, &[]).await?;
        Ok(envelope)
    }

    /// Publishes an envelope as it is (its canonical encoding) to this queue, in a
    /// `publish <urn>` span as [`BabelQueue::publish_with`] (the envelope's `trace_id` is kept).
    ///
    /// # Errors
    /// [`crate::Error::BlankUrn`] or [`crate::Error::ReservedKey`] when it cannot be encoded; the
    /// binding's error when the broker does not take it.
    pub async fn publish_envelope(
        &self,
        envelope: &Envelope,
        headers: &[(String, String)],
    ) -> Result<()> {
        let span = telemetry::publish_span(envelope.urn().unwrap_or_default());
        // The envelope's trace is kept: the span joins it when nothing around it is traced.
        let _ = trace_of_span(&span, envelope.trace_id());
        self.send_traced(&span, envelope, headers).await
    }

    /// Sends an envelope inside its publish span, with the span's trace headers; a failure is
    /// recorded on the span.
    async fn send_traced(
        &self,
        span: &Span,
        envelope: &Envelope,
        headers: &[(String, String)],
    ) -> Result<()> {
        telemetry::record_published(span, envelope);
        let sent = async {
            let body = envelope.encode()?;
            #[cfg(feature = "otel")]
            let traced = crate::otel::with_trace_headers(span, headers);
            #[cfg(feature = "otel")]
            let headers = traced.as_deref().unwrap_or(headers);
            self.transport
                .publish(&self.queue, body.into(), headers)
                .await
        }
        .instrument(span.clone())
        .await;
        recorded(span, sent)
    }

    /// A worker on this queue (dead-letter queue `<queue>.dlq`, or the binding's own name for
    /// it: [`Transport::dead_letter_queue`]), to be given handlers.
    pub fn worker(&self) -> Worker<T> {
        Worker::new(self.transport.clone(), self.queue.clone())
    }

    /// Redrives this queue's dead-letter queue, `<queue>.dlq` or the binding's own name for it
    /// ([`Transport::dead_letter_queue`]; see [`crate::redrive::redrive`]).
    ///
    /// # Errors
    /// As [`crate::redrive::redrive`].
    pub async fn redrive(&self, options: &RedriveOptions) -> Result<RedriveReport> {
        let dlq = self.transport.dead_letter_queue(&self.queue);
        crate::redrive::redrive(self.transport.as_ref(), &dlq, options).await
    }
}

/// The `trace_id` a publish span gives a new envelope, when the caller continues none (feature
/// `otel`; see [`crate::otel`]). Without the feature, none.
fn trace_of_span(span: &Span, continued: Option<&str>) -> Option<String> {
    #[cfg(feature = "otel")]
    return crate::otel::start_publish(span, continued);
    #[cfg(not(feature = "otel"))]
    {
        let _ = (span, continued);
        None
    }
}

/// `result`, its error recorded on the publish span as the crate's error type.
fn recorded<T>(span: &Span, result: Result<T>) -> Result<T> {
    if let Err(error) = &result {
        telemetry::record_exception(span, "babelqueue::Error", &error.to_string());
    }
    result
}
