//! The PostgreSQL stores, in the upstream table layouts so that consumers in other languages
//! share them: [`PostgresStore`] is the Go SDK's `idempotency-postgres` (`babelqueue_idempotency`),
//! [`PostgresClaimingStore`] the PHP SDK's `PdoStore` (`bq_idempotency`). A claim is an
//! `INSERT ... ON CONFLICT ... RETURNING`: the returned row, not a database error code, says who
//! won. A claim lost is told apart (committed or held) by reading the ids the insert did not
//! take, in the same call, so a worker asks the claiming store twice per new id: the claim and
//! the commit.
//!
//! Lookups, claims and commits made at the same time (a worker with a concurrency above 1, or
//! several workers on one store) go to the database together, one statement for the batch
//! ([`polyq_runtime::coalesce`]): each id still gets its own answer, and each caller returns only
//! once its batch committed, so a commit still precedes the acknowledgement. Ids are written in
//! sorted order, so two batches touching the same ids cannot deadlock. A batch the database
//! refuses (an id it cannot store, such as one past the column's length) is tried again one id at
//! a time, so only that id's message fails.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use polyq_runtime::coalesce::{BatchFn, Coalescer, distinct_sorted};
use sqlx::postgres::PgPool;

use super::{Claim, ClaimingStore, IdempotencyStore, SEEN_SET_TABLE, StoreFuture, checked_table};
use crate::error::{Error, Result};

/// Ids one statement looks up, claims or commits at most.
const MAX_BATCH: usize = 256;
/// Batch statements of one kind running at once. A claiming store runs three kinds (lookups,
/// claims, commits; a worker only the last two): at most six of the pool's connections (sqlx's
/// default pool has 10), leaving room for releases and forgets.
const CONCURRENT_BATCHES: usize = 2;

/// The seen-set table, as shipped in `migrations/postgres/idempotency_0001_seen_set.sql`.
pub const SEEN_SET_MIGRATION: &str =
    include_str!("../../migrations/postgres/idempotency_0001_seen_set.sql");

/// The claiming table, as shipped in `migrations/postgres/idempotency_0002_claiming.sql`.
pub const CLAIMING_MIGRATION: &str =
    include_str!("../../migrations/postgres/idempotency_0002_claiming.sql");

/// The claiming store's table unless told otherwise (the PHP SDK's `PdoStore`).
pub const CLAIMING_TABLE: &str = "bq_idempotency";

fn failed<E: std::error::Error + Send + Sync + 'static>(
    operation: &'static str,
) -> impl FnOnce(E) -> Error {
    super::failed("postgres", operation)
}

/// The statements `sql` (one, or more for [`claim_ids`]) for a batch of items: an answer for
/// each, in order.
type Statement<I, O, S> =
    for<'a> fn(&'a PgPool, &'a S, &'a [I]) -> BoxFuture<'a, sqlx::Result<Vec<O>>>;

/// Concurrent calls of one kind, answered by one statement per batch; an item the database
/// refused alone gets its own error.
type Batched<I, O> = Coalescer<I, std::result::Result<O, Arc<sqlx::Error>>, Arc<sqlx::Error>>;

/// Batches calls into `statement` running `sql` on `pool`. When the database refuses a batch of
/// several items, each is run alone, so an item it cannot take fails only its own call; a batch
/// that never reached the database (a lost connection) fails every call in it.
fn batched<I, O, S>(pool: &PgPool, sql: Arc<S>, statement: Statement<I, O, S>) -> Batched<I, O>
where
    I: Send + Sync + 'static,
    O: Send + 'static,
    S: ?Sized + Send + Sync + 'static,
{
    let pool = pool.clone();
    let run: BatchFn<I, std::result::Result<O, Arc<sqlx::Error>>, Arc<sqlx::Error>> =
        Arc::new(move |items: Vec<I>| {
            let (pool, sql) = (pool.clone(), Arc::clone(&sql));
            Box::pin(async move {
                match statement(&pool, &sql, &items).await {
                    Ok(answers) => Ok(answers.into_iter().map(Ok).collect()),
                    Err(sqlx::Error::Database(_)) if items.len() > 1 => {
                        let mut answers = Vec::with_capacity(items.len());
                        for item in &items {
                            match statement(&pool, &sql, std::slice::from_ref(item)).await {
                                Ok(answer) => answers.extend(answer.into_iter().map(Ok)),
                                Err(error) => answers.push(Err(Arc::new(error))),
                            }
                        }
                        Ok(answers)
                    }
                    Err(error) => Err(Arc::new(error)),
                }
            })
        });
    Coalescer::new(MAX_BATCH, CONCURRENT_BATCHES, run)
}

/// Submits `item` to `batched` and waits for its answer.
async fn ask<I, O>(batched: &Batched<I, O>, item: I, operation: &'static str) -> Result<O>
where
    I: Send + 'static,
    O: Send + 'static,
{
    match batched.call(item).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(refused)) => Err(failed(operation)(refused)),
        Err(batch) => Err(failed(operation)(batch)),
    }
}

/// Which of the ids `sql` finds (it selects `message_id` for `message_id = ANY($1)`).
///
/// Planned afresh on each run, never as a prepared statement: PostgreSQL caches a generic plan
/// of a prepared statement after a few runs, and a plan made while the table was small (a
/// sequential scan) stays while the table grows, until the next `ANALYZE`, so each lookup reads
/// every row. A fresh plan sees the table's current size and takes the primary key.
fn found<'a>(
    pool: &'a PgPool,
    sql: &'a str,
    ids: &'a [String],
) -> BoxFuture<'a, sqlx::Result<Vec<bool>>> {
    Box::pin(async move {
        let found: HashSet<String> = sqlx::query_scalar(sql)
            .persistent(false)
            .bind(ids)
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect();
        Ok(ids.iter().map(|id| found.contains(id)).collect())
    })
}

/// Writes a row for each of the ids (`sql` binds them as `$1`).
fn write_ids<'a>(
    pool: &'a PgPool,
    sql: &'a str,
    ids: &'a [String],
) -> BoxFuture<'a, sqlx::Result<Vec<()>>> {
    Box::pin(async move {
        let distinct: Vec<&String> = ids.iter().collect::<BTreeSet<_>>().into_iter().collect();
        sqlx::query(sql).bind(distinct).execute(pool).await?;
        Ok(vec![(); ids.len()])
    })
}

/// Writes a row for each of the ids with its TTL in milliseconds, `None` for none (`sql` binds
/// the ids as `$1`, the TTLs as `$2`). An id twice in the batch keeps the longer TTL.
fn write_ids_with_ttl<'a>(
    pool: &'a PgPool,
    sql: &'a str,
    batch: &'a [(String, Option<i64>)],
) -> BoxFuture<'a, sqlx::Result<Vec<()>>> {
    Box::pin(async move {
        let (ids, ttls) = distinct_sorted(batch, |a, b| a.zip(b).map(|(a, b)| a.max(b)));
        sqlx::query(sql).bind(ids).bind(ttls).execute(pool).await?;
        Ok(vec![(); batch.len()])
    })
}

/// The claiming store's two statements of a claim.
struct ClaimSql {
    /// Claims the ids (`$1`) for their TTLs in seconds (`$2`), returning the `message_id` of
    /// each claim won.
    claim: String,
    /// The ids (`$1`) found committed.
    committed: String,
}

/// What one claim found; the error of the read that could not tell a lost claim's state.
type ClaimAnswer = std::result::Result<Claim, Arc<sqlx::Error>>;

/// Claims each of the ids for its TTL in seconds; then, only when some claims were lost, reads
/// which of those ids are committed, the others being held. An id twice in the batch is won at
/// most once: its other delivery finds the claim held, as it would have a moment later.
///
/// The read is a statement of its own, after the insert, rather than a part of it: one
/// statement reads the table as it was when it started, and would miss a commit the insert
/// waited for. When the read fails, the claims won stand (their handlers run, and a failure
/// releases them); only the calls whose claims were lost get its error, never a claim made
/// again, which would find its own row held.
fn claim_ids<'a>(
    pool: &'a PgPool,
    sql: &'a ClaimSql,
    batch: &'a [(String, i64)],
) -> BoxFuture<'a, sqlx::Result<Vec<ClaimAnswer>>> {
    Box::pin(async move {
        let (ids, ttls) = distinct_sorted(batch, i64::max);
        let won: HashSet<String> = sqlx::query_scalar(&sql.claim)
            .bind(&ids)
            .bind(ttls)
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect();
        let lost: Vec<String> = ids.into_iter().filter(|id| !won.contains(id)).collect();
        let (mut committed, mut unread) = (HashSet::new(), None);
        if !lost.is_empty() {
            match found(pool, &sql.committed, &lost).await {
                Ok(found) => committed.extend(
                    lost.iter()
                        .zip(found)
                        .filter_map(|(id, seen)| seen.then_some(id)),
                ),
                Err(error) => unread = Some(Arc::new(error)),
            }
        }
        let mut answered = HashSet::new();
        Ok(batch
            .iter()
            .map(|(id, _)| {
                if won.contains(id) && answered.insert(id) {
                    Ok(Claim::Won)
                } else if let Some(error) = &unread {
                    Err(Arc::clone(error))
                } else if committed.contains(id) {
                    Ok(Claim::Committed)
                } else {
                    Ok(Claim::Held)
                }
            })
            .collect())
    })
}

/// Creates both tables under their default names (the shipped migrations, in order). Safe to
/// run again. A store with another table name creates its own with its `migrate`.
///
/// # Errors
/// [`Error::StoreFailed`] when the database refuses or cannot be reached.
pub async fn migrate(pool: &PgPool) -> Result<()> {
    for migration in [SEEN_SET_MIGRATION, CLAIMING_MIGRATION] {
        sqlx::raw_sql(migration)
            .execute(pool)
            .await
            .map_err(failed("run the idempotency migration"))?;
    }
    Ok(())
}

/// Runs `sql`, binding `id` when given; how many rows it touched.
async fn execute(
    pool: &PgPool,
    sql: &str,
    id: Option<&str>,
    operation: &'static str,
) -> Result<u64> {
    let query = sqlx::query(sql);
    let query = match id {
        Some(id) => query.bind(id),
        None => query,
    };
    let done = query.execute(pool).await.map_err(failed(operation))?;
    Ok(done.rows_affected())
}

/// The TTL in whole milliseconds for SQL, `None` for no expiry.
fn millis(ttl: Option<Duration>) -> Option<i64> {
    ttl.map(|ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

/// The Go SDK's PostgreSQL seen-set: `remember` inserts the row (taking over an expired one),
/// `seen` looks for a live row, `forget` deletes it.
///
/// ```no_run
/// # async fn demo() -> babelqueue::Result<()> {
/// use babelqueue::idempotency::PostgresStore;
///
/// let store = PostgresStore::connect("postgres://postgres@127.0.0.1:5432/test").await?;
/// store.migrate().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    table: String,
    ttl: Option<Duration>,
    seen: Batched<String, bool>,
    remember: Batched<(String, Option<i64>), ()>,
    forget: String,
}

impl PostgresStore {
    /// A store over an existing pool, on the table `babelqueue_idempotency`.
    pub fn new(pool: PgPool) -> Self {
        Self::on_table(pool, SEEN_SET_TABLE.to_owned())
    }

    /// A store over a new pool to `url`.
    ///
    /// # Errors
    /// [`Error::StoreFailed`] when the database cannot be reached.
    pub async fn connect(url: &str) -> Result<Self> {
        Ok(Self::new(super::connect(url, "postgres").await?))
    }

    fn on_table(pool: PgPool, table: String) -> Self {
        // The expiry test is written so that no index serves it: on a table never analyzed the
        // planner takes `expires_at IS NULL` for rare and would scan every row through the
        // expiry index instead of looking the ids up by the primary key.
        let seen = format!(
            "SELECT message_id FROM {table} WHERE message_id = ANY($1) \
             AND COALESCE(expires_at > now(), TRUE)"
        );
        // A live row makes the conflict a no-op; an expired one is taken over in the same
        // statement.
        let remember = format!(
            "INSERT INTO {table} (message_id, created_at, expires_at) \
             SELECT id, now(), now() + ttl * interval '1 millisecond' \
             FROM unnest($1::text[], $2::bigint[]) AS batch(id, ttl) \
             ON CONFLICT (message_id) DO UPDATE SET created_at = now(), expires_at = EXCLUDED.expires_at \
             WHERE {table}.expires_at IS NOT NULL AND {table}.expires_at <= now()"
        );
        Self {
            seen: batched(&pool, Arc::from(seen), found),
            remember: batched(&pool, Arc::from(remember), write_ids_with_ttl),
            forget: format!("DELETE FROM {table} WHERE message_id = $1"),
            pool,
            table,
            ttl: None,
        }
    }

    /// Another table (same layout), e.g. one per application on a shared database.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a name that is not a plain SQL identifier.
    pub fn table(self, table: impl Into<String>) -> Result<Self> {
        let table = checked_table(table.into(), "PostgreSQL idempotency table")?;
        Ok(Self {
            ttl: self.ttl,
            ..Self::on_table(self.pool, table)
        })
    }

    /// How long a remembered id stays seen. Default none: until [`IdempotencyStore::forget`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Creates this store's table and index (the shipped migration, under this table's name).
    ///
    /// # Errors
    /// [`Error::StoreFailed`] when the database refuses or cannot be reached.
    pub async fn migrate(&self) -> Result<()> {
        super::migrate_renamed(
            &self.pool,
            "postgres",
            SEEN_SET_MIGRATION,
            SEEN_SET_TABLE,
            &self.table,
        )
        .await
    }

    /// Deletes the rows whose TTL passed (they already count as absent: this only reclaims
    /// space). How many were deleted.
    ///
    /// # Errors
    /// [`Error::StoreFailed`] when the database refuses or cannot be reached.
    pub async fn purge_expired(&self) -> Result<u64> {
        let purge = format!(
            "DELETE FROM {} WHERE expires_at IS NOT NULL AND expires_at <= now()",
            self.table
        );
        execute(&self.pool, &purge, None, "purge expired message ids").await
    }
}

impl IdempotencyStore for PostgresStore {
    fn seen<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(ask(&self.seen, id.to_owned(), "look up a message id"))
    }

    fn remember<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        let item = (id.to_owned(), millis(self.ttl));
        Box::pin(ask(&self.remember, item, "remember a message id"))
    }

    fn forget<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            execute(&self.pool, &self.forget, Some(id), "forget a message id").await?;
            Ok(())
        })
    }
}

/// The PHP SDK's PostgreSQL claiming store (its `PdoStore` layout): a row is `claimed` with an
/// expiry (epoch seconds, the database's clock) while a consumer runs the handler, and `seen`
/// once it committed.
///
/// ```no_run
/// # async fn demo() -> babelqueue::Result<()> {
/// use std::sync::Arc;
/// use babelqueue::idempotency::{Idempotency, PostgresClaimingStore};
///
/// let store = PostgresClaimingStore::connect("postgres://postgres@127.0.0.1:5432/test").await?;
/// store.migrate().await?;
/// let option = Idempotency::claiming(Arc::new(store));
/// # let _ = option; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresClaimingStore {
    pool: PgPool,
    table: String,
    seen: Batched<String, bool>,
    claim: Batched<(String, i64), ClaimAnswer>,
    remember: Batched<String, ()>,
    release: String,
    forget: String,
}

impl PostgresClaimingStore {
    /// A store over an existing pool, on the table `bq_idempotency`.
    pub fn new(pool: PgPool) -> Self {
        Self::on_table(pool, CLAIMING_TABLE.to_owned())
    }

    /// A store over a new pool to `url`.
    ///
    /// # Errors
    /// [`Error::StoreFailed`] when the database cannot be reached.
    pub async fn connect(url: &str) -> Result<Self> {
        Ok(Self::new(super::connect(url, "postgres").await?))
    }

    fn on_table(pool: PgPool, table: String) -> Self {
        let committed =
            format!("SELECT message_id FROM {table} WHERE message_id = ANY($1) AND state = 'seen'");
        // Only a claim whose expiry passed is taken over; a commit or a live claim makes the
        // conflict a no-op, and no row comes back.
        let claim = format!(
            "INSERT INTO {table} (message_id, state, expires_at) \
             SELECT id, 'claimed', extract(epoch from now())::bigint + ttl \
             FROM unnest($1::text[], $2::bigint[]) AS batch(id, ttl) \
             ON CONFLICT (message_id) DO UPDATE SET expires_at = EXCLUDED.expires_at \
             WHERE {table}.state = 'claimed' AND {table}.expires_at IS NOT NULL \
             AND {table}.expires_at < extract(epoch from now())::bigint \
             RETURNING message_id"
        );
        let remember = format!(
            "INSERT INTO {table} (message_id, state, expires_at) \
             SELECT id, 'seen', NULL FROM unnest($1::text[]) AS batch(id) \
             ON CONFLICT (message_id) DO UPDATE SET state = 'seen', expires_at = NULL"
        );
        Self {
            seen: batched(&pool, Arc::from(committed.as_str()), found),
            claim: batched(&pool, Arc::new(ClaimSql { claim, committed }), claim_ids),
            remember: batched(&pool, Arc::from(remember), write_ids),
            release: format!("DELETE FROM {table} WHERE message_id = $1 AND state = 'claimed'"),
            forget: format!("DELETE FROM {table} WHERE message_id = $1"),
            pool,
            table,
        }
    }

    /// Another table (same layout).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a name that is not a plain SQL identifier.
    pub fn table(self, table: impl Into<String>) -> Result<Self> {
        let table = checked_table(table.into(), "PostgreSQL idempotency table")?;
        Ok(Self::on_table(self.pool, table))
    }

    /// Creates this store's table (the shipped migration, under this table's name).
    ///
    /// # Errors
    /// [`Error::StoreFailed`] when the database refuses or cannot be reached.
    pub async fn migrate(&self) -> Result<()> {
        super::migrate_renamed(
            &self.pool,
            "postgres",
            CLAIMING_MIGRATION,
            CLAIMING_TABLE,
            &self.table,
        )
        .await
    }

    /// Deletes the claims whose expiry passed (a consumer died holding them). How many.
    ///
    /// # Errors
    /// [`Error::StoreFailed`] when the database refuses or cannot be reached.
    pub async fn purge_expired(&self) -> Result<u64> {
        let purge = format!(
            "DELETE FROM {} WHERE state = 'claimed' AND expires_at < extract(epoch from now())::bigint",
            self.table
        );
        execute(&self.pool, &purge, None, "purge expired claims").await
    }

    async fn execute(&self, sql: &str, id: &str, operation: &'static str) -> Result<()> {
        execute(&self.pool, sql, Some(id), operation)
            .await
            .map(drop)
    }
}

impl IdempotencyStore for PostgresClaimingStore {
    fn seen<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(ask(&self.seen, id.to_owned(), "look up a message id"))
    }

    fn remember<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(ask(&self.remember, id.to_owned(), "commit a message id"))
    }

    fn forget<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(self.execute(&self.forget, id, "forget a message id"))
    }
}

impl ClaimingStore for PostgresClaimingStore {
    fn claim<'a>(&'a self, id: &'a str, ttl: Duration) -> StoreFuture<'a, bool> {
        Box::pin(async move { Ok(self.try_claim(id, ttl).await? == Claim::Won) })
    }

    fn try_claim<'a>(&'a self, id: &'a str, ttl: Duration) -> StoreFuture<'a, Claim> {
        // Whole seconds as the PHP layout stores them, at least one.
        let seconds = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX).max(1);
        Box::pin(async move {
            ask(&self.claim, (id.to_owned(), seconds), "claim a message id")
                .await?
                .map_err(failed("look up a lost claim"))
        })
    }

    fn release<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(self.execute(&self.release, id, "release a claim"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_migrations_name_the_default_tables() {
        assert!(SEEN_SET_MIGRATION.contains("CREATE TABLE IF NOT EXISTS babelqueue_idempotency ("));
        assert!(CLAIMING_MIGRATION.contains("CREATE TABLE IF NOT EXISTS bq_idempotency ("));
    }
}
