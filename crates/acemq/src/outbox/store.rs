//! The SQL of the outbox table: the writer's insert, the relay's lease and marks, the status.
//! The relay's statements run on [`SqlBackend`], its own pool.

use std::time::Duration;

use polyq_runtime::outbox::{OutboxStatus, WALK_THE_PENDING_INDEX, relay_commit_clause};
use sqlx::{PgPool, Postgres};
use uuid::Uuid;

use futures_util::future::BoxFuture;

use crate::outbox::backend::{Backend, Failure, truncate};
use crate::outbox::error::OutboxError;
use crate::outbox::row::StoredMessage;
use crate::outbox::table::{Dialect, SqlBackend, Table};

/// The shipped migration, written for [`DEFAULT_TABLE`](crate::outbox::DEFAULT_TABLE).
pub(crate) const MIGRATION: &str = include_str!("../../migrations/postgres/0001_outbox.sql");

impl Dialect for Postgres {
    const MIGRATION: &'static str = MIGRATION;

    fn insert_statement(table: &str) -> String {
        format!(
            "INSERT INTO {table} (id, exchange, routing_key, body, content_type, headers, properties, mandatory) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        )
    }
}

impl Table<Postgres> {
    /// Leases up to `limit` publishable rows, oldest first, to `token` for `lease`. Rows another
    /// relay is claiming at this moment are skipped, not waited for; rows under a live lease or
    /// backoff, published, or out of attempts are not offered.
    ///
    /// The lease walks the pending index in its order and stops after `limit` rows
    /// ([`WALK_THE_PENDING_INDEX`]); sorting every pending row instead would cost more here than
    /// anywhere, since rows written by one transaction share their `created_at` and each
    /// comparison falls through to the text `id`. With `after`, the walk starts behind that
    /// row: the head of the index holds an entry for every row marked or leased since the
    /// table was last vacuumed, dead but still read by every walk from the start, so that each
    /// lease of a long backlog would cost more than the one before.
    ///
    /// The simple protocol binds no parameters, so every value is written into the text: the
    /// relay's own (a UUID and numbers), and the row id of `after` as a dollar-quoted literal.
    #[allow(clippy::too_many_arguments)]
    pub async fn claim(
        &self,
        db: &PgPool,
        token: Uuid,
        lease: Duration,
        max_attempts: i32,
        limit: i64,
        synchronous_commit: bool,
        after: Option<&str>,
    ) -> Result<Vec<(StoredMessage, i32)>, OutboxError> {
        let statement =
            self.claim_statement(token, lease, max_attempts, limit, synchronous_commit, after);
        let rows = sqlx::raw_sql(&format!("{WALK_THE_PENDING_INDEX} {statement}"))
            .fetch_all(db)
            .await
            .map_err(self.failed("claim a batch from"))?;
        rows.iter()
            .map(StoredMessage::read)
            .collect::<Result<_, sqlx::Error>>()
            .map_err(self.failed("read a claimed row of"))
    }

    /// The lease of [`Table::claim`], its values written in.
    fn claim_statement(
        &self,
        token: Uuid,
        lease: Duration,
        max_attempts: i32,
        limit: i64,
        synchronous_commit: bool,
        after: Option<&str>,
    ) -> String {
        let t = self.name();
        let commit = relay_commit_clause(synchronous_commit);
        // `f64`'s `Display` writes a plain decimal, never an exponent.
        let lease = lease.as_secs_f64();
        // A row that is gone by now makes the comparison NULL and the batch empty, which ends
        // the streak; the next one walks from the start.
        let behind = after.map_or_else(String::new, |id| {
            format!(
                "AND (created_at, id) > (SELECT created_at, id FROM {t} WHERE id = {})",
                dollar_quoted(id)
            )
        });
        format!(
            "WITH claimed AS ( \
               UPDATE {t} SET locked_by = '{token}', \
                 locked_until = now() + make_interval(secs => {lease}) \
               {commit} WHERE id IN ( \
                 SELECT id FROM {t} \
                 WHERE published_at IS NULL AND attempts < {max_attempts} \
                   AND (locked_until IS NULL OR locked_until < now()) {behind} \
                 ORDER BY created_at, id LIMIT {limit} FOR UPDATE SKIP LOCKED) \
               RETURNING id, exchange, routing_key, body, content_type, headers, properties, \
                 mandatory, attempts, created_at) \
             SELECT * FROM claimed ORDER BY created_at, id"
        )
    }

    /// Marks rows the broker confirmed as published, and ends their lease. Only rows still
    /// leased to `token` change: a relay whose lease ran out does not overwrite the next one's.
    pub async fn mark_published(
        &self,
        db: &PgPool,
        token: &str,
        ids: &[String],
        synchronous_commit: bool,
    ) -> Result<(), OutboxError> {
        if ids.is_empty() {
            return Ok(());
        }
        sqlx::query(&format!(
            "UPDATE {} SET published_at = now(), locked_by = NULL, locked_until = NULL \
             {} WHERE id = ANY($1) AND locked_by = $2",
            self.name(),
            relay_commit_clause(synchronous_commit)
        ))
        .bind(ids)
        .bind(token)
        .execute(db)
        .await
        .map_err(self.failed("mark published rows in"))?;
        Ok(())
    }

    /// Extends to `lease` from now the lease of the rows `ids` still leased to `token`.
    pub async fn renew(
        &self,
        db: &PgPool,
        token: &str,
        ids: &[String],
        lease: Duration,
        synchronous_commit: bool,
    ) -> Result<(), OutboxError> {
        sqlx::query(&format!(
            "UPDATE {} SET locked_until = now() + make_interval(secs => $1) \
             {} WHERE id = ANY($2) AND locked_by = $3",
            self.name(),
            relay_commit_clause(synchronous_commit)
        ))
        .bind(lease.as_secs_f64())
        .bind(ids)
        .bind(token)
        .execute(db)
        .await
        .map_err(self.failed("renew the lease of a batch in"))?;
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
        synchronous_commit: bool,
    ) -> Result<(), OutboxError> {
        let (backoff, exhaust) = failure.hold();
        sqlx::query(&format!(
            "UPDATE {} SET attempts = GREATEST(attempts + 1, $1), last_error = $2, \
               locked_by = NULL, locked_until = now() + make_interval(secs => $3) \
             {} WHERE id = $4 AND locked_by = $5",
            self.name(),
            relay_commit_clause(synchronous_commit)
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

    /// The age of the oldest pending row, without counting: the first entry of the pending
    /// index, where a count would read every pending row.
    pub async fn lag(
        &self,
        db: &PgPool,
        max_attempts: i32,
    ) -> Result<Option<Duration>, OutboxError> {
        let age: Option<f64> = sqlx::query_scalar(&self.lag_statement())
            .bind(max_attempts)
            .fetch_optional(db)
            .await
            .map_err(self.failed("read the lag of"))?;
        Ok(age.map(|secs| Duration::from_secs_f64(secs.max(0.0))))
    }

    /// The read of [`Table::lag`]: `$1` the attempts limit.
    fn lag_statement(&self) -> String {
        format!(
            "SELECT EXTRACT(EPOCH FROM now() - created_at)::float8 FROM {} \
             WHERE published_at IS NULL AND attempts < $1 ORDER BY created_at, id LIMIT 1",
            self.name()
        )
    }

    /// Deletes the rows published more than `older_than` ago, `blocks` of the table's pages at
    /// a time, and returns how many. Each statement reads its range of pages alone (a TID range
    /// scan), so the whole purge reads the table once, and no statement holds more than a range
    /// of rows; rows on pages added meanwhile wait for the next purge.
    pub async fn purge_published(
        &self,
        db: &PgPool,
        older_than: Duration,
        blocks: u32,
    ) -> Result<u64, OutboxError> {
        let failed = || self.failed("purge published rows from");
        let pages: i64 = sqlx::query_scalar(
            "SELECT pg_relation_size($1::regclass) / current_setting('block_size')::bigint",
        )
        .bind(self.name())
        .fetch_one(db)
        .await
        .map_err(failed())?;
        let purge = format!(
            "DELETE FROM {} WHERE ctid >= $1::text::tid AND ctid < $2::text::tid \
               AND published_at < now() - make_interval(secs => $3)",
            self.name()
        );
        let (mut purged, mut start) = (0, 0);
        while start < pages {
            let end = start + i64::from(blocks.max(1));
            purged += sqlx::query(&purge)
                .bind(format!("({start},0)"))
                .bind(format!("({end},0)"))
                .bind(older_than.as_secs_f64())
                .execute(db)
                .await
                .map_err(failed())?
                .rows_affected();
            start = end;
        }
        Ok(purged)
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
            self.name()
        ))
        .bind(max_attempts)
        .fetch_one(db)
        .await
        .map_err(self.failed("read the status of"))?;
        OutboxStatus::from_row(&row).map_err(self.failed("read the status of"))
    }
}

/// `text` as a PostgreSQL dollar-quoted string literal, whose content is taken as it is
/// whatever the server's `standard_conforming_strings`: its tag is random and, checked, not in
/// `text`.
fn dollar_quoted(text: &str) -> String {
    loop {
        let tag = format!("$q{}$", Uuid::new_v4().simple());
        if !text.contains(&tag) {
            return format!("{tag}{text}{tag}");
        }
    }
}

impl Backend for SqlBackend<Postgres> {
    fn name(&self) -> &str {
        self.table.name()
    }

    fn claim<'a>(
        &'a self,
        token: Uuid,
        lease: Duration,
        max_attempts: i32,
        limit: i64,
        synchronous_commit: bool,
        after: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<(StoredMessage, i32)>, OutboxError>> {
        Box::pin(self.table.claim(
            &self.db,
            token,
            lease,
            max_attempts,
            limit,
            synchronous_commit,
            after,
        ))
    }

    fn mark_published<'a>(
        &'a self,
        token: &'a str,
        ids: &'a [String],
        synchronous_commit: bool,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(
            self.table
                .mark_published(&self.db, token, ids, synchronous_commit),
        )
    }

    fn lag(&self, max_attempts: i32) -> BoxFuture<'_, Result<Option<Duration>, OutboxError>> {
        Box::pin(self.table.lag(&self.db, max_attempts))
    }

    fn renew<'a>(
        &'a self,
        token: &'a str,
        ids: &'a [String],
        lease: Duration,
        synchronous_commit: bool,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(
            self.table
                .renew(&self.db, token, ids, lease, synchronous_commit),
        )
    }

    fn mark_failed<'a>(
        &'a self,
        token: &'a str,
        id: &'a str,
        reason: &'a str,
        failure: Failure,
        synchronous_commit: bool,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(
            self.table
                .mark_failed(&self.db, token, id, reason, failure, synchronous_commit),
        )
    }

    fn status(&self, max_attempts: i32) -> BoxFuture<'_, Result<OutboxStatus, OutboxError>> {
        Box::pin(self.table.status(&self.db, max_attempts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polyq_testkit::postgres::plan;

    /// A fresh outbox table, dropped with the guard, holding `rows` publishable rows written by
    /// one transaction.
    async fn table_with(
        rows: u32,
    ) -> (PgPool, Table<Postgres>, polyq_testkit::postgres::DropTables) {
        let db = PgPool::connect(&polyq_testkit::postgres_url())
            .await
            .expect("PostgreSQL is reachable (POLYQ_POSTGRES_URL)");
        let name = polyq_testkit::unique_name("acemq_outbox").replace(['-', '.'], "_");
        let dropped = polyq_testkit::postgres::DropTables::new([&name]);
        let table = Table::<Postgres>::new(&name).unwrap();
        table.migrate(&db).await.unwrap();
        sqlx::query(&format!(
            "INSERT INTO {name} (id, exchange, routing_key, body, content_type, headers) \
             SELECT 'm-' || n, '', 'orders', '\\x7b7d', 'application/json', '{{}}' \
             FROM generate_series(1, {rows}) AS n"
        ))
        .execute(&db)
        .await
        .unwrap();
        (db, table, dropped)
    }

    #[tokio::test]
    async fn a_purge_deletes_the_rows_published_before_the_retention_page_range_by_range() {
        let (db, table, _dropped) = table_with(600).await;
        let name = table.name().to_owned();
        // A third published two hours ago, a third just now, a third pending.
        sqlx::query(&format!(
            "UPDATE {name} SET published_at = CASE \
               WHEN substr(id, 3)::int <= 200 THEN now() - interval '2 hours' \
               WHEN substr(id, 3)::int <= 400 THEN now() END"
        ))
        .execute(&db)
        .await
        .unwrap();
        let pages: i64 = sqlx::query_scalar(&format!(
            "SELECT pg_relation_size('{name}') / current_setting('block_size')::bigint"
        ))
        .fetch_one(&db)
        .await
        .unwrap();
        assert!(pages > 3, "{pages} pages: too few for ranges of two");
        let hour = Duration::from_secs(3600);
        assert_eq!(table.purge_published(&db, hour, 2).await.unwrap(), 200);
        assert_eq!(table.purge_published(&db, hour, 2).await.unwrap(), 0);
        let left: Vec<(i64, i64)> = sqlx::query_as(&format!(
            "SELECT count(*) FILTER (WHERE published_at IS NULL), count(*) FROM {name}"
        ))
        .fetch_all(&db)
        .await
        .unwrap();
        assert_eq!(left, vec![(200, 400)]);
    }

    #[tokio::test]
    async fn a_renewal_holds_the_rows_of_its_token_only() {
        let (db, table, _dropped) = table_with(3).await;
        let backend = SqlBackend { db, table };
        crate::outbox::backend::renewals_hold_the_rows_of_their_token_only(&backend).await;
    }

    /// A backlog written by one transaction into a table never analyzed: the planner, left to
    /// its estimates, would read and sort every pending row for each lease and each lag.
    #[tokio::test]
    async fn the_lease_and_the_lag_walk_the_pending_index_of_a_table_never_analyzed() {
        let (db, table, _dropped) = table_with(5000).await;
        let name = table.name().to_owned();
        let (walk, read_all) = (
            format!("Index Scan using {name}_pending"),
            format!("Bitmap Index Scan on {name}_pending"),
        );
        let walks_the_index = |plan: &[String]| {
            plan.iter().any(|line| line.contains(&walk))
                && !plan.iter().any(|line| line.contains(&read_all))
        };

        let token = Uuid::new_v4();
        let hour = Duration::from_secs(3600);
        let lease = table.claim_statement(token, hour, 10, 100, false, None);
        let lease_plan = plan(&db, WALK_THE_PENDING_INDEX, &lease).await;
        assert!(walks_the_index(&lease_plan), "{lease_plan:#?}");
        let behind = table.claim_statement(token, hour, 10, 100, false, Some("m-1"));
        let behind_plan = plan(&db, WALK_THE_PENDING_INDEX, &behind).await;
        assert!(walks_the_index(&behind_plan), "{behind_plan:#?}");
        assert!(
            behind_plan
                .iter()
                .any(|line| line.contains("Index Cond: (ROW(created_at, (id)::text) > ROW(")),
            "{behind_plan:#?}"
        );
        let lag = table.lag_statement().replace("$1", "10");
        let lag_plan = plan(&db, "", &lag).await;
        assert!(walks_the_index(&lag_plan), "{lag_plan:#?}");

        // And the lease takes the oldest rows, in order.
        let claimed = table
            .claim(
                &db,
                Uuid::new_v4(),
                Duration::from_secs(90),
                10,
                100,
                false,
                None,
            )
            .await
            .unwrap();
        let expected: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT id FROM {name} ORDER BY created_at, id LIMIT 100"
        ))
        .fetch_all(&db)
        .await
        .unwrap();
        let ids: Vec<String> = claimed.into_iter().map(|(row, _)| row.id).collect();
        assert_eq!(ids, expected);

        // The next lease behind the last row takes the next rows, in order.
        let next = table
            .claim(
                &db,
                Uuid::new_v4(),
                hour,
                10,
                100,
                false,
                ids.last().map(String::as_str),
            )
            .await
            .unwrap();
        let expected: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT id FROM {name} ORDER BY created_at, id OFFSET 100 LIMIT 100"
        ))
        .fetch_all(&db)
        .await
        .unwrap();
        let ids: Vec<String> = next.into_iter().map(|(row, _)| row.id).collect();
        assert_eq!(ids, expected);

        // An id reaches the statement as it is, whatever it holds.
        let tricky = r"o'brien \ $$ $q$ ;--";
        let read: String = sqlx::query_scalar(&format!("SELECT {}", dollar_quoted(tricky)))
            .fetch_one(&db)
            .await
            .unwrap();
        assert_eq!(read, tricky);
    }
}
