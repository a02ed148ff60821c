//! The connections of one transport: a reconnecting multiplexed connection for commands and
//! scripts (concurrent calls share it and are pipelined), and a pool of connections for blocking
//! waits, which would otherwise hold up every command queued behind them.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, Cmd, FromRedisValue, RedisError,
    ScriptInvocation, TlsCertificates,
};

use super::{RedisErrorKind, RedisOptions};
use crate::Error;

/// Idle waiting connections kept for reuse; more are opened while more callers wait at once.
const IDLE_WAITERS: usize = 16;

pub(super) struct Connection {
    shown: Arc<str>,
    client: Client,
    commands: ConnectionManager,
    waiting: Mutex<Vec<MultiplexedConnection>>,
    waiting_config: AsyncConnectionConfig,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

impl Connection {
    pub(super) async fn open(url: &str, options: &RedisOptions) -> crate::Result<Self> {
        options.validate()?;
        let shown: Arc<str> = polyq_amqp::redact_url(url).into();
        let hide = |message: &str| message.replace(url, &shown);
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(Error::UnsupportedUrl {
                url: shown.to_string(),
                reason: "a Redis transport takes redis://host[:port][/db] or rediss://…".to_owned(),
            });
        }
        options
            .tls
            .check_scheme(url.starts_with("rediss://"))
            .map_err(|reason| Error::UnsupportedUrl {
                url: shown.to_string(),
                reason: reason.to_owned(),
            })?;
        let tls = &options.tls;
        let client = if !tls.is_set() {
            Client::open(url)
        } else {
            Client::build_with_tls(
                url,
                TlsCertificates {
                    client_tls: tls.client_certificate_pem().map(|(certificate, key)| {
                        ClientTlsConfig {
                            client_cert: certificate.as_bytes().to_vec(),
                            client_key: key.as_bytes().to_vec(),
                        }
                    }),
                    root_cert: tls
                        .root_certificates_pem()
                        .map(|pem| pem.as_bytes().to_vec()),
                },
            )
        }
        .map_err(|error| Error::UnsupportedUrl {
            url: shown.to_string(),
            reason: hide(&error.to_string()),
        })?;
        let waiting_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.connection_timeout))
            .set_response_timeout(Some(options.response_timeout + options.block_slice));
        // Connecting a waiting connection first fails fast on an unreachable server; the
        // connection manager would retry with backoff before giving up.
        let first = client
            .get_multiplexed_async_connection_with_config(&waiting_config)
            .await
            .map_err(|error| failed(&shown, "connect".to_owned(), error, hide))?;
        let commands = ConnectionManager::new_lazy_with_config(
            client.clone(),
            ConnectionManagerConfig::new()
                .set_connection_timeout(Some(options.connection_timeout))
                .set_response_timeout(Some(options.response_timeout)),
        )
        .map_err(|error| failed(&shown, "connect".to_owned(), error, hide))?;
        Ok(Self {
            shown,
            client,
            commands,
            waiting: Mutex::new(vec![first]),
            waiting_config,
        })
    }

    /// Runs a script on the command connection.
    pub(super) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        operation: impl FnOnce() -> String,
    ) -> crate::Result<T> {
        let mut commands = self.commands.clone();
        invocation
            .invoke_async(&mut commands)
            .await
            .map_err(|error| failed(&self.shown, operation(), error, str::to_owned))
    }

    /// Runs a script that settles `count` reservations and answers, for each in order, 1 when
    /// it settled and 0 when it touched nothing. `None` when the script did not answer (it runs
    /// whole or not at all): the caller then settles one at a time, each reservation saying for
    /// itself whether it is still held.
    pub(super) async fn settle_each(
        &self,
        invocation: &ScriptInvocation<'_>,
        count: usize,
        operation: impl Fn() -> String,
    ) -> Option<Vec<crate::Result<()>>> {
        let settled: Vec<i64> = self.invoke(invocation, &operation).await.ok()?;
        (settled.len() == count).then(|| {
            settled
                .into_iter()
                .map(|settled| match settled {
                    1 => Ok(()),
                    _ => Err(self.lost(operation())),
                })
                .collect()
        })
    }

    /// Runs a command on the command connection.
    pub(super) async fn query<T: FromRedisValue>(
        &self,
        command: &Cmd,
        operation: impl FnOnce() -> String,
    ) -> crate::Result<T> {
        let mut commands = self.commands.clone();
        command
            .query_async(&mut commands)
            .await
            .map_err(|error| failed(&self.shown, operation(), error, str::to_owned))
    }

    /// Up to `limit` values (all with `None`) from the head of the list `key`, in order, none
    /// taken: `LRANGE`.
    pub(super) async fn list_head(
        &self,
        key: &str,
        limit: Option<u64>,
    ) -> crate::Result<Vec<bytes::Bytes>> {
        let last = limit.map_or(-1, |limit| i64::try_from(limit).unwrap_or(i64::MAX) - 1);
        if last < -1 || limit == Some(0) {
            return Ok(Vec::new());
        }
        let values: Vec<Vec<u8>> = self
            .query(redis::cmd("LRANGE").arg(key).arg(0).arg(last), || {
                format!("read the head of {key:?}")
            })
            .await?;
        Ok(values.into_iter().map(bytes::Bytes::from).collect())
    }

    /// Removes the first value equal to `value` from the list `key` (`LREM 1`); `false` when
    /// the list holds none.
    pub(super) async fn list_remove(&self, key: &str, value: &[u8]) -> crate::Result<bool> {
        let removed: i64 = self
            .query(redis::cmd("LREM").arg(key).arg(1).arg(value), || {
                format!("remove a value from {key:?}")
            })
            .await?;
        Ok(removed > 0)
    }

    /// Deletes the list `key` and answers how many values it held, in one step.
    pub(super) async fn list_purge(&self, key: &str) -> crate::Result<u64> {
        let command = redis::cmd("EVAL")
            .arg("local n = redis.call('LLEN', KEYS[1]); redis.call('DEL', KEYS[1]); return n")
            .arg(1)
            .arg(key)
            .clone();
        self.query(&command, || format!("purge {key:?}")).await
    }

    /// Every key of type `kind` (`list`, `zset`, ...) matching the glob `pattern`, by
    /// `SCAN ... TYPE` (incremental, no `KEYS`), sorted.
    pub(super) async fn keys_matching(
        &self,
        pattern: &str,
        kind: &str,
    ) -> crate::Result<Vec<String>> {
        let mut cursor: u64 = 0;
        let mut keys = Vec::new();
        loop {
            let command = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg(kind)
                .clone();
            let (next, page): (u64, Vec<String>) = self
                .query(&command, || {
                    format!("scan for {kind} keys matching {pattern:?}")
                })
                .await?;
            keys.extend(page);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// Runs a blocking command on a waiting connection of its own. A connection that failed is
    /// dropped rather than reused; so is one whose caller stopped waiting mid-command, as its
    /// future is dropped with it.
    pub(super) async fn block<T: FromRedisValue>(
        &self,
        command: &Cmd,
        operation: impl FnOnce() -> String,
    ) -> crate::Result<T> {
        self.block_on_idle(command)
            .await
            .map_err(|error| failed(&self.shown, operation(), error, str::to_owned))
    }

    async fn block_on_idle<T: FromRedisValue>(&self, command: &Cmd) -> redis::RedisResult<T> {
        let idle = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut connection = match idle {
            Some(connection) => connection,
            None => {
                self.client
                    .get_multiplexed_async_connection_with_config(&self.waiting_config)
                    .await?
            }
        };
        let answer = command.query_async(&mut connection).await?;
        let mut idle = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE_WAITERS {
            idle.push(connection);
        }
        Ok(answer)
    }

    /// The error for a settle whose reservation is no longer held.
    pub(super) fn lost(&self, operation: String) -> Error {
        Error::Redis {
            url: self.shown.to_string(),
            operation,
            kind: RedisErrorKind::ReservationLost,
            message: "the reservation is no longer held: its deadline lapsed and it went back to \
                      the queue, or it was already settled; nothing was written"
                .to_owned(),
            source: None,
        }
    }

    /// The error for out-of-band headers that cannot ride with a body.
    pub(super) fn unframeable(&self, operation: String) -> Error {
        Error::Redis {
            url: self.shown.to_string(),
            operation,
            kind: RedisErrorKind::Unframeable,
            message: "out-of-band headers ride in a JSON header frame, which cannot hold a body \
                      that is not UTF-8; publish it without headers"
                .to_owned(),
            source: None,
        }
    }
}

/// The error for a failed Redis call, the client's error as its source. `hide` takes the
/// credentials out of a text; an error whose text carries them is kept as that text only.
fn failed(
    shown: &str,
    operation: String,
    error: RedisError,
    hide: impl Fn(&str) -> String,
) -> Error {
    let (kind, message) = if error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
    {
        (
            RedisErrorKind::Connection,
            "the server could not be reached, or the connection broke or timed out; retrying \
             later may succeed",
        )
    } else {
        (
            RedisErrorKind::Command,
            "the server refused or failed the command",
        )
    };
    let text = error.to_string();
    let hidden = hide(&text);
    let source: polyq_amqp::SourceError = if hidden == text {
        Box::new(error)
    } else {
        Box::new(std::io::Error::other(hidden))
    };
    Error::Redis {
        url: shown.to_owned(),
        operation,
        kind,
        message: message.to_owned(),
        source: Some(source),
    }
}

/// Whole epoch seconds, the unit of every score the SDKs write.
pub(super) fn now_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        })
}

/// A blocking command's timeout argument: seconds with millisecond precision, never `0`, which
/// Redis reads as "forever".
pub(super) fn block_seconds(slice: Duration) -> f64 {
    slice.max(Duration::from_millis(1)).as_secs_f64()
}
