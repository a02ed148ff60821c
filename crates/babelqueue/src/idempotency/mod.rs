//! Consumer idempotency (ADR-0022): dedupe keyed on `meta.id` verbatim, under at-least-once
//! delivery.
//!
//! Two contracts, as upstream ships them:
//! - [`IdempotencyStore`], the seen-set: post-success dedupe. Not exactly-once delivery and not
//!   an in-flight lock: two concurrent deliveries of one id may both run; a redelivery after a
//!   success is skipped. [`run_once`] is the wrapper; [`InMemoryStore`] the embedded default,
//!   `RedisStore` (feature `redis`), `PostgresStore` (feature `postgres`) and `MySqlStore`
//!   (feature `mysql`, MariaDB or MySQL) the shared ones.
//! - [`ClaimingStore`], the seen-set plus an atomic claim (PHP's `ClaimingStore`): of concurrent
//!   deliveries of one id exactly one runs; the others wait until the winner commits and are then
//!   skipped. [`run_claimed`] is the wrapper; `RedisClaimingStore` and `PostgresClaimingStore`
//!   the shared ones (none on MariaDB).
//!
//! The worker takes either as an option ([`Idempotency`], given to
//! [`Worker::idempotent`](crate::worker::Worker::idempotent) for every URN or to
//! [`Worker::idempotent_for`](crate::worker::Worker::idempotent_for) for one). A store that cannot
//! answer a lookup or a claim fails the delivery as a handler error would: retried with an
//! attempt counted, then dead-lettered, never acknowledged and never dropped for it (as
//! upstream, and as AceMQ's idempotent consumer). A claim another consumer holds past the wait
//! hands the message back untouched, no attempt counted. A failed remember after a success is
//! logged and the message acknowledged: the documented at-least-once window.

mod claiming;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};

#[cfg(feature = "mysql")]
pub use self::mysql::{MYSQL_SEEN_SET_MIGRATION, MySqlStore};
#[cfg(feature = "postgres")]
pub use self::postgres::{
    CLAIMING_MIGRATION, CLAIMING_TABLE, PostgresClaimingStore, PostgresStore, SEEN_SET_MIGRATION,
    migrate,
};
#[cfg(feature = "redis")]
pub use self::redis::{RedisClaimingStore, RedisStore};
pub use claiming::{Claim, ClaimingStore, InMemoryClaimingStore, run_claimed};

/// The seen-set's table unless told otherwise (the Go SDK's), on PostgreSQL and MariaDB alike.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub const SEEN_SET_TABLE: &str = "babelqueue_idempotency";

/// The future a store method returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// A record of message ids already processed (the seen-set).
pub trait IdempotencyStore: Send + Sync {
    /// Whether `id` was processed (remembered).
    ///
    /// # Errors
    /// [`Error::StoreFailed`] (or [`Error::Store`]) when the store cannot answer; the message is
    /// then tried again.
    fn seen<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool>;
    /// Records `id` as processed.
    ///
    /// # Errors
    /// When the store cannot record it.
    fn remember<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()>;
    /// Drops `id` (manual replay, expiry).
    ///
    /// # Errors
    /// When the store cannot drop it.
    fn forget<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()>;
}

/// A process-local, thread-safe store for tests and single-process consumers.
#[derive(Debug, Default)]
pub struct InMemoryStore {
    ids: Mutex<HashSet<String>>,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl IdempotencyStore for InMemoryStore {
    fn seen<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        let seen = self.ids().contains(id);
        Box::pin(std::future::ready(Ok(seen)))
    }

    fn remember<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        self.ids().insert(id.to_owned());
        Box::pin(std::future::ready(Ok(())))
    }

    fn forget<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        self.ids().remove(id);
        Box::pin(std::future::ready(Ok(())))
    }
}

/// What the guard decided for one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect<T> {
    /// The handler ran and succeeded.
    Ran(T),
    /// The id was already processed: the handler did not run; ack the delivery.
    Skipped,
}

/// Why a guarded handler did not succeed.
#[derive(Debug)]
pub enum Refusal<E> {
    /// The store could not answer before the handler ran: the handler did not run, and the
    /// delivery fails as a handler error would (retried with an attempt counted, then
    /// dead-lettered), never acknowledged, never dropped, as the SDKs' wrappers return the
    /// lookup error and AceMQ's idempotent consumer fails the delivery.
    Store(Error),
    /// Another consumer held the claim on this id for longer than the wait (claiming stores
    /// only): the handler did not run; the message is delivered again without counting an
    /// attempt, since nothing failed (AceMQ's `IN_PROGRESS`).
    InProgress(Error),
    /// The handler ran and failed: the id stays unmarked, so retries and dead-lettering apply.
    Handler(E),
}

/// No usable id (`None` or empty) cannot be deduped: such a message always runs (fail open).
pub(crate) fn usable(meta_id: Option<&str>) -> Option<&str> {
    meta_id.filter(|id| !id.is_empty())
}

/// The first half of the seen-set guard, for runtimes whose handler runs elsewhere: whether to
/// run the handler for `meta_id`. No usable id always runs.
///
/// # Errors
/// The store's error: retry the message.
pub async fn should_run(store: &dyn IdempotencyStore, meta_id: Option<&str>) -> Result<bool> {
    match usable(meta_id) {
        None => Ok(true),
        Some(id) => Ok(!store.seen(id).await?),
    }
}

/// The second half of the seen-set guard, after the handler succeeded: remember `meta_id`. Best
/// effort: a failed remember is logged, not returned (it is the documented at-least-once window).
pub async fn record_success(store: &dyn IdempotencyStore, meta_id: Option<&str>) {
    if let Some(id) = usable(meta_id)
        && let Err(error) = store.remember(id).await
    {
        tracing::warn!(meta_id = id, error = %polyq_amqp::error_chain(&error), "could not remember a processed message id; a redelivery would run it again");
    }
}

/// Runs `handler` unless `meta_id` was already processed; remembers the id only on success.
///
/// # Errors
/// [`Refusal::Store`] when the lookup failed (the handler did not run: retry), or
/// [`Refusal::Handler`] with the handler's own error (the id stays unmarked).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use babelqueue::idempotency::{Effect, InMemoryStore, run_once};
///
/// let store = InMemoryStore::new();
/// let first = run_once(&store, Some("id-A"), async { Ok::<_, String>(1) }).await.unwrap();
/// let second = run_once(&store, Some("id-A"), async { Ok::<_, String>(2) }).await.unwrap();
/// assert_eq!((first, second), (Effect::Ran(1), Effect::Skipped));
/// # }
/// ```
pub async fn run_once<T, E>(
    store: &dyn IdempotencyStore,
    meta_id: Option<&str>,
    handler: impl Future<Output = std::result::Result<T, E>>,
) -> std::result::Result<Effect<T>, Refusal<E>> {
    if !should_run(store, meta_id).await.map_err(Refusal::Store)? {
        return Ok(Effect::Skipped);
    }
    let value = handler.await.map_err(Refusal::Handler)?;
    record_success(store, meta_id).await;
    Ok(Effect::Ran(value))
}

/// The idempotency option of a worker: which store, and which of the two contracts.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use babelqueue::idempotency::{Idempotency, InMemoryClaimingStore, InMemoryStore};
///
/// let seen_set = Idempotency::seen_set(Arc::new(InMemoryStore::new()));
/// let claiming = Idempotency::claiming(Arc::new(InMemoryClaimingStore::new()))
///     .claim_ttl(Duration::from_secs(600))
///     .max_wait(Duration::from_secs(30));
/// # let _ = (seen_set, claiming);
/// ```
#[derive(Clone)]
pub struct Idempotency {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    SeenSet(Arc<dyn IdempotencyStore>),
    Claiming {
        store: Arc<dyn ClaimingStore>,
        claim_ttl: Duration,
        max_wait: Duration,
    },
}

impl std::fmt::Debug for Idempotency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::SeenSet(_) => f.write_str("Idempotency::SeenSet"),
            Kind::Claiming {
                claim_ttl,
                max_wait,
                ..
            } => f
                .debug_struct("Idempotency::Claiming")
                .field("claim_ttl", claim_ttl)
                .field("max_wait", max_wait)
                .finish(),
        }
    }
}

/// PHP's `ClaimingDispatch::DEFAULT_TTL`: a claim outlives any sane handler, and is only the
/// backstop for a consumer that died holding it.
pub const DEFAULT_CLAIM_TTL: Duration = Duration::from_secs(3600);

/// How long a duplicate waits for the winner before it is handed back to the broker.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(30);

impl Idempotency {
    /// Post-success dedupe over a seen-set ([`run_once`]).
    pub fn seen_set(store: Arc<dyn IdempotencyStore>) -> Self {
        Self {
            kind: Kind::SeenSet(store),
        }
    }

    /// Claim before running ([`run_claimed`]): concurrent duplicates wait for the winner.
    pub fn claiming(store: Arc<dyn ClaimingStore>) -> Self {
        Self {
            kind: Kind::Claiming {
                store,
                claim_ttl: DEFAULT_CLAIM_TTL,
                max_wait: DEFAULT_MAX_WAIT,
            },
        }
    }

    /// How long an uncommitted claim holds before another consumer may take it over (the
    /// backstop for a consumer that crashed mid-handler). Default [`DEFAULT_CLAIM_TTL`], one
    /// hour. No effect on a seen-set.
    pub fn claim_ttl(mut self, ttl: Duration) -> Self {
        if let Kind::Claiming { claim_ttl, .. } = &mut self.kind {
            *claim_ttl = ttl;
        }
        self
    }

    /// How long a duplicate waits for the winner to commit or release before the message is
    /// handed back to the broker to be delivered again. Default [`DEFAULT_MAX_WAIT`], 30 s. No
    /// effect on a seen-set.
    pub fn max_wait(mut self, wait: Duration) -> Self {
        if let Kind::Claiming { max_wait, .. } = &mut self.kind {
            *max_wait = wait;
        }
        self
    }

    /// Runs `handler` under this option's contract.
    ///
    /// # Errors
    /// As [`run_once`] and [`run_claimed`].
    pub async fn run<T, E>(
        &self,
        meta_id: Option<&str>,
        handler: impl Future<Output = std::result::Result<T, E>>,
    ) -> std::result::Result<Effect<T>, Refusal<E>> {
        match &self.kind {
            Kind::SeenSet(store) => run_once(store.as_ref(), meta_id, handler).await,
            Kind::Claiming {
                store,
                claim_ttl,
                max_wait,
            } => {
                claiming::claimed(
                    store.as_ref(),
                    Some(store),
                    meta_id,
                    *claim_ttl,
                    *max_wait,
                    handler,
                )
                .await
            }
        }
    }
}

/// A table name is written into the SQL, never bound: only `[A-Za-z_][A-Za-z0-9_]*`, at most 63
/// bytes (PostgreSQL's identifier length; MySQL's is 64).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn checked_table(table: String, option: &'static str) -> Result<String> {
    let mut chars = table.chars();
    let plain = chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && table.len() <= 63;
    if !plain {
        return Err(Error::InvalidOption {
            option,
            reason: format!(
                "{table:?} is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes)"
            ),
        });
    }
    Ok(table)
}

/// A pool to `url` for the SQL `store`, one that gives up on an unreachable database after a
/// few seconds, so the message goes back to the broker instead of waiting.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn connect<D: sqlx::Database>(url: &str, store: &'static str) -> Result<sqlx::Pool<D>> {
    sqlx::pool::PoolOptions::<D>::new()
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .map_err(failed(store, "connect"))
}

/// Runs a shipped migration of the SQL `store` for a table renamed from its default.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn migrate_renamed<D: sqlx::Database>(
    pool: &sqlx::Pool<D>,
    store: &'static str,
    migration: &str,
    default: &str,
    table: &str,
) -> Result<()>
where
    for<'c> &'c mut D::Connection: sqlx::Executor<'c, Database = D>,
{
    sqlx::raw_sql(&migration.replace(default, table))
        .execute(pool)
        .await
        .map_err(failed(store, "run the idempotency migration"))?;
    Ok(())
}

/// The error of a persistent store that could not do `operation`.
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
pub(crate) fn failed<E: std::error::Error + Send + Sync + 'static>(
    store: &'static str,
    operation: &'static str,
) -> impl FnOnce(E) -> Error {
    move |error| Error::StoreFailed {
        store,
        operation,
        source: Box::new(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(any(feature = "postgres", feature = "mysql"))]
    #[test]
    fn table_names_are_plain_identifiers() {
        assert!(checked_table("bq_idem_2".to_owned(), "table").is_ok());
        for bad in ["", "2x", "a-b", "a;drop", &"x".repeat(64)] {
            assert!(checked_table(bad.to_owned(), "table").is_err(), "{bad:?}");
        }
    }

    struct Broken;
    impl IdempotencyStore for Broken {
        fn seen<'a>(&'a self, _: &'a str) -> StoreFuture<'a, bool> {
            Box::pin(async { Err(Error::Store("down".into())) })
        }
        fn remember<'a>(&'a self, _: &'a str) -> StoreFuture<'a, ()> {
            Box::pin(async { Err(Error::Store("down".into())) })
        }
        fn forget<'a>(&'a self, _: &'a str) -> StoreFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
    }

    async fn ok(store: &dyn IdempotencyStore, id: Option<&str>) -> Effect<()> {
        run_once(store, id, async { Ok::<_, String>(()) })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn failure_leaves_the_id_unmarked() {
        let store = InMemoryStore::new();
        let failed = run_once(&store, Some("a"), async { Err::<(), _>("handler") }).await;
        assert!(matches!(failed, Err(Refusal::Handler("handler"))));
        assert_eq!(ok(&store, Some("a")).await, Effect::Ran(()));
        assert_eq!(ok(&store, Some("a")).await, Effect::Skipped);
        store.forget("a").await.unwrap();
        assert_eq!(ok(&store, Some("a")).await, Effect::Ran(()));
    }

    #[tokio::test]
    async fn missing_id_fails_open_and_lookup_errors_surface() {
        let store = InMemoryStore::new();
        for _ in 0..2 {
            assert_eq!(ok(&store, Some("")).await, Effect::Ran(()));
            assert_eq!(ok(&store, None).await, Effect::Ran(()));
        }
        let mut ran = false;
        let refused = run_once(&Broken, Some("a"), async {
            ran = true;
            Ok::<_, String>(())
        })
        .await;
        assert!(matches!(refused, Err(Refusal::Store(Error::Store(_)))));
        assert!(
            !ran,
            "the handler must not run when the store cannot answer"
        );
    }

    #[tokio::test]
    async fn a_failed_remember_still_reports_the_run() {
        struct ForgetfulSeen;
        impl IdempotencyStore for ForgetfulSeen {
            fn seen<'a>(&'a self, _: &'a str) -> StoreFuture<'a, bool> {
                Box::pin(async { Ok(false) })
            }
            fn remember<'a>(&'a self, _: &'a str) -> StoreFuture<'a, ()> {
                Box::pin(async { Err(Error::Store("down".into())) })
            }
            fn forget<'a>(&'a self, _: &'a str) -> StoreFuture<'a, ()> {
                Box::pin(async { Ok(()) })
            }
        }
        assert_eq!(ok(&ForgetfulSeen, Some("a")).await, Effect::Ran(()));
    }
}
