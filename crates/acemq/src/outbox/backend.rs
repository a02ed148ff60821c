//! What a relay needs of the place the outbox lives: the PostgreSQL table or the in-memory
//! outbox. One relay works over either.

use std::time::Duration;

use futures_util::future::BoxFuture;
use polyq_runtime::outbox::OutboxStatus;
use uuid::Uuid;

use crate::outbox::error::OutboxError;
use crate::outbox::row::StoredMessage;

/// The relay's operations on an outbox. A lease is held by `token`: marks by another token
/// change nothing, so a relay whose lease ran out does not overwrite the next one's work.
pub(crate) trait Backend: Send + Sync + std::fmt::Debug + 'static {
    /// The table name (or `memory`), for meters and logs.
    fn name(&self) -> &str;

    /// Leases up to `limit` publishable rows, oldest first, to `token` for `lease`, with each
    /// row's failed attempts so far. The token is a UUID so that a store may write it into a
    /// statement's text: its form leaves nothing to quote. With `after`, the id of the last row
    /// of the batch before, a store may look only at rows after that one in the order of
    /// the pending index; rows before it are offered again once the relay leases without it.
    fn claim<'a>(
        &'a self,
        token: Uuid,
        lease: Duration,
        max_attempts: i32,
        limit: i64,
        synchronous_commit: bool,
        after: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<(StoredMessage, i32)>, OutboxError>>;

    /// Marks rows the broker confirmed as published and ends their lease.
    fn mark_published<'a>(
        &'a self,
        token: &'a str,
        ids: &'a [String],
        synchronous_commit: bool,
    ) -> BoxFuture<'a, Result<(), OutboxError>>;

    /// The age of the oldest row still pending (the lag), `None` when there is none.
    fn lag(&self, max_attempts: i32) -> BoxFuture<'_, Result<Option<Duration>, OutboxError>>;

    /// Extends to `lease` from now the lease of the rows `ids` still leased to `token`.
    fn renew<'a>(
        &'a self,
        token: &'a str,
        ids: &'a [String],
        lease: Duration,
        synchronous_commit: bool,
    ) -> BoxFuture<'a, Result<(), OutboxError>>;

    /// Counts a failed publish against a row, with its reason, and holds it back.
    fn mark_failed<'a>(
        &'a self,
        token: &'a str,
        id: &'a str,
        reason: &'a str,
        failure: Failure,
        synchronous_commit: bool,
    ) -> BoxFuture<'a, Result<(), OutboxError>>;

    /// Pending and failed counts and the age of the oldest pending row.
    fn status(&self, max_attempts: i32) -> BoxFuture<'_, Result<OutboxStatus, OutboxError>>;
}

/// How a failed publish is counted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Failure {
    /// The broker may take it later: offer it again after `backoff`.
    Retry { backoff: Duration },
    /// The row can never be published as it is.
    Permanent { max_attempts: i32 },
}

impl Failure {
    /// How long the row is held back, and the attempts count it is raised to at least.
    pub fn hold(self) -> (Duration, i32) {
        match self {
            Failure::Retry { backoff } => (backoff, 0),
            Failure::Permanent { max_attempts } => (Duration::ZERO, max_attempts),
        }
    }
}

/// `name` as an outbox table's name, which reaches SQL by interpolation: only a plain identifier
/// passes.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn table_name(name: &str) -> Result<String, OutboxError> {
    if polyq_runtime::outbox::is_plain_sql_identifier(name) {
        Ok(name.to_owned())
    } else {
        Err(OutboxError::InvalidTable(name.to_owned()))
    }
}

/// The error of a statement doing `operation` on `table` that the database refused.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn database_error<'a>(
    operation: &'static str,
    table: &'a str,
) -> impl FnOnce(sqlx::Error) -> OutboxError + 'a {
    move |source| OutboxError::Database {
        operation,
        table: table.to_owned(),
        source,
    }
}

/// The reason as stored: bounded, since a wrapped error chain can be long and a broker's reason
/// fits in far less (the Java port bounds it at 1000 too).
pub(crate) fn truncate(reason: &str) -> &str {
    const LIMIT: usize = 1000;
    if reason.len() <= LIMIT {
        return reason;
    }
    let mut end = LIMIT;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

/// Checks the renewals of `backend`, which holds some publishable rows: a renewal changes the
/// lease of its own token's rows only, and sets it from now.
#[cfg(test)]
pub(crate) async fn renewals_hold_the_rows_of_their_token_only(backend: &dyn Backend) {
    let hour = Duration::from_secs(3600);
    let claim = |token| backend.claim(token, hour, 10, 100, false, None);
    let holder = Uuid::new_v4();
    let claimed = claim(holder).await.unwrap();
    assert!(!claimed.is_empty());
    let ids: Vec<String> = claimed.iter().map(|(row, _)| row.id.clone()).collect();

    let stranger = Uuid::new_v4().to_string();
    backend
        .renew(&stranger, &ids, Duration::ZERO, false)
        .await
        .unwrap();
    assert!(
        claim(Uuid::new_v4()).await.unwrap().is_empty(),
        "another token's renewal ended the lease"
    );
    backend
        .renew(&holder.to_string(), &ids, Duration::ZERO, false)
        .await
        .unwrap();
    let next = Uuid::new_v4();
    assert_eq!(
        claim(next).await.unwrap().len(),
        ids.len(),
        "a renewal to no time at all ends the lease now"
    );
    backend
        .renew(&next.to_string(), &ids, hour, false)
        .await
        .unwrap();
    assert!(claim(Uuid::new_v4()).await.unwrap().is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reason_is_cut_on_a_character_boundary() {
        let reason = "é".repeat(600);
        let cut = truncate(&reason);
        assert!(cut.len() <= 1000);
        assert!(reason.starts_with(cut));
        assert_eq!(truncate("short"), "short");
    }
}
