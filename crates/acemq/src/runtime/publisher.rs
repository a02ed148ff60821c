//! Publishing: a publisher bound to one exchange, routing key, payload type and codec, whose
//! sends return only once the broker has confirmed.

use std::borrow::Borrow;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use polyq_amqp::{OutgoingMessage, Properties, PublishOutcome};
use polyq_runtime::Refusal;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Span;

use crate::Envelope;
use crate::contract::codec::{Encode, Json};
use crate::contract::{headers, provenance, wire};
use crate::error::RuntimeError;
use crate::runtime::connection::AceMq;
use crate::runtime::interceptor::PublishContext;
use crate::runtime::telemetry::{self, PublishMetrics, PublishResult};

/// How long a publish waits for its confirm by default.
pub const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// Publishes `T` to one exchange with one routing key through one codec (JSON by default).
///
/// Every send returns once the broker confirmed the message: a negative confirm, a returned
/// (unroutable) message or no confirm within the timeout is an error. Defaults: mandatory
/// (unroutable is an error), persistent, no expiry, no priority, 30 s confirm timeout. The
/// option setters return the publisher changed; clone it to vary options per message.
///
/// Cheap to clone and safe to share between tasks; make one per destination and reuse it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use acemq::AceMq;
/// use polyq_amqp::QueueSpec;
///
/// let mq = AceMq::connect("memory://doc-publisher").await?;
/// mq.client().declare_queue(&QueueSpec::new("orders.new")).await?;
///
/// let orders = mq.publisher::<serde_json::Value>("", "orders.new");
/// let sent = orders.send(&serde_json::json!({"id": 7})).await?;
/// assert_eq!(sent.message_type(), "orders.new");
/// assert_eq!(sent.origin(), Some(mq.origin()));
///
/// let lost = mq.publisher::<str>("", "nobody.listens").with_codec(acemq::codec::Text);
/// let err = lost.send("hello").await.unwrap_err();
/// assert!(err.to_string().contains("routing key `nobody.listens` is unroutable"));
/// # Ok(())
/// # }
/// ```
pub struct Publisher<T: ?Sized, E = Json> {
    inner: Arc<Inner<E>>,
    options: Options,
    payload: PhantomData<fn(&T)>,
}

struct Inner<E> {
    mq: AceMq,
    exchange: String,
    routing_key: String,
    message_type: String,
    codec: E,
    metrics: PublishMetrics,
}

#[derive(Debug, Clone)]
struct Options {
    mandatory: bool,
    reply_to: Option<Arc<str>>,
    persistent: bool,
    expiration: Option<Duration>,
    priority: Option<u8>,
    confirm_timeout: Duration,
}

impl<T: ?Sized, E> Clone for Publisher<T, E> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            options: self.options.clone(),
            payload: PhantomData,
        }
    }
}

impl<T: ?Sized, E> std::fmt::Debug for Publisher<T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("exchange", &self.inner.exchange)
            .field("routing_key", &self.inner.routing_key)
            .field("options", &self.options)
            .finish()
    }
}

impl<T: ?Sized, E: Encode<T>> Publisher<T, E> {
    pub(crate) fn new(mq: AceMq, exchange: String, routing_key: String, codec: E) -> Self {
        let metrics = PublishMetrics::new(&exchange, &routing_key, mq.shared.transport);
        Self {
            inner: Arc::new(Inner {
                message_type: wire::type_for(&routing_key).to_owned(),
                mq,
                exchange,
                routing_key,
                codec,
                metrics,
            }),
            options: Options {
                mandatory: true,
                reply_to: None,
                persistent: true,
                expiration: None,
                priority: None,
                confirm_timeout: DEFAULT_CONFIRM_TIMEOUT,
            },
            payload: PhantomData,
        }
    }

    /// The same destination and options with another codec, such as
    /// [`Text`](crate::codec::Text) or [`Raw`](crate::codec::Raw).
    pub fn with_codec<C: Encode<T>>(self, codec: C) -> Publisher<T, C> {
        let inner = &self.inner;
        Publisher {
            options: self.options,
            ..Publisher::new(
                inner.mq.clone(),
                inner.exchange.clone(),
                inner.routing_key.clone(),
                codec,
            )
        }
    }

    /// Lets the broker drop a message no queue is bound for instead of failing the send
    /// (publishes without `mandatory`). Default: unroutable is an error.
    pub fn allow_unroutable(mut self) -> Self {
        self.options.mandatory = false;
        self
    }

    /// Asks for answers in `queue`: every message carries it both as the AMQP `reply-to`
    /// property and as the `acemq-reply-to` header, as requesters of every port write it.
    /// Default: no reply address.
    pub fn with_reply_to(mut self, queue: impl Into<String>) -> Self {
        self.options.reply_to = Some(Arc::from(queue.into()));
        self
    }

    /// Publishes with delivery mode 1, lost on a broker restart. Default: persistent (2).
    pub fn transient(mut self) -> Self {
        self.options.persistent = false;
        self
    }

    /// Sets the AMQP `expiration`: the broker discards the message once it has waited this
    /// long at the head of a queue. Default: none.
    pub fn expiring_after(mut self, ttl: Duration) -> Self {
        self.options.expiration = Some(ttl);
        self
    }

    /// Sets the AMQP `priority` (honoured by queues declared with `x-max-priority`). Default:
    /// none.
    pub fn with_priority(mut self, priority: u8) -> Self {
        self.options.priority = Some(priority);
        self
    }

    /// How long a send waits for the broker's confirm, not counting the time the broker blocks
    /// the connection (a memory or disk alarm holds every confirm back until it clears, and
    /// the broker then answers them). Default 30 s.
    pub fn confirm_timeout(mut self, timeout: Duration) -> Self {
        self.options.confirm_timeout = timeout;
        self
    }

    /// The exchange (`""` is the default exchange).
    pub fn exchange(&self) -> &str {
        &self.inner.exchange
    }

    /// The routing key.
    pub fn routing_key(&self) -> &str {
        &self.inner.routing_key
    }

    /// Publishes `payload` with a fresh envelope typed by the routing key (`message` for an
    /// empty one) and waits for the confirm. Returns the envelope as sent.
    pub async fn send(&self, payload: &T) -> Result<Envelope, RuntimeError> {
        self.send_async(payload).await?.await
    }

    /// Publishes `payload` with `envelope` (its origin stamped if it has none) and waits for
    /// the confirm. Returns the envelope as sent, which interceptors may have changed.
    pub async fn send_with(
        &self,
        payload: &T,
        envelope: Envelope,
    ) -> Result<Envelope, RuntimeError> {
        let permit = self.permit().await;
        self.publish(permit, payload, Some(envelope)).await?.await
    }

    /// Hands `payload` to the broker and returns without waiting for its confirm; await the
    /// returned [`PendingConfirm`] for it. Waits first while the connection has
    /// `max_outstanding_confirms` publishes unconfirmed.
    pub async fn send_async(&self, payload: &T) -> Result<PendingConfirm, RuntimeError> {
        let permit = self.permit().await;
        self.publish(permit, payload, None).await
    }

    /// Publishes every payload, then waits for every confirm. Not atomic: on failure the
    /// error ([`RuntimeError::Batch`]) says how many were confirmed, and the first failure.
    /// Returns the envelopes in batch order.
    pub async fn send_all<I, P>(&self, payloads: I) -> Result<Vec<Envelope>, RuntimeError>
    where
        I: IntoIterator<Item = P>,
        P: Borrow<T>,
    {
        let mut pending = FuturesOrdered::new();
        let mut settled: Vec<Result<Envelope, RuntimeError>> = Vec::new();
        for payload in payloads {
            // Settling our own confirms frees permits; only when none of ours is pending does
            // this wait on other publishers'. Never cancels a publish half way.
            let permit = loop {
                if let Ok(permit) =
                    Arc::clone(&self.inner.mq.shared.outstanding).try_acquire_owned()
                {
                    break permit;
                }
                match pending.next().await {
                    Some(result) => settled.push(result),
                    None => break self.permit().await,
                }
            };
            match self.publish(permit, payload.borrow(), None).await {
                Ok(confirm) => pending.push_back(confirm),
                Err(error) => pending.push_back(PendingConfirm::failed(error)),
            }
        }
        while let Some(result) = pending.next().await {
            settled.push(result);
        }
        let total = settled.len();
        let mut envelopes = Vec::with_capacity(total);
        let mut failures = Vec::new();
        for result in settled {
            match result {
                Ok(envelope) => envelopes.push(envelope),
                Err(error) => failures.push(error),
            }
        }
        if failures.is_empty() {
            return Ok(envelopes);
        }
        let failed = failures.len();
        Err(RuntimeError::Batch {
            total,
            confirmed: envelopes.len(),
            failed,
            first: Box::new(failures.swap_remove(0)),
        })
    }

    async fn permit(&self) -> OwnedSemaphorePermit {
        Arc::clone(&self.inner.mq.shared.outstanding)
            .acquire_owned()
            .await
            // The semaphore lives as long as the connection and is never closed.
            .unwrap_or_else(|_| unreachable!("the outstanding-confirm semaphore is never closed"))
    }

    async fn publish(
        &self,
        permit: OwnedSemaphorePermit,
        payload: &T,
        envelope: Option<Envelope>,
    ) -> Result<PendingConfirm, RuntimeError> {
        let started = Instant::now();
        let inner = &*self.inner;
        let shared = &inner.mq.shared;
        let span = telemetry::publish_span(&inner.exchange, &inner.routing_key);
        let failed = |error: RuntimeError| {
            inner
                .metrics
                .record(PublishResult::Failed, started.elapsed().as_secs_f64());
            telemetry::record_outcome(&span, PublishResult::Failed.as_str());
            error
        };
        let (message, envelope) = self.message(payload, envelope, &span).map_err(&failed)?;
        let confirm = shared
            .client
            .publish(message)
            .await
            .map_err(|e| failed(e.into()))?;
        let publisher = Arc::clone(&self.inner);
        let timeout = self.options.confirm_timeout;
        // A block of the connection holds the confirm back until the alarm clears, when the
        // broker answers it; the timeout does not run meanwhile.
        let outcome = shared.client.timeout_unblocked(timeout, confirm);
        Ok(PendingConfirm {
            future: Box::pin(async move {
                let _permit = permit;
                publisher.settle(outcome.await, timeout, envelope, started, &span)
            }),
        })
    }

    /// The message a send of `payload` puts on the wire (envelope stamped and intercepted,
    /// body encoded, properties and headers written), without sending it: the transactional
    /// outbox stores exactly this.
    pub(crate) fn message(
        &self,
        payload: &T,
        envelope: Option<Envelope>,
        span: &Span,
    ) -> Result<(OutgoingMessage, Envelope), RuntimeError> {
        let inner = &*self.inner;
        let shared = &inner.mq.shared;
        let envelope = match envelope {
            Some(envelope) => provenance::stamp(envelope, &shared.origin),
            None => Envelope::of(inner.message_type.as_str())
                .origin(shared.origin.as_str())
                .build()
                .map_err(RuntimeError::from)?,
        };
        let envelope = match &self.options.reply_to {
            Some(queue) => envelope
                .to_builder()
                .header(headers::REPLY_TO, &**queue)
                .build()
                .map_err(RuntimeError::from)?,
            None => envelope,
        };
        let envelope = self.intercept(envelope)?;
        let body = inner
            .codec
            .encode(payload)
            .map_err(|e| RuntimeError::Encode {
                exchange: inner.exchange.clone(),
                routing_key: inner.routing_key.clone(),
                reason: e.0,
            })?;
        telemetry::record_envelope(span, &envelope);
        let mut properties = Properties {
            content_type: Some(inner.codec.content_type().to_owned()),
            delivery_mode: Some(if self.options.persistent { 2 } else { 1 }),
            priority: self.options.priority,
            expiration: self
                .options
                .expiration
                .map(|ttl| ttl.as_millis().to_string()),
            reply_to: self.options.reply_to.as_deref().map(str::to_owned),
            ..Properties::default()
        };
        envelope.write_properties(&mut properties);
        telemetry::inject_trace_context(span, &mut properties.headers);
        let mut message = OutgoingMessage::new(
            inner.exchange.as_str(),
            inner.routing_key.as_str(),
            properties,
            body,
        );
        message.mandatory = self.options.mandatory;
        Ok((message, envelope))
    }

    fn intercept(&self, envelope: Envelope) -> Result<Envelope, RuntimeError> {
        let inner = &*self.inner;
        let interceptors = &inner.mq.shared.publish_interceptors;
        if interceptors.is_empty() {
            return Ok(envelope);
        }
        let mut context = PublishContext {
            exchange: &inner.exchange,
            routing_key: &inner.routing_key,
            envelope,
        };
        // Publish interceptors have no `after` half: the chain's refusal is all there is to see.
        let refusal = interceptors
            .before(|interceptor| interceptor.before_publish(&mut context))
            .refusal;
        let reason = match refusal {
            None => return Ok(context.envelope),
            Some(Refusal::Refused { error, .. }) => error.to_string(),
            Some(Refusal::Panicked { interceptor, panic }) => {
                tracing::error!(exchange = %inner.exchange, routing_key = %inner.routing_key, interceptor, message = %panic, "a publish interceptor panicked; the publish is refused");
                format!("`{interceptor}` panicked: {panic}")
            }
        };
        Err(RuntimeError::Refused {
            exchange: inner.exchange.clone(),
            routing_key: inner.routing_key.clone(),
            reason,
        })
    }
}

impl<E> Inner<E> {
    fn settle(
        &self,
        outcome: Option<polyq_amqp::Result<PublishOutcome>>,
        timeout: Duration,
        envelope: Envelope,
        started: Instant,
        span: &Span,
    ) -> Result<Envelope, RuntimeError> {
        let result = match outcome {
            Some(Ok(PublishOutcome::Acked)) => Ok(envelope),
            // The client attributes every return to its own publish.
            Some(Ok(PublishOutcome::Returned(returned))) => Err(RuntimeError::Unroutable {
                exchange: self.exchange.clone(),
                routing_key: self.routing_key.clone(),
                reply_text: returned.reply_text,
            }),
            Some(Ok(PublishOutcome::Nacked)) => Err(RuntimeError::Nacked {
                exchange: self.exchange.clone(),
                routing_key: self.routing_key.clone(),
            }),
            Some(Err(error)) => Err(error.into()),
            None => Err(RuntimeError::ConfirmTimeout {
                exchange: self.exchange.clone(),
                routing_key: self.routing_key.clone(),
                timeout,
            }),
        };
        let kind = match &result {
            Ok(_) => PublishResult::Confirmed,
            Err(RuntimeError::Unroutable { .. }) => PublishResult::Unroutable,
            Err(_) => PublishResult::Failed,
        };
        self.metrics.record(kind, started.elapsed().as_secs_f64());
        telemetry::record_outcome(span, kind.as_str());
        result
    }
}

/// A publish handed to the broker, waiting for its confirm. Resolves to the envelope as sent,
/// or to the error [`Publisher::send`] would have returned. Holds one of the connection's
/// outstanding-confirm slots until it resolves or is dropped; dropping it unawaited loses the
/// message's fate, not the message.
#[must_use = "a publish is only known to be safe once its confirm resolved"]
pub struct PendingConfirm {
    future: Pin<Box<dyn Future<Output = Result<Envelope, RuntimeError>> + Send + Sync>>,
}

// A window of pending confirms (a `FuturesUnordered` of them) is borrowed across `.await`s in
// spawned tasks, which needs `Sync` as well as `Send`.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PendingConfirm>();
};

impl PendingConfirm {
    fn failed(error: RuntimeError) -> Self {
        Self {
            future: Box::pin(std::future::ready(Err(error))),
        }
    }
}

impl std::fmt::Debug for PendingConfirm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PendingConfirm")
    }
}

impl Future for PendingConfirm {
    type Output = Result<Envelope, RuntimeError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.future.as_mut().poll(cx)
    }
}
