//! What the two families' transactional outboxes share: the status they report, the relay's
//! poll loop, its backoff arithmetic and the check on a table name.

use std::future::Future;
use std::time::Duration;

use crate::Shutdown;

/// What an outbox holds that is not yet published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutboxStatus {
    /// Rows a relay will still publish.
    pub pending: u64,
    /// Rows a relay gave up on or can never publish; each keeps its `last_error`.
    pub failed: u64,
    /// How long the oldest pending row has waited: the relay's lag. `None` when nothing is
    /// pending.
    pub oldest_pending_age: Option<Duration>,
}

impl OutboxStatus {
    /// The status from what an SQL count returns: counts as `bigint`, the age in seconds as
    /// `double precision` (`NULL` when nothing is pending). A negative figure, which only a
    /// clock step can produce, reads as zero.
    pub fn from_sql(pending: i64, failed: i64, oldest_age_secs: Option<f64>) -> Self {
        Self {
            pending: pending.try_into().unwrap_or(0),
            failed: failed.try_into().unwrap_or(0),
            oldest_pending_age: oldest_age_secs.map(|secs| Duration::from_secs_f64(secs.max(0.0))),
        }
    }
}

#[cfg(feature = "sqlx")]
impl OutboxStatus {
    /// The status from a row of the outbox's status query: the columns `pending` and `failed`
    /// (`bigint`) and `age` (`double precision`, seconds), as [`OutboxStatus::from_sql`] reads
    /// them.
    pub fn from_row(row: &sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        use sqlx::Row as _;
        Ok(Self::from_sql(
            row.try_get("pending")?,
            row.try_get("failed")?,
            row.try_get("age")?,
        ))
    }
}

/// The backoff after a row's publish failed for the `prior_attempts + 1`-th time: `step` per
/// failure, at most `cap` (linear and bounded, as the BabelQueue Go relay).
///
/// ```
/// use std::time::Duration;
/// use polyq_runtime::outbox::linear_backoff;
///
/// let (step, cap) = (Duration::from_millis(50), Duration::from_secs(5));
/// assert_eq!(linear_backoff(step, cap, 0), Duration::from_millis(50));
/// assert_eq!(linear_backoff(step, cap, 2), Duration::from_millis(150));
/// assert_eq!(linear_backoff(step, cap, 1_000), cap);
/// ```
pub fn linear_backoff(step: Duration, cap: Duration, prior_attempts: u32) -> Duration {
    step.saturating_mul(prior_attempts.saturating_add(1))
        .min(cap)
}

/// Runs relay passes until `shutdown` stops it. `pass` returns whether it found a full batch:
/// then the next pass starts at once, otherwise after `idle` (or at the stop, whichever comes
/// first). A pass under way when the stop comes is finished.
pub async fn relay_until_stopped<F, Fut>(shutdown: &Shutdown, idle: Duration, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    while !shutdown.is_stopping() {
        if !pass().await {
            tokio::select! {
                () = tokio::time::sleep(idle) => {}
                () = shutdown.stopping() => {}
            }
        }
    }
}

/// Whether a database error is the connection: lost, refused, or none to be had from the pool.
#[cfg(feature = "sqlx")]
pub fn sqlx_is_connection(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
    )
}

/// Whether the statement can succeed when tried again later: the connection failed
/// ([`sqlx_is_connection`]) or the driver's worker crashed, not a mistake in the statement.
#[cfg(feature = "sqlx")]
pub fn sqlx_is_transient(error: &sqlx::Error) -> bool {
    sqlx_is_connection(error) || matches!(error, sqlx::Error::WorkerCrashed)
}

/// Whether `name` is a plain SQL identifier (ASCII letters, digits and `_`, not starting with a
/// digit, at most 63 bytes, PostgreSQL's limit): a table name reaches SQL by interpolation,
/// since no database binds identifiers as parameters, so nothing else may pass.
///
/// ```
/// use polyq_runtime::outbox::is_plain_sql_identifier;
///
/// assert!(is_plain_sql_identifier("acemq_outbox"));
/// assert!(!is_plain_sql_identifier("outbox; DROP TABLE orders"));
/// ```
pub fn is_plain_sql_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 63
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "sqlx")]
    #[test]
    fn database_errors_are_classed() {
        let refused = || sqlx::Error::Io(std::io::ErrorKind::ConnectionRefused.into());
        assert!(sqlx_is_connection(&refused()) && sqlx_is_transient(&refused()));
        assert!(sqlx_is_connection(&sqlx::Error::PoolTimedOut));
        assert!(!sqlx_is_connection(&sqlx::Error::WorkerCrashed));
        assert!(sqlx_is_transient(&sqlx::Error::WorkerCrashed));
        assert!(!sqlx_is_transient(&sqlx::Error::RowNotFound));
    }

    #[test]
    fn only_plain_identifiers_pass() {
        for good in ["t", "_t1", "babelqueue_outbox"] {
            assert!(is_plain_sql_identifier(good), "{good}");
        }
        for bad in ["", "1t", "a-b", "a b", "a;b", "é", &"x".repeat(64)] {
            assert!(!is_plain_sql_identifier(bad), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_stopped_relay_runs_no_pass() {
        let shutdown = Shutdown::new();
        shutdown.stop();
        let mut passes = 0;
        relay_until_stopped(&shutdown, Duration::from_secs(60), || {
            passes += 1;
            async { true }
        })
        .await;
        assert_eq!(passes, 0);
    }

    #[tokio::test]
    async fn full_passes_follow_each_other_until_the_stop() {
        let shutdown = Shutdown::new();
        let mut passes = 0;
        relay_until_stopped(&shutdown, Duration::from_secs(3600), || {
            passes += 1;
            if passes == 3 {
                shutdown.stop();
            }
            async { true }
        })
        .await;
        assert_eq!(passes, 3);
    }
}
