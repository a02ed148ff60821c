//! Consuming: a handler per delivery, its outcome carried out by the retry engine, pause and
//! resume, and a graceful drain.
//!
//! For each delivery: the envelope is read from the headers, the body decoded by content type
//! (undecodable → `Q.parked` with the original bytes), consume interceptors run, the handler
//! runs, and its [`Outcome`] decides: accept → ack; retry → the retry policy (consumer wait or
//! broker rung, then republish with the attempt raised, then ack; or `Q.dlq` once it gives up);
//! reject → `Q.dlq`; park → `Q.parked`. The delivery is acknowledged only after the handler
//! finished. A panicking handler is caught and its message rejected into `Q.dlq`; a panicking
//! consume interceptor fails the delivery as its error would (the retry path).
//!
//! [`Consumer::drain_on`] stops a consumer on the same [`Shutdown`] signal the BabelQueue worker
//! takes, [`Shutdown::on_signals`] for SIGINT and SIGTERM.

mod dispatch;
mod handler;
mod idempotent;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use polyq_amqp::ConsumeOptions;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use handler::{HandlerError, IntoOutcome, Message, Outcome};
pub use polyq_runtime::Shutdown;

use crate::contract::codec::{Composite, Decode};
use crate::contract::retry::RetryPolicy;
use crate::contract::topology::{self, TopologyPlan};
use crate::error::RuntimeError;
use crate::idempotency::{IdempotencyStore, KeyFn};
use crate::runtime::connection::AceMq;
use crate::runtime::engine::Engine;
use crate::runtime::telemetry::ConsumeMetrics;

/// Deliveries the broker hands a consumer before any is acknowledged, by default.
pub const DEFAULT_PREFETCH: u16 = 50;

/// How long a consumer dropped without [`Consumer::drain`] lets its handlers finish.
pub const DROP_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

type BoxHandler<T> = Box<dyn Fn(Message<T>) -> BoxFuture<'static, Outcome> + Send + Sync>;

/// Configures a consumer of one queue; made by [`AceMq::consumer`] or
/// [`AceMq::consumer_with`]. Every setter documents its default.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use acemq::{AceMq, Message, Outcome};
/// use acemq::retry::RetryPolicy;
/// use polyq_amqp::QueueSpec;
///
/// let mq = AceMq::connect("memory://doc-consumer").await?;
/// mq.client().declare_queue(&QueueSpec::new("orders.new")).await?;
/// let (seen, mut received) = tokio::sync::mpsc::unbounded_channel();
/// let consumer = mq
///     .consumer::<u32>("orders.new")
///     .retry(RetryPolicy::exponential(3, Duration::from_millis(10), Duration::from_millis(40))?)
///     .concurrency(4)
///     .start(move |message: Message<u32>| {
///         let seen = seen.clone();
///         async move {
///             seen.send((*message.payload(), message.envelope().attempt())).ok();
///             if message.envelope().attempt() < 2 {
///                 return Outcome::retry("not yet");
///             }
///             Outcome::Accept
///         }
///     })
///     .await?;
///
/// mq.publisher::<u32>("", "orders.new").send(&7).await?;
/// assert_eq!(received.recv().await, Some((7, 1)));
/// assert_eq!(received.recv().await, Some((7, 2)));
/// let report = consumer.drain(Duration::from_secs(5)).await;
/// assert_eq!(report.interrupted, 0);
/// # Ok(())
/// # }
/// ```
#[must_use = "a consumer builder does nothing until started"]
pub struct ConsumerBuilder<T> {
    mq: AceMq,
    queue: String,
    policy: RetryPolicy,
    prefetch: u16,
    concurrency: usize,
    declare: bool,
    decoders: Composite<T>,
    idempotency: Option<Arc<dyn IdempotencyStore>>,
    idempotency_key: Option<KeyFn>,
}

impl<T> std::fmt::Debug for ConsumerBuilder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerBuilder")
            .field("queue", &self.queue)
            .field("policy", &self.policy.to_string())
            .field("prefetch", &self.prefetch)
            .field("concurrency", &self.concurrency)
            .field("declare", &self.declare)
            .field("idempotent", &self.idempotency.is_some())
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> ConsumerBuilder<T> {
    pub(crate) fn new(mq: AceMq, queue: String, decoders: Composite<T>) -> Self {
        Self {
            mq,
            queue,
            policy: RetryPolicy::none(),
            prefetch: DEFAULT_PREFETCH,
            concurrency: 1,
            declare: true,
            decoders,
            idempotency: None,
            idempotency_key: None,
        }
    }

    /// The retry policy. Default [`RetryPolicy::none`]: one attempt, then `Q.dlq`.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Deliveries the broker hands this consumer before any is acknowledged (at least 1, and
    /// at least the concurrency). Default 50.
    pub fn prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Handlers running at once (at least 1). Default 1: one consumer is serial.
    pub fn concurrency(mut self, handlers: usize) -> Self {
        self.concurrency = handlers;
        self
    }

    /// Whether to declare, before subscribing, what the contract has consumers declare:
    /// `acemq.dlx`, `Q.dlq`, `Q.parked` and, when the policy has broker waits, `acemq.retry`,
    /// the rungs and the binding that brings expired retries home. The source queue is never
    /// declared. Default `true`.
    pub fn declare(mut self, declare: bool) -> Self {
        self.declare = declare;
        self
    }

    /// Makes the consumer idempotent with `store` (see [`crate::idempotency`]): each message's
    /// key is claimed before the handler runs, confirmed after it succeeded and released after
    /// it failed. A duplicate of a confirmed message is acknowledged without running the
    /// handler; a message another instance holds a live claim on is republished to this queue
    /// unchanged after about a second (no attempt consumed, never requeued); a store that
    /// fails fails the delivery as a handler error would. The key is the envelope id unless
    /// [`ConsumerBuilder::idempotency_key`] gives another. Default: not idempotent.
    ///
    /// Pipeline steps take it through their `configure` closure. A message keeps its id along
    /// a pipeline, so steps sharing one store need keys of their own (a table or prefix per
    /// step, or [`ConsumerBuilder::idempotency_key`]), or the second step finds the first
    /// step's confirmation.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use acemq::{AceMq, Envelope, Message};
    /// use acemq::idempotency::InMemoryIdempotencyStore;
    /// use polyq_amqp::QueueSpec;
    ///
    /// let mq = AceMq::connect("memory://doc-idempotent").await?;
    /// mq.client().declare_queue(&QueueSpec::new("payments")).await?;
    /// let (charged, mut charges) = tokio::sync::mpsc::unbounded_channel();
    /// let consumer = mq
    ///     .consumer::<u32>("payments")
    ///     .idempotent(InMemoryIdempotencyStore::new())
    ///     .start(move |message: Message<u32>| {
    ///         let charged = charged.clone();
    ///         async move { charged.send(*message.payload()).ok(); }
    ///     })
    ///     .await?;
    ///
    /// let publisher = mq.publisher::<u32>("", "payments");
    /// let payment = || Envelope::of("payment").id("payment-1").build();
    /// publisher.send_with(&40, payment()?).await?;
    /// publisher.send_with(&40, payment()?).await?; // published again by an upstream retry
    /// publisher.send_with(&2, Envelope::of("payment").id("payment-2").build()?).await?;
    /// assert_eq!(charges.recv().await, Some(40));
    /// assert_eq!(charges.recv().await, Some(2), "the duplicate was skipped");
    /// consumer.drain(Duration::from_secs(5)).await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn idempotent(mut self, store: impl IdempotencyStore) -> Self {
        self.idempotency = Some(Arc::new(store));
        self
    }

    /// How an idempotent consumer derives a message's key. Default: its envelope id.
    pub fn idempotency_key(
        mut self,
        key: impl Fn(&crate::Envelope) -> String + Send + Sync + 'static,
    ) -> Self {
        self.idempotency_key = Some(Arc::new(key));
        self
    }

    /// Adds a decoder, tried after the ones before it for the message's content type (see
    /// [`Composite`]).
    pub fn decoder(mut self, decoder: impl Decode<T>) -> Self {
        self.decoders = self.decoders.with(decoder);
        self
    }

    /// Declares the consumer side of the topology (see [`ConsumerBuilder::declare`]),
    /// subscribes and starts handling deliveries with `handler`.
    ///
    /// The handler is an async function of a [`Message`] returning an [`Outcome`], `()` or a
    /// `Result` (an error is [`Outcome::Retry`]).
    pub async fn start<F, Fut, O>(self, handler: F) -> Result<Consumer, RuntimeError>
    where
        F: Fn(Message<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = O> + Send + 'static,
        O: IntoOutcome + 'static,
    {
        self.check()?;
        if self.declare {
            declare(
                &self.mq.shared.client,
                &TopologyPlan::for_consumer(&self.queue, &self.policy),
            )
            .await?;
        }
        verify_rung_route(&self.mq.shared.client, &self.queue, &self.policy).await?;
        let handler: BoxHandler<T> =
            Box::new(move |message| handler(message).map(IntoOutcome::into_outcome).boxed());
        let queue: Arc<str> = Arc::from(self.queue.as_str());
        let abort = CancellationToken::new();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let worker = Arc::new(dispatch::Worker {
            mq: self.mq.clone(),
            queue: Arc::clone(&queue),
            decoders: self.decoders,
            handler,
            in_flight: Arc::clone(&in_flight),
            subscription: ConsumeOptions::default().prefetch(self.prefetch),
            idempotency: self.idempotency.map(|store| {
                idempotent::Idempotency::new(
                    store,
                    self.idempotency_key,
                    &self.queue,
                    self.mq.shared.transport,
                )
            }),
            engine: Engine {
                shared: Arc::clone(&self.mq.shared),
                queue,
                metrics: ConsumeMetrics::new(&self.queue, self.mq.shared.transport),
                policy: self.policy,
                abort: abort.clone(),
            },
        });
        let stream = worker.subscribe().await?;
        let (control, controls) = mpsc::unbounded_channel();
        let task = tokio::spawn(dispatch::run(worker, stream, self.concurrency, controls));
        tracing::debug!(queue = %self.queue, prefetch = self.prefetch, concurrency = self.concurrency, "consumer started");
        Ok(Consumer {
            queue: self.queue,
            control,
            task: Some(task),
            in_flight,
            abort,
        })
    }

    fn check(&self) -> Result<(), RuntimeError> {
        let invalid = |reason: String| {
            Err(RuntimeError::InvalidOption {
                queue: self.queue.clone(),
                reason,
            })
        };
        if self.prefetch == 0 {
            return invalid("prefetch must be at least 1".to_owned());
        }
        if self.concurrency == 0 {
            return invalid("concurrency must be at least 1".to_owned());
        }
        if self.concurrency > usize::from(self.prefetch) {
            return invalid(format!(
                "concurrency {} exceeds prefetch {}: handlers beyond the prefetch window would never run; raise the prefetch",
                self.concurrency, self.prefetch
            ));
        }
        Ok(())
    }
}

async fn declare(client: &polyq_amqp::Client, plan: &TopologyPlan) -> Result<(), RuntimeError> {
    for exchange in &plan.exchanges {
        client.declare_exchange(&exchange.item).await?;
    }
    for queue in &plan.queues {
        client.declare_queue(&queue.item).await?;
    }
    for binding in &plan.bindings {
        client.bind_queue(&binding.item).await?;
    }
    Ok(())
}

/// Checks, when a rung `policy` waits on exists, that what its dead-letter route passes exists
/// too: the exchange `acemq.retry` and the source queue. The broker dead-letters without a
/// confirm, so a rung whose route misses a part drops every retry that expires on it; a
/// consumer does not start on one. (A rung that does not exist loses nothing: the retry is
/// returned unroutable and republished by the consumer, counted as `acemq.retry.rung.missing`.)
/// AMQP cannot tell a binding: the binding `queue` ← `acemq.retry` is the consumer's own
/// declaration (replayed by the client after every recovery), and `polyq doctor` reads it from
/// the management API.
async fn verify_rung_route(
    client: &polyq_amqp::Client,
    queue: &str,
    policy: &RetryPolicy,
) -> Result<(), RuntimeError> {
    let exists = |found: polyq_amqp::Result<()>| match found {
        Ok(()) => Ok(true),
        Err(polyq_amqp::Error::NotFound { .. }) => Ok(false),
        Err(error) => Err(RuntimeError::Transport(error)),
    };
    let mut declared = None;
    for rung in topology::rungs(queue, policy) {
        if exists(client.inspect_queue(&rung.queue).await.map(drop))? {
            declared = Some(rung.queue);
            break;
        }
    }
    let Some(rung) = declared else {
        return Ok(());
    };
    let broken = |reason: String| RuntimeError::RungRouteBroken {
        queue: queue.to_owned(),
        reason,
    };
    if !exists(client.inspect_exchange(topology::RETRY_EXCHANGE).await)? {
        return Err(broken(format!(
            "the exchange {} that the rung {rung} dead-letters to does not exist",
            topology::RETRY_EXCHANGE
        )));
    }
    if !exists(client.inspect_queue(queue).await.map(drop))? {
        return Err(broken(format!(
            "the source queue that the rung {rung} dead-letters back to does not exist"
        )));
    }
    Ok(())
}

/// A running consumer. [`Consumer::pause`] and [`Consumer::resume`] stop and restart its
/// subscription; stop it for good with [`Consumer::drain`], or with [`Consumer::drain_on`] when
/// a [`Shutdown`] asks. Dropping it drains in the background with a [`DROP_DRAIN_TIMEOUT`]
/// deadline.
#[must_use = "dropping a consumer stops it"]
pub struct Consumer {
    queue: String,
    /// Dropping it asks the dispatcher to drain.
    control: mpsc::UnboundedSender<dispatch::Control>,
    task: Option<JoinHandle<DrainReport>>,
    in_flight: Arc<AtomicUsize>,
    /// Cancelled, it interrupts the running handlers (the drain deadline, an immediate stop).
    abort: CancellationToken,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("queue", &self.queue)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Consumer {
    /// The queue it consumes.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Deliveries being handled now (handler running, retry wait or set-aside in progress).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Stops taking deliveries without stopping the consumer: cancels its subscription on the
    /// broker and gives the deliveries received but not yet handled back to it, as
    /// [`Consumer::drain`] does. Handlers already running finish and settle their deliveries
    /// as usual. Messages arriving meanwhile wait in the queue (or go to other consumers)
    /// until [`Consumer::resume`]; a connection recovered while paused does not resume it.
    /// Pausing a paused consumer does nothing.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use acemq::{AceMq, Message};
    /// use polyq_amqp::QueueSpec;
    ///
    /// let mq = AceMq::connect("memory://doc-pause").await?;
    /// mq.client().declare_queue(&QueueSpec::new("invoices")).await?;
    /// let (seen, mut received) = tokio::sync::mpsc::unbounded_channel();
    /// let consumer = mq
    ///     .consume("invoices", move |message: Message<u32>| {
    ///         let seen = seen.clone();
    ///         async move { seen.send(*message.payload()).ok(); }
    ///     })
    ///     .await?;
    ///
    /// consumer.pause().await;
    /// mq.publisher::<u32>("", "invoices").send(&1).await?;
    /// assert_eq!(mq.client().inspect_queue("invoices").await?.message_count, 1);
    ///
    /// consumer.resume().await?;
    /// assert_eq!(received.recv().await, Some(1));
    /// assert!(consumer.drain(Duration::from_secs(5)).await.is_clean());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn pause(&self) {
        let (done, paused) = oneshot::channel();
        if self.control.send(dispatch::Control::Pause(done)).is_ok() {
            // The dispatcher answers unless it is gone, and then nothing consumes anyway.
            let _ = paused.await;
        }
    }

    /// Subscribes again with the same settings after [`Consumer::pause`], or after the
    /// consumer stopped on its own (its queue was deleted, say) once the cause is gone.
    /// Resuming a running consumer does nothing.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Transport`] when the broker refuses the subscription (no such queue)
    /// or the connection is closed; the consumer stays paused.
    pub async fn resume(&self) -> Result<(), RuntimeError> {
        let (done, resumed) = oneshot::channel();
        self.control
            .send(dispatch::Control::Resume(done))
            .map_err(|_| polyq_amqp::Error::Closed)?;
        resumed.await.map_err(|_| polyq_amqp::Error::Closed)?
    }

    /// Stops taking deliveries, lets running handlers finish (up to `timeout`), gives the
    /// deliveries received but not yet handled back to the broker, and reports what happened.
    /// Handlers still running at the deadline are interrupted and their deliveries given back
    /// too. Deliveries the broker was still sending when the consumer was cancelled are
    /// returned by the broker itself. A paused consumer drains the same way.
    pub async fn drain(mut self, timeout: Duration) -> DrainReport {
        // Fails only when the dispatcher already stopped on its own.
        let _ = self.control.send(dispatch::Control::Drain(timeout));
        let task = self.task.take();
        match task {
            Some(task) => task.await.unwrap_or_else(|error| DrainReport {
                ended: Some(format!("the consumer task failed: {error}")),
                ..DrainReport::default()
            }),
            None => DrainReport::default(),
        }
    }

    /// Runs until `shutdown` asks for a stop, then drains as [`Consumer::drain`] does, letting
    /// running handlers finish for up to `timeout`. An immediate stop ([`Shutdown::stop_now`],
    /// or the second signal of [`Shutdown::on_signals`]) interrupts them at once and gives
    /// their deliveries back, as the deadline would. The BabelQueue worker stops on the same
    /// signal.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use acemq::{AceMq, Message, Shutdown};
    /// use polyq_amqp::QueueSpec;
    ///
    /// let mq = AceMq::connect("memory://doc-drain-on").await?;
    /// mq.client().declare_queue(&QueueSpec::new("emails")).await?;
    /// let consumer = mq
    ///     .consume("emails", |message: Message<String>| async move {
    ///         println!("sending {}", message.payload());
    ///     })
    ///     .await?;
    ///
    /// // In a service: `Shutdown::on_signals()`, stopped by SIGINT or SIGTERM.
    /// let shutdown = Shutdown::new();
    /// let running = tokio::spawn({
    ///     let shutdown = shutdown.clone();
    ///     async move { consumer.drain_on(&shutdown, Duration::from_secs(30)).await }
    /// });
    /// shutdown.stop();
    /// assert!(running.await?.is_clean());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn drain_on(self, shutdown: &Shutdown, timeout: Duration) -> DrainReport {
        shutdown.stopping().await;
        let abort = self.abort.clone();
        let drained = self.drain(timeout);
        tokio::pin!(drained);
        tokio::select! {
            // The drain is polled first, so the dispatcher has been told to stop taking
            // deliveries before an immediate stop interrupts what runs.
            biased;
            report = &mut drained => report,
            () = shutdown.stopping_now() => {
                abort.cancel();
                drained.await
            }
        }
    }
}

/// What a drain found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Handlers that were running when the drain began and finished before the deadline.
    pub completed: usize,
    /// Deliveries received but never handled, given back to the broker unprocessed.
    pub returned: usize,
    /// Handlers still running at the deadline: interrupted, their deliveries given back.
    pub interrupted: usize,
    /// Why the consumer had already stopped before the drain, if it had (the connection was
    /// closed by the application, or the broker cancelled it for good).
    pub ended: Option<String>,
}

impl DrainReport {
    /// Whether every handler finished in time.
    pub fn is_clean(&self) -> bool {
        self.interrupted == 0 && self.ended.is_none()
    }
}
