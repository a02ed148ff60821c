//! The PostgreSQL outbox store of ADR-0029: `save` in the caller's transaction,
//! `fetch_unpublished` under a lease, `mark_published`, `mark_failed`.

use std::time::Duration;

use futures_util::future::BoxFuture;
use polyq_runtime::outbox::{OutboxStatus, WALK_THE_PENDING_INDEX, relay_commit_clause};
use sqlx::{PgConnection, PgPool, Row};

use crate::outbox::error::OutboxError;
use crate::outbox::{Failure, OutboxRecord, OutboxStore};

/// The table the SDKs default to.
pub const DEFAULT_TABLE: &str = "babelqueue_outbox";

const MIGRATION: &str = include_str!("../../migrations/postgres/0001_outbox.sql");

/// The outbox table on PostgreSQL, in the upstream PHP outbox layout (see the migration).
#[derive(Debug, Clone)]
pub struct PgOutboxStore {
    db: PgPool,
    table: String,
    lease: Duration,
    synchronous_commit: bool,
}

impl PgOutboxStore {
    /// The store in `babelqueue_outbox`; the relay's work runs on `db`, never in a caller's
    /// transaction.
    pub fn new(db: PgPool) -> Self {
        Self {
            db,
            table: DEFAULT_TABLE.to_owned(),
            lease: Duration::from_secs(60),
            synchronous_commit: false,
        }
    }

    /// The store in `table`.
    ///
    /// # Errors
    /// [`OutboxError::InvalidTable`] when `table` is not a plain SQL identifier.
    pub fn in_table(mut self, table: &str) -> Result<Self, OutboxError> {
        self.table = checked_table(table)?;
        Ok(self)
    }

    /// How long a fetched batch is held before another relay may fetch it (default 60 s). The
    /// relay renews it every third of this until the batch is marked, so a broker that blocks
    /// the relay for longer does not hand its rows to another relay.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Whether the relay's own statements (the fetch, the marks) wait for their commit to
    /// reach the disk (default `false`). Without the wait, a database crash can forget the
    /// last marks and leases: those rows are published again, duplicates with the same
    /// `meta.id`, never lost, since the rows themselves were committed by the application's
    /// own transaction under its own settings. `true` trades relay throughput for fewer such
    /// duplicates after a database crash.
    pub fn synchronous_commit(mut self, wait: bool) -> Self {
        self.synchronous_commit = wait;
        self
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn failed(&self, operation: &'static str) -> impl FnOnce(sqlx::Error) -> OutboxError + '_ {
        move |source| OutboxError::Database {
            operation,
            table: self.table.clone(),
            source,
        }
    }

    /// Creates the table and its index if they are not there yet.
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn migrate(&self) -> Result<(), OutboxError> {
        sqlx::raw_sql(&MIGRATION.replace(DEFAULT_TABLE, &self.table))
            .execute(&self.db)
            .await
            .map_err(self.failed("create"))?;
        Ok(())
    }

    /// Saves an encoded envelope for `queue` in the caller's transaction; the new row's id.
    ///
    /// # Errors
    /// [`OutboxError::Database`]; the transaction is the caller's to roll back.
    pub async fn save(
        &self,
        tx: &mut PgConnection,
        encoded: &str,
        queue: &str,
    ) -> Result<i64, OutboxError> {
        save(tx, &self.table, encoded, queue).await
    }

    /// Claims up to `limit` pending rows, oldest first: `FOR UPDATE SKIP LOCKED` picks rows no
    /// other relay is claiming, and a lease (`locked_until`) keeps them from every other relay
    /// until they are marked or the lease runs out. The lease walks the pending index and stops
    /// after `limit` rows ([`WALK_THE_PENDING_INDEX`]), so its cost does not grow with the
    /// backlog.
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn fetch_unpublished(&self, limit: usize) -> Result<Vec<OutboxRecord>, OutboxError> {
        self.fetch_unpublished_after(limit, None).await
    }

    /// [`PgOutboxStore::fetch_unpublished`] of the rows after the row `after` only: the walk
    /// starts behind it, past the dead entries the head of the index keeps for every row
    /// leased or marked since the table was last vacuumed.
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn fetch_unpublished_after(
        &self,
        limit: usize,
        after: Option<i64>,
    ) -> Result<Vec<OutboxRecord>, OutboxError> {
        let statement = self.claim_statement(limit, after);
        let rows = sqlx::raw_sql(&format!("{WALK_THE_PENDING_INDEX} {statement}"))
            .fetch_all(&self.db)
            .await
            .map_err(self.failed("fetch pending rows from"))?;
        rows.iter()
            .map(|row| {
                Ok(OutboxRecord {
                    id: row.try_get("id")?,
                    queue: row.try_get("queue")?,
                    body: row.try_get("body")?,
                    attempts: row.try_get("attempts")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(self.failed("read a pending row of"))
    }

    /// The lease as one statement. The simple protocol that carries it with its `SET LOCAL`
    /// binds no parameters, so the values are written into the text; all are numbers.
    fn claim_statement(&self, limit: usize, after: Option<i64>) -> String {
        let t = &self.table;
        let commit = relay_commit_clause(self.synchronous_commit);
        // `f64`'s `Display` writes a plain decimal, never an exponent.
        let lease = self.lease.as_secs_f64();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let behind = after.map_or_else(String::new, |id| format!("AND id > {id}"));
        format!(
            "WITH claimed AS ( \
               UPDATE {t} SET locked_until = now() + make_interval(secs => {lease}) \
               {commit} WHERE id IN ( \
                 SELECT id FROM {t} \
                 WHERE status = 'pending' AND (locked_until IS NULL OR locked_until < now()) \
                   {behind} \
                 ORDER BY id LIMIT {limit} FOR UPDATE SKIP LOCKED) \
               RETURNING id, queue, body, attempts) \
             SELECT * FROM claimed ORDER BY id"
        )
    }

    /// Marks rows the binding accepted as published.
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn mark_published(&self, ids: &[i64]) -> Result<(), OutboxError> {
        if ids.is_empty() {
            return Ok(());
        }
        sqlx::query(&format!(
            "UPDATE {} SET status = 'published', published_at = now(), locked_until = NULL \
             {} WHERE id = ANY($1)",
            self.table,
            relay_commit_clause(self.synchronous_commit)
        ))
        .bind(ids)
        .execute(&self.db)
        .await
        .map_err(self.failed("mark published rows in"))?;
        Ok(())
    }

    /// Records a failed publish: the attempt, the reason (at most 500 characters, the column's
    /// size) and when; a retry is held back for its backoff, a permanent failure is `failed`.
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn mark_failed(
        &self,
        id: i64,
        reason: &str,
        failure: Failure,
    ) -> Result<(), OutboxError> {
        let (status, backoff) = match failure {
            Failure::Retry { backoff } => ("pending", backoff),
            Failure::Permanent => ("failed", Duration::ZERO),
        };
        let reason: String = reason.chars().take(500).collect();
        sqlx::query(&format!(
            "UPDATE {} SET status = $1, attempts = attempts + 1, last_error = $2, failed_at = now(), \
               locked_until = now() + make_interval(secs => $3) \
             {} WHERE id = $4",
            self.table,
            relay_commit_clause(self.synchronous_commit)
        ))
        .bind(status)
        .bind(reason)
        .bind(backoff.as_secs_f64())
        .bind(id)
        .execute(&self.db)
        .await
        .map_err(self.failed("mark a failed row in"))?;
        Ok(())
    }

    /// Extends to a full lease from now the claim on the pending rows `ids`, fetched and not
    /// marked yet.
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn renew(&self, ids: &[i64]) -> Result<(), OutboxError> {
        sqlx::query(&format!(
            "UPDATE {} SET locked_until = now() + make_interval(secs => $1) \
             {} WHERE id = ANY($2) AND status = 'pending'",
            self.table,
            relay_commit_clause(self.synchronous_commit)
        ))
        .bind(self.lease.as_secs_f64())
        .bind(ids)
        .execute(&self.db)
        .await
        .map_err(self.failed("renew the claim of a batch in"))?;
        Ok(())
    }

    /// Deletes the rows published more than `older_than` ago and returns how many. The relay
    /// keeps published rows (`status` `published`) as the PHP outbox does, so without a purge
    /// on a schedule the table grows with every job; pending and failed rows are never touched.
    /// The purge walks the `(status, id)` index from the oldest published row, 10,000 rows a
    /// statement, each starting behind the last row the one before deleted.
    ///
    /// ```no_run
    /// # async fn run(db: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use babelqueue::outbox::PgOutboxStore;
    ///
    /// let week = Duration::from_secs(7 * 24 * 3600);
    /// let purged = PgOutboxStore::new(db).purge_published(week).await?;
    /// println!("{purged} published rows older than a week deleted");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn purge_published(&self, older_than: Duration) -> Result<u64, OutboxError> {
        self.purge_published_by(older_than, 10_000).await
    }

    /// [`PgOutboxStore::purge_published`], `rows` a statement.
    async fn purge_published_by(
        &self,
        older_than: Duration,
        rows: i64,
    ) -> Result<u64, OutboxError> {
        let purge = format!(
            "WITH purged AS ( \
               DELETE FROM {t} WHERE id IN ( \
                 SELECT id FROM {t} WHERE status = 'published' AND id > $1 \
                   AND published_at < now() - make_interval(secs => $2) \
                 ORDER BY id LIMIT $3) \
               RETURNING id) \
             SELECT count(*), max(id) FROM purged",
            t = self.table
        );
        let (mut purged, mut after) = (0, 0_i64);
        loop {
            let (count, last): (i64, Option<i64>) = sqlx::query_as(&purge)
                .bind(after)
                .bind(older_than.as_secs_f64())
                .bind(rows)
                .fetch_one(&self.db)
                .await
                .map_err(self.failed("purge published rows from"))?;
            purged += u64::try_from(count).unwrap_or(0);
            match last {
                Some(last) if count == rows => after = last,
                _ => return Ok(purged),
            }
        }
    }

    /// Pending and failed counts and the age of the oldest pending row.
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn status(&self) -> Result<OutboxStatus, OutboxError> {
        let row = sqlx::query(&format!(
            "SELECT count(*) FILTER (WHERE status = 'pending') AS pending, \
                    count(*) FILTER (WHERE status = 'failed') AS failed, \
                    EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 'pending'))::float8 AS age \
             FROM {} WHERE status <> 'published'",
            self.table
        ))
        .fetch_one(&self.db)
        .await
        .map_err(self.failed("read the status of"))?;
        OutboxStatus::from_row(&row).map_err(self.failed("read the status of"))
    }
}

impl OutboxStore for PgOutboxStore {
    fn name(&self) -> &str {
        &self.table
    }

    fn fetch_unpublished(
        &self,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<OutboxRecord>, OutboxError>> {
        Box::pin(PgOutboxStore::fetch_unpublished(self, limit))
    }

    fn fetch_unpublished_after(
        &self,
        limit: usize,
        after: Option<i64>,
    ) -> BoxFuture<'_, Result<Vec<OutboxRecord>, OutboxError>> {
        Box::pin(PgOutboxStore::fetch_unpublished_after(self, limit, after))
    }

    fn lease(&self) -> Duration {
        self.lease
    }

    fn renew<'a>(&'a self, ids: &'a [i64]) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(PgOutboxStore::renew(self, ids))
    }

    fn mark_published<'a>(&'a self, ids: &'a [i64]) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(PgOutboxStore::mark_published(self, ids))
    }

    fn mark_failed<'a>(
        &'a self,
        id: i64,
        reason: &'a str,
        failure: Failure,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        Box::pin(PgOutboxStore::mark_failed(self, id, reason, failure))
    }

    fn status(&self) -> BoxFuture<'_, Result<OutboxStatus, OutboxError>> {
        Box::pin(PgOutboxStore::status(self))
    }
}

pub(crate) async fn save(
    tx: &mut PgConnection,
    table: &str,
    encoded: &str,
    queue: &str,
) -> Result<i64, OutboxError> {
    sqlx::query_scalar(&format!(
        "INSERT INTO {table} (queue, body, created_at) VALUES ($1, $2, now()) RETURNING id"
    ))
    .bind(queue)
    .bind(encoded)
    .fetch_one(tx)
    .await
    .map_err(|source| OutboxError::Database {
        operation: "write to",
        table: table.to_owned(),
        source,
    })
}

/// `table` when it is a plain SQL identifier: it reaches SQL by interpolation.
pub(crate) fn checked_table(table: &str) -> Result<String, OutboxError> {
    if polyq_runtime::outbox::is_plain_sql_identifier(table) {
        Ok(table.to_owned())
    } else {
        Err(OutboxError::InvalidTable(table.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_purge_deletes_the_rows_published_before_the_retention() {
        let db = PgPool::connect(&polyq_testkit::postgres_url())
            .await
            .expect("PostgreSQL is reachable (POLYQ_POSTGRES_URL)");
        let table = polyq_testkit::unique_name("babelqueue_outbox_purge").replace(['-', '.'], "_");
        let _dropped = polyq_testkit::postgres::DropTables::new([&table]);
        let store = PgOutboxStore::new(db.clone()).in_table(&table).unwrap();
        store.migrate().await.unwrap();
        // Ten published two hours ago, five just now, five pending, interleaved.
        sqlx::query(&format!(
            "INSERT INTO {table} (queue, body, status, published_at, created_at) \
             SELECT 'q', '{{}}', CASE WHEN n % 4 = 3 THEN 'pending' ELSE 'published' END, \
                    CASE WHEN n % 4 = 3 THEN NULL \
                         WHEN n % 4 = 2 THEN now() ELSE now() - interval '2 hours' END, now() \
             FROM generate_series(0, 19) AS n"
        ))
        .execute(&db)
        .await
        .unwrap();
        let hour = Duration::from_secs(3600);
        // Three a statement: each starts behind the last one deleted.
        assert_eq!(store.purge_published_by(hour, 3).await.unwrap(), 10);
        assert_eq!(store.purge_published_by(hour, 3).await.unwrap(), 0);
        let status = store.status().await.unwrap();
        assert_eq!(status.pending, 5);
        let left: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&db)
            .await
            .unwrap();
        assert_eq!(left, 10);
    }

    /// A backlog written by one transaction into a table never analyzed: the planner, left to
    /// its estimates, would read and sort every pending row for each lease.
    #[tokio::test]
    async fn the_lease_walks_the_pending_index_of_a_table_never_analyzed() {
        let db = PgPool::connect(&polyq_testkit::postgres_url())
            .await
            .expect("PostgreSQL is reachable (POLYQ_POSTGRES_URL)");
        let name = polyq_testkit::unique_name("babelqueue_outbox_plan").replace(['-', '.'], "_");
        let _dropped = polyq_testkit::postgres::DropTables::new([&name]);
        let store = PgOutboxStore::new(db.clone()).in_table(&name).unwrap();
        store.migrate().await.unwrap();
        sqlx::query(&format!(
            "INSERT INTO {name} (queue, body) SELECT 'orders', '{{}}' FROM generate_series(1, 5000)"
        ))
        .execute(&db)
        .await
        .unwrap();

        for after in [None, Some(42)] {
            let lease = store.claim_statement(100, after);
            let plan = polyq_testkit::postgres::plan(&db, WALK_THE_PENDING_INDEX, &lease).await;
            assert!(
                plan.iter().any(|line| line.contains("Index Scan using"))
                    && !plan.iter().any(|line| line.contains("Bitmap")),
                "{plan:#?}"
            );
            if after.is_some() {
                assert!(
                    plan.iter()
                        .any(|line| line.contains("Index Cond:") && line.contains("(id > 42)")),
                    "{plan:#?}"
                );
            }
        }

        // And the lease takes the oldest rows, in order.
        let claimed = store.fetch_unpublished(100).await.unwrap();
        let ids: Vec<i64> = claimed.iter().map(|record| record.id).collect();
        let expected: Vec<i64> =
            sqlx::query_scalar(&format!("SELECT id FROM {name} ORDER BY id LIMIT 100"))
                .fetch_all(&db)
                .await
                .unwrap();
        assert_eq!(ids, expected);

        // The next lease behind the last row takes the next rows, in order.
        let next = store
            .fetch_unpublished_after(100, ids.last().copied())
            .await
            .unwrap();
        let ids: Vec<i64> = next.iter().map(|record| record.id).collect();
        let expected: Vec<i64> = sqlx::query_scalar(&format!(
            "SELECT id FROM {name} ORDER BY id OFFSET 100 LIMIT 100"
        ))
        .fetch_all(&db)
        .await
        .unwrap();
        assert_eq!(ids, expected);
    }

    #[test]
    fn only_plain_identifiers_are_table_names() {
        assert!(checked_table("babelqueue_outbox").is_ok());
        for bad in ["", "9t", "a-b", "a;drop", &"x".repeat(64)] {
            assert!(
                matches!(checked_table(bad), Err(OutboxError::InvalidTable(_))),
                "{bad}"
            );
        }
    }
}
