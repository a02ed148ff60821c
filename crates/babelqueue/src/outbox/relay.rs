//! The relay of ADR-0029: publishes committed rows verbatim through any binding.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use polyq_runtime::Shutdown;

use crate::outbox::error::OutboxError;
use polyq_runtime::outbox::{OutboxStatus, linear_backoff, relay_until_stopped};

use crate::outbox::{Failure, OutboxRecord, OutboxStore};
use crate::transport::Transport;
use crate::whitespace::is_blank;

/// Rows fetched per [`OutboxRelay::flush`] by default (the Go relay's).
pub const DEFAULT_BATCH_SIZE: usize = 100;

/// Publishes what [`Outbox::write`](crate::outbox::Outbox::write) committed, through any
/// binding (memory, Redis, RabbitMQ).
///
/// [`flush`](OutboxRelay::flush) claims one batch ([`OutboxStore::fetch_unpublished`]),
/// publishes each row's stored bytes verbatim (never decoded and re-encoded, so `trace_id` and
/// the producer's bytes survive) and marks published only the rows the binding accepted. A
/// failed publish counts an attempt, keeps its reason and is held back for a bounded linear
/// backoff (`step` per earlier attempt, at most `cap`; the Go defaults 50 ms and 5 s): the row
/// waits, not the relay, so one failing queue does not hold up the rest. A row whose body is not
/// an envelope or whose queue is blank can never be published and is marked `failed` with the
/// reason. Delivery is at least once; consumers deduplicate on `meta.id`.
///
/// ```no_run
/// # #[cfg(feature = "postgres")]
/// # async fn run(db: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use babelqueue::BabelQueue;
/// use babelqueue::outbox::{OutboxRelay, PgOutboxStore};
///
/// let queue = BabelQueue::connect("redis://127.0.0.1:6379/0").await?;
/// let relay = OutboxRelay::new(PgOutboxStore::new(db), queue.transport().clone());
/// relay.run(polyq_runtime::Shutdown::on_signals()).await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct OutboxRelay<T> {
    store: Arc<dyn OutboxStore>,
    transport: Arc<T>,
    batch_size: usize,
    backoff_step: Duration,
    backoff_cap: Duration,
    poll_interval: Duration,
}

/// What a pass (or a drain) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlushReport {
    /// Rows the binding accepted, now marked published.
    pub published: usize,
    /// Rows whose publish failed or that can never be published, marked failed.
    pub failed: usize,
}

impl<T: Transport> OutboxRelay<T> {
    /// A relay with the Go defaults: batches of 100, backoff 50 ms per attempt up to 5 s.
    pub fn new(store: impl OutboxStore, transport: Arc<T>) -> Self {
        Self {
            store: Arc::new(store),
            transport,
            batch_size: DEFAULT_BATCH_SIZE,
            backoff_step: Duration::from_millis(50),
            backoff_cap: Duration::from_secs(5),
            poll_interval: Duration::from_millis(200),
        }
    }

    /// Rows fetched per pass (default 100).
    ///
    /// # Errors
    /// [`OutboxError::InvalidOption`] unless between 1 and 10 000.
    pub fn batch_size(mut self, rows: usize) -> Result<Self, OutboxError> {
        if !(1..=10_000).contains(&rows) {
            return Err(OutboxError::InvalidOption {
                option: "batch_size",
                reason: "must be between 1 and 10 000",
            });
        }
        self.batch_size = rows;
        Ok(self)
    }

    /// The backoff after a failed publish: `step` per earlier attempt plus one, at most `cap`
    /// (default 50 ms and 5 s).
    pub fn backoff(mut self, step: Duration, cap: Duration) -> Self {
        self.backoff_step = step;
        self.backoff_cap = cap;
        self
    }

    /// How long [`OutboxRelay::run`] waits after a pass that found less than a full batch
    /// (default 200 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The store the relay drains.
    pub fn store(&self) -> &dyn OutboxStore {
        &*self.store
    }

    /// Publishes one batch and marks every row published or failed.
    ///
    /// # Errors
    /// A database failure; rows claimed before it are offered again when their lease runs out.
    pub async fn flush(&self) -> Result<FlushReport, OutboxError> {
        let records = self.store.fetch_unpublished(self.batch_size).await?;
        let mut report = FlushReport::default();
        let mut publishable = Vec::with_capacity(records.len());
        for record in records {
            match unpublishable(&record) {
                Some(reason) => {
                    tracing::warn!(table = self.store.name(), id = record.id, %reason, "an outbox row cannot be published; it is marked failed");
                    self.store
                        .mark_failed(record.id, &reason, Failure::Permanent)
                        .await?;
                    report.failed += 1;
                }
                None => publishable.push(record),
            }
        }
        let outcomes = join_all(publishable.iter().map(|record| {
            self.transport
                .publish(&record.queue, record.body.clone().into(), &[])
        }))
        .await;
        let mut published = Vec::with_capacity(outcomes.len());
        for (record, outcome) in publishable.iter().zip(outcomes) {
            match outcome {
                Ok(()) => published.push(record.id),
                Err(error) => {
                    let reason = polyq_amqp::error_chain(&error);
                    tracing::warn!(table = self.store.name(), id = record.id, %reason, "an outbox publish failed; it is retried after a backoff");
                    let backoff = self.backoff_for(record.attempts);
                    self.store
                        .mark_failed(record.id, &reason, Failure::Retry { backoff })
                        .await?;
                    report.failed += 1;
                }
            }
        }
        self.store.mark_published(&published).await?;
        report.published = published.len();
        Ok(report)
    }

    /// Flushes until a pass publishes nothing (drained, or only rows under backoff are left),
    /// at most `max_passes` (the Go relay's ceiling is 10 000); the passes added up.
    ///
    /// # Errors
    /// As [`OutboxRelay::flush`].
    pub async fn drain(&self, max_passes: usize) -> Result<FlushReport, OutboxError> {
        let mut total = FlushReport::default();
        for _ in 0..max_passes {
            let pass = self.flush().await?;
            total.published += pass.published;
            total.failed += pass.failed;
            if pass.published == 0 {
                break;
            }
        }
        Ok(total)
    }

    /// Flushes until `shutdown` stops it: a pass that found a full batch is followed by the next
    /// at once, any other by [`OutboxRelay::poll_interval`]. A failing database is logged and
    /// tried again after the interval. The pass under way when the stop comes is finished.
    pub async fn run(&self, shutdown: Shutdown) {
        relay_until_stopped(&shutdown, self.poll_interval, || async {
            match self.flush().await {
                Ok(pass) => pass.published + pass.failed >= self.batch_size,
                Err(error) => {
                    tracing::warn!(table = self.store.name(), error = %polyq_amqp::error_chain(&error), "an outbox pass failed; trying again");
                    false
                }
            }
        })
        .await;
    }

    /// Pending and failed rows and the lag.
    ///
    /// # Errors
    /// A database failure.
    pub async fn status(&self) -> Result<OutboxStatus, OutboxError> {
        self.store.status().await
    }

    fn backoff_for(&self, prior_attempts: i32) -> Duration {
        let prior = u32::try_from(prior_attempts).unwrap_or(0);
        linear_backoff(self.backoff_step, self.backoff_cap, prior)
    }
}

/// Why a row can never be published as it is, if it cannot.
fn unpublishable(record: &OutboxRecord) -> Option<String> {
    if is_blank(&record.queue) {
        return Some("the queue column is blank".to_owned());
    }
    crate::decode(record.body.as_bytes())
        .err()
        .map(|cause| format!("the body is not a BabelQueue envelope: {cause}"))
}
