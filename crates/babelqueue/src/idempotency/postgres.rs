//! The PostgreSQL stores, in the upstream table layouts so that consumers in other languages
//! share them: [`PostgresStore`] is the Go SDK's `idempotency-postgres` (`babelqueue_idempotency`),
//! [`PostgresClaimingStore`] the PHP SDK's `PdoStore` (`bq_idempotency`). Each claim is one
//! `INSERT ... ON CONFLICT ... RETURNING`: the returned row, not a database error code, says who
//! won.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

use super::{ClaimingStore, IdempotencyStore, StoreFuture};
use crate::error::{Error, Result};

/// The seen-set table, as shipped in `migrations/postgres/idempotency_0001_seen_set.sql`.
pub const SEEN_SET_MIGRATION: &str =
    include_str!("../../migrations/postgres/idempotency_0001_seen_set.sql");

/// The claiming table, as shipped in `migrations/postgres/idempotency_0002_claiming.sql`.
pub const CLAIMING_MIGRATION: &str =
    include_str!("../../migrations/postgres/idempotency_0002_claiming.sql");

/// The seen-set's table unless told otherwise (the Go SDK's).
pub const SEEN_SET_TABLE: &str = "babelqueue_idempotency";
/// The claiming store's table unless told otherwise (the PHP SDK's `PdoStore`).
pub const CLAIMING_TABLE: &str = "bq_idempotency";

fn failed(operation: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
    super::failed("postgres", operation)
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

/// A pool that gives up on an unreachable database after a few seconds, so the message goes
/// back to the broker instead of waiting.
async fn connect(url: &str) -> Result<PgPool> {
    PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .map_err(failed("connect"))
}

/// A table name is written into the SQL, never bound: only `[A-Za-z_][A-Za-z0-9_]*`, at most 63
/// bytes (PostgreSQL's identifier length).
fn checked_table(table: String) -> Result<String> {
    let mut chars = table.chars();
    let plain = chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && table.len() <= 63;
    if !plain {
        return Err(Error::InvalidOption {
            option: "PostgreSQL idempotency table",
            reason: format!(
                "{table:?} is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes)"
            ),
        });
    }
    Ok(table)
}

/// Runs a shipped migration for a table renamed from its default.
async fn migrate_renamed(pool: &PgPool, migration: &str, default: &str, table: &str) -> Result<()> {
    sqlx::raw_sql(&migration.replace(default, table))
        .execute(pool)
        .await
        .map_err(failed("run the idempotency migration"))?;
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
    seen: String,
    remember: String,
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
        Ok(Self::new(connect(url).await?))
    }

    fn on_table(pool: PgPool, table: String) -> Self {
        Self {
            seen: format!(
                "SELECT 1 FROM {table} WHERE message_id = $1 AND (expires_at IS NULL OR expires_at > now())"
            ),
            // A live row makes the conflict a no-op; an expired one is taken over in the same
            // statement.
            remember: format!(
                "INSERT INTO {table} (message_id, created_at, expires_at) \
                 VALUES ($1, now(), now() + $2::bigint * interval '1 millisecond') \
                 ON CONFLICT (message_id) DO UPDATE SET created_at = now(), expires_at = EXCLUDED.expires_at \
                 WHERE {table}.expires_at IS NOT NULL AND {table}.expires_at <= now() \
                 RETURNING message_id"
            ),
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
        let table = checked_table(table.into())?;
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
        migrate_renamed(&self.pool, SEEN_SET_MIGRATION, SEEN_SET_TABLE, &self.table).await
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
        Box::pin(async move {
            let row = sqlx::query(&self.seen)
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(failed("look up a message id"))?;
            Ok(row.is_some())
        })
    }

    fn remember<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            sqlx::query(&self.remember)
                .bind(id)
                .bind(millis(self.ttl))
                .fetch_optional(&self.pool)
                .await
                .map_err(failed("remember a message id"))?;
            Ok(())
        })
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
    seen: String,
    claim: String,
    remember: String,
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
        Ok(Self::new(connect(url).await?))
    }

    fn on_table(pool: PgPool, table: String) -> Self {
        Self {
            seen: format!("SELECT state FROM {table} WHERE message_id = $1"),
            // Only a claim whose expiry passed is taken over; a commit or a live claim makes the
            // conflict a no-op, and no row comes back.
            claim: format!(
                "INSERT INTO {table} (message_id, state, expires_at) \
                 VALUES ($1, 'claimed', extract(epoch from now())::bigint + $2::bigint) \
                 ON CONFLICT (message_id) DO UPDATE SET expires_at = EXCLUDED.expires_at \
                 WHERE {table}.state = 'claimed' AND {table}.expires_at IS NOT NULL \
                 AND {table}.expires_at < extract(epoch from now())::bigint \
                 RETURNING message_id"
            ),
            remember: format!(
                "INSERT INTO {table} (message_id, state, expires_at) VALUES ($1, 'seen', NULL) \
                 ON CONFLICT (message_id) DO UPDATE SET state = 'seen', expires_at = NULL"
            ),
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
        Ok(Self::on_table(self.pool, checked_table(table.into())?))
    }

    /// Creates this store's table (the shipped migration, under this table's name).
    ///
    /// # Errors
    /// [`Error::StoreFailed`] when the database refuses or cannot be reached.
    pub async fn migrate(&self) -> Result<()> {
        migrate_renamed(&self.pool, CLAIMING_MIGRATION, CLAIMING_TABLE, &self.table).await
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
        Box::pin(async move {
            let state: Option<String> = sqlx::query_scalar(&self.seen)
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(failed("look up a message id"))?;
            Ok(state.as_deref() == Some("seen"))
        })
    }

    fn remember<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(self.execute(&self.remember, id, "commit a message id"))
    }

    fn forget<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(self.execute(&self.forget, id, "forget a message id"))
    }
}

impl ClaimingStore for PostgresClaimingStore {
    fn claim<'a>(&'a self, id: &'a str, ttl: Duration) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            // Whole seconds as the PHP layout stores them, at least one.
            let seconds = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX).max(1);
            let won = sqlx::query(&self.claim)
                .bind(id)
                .bind(seconds)
                .fetch_optional(&self.pool)
                .await
                .map_err(failed("claim a message id"))?;
            Ok(won.is_some())
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
    fn table_names_are_plain_identifiers() {
        assert!(checked_table("bq_idem_2".to_owned()).is_ok());
        for bad in ["", "2x", "a-b", "a;drop", &"x".repeat(64)] {
            assert!(checked_table(bad.to_owned()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_shipped_migrations_name_the_default_tables() {
        assert!(SEEN_SET_MIGRATION.contains("CREATE TABLE IF NOT EXISTS babelqueue_idempotency ("));
        assert!(CLAIMING_MIGRATION.contains("CREATE TABLE IF NOT EXISTS bq_idempotency ("));
    }
}
