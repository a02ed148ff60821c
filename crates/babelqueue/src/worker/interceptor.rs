//! Interceptors: code that runs around every handled job of a worker, in registration order
//! (the `after` half in reverse), for metrics, logging, tenant checks or refusing a job without
//! touching every handler.

use std::time::{Duration, Instant};

use polyq_runtime::{BoxError, InterceptorChain, Refusal};
use tracing::error;

use super::Job;
use super::handler::Failure;

/// The `exception` of the `dead_letter` block when a `before_handle` refused the job.
const REFUSED: &str = "InterceptorRefused";

/// One job as an interceptor sees it: the same [`Job`] the handler gets, and when its handling
/// began.
#[derive(Debug)]
pub struct JobContext<'a> {
    job: &'a Job,
    started: Instant,
}

impl<'a> JobContext<'a> {
    pub(crate) fn new(job: &'a Job) -> Self {
        Self {
            job,
            started: Instant::now(),
        }
    }

    /// The job: URN, data, attempts, headers, queue.
    pub fn job(&self) -> &'a Job {
        self.job
    }

    /// Time since the first `before_handle` was called; in `after_handle` it spans the
    /// interceptors, the handler and the settlement.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// How a job ended, as `after_handle` sees it, once the message is settled.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobResult {
    /// The handler succeeded; the message was acknowledged.
    Succeeded,
    /// The handler failed, panicked, or a `before_handle` refused the job.
    Failed {
        /// The error's text, as the `dead_letter` block records it.
        error: String,
        /// What became of the message.
        next: AfterFailure,
    },
    /// A stop came while the handler ran; the message was released unchanged.
    Interrupted,
}

impl JobResult {
    /// The error's text, unless the job succeeded or was interrupted.
    pub fn error(&self) -> Option<&str> {
        match self {
            JobResult::Failed { error, .. } => Some(error),
            JobResult::Succeeded | JobResult::Interrupted => None,
        }
    }
}

/// What became of a failed job's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AfterFailure {
    /// Re-published with `attempts+1` for another delivery.
    Retried,
    /// Attempts exhausted: written to the dead-letter queue with the `dead_letter` block.
    DeadLettered,
    /// Attempts exhausted with dead-lettering off
    /// ([`Worker::dead_letter`](super::Worker::dead_letter)): acknowledged and dropped.
    Dropped,
    /// Settling failed (the retry publish or the dead-letter write); the message went back to
    /// the broker, which delivers it again.
    HandedBack,
}

/// Runs around every job a worker hands to a handler: `before_handle` in registration order
/// before the handler, `after_handle` in reverse order once the message is settled, for every
/// interceptor whose `before_handle` passed, whatever the outcome (as acemq's
/// `ConsumeInterceptor` does).
///
/// A `before_handle` that returns an error (or panics) refuses the job as a handler error would:
/// the later interceptors and the handler do not run, and the message is retried while
/// `attempts+1` stays below `max_attempts`, then dead-lettered with the interceptor's error text
/// as the block's `error` (`exception` is `InterceptorRefused`, or `panic`).
///
/// `after_handle` observes: a panic there is logged and the next interceptor still runs; the
/// message is already settled.
///
/// Poison bodies, unknown URNs and version-gated messages never reach a handler, so they never
/// reach an interceptor either.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> babelqueue::Result<()> {
/// use std::time::Duration;
/// use babelqueue::BabelQueue;
/// use babelqueue::worker::{AfterFailure, BoxError, JobContext, JobInterceptor, JobResult};
///
/// /// Refuses jobs of other tenants: they fail as a handler error would.
/// struct Tenant(&'static str);
///
/// impl JobInterceptor for Tenant {
///     fn before_handle(&self, job: &JobContext<'_>) -> Result<(), BoxError> {
///         match job.job().data_as::<serde_json::Value>()?["tenant"].as_str() {
///             Some(tenant) if tenant == self.0 => Ok(()),
///             other => Err(format!("tenant {other:?} is not served here").into()),
///         }
///     }
///
///     fn after_handle(&self, job: &JobContext<'_>, result: &JobResult) {
///         if let JobResult::Failed { error, next: AfterFailure::DeadLettered } = result {
///             eprintln!("{} dead-lettered after {:?}: {error}", job.job().urn(), job.elapsed());
///         }
///     }
/// }
///
/// let queue = BabelQueue::builder("memory://doc-interceptor").queue("orders").connect().await?;
/// queue.publish("urn:babel:orders:created", &serde_json::json!({"tenant": "acme"})).await?;
/// queue.publish("urn:babel:orders:created", &serde_json::json!({"tenant": "umbrella"})).await?;
///
/// let report = queue
///     .worker()
///     .max_attempts(1)
///     .interceptor(Tenant("acme"))
///     .handle("urn:babel:orders:created", |_job| async { Ok::<_, babelqueue::Error>(()) })
///     .consume(2, Duration::from_millis(200))
///     .await?;
/// assert_eq!((report.succeeded, report.dead_lettered), (1, 1));
/// # Ok(())
/// # }
/// ```
pub trait JobInterceptor: Send + Sync + 'static {
    /// Before the handler; an error refuses the job.
    fn before_handle(&self, job: &JobContext<'_>) -> Result<(), BoxError> {
        let _ = job;
        Ok(())
    }

    /// After the handler (or after a refusal) and the settlement, with the outcome.
    fn after_handle(&self, job: &JobContext<'_>, result: &JobResult) {
        let _ = (job, result);
    }
}

/// A worker's interceptors with the type name of each, to say which one refused or panicked.
#[derive(Default)]
pub(crate) struct Interceptors {
    chain: InterceptorChain<dyn JobInterceptor>,
}

impl Interceptors {
    pub(crate) fn push(&mut self, interceptor: impl JobInterceptor) {
        self.chain.push(
            std::any::type_name_of_val(&interceptor),
            Box::new(interceptor),
        );
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.chain.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.chain.len()
    }

    /// Runs `before_handle` in order until one refuses; returns how many passed (they, and only
    /// they, get `after_handle`) and the refusal.
    pub(crate) fn before(&self, job: &JobContext<'_>) -> (usize, Option<Failure>) {
        let before = self
            .chain
            .before(|interceptor| interceptor.before_handle(job));
        let refusal = before.refusal.map(|refusal| match refusal {
            Refusal::Refused { error, .. } => Failure {
                message: error.to_string(),
                exception: REFUSED.to_owned(),
                hand_back: false,
            },
            Refusal::Panicked { interceptor, panic } => {
                error!(queue = %job.job().queue(), interceptor, message = %panic, "an interceptor panicked before the handler; the job fails");
                Failure::panicked(panic)
            }
        });
        (before.passed, refusal)
    }

    /// Runs `after_handle` of the first `passed` interceptors in reverse order.
    pub(crate) fn after(&self, passed: usize, job: &JobContext<'_>, result: &JobResult) {
        self.chain.after(
            passed,
            |interceptor| interceptor.after_handle(job, result),
            |interceptor, panic| {
                error!(queue = %job.job().queue(), interceptor, message = %panic, "an interceptor panicked after the job; ignored");
            },
        );
    }
}
