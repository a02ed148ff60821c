//! The PostgreSQL idempotency store (feature `postgres`), in the Java port's table layout
//! (`acemq_idempotency`: `message_id`, `state` `CLAIMED`/`CONFIRMED`, `claimed_by`,
//! `recorded_at`, `expires_at`), so Rust and Java workers on one queue can share the table.
//!
//! A claim is one statement on the fast path: an insert whose conflict takes over only an
//! expired row. When it returns nothing, the row is read to tell a confirmation from a live
//! claim: duplicates are decided by looking for the row, never by reading an error code.
//! Times are the database's clock (`now()`), so instances with skewed clocks agree on leases.
//!
//! Claims and confirms made at the same time (a consumer with a concurrency above 1, or
//! several consumers on one store) go to the database together, one statement for the batch
//! ([`polyq_runtime::coalesce`]): each key still gets its own answer, and each caller returns
//! only once its batch committed, so a confirm still precedes the acknowledgement. Keys are
//! written in sorted order, so two batches touching the same keys cannot deadlock.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use polyq_runtime::coalesce::{BatchFn, Coalescer, distinct_sorted};
use sqlx::{PgPool, Row};

use super::{
    CLAIMED, CONFIRMED, ClaimResult, IdempotencyStore, Lease, StoreError, check_identifier, node_id,
};

/// Keys one statement claims or confirms at most.
const MAX_BATCH: usize = 256;
/// Batch statements of one kind running at once: with claims and confirms, twice this many of
/// the pool's connections (sqlx's default pool has 10).
const CONCURRENT_BATCHES: usize = 3;

/// The table a store uses unless told otherwise, as in the Java, Go, Python and .NET ports.
pub const DEFAULT_TABLE: &str = "acemq_idempotency";

/// The migration creating the table, with `${table}` standing for its name. Run it with
/// [`PostgresIdempotencyStore::migrate`], or copy it into the migrations the application's own
/// tool runs.
pub const MIGRATION: &str = include_str!("../../migrations/postgres/idempotency_0001.sql");

/// Keys in a PostgreSQL table, shared by every instance (and every AceMQ port) that points at
/// it. Clones share the pool and the instance identity.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use acemq::idempotency::postgres::PostgresIdempotencyStore;
///
/// let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1:5432/test").await?;
/// let store = PostgresIdempotencyStore::new(pool).claim_timeout(Duration::from_secs(120));
/// store.migrate().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresIdempotencyStore {
    pool: PgPool,
    table: Arc<str>,
    statements: Arc<Statements>,
    node: Arc<str>,
    lease: Lease,
    claims: Coalescer<(String, f64), ClaimResult, Arc<sqlx::Error>>,
    confirms: Coalescer<(String, f64), (), Arc<sqlx::Error>>,
}

struct Statements {
    claim: String,
    lookup: String,
    confirm: String,
    release: String,
    purge: String,
}

impl Statements {
    fn for_table(table: &str) -> Self {
        // One row per key of the batch, each with its own lease or retention in seconds.
        let upsert = |state: &str, holder: &str, guard: &str| {
            format!(
                "INSERT INTO {table} AS held (message_id, state, claimed_by, recorded_at, expires_at) \
                 SELECT key, '{state}', {holder}, now(), now() + make_interval(secs => ttl) \
                 FROM unnest($1::varchar[], $2::float8[]) AS batch(key, ttl) \
                 ON CONFLICT (message_id) DO UPDATE SET state = EXCLUDED.state, \
                 claimed_by = EXCLUDED.claimed_by, recorded_at = EXCLUDED.recorded_at, \
                 expires_at = EXCLUDED.expires_at{guard}"
            )
        };
        Self {
            claim: upsert(
                CLAIMED,
                "$3",
                " WHERE held.expires_at <= now() RETURNING message_id",
            ),
            lookup: format!(
                "SELECT message_id, state, expires_at > now() AS live FROM {table} \
                 WHERE message_id = ANY($1)"
            ),
            confirm: upsert(CONFIRMED, "NULL", ""),
            release: format!(
                "DELETE FROM {table} WHERE message_id = $1 AND state = '{CLAIMED}' AND claimed_by = $2"
            ),
            purge: format!("DELETE FROM {table} WHERE expires_at <= now()"),
        }
    }
}

impl std::fmt::Debug for PostgresIdempotencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresIdempotencyStore")
            .field("table", &self.table)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl PostgresIdempotencyStore {
    /// A store on `pool` using [`DEFAULT_TABLE`], the default claim timeout and retention.
    pub fn new(pool: PgPool) -> Self {
        let statements = Arc::new(Statements::for_table(DEFAULT_TABLE));
        let node: Arc<str> = Arc::from(node_id());
        Self {
            claims: claims(&pool, &statements, &node),
            confirms: confirms(&pool, &statements),
            pool,
            table: Arc::from(DEFAULT_TABLE),
            statements,
            node,
            lease: Lease::default(),
        }
    }

    /// Uses the table `name` instead of [`DEFAULT_TABLE`].
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidName`] unless `name` is a plain SQL identifier (ASCII letters,
    /// digits and underscores, not starting with a digit, at most 63 bytes): a table name
    /// reaches SQL as text, since no database binds it as a parameter.
    pub fn table(mut self, name: &str) -> Result<Self, StoreError> {
        check_identifier(name)?;
        self.table = Arc::from(name);
        self.statements = Arc::new(Statements::for_table(name));
        self.claims = claims(&self.pool, &self.statements, &self.node);
        self.confirms = confirms(&self.pool, &self.statements);
        Ok(self)
    }

    lease_setters!();

    /// The table's name.
    pub fn table_name(&self) -> &str {
        &self.table
    }

    /// The migration for this store's table: [`MIGRATION`] with its name filled in.
    pub fn migration_sql(&self) -> String {
        MIGRATION.replace("${table}", &self.table)
    }

    /// Creates the table and its index unless they exist ([`MIGRATION`]).
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] when the database refuses or cannot be reached.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        super::migrate_table(&self.pool, "postgres", &self.table, &self.migration_sql()).await
    }

    fn failed(&self, operation: String, error: sqlx::Error) -> StoreError {
        StoreError::backend("postgres", operation, error)
    }

    fn batch_failed(
        &self,
        operation: String,
        error: polyq_runtime::coalesce::CoalesceError<Arc<sqlx::Error>>,
    ) -> StoreError {
        StoreError::backend("postgres", operation, error)
    }
}

/// Claims a batch of keys: one insert for all of them, then one read of the rows it did not
/// take, for the keys it did not win.
fn claims(
    pool: &PgPool,
    statements: &Arc<Statements>,
    node: &Arc<str>,
) -> Coalescer<(String, f64), ClaimResult, Arc<sqlx::Error>> {
    let (pool, statements, node) = (pool.clone(), Arc::clone(statements), Arc::clone(node));
    let run: BatchFn<(String, f64), ClaimResult, Arc<sqlx::Error>> =
        Arc::new(move |batch: Vec<(String, f64)>| {
            let (pool, statements, node) =
                (pool.clone(), Arc::clone(&statements), Arc::clone(&node));
            Box::pin(async move {
                claim_batch(&pool, &statements, &node, batch)
                    .await
                    .map_err(Arc::new)
            })
        });
    Coalescer::new(MAX_BATCH, CONCURRENT_BATCHES, run)
}

async fn claim_batch(
    pool: &PgPool,
    statements: &Statements,
    node: &str,
    batch: Vec<(String, f64)>,
) -> Result<Vec<ClaimResult>, sqlx::Error> {
    let (keys, ttls) = distinct_sorted(&batch, f64::max);
    let won: Vec<String> = sqlx::query_scalar(&statements.claim)
        .bind(&keys)
        .bind(&ttls)
        .bind(node)
        .fetch_all(pool)
        .await?;
    let mut found: HashMap<String, ClaimResult> = won
        .into_iter()
        .map(|key| (key, ClaimResult::Claimed))
        .collect();
    let lost: Vec<&String> = keys
        .iter()
        .filter(|key| !found.contains_key(*key))
        .collect();
    if !lost.is_empty() {
        let rows = sqlx::query(&statements.lookup)
            .bind(&lost)
            .fetch_all(pool)
            .await?;
        for row in rows {
            let state: String = row.try_get("state")?;
            let live: bool = row.try_get("live")?;
            let result = if live && state == CONFIRMED {
                ClaimResult::AlreadyConfirmed
            } else {
                // A live claim, or a row that expired since the insert looked at it: either
                // way the next try decides.
                ClaimResult::InProgress
            };
            found.insert(row.try_get("message_id")?, result);
        }
    }
    // A key purged between the two statements is tried again later rather than guessed; a key
    // twice in one batch is claimed once, and its second delivery finds the claim live.
    let mut answered = std::collections::HashSet::new();
    Ok(batch
        .iter()
        .map(|(key, _)| {
            let result = found.get(key).copied().unwrap_or(ClaimResult::InProgress);
            match (result, answered.insert(key)) {
                (ClaimResult::Claimed, false) => ClaimResult::InProgress,
                (result, _) => result,
            }
        })
        .collect())
}

/// Confirms a batch of keys in one insert.
fn confirms(
    pool: &PgPool,
    statements: &Arc<Statements>,
) -> Coalescer<(String, f64), (), Arc<sqlx::Error>> {
    let (pool, statements) = (pool.clone(), Arc::clone(statements));
    let run: BatchFn<(String, f64), (), Arc<sqlx::Error>> =
        Arc::new(move |batch: Vec<(String, f64)>| {
            let (pool, statements) = (pool.clone(), Arc::clone(&statements));
            Box::pin(async move {
                let (keys, ttls) = distinct_sorted(&batch, f64::max);
                sqlx::query(&statements.confirm)
                    .bind(&keys)
                    .bind(&ttls)
                    .execute(&pool)
                    .await
                    .map_err(Arc::new)?;
                Ok(vec![(); batch.len()])
            })
        });
    Coalescer::new(MAX_BATCH, CONCURRENT_BATCHES, run)
}

impl IdempotencyStore for PostgresIdempotencyStore {
    fn claim<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ClaimResult, StoreError>> {
        Box::pin(async move {
            self.claims
                .call((key.to_owned(), self.lease.claim_timeout.as_secs_f64()))
                .await
                .map_err(|error| self.batch_failed(format!("claim key `{key}`"), error))
        })
    }

    fn confirm<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.confirms
                .call((key.to_owned(), self.lease.retention.as_secs_f64()))
                .await
                .map_err(|error| self.batch_failed(format!("confirm key `{key}`"), error))
        })
    }

    fn release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query(&self.statements.release)
                .bind(key)
                .bind(&*self.node)
                .execute(&self.pool)
                .await
                .map_err(|error| self.failed(format!("release key `{key}`"), error))?;
            Ok(())
        })
    }

    fn purge_expired(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            let done = sqlx::query(&self.statements.purge)
                .execute(&self.pool)
                .await
                .map_err(|error| {
                    self.failed(format!("purge expired rows of `{}`", self.table), error)
                })?;
            Ok(done.rows_affected())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migration_names_the_table_everywhere() {
        let ddl = MIGRATION.replace("${table}", "orders_seen");
        assert!(!ddl.contains("${table}"));
        assert!(ddl.contains("CREATE TABLE IF NOT EXISTS orders_seen ("));
        assert!(ddl.contains("orders_seen_expiry ON orders_seen (expires_at)"));
    }
}
