//! The Redis idempotency store (feature `redis`). One string key per message,
//! `<prefix><key>` (default prefix [`DEFAULT_PREFIX`]), holding `CLAIMED:<instance>` for the
//! claim timeout or `CONFIRMED` for the retention; Redis expires it, so a crashed handler's
//! claim goes away on its own and [`IdempotencyStore::purge_expired`] has nothing to do.
//!
//! A claim is one `SET … NX PX … GET` (Redis 7.0 or newer): the key is written only when absent,
//! and the value that was there says whether it is a duplicate or in progress.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::ConnectionManager;

use super::{CLAIMED, CONFIRMED, ClaimResult, IdempotencyStore, Lease, StoreError, node_id};

/// The prefix of every key the store writes, unless told otherwise.
pub const DEFAULT_PREFIX: &str = "acemq:idempotency:";

/// Deletes the key only while it holds this instance's claim, atomically.
const RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// Keys in Redis, shared by every instance that points at the same server and prefix. Clones
/// share the connection and the instance identity.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use acemq::idempotency::redis::RedisIdempotencyStore;
///
/// let store = RedisIdempotencyStore::connect("redis://127.0.0.1:6379/0").await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisIdempotencyStore {
    connection: ConnectionManager,
    prefix: Arc<str>,
    claim: Arc<str>,
    release: Arc<redis::Script>,
    lease: Lease,
}

impl std::fmt::Debug for RedisIdempotencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisIdempotencyStore")
            .field("prefix", &self.prefix)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl RedisIdempotencyStore {
    /// A store on `connection` with [`DEFAULT_PREFIX`], the default claim timeout and retention.
    pub fn new(connection: ConnectionManager) -> Self {
        Self {
            connection,
            prefix: Arc::from(DEFAULT_PREFIX),
            claim: Arc::from(format!("{CLAIMED}:{}", node_id())),
            release: Arc::new(redis::Script::new(RELEASE_SCRIPT)),
            lease: Lease::default(),
        }
    }

    /// Connects to the Redis server at `url` (`redis://` or `rediss://`), reconnecting on its
    /// own after a lost connection.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] when the URL is invalid or the server cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let failed =
            |error| Self::failed(format!("connect to {}", polyq_amqp::redact_url(url)), error);
        let client = redis::Client::open(url).map_err(failed)?;
        let connection = ConnectionManager::new(client).await.map_err(failed)?;
        Ok(Self::new(connection))
    }

    /// Writes keys under `prefix` instead of [`DEFAULT_PREFIX`].
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidName`] for an empty prefix, which would mix the store's keys with
    /// everything else on the server.
    pub fn prefix(mut self, prefix: &str) -> Result<Self, StoreError> {
        if prefix.is_empty() {
            return Err(StoreError::InvalidName {
                name: String::new(),
                reason: "the key prefix must not be empty",
            });
        }
        self.prefix = Arc::from(prefix);
        Ok(self)
    }

    lease_setters!();

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn failed(operation: String, error: redis::RedisError) -> StoreError {
        StoreError::backend("redis", operation, error)
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl IdempotencyStore for RedisIdempotencyStore {
    fn claim<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ClaimResult, StoreError>> {
        Box::pin(async move {
            let held: Option<String> = redis::cmd("SET")
                .arg(self.key(key))
                .arg(&*self.claim)
                .arg("NX")
                .arg("PX")
                .arg(millis(self.lease.claim_timeout))
                .arg("GET")
                .query_async(&mut self.connection.clone())
                .await
                .map_err(|error| Self::failed(format!("claim key `{key}`"), error))?;
            Ok(match held.as_deref() {
                None => ClaimResult::Claimed,
                Some(CONFIRMED) => ClaimResult::AlreadyConfirmed,
                Some(_) => ClaimResult::InProgress,
            })
        })
    }

    fn confirm<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let () = redis::cmd("SET")
                .arg(self.key(key))
                .arg(CONFIRMED)
                .arg("PX")
                .arg(millis(self.lease.retention))
                .query_async(&mut self.connection.clone())
                .await
                .map_err(|error| Self::failed(format!("confirm key `{key}`"), error))?;
            Ok(())
        })
    }

    fn release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let _removed: i64 = self
                .release
                .key(self.key(key))
                .arg(&*self.claim)
                .invoke_async(&mut self.connection.clone())
                .await
                .map_err(|error| Self::failed(format!("release key `{key}`"), error))?;
            Ok(())
        })
    }

    fn purge_expired(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        // Redis expires the keys itself.
        Box::pin(async { Ok(0) })
    }
}
