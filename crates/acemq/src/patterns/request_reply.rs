//! Request/reply over queues: a [`Requester`] with its own reply queue and a responder
//! ([`respond`]) answering through the default exchange.
//!
//! On the wire (reference §2.8): the requester writes the reply queue both as the AMQP
//! `reply-to` property and as the `acemq-reply-to` header, and pairs replies with requests by
//! the envelope correlation (a fresh UUID per request; the AMQP `correlation-id` is not used).
//! The reply queue is `acemq.reply.<uuid>`, classic, durable and expiring after ten minutes
//! unused (`x-expires` 600000), as Java declares it; [`Requester::close`] deletes it.
//!
//! The responder answers with the request's correlation copied and causation set to the
//! request's id. When the handler fails it answers once with the `acemq-error` header
//! (`<ErrorType>: <message>`) and a `null` body and rejects the request into `Q.dlq`, never
//! retrying it (a retry could answer twice). A request without a reply address is
//! acknowledged without running the handler and counted, as Java does.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use acemq::AceMq;
//! use acemq::patterns::request_reply::{Requester, respond};
//! use polyq_amqp::QueueSpec;
//!
//! let mq = AceMq::connect("memory://doc-request-reply").await?;
//! mq.client().declare_queue(&QueueSpec::new("math.double")).await?;
//! let double = |m: acemq::Message<u32>| async move {
//!     Ok::<_, std::convert::Infallible>(m.payload() * 2)
//! };
//! let responder = respond(&mq, mq.consumer::<u32>("math.double"), double).await?;
//!
//! let requester = Requester::start(&mq).await?;
//! let doubled: u32 = requester.request("", "math.double", &21).await?;
//! assert_eq!(doubled, 42);
//! assert_eq!(responder.answered(), 1);
//! requester.close().await?;
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt as _;
use polyq_amqp::{ConsumeOptions, FieldValue, Properties, QueueSpec};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::PatternError;
use crate::contract::codec::{Decode as _, Json};
use crate::contract::topology::{QUEUE_TYPE_ARGUMENT, QueueType};
use crate::contract::{headers, lenient, wire};
use crate::runtime::consumer::{
    Consumer, ConsumerBuilder, DrainReport, HandlerError, Message, Outcome,
};
use crate::runtime::telemetry::{self, RequestMetrics, RequestResult};
use crate::{AceMq, Envelope, RuntimeError};

/// How long a request waits for its reply by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an unused reply queue lives on the broker (`x-expires`), in milliseconds.
pub const REPLY_QUEUE_EXPIRES_MS: i64 = 600_000;

/// A reply as it arrived.
struct Reply {
    properties: Properties,
    body: Bytes,
}

type Waiting = Arc<Mutex<HashMap<String, oneshot::Sender<Reply>>>>;

/// Sends requests and waits for their replies on a reply queue of its own; many requests may
/// be in flight at once. Cheap to share behind an `Arc`; [`close`](Requester::close) it.
pub struct Requester {
    mq: AceMq,
    reply_queue: String,
    timeout: Duration,
    waiting: Waiting,
    late: Arc<AtomicU64>,
    timed_out: AtomicU64,
    metrics: RequestMetrics,
    listener: JoinHandle<()>,
}

impl std::fmt::Debug for Requester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Requester")
            .field("reply_queue", &self.reply_queue)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Requester {
    /// Declares a reply queue `acemq.reply.<uuid>` and starts listening on it.
    pub async fn start(mq: &AceMq) -> Result<Requester, PatternError> {
        let reply_queue = format!("acemq.reply.{}", uuid::Uuid::new_v4());
        let client = mq.client();
        client
            .declare_queue(
                &QueueSpec::new(reply_queue.as_str())
                    .argument(
                        QUEUE_TYPE_ARGUMENT,
                        FieldValue::from(QueueType::Classic.as_str()),
                    )
                    .argument("x-expires", FieldValue::I64(REPLY_QUEUE_EXPIRES_MS)),
            )
            .await?;
        let mut replies = client
            .consume(&reply_queue, &ConsumeOptions::default())
            .await?;
        let waiting: Waiting = Arc::default();
        let late = Arc::new(AtomicU64::new(0));
        let listener = tokio::spawn({
            let waiting = Arc::clone(&waiting);
            let late = Arc::clone(&late);
            let queue = reply_queue.clone();
            async move {
                while let Some(Ok(delivery)) = replies.next().await {
                    // A reply is only ever worth one look: settle it before handing it over.
                    if let Err(e) = delivery.ack().await {
                        tracing::warn!(queue = %queue, error = %e, "cannot acknowledge a reply");
                    }
                    let correlation =
                        lenient::text(delivery.properties.headers.get(headers::CORRELATION));
                    let waiter = correlation.and_then(|c| {
                        waiting
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .remove(&c)
                    });
                    let reply = Reply {
                        properties: delivery.properties,
                        body: delivery.body,
                    };
                    if waiter.is_none_or(|w| w.send(reply).is_err()) {
                        late.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(queue = %queue, "dropped a reply nobody waits for");
                    }
                }
            }
        });
        Ok(Requester {
            mq: mq.clone(),
            reply_queue,
            timeout: DEFAULT_TIMEOUT,
            waiting,
            late,
            timed_out: AtomicU64::new(0),
            metrics: RequestMetrics::new(mq.shared.transport),
            listener,
        })
    }

    /// Sets the timeout of [`request`](Requester::request) (default [`DEFAULT_TIMEOUT`]).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The reply queue's name.
    pub fn reply_queue(&self) -> &str {
        &self.reply_queue
    }

    /// Replies that came after their request timed out, or for no request of this requester;
    /// they were dropped.
    pub fn late_replies(&self) -> u64 {
        self.late.load(Ordering::Relaxed)
    }

    /// Requests that timed out.
    pub fn timed_out(&self) -> u64 {
        self.timed_out.load(Ordering::Relaxed)
    }

    /// Sends `request` as JSON to `exchange` with `routing_key` and waits for the reply,
    /// up to the requester's timeout.
    pub async fn request<Q, R>(
        &self,
        exchange: &str,
        routing_key: &str,
        request: &Q,
    ) -> Result<R, PatternError>
    where
        Q: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        self.request_within(exchange, routing_key, request, self.timeout)
            .await
    }

    /// [`request`](Requester::request) with a timeout of its own. A timeout
    /// ([`PatternError::Timeout`]) says nothing about whether the responder did the work.
    pub async fn request_within<Q, R>(
        &self,
        exchange: &str,
        routing_key: &str,
        request: &Q,
        timeout: Duration,
    ) -> Result<R, PatternError>
    where
        Q: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let correlation_id = uuid::Uuid::new_v4().to_string();
        let envelope = Envelope::of(wire::type_for(routing_key))
            .correlation_id(correlation_id.as_str())
            .build()
            .map_err(RuntimeError::from)?;

        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(correlation_id.clone(), tx);
        let forget = || {
            self.waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&correlation_id);
        };
        let started = Instant::now();
        // Through a publisher, so publish interceptors and publish metrics see requests too.
        let sent = self
            .mq
            .publisher::<Q>(exchange, routing_key)
            .with_reply_to(self.reply_queue.as_str())
            .send_with(request, envelope)
            .await;
        if let Err(e) = sent {
            forget();
            return Err(e.into());
        }
        let reply = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(reply)) => {
                let seconds = started.elapsed().as_secs_f64();
                self.metrics.record(RequestResult::Answered, seconds);
                reply
            }
            Ok(Err(_)) => return Err(PatternError::Closed { correlation_id }),
            Err(_) => {
                forget();
                self.timed_out.fetch_add(1, Ordering::Relaxed);
                let seconds = started.elapsed().as_secs_f64();
                self.metrics.record(RequestResult::TimedOut, seconds);
                return Err(PatternError::Timeout {
                    correlation_id,
                    exchange: exchange.to_owned(),
                    routing_key: routing_key.to_owned(),
                    timeout,
                });
            }
        };
        if let Some(error) = reply.properties.headers.get(headers::RESPONDER_ERROR) {
            return Err(PatternError::Responder {
                correlation_id,
                error: lenient::text(Some(error)).unwrap_or_default(),
            });
        }
        Json.decode(&reply.body).map_err(|e| PatternError::Decode {
            correlation_id,
            reason: e.to_string(),
        })
    }

    /// Stops listening and deletes the reply queue; calls still waiting fail with
    /// [`PatternError::Closed`].
    pub async fn close(self) -> Result<(), PatternError> {
        self.listener.abort();
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        match self.mq.client().delete_queue(&self.reply_queue).await {
            Ok(_) | Err(polyq_amqp::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

impl Drop for Requester {
    /// A requester dropped without [`close`](Requester::close) stops listening; its reply
    /// queue expires on the broker after [`REPLY_QUEUE_EXPIRES_MS`].
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// Counts of a responder.
#[derive(Debug, Default)]
struct Counts {
    answered: AtomicU64,
    failed: AtomicU64,
    unanswerable: AtomicU64,
}

/// A running responder: the consumer and its counts.
#[derive(Debug)]
pub struct Responder {
    consumer: Consumer,
    counts: Arc<Counts>,
}

impl Responder {
    /// Requests answered (counted before the reply is sent, as Java does).
    pub fn answered(&self) -> u64 {
        self.counts.answered.load(Ordering::Relaxed)
    }

    /// Requests whose handler failed: answered with `acemq-error` and rejected into `Q.dlq`.
    pub fn failed(&self) -> u64 {
        self.counts.failed.load(Ordering::Relaxed)
    }

    /// Requests without a reply address, acknowledged unhandled.
    pub fn unanswerable(&self) -> u64 {
        self.counts.unanswerable.load(Ordering::Relaxed)
    }

    /// Drains the consumer; see [`Consumer::drain`].
    pub async fn drain(self, timeout: Duration) -> DrainReport {
        self.consumer.drain(timeout).await
    }
}

/// Starts answering the requests `consumer` (made from `mq`) receives with `handler`'s result,
/// as JSON. The consumer's options (prefetch, concurrency, ...) are the responder's; its retry
/// policy only applies to replies that could not be published (a handler failure is never
/// retried).
///
/// The reply address is read from the `acemq-reply-to` header, then from the AMQP `reply-to`
/// property.
pub async fn respond<Q, R, E, F, Fut>(
    mq: &AceMq,
    consumer: ConsumerBuilder<Q>,
    handler: F,
) -> Result<Responder, RuntimeError>
where
    Q: Send + 'static,
    R: Serialize + Send + Sync + 'static,
    E: Into<HandlerError> + Send + 'static,
    F: Fn(Message<Q>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
{
    let counts = Arc::new(Counts::default());
    let handler = Arc::new(handler);
    let mq = mq.clone();
    let consumer = consumer
        .start({
            let counts = Arc::clone(&counts);
            move |message: Message<Q>| {
                let handler = Arc::clone(&handler);
                let counts = Arc::clone(&counts);
                let mq = mq.clone();
                async move { answer(&mq, &counts, &*handler, message).await }
            }
        })
        .await?;
    Ok(Responder { consumer, counts })
}

async fn answer<Q, R, E, F, Fut>(
    mq: &AceMq,
    counts: &Counts,
    handler: &F,
    message: Message<Q>,
) -> Outcome
where
    R: Serialize + Send + Sync + 'static,
    E: Into<HandlerError>,
    F: Fn(Message<Q>) -> Fut,
    Fut: Future<Output = Result<R, E>>,
{
    // Ports that write only the AMQP property (or a plain AMQP client) are answered too.
    let reply_to = lenient::text(message.envelope().headers().get(headers::REPLY_TO))
        .or_else(|| message.reply_to().map(str::to_owned));
    let Some(reply_to) = reply_to else {
        counts.unanswerable.fetch_add(1, Ordering::Relaxed);
        telemetry::dropped(message.queue(), "no_reply_address");
        tracing::warn!(queue = %message.queue(), id = %message.envelope().id(), "request without a reply address acknowledged unanswered");
        return Outcome::Accept;
    };
    let request = message.envelope().clone();
    let queue = message.queue().to_owned();
    let reply = request
        .causing(wire::type_for(&reply_to))
        .build_at(time::OffsetDateTime::now_utc());
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) => return Outcome::retry(e),
    };
    match handler(message).await {
        Ok(answer) => {
            counts.answered.fetch_add(1, Ordering::Relaxed);
            let sent = mq
                .publisher::<R>("", reply_to.as_str())
                .send_with(&answer, reply)
                .await;
            settle_reply(sent, &queue, &reply_to, Outcome::Accept)
        }
        Err(error) => {
            let error: HandlerError = error.into();
            counts.failed.fetch_add(1, Ordering::Relaxed);
            let failed = reply
                .to_builder()
                .header(headers::RESPONDER_ERROR, error.to_string())
                .build();
            let sent = match failed {
                Ok(failed) => {
                    mq.publisher::<Option<()>>("", reply_to.as_str())
                        .send_with(&None, failed)
                        .await
                }
                Err(e) => Err(e.into()),
            };
            settle_reply(sent, &queue, &reply_to, Outcome::Reject(error))
        }
    }
}

/// A reply into a queue that is gone (its requester closed or expired) cannot be delivered to
/// anyone: the request is settled as decided. A reply the broker did not take is retried, as
/// the requester has not seen it.
fn settle_reply(
    sent: Result<Envelope, RuntimeError>,
    queue: &str,
    reply_to: &str,
    decided: Outcome,
) -> Outcome {
    match sent {
        Ok(_) => decided,
        Err(RuntimeError::Unroutable { .. }) => {
            telemetry::dropped(queue, "reply_queue_gone");
            tracing::warn!(reply_to = %reply_to, "reply queue is gone; the reply was dropped");
            decided
        }
        Err(e) => Outcome::retry(e),
    }
}
