//! The MariaDB and MySQL idempotency store (feature `mysql`), in the Java port's table layout
//! as the PostgreSQL store has it (`acemq_idempotency`: `message_id`, `state`
//! `CLAIMED`/`CONFIRMED`, `claimed_by`, `recorded_at`, `expires_at`), with MySQL's types:
//! `DATETIME(6)` in UTC for the two times.
//!
//! A claim is one statement on the fast path, an `INSERT IGNORE` of a new row. When it inserts
//! nothing, an `UPDATE` takes the row over if its deadline passed, and when that changes nothing
//! either the row is read to tell a confirmation from a live claim: duplicates are decided by
//! looking for the row, never by reading an error code. (A single `INSERT ... ON DUPLICATE KEY
//! UPDATE` cannot say which of the three happened: sqlx connects with `CLIENT_FOUND_ROWS`, under
//! which an insert and an unchanged row both count 1.) Times are the database's clock
//! (`UTC_TIMESTAMP(6)`), so instances with skewed clocks agree on leases.
//!
//! Unlike the PostgreSQL store, claims and confirms are not coalesced into batch statements:
//! each key is its own statements.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::{MySqlPool, Row};

use super::{
    CLAIMED, CONFIRMED, ClaimResult, IdempotencyStore, Lease, StoreError, check_identifier, node_id,
};

/// The table a store uses unless told otherwise, as in the Java, Go, Python and .NET ports.
pub const DEFAULT_TABLE: &str = "acemq_idempotency";

/// The migration creating the table, with `${table}` standing for its name. Run it with
/// [`MySqlIdempotencyStore::migrate`], or copy it into the migrations the application's own
/// tool runs.
pub const MIGRATION: &str = include_str!("../../migrations/mysql/idempotency_0001.sql");

/// The most characters the table's `message_id` holds, as in the Java layout.
const MAX_KEY_CHARS: usize = 255;

/// Keys in a MariaDB or MySQL table, shared by every instance that points at it. Clones share
/// the pool and the instance identity.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use acemq::idempotency::mysql::MySqlIdempotencyStore;
///
/// let pool = sqlx::MySqlPool::connect("mysql://root@127.0.0.1:3306/test").await?;
/// let store = MySqlIdempotencyStore::new(pool).claim_timeout(Duration::from_secs(120));
/// store.migrate().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MySqlIdempotencyStore {
    pool: MySqlPool,
    table: Arc<str>,
    statements: Arc<Statements>,
    node: Arc<str>,
    lease: Lease,
}

struct Statements {
    insert: String,
    take_over: String,
    lookup: String,
    confirm: String,
    release: String,
    purge: String,
}

impl Statements {
    fn for_table(table: &str) -> Self {
        let deadline = "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND";
        Self {
            // IGNORE passes over the duplicate key; the only other thing it would pass over, a
            // key too long for the column, is refused before the statement runs.
            insert: format!(
                "INSERT IGNORE INTO {table} (message_id, state, claimed_by, recorded_at, expires_at) \
                 VALUES (?, '{CLAIMED}', ?, UTC_TIMESTAMP(6), {deadline})"
            ),
            take_over: format!(
                "UPDATE {table} SET state = '{CLAIMED}', claimed_by = ?, \
                 recorded_at = UTC_TIMESTAMP(6), expires_at = {deadline} \
                 WHERE message_id = ? AND expires_at <= UTC_TIMESTAMP(6)"
            ),
            lookup: format!(
                "SELECT state, expires_at > UTC_TIMESTAMP(6) AS live FROM {table} \
                 WHERE message_id = ?"
            ),
            // VALUES() rather than MySQL 8's row alias, which MariaDB does not have.
            confirm: format!(
                "INSERT INTO {table} (message_id, state, claimed_by, recorded_at, expires_at) \
                 VALUES (?, '{CONFIRMED}', NULL, UTC_TIMESTAMP(6), {deadline}) \
                 ON DUPLICATE KEY UPDATE state = VALUES(state), claimed_by = NULL, \
                 recorded_at = VALUES(recorded_at), expires_at = VALUES(expires_at)"
            ),
            release: format!(
                "DELETE FROM {table} WHERE message_id = ? AND state = '{CLAIMED}' AND claimed_by = ?"
            ),
            purge: format!("DELETE FROM {table} WHERE expires_at <= UTC_TIMESTAMP(6)"),
        }
    }
}

impl std::fmt::Debug for MySqlIdempotencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlIdempotencyStore")
            .field("table", &self.table)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl MySqlIdempotencyStore {
    /// A store on `pool` using [`DEFAULT_TABLE`], the default claim timeout and retention.
    pub fn new(pool: MySqlPool) -> Self {
        Self {
            pool,
            table: Arc::from(DEFAULT_TABLE),
            statements: Arc::new(Statements::for_table(DEFAULT_TABLE)),
            node: Arc::from(node_id()),
            lease: Lease::default(),
        }
    }

    /// Uses the table `name` instead of [`DEFAULT_TABLE`].
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidName`] unless `name` is a plain SQL identifier (ASCII letters,
    /// digits and underscores, not starting with a digit, at most 56 bytes): a table name
    /// reaches SQL as text, since no database binds it as a parameter.
    pub fn table(mut self, name: &str) -> Result<Self, StoreError> {
        check_identifier(name)?;
        self.table = Arc::from(name);
        self.statements = Arc::new(Statements::for_table(name));
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
        super::migrate_table(&self.pool, "mysql", &self.table, &self.migration_sql()).await
    }

    fn failed(&self, operation: String, error: sqlx::Error) -> StoreError {
        StoreError::backend("mysql", operation, error)
    }

    async fn claim_key(&self, key: &str) -> Result<ClaimResult, sqlx::Error> {
        let lease = micros(self.lease.claim_timeout);
        let inserted = sqlx::query(&self.statements.insert)
            .bind(key)
            .bind(&*self.node)
            .bind(lease)
            .execute(&self.pool)
            .await?;
        if inserted.rows_affected() == 1 {
            return Ok(ClaimResult::Claimed);
        }
        // The row exists. The update locks it and reads its latest version, so of two instances
        // taking over one expired claim only the first changes it.
        let taken = sqlx::query(&self.statements.take_over)
            .bind(&*self.node)
            .bind(lease)
            .bind(key)
            .execute(&self.pool)
            .await?;
        if taken.rows_affected() == 1 {
            return Ok(ClaimResult::Claimed);
        }
        let row = sqlx::query(&self.statements.lookup)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(row) => {
                let state: String = row.try_get("state")?;
                let live: bool = row.try_get("live")?;
                if live && state == CONFIRMED {
                    ClaimResult::AlreadyConfirmed
                } else {
                    // A live claim, or a row that expired since the update looked at it:
                    // either way the next try decides.
                    ClaimResult::InProgress
                }
            }
            // Purged between the statements: tried again later rather than guessed.
            None => ClaimResult::InProgress,
        })
    }
}

/// A lease or retention in the microseconds `INTERVAL ? MICROSECOND` takes; the setters keep
/// it at least 1 ms, and a duration past `i64::MAX` µs (292,000 years) is held at that.
fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// Refuses a key the `message_id` column cannot hold, which the `INSERT IGNORE` of a claim
/// would otherwise cut short instead of refusing.
fn check_key(key: &str) -> Result<(), StoreError> {
    let length = key.chars().count();
    if length > MAX_KEY_CHARS {
        return Err(StoreError::KeyTooLong {
            length,
            limit: MAX_KEY_CHARS,
        });
    }
    Ok(())
}

impl IdempotencyStore for MySqlIdempotencyStore {
    fn claim<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ClaimResult, StoreError>> {
        Box::pin(async move {
            check_key(key)?;
            self.claim_key(key)
                .await
                .map_err(|error| self.failed(format!("claim key `{key}`"), error))
        })
    }

    fn confirm<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            check_key(key)?;
            sqlx::query(&self.statements.confirm)
                .bind(key)
                .bind(micros(self.lease.retention))
                .execute(&self.pool)
                .await
                .map_err(|error| self.failed(format!("confirm key `{key}`"), error))?;
            Ok(())
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
        assert!(ddl.contains("INDEX orders_seen_expiry (expires_at)"));
    }

    #[test]
    fn a_key_the_column_cannot_hold_is_refused() {
        assert!(check_key(&"é".repeat(255)).is_ok());
        let refused = check_key(&"é".repeat(256)).unwrap_err();
        assert!(
            matches!(
                refused,
                StoreError::KeyTooLong {
                    length: 256,
                    limit: 255
                }
            ),
            "{refused:?}"
        );
        assert!(!refused.is_transient());
    }
}
