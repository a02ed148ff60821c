//! The Redis stores, in the upstream key layouts so that consumers in other languages share them:
//! [`RedisStore`] is the Go SDK's `idempotency-redis` (`bq:idemp:<meta.id>` = `1`, `SET NX PX`),
//! [`RedisClaimingStore`] the PHP SDK's `RedisStore` (`bq:idem:<meta.id>`, `1` = claimed with a
//! TTL, `2` = committed).

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::{ClaimingStore, IdempotencyStore, StoreFuture};
use crate::error::{Error, Result};

fn failed(operation: &'static str) -> impl FnOnce(redis::RedisError) -> Error {
    super::failed("redis", operation)
}

/// A connection manager to `url` that fails a command after a few seconds instead of waiting
/// for a server that does not answer, so the message goes back to the broker.
async fn connect(url: &str) -> Result<ConnectionManager> {
    let client = redis::Client::open(url).map_err(|error| Error::UnsupportedUrl {
        url: polyq_amqp::redact_url(url),
        reason: error.to_string(),
    })?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(5)))
        .set_number_of_retries(1);
    ConnectionManager::new_with_config(client, config)
        .await
        .map_err(failed("connect"))
}

/// Milliseconds for `PX`, at least 1 (Redis refuses 0).
fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The keys of one store: `<prefix><meta.id>` on one connection.
#[derive(Clone)]
struct Keys {
    connection: ConnectionManager,
    prefix: String,
}

impl Keys {
    fn key(&self, id: &str) -> String {
        format!("{}{id}", self.prefix)
    }

    /// An empty prefix is refused: it would mix message ids with every other key.
    fn set_prefix(&mut self, prefix: String) -> Result<()> {
        if prefix.is_empty() {
            return Err(Error::InvalidOption {
                option: "Redis idempotency key prefix",
                reason: "it is empty".to_owned(),
            });
        }
        self.prefix = prefix;
        Ok(())
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        command: &redis::Cmd,
        operation: &'static str,
    ) -> Result<T> {
        let mut connection = self.connection.clone();
        command
            .query_async(&mut connection)
            .await
            .map_err(failed(operation))
    }

    async fn delete(&self, id: &str) -> Result<()> {
        let _: i64 = self
            .run(redis::cmd("DEL").arg(self.key(id)), "forget a message id")
            .await?;
        Ok(())
    }
}

/// The Go SDK's Redis seen-set: `remember` is `SET <prefix><id> 1 NX [PX ttl]`, `seen` is
/// `EXISTS`, `forget` is `DEL`.
///
/// ```no_run
/// # async fn demo() -> babelqueue::Result<()> {
/// use std::time::Duration;
/// use babelqueue::idempotency::RedisStore;
///
/// let store = RedisStore::connect("redis://127.0.0.1:6379/0")
///     .await?
///     .ttl(Duration::from_secs(24 * 3600));
/// # let _ = store; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    keys: Keys,
    ttl: Option<Duration>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.keys.prefix)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// The Go SDK's `DefaultPrefix`.
    pub const DEFAULT_PREFIX: &'static str = "bq:idemp:";

    /// A store over an existing connection.
    pub fn new(connection: ConnectionManager) -> Self {
        Self {
            keys: Keys {
                connection,
                prefix: Self::DEFAULT_PREFIX.to_owned(),
            },
            ttl: None,
        }
    }

    /// A store over a new connection to `url` (`redis://` or `rediss://`).
    ///
    /// # Errors
    /// [`Error::UnsupportedUrl`] for a URL the client does not take, [`Error::StoreFailed`] when
    /// the server cannot be reached.
    pub async fn connect(url: &str) -> Result<Self> {
        Ok(Self::new(connect(url).await?))
    }

    /// The key namespace; a key is `<prefix><meta.id>`. Default [`Self::DEFAULT_PREFIX`], the Go
    /// SDK's, so Go and Rust consumers of one queue share the store.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an empty prefix (it would mix message ids with every other
    /// key).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Result<Self> {
        self.keys.set_prefix(prefix.into())?;
        Ok(self)
    }

    /// How long a remembered id stays seen. Default none: until [`IdempotencyStore::forget`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

impl IdempotencyStore for RedisStore {
    fn seen<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let exists = redis::cmd("EXISTS").arg(self.keys.key(id)).clone();
            let found: i64 = self.keys.run(&exists, "look up a message id").await?;
            Ok(found > 0)
        })
    }

    fn remember<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut set = redis::cmd("SET");
            set.arg(self.keys.key(id)).arg("1").arg("NX");
            if let Some(ttl) = self.ttl {
                set.arg("PX").arg(millis(ttl));
            }
            let _: Option<String> = self.keys.run(&set, "remember a message id").await?;
            Ok(())
        })
    }

    fn forget<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(self.keys.delete(id))
    }
}

const CLAIMED: &str = "1";
const COMMITTED: &str = "2";

/// Deletes the key only while it still holds a claim, so a release racing a commit keeps the
/// commit.
const RELEASE_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// The PHP SDK's Redis claiming store: `claim` is `SET <prefix><id> 1 NX PX ttl`, `remember`
/// sets `2` with no expiry, `seen` is true for `2` only, `release` deletes a `1` atomically.
///
/// ```no_run
/// # async fn demo() -> babelqueue::Result<()> {
/// use std::sync::Arc;
/// use babelqueue::idempotency::{Idempotency, RedisClaimingStore};
///
/// let store = RedisClaimingStore::connect("redis://127.0.0.1:6379/0").await?;
/// let option = Idempotency::claiming(Arc::new(store));
/// # let _ = option; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisClaimingStore {
    keys: Keys,
    release: redis::Script,
}

impl std::fmt::Debug for RedisClaimingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClaimingStore")
            .field("prefix", &self.keys.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisClaimingStore {
    /// The PHP SDK's default prefix.
    pub const DEFAULT_PREFIX: &'static str = "bq:idem:";

    /// A store over an existing connection.
    pub fn new(connection: ConnectionManager) -> Self {
        Self {
            keys: Keys {
                connection,
                prefix: Self::DEFAULT_PREFIX.to_owned(),
            },
            release: redis::Script::new(RELEASE_SCRIPT),
        }
    }

    /// A store over a new connection to `url` (`redis://` or `rediss://`).
    ///
    /// # Errors
    /// As [`RedisStore::connect`].
    pub async fn connect(url: &str) -> Result<Self> {
        Ok(Self::new(connect(url).await?))
    }

    /// The key namespace; a key is `<prefix><meta.id>`. Default [`Self::DEFAULT_PREFIX`], the
    /// PHP SDK's.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an empty prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Result<Self> {
        self.keys.set_prefix(prefix.into())?;
        Ok(self)
    }
}

impl IdempotencyStore for RedisClaimingStore {
    fn seen<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let get = redis::cmd("GET").arg(self.keys.key(id)).clone();
            let value: Option<String> = self.keys.run(&get, "look up a message id").await?;
            Ok(value.as_deref() == Some(COMMITTED))
        })
    }

    fn remember<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let set = redis::cmd("SET")
                .arg(self.keys.key(id))
                .arg(COMMITTED)
                .clone();
            let _: Option<String> = self.keys.run(&set, "commit a message id").await?;
            Ok(())
        })
    }

    fn forget<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(self.keys.delete(id))
    }
}

impl ClaimingStore for RedisClaimingStore {
    fn claim<'a>(&'a self, id: &'a str, ttl: Duration) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let claim = redis::cmd("SET")
                .arg(self.keys.key(id))
                .arg(CLAIMED)
                .arg("NX")
                .arg("PX")
                .arg(millis(ttl))
                .clone();
            let set: Option<String> = self.keys.run(&claim, "claim a message id").await?;
            Ok(set.is_some())
        })
    }

    fn release<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut connection = self.keys.connection.clone();
            let _: i64 = self
                .release
                .key(self.keys.key(id))
                .arg(CLAIMED)
                .invoke_async(&mut connection)
                .await
                .map_err(failed("release a claim"))?;
            Ok(())
        })
    }
}
