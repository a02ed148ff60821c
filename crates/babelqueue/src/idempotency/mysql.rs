//! The MariaDB and MySQL seen-set ([`MySqlStore`], feature `mysql`): the PostgreSQL
//! [`PostgresStore`](super::PostgresStore)'s semantics and columns (the Go SDK's
//! `babelqueue_idempotency`) with MySQL's types and statements. A remember is an
//! `INSERT ... ON DUPLICATE KEY UPDATE` that leaves a live row as it is and takes over an
//! expired one, as PostgreSQL's `ON CONFLICT ... DO UPDATE ... WHERE` does; times are the
//! database's clock (`UTC_TIMESTAMP(6)`).
//!
//! Unlike the PostgreSQL stores, calls are not coalesced into batch statements: each id is its
//! own statement. There is no claiming store on MariaDB.

use std::time::Duration;

use sqlx::mysql::MySqlPool;

use super::{IdempotencyStore, SEEN_SET_TABLE, StoreFuture, checked_table};
use crate::error::{Error, Result};

/// The seen-set table on MariaDB or MySQL, as shipped in
/// `migrations/mysql/idempotency_0001_seen_set.sql`.
pub const MYSQL_SEEN_SET_MIGRATION: &str =
    include_str!("../../migrations/mysql/idempotency_0001_seen_set.sql");

fn failed<E: std::error::Error + Send + Sync + 'static>(
    operation: &'static str,
) -> impl FnOnce(E) -> Error {
    super::failed("mysql", operation)
}

/// The statements of one table.
#[derive(Debug)]
struct Statements {
    seen: String,
    remember: String,
    forget: String,
    purge: String,
}

impl Statements {
    fn for_table(table: &str) -> Self {
        // Only a row whose expiry passed is taken over. The assignments run left to right, each
        // seeing the ones before: `expires_at`, which the test reads, is assigned last.
        let expired = "expires_at IS NOT NULL AND expires_at <= UTC_TIMESTAMP(6)";
        Self {
            seen: format!(
                "SELECT 1 FROM {table} WHERE message_id = ? \
                 AND (expires_at IS NULL OR expires_at > UTC_TIMESTAMP(6))"
            ),
            remember: format!(
                "INSERT INTO {table} (message_id, created_at, expires_at) \
                 VALUES (?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND) \
                 ON DUPLICATE KEY UPDATE \
                 created_at = IF({expired}, VALUES(created_at), created_at), \
                 expires_at = IF({expired}, VALUES(expires_at), expires_at)"
            ),
            forget: format!("DELETE FROM {table} WHERE message_id = ?"),
            purge: format!("DELETE FROM {table} WHERE {expired}"),
        }
    }
}

/// The TTL in whole microseconds for `INTERVAL ? MICROSECOND`, `None` for no expiry (which
/// makes the sum, and so `expires_at`, NULL).
fn micros(ttl: Option<Duration>) -> Option<i64> {
    ttl.map(|ttl| i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX))
}

/// The Go SDK's seen-set on MariaDB or MySQL: `remember` inserts the row (taking over an
/// expired one), `seen` looks for a live row, `forget` deletes it.
///
/// ```no_run
/// # async fn demo() -> babelqueue::Result<()> {
/// use std::sync::Arc;
/// use babelqueue::idempotency::{Idempotency, MySqlStore};
///
/// let store = MySqlStore::connect("mysql://root@127.0.0.1:3306/test").await?;
/// store.migrate().await?;
/// let option = Idempotency::seen_set(Arc::new(store));
/// # let _ = option; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MySqlStore {
    pool: MySqlPool,
    table: String,
    ttl: Option<Duration>,
    statements: std::sync::Arc<Statements>,
}

impl MySqlStore {
    /// A store over an existing pool, on the table `babelqueue_idempotency`.
    pub fn new(pool: MySqlPool) -> Self {
        Self::on_table(pool, SEEN_SET_TABLE.to_owned())
    }

    /// A store over a new pool to `url`, one that gives up on an unreachable database after a
    /// few seconds, so the message goes back to the broker instead of waiting.
    ///
    /// # Errors
    /// [`Error::StoreFailed`] when the database cannot be reached.
    pub async fn connect(url: &str) -> Result<Self> {
        Ok(Self::new(super::connect(url, "mysql").await?))
    }

    fn on_table(pool: MySqlPool, table: String) -> Self {
        Self {
            statements: std::sync::Arc::new(Statements::for_table(&table)),
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
        let table = checked_table(table.into(), "MySQL idempotency table")?;
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

    /// Creates this store's table and index ([`MYSQL_SEEN_SET_MIGRATION`], under this table's
    /// name). Safe to run again.
    ///
    /// # Errors
    /// [`Error::StoreFailed`] when the database refuses or cannot be reached.
    pub async fn migrate(&self) -> Result<()> {
        super::migrate_renamed(
            &self.pool,
            "mysql",
            MYSQL_SEEN_SET_MIGRATION,
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
        let done = sqlx::query(&self.statements.purge)
            .execute(&self.pool)
            .await
            .map_err(failed("purge expired message ids"))?;
        Ok(done.rows_affected())
    }
}

impl IdempotencyStore for MySqlStore {
    fn seen<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let found = sqlx::query(&self.statements.seen)
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(failed("look up a message id"))?;
            Ok(found.is_some())
        })
    }

    fn remember<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            sqlx::query(&self.statements.remember)
                .bind(id)
                .bind(micros(self.ttl))
                .execute(&self.pool)
                .await
                .map_err(failed("remember a message id"))?;
            Ok(())
        })
    }

    fn forget<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            sqlx::query(&self.statements.forget)
                .bind(id)
                .execute(&self.pool)
                .await
                .map_err(failed("forget a message id"))?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_migration_names_the_default_table() {
        assert!(
            MYSQL_SEEN_SET_MIGRATION
                .contains("CREATE TABLE IF NOT EXISTS babelqueue_idempotency (")
        );
        let renamed = MYSQL_SEEN_SET_MIGRATION.replace(SEEN_SET_TABLE, "orders_seen");
        assert!(renamed.contains("CREATE TABLE IF NOT EXISTS orders_seen ("));
        assert!(!renamed.contains(SEEN_SET_TABLE));
    }
}
