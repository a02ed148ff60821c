//! The relay: leases committed rows, publishes their stored bytes with confirms, marks them.

use std::time::Duration;

use futures_util::future::join_all;
use polyq_amqp::{Client, PublishOutcome};
use polyq_runtime::Shutdown;
use sqlx::PgPool;

use crate::AceMq;
use crate::outbox::error::OutboxError;
use polyq_runtime::outbox::{OutboxStatus, linear_backoff, relay_until_stopped};

use crate::outbox::store::{DEFAULT_TABLE, Failure, Table};
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
    db: PgPool,
    client: Client,
    table: Table,
    batch_size: i64,
    max_attempts: i32,
    lease: Duration,
    backoff_step: Duration,
    backoff_cap: Duration,
    confirm_timeout: Duration,
    poll_interval: Duration,
}

/// Configures an [`OutboxRelay`].
#[derive(Debug)]
pub struct OutboxRelayBuilder {
    db: PgPool,
    client: Client,
    table: String,
    batch_size: usize,
    max_attempts: u32,
    lease: Duration,
    backoff_step: Duration,
    backoff_cap: Duration,
    confirm_timeout: Duration,
    poll_interval: Duration,
}

impl OutboxRelayBuilder {
    /// The outbox table (default `acemq_outbox`).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
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
        Ok(OutboxRelay {
            table: Table::new(&self.table)?,
            db: self.db,
            client: self.client,
            batch_size: self.batch_size as i64,
            max_attempts,
            lease: self.lease,
            backoff_step: self.backoff_step,
            backoff_cap: self.backoff_cap,
            confirm_timeout: self.confirm_timeout,
            poll_interval: self.poll_interval,
        })
    }
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

impl OutboxRelay {
    /// A relay publishing through `mq`'s connection, reading `db`.
    pub fn builder(db: PgPool, mq: &AceMq) -> OutboxRelayBuilder {
        OutboxRelayBuilder {
            db,
            client: mq.client().clone(),
            table: DEFAULT_TABLE.to_owned(),
            batch_size: DEFAULT_BATCH_SIZE,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            lease: Duration::from_secs(60),
            backoff_step: Duration::from_millis(50),
            backoff_cap: Duration::from_secs(5),
            confirm_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_millis(200),
        }
    }

    /// Leases one batch, publishes it and marks every row published or failed.
    ///
    /// # Errors
    /// A database failure; rows leased before it are freed when their lease runs out.
    pub async fn flush(&self) -> Result<RelayPass, OutboxError> {
        let token = uuid::Uuid::new_v4().to_string();
        let claimed = self
            .table
            .claim(
                &self.db,
                &token,
                self.lease,
                self.max_attempts,
                self.batch_size,
            )
            .await?;
        let mut pass = RelayPass {
            claimed: claimed.len(),
            ..RelayPass::default()
        };
        let mut sent = Vec::with_capacity(claimed.len());
        for (row, attempts) in claimed {
            let id = row.id.clone();
            let message = match row.into_message() {
                Ok(message) => message,
                Err(reason) => {
                    tracing::warn!(table = self.table.name(), id, %reason, "an outbox row cannot be published; it is marked failed");
                    let failure = Failure::Permanent {
                        max_attempts: self.max_attempts,
                    };
                    self.fail(&token, &id, &reason, failure, &mut pass).await?;
                    continue;
                }
            };
            sent.push((id, attempts, self.client.publish(message).await));
        }
        let confirms = join_all(sent.into_iter().map(|(id, attempts, publish)| async move {
            let outcome = match publish {
                Ok(confirm) => match tokio::time::timeout(self.confirm_timeout, confirm).await {
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
        }))
        .await;
        let mut published = Vec::with_capacity(confirms.len());
        for (id, attempts, outcome) in confirms {
            match outcome {
                Ok(()) => published.push(id),
                Err(reason) => {
                    tracing::warn!(table = self.table.name(), id, %reason, "an outbox publish failed; it is retried after a backoff");
                    let failure = Failure::Retry {
                        backoff: self.backoff_for(attempts),
                    };
                    self.fail(&token, &id, &reason, failure, &mut pass).await?;
                }
            }
        }
        self.table
            .mark_published(&self.db, &token, &published)
            .await?;
        pass.published = published.len();
        metrics::counter!(OUTBOX_TOTAL, "outcome" => "published", "table" => self.table.name().to_owned())
            .increment(pass.published as u64);
        let lag = self
            .table
            .lag(&self.db, self.max_attempts)
            .await?
            .unwrap_or_default();
        metrics::gauge!(OUTBOX_LAG, "table" => self.table.name().to_owned()).set(lag.as_secs_f64());
        Ok(pass)
    }

    /// Passes until one publishes nothing (the outbox is empty, or only rows under backoff are
    /// left), at most `max_passes`; the passes added up.
    ///
    /// # Errors
    /// As [`OutboxRelay::flush`].
    pub async fn drain(&self, max_passes: usize) -> Result<RelayPass, OutboxError> {
        let mut total = RelayPass::default();
        for _ in 0..max_passes {
            let pass = self.flush().await?;
            total.claimed += pass.claimed;
            total.published += pass.published;
            total.failed += pass.failed;
            if pass.published == 0 {
                break;
            }
        }
        Ok(total)
    }

    /// Relays until `shutdown` stops it: a full batch is followed by the next at once, anything
    /// less by [`OutboxRelayBuilder::poll_interval`]. A failing database is logged and tried
    /// again after the interval. The pass under way when the stop comes is finished.
    pub async fn run(&self, shutdown: Shutdown) {
        relay_until_stopped(&shutdown, self.poll_interval, || async {
            match self.flush().await {
                Ok(pass) => pass.claimed as i64 >= self.batch_size,
                Err(error) => {
                    tracing::warn!(table = self.table.name(), error = %polyq_amqp::error_chain(&error), "an outbox pass failed; trying again");
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
        self.table.status(&self.db, self.max_attempts).await
    }

    async fn fail(
        &self,
        token: &str,
        id: &str,
        reason: &str,
        failure: Failure,
        pass: &mut RelayPass,
    ) -> Result<(), OutboxError> {
        self.table
            .mark_failed(&self.db, token, id, reason, failure)
            .await?;
        metrics::counter!(OUTBOX_TOTAL, "outcome" => "failed", "table" => self.table.name().to_owned())
            .increment(1);
        pass.failed += 1;
        Ok(())
    }

    fn backoff_for(&self, prior_attempts: i32) -> Duration {
        let prior = u32::try_from(prior_attempts).unwrap_or(0);
        linear_backoff(self.backoff_step, self.backoff_cap, prior)
    }
}
