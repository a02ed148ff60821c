//! The worker runtime: a URN → handler registry over one queue of any [`Transport`], with the
//! reference's retry, dead-letter, poison and unknown-URN behaviour (reference §4), concurrency
//! and graceful shutdown. The same code runs on every binding. [`JobInterceptor`]s run around
//! every handled job.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> babelqueue::Result<()> {
//! use std::time::Duration;
//! use babelqueue::BabelQueue;
//!
//! let queue = BabelQueue::builder("memory://doc-worker").queue("orders").connect().await?;
//! queue.publish("urn:babel:orders:created", &serde_json::json!({"order_id": 1042})).await?;
//!
//! let report = queue
//!     .worker()
//!     .handle("urn:babel:orders:created", |job| async move {
//!         let order: serde_json::Value = job.data_as()?;
//!         assert_eq!(order["order_id"], 1042);
//!         Ok::<_, babelqueue::Error>(())
//!     })
//!     .consume(10, Duration::from_millis(200))
//!     .await?;
//! assert_eq!(report.succeeded, 1);
//! # Ok(())
//! # }
//! ```

mod backoff;
mod dispatch;
mod handler;
mod interceptor;
mod job;

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

pub use backoff::Backoff;
pub use interceptor::{AfterFailure, JobContext, JobInterceptor, JobResult};
pub use job::{Job, REPLAY_BYPASS_HEADER};
pub use polyq_runtime::{BoxError, Shutdown};

use crate::idempotency::Idempotency;
use crate::payload::{PayloadRules, SharedProvider};
use crate::transport::Transport;
use crate::{Error, Result};
use dispatch::{Context, Outcome};
use handler::Registry;
use interceptor::Interceptors;

/// Counter of messages a worker acknowledged and dropped on purpose, by `queue` and `reason`:
/// `unknown_urn` (no handler, unknown-URN strategy `delete`) or `attempts_exhausted` (the last
/// attempt failed with [`Worker::dead_letter`] off). Recorded through the `metrics` facade, so
/// whatever recorder the application installed sees it.
pub const MESSAGES_DROPPED_TOTAL: &str = "polyq.babelqueue.messages.dropped.total";

/// What happens to a message whose URN has no handler (reference §4.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownUrn {
    /// A failure like any other: retried up to `max_attempts`, then dead-lettered with reason
    /// `unknown_urn`. The default in every SDK.
    #[default]
    Fail,
    /// Acknowledged and dropped (logged). Only a message that decodes is dropped: poison still
    /// goes to the dead-letter queue as its poison record, unlike the reference's `delete`.
    Delete,
    /// Put back unchanged for another consumer, after the release delay.
    Release,
    /// Dead-lettered at once with reason `unknown_urn`.
    DeadLetter,
}

impl UnknownUrn {
    /// The spelling every SDK shares: `fail`, `delete`, `release`, `dead_letter`.
    pub fn as_str(self) -> &'static str {
        match self {
            UnknownUrn::Fail => "fail",
            UnknownUrn::Delete => "delete",
            UnknownUrn::Release => "release",
            UnknownUrn::DeadLetter => "dead_letter",
        }
    }
}

impl std::str::FromStr for UnknownUrn {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text {
            "fail" => Ok(UnknownUrn::Fail),
            "delete" => Ok(UnknownUrn::Delete),
            "release" => Ok(UnknownUrn::Release),
            "dead_letter" => Ok(UnknownUrn::DeadLetter),
            other => Err(Error::InvalidOption {
                option: "unknown-URN strategy",
                reason: format!("{other:?} is not one of fail, delete, release, dead_letter"),
            }),
        }
    }
}

/// Counts of what a run did, by how each message was settled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkerReport {
    /// Messages taken off the queue.
    pub received: u64,
    /// Handled successfully.
    pub succeeded: u64,
    /// Re-published for another attempt.
    pub retried: u64,
    /// Written to the dead-letter queue (failed, unknown URN, poison, version-gated).
    pub dead_lettered: u64,
    /// Put back unchanged (`release` strategy, or unfinished at shutdown).
    pub released: u64,
    /// Dropped (`delete` strategy, or attempts exhausted with dead-lettering off).
    pub deleted: u64,
    /// Could not be settled as decided (e.g. the dead-letter queue refused the write); handed
    /// back to the broker, which delivers them again.
    pub unsettled: u64,
}

impl WorkerReport {
    fn count(&mut self, outcome: Outcome) {
        let slot = match outcome {
            Outcome::Succeeded => &mut self.succeeded,
            Outcome::Retried => &mut self.retried,
            Outcome::DeadLettered => &mut self.dead_lettered,
            Outcome::Released => &mut self.released,
            Outcome::Deleted => &mut self.deleted,
            Outcome::Unsettled => &mut self.unsettled,
        };
        *slot += 1;
    }
}

/// Runtime settings; see the setters of [`Worker`] for their meaning and defaults.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) max_attempts: u32,
    pub(crate) backoff: Backoff,
    pub(crate) unknown_urn: UnknownUrn,
    pub(crate) unknown_urn_release_delay: Duration,
    pub(crate) concurrency: usize,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) poll_wait: Duration,
    pub(crate) redelivery_pause: Duration,
    pub(crate) dead_letter: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            backoff: Backoff::none(),
            unknown_urn: UnknownUrn::Fail,
            unknown_urn_release_delay: Duration::ZERO,
            concurrency: 1,
            shutdown_timeout: Duration::from_secs(30),
            poll_wait: Duration::from_secs(1),
            redelivery_pause: Duration::from_secs(1),
            dead_letter: true,
        }
    }
}

impl Settings {
    /// Refuses what the setters take but a worker cannot run with, naming the option, the value
    /// and what is allowed, rather than correcting it behind the caller's back.
    fn validate(&self) -> Result<()> {
        let invalid = |option, value: String, allowed: &str| {
            Err(Error::InvalidOption {
                option,
                reason: format!("was {value}; {allowed}"),
            })
        };
        if self.max_attempts == 0 {
            return invalid(
                "max_attempts",
                "0".to_owned(),
                "it must be at least 1 (1 dead-letters a failing message on its first failure)",
            );
        }
        if self.concurrency == 0 {
            return invalid(
                "concurrency",
                "0".to_owned(),
                "it must be at least 1 handler at a time",
            );
        }
        if let Some(multiplier) = self.backoff.invalid_multiplier() {
            return invalid(
                "backoff multiplier",
                multiplier.to_string(),
                "it must be a finite number of at least 1 (1 waits the same before every retry)",
            );
        }
        Ok(())
    }
}

/// A worker over one queue: register handlers, set options, then [`Worker::run`] until stopped
/// or [`Worker::consume`] a bounded number of messages.
///
/// Handlers are async functions of a [`Job`] returning `Result<(), E>` for any displayable `E`:
/// `Ok` acknowledges the message; `Err` (or a panic) counts an attempt: the message is retried
/// with `attempts+1` while that stays below `max_attempts`, and dead-lettered to
/// `<queue>.dlq` (the binding's [`Transport::dead_letter_queue`]) with the `dead_letter` block
/// (reason `failed`, the error's text and type name) when it does not, or dropped when
/// dead-lettering is off ([`Worker::dead_letter`]).
pub struct Worker<T: Transport> {
    transport: Arc<T>,
    queue: String,
    dead_letter_queue: Option<String>,
    registry: Registry,
    interceptors: Interceptors,
    payload: PayloadRules,
    settings: Settings,
}

impl<T: Transport> std::fmt::Debug for Worker<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("queue", &self.queue)
            .field("dead_letter_queue", &self.dead_letter_queue_name())
            .field("urns", &self.registry.urns().collect::<Vec<_>>())
            .field("interceptors", &self.interceptors.len())
            .field("payload", &self.payload)
            .field("settings", &self.settings)
            .finish()
    }
}

impl<T: Transport> Worker<T> {
    /// A worker on `queue` with no handlers and the default settings.
    pub fn new(transport: Arc<T>, queue: impl Into<String>) -> Self {
        Self {
            transport,
            queue: queue.into(),
            dead_letter_queue: None,
            registry: Registry::default(),
            interceptors: Interceptors::default(),
            payload: PayloadRules::default(),
            settings: Settings::default(),
        }
    }

    /// Registers the handler of `urn` (exact match; registering a URN again replaces it).
    pub fn handle<F, Fut, E>(mut self, urn: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Display + 'static,
    {
        self.registry.insert(urn, handler);
        self
    }

    /// Dedupes the deliveries of every URN on `meta.id` (ADR-0022), except a URN given its own
    /// option with [`Worker::idempotent_for`]. Default: none.
    ///
    /// An id already processed is acknowledged without running the handler; a failed handler
    /// leaves its id unmarked, so retries and dead-lettering apply as without it; a message with
    /// no `meta.id` runs. When the store cannot answer, or a claim stays with another consumer
    /// past the wait, the message goes back to the broker unchanged after the redelivery pause,
    /// no attempt counted (counted as released): it is never acknowledged or dropped for it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> babelqueue::Result<()> {
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::time::Duration;
    /// use babelqueue::{BabelQueue, MakeOptions};
    /// use babelqueue::idempotency::{Idempotency, InMemoryStore};
    ///
    /// let queue = BabelQueue::builder("memory://doc-idempotent").queue("orders").connect().await?;
    /// let order = babelqueue::make(
    ///     "urn:babel:orders:created",
    ///     &serde_json::json!({}),
    ///     MakeOptions::default(),
    /// )?;
    /// queue.publish_envelope(&order, &[]).await?;
    /// queue.publish_envelope(&order, &[]).await?; // the same meta.id again
    ///
    /// let runs = Arc::new(AtomicUsize::new(0));
    /// let counted = runs.clone();
    /// let report = queue
    ///     .worker()
    ///     .idempotent(Idempotency::seen_set(Arc::new(InMemoryStore::new())))
    ///     .handle("urn:babel:orders:created", move |_job| {
    ///         counted.fetch_add(1, Ordering::SeqCst);
    ///         async { Ok::<_, babelqueue::Error>(()) }
    ///     })
    ///     .consume(2, Duration::from_millis(200))
    ///     .await?;
    /// assert_eq!((report.succeeded, runs.load(Ordering::SeqCst)), (2, 1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn idempotent(mut self, idempotency: Idempotency) -> Self {
        self.registry.idempotent(None, idempotency);
        self
    }

    /// Dedupes the deliveries of `urn` on `meta.id` with its own option, as
    /// [`Worker::idempotent`] describes. Default: the option for every URN, if any.
    pub fn idempotent_for(mut self, urn: impl Into<String>, idempotency: Idempotency) -> Self {
        self.registry.idempotent(Some(urn.into()), idempotency);
        self
    }

    /// Validates each message's `data` against its URN's schema in `provider` before the handler
    /// runs (ADR-0024, consumer side); a URN with no schema runs unchecked. Invalid data fails
    /// the delivery as a handler error would, with the violation (URN, pointer, rule) as the
    /// error and `InvalidPayloadError` as its type: retried below `max_attempts`, then
    /// dead-lettered with that reason. A retry and the dead-letter queue carry the body as it
    /// arrived. With `unprotect_payloads` (feature `gdpr`) the cleartext is validated. Default: off.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> babelqueue::Result<()> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use babelqueue::schema::MapProvider;
    /// use serde_json::json;
    ///
    /// let urn = "urn:babel:orders:created";
    /// let queue = babelqueue::BabelQueue::builder("memory://doc-worker-validate")
    ///     .queue("orders")
    ///     .connect()
    ///     .await?;
    /// queue.publish(urn, &json!({"order_id": "seven"})).await?;
    /// let schema = json!({"type": "object", "properties": {"order_id": {"type": "integer"}}});
    /// let schemas = MapProvider::new().with(urn, schema);
    /// let report = queue
    ///     .worker()
    ///     .validate_payloads(Arc::new(schemas))
    ///     .max_attempts(1)
    ///     .handle(urn, |_job| async { Ok::<_, babelqueue::Error>(()) })
    ///     .consume(1, Duration::from_millis(200))
    ///     .await?;
    /// assert_eq!(report.dead_lettered, 1, "{report:?}");
    /// # Ok(())
    /// # }
    /// ```
    pub fn validate_payloads(mut self, provider: SharedProvider) -> Self {
        self.payload.validate_with(provider);
        self
    }

    /// Decrypts, before validation and the handler, each field the URN's schema in `provider`
    /// marks `x-gdpr-sensitive` (ADR-0030, feature `gdpr`; see [`crate::gdpr::unprotect`]): the
    /// handler's [`Job`] holds the cleartext. A field that does not decrypt (a wrong or missing
    /// key, a tampered value) fails the delivery with `DecryptError` as its type, naming the
    /// field: retried below `max_attempts`, then dead-lettered with that reason. A retry and the
    /// dead-letter queue carry the body as it arrived, still encrypted. Default: off.
    #[cfg(feature = "gdpr")]
    pub fn unprotect_payloads(
        mut self,
        provider: SharedProvider,
        cipher: Arc<dyn crate::gdpr::Cipher>,
    ) -> Self {
        self.payload.protect_with(provider, cipher);
        self
    }

    /// Adds an interceptor around every handled job: `before_handle` runs in the order added,
    /// `after_handle` in reverse. A refusing `before_handle` fails the job as a handler error
    /// would (retried below `max_attempts`, then dead-lettered with its error text); see
    /// [`JobInterceptor`].
    pub fn interceptor(mut self, interceptor: impl JobInterceptor) -> Self {
        self.interceptors.push(interceptor);
        self
    }

    /// Deliveries per message before it is dead-lettered (default 3, as in every SDK: a message
    /// that always fails is handled 3 times and lands with `attempts: 3`). At least 1: a worker
    /// given 0 refuses to start ([`Error::InvalidOption`]).
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.settings.max_attempts = max_attempts;
        self
    }

    /// Wait before each retry (default [`Backoff::none`]), honoured where the binding can delay
    /// (RabbitMQ and `memory://` through delay queues, the Laravel Redis layout); ignored by the
    /// default Redis layout. A worker refuses to start with a multiplier below 1 or not finite
    /// ([`Error::InvalidOption`]).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.settings.backoff = backoff;
        self
    }

    /// What to do with a message whose URN has no handler (default [`UnknownUrn::Fail`]).
    pub fn unknown_urn(mut self, strategy: UnknownUrn) -> Self {
        self.settings.unknown_urn = strategy;
        self
    }

    /// Wait before a message released by [`UnknownUrn::Release`] is delivered again (default 0).
    pub fn unknown_urn_release_delay(mut self, delay: Duration) -> Self {
        self.settings.unknown_urn_release_delay = delay;
        self
    }

    /// Handlers running at once (default 1). At least 1: a worker given 0 refuses to start
    /// ([`Error::InvalidOption`]).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.settings.concurrency = concurrency;
        self
    }

    /// Whether a message whose attempts are exhausted goes to the dead-letter queue (default
    /// `true`) or is acknowledged and dropped with a warning (`false`, the Python SDK's default
    /// `dead_letter=False`). It only decides for exhausted retries (a failing handler, the
    /// [`UnknownUrn::Fail`] strategy): poison, version-gated bodies and the
    /// [`UnknownUrn::DeadLetter`] strategy are dead-lettered either way, since a message
    /// nobody could handle is never dropped unseen.
    pub fn dead_letter(mut self, enabled: bool) -> Self {
        self.settings.dead_letter = enabled;
        self
    }

    /// The dead-letter queue (default `<queue>.dlq`, or the binding's own name for it:
    /// [`Transport::dead_letter_queue`]).
    pub fn dead_letter_queue(mut self, queue: impl Into<String>) -> Self {
        self.dead_letter_queue = Some(queue.into());
        self
    }

    /// How long a stop waits for in-flight handlers before releasing their messages unchanged
    /// (default 30 s).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.settings.shutdown_timeout = timeout;
        self
    }

    /// How long one reservation waits for a message before the loop checks for a stop again
    /// (default 1 s); it bounds how long a stop takes to be noticed.
    pub fn poll_wait(mut self, wait: Duration) -> Self {
        self.settings.poll_wait = wait;
        self
    }

    /// Pause before a message whose settlement failed (an unwritable dead-letter queue, a
    /// failed retry publish), or whose idempotency claim another consumer holds, is handed back
    /// to the broker (default 1 s), so a broken queue or store does not become a busy loop.
    pub fn redelivery_pause(mut self, pause: Duration) -> Self {
        self.settings.redelivery_pause = pause;
        self
    }

    /// The queue this worker consumes.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The dead-letter queue it writes to.
    pub fn dead_letter_queue_name(&self) -> String {
        self.dead_letter_queue
            .clone()
            .unwrap_or_else(|| self.transport.dead_letter_queue(&self.queue))
    }

    /// Runs until `shutdown` is stopped: takes messages as handlers free up, then stops taking
    /// them, lets in-flight handlers finish for up to the shutdown timeout, and releases the
    /// messages of those still running.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] before anything is taken when an option is out of range (a
    /// `max_attempts` or `concurrency` of 0, a backoff multiplier below 1). Otherwise only what
    /// ends the loop for good; a failing message, or a broker error while reserving (logged,
    /// then retried after the poll wait), never does.
    pub async fn run(self, shutdown: &Shutdown) -> Result<WorkerReport> {
        self.drive(None, None, shutdown).await
    }

    /// Handles up to `max_messages`, returning once that many were taken and settled, or once
    /// no message came within `idle_timeout`.
    ///
    /// # Errors
    /// As [`Worker::run`].
    pub async fn consume(self, max_messages: u64, idle_timeout: Duration) -> Result<WorkerReport> {
        self.drive(Some(max_messages), Some(idle_timeout), &Shutdown::new())
            .await
    }

    /// [`Worker::consume`] that also ends when `shutdown` is stopped.
    ///
    /// # Errors
    /// As [`Worker::run`].
    pub async fn consume_until(
        self,
        max_messages: u64,
        idle_timeout: Duration,
        shutdown: &Shutdown,
    ) -> Result<WorkerReport> {
        self.drive(Some(max_messages), Some(idle_timeout), shutdown)
            .await
    }

    async fn drive(
        self,
        limit: Option<u64>,
        idle_timeout: Option<Duration>,
        shutdown: &Shutdown,
    ) -> Result<WorkerReport> {
        self.settings.validate()?;
        let settings = self.settings.clone();
        let context = Arc::new(Context {
            transport: self.transport.clone(),
            dead_letter_queue: self.dead_letter_queue_name(),
            queue: self.queue.clone(),
            registry: self.registry,
            interceptors: self.interceptors,
            payload: self.payload,
            settings: self.settings,
        });
        let queue = context.queue.as_str();
        let permits = Arc::new(Semaphore::new(settings.concurrency));
        let mut tasks: JoinSet<Outcome> = JoinSet::new();
        let mut report = WorkerReport::default();
        let wait = idle_timeout.unwrap_or(settings.poll_wait);
        info!(queue, concurrency = settings.concurrency, "worker started");

        while limit.is_none_or(|limit| report.received < limit) && !shutdown.is_stopping() {
            while let Some(done) = tasks.try_join_next() {
                count(&mut report, done);
            }
            let permit = tokio::select! {
                permit = permits.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_closed) => break,
                },
                () = shutdown.stopping() => break,
            };
            // A reservation is never abandoned half-way: the wait bounds how late a stop is seen.
            let reserved = match context.transport.reserve(queue, wait).await {
                Ok(Some(reserved)) => reserved,
                Ok(None) if idle_timeout.is_some() => break,
                Ok(None) => continue,
                Err(error) => {
                    error!(queue, error = %polyq_amqp::error_chain(&error), "reserving failed; trying again");
                    tokio::select! {
                        () = tokio::time::sleep(settings.poll_wait) => {}
                        () = shutdown.stopping() => {}
                    }
                    continue;
                }
            };
            report.received += 1;
            if shutdown.is_stopping() {
                let outcome = match context
                    .transport
                    .release(&reserved.receipt, Duration::ZERO)
                    .await
                {
                    Ok(()) => Outcome::Released,
                    Err(error) => {
                        warn!(queue, error = %polyq_amqp::error_chain(&error), "could not release a message taken while stopping");
                        Outcome::Unsettled
                    }
                };
                report.count(outcome);
                break;
            }
            let context = context.clone();
            let shutdown = shutdown.clone();
            tasks.spawn(async move {
                let outcome = context.dispatch(reserved, &shutdown).await;
                drop(permit);
                outcome
            });
        }

        if let Err(error) = context.transport.unsubscribe(queue).await {
            warn!(queue, error = %polyq_amqp::error_chain(&error), "could not hand back prefetched messages; the broker returns them when the connection closes");
        }
        if !tasks.is_empty() {
            debug!(
                queue,
                in_flight = tasks.len(),
                "waiting for in-flight handlers"
            );
        }
        // The timeout counts from the stop, which may come while handlers are being waited for
        // (a bounded consume that reached its limit); fused, as it is polled again after firing.
        let deadline = async {
            shutdown.stopping().await;
            tokio::time::sleep(settings.shutdown_timeout).await;
        }
        .fuse();
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                done = tasks.join_next() => match done {
                    Some(done) => count(&mut report, done),
                    None => break,
                },
                () = &mut deadline => {
                    warn!(queue, "shutdown timeout: releasing the messages of unfinished handlers");
                    shutdown.stop_now();
                }
                () = shutdown.stopping_now() => {
                    // Handlers see the same stop and release their messages; collect them.
                    while let Some(done) = tasks.join_next().await {
                        count(&mut report, done);
                    }
                    break;
                }
            }
        }
        info!(queue, ?report, "worker stopped");
        Ok(report)
    }
}

fn count(report: &mut WorkerReport, done: std::result::Result<Outcome, tokio::task::JoinError>) {
    match done {
        Ok(outcome) => report.count(outcome),
        // Handler panics are caught inside the task; this is the runtime being torn down.
        Err(error) => {
            error!(error = %polyq_amqp::error_chain(&error), "a message task ended abnormally; its message returns to the broker");
            report.unsettled += 1;
        }
    }
}
