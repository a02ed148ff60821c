//! The SQL of the outbox table: the writer's insert, the relay's lease and marks, the status.

use std::time::Duration;

use polyq_runtime::outbox::OutboxStatus;
use sqlx::{PgConnection, PgPool, Row};

use crate::outbox::error::OutboxError;
use crate::outbox::row::StoredMessage;

/// The table every port defaults to.
pub const DEFAULT_TABLE: &str = "acemq_outbox";

/// The shipped migration, written for [`DEFAULT_TABLE`].
pub(crate) const MIGRATION: &str = include_str!("../../migrations/postgres/0001_outbox.sql");

/// A validated table name: it reaches SQL by interpolation, so only a plain identifier passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Table(String);

impl Table {
    pub fn new(name: &str) -> Result<Self, OutboxError> {
        if polyq_runtime::outbox::is_plain_sql_identifier(name) {
            Ok(Self(name.to_owned()))
        } else {
            Err(OutboxError::InvalidTable(name.to_owned()))
        }
    }

    pub fn default_table() -> Self {
        Self(DEFAULT_TABLE.to_owned())
    }

    pub fn name(&self) -> &str {
        &self.0
    }

    fn failed(&self, operation: &'static str) -> impl FnOnce(sqlx::Error) -> OutboxError + '_ {
        move |source| OutboxError::Database {
            operation,
            table: self.0.clone(),
            source,
        }
    }

    /// Creates the table and its index if they are not there yet.
    pub async fn migrate(&self, db: &PgPool) -> Result<(), OutboxError> {
        sqlx::raw_sql(&MIGRATION.replace(DEFAULT_TABLE, &self.0))
            .execute(db)
            .await
            .map_err(self.failed("create"))?;
        Ok(())
    }

    /// Inserts one message in the caller's transaction.
    pub async fn insert(
        &self,
        tx: &mut PgConnection,
        row: &StoredMessage,
    ) -> Result<(), OutboxError> {
        sqlx::query(&format!(
            "INSERT INTO {} (id, exchange, routing_key, body, content_type, headers, properties, mandatory) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            self.0
        ))
        .bind(&row.id)
        .bind(&row.exchange)
        .bind(&row.routing_key)
        .bind(&row.body)
        .bind(&row.content_type)
        .bind(&row.headers)
        .bind(&row.properties)
        .bind(row.mandatory)
        .execute(tx)
        .await
        .map_err(self.failed("write to"))?;
        Ok(())
    }

    /// Leases up to `limit` publishable rows, oldest first, to `token` for `lease`. Rows another
    /// relay is claiming at this moment are skipped, not waited for; rows under a live lease or
    /// backoff, published, or out of attempts are not offered.
    pub async fn claim(
        &self,
        db: &PgPool,
        token: &str,
        lease: Duration,
        max_attempts: i32,
        limit: i64,
    ) -> Result<Vec<(StoredMessage, i32)>, OutboxError> {
        let t = &self.0;
        let rows = sqlx::query(&format!(
            "WITH claimed AS ( \
               UPDATE {t} SET locked_by = $1, locked_until = now() + make_interval(secs => $2) \
               WHERE id IN ( \
                 SELECT id FROM {t} \
                 WHERE published_at IS NULL AND attempts < $3 \
                   AND (locked_until IS NULL OR locked_until < now()) \
                 ORDER BY created_at, id LIMIT $4 FOR UPDATE SKIP LOCKED) \
               RETURNING id, exchange, routing_key, body, content_type, headers, properties, \
                 mandatory, attempts, created_at) \
             SELECT * FROM claimed ORDER BY created_at, id"
        ))
        .bind(token)
        .bind(lease.as_secs_f64())
        .bind(max_attempts)
        .bind(limit)
        .fetch_all(db)
        .await
        .map_err(self.failed("claim a batch from"))?;
        rows.iter()
            .map(|row| {
                let stored = StoredMessage {
                    id: row.try_get("id")?,
                    exchange: row.try_get("exchange")?,
                    routing_key: row.try_get("routing_key")?,
                    body: row.try_get("body")?,
                    content_type: row.try_get("content_type")?,
                    headers: row.try_get("headers")?,
                    properties: row.try_get("properties")?,
                    mandatory: row.try_get("mandatory")?,
                };
                Ok((stored, row.try_get("attempts")?))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(self.failed("read a claimed row of"))
    }

    /// Marks rows the broker confirmed as published, and ends their lease. Only rows still
    /// leased to `token` change: a relay whose lease ran out does not overwrite the next one's.
    pub async fn mark_published(
        &self,
        db: &PgPool,
        token: &str,
        ids: &[String],
    ) -> Result<(), OutboxError> {
        if ids.is_empty() {
            return Ok(());
        }
        sqlx::query(&format!(
            "UPDATE {} SET published_at = now(), locked_by = NULL, locked_until = NULL \
             WHERE id = ANY($1) AND locked_by = $2",
            self.0
        ))
        .bind(ids)
        .bind(token)
        .execute(db)
        .await
        .map_err(self.failed("mark published rows in"))?;
        Ok(())
    }

    /// Counts a failed publish against a row with its reason, and keeps it back for `backoff`.
    /// A `permanent` failure (a row that can never be published) uses up every attempt at once,
    /// so the row stays for someone to look at and is not offered again.
    pub async fn mark_failed(
        &self,
        db: &PgPool,
        token: &str,
        id: &str,
        reason: &str,
        failure: Failure,
    ) -> Result<(), OutboxError> {
        let (backoff, exhaust) = match failure {
            Failure::Retry { backoff } => (backoff, 0),
            Failure::Permanent { max_attempts } => (Duration::ZERO, max_attempts),
        };
        sqlx::query(&format!(
            "UPDATE {} SET attempts = GREATEST(attempts + 1, $1), last_error = $2, \
               locked_by = NULL, locked_until = now() + make_interval(secs => $3) \
             WHERE id = $4 AND locked_by = $5",
            self.0
        ))
        .bind(exhaust)
        .bind(truncate(reason))
        .bind(backoff.as_secs_f64())
        .bind(id)
        .bind(token)
        .execute(db)
        .await
        .map_err(self.failed("mark a failed row in"))?;
        Ok(())
    }

    /// The age of the oldest pending row, without counting: the relay reads it after every
    /// pass, and the minimum is the first entry of the pending index where a count would read
    /// every pending row.
    pub async fn lag(
        &self,
        db: &PgPool,
        max_attempts: i32,
    ) -> Result<Option<Duration>, OutboxError> {
        let age: Option<f64> = sqlx::query_scalar(&format!(
            "SELECT EXTRACT(EPOCH FROM now() - min(created_at))::float8 FROM {} \
             WHERE published_at IS NULL AND attempts < $1",
            self.0
        ))
        .bind(max_attempts)
        .fetch_one(db)
        .await
        .map_err(self.failed("read the lag of"))?;
        Ok(age.map(|secs| Duration::from_secs_f64(secs.max(0.0))))
    }

    /// Pending and failed counts and the age of the oldest pending row.
    pub async fn status(
        &self,
        db: &PgPool,
        max_attempts: i32,
    ) -> Result<OutboxStatus, OutboxError> {
        let row = sqlx::query(&format!(
            "SELECT count(*) FILTER (WHERE attempts < $1) AS pending, \
                    count(*) FILTER (WHERE attempts >= $1) AS failed, \
                    EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE attempts < $1))::float8 AS age \
             FROM {} WHERE published_at IS NULL",
            self.0
        ))
        .bind(max_attempts)
        .fetch_one(db)
        .await
        .map_err(self.failed("read the status of"))?;
        OutboxStatus::from_row(&row).map_err(self.failed("read the status of"))
    }
}

/// How a failed publish is counted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Failure {
    /// The broker may take it later: offer it again after `backoff`.
    Retry { backoff: Duration },
    /// The row can never be published as it is.
    Permanent { max_attempts: i32 },
}

/// The reason as stored: bounded, since a wrapped error chain can be long and a broker's reason
/// fits in far less (the Java port bounds it at 1000 too).
fn truncate(reason: &str) -> &str {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_identifiers_are_table_names() {
        assert!(Table::new("acemq_outbox").is_ok());
        assert!(Table::new("_t1").is_ok());
        for bad in ["", "1t", "a-b", "a;drop", "a b", &"x".repeat(64)] {
            assert!(
                matches!(Table::new(bad), Err(OutboxError::InvalidTable(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_long_reason_is_cut_on_a_character_boundary() {
        let reason = "é".repeat(600);
        let cut = truncate(&reason);
        assert!(cut.len() <= 1000);
        assert!(reason.starts_with(cut));
        assert_eq!(truncate("short"), "short");
    }
}
