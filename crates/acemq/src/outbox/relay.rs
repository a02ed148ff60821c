//! The relay: leases committed rows, publishes their stored bytes with confirms, marks them.

use std::time::{Duration, Instant};

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt as _, StreamExt as _};
use polyq_amqp::{Client, PublishOutcome};
use polyq_runtime::Shutdown;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::AceMq;
use crate::outbox::error::OutboxError;
use polyq_runtime::outbox::{
    OutboxStatus, Pipeline, RelaySteps, Streak, linear_backoff, relay_drain, relay_streak,
    relay_until_stopped,
};

use crate::outbox::MemoryOutbox;
use crate::outbox::backend::{Backend, Failure};
use crate::outbox::row::StoredMessage;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use crate::outbox::table::{SqlBackend, Table};
use crate::runtime::telemetry::{OUTBOX_LAG, OUTBOX_TOTAL};

/// Rows claimed per pass unless [`OutboxRelayBuilder::batch_size`] says otherwise.
pub const DEFAULT_BATCH_SIZE: usize = 100;
/// Batches whose confirms may be outstanding at once unless [`OutboxRelayBuilder::window`]
/// says otherwise.
pub const DEFAULT_WINDOW: usize = 2;
/// Failures a row takes before the relay stops offering it (the Java and Go default).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

/// Publishes what [`Outbox::record`](crate::outbox::Outbox::record) committed, on its own
/// database pool and broker connection.
///
/// Each pass leases a batch of rows (`FOR UPDATE SKIP LOCKED` picks them, a `locked_until`
/// lease holds them and is renewed until they are marked, so two relays never take the same
/// row and a relay that dies mid-batch frees its rows when the lease runs out), publishes each
/// row's stored exchange, routing key, properties, headers and body unchanged, waits for the broker's confirms, and marks published
/// only the rows the broker confirmed. A refused, unroutable or unconfirmed publish counts an
/// attempt, keeps its reason in `last_error` and holds the row back for a linear backoff; a row
/// that cannot be read as a message is failed at once. Delivery is at least once: a crash
/// between the confirm and the mark publishes the row again, and consumers deduplicate on the
/// message id.
///
/// Meters, tagged `table`: `acemq.outbox.total{outcome=published|failed}` per row and
/// `acemq.outbox.lag` (seconds the oldest pending row has waited) after the first and the last
/// pass of a streak, and once a second between.
///
/// ```no_run
/// # #[cfg(feature = "postgres")]
/// # async fn run(db: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use acemq::AceMq;
/// use acemq::outbox::OutboxRelay;
///
/// let mq = AceMq::connect("amqp://guest:guest@localhost:5672/%2f").await?;
/// let relay = OutboxRelay::builder(db, &mq).batch_size(200).build()?;
/// relay.run(polyq_runtime::Shutdown::on_signals()).await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct OutboxRelay {
    backend: Arc<dyn Backend>,
    client: Client,
    batch_size: i64,
    max_attempts: i32,
    lease: Duration,
    backoff_step: Duration,
    backoff_cap: Duration,
    confirm_timeout: Duration,
    poll_interval: Duration,
    synchronous_commit: bool,
    window: usize,
}

/// Configures an [`OutboxRelay`].
#[derive(Debug)]
pub struct OutboxRelayBuilder {
    source: Source,
    client: Client,
    batch_size: usize,
    max_attempts: u32,
    lease: Duration,
    backoff_step: Duration,
    backoff_cap: Duration,
    confirm_timeout: Duration,
    poll_interval: Duration,
    synchronous_commit: bool,
    window: usize,
}

/// Where the relay reads the outbox.
#[derive(Debug)]
enum Source {
    #[cfg(feature = "postgres")]
    Postgres {
        db: sqlx::PgPool,
        table: String,
    },
    #[cfg(feature = "mysql")]
    MySql {
        db: sqlx::MySqlPool,
        table: String,
    },
    Memory(MemoryOutbox),
}

impl OutboxRelayBuilder {
    /// The outbox table (default `acemq_outbox`); an in-memory outbox has none, and ignores it.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub fn table(mut self, table: impl Into<String>) -> Self {
        match &mut self.source {
            #[cfg(feature = "postgres")]
            Source::Postgres { table: name, .. } => *name = table.into(),
            #[cfg(feature = "mysql")]
            Source::MySql { table: name, .. } => *name = table.into(),
            Source::Memory(_) => {}
        }
        self
    }

    /// Rows leased and published per pass (default 100, at most 10 000).
    pub fn batch_size(mut self, rows: usize) -> Self {
        self.batch_size = rows;
        self
    }

    /// Failed publishes a row takes before the relay leaves it for someone to look at
    /// (default 10).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// How long a claimed batch is held before another relay may take it (default 90 s). While
    /// the batch is published and awaits its confirms, its lease is renewed every third of
    /// this, so a broker that blocks the relay's connection for longer (a memory or disk
    /// alarm) does not hand its rows to another relay; a relay that dies lets them go one lease
    /// after its last renewal. [`build`](OutboxRelayBuilder::build) refuses a lease of two
    /// confirm timeouts or less.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The backoff after a failed publish: `step` per attempt so far, at most `cap` (default
    /// 50 ms and 5 s, the BabelQueue Go relay's).
    pub fn backoff(mut self, step: Duration, cap: Duration) -> Self {
        self.backoff_step = step;
        self.backoff_cap = cap;
        self
    }

    /// How long a publish waits for its confirm (default 30 s), not counting the time the
    /// broker blocks the connection: it answers what it holds once the block ends.
    pub fn confirm_timeout(mut self, timeout: Duration) -> Self {
        self.confirm_timeout = timeout;
        self
    }

    /// How long [`OutboxRelay::run`] waits after a pass that found less than a full batch
    /// (default 200 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Whether the relay's own statements (the lease, the marks) wait for their commit to
    /// reach the disk (default `false`). Without the wait, a database crash can forget the
    /// last marks and leases: those rows are published again, duplicates with the same message
    /// id, never lost, since the rows themselves were committed by the application's own
    /// transaction under its own settings. `true` trades relay throughput for fewer such
    /// duplicates after a database crash. PostgreSQL's `synchronous_commit`: on MariaDB the
    /// server's own settings decide, and this changes nothing.
    pub fn synchronous_commit(mut self, wait: bool) -> Self {
        self.synchronous_commit = wait;
        self
    }

    /// Batches whose confirms may be outstanding at once (default
    /// [`DEFAULT_WINDOW`], at most 64). While they are, the next batch is leased and the
    /// batches already confirmed are marked, so the database's round trips overlap the
    /// broker's; each row is still marked only after its own confirm. One batch means the
    /// broker's confirms of a batch are all in before the next is published.
    pub fn window(mut self, batches: usize) -> Self {
        self.window = batches;
        self
    }

    /// The relay.
    ///
    /// # Errors
    /// [`OutboxError::InvalidTable`] or [`OutboxError::InvalidOption`].
    pub fn build(self) -> Result<OutboxRelay, OutboxError> {
        let invalid = |option, reason| Err(OutboxError::InvalidOption { option, reason });
        if !(1..=10_000).contains(&self.batch_size) {
            return invalid("batch_size", "must be between 1 and 10 000");
        }
        if !(1..=64).contains(&self.window) {
            return invalid("window", "must be between 1 and 64 batches");
        }
        let Ok(max_attempts @ 1..) = i32::try_from(self.max_attempts) else {
            return invalid("max_attempts", "must be between 1 and 2^31 - 1");
        };
        if self.lease.is_zero() || self.confirm_timeout.is_zero() {
            return invalid("lease and confirm_timeout", "must be positive");
        }
        // A leased batch may wait one confirm timeout for a place in the window, then its own.
        if self.confirm_timeout * 2 >= self.lease {
            return invalid("confirm_timeout", "must be shorter than half the lease");
        }
        let backend: Arc<dyn Backend> = match self.source {
            #[cfg(feature = "postgres")]
            Source::Postgres { db, table } => Arc::new(SqlBackend {
                db,
                table: Table::new(&table)?,
            }),
            #[cfg(feature = "mysql")]
            Source::MySql { db, table } => Arc::new(SqlBackend {
                db,
                table: Table::new(&table)?,
            }),
            Source::Memory(outbox) => Arc::new(outbox),
        };
        Ok(OutboxRelay {
            backend,
            client: self.client,
            batch_size: self.batch_size as i64,
            max_attempts,
            lease: self.lease,
            backoff_step: self.backoff_step,
            backoff_cap: self.backoff_cap,
            confirm_timeout: self.confirm_timeout,
            poll_interval: self.poll_interval,
            synchronous_commit: self.synchronous_commit,
            window: self.window,
        })
    }
}

/// A leased batch: its rows and the token they are leased to.
struct Batch {
    token: String,
    rows: Vec<(StoredMessage, i32)>,
}

/// A batch with the broker's answer for each row it sent, and the rows it could not read.
struct Published {
    token: String,
    claimed: usize,
    outcomes: Vec<SentRow>,
    unreadable: Vec<(String, String)>,
}

/// A row of a batch that was sent.
struct SentRow {
    id: String,
    /// Failed attempts before this one.
    attempts: i32,
    /// The broker's answer; `None` when no confirm came in time.
    answer: Option<Result<(), String>>,
}

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RelayPass {
    /// Rows leased.
    pub claimed: usize,
    /// Rows the broker confirmed, now marked published.
    pub published: usize,
    /// Rows whose publish failed or that could not be read, marked failed.
    pub failed: usize,
}

impl RelayPass {
    fn add(&mut self, pass: RelayPass) {
        self.claimed += pass.claimed;
        self.published += pass.published;
        self.failed += pass.failed;
    }
}

impl OutboxRelay {
    /// A relay publishing through `mq`'s connection, reading `db`.
    #[cfg(feature = "postgres")]
    pub fn builder(db: sqlx::PgPool, mq: &AceMq) -> OutboxRelayBuilder {
        Self::from_source(
            Source::Postgres {
                db,
                table: crate::outbox::table::DEFAULT_TABLE.to_owned(),
            },
            mq,
        )
    }

    /// A relay publishing through `mq`'s connection, reading the MariaDB or MySQL `db` (see
    /// [`MySqlOutbox`](crate::outbox::MySqlOutbox)).
    #[cfg(feature = "mysql")]
    pub fn builder_mysql(db: sqlx::MySqlPool, mq: &AceMq) -> OutboxRelayBuilder {
        Self::from_source(
            Source::MySql {
                db,
                table: crate::outbox::table::DEFAULT_TABLE.to_owned(),
            },
            mq,
        )
    }

    /// A relay publishing what `outbox` holds through `mq`'s connection (see
    /// [`MemoryOutbox`]).
    pub fn in_memory(outbox: &MemoryOutbox, mq: &AceMq) -> OutboxRelayBuilder {
        Self::from_source(Source::Memory(outbox.clone()), mq)
    }

    fn from_source(source: Source, mq: &AceMq) -> OutboxRelayBuilder {
        OutboxRelayBuilder {
            source,
            client: mq.client().clone(),
            batch_size: DEFAULT_BATCH_SIZE,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            lease: Duration::from_secs(90),
            backoff_step: Duration::from_millis(50),
            backoff_cap: Duration::from_secs(5),
            confirm_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_millis(200),
            synchronous_commit: false,
            window: DEFAULT_WINDOW,
        }
    }

    /// Leases one batch, publishes it and marks every row published or failed.
    ///
    /// # Errors
    /// A database failure; rows leased before it are freed when their lease runs out.
    pub async fn flush(&self) -> Result<RelayPass, OutboxError> {
        Ok(self.streak(1, &|| false).await?.report)
    }

    /// Passes until one publishes nothing (the outbox is empty, or only rows under backoff are
    /// left), at most `max_passes`; the passes added up. Full batches follow each other as in
    /// [`OutboxRelay::run`]: the next batch is leased, and those already confirmed are marked,
    /// while up to [`OutboxRelayBuilder::window`] batches' confirms are outstanding.
    ///
    /// # Errors
    /// As [`OutboxRelay::flush`].
    pub async fn drain(&self, max_passes: usize) -> Result<RelayPass, OutboxError> {
        relay_drain(&Steps::new(self), self.window, max_passes).await
    }

    /// Passes back to back while each finds a full batch, at most `max_passes`, until `stop`
    /// says so, pipelined by [`relay_streak`]: a row is marked published only after its own
    /// confirm, as in [`OutboxRelay::flush`].
    async fn streak(
        &self,
        max_passes: usize,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<Streak<RelayPass>, OutboxError> {
        let pipeline = Pipeline {
            window: self.window,
            max_batches: max_passes,
        };
        relay_streak(&Steps::new(self), pipeline, stop).await
    }

    /// Relays until `shutdown` stops it: a full batch is followed by the next at once (leased
    /// while the confirms of those before are outstanding), anything less by
    /// [`OutboxRelayBuilder::poll_interval`]. A failing database is logged and tried
    /// again after the interval. The passes under way when the stop comes are finished.
    pub async fn run(&self, shutdown: Shutdown) {
        let stopping = || shutdown.is_stopping();
        relay_until_stopped(&shutdown, self.poll_interval, || async {
            if let Err(error) = self.streak(usize::MAX, &stopping).await {
                tracing::warn!(table = self.backend.name(), error = %polyq_amqp::error_chain(&error), "an outbox pass failed; trying again");
            }
            // A streak ends on a batch that was not full, at the stop, or at an error.
            false
        })
        .await;
    }

    /// Pending and failed rows and the lag.
    ///
    /// # Errors
    /// A database failure.
    pub async fn status(&self) -> Result<OutboxStatus, OutboxError> {
        self.backend.status(self.max_attempts).await
    }

    async fn fail(
        &self,
        token: &str,
        id: &str,
        reason: &str,
        failure: Failure,
        pass: &mut RelayPass,
    ) -> Result<(), OutboxError> {
        self.backend
            .mark_failed(token, id, reason, failure, self.synchronous_commit)
            .await?;
        metrics::counter!(OUTBOX_TOTAL, "outcome" => "failed", "table" => self.backend.name().to_owned())
            .increment(1);
        pass.failed += 1;
        Ok(())
    }

    /// Whether a batch of `rows` is a full one.
    fn is_full(&self, rows: usize) -> bool {
        rows as i64 >= self.batch_size
    }

    fn backoff_for(&self, prior_attempts: i32) -> Duration {
        let prior = u32::try_from(prior_attempts).unwrap_or(0);
        linear_backoff(self.backoff_step, self.backoff_cap, prior)
    }
}

/// How often the lag is read while full batches follow each other.
const LAG_EVERY: Duration = Duration::from_secs(1);

/// The relay's steps as [`relay_streak`] overlaps them, with the batches leased and not marked
/// yet (their tokens and row ids, for the renewals).
struct Steps<'a> {
    relay: &'a OutboxRelay,
    unmarked: Mutex<HashMap<String, Vec<String>>>,
    /// When the lag was last read.
    lag_read: Mutex<Option<Instant>>,
}

impl<'a> Steps<'a> {
    fn new(relay: &'a OutboxRelay) -> Self {
        Self {
            relay,
            unmarked: Mutex::default(),
            lag_read: Mutex::default(),
        }
    }

    /// Whether the lag is read after the mark of a batch of `claimed` rows: after the first
    /// and the last batch of a streak, and at most once a [`LAG_EVERY`] between. It is the
    /// first entry of the pending index, behind the dead entries of every row marked since the
    /// table was last vacuumed: read after every batch of a long backlog, it cost more with
    /// each batch.
    fn lag_due(&self, claimed: usize) -> bool {
        let mut read = self.lag_read.lock().unwrap_or_else(PoisonError::into_inner);
        let due = !self.relay.is_full(claimed) || read.is_none_or(|at| at.elapsed() >= LAG_EVERY);
        if due {
            *read = Some(Instant::now());
        }
        due
    }

    fn unmarked(&self) -> MutexGuard<'_, HashMap<String, Vec<String>>> {
        self.unmarked.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl RelaySteps for Steps<'_> {
    type Batch = Batch;
    type Published = Published;
    type Report = RelayPass;
    type Error = OutboxError;
    type Position = String;

    /// Leases the next batch under a token of its own.
    async fn lease(&self, after: Option<String>) -> Result<Batch, OutboxError> {
        let relay = self.relay;
        let token = uuid::Uuid::new_v4();
        let rows = relay
            .backend
            .claim(
                token,
                relay.lease,
                relay.max_attempts,
                relay.batch_size,
                relay.synchronous_commit,
                after.as_deref(),
            )
            .await?;
        let token = token.to_string();
        if !rows.is_empty() {
            let ids = rows.iter().map(|(row, _)| row.id.clone()).collect();
            self.unmarked().insert(token.clone(), ids);
        }
        Ok(Batch { token, rows })
    }

    /// The row's id: the pending index orders rows by `(created_at, id)`, and the lease reads
    /// the `created_at` of that row.
    fn last_position(batch: &Batch) -> Option<String> {
        batch.rows.last().map(|(row, _)| row.id.clone())
    }

    fn is_full(&self, batch: &Batch) -> bool {
        self.relay.is_full(batch.rows.len())
    }

    /// Publishes a leased batch's rows and awaits the broker's answers, all of them under one
    /// deadline: they went out together. The deadline stands still while the broker blocks
    /// the connection, since it still answers what it holds once the block ends; the rows after
    /// one the block kept from being sent are not tried (they would wait the same), and are
    /// offered again after a backoff. A row that cannot be read as a message is set aside for
    /// the mark.
    async fn publish(&self, batch: Batch) -> Published {
        let relay = self.relay;
        let Batch { token, rows } = batch;
        let claimed = rows.len();
        let mut outcomes = Vec::with_capacity(claimed);
        let mut unreadable = Vec::new();
        let mut confirms = FuturesUnordered::new();
        let mut blocked = None;
        for (row, attempts) in rows {
            let id = row.id.clone();
            if let Some(reason) = &blocked {
                outcomes.push(SentRow {
                    id,
                    attempts,
                    answer: Some(Err(format!("not sent: {reason}"))),
                });
                continue;
            }
            match row.into_message() {
                Ok(message) => match relay.client.publish(message).await {
                    Ok(confirm) => {
                        let index = outcomes.len();
                        confirms.push(confirm.map(move |answer| (index, answer)));
                        outcomes.push(SentRow {
                            id,
                            attempts,
                            answer: None,
                        });
                    }
                    Err(error) => {
                        let reason = polyq_amqp::error_chain(&error);
                        if matches!(error, polyq_amqp::Error::Blocked { .. }) {
                            blocked = Some(reason.clone());
                        }
                        outcomes.push(SentRow {
                            id,
                            attempts,
                            answer: Some(Err(reason)),
                        });
                    }
                },
                Err(reason) => unreadable.push((id, reason)),
            }
        }
        let answers = async {
            while let Some((index, answer)) = confirms.next().await {
                outcomes[index].answer = Some(confirmed(answer));
            }
        };
        // What has not answered by the deadline stays `None`.
        let _all_answered = relay
            .client
            .timeout_unblocked(relay.confirm_timeout, answers)
            .await;
        Published {
            token,
            claimed,
            outcomes,
            unreadable,
        }
    }

    /// Marks the rows that could not be read failed for good, the unconfirmed ones failed
    /// after a backoff, and the confirmed ones published in one statement; then reads the lag
    /// when it is due.
    async fn mark(&self, published: Published) -> Result<RelayPass, OutboxError> {
        let relay = self.relay;
        let Published {
            token,
            claimed,
            outcomes,
            unreadable,
        } = published;
        self.unmarked().remove(&token);
        let mut pass = RelayPass {
            claimed,
            ..RelayPass::default()
        };
        for (id, reason) in unreadable {
            tracing::warn!(table = relay.backend.name(), id, %reason, "an outbox row cannot be published; it is marked failed");
            let failure = Failure::Permanent {
                max_attempts: relay.max_attempts,
            };
            relay.fail(&token, &id, &reason, failure, &mut pass).await?;
        }
        let mut confirmed_ids = Vec::with_capacity(outcomes.len());
        for SentRow {
            id,
            attempts,
            answer,
        } in outcomes
        {
            let reason = match answer {
                Some(Ok(())) => {
                    confirmed_ids.push(id);
                    continue;
                }
                Some(Err(reason)) => reason,
                None => format!("no confirm within {:?}", relay.confirm_timeout),
            };
            tracing::warn!(table = relay.backend.name(), id, %reason, "an outbox publish failed; it is retried after a backoff");
            let failure = Failure::Retry {
                backoff: relay.backoff_for(attempts),
            };
            relay.fail(&token, &id, &reason, failure, &mut pass).await?;
        }
        relay
            .backend
            .mark_published(&token, &confirmed_ids, relay.synchronous_commit)
            .await?;
        pass.published = confirmed_ids.len();
        metrics::counter!(OUTBOX_TOTAL, "outcome" => "published", "table" => relay.backend.name().to_owned())
            .increment(pass.published as u64);
        if self.lag_due(claimed) {
            let lag = relay.backend.lag(relay.max_attempts).await?;
            metrics::gauge!(OUTBOX_LAG, "table" => relay.backend.name().to_owned())
                .set(lag.unwrap_or_default().as_secs_f64());
        }
        Ok(pass)
    }

    fn add(total: &mut RelayPass, pass: RelayPass) {
        total.add(pass);
    }

    fn published(pass: &RelayPass) -> usize {
        pass.published
    }

    fn renew_every(&self) -> Duration {
        self.relay.lease / 3
    }

    async fn renew(&self) -> Result<(), OutboxError> {
        let relay = self.relay;
        let unmarked: Vec<(String, Vec<String>)> = self
            .unmarked()
            .iter()
            .map(|(token, ids)| (token.clone(), ids.clone()))
            .collect();
        for (token, ids) in &unmarked {
            relay
                .backend
                .renew(token, ids, relay.lease, relay.synchronous_commit)
                .await?;
        }
        Ok(())
    }
}

/// The broker's answer to one publish, as the row's outcome.
fn confirmed(answer: polyq_amqp::Result<PublishOutcome>) -> Result<(), String> {
    match answer {
        Ok(PublishOutcome::Acked) => Ok(()),
        Ok(PublishOutcome::Nacked) => Err("the broker refused it (nack)".to_owned()),
        Ok(PublishOutcome::Returned(returned)) => Err(format!(
            "unroutable: {} ({})",
            returned.reply_text, returned.reply_code
        )),
        Err(error) => Err(polyq_amqp::error_chain(&error)),
    }
}
