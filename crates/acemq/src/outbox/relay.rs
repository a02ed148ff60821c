//! The relay: leases committed rows, publishes their stored bytes with confirms, marks them.

use std::time::Duration;

use futures_util::future::{BoxFuture, join_all};
use polyq_amqp::{Client, Confirm, PublishOutcome};
use polyq_runtime::Shutdown;
use std::sync::Arc;

use crate::AceMq;
use crate::outbox::error::OutboxError;
use polyq_runtime::outbox::{OutboxStatus, linear_backoff, relay_until_stopped};

use crate::outbox::MemoryOutbox;
use crate::outbox::backend::{Backend, Failure};
use crate::outbox::row::StoredMessage;
use crate::runtime::telemetry::{OUTBOX_LAG, OUTBOX_TOTAL};

/// Rows claimed per pass unless [`OutboxRelayBuilder::batch_size`] says otherwise.
pub const DEFAULT_BATCH_SIZE: usize = 100;
/// Failures a row takes before the relay stops offering it (the Java and Go default).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

/// Publishes what [`Outbox::record`](crate::outbox::Outbox::record) committed, on its own
/// database pool and broker connection.
///
/// Each pass leases a batch of rows (`FOR UPDATE SKIP LOCKED` picks them, a `locked_until`
/// lease holds them, so two relays never take the same row and a relay that dies mid-batch
/// frees its rows when the lease runs out), publishes each row's stored exchange, routing key,
/// properties, headers and body unchanged, waits for the broker's confirms, and marks published
/// only the rows the broker confirmed. A refused, unroutable or unconfirmed publish counts an
/// attempt, keeps its reason in `last_error` and holds the row back for a linear backoff; a row
/// that cannot be read as a message is failed at once. Delivery is at least once: a crash
/// between the confirm and the mark publishes the row again, and consumers deduplicate on the
/// message id.
///
/// Meters, tagged `table`: `acemq.outbox.total{outcome=published|failed}` per row and
/// `acemq.outbox.lag` (seconds the oldest pending row has waited) after every pass.
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
}

/// Where the relay reads the outbox.
#[derive(Debug)]
enum Source {
    #[cfg(feature = "postgres")]
    Postgres {
        db: sqlx::PgPool,
        table: String,
    },
    Memory(MemoryOutbox),
}

impl OutboxRelayBuilder {
    /// The outbox table (default `acemq_outbox`); an in-memory outbox has none, and ignores it.
    #[cfg(feature = "postgres")]
    pub fn table(mut self, table: impl Into<String>) -> Self {
        if let Source::Postgres { table: name, .. } = &mut self.source {
            *name = table.into();
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

    /// How long a claimed batch is held before another relay may take it (default 60 s); it
    /// must outlast publishing one batch.
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

    /// How long a publish waits for its confirm (default 30 s).
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
    /// duplicates after a database crash.
    pub fn synchronous_commit(mut self, wait: bool) -> Self {
        self.synchronous_commit = wait;
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
        let Ok(max_attempts @ 1..) = i32::try_from(self.max_attempts) else {
            return invalid("max_attempts", "must be between 1 and 2^31 - 1");
        };
        if self.lease.is_zero() || self.confirm_timeout.is_zero() {
            return invalid("lease and confirm_timeout", "must be positive");
        }
        if self.confirm_timeout >= self.lease {
            return invalid("confirm_timeout", "must be shorter than the lease");
        }
        let backend: Arc<dyn Backend> = match self.source {
            #[cfg(feature = "postgres")]
            Source::Postgres { db, table } => Arc::new(crate::outbox::store::PgBackend {
                db,
                table: crate::outbox::store::Table::new(&table)?,
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
        })
    }
}

/// A leased batch: its rows and the token they are leased to.
struct Batch {
    token: String,
    rows: Vec<(StoredMessage, i32)>,
}

/// A batch published, its confirms to come.
struct Sent {
    token: String,
    pass: RelayPass,
    publishes: Vec<(String, i32, polyq_amqp::Result<Confirm>)>,
}

/// A batch with the broker's answer for each row.
struct Confirmed {
    token: String,
    pass: RelayPass,
    outcomes: Vec<(String, i32, Result<(), String>)>,
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
                table: crate::outbox::DEFAULT_TABLE.to_owned(),
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
            lease: Duration::from_secs(60),
            backoff_step: Duration::from_millis(50),
            backoff_cap: Duration::from_secs(5),
            confirm_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_millis(200),
            synchronous_commit: false,
        }
    }

    /// Leases one batch, publishes it and marks every row published or failed.
    ///
    /// # Errors
    /// A database failure; rows leased before it are freed when their lease runs out.
    pub async fn flush(&self) -> Result<RelayPass, OutboxError> {
        let batch = self.claim().await?;
        let sent = self.send(batch).await?;
        let confirmed = self.confirms(sent).await;
        self.settle(confirmed).await
    }

    /// Passes until one publishes nothing (the outbox is empty, or only rows under backoff are
    /// left), at most `max_passes`; the passes added up. Full batches follow each other as in
    /// [`OutboxRelay::run`]: the next batch is leased, and the previous one marked, while the
    /// current one's confirms are outstanding.
    ///
    /// # Errors
    /// As [`OutboxRelay::flush`].
    pub async fn drain(&self, max_passes: usize) -> Result<RelayPass, OutboxError> {
        let mut total = RelayPass::default();
        let mut left = max_passes;
        while left > 0 {
            let (streak, passes) = self.streak(left, &|| false).await?;
            total.claimed += streak.claimed;
            total.published += streak.published;
            total.failed += streak.failed;
            left -= passes;
            if streak.published == 0 {
                break;
            }
        }
        Ok(total)
    }

    /// Passes back to back while each finds a full batch, at most `max_passes`, until `stop`
    /// says so; the passes added up and how many ran. Batch n's confirms are awaited together
    /// with the lease of batch n + 1 and the marks of batch n - 1, so the two database round
    /// trips of a pass overlap the broker's; at most one batch's confirms are outstanding at
    /// a time, and a row is marked published only after its own confirm, as in
    /// [`OutboxRelay::flush`].
    async fn streak(
        &self,
        max_passes: usize,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<(RelayPass, usize), OutboxError> {
        let mut total = RelayPass::default();
        let mut passes = 0;
        let mut next = Some(self.claim().await?);
        let mut marking: Option<BoxFuture<'_, Result<RelayPass, OutboxError>>> = None;
        while let Some(batch) = next.take() {
            passes += 1;
            let full = batch.rows.len() as i64 >= self.batch_size;
            let more = full && passes < max_passes && !stop();
            let sent = self.send(batch).await?;
            let (confirmed, claimed, marked) = futures_util::future::join3(
                self.confirms(sent),
                async {
                    if more {
                        self.claim().await.map(Some)
                    } else {
                        Ok(None)
                    }
                },
                async {
                    match marking.take() {
                        Some(marking) => marking.await.map(Some),
                        None => Ok(None),
                    }
                },
            )
            .await;
            // The marks of this batch go on while the next is published; an error in them, or
            // in the lease, ends the streak (leased rows come back when their lease runs out).
            let pending_marks: BoxFuture<'_, _> = Box::pin(self.settle(confirmed));
            if let Some(pass) = marked? {
                total.add(pass);
            }
            next = match claimed {
                Ok(claimed) => claimed,
                Err(error) => {
                    pending_marks.await?;
                    return Err(error);
                }
            };
            marking = Some(pending_marks);
        }
        if let Some(marking) = marking {
            total.add(marking.await?);
        }
        Ok((total, passes))
    }

    /// Leases the next batch under a token of its own.
    async fn claim(&self) -> Result<Batch, OutboxError> {
        let token = uuid::Uuid::new_v4().to_string();
        let rows = self
            .backend
            .claim(
                &token,
                self.lease,
                self.max_attempts,
                self.batch_size,
                self.synchronous_commit,
            )
            .await?;
        Ok(Batch { token, rows })
    }

    /// Publishes a leased batch's rows; a row that cannot be read as a message is marked
    /// failed at once.
    async fn send(&self, batch: Batch) -> Result<Sent, OutboxError> {
        let Batch { token, rows } = batch;
        let mut pass = RelayPass {
            claimed: rows.len(),
            ..RelayPass::default()
        };
        let mut publishes = Vec::with_capacity(rows.len());
        for (row, attempts) in rows {
            let id = row.id.clone();
            let message = match row.into_message() {
                Ok(message) => message,
                Err(reason) => {
                    tracing::warn!(table = self.backend.name(), id, %reason, "an outbox row cannot be published; it is marked failed");
                    let failure = Failure::Permanent {
                        max_attempts: self.max_attempts,
                    };
                    self.fail(&token, &id, &reason, failure, &mut pass).await?;
                    continue;
                }
            };
            publishes.push((id, attempts, self.client.publish(message).await));
        }
        Ok(Sent {
            token,
            pass,
            publishes,
        })
    }

    /// Awaits the broker's answer to every publish of a batch.
    async fn confirms(&self, sent: Sent) -> Confirmed {
        let Sent {
            token,
            pass,
            publishes,
        } = sent;
        let outcomes = join_all(
            publishes
                .into_iter()
                .map(|(id, attempts, publish)| async move {
                    let outcome = match publish {
                        Ok(confirm) => match tokio::time::timeout(self.confirm_timeout, confirm)
                            .await
                        {
                            Ok(Ok(PublishOutcome::Acked)) => Ok(()),
                            Ok(Ok(PublishOutcome::Nacked)) => {
                                Err("the broker refused it (nack)".to_owned())
                            }
                            Ok(Ok(PublishOutcome::Returned(returned))) => Err(format!(
                                "unroutable: {} ({})",
                                returned.reply_text, returned.reply_code
                            )),
                            Ok(Err(error)) => Err(polyq_amqp::error_chain(&error)),
                            Err(_) => Err(format!("no confirm within {:?}", self.confirm_timeout)),
                        },
                        Err(error) => Err(polyq_amqp::error_chain(&error)),
                    };
                    (id, attempts, outcome)
                }),
        )
        .await;
        Confirmed {
            token,
            pass,
            outcomes,
        }
    }

    /// Marks the confirmed rows published in one statement and the others failed, counts them
    /// and reads the lag.
    async fn settle(&self, confirmed: Confirmed) -> Result<RelayPass, OutboxError> {
        let Confirmed {
            token,
            mut pass,
            outcomes,
        } = confirmed;
        let mut published = Vec::with_capacity(outcomes.len());
        for (id, attempts, outcome) in outcomes {
            match outcome {
                Ok(()) => published.push(id),
                Err(reason) => {
                    tracing::warn!(table = self.backend.name(), id, %reason, "an outbox publish failed; it is retried after a backoff");
                    let failure = Failure::Retry {
                        backoff: self.backoff_for(attempts),
                    };
                    self.fail(&token, &id, &reason, failure, &mut pass).await?;
                }
            }
        }
        self.backend
            .mark_published(&token, &published, self.synchronous_commit)
            .await?;
        pass.published = published.len();
        metrics::counter!(OUTBOX_TOTAL, "outcome" => "published", "table" => self.backend.name().to_owned())
            .increment(pass.published as u64);
        let lag = self
            .backend
            .lag(self.max_attempts)
            .await?
            .unwrap_or_default();
        metrics::gauge!(OUTBOX_LAG, "table" => self.backend.name().to_owned())
            .set(lag.as_secs_f64());
        Ok(pass)
    }

    /// Relays until `shutdown` stops it: a full batch is followed by the next at once (leased
    /// while the current one's confirms are outstanding), anything less by
    /// [`OutboxRelayBuilder::poll_interval`]. A failing database is logged and tried
    /// again after the interval. The pass under way when the stop comes is finished.
    pub async fn run(&self, shutdown: Shutdown) {
        let stopping = || shutdown.is_stopping();
        relay_until_stopped(&shutdown, self.poll_interval, || async {
            match self.streak(usize::MAX, &stopping).await {
                // A streak ends on a batch that was not full, or at the stop.
                Ok(_) => false,
                Err(error) => {
                    tracing::warn!(table = self.backend.name(), error = %polyq_amqp::error_chain(&error), "an outbox pass failed; trying again");
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

    fn backoff_for(&self, prior_attempts: i32) -> Duration {
        let prior = u32::try_from(prior_attempts).unwrap_or(0);
        linear_backoff(self.backoff_step, self.backoff_cap, prior)
    }
}
