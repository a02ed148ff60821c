//! The relay of ADR-0029: publishes committed rows verbatim through any binding.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::future::join_all;
use polyq_runtime::Shutdown;

use crate::outbox::error::OutboxError;
use polyq_runtime::outbox::{
    OutboxStatus, Pipeline, RelaySteps, Streak, linear_backoff, relay_drain, relay_streak,
    relay_until_stopped,
};

use crate::outbox::{Failure, OutboxRecord, OutboxStore};
use crate::transport::Transport;
use crate::whitespace::is_blank;

/// Rows fetched per [`OutboxRelay::flush`] by default (the Go relay's).
pub const DEFAULT_BATCH_SIZE: usize = 100;
/// Batches whose publishes may be outstanding at once unless [`OutboxRelay::window`] says
/// otherwise.
pub const DEFAULT_WINDOW: usize = 2;

/// Publishes what [`Outbox::write`] committed, through any binding (memory, Redis, RabbitMQ).
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
///
// Without the feature `Outbox` is not built: the link leads to the feature's note instead.
#[cfg_attr(
    feature = "postgres",
    doc = "[`Outbox::write`]: crate::outbox::Outbox::write"
)]
#[cfg_attr(
    not(feature = "postgres"),
    doc = "[`Outbox::write`]: crate#feature-flags"
)]
#[derive(Debug)]
pub struct OutboxRelay<T> {
    store: Arc<dyn OutboxStore>,
    transport: Arc<T>,
    batch_size: usize,
    backoff_step: Duration,
    backoff_cap: Duration,
    poll_interval: Duration,
    window: usize,
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
            window: DEFAULT_WINDOW,
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

    /// Batches whose publishes may be outstanding at once (default [`DEFAULT_WINDOW`]). While
    /// they are, the next batch is fetched and the batches already published are marked, so
    /// the database's round trips overlap the broker's; each row is still marked only after
    /// the binding accepted it. One batch means a batch's publishes are all answered before
    /// the next is sent.
    ///
    /// # Errors
    /// [`OutboxError::InvalidOption`] unless between 1 and 64.
    pub fn window(mut self, batches: usize) -> Result<Self, OutboxError> {
        if !(1..=64).contains(&batches) {
            return Err(OutboxError::InvalidOption {
                option: "window",
                reason: "must be between 1 and 64 batches",
            });
        }
        self.window = batches;
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
        Ok(self.streak(1, &|| false).await?.report)
    }

    /// Flushes until a pass publishes nothing (drained, or only rows under backoff are left),
    /// at most `max_passes` (the Go relay's ceiling is 10 000); the passes added up. Full
    /// batches follow each other as in [`OutboxRelay::run`]: the next batch is fetched, and
    /// those already published are marked, while up to [`OutboxRelay::window`] batches' publishes
    /// are outstanding.
    ///
    /// # Errors
    /// As [`OutboxRelay::flush`].
    pub async fn drain(&self, max_passes: usize) -> Result<FlushReport, OutboxError> {
        relay_drain(&Steps::new(self), self.window, max_passes).await
    }

    /// Flushes until `shutdown` stops it: a pass that found a full batch is followed by the next
    /// at once (fetched while the publishes of those before are outstanding), any other by
    /// [`OutboxRelay::poll_interval`]. A failing database is logged and tried again after the
    /// interval. The passes under way when the stop comes are finished.
    pub async fn run(&self, shutdown: Shutdown) {
        let stopping = || shutdown.is_stopping();
        relay_until_stopped(&shutdown, self.poll_interval, || async {
            if let Err(error) = self.streak(usize::MAX, &stopping).await {
                tracing::warn!(table = self.store.name(), error = %polyq_amqp::error_chain(&error), "an outbox pass failed; trying again");
            }
            // A streak ends on a batch that was not full, at the stop, or at an error.
            false
        })
        .await;
    }

    /// Passes back to back while each finds a full batch, at most `max_passes`, until `stop`
    /// says so, pipelined by [`relay_streak`]: a row is marked published only once the
    /// binding accepted it, as in [`OutboxRelay::flush`].
    async fn streak(
        &self,
        max_passes: usize,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<Streak<FlushReport>, OutboxError> {
        let pipeline = Pipeline {
            window: self.window,
            max_batches: max_passes,
        };
        relay_streak(&Steps::new(self), pipeline, stop).await
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

impl FlushReport {
    fn add(&mut self, report: FlushReport) {
        self.published += report.published;
        self.failed += report.failed;
    }
}

/// A batch with the binding's answer for each row it sent, and the rows it could not send.
struct Published {
    /// Each sent row's id, failed attempts so far and outcome.
    outcomes: Vec<(i64, i32, Result<(), String>)>,
    /// Each row that can never be published, with the reason.
    unpublishable: Vec<(i64, String)>,
}

/// The relay's steps as [`relay_streak`] overlaps them, with the rows fetched and not marked
/// yet, for the renewals.
struct Steps<'a, T> {
    relay: &'a OutboxRelay<T>,
    unmarked: Mutex<BTreeSet<i64>>,
}

impl<'a, T> Steps<'a, T> {
    fn new(relay: &'a OutboxRelay<T>) -> Self {
        Self {
            relay,
            unmarked: Mutex::default(),
        }
    }

    fn unmarked(&self) -> MutexGuard<'_, BTreeSet<i64>> {
        self.unmarked.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: Transport> RelaySteps for Steps<'_, T> {
    type Batch = Vec<OutboxRecord>;
    type Published = Published;
    type Report = FlushReport;
    type Error = OutboxError;
    type Position = i64;

    async fn lease(&self, after: Option<i64>) -> Result<Vec<OutboxRecord>, OutboxError> {
        let batch = self
            .relay
            .store
            .fetch_unpublished_after(self.relay.batch_size, after)
            .await?;
        self.unmarked().extend(batch.iter().map(|record| record.id));
        Ok(batch)
    }

    /// The row's id, which orders the pending index.
    fn last_position(batch: &Vec<OutboxRecord>) -> Option<i64> {
        batch.last().map(|record| record.id)
    }

    fn is_full(&self, batch: &Vec<OutboxRecord>) -> bool {
        batch.len() >= self.relay.batch_size
    }

    /// Publishes the stored bytes of every row that can be published, all at once, and waits
    /// for the binding's answers.
    async fn publish(&self, batch: Vec<OutboxRecord>) -> Published {
        let relay = self.relay;
        let mut unpublishable = Vec::new();
        let mut sending = Vec::with_capacity(batch.len());
        for record in batch {
            match unpublishable_reason(&record) {
                Some(reason) => unpublishable.push((record.id, reason)),
                None => sending.push(record),
            }
        }
        let outcomes = join_all(sending.into_iter().map(|record| async move {
            let OutboxRecord {
                id,
                queue,
                body,
                attempts,
            } = record;
            let outcome = relay
                .transport
                .publish(&queue, body.into(), &[])
                .await
                .map_err(|error| polyq_amqp::error_chain(&error));
            (id, attempts, outcome)
        }))
        .await;
        Published {
            outcomes,
            unpublishable,
        }
    }

    /// Marks the rows that can never be published failed, the refused ones failed after a
    /// backoff, and the accepted ones published in one statement.
    async fn mark(&self, published: Published) -> Result<FlushReport, OutboxError> {
        let relay = self.relay;
        let store = &relay.store;
        {
            let mut unmarked = self.unmarked();
            for id in published.unpublishable.iter().map(|(id, _)| id) {
                unmarked.remove(id);
            }
            for id in published.outcomes.iter().map(|(id, ..)| id) {
                unmarked.remove(id);
            }
        }
        let mut report = FlushReport::default();
        for (id, reason) in published.unpublishable {
            tracing::warn!(table = store.name(), id, %reason, "an outbox row cannot be published; it is marked failed");
            store.mark_failed(id, &reason, Failure::Permanent).await?;
            report.failed += 1;
        }
        let mut accepted = Vec::with_capacity(published.outcomes.len());
        for (id, attempts, outcome) in published.outcomes {
            match outcome {
                Ok(()) => accepted.push(id),
                Err(reason) => {
                    tracing::warn!(table = store.name(), id, %reason, "an outbox publish failed; it is retried after a backoff");
                    let backoff = relay.backoff_for(attempts);
                    store
                        .mark_failed(id, &reason, Failure::Retry { backoff })
                        .await?;
                    report.failed += 1;
                }
            }
        }
        store.mark_published(&accepted).await?;
        report.published = accepted.len();
        Ok(report)
    }

    fn add(total: &mut FlushReport, report: FlushReport) {
        total.add(report);
    }

    fn published(report: &FlushReport) -> usize {
        report.published
    }

    fn renew_every(&self) -> Duration {
        self.relay.store.lease() / 3
    }

    async fn renew(&self) -> Result<(), OutboxError> {
        let ids: Vec<i64> = self.unmarked().iter().copied().collect();
        if ids.is_empty() {
            return Ok(());
        }
        self.relay.store.renew(&ids).await
    }
}

/// Why a row can never be published as it is, if it cannot.
fn unpublishable_reason(record: &OutboxRecord) -> Option<String> {
    if is_blank(&record.queue) {
        return Some("the queue column is blank".to_owned());
    }
    crate::decode(record.body.as_bytes())
        .err()
        .map(|cause| format!("the body is not a BabelQueue envelope: {cause}"))
}
