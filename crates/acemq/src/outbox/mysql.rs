//! The outbox table on MariaDB (10.6 and later) or MySQL (8.0 and later), feature `mysql`: the
//! PostgreSQL table's columns with MySQL's types, the writer's insert in the caller's
//! transaction, and the relay's lease, marks and status on [`SqlBackend`].
//!
//! The lease is a transaction of two statements where PostgreSQL has one: the oldest
//! publishable rows are read `FOR UPDATE SKIP LOCKED` (rows another relay is leasing at that
//! moment are skipped, not waited for), then leased by id. Times are the database's clock in
//! UTC (`UTC_TIMESTAMP(6)`). The relay's `synchronous_commit` is PostgreSQL's and changes nothing
//! here.

use std::time::Duration;

use futures_util::future::BoxFuture;
use polyq_runtime::outbox::OutboxStatus;
use sqlx::mysql::MySqlArguments;
use sqlx::query::Query;
use sqlx::{MySql, MySqlPool, Row};
use uuid::Uuid;

use crate::outbox::backend::{Backend, Failure, truncate};
use crate::outbox::error::OutboxError;
use crate::outbox::row::StoredMessage;
use crate::outbox::table::{Dialect, SqlBackend, Table};

/// The shipped migration, written for the default table.
pub(crate) const MIGRATION: &str = include_str!("../../migrations/mysql/0001_outbox.sql");

/// The columns a row is read back with. The id's binary collation (exact comparison) makes
/// sqlx take it for bytes: it is read through the connection's character set instead.
const COLUMNS: &str = "CONVERT(id USING utf8mb4) AS id, exchange, routing_key, body, \
                       content_type, headers, properties, mandatory, attempts";

impl Dialect for MySql {
    const MIGRATION: &'static str = MIGRATION;

    fn insert_statement(table: &str) -> String {
        format!(
            "INSERT INTO {table} (id, exchange, routing_key, body, content_type, headers, properties, \
             mandatory, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))"
        )
    }
}

/// `?, ?, ...`, one placeholder for each of `count` values.
fn placeholders(count: usize) -> String {
    vec!["?"; count].join(", ")
}

/// Microseconds for `INTERVAL ? MICROSECOND`.
/// `update` with the token and the ids of [`Table::leased_rows_update`] bound.
fn bind_leased<'q>(
    update: Query<'q, MySql, MySqlArguments>,
    token: &'q str,
    ids: &'q [String],
) -> Query<'q, MySql, MySqlArguments> {
    ids.iter()
        .fold(update.bind(token), |update, id| update.bind(id))
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// An age in microseconds as the status and the relay's lag carry it.
fn age(micros: Option<i64>) -> Option<Duration> {
    micros.map(|micros| Duration::from_micros(micros.max(0).unsigned_abs()))
}

impl Table<MySql> {
    /// Leases up to `limit` publishable rows, oldest first, to `token` for `lease`: rows under
    /// a live lease or backoff, published, or out of attempts are not offered, and rows another
    /// relay is leasing at this moment are skipped.
    pub async fn claim(
        &self,
        db: &MySqlPool,
        token: Uuid,
        lease: Duration,
        max_attempts: i32,
        limit: i64,
    ) -> Result<Vec<(StoredMessage, i32)>, OutboxError> {
        let t = self.name();
        let mut tx = db
            .begin()
            .await
            .map_err(self.failed("claim a batch from"))?;
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM {t} \
             WHERE published_at IS NULL AND attempts < ? \
               AND (locked_until IS NULL OR locked_until < UTC_TIMESTAMP(6)) \
             ORDER BY created_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
        ))
        .bind(max_attempts)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await
        .map_err(self.failed("claim a batch from"))?;
        let claimed = rows
            .iter()
            .map(StoredMessage::read)
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(self.failed("read a claimed row of"))?;
        if !claimed.is_empty() {
            let lease_rows = format!(
                "UPDATE {t} SET locked_by = ?, \
                 locked_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE id IN ({})",
                placeholders(claimed.len())
            );
            let mut update = sqlx::query(&lease_rows)
                .bind(token.to_string())
                .bind(micros(lease));
            for (row, _) in &claimed {
                update = update.bind(&row.id);
            }
            update
                .execute(&mut *tx)
                .await
                .map_err(self.failed("claim a batch from"))?;
        }
        tx.commit()
            .await
            .map_err(self.failed("claim a batch from"))?;
        Ok(claimed)
    }

    /// Marks rows the broker confirmed as published, and ends their lease. Only rows still
    /// leased to `token` change: a relay whose lease ran out does not overwrite the next one's.
    pub async fn mark_published(
        &self,
        db: &MySqlPool,
        token: &str,
        ids: &[String],
    ) -> Result<(), OutboxError> {
        if ids.is_empty() {
            return Ok(());
        }
        let mark = self.leased_rows_update(
            "published_at = UTC_TIMESTAMP(6), locked_by = NULL, locked_until = NULL",
            ids.len(),
        );
        bind_leased(sqlx::query(&mark), token, ids)
            .execute(db)
            .await
            .map_err(self.failed("mark published rows in"))?;
        Ok(())
    }

    /// The age of the oldest pending row: the first row of the pending index, not
    /// `MIN(created_at)`, which reads them all.
    pub async fn lag(
        &self,
        db: &MySqlPool,
        max_attempts: i32,
    ) -> Result<Option<Duration>, OutboxError> {
        let oldest: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6)) FROM {} \
             WHERE published_at IS NULL AND attempts < ? ORDER BY created_at, id LIMIT 1",
            self.name()
        ))
        .bind(max_attempts)
        .fetch_optional(db)
        .await
        .map_err(self.failed("read the lag of"))?;
        Ok(age(oldest))
    }

    /// An `UPDATE` that sets `set` on `ids` rows still leased to a token: its placeholders, those
    /// of `set` first, then the token, then the ids ([`bind_leased`]).
    fn leased_rows_update(&self, set: &str, ids: usize) -> String {
        format!(
            "UPDATE {} SET {set} WHERE locked_by = ? AND id IN ({})",
            self.name(),
            placeholders(ids)
        )
    }

    /// Extends to `lease` from now the lease of the rows `ids` still leased to `token`.
    pub async fn renew(
        &self,
        db: &MySqlPool,
        token: &str,
        ids: &[String],
        lease: Duration,
    ) -> Result<(), OutboxError> {
        if ids.is_empty() {
            return Ok(());
        }
        let renew = self.leased_rows_update(
            "locked_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND",
            ids.len(),
        );
        bind_leased(sqlx::query(&renew).bind(micros(lease)), token, ids)
            .execute(db)
            .await
            .map_err(self.failed("renew the lease of a batch in"))?;
        Ok(())
    }

    /// Counts a failed publish against a row with its reason, and keeps it back for `backoff`.
    /// A permanent failure uses up every attempt at once, so the row stays for someone to look
    /// at and is not offered again.
    pub async fn mark_failed(
        &self,
        db: &MySqlPool,
        token: &str,
        id: &str,
        reason: &str,
        failure: Failure,
    ) -> Result<(), OutboxError> {
        let (backoff, exhaust) = failure.hold();
        sqlx::query(&format!(
            "UPDATE {} SET attempts = GREATEST(attempts + 1, ?), last_error = ?, \
               locked_by = NULL, locked_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
             WHERE id = ? AND locked_by = ?",
            self.name()
        ))
        .bind(exhaust)
        .bind(truncate(reason))
        .bind(micros(backoff))
        .bind(id)
        .bind(token)
        .execute(db)
        .await
        .map_err(self.failed("mark a failed row in"))?;
        Ok(())
    }

    /// Deletes the rows published more than `older_than` ago, `rows` at a time along the
    /// pending index (which starts with `published_at`), and returns how many.
    pub async fn purge_published(
        &self,
        db: &MySqlPool,
        older_than: Duration,
        rows: u32,
    ) -> Result<u64, OutboxError> {
        let purge = format!(
            "DELETE FROM {} WHERE published_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND \
             ORDER BY published_at LIMIT ?",
            self.name()
        );
        let mut purged = 0;
        loop {
            let done = sqlx::query(&purge)
                .bind(micros(older_than))
                .bind(rows.max(1))
                .execute(db)
                .await
                .map_err(self.failed("purge published rows from"))?
                .rows_affected();
            purged += done;
            if done < u64::from(rows.max(1)) {
                return Ok(purged);
            }
        }
    }

    /// Pending and failed counts and the age of the oldest pending row.
    pub async fn status(
        &self,
        db: &MySqlPool,
        max_attempts: i32,
    ) -> Result<OutboxStatus, OutboxError> {
        let row = sqlx::query(&format!(
            "SELECT CAST(COALESCE(SUM(attempts < ?), 0) AS SIGNED) AS pending, \
                    CAST(COALESCE(SUM(attempts >= ?), 0) AS SIGNED) AS failed, \
                    TIMESTAMPDIFF(MICROSECOND, MIN(IF(attempts < ?, created_at, NULL)), \
                      UTC_TIMESTAMP(6)) AS age \
             FROM {} WHERE published_at IS NULL",
            self.name()
        ))
        .bind(max_attempts)
        .bind(max_attempts)
        .bind(max_attempts)
        .fetch_one(db)
        .await
        .map_err(self.failed("read the status of"))?;
        let read = || -> Result<OutboxStatus, sqlx::Error> {
            let oldest = age(row.try_get("age")?);
            Ok(OutboxStatus::from_sql(
                row.try_get("pending")?,
                row.try_get("failed")?,
                oldest.map(|age| age.as_secs_f64()),
            ))
        };
        read().map_err(self.failed("read the status of"))
    }
}

impl Backend for SqlBackend<MySql> {
    fn name(&self) -> &str {
        self.table.name()
    }

    fn claim<'a>(
        &'a self,
        token: Uuid,
        lease: Duration,
        max_attempts: i32,
        limit: i64,
        _synchronous_commit: bool,
        _after: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<(StoredMessage, i32)>, OutboxError>> {
        Box::pin(
            self.table
                .claim(&self.db, token, lease, max_attempts, limit),
        )
    }

    fn mark_published<'a>(
        &'a self,
        token: &'a str,
        ids: &'a [String],
        _synchronous_commit: bool,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(self.table.mark_published(&self.db, token, ids))
    }

    fn lag(&self, max_attempts: i32) -> BoxFuture<'_, Result<Option<Duration>, OutboxError>> {
        Box::pin(self.table.lag(&self.db, max_attempts))
    }

    fn renew<'a>(
        &'a self,
        token: &'a str,
        ids: &'a [String],
        lease: Duration,
        _synchronous_commit: bool,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(self.table.renew(&self.db, token, ids, lease))
    }

    fn mark_failed<'a>(
        &'a self,
        token: &'a str,
        id: &'a str,
        reason: &'a str,
        failure: Failure,
        _synchronous_commit: bool,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(self.table.mark_failed(&self.db, token, id, reason, failure))
    }

    fn status(&self, max_attempts: i32) -> BoxFuture<'_, Result<OutboxStatus, OutboxError>> {
        Box::pin(self.table.status(&self.db, max_attempts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::table::DEFAULT_TABLE;

    #[tokio::test]
    async fn a_purge_deletes_the_rows_published_before_the_retention() {
        let db = MySqlPool::connect(&polyq_testkit::mariadb_url())
            .await
            .expect("MariaDB is reachable (POLYQ_MARIADB_URL)");
        let name = polyq_testkit::unique_name("acemq_outbox_purge").replace(['-', '.'], "_");
        let _dropped = polyq_testkit::mysql::DropTables::new([&name]);
        let table = Table::<MySql>::new(&name).unwrap();
        table.migrate(&db).await.unwrap();
        // Ten published two hours ago, five just now, five pending.
        for n in 0..20 {
            let published = match n {
                0..10 => "UTC_TIMESTAMP(6) - INTERVAL 2 HOUR",
                10..15 => "UTC_TIMESTAMP(6)",
                _ => "NULL",
            };
            sqlx::query(&format!(
                "INSERT INTO {name} (id, exchange, routing_key, body, content_type, headers, \
                 published_at) VALUES (?, '', 'orders', '{{}}', 'application/json', '{{}}', \
                 {published})"
            ))
            .bind(format!("m-{n}"))
            .execute(&db)
            .await
            .unwrap();
        }
        let hour = Duration::from_secs(3600);
        // Three a statement: the loop goes on until a statement deletes fewer.
        assert_eq!(table.purge_published(&db, hour, 3).await.unwrap(), 10);
        assert_eq!(table.purge_published(&db, hour, 3).await.unwrap(), 0);
        let left: (i64, i64) = sqlx::query_as(&format!(
            "SELECT CAST(SUM(published_at IS NULL) AS SIGNED), COUNT(*) FROM {name}"
        ))
        .fetch_one(&db)
        .await
        .unwrap();
        assert_eq!(left, (5, 10));
    }

    #[tokio::test]
    async fn a_renewal_holds_the_rows_of_its_token_only() {
        let db = MySqlPool::connect(&polyq_testkit::mariadb_url())
            .await
            .expect("MariaDB is reachable (POLYQ_MARIADB_URL)");
        let name = polyq_testkit::unique_name("acemq_outbox_renew").replace(['-', '.'], "_");
        let _dropped = polyq_testkit::mysql::DropTables::new([&name]);
        let table = Table::<MySql>::new(&name).unwrap();
        table.migrate(&db).await.unwrap();
        sqlx::query(&format!(
            "INSERT INTO {name} (id, exchange, routing_key, body, content_type, headers) \
             VALUES ('m-1', '', 'orders', '{{}}', 'application/json', '{{}}'), \
                    ('m-2', '', 'orders', '{{}}', 'application/json', '{{}}')"
        ))
        .execute(&db)
        .await
        .unwrap();
        let backend = SqlBackend { db, table };
        crate::outbox::backend::renewals_hold_the_rows_of_their_token_only(&backend).await;
    }

    #[test]
    fn the_migration_is_renamed_whole_and_lists_are_one_placeholder_a_value() {
        let ddl = MIGRATION.replace(DEFAULT_TABLE, "orders_outbox");
        assert!(ddl.contains("CREATE TABLE IF NOT EXISTS orders_outbox ("));
        assert!(!ddl.contains(DEFAULT_TABLE));
        assert_eq!(placeholders(3), "?, ?, ?");
        assert_eq!(
            age(Some(-5)),
            Some(Duration::ZERO),
            "a clock step reads as no age"
        );
        assert_eq!(age(Some(1_500_000)), Some(Duration::from_millis(1500)));
    }
}
