//! Idempotent consumers: a store that remembers which messages were handled, so a duplicate
//! delivery (normal under at-least-once delivery) does its work once.
//!
//! The consumer ([`ConsumerBuilder::idempotent`](crate::ConsumerBuilder::idempotent)) claims
//! the message's key (its envelope id unless the application gives another) before the handler
//! runs, confirms it after the handler succeeded and releases it after a failure, so the retry
//! can claim it again. A claim is a lease: it expires after the store's claim timeout (default
//! [`DEFAULT_CLAIM_TIMEOUT`], 5 minutes), so a handler that crashed while holding it does not
//! stall the message for ever. A confirmation is remembered for the retention (default
//! [`DEFAULT_RETENTION`], 24 hours): the window within which duplicates are expected.
//!
//! What a claim finds ([`ClaimResult`]):
//! - [`ClaimResult::Claimed`]: the handler runs;
//! - [`ClaimResult::AlreadyConfirmed`]: a duplicate, acknowledged without running the handler;
//! - [`ClaimResult::InProgress`]: another instance holds a live lease. The consumer waits about
//!   a second ([`IN_PROGRESS_WAIT`]) and republishes the message to its own queue with the
//!   envelope unchanged: no attempt is consumed and it is never requeued, because a quorum
//!   queue counts requeues against its delivery limit.
//!
//! A store that cannot be reached fails the delivery the way a handler error does (the retry
//! policy, then `Q.dlq`): it is never acknowledged as handled.
//!
//! Stores: [`InMemoryIdempotencyStore`] (one process; the embedded default and the test of the
//! semantics), [`postgres::PostgresIdempotencyStore`] (feature `postgres`, the Java port's
//! table layout), [`mysql::MySqlIdempotencyStore`] (feature `mysql`, the same layout on MariaDB
//! or MySQL) and [`redis::RedisIdempotencyStore`] (feature `redis`). A store only deduplicates
//! the delivery: work written to another database is not covered by it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::Envelope;
use crate::runtime::interceptor::BoxError;

/// How long a claim nobody confirmed stays its holder's, by default: long enough for a slow
/// handler, short enough that a crash is not a permanent stall (as in every AceMQ port).
pub const DEFAULT_CLAIM_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// How long a confirmation is remembered, by default; a duplicate arriving later runs again.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// How long a consumer waits before republishing a message another instance is working on.
pub const IN_PROGRESS_WAIT: Duration = Duration::from_secs(1);

/// How long a store's claims and confirmations hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease {
    pub(crate) claim_timeout: Duration,
    pub(crate) retention: Duration,
}

impl Default for Lease {
    fn default() -> Self {
        Self {
            claim_timeout: DEFAULT_CLAIM_TIMEOUT,
            retention: DEFAULT_RETENTION,
        }
    }
}

/// The `claim_timeout` and `retention` setters every store has, on a `lease: Lease` field.
/// Defined before the store modules, which see it by textual scope.
macro_rules! lease_setters {
    () => {
        /// How long a claim nobody confirmed stays its holder's (at least 1 ms). Default
        /// [`DEFAULT_CLAIM_TIMEOUT`](crate::idempotency::DEFAULT_CLAIM_TIMEOUT); it must
        /// exceed the slowest handler, or a second consumer takes the message over while the
        /// first still works on it.
        pub fn claim_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.lease.claim_timeout = timeout.max(std::time::Duration::from_millis(1));
            self
        }

        /// How long a confirmation is remembered (at least 1 ms). Default
        /// [`DEFAULT_RETENTION`](crate::idempotency::DEFAULT_RETENTION).
        pub fn retention(mut self, retention: std::time::Duration) -> Self {
            self.lease.retention = retention.max(std::time::Duration::from_millis(1));
            self
        }
    };
}
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;

/// The `state` of a claimed row (and the start of a claimed Redis value), as the Java port's
/// table spells it: the stores of every port on one table must agree on it.
pub const CLAIMED: &str = "CLAIMED";
/// The `state` of a confirmed row (and a confirmed Redis value), as the Java port's table
/// spells it.
pub const CONFIRMED: &str = "CONFIRMED";

/// What a claim found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimResult {
    /// The caller holds the key now and runs the handler.
    Claimed,
    /// The work is done: the delivery is a duplicate, acknowledged without the handler.
    AlreadyConfirmed,
    /// Someone holds a live claim and has not confirmed it: neither handled nor acknowledged,
    /// but tried again later.
    InProgress,
}

/// A store the idempotent consumer claims, confirms and releases keys in.
///
/// Implementations must make [`IdempotencyStore::claim`] atomic across every process that
/// shares the store: exactly one caller holds a live claim on a key at a time. The futures are
/// boxed so that a consumer can hold any store as `Arc<dyn IdempotencyStore>`.
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Claims `key` for the claim timeout, unless it is confirmed or claimed by someone whose
    /// lease is still live. An expired claim (its holder crashed) is taken over.
    fn claim<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ClaimResult, StoreError>>;

    /// Records that the work for `key` is done, for the retention; recorded even when the
    /// claim expired or was purged meanwhile, since the work happened either way.
    fn confirm<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Gives up this store's own live claim on `key` so a retry can claim it; never removes a
    /// confirmation or a claim another instance took over.
    fn release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Removes the rows nobody is bound by any more (expired claims and confirmations past
    /// their retention), returning how many. Nothing on the message path deletes rows: run it
    /// on a schedule.
    fn purge_expired(&self) -> BoxFuture<'_, Result<u64, StoreError>>;
}

/// One store shared by several consumers (or by the application and a consumer) as an `Arc`.
impl<S: IdempotencyStore + ?Sized> IdempotencyStore for Arc<S> {
    fn claim<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ClaimResult, StoreError>> {
        (**self).claim(key)
    }

    fn confirm<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).confirm(key)
    }

    fn release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).release(key)
    }

    fn purge_expired(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        (**self).purge_expired()
    }
}

/// A store that could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store's backend failed or could not be reached; the delivery is tried again.
    #[error("the {store} idempotency store could not {operation}; check that it is reachable")]
    Backend {
        /// `postgres`, `mysql` or `redis`.
        store: &'static str,
        /// What was asked, such as `claim key \`order-17\``.
        operation: String,
        /// The backend's error.
        #[source]
        source: BoxError,
    },
    /// A table (or key prefix) name the store refuses.
    #[error("`{name}` cannot name an idempotency table: {reason}")]
    InvalidName {
        /// The refused name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A key longer than the table's `message_id` column holds (255 characters): derive a
    /// shorter key, such as a hash of the long one.
    #[error("a key of {length} characters is longer than the {limit} an idempotency table holds")]
    KeyTooLong {
        /// The key's length in characters.
        length: usize,
        /// The most the column holds.
        limit: usize,
    },
}

impl StoreError {
    /// The error of the `store` backend that could not do `operation`.
    #[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
    fn backend(
        store: &'static str,
        operation: String,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Backend {
            store,
            operation,
            source: Box::new(error),
        }
    }

    /// Whether trying again later may succeed: `true` for a backend failure, `false` for a
    /// refused name or key.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Backend { .. })
    }
}

/// Refuses anything but a plain SQL identifier, the one form every SQL store can splice into
/// its statements.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn check_identifier(name: &str) -> Result<(), StoreError> {
    match identifier_problem(name) {
        Some(reason) => Err(StoreError::InvalidName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// What keeps `name` from being a plain SQL identifier a store may splice into its
/// statements, if anything.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn identifier_problem(name: &str) -> Option<&'static str> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Some("it is empty"),
        Some(first) if !(first.is_ascii_alphabetic() || first == '_') => {
            return Some("it must start with an ASCII letter or an underscore");
        }
        Some(_) => {}
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Some("only ASCII letters, digits and underscores are allowed");
    }
    // Leaves room for the index name `<table>_expiry` within PostgreSQL's 63 bytes (MySQL's
    // limit, 64, is looser).
    if name.len() > 56 {
        return Some("it must be at most 56 bytes long");
    }
    None
}

/// Runs the migration `sql` creating `table` of the SQL `store`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn migrate_table<D: sqlx::Database>(
    pool: &sqlx::Pool<D>,
    store: &'static str,
    table: &str,
    sql: &str,
) -> Result<(), StoreError>
where
    for<'c> &'c mut D::Connection: sqlx::Executor<'c, Database = D>,
{
    sqlx::raw_sql(sql).execute(pool).await.map_err(|error| {
        StoreError::backend(store, format!("create the table `{table}`"), error)
    })?;
    Ok(())
}

/// How the consumer derives the key from a message, when not by its envelope id.
pub type KeyFn = Arc<dyn Fn(&Envelope) -> String + Send + Sync>;

/// A fresh identity for one store instance, so it releases only its own claims.
pub(crate) fn node_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Keys remembered in this process: the embedded default, and the test of the semantics.
/// Useless across several instances (a redelivery to another instance finds nothing), for which
/// the PostgreSQL, MariaDB or Redis store is meant. Clones share the same keys.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), acemq::idempotency::StoreError> {
/// use acemq::idempotency::{ClaimResult, IdempotencyStore, InMemoryIdempotencyStore};
///
/// let store = InMemoryIdempotencyStore::new();
/// assert_eq!(store.claim("m-1").await?, ClaimResult::Claimed);
/// assert_eq!(store.claim("m-1").await?, ClaimResult::InProgress);
/// store.confirm("m-1").await?;
/// assert_eq!(store.claim("m-1").await?, ClaimResult::AlreadyConfirmed);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct InMemoryIdempotencyStore {
    rows: Arc<Mutex<HashMap<String, Row>>>,
    node: Arc<str>,
    lease: Lease,
}

struct Row {
    confirmed: bool,
    holder: Option<Arc<str>>,
    expires_at: Instant,
}

impl std::fmt::Debug for InMemoryIdempotencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryIdempotencyStore")
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Default for InMemoryIdempotencyStore {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryIdempotencyStore {
    /// An empty store with the default claim timeout and retention.
    pub fn new() -> Self {
        Self {
            rows: Arc::default(),
            node: Arc::from(node_id()),
            lease: Lease::default(),
        }
    }

    lease_setters!();

    /// Rows held now, expired ones included.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Row>> {
        // A panic while holding the lock cannot leave a row half written: every update is one
        // insert or remove.
        self.rows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn claim_now(&self, key: &str) -> ClaimResult {
        let now = Instant::now();
        let mut rows = self.lock();
        match rows.get(key) {
            Some(row) if row.expires_at > now => {
                if row.confirmed {
                    ClaimResult::AlreadyConfirmed
                } else {
                    ClaimResult::InProgress
                }
            }
            _ => {
                rows.insert(
                    key.to_owned(),
                    Row {
                        confirmed: false,
                        holder: Some(Arc::clone(&self.node)),
                        expires_at: now + self.lease.claim_timeout,
                    },
                );
                ClaimResult::Claimed
            }
        }
    }
}

impl IdempotencyStore for InMemoryIdempotencyStore {
    fn claim<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ClaimResult, StoreError>> {
        Box::pin(async move { Ok(self.claim_now(key)) })
    }

    fn confirm<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.lock().insert(
                key.to_owned(),
                Row {
                    confirmed: true,
                    holder: None,
                    expires_at: Instant::now() + self.lease.retention,
                },
            );
            Ok(())
        })
    }

    fn release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut rows = self.lock();
            let own_claim = rows
                .get(key)
                .is_some_and(|row| !row.confirmed && row.holder.as_deref() == Some(&*self.node));
            if own_claim {
                rows.remove(key);
            }
            Ok(())
        })
    }

    fn purge_expired(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            let now = Instant::now();
            let mut rows = self.lock();
            let before = rows.len();
            rows.retain(|_, row| row.expires_at > now);
            Ok(u64::try_from(before - rows.len()).unwrap_or(u64::MAX))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(any(feature = "postgres", feature = "mysql"))]
    #[test]
    fn only_plain_identifiers_name_a_table() {
        assert!(check_identifier("acemq_idempotency").is_ok());
        assert!(check_identifier("_t1").is_ok());
        for bad in ["", "1t", "a-b", "a.b", "t; DROP TABLE x", &"t".repeat(57)] {
            assert!(
                matches!(check_identifier(bad), Err(StoreError::InvalidName { .. })),
                "{bad:?} was accepted"
            );
        }
    }

    #[tokio::test]
    async fn claim_confirm_and_release_follow_the_reference() {
        let store = InMemoryIdempotencyStore::new();
        assert_eq!(store.claim("a").await.unwrap(), ClaimResult::Claimed);
        assert_eq!(store.claim("a").await.unwrap(), ClaimResult::InProgress);
        store.release("a").await.unwrap();
        assert_eq!(store.claim("a").await.unwrap(), ClaimResult::Claimed);
        store.confirm("a").await.unwrap();
        assert_eq!(
            store.claim("a").await.unwrap(),
            ClaimResult::AlreadyConfirmed
        );
        store.release("a").await.unwrap();
        assert_eq!(
            store.claim("a").await.unwrap(),
            ClaimResult::AlreadyConfirmed,
            "a release never undoes a confirmation"
        );
    }

    #[tokio::test]
    async fn another_instance_cannot_release_a_claim_it_does_not_hold() {
        let mine = InMemoryIdempotencyStore::new();
        let theirs = InMemoryIdempotencyStore {
            node: Arc::from(node_id()),
            ..mine.clone()
        };
        assert_eq!(mine.claim("b").await.unwrap(), ClaimResult::Claimed);
        theirs.release("b").await.unwrap();
        assert_eq!(theirs.claim("b").await.unwrap(), ClaimResult::InProgress);
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over_and_purged() {
        let store = InMemoryIdempotencyStore::new().claim_timeout(Duration::from_millis(1));
        assert_eq!(store.claim("c").await.unwrap(), ClaimResult::Claimed);
        assert_eq!(store.claim("d").await.unwrap(), ClaimResult::Claimed);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(store.claim("c").await.unwrap(), ClaimResult::Claimed);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(store.purge_expired().await.unwrap(), 2);
        assert!(store.is_empty());
    }

    #[tokio::test]
    async fn a_confirmation_is_remembered_for_its_retention_only() {
        let store = InMemoryIdempotencyStore::new().retention(Duration::from_millis(1));
        assert_eq!(store.claim("e").await.unwrap(), ClaimResult::Claimed);
        store.confirm("e").await.unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(store.claim("e").await.unwrap(), ClaimResult::Claimed);
    }
}
