//! The connections of one transport: one for commands and scripts (concurrent calls share it and
//! are pipelined; it reconnects by itself, under Sentinel to the master named then), and a pool
//! of connections for blocking waits, which would otherwise hold up every command queued behind
//! them. Writes that must reach replicas carry a `WAIT` in the same pipeline, so it counts the
//! write it follows.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::cluster_routing::Slot;
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, FromRedisValue, RedisError, ServerErrorKind};

use super::endpoint::{Commands, Endpoint, Link};
use super::scripts::Call;
use super::{RedisErrorKind, RedisOptions, ReplicaAcks};
use crate::Error;

/// Idle waiting connections kept for reuse; more are opened while more callers wait at once.
const IDLE_WAITERS: usize = 16;

pub(super) struct Connection {
    shown: Arc<str>,
    endpoint: Endpoint,
    commands: Commands,
    command_config: AsyncConnectionConfig,
    waiting: Mutex<Vec<Link>>,
    waiting_config: AsyncConnectionConfig,
    acks: Option<ReplicaAcks>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("url", &self.shown)
            .field("endpoint", &self.endpoint)
            .field("acks", &self.acks)
            .finish_non_exhaustive()
    }
}

/// Why a command failed: the client's error, or too few replicas acknowledged the write.
enum Failure {
    Redis(RedisError),
    Unreplicated { acked: u32, acks: ReplicaAcks },
}

impl From<RedisError> for Failure {
    fn from(error: RedisError) -> Self {
        Failure::Redis(error)
    }
}

impl Connection {
    pub(super) async fn open(url: &str, options: &RedisOptions) -> crate::Result<Self> {
        options.validate()?;
        let shown: Arc<str> = polyq_amqp::redact_url(url).into();
        let hide = |message: &str| message.replace(url, &shown);
        let (endpoint, from_url) =
            Endpoint::parse(url, options).map_err(|reason| Error::UnsupportedUrl {
                url: shown.to_string(),
                reason: hide(&reason),
            })?;
        let acks = from_url.or(options.wait_for_replicas);
        if let Some(acks) = acks {
            acks.validate(options.response_timeout)?;
        }
        let command_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.connection_timeout))
            .set_response_timeout(Some(options.response_timeout));
        let waiting_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.connection_timeout))
            .set_response_timeout(Some(options.response_timeout + options.block_slice));
        // Connecting a waiting connection first fails fast on an unreachable server; the
        // connection manager would retry with backoff before giving up.
        let first = endpoint
            .open(&waiting_config)
            .await
            .map_err(|error| failed(&shown, "connect".to_owned(), error, hide))?;
        let commands = endpoint
            .commands(options)
            .await
            .map_err(|error| failed(&shown, "connect".to_owned(), error, hide))?;
        Ok(Self {
            shown,
            endpoint,
            commands,
            command_config,
            waiting: Mutex::new(vec![first]),
            waiting_config,
            acks,
        })
    }

    /// Runs a script on the command connection.
    pub(super) async fn invoke<T: FromRedisValue>(
        &self,
        call: &Call,
        operation: impl FnOnce() -> String,
    ) -> crate::Result<T> {
        self.call(call, false, operation).await
    }

    /// Runs a script that pushes or settles: with replica acknowledgements asked for, it
    /// succeeds only once that many replicas have the write.
    pub(super) async fn invoke_durable<T: FromRedisValue>(
        &self,
        call: &Call,
        operation: impl FnOnce() -> String,
    ) -> crate::Result<T> {
        self.call(call, true, operation).await
    }

    async fn call<T: FromRedisValue>(
        &self,
        call: &Call,
        durable: bool,
        operation: impl FnOnce() -> String,
    ) -> crate::Result<T> {
        if !self.one_slot(call.keys()) {
            let keys: Vec<String> = call
                .keys()
                .iter()
                .map(|key| String::from_utf8_lossy(key).into_owned())
                .collect();
            return Err(self.cross_slot(operation(), &keys, None));
        }
        let command = call.command();
        let answer = match self.run(&command, durable).await {
            // A server that does not know the script yet (a new node, a promoted replica)
            // gets it, then the call once more.
            Err(Failure::Redis(error))
                if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                match self.load(call).await {
                    Ok(()) => self.run(&command, durable).await,
                    Err(error) => Err(Failure::Redis(error)),
                }
            }
            answer => answer,
        };
        answer.map_err(|failure| self.failure(operation(), failure))
    }

    async fn load(&self, call: &Call) -> redis::RedisResult<()> {
        let mut link = self
            .commands
            .link(&self.endpoint, &self.command_config)
            .await?;
        call.script().load_async(&mut link).await.map(drop)
    }

    /// Sends `command`, followed in the same pipeline by a `WAIT` when it must reach replicas.
    async fn run<T: FromRedisValue>(&self, command: &Cmd, durable: bool) -> Result<T, Failure> {
        let mut link = self
            .commands
            .link(&self.endpoint, &self.command_config)
            .await?;
        let answer = match self.acks.filter(|_| durable) {
            None => command.query_async(&mut link).await,
            Some(acks) => {
                let mut pipeline = redis::pipe();
                pipeline
                    .add_command(command.clone())
                    .cmd("WAIT")
                    .arg(acks.replicas)
                    .arg(acks.timeout_ms());
                match pipeline.query_async::<(T, u32)>(&mut link).await {
                    Ok((answer, acked)) if acked >= acks.replicas => Ok(answer),
                    Ok((_, acked)) => return Err(Failure::Unreplicated { acked, acks }),
                    Err(error) => Err(error),
                }
            }
        };
        if let Err(error) = &answer {
            self.commands.failed(error).await;
        }
        Ok(answer?)
    }

    /// Whether every one of `keys` is in one slot: always on a single node.
    fn one_slot(&self, keys: &[impl AsRef<[u8]>]) -> bool {
        !self.endpoint.is_cluster()
            || keys
                .windows(2)
                .all(|pair| Slot::for_key(&pair[0]) == Slot::for_key(&pair[1]))
    }

    /// Refuses, on a cluster, a queue whose `keys` (every key its layout derives from it) are
    /// not all in one slot, before anything is sent.
    pub(super) fn check_queue(
        &self,
        queue: &str,
        keys: &[String],
        operation: impl FnOnce() -> String,
    ) -> crate::Result<()> {
        if self.one_slot(keys) {
            Ok(())
        } else {
            Err(self.cross_slot(operation(), keys, Some(queue)))
        }
    }

    fn cross_slot(&self, operation: String, keys: &[String], queue: Option<&str>) -> Error {
        let example = match queue {
            Some(queue) if !queue.is_empty() => format!(
                "\"{{{queue}}}\" instead of {queue:?}: its keys (\"{{{queue}}}:processing\", \
                 \"{{{queue}}}.dlq\", \"queues:{{{queue}}}:reserved\", ...) then all hash on \
                 {queue:?} alone"
            ),
            _ => "\"{orders}\": its keys (\"{orders}:processing\", \"{orders}.dlq\", ...) then \
                  all hash on \"orders\" alone"
                .to_owned(),
        };
        Error::Redis {
            url: self.shown.to_string(),
            operation,
            kind: RedisErrorKind::CrossSlot,
            message: format!(
                "the keys {keys:?} are in different slots of the cluster, and each step of a \
                 queue runs as one script, which a cluster runs only on keys of one slot; \
                 nothing was sent. Name the queue with a hash tag, e.g. {example}; a retry or \
                 dead-letter queue named apart needs the same tag"
            ),
            source: None,
        }
    }

    fn failure(&self, operation: String, failure: Failure) -> Error {
        match failure {
            Failure::Redis(error) => failed(&self.shown, operation, error, str::to_owned),
            Failure::Unreplicated { acked, acks } => Error::Redis {
                url: self.shown.to_string(),
                operation,
                kind: RedisErrorKind::Unreplicated,
                message: format!(
                    "only {acked} of the {} replicas asked for acknowledged the write within \
                     {} ms (WAIT): it is done on the master and not undone, but a failover \
                     before a replica has it loses it; check the replicas, or raise \
                     wait_timeout_ms or lower wait_replicas",
                    acks.replicas,
                    acks.timeout_ms()
                ),
                source: None,
            },
        }
    }

    /// Runs a script that settles `count` reservations and answers, for each in order, 1 when
    /// it settled and 0 when it touched nothing. `None` when the script did not answer (it runs
    /// whole or not at all): the caller then settles one at a time, each reservation saying for
    /// itself whether it is still held.
    pub(super) async fn settle_each(
        &self,
        call: &Call,
        count: usize,
        operation: impl Fn() -> String,
    ) -> Option<Vec<crate::Result<()>>> {
        let settled: Vec<i64> = self.invoke_durable(call, &operation).await.ok()?;
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
        self.run(command, false)
            .await
            .map_err(|failure| self.failure(operation(), failure))
    }

    /// Runs a command that pushes or settles: with replica acknowledgements asked for, it
    /// succeeds only once that many replicas have the write.
    pub(super) async fn query_durable<T: FromRedisValue>(
        &self,
        command: &Cmd,
        operation: impl FnOnce() -> String,
    ) -> crate::Result<T> {
        self.run(command, true)
            .await
            .map_err(|failure| self.failure(operation(), failure))
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

    /// Removes each of `values` once from the list `key`, in one pass over it (see
    /// [`LIST_REMOVE_ALL`](super::scripts::LIST_REMOVE_ALL)); answers how many went.
    pub(super) async fn list_remove_all(
        &self,
        key: &str,
        values: &[impl AsRef<[u8]>],
    ) -> crate::Result<u64> {
        if values.is_empty() {
            return Ok(0);
        }
        let mut remove = Call::new(&super::scripts::LIST_REMOVE_ALL);
        remove.key(key);
        for value in values {
            remove.arg(value.as_ref());
        }
        self.invoke_durable(&remove, || {
            format!("remove {} values from {key:?}", values.len())
        })
        .await
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

    /// Deletes `keys`, every key a layout keeps for `queue`, in one `DEL` (refused first on a
    /// cluster when they span slots) and answers how many of them existed.
    pub(super) async fn delete_keys(
        &self,
        queue: &str,
        keys: &[String],
        operation: impl Fn() -> String,
    ) -> crate::Result<u64> {
        self.check_queue(queue, keys, &operation)?;
        self.query_durable(redis::cmd("DEL").arg(keys), operation)
            .await
    }

    /// Every key of type `kind` (`list`, `zset`, ...) matching the glob `pattern`, by
    /// `SCAN ... TYPE` (incremental, no `KEYS`), sorted.
    pub(super) async fn keys_matching(
        &self,
        pattern: &str,
        kind: &str,
    ) -> crate::Result<Vec<String>> {
        let operation = || format!("scan for {kind} keys matching {pattern:?}");
        // A cluster node scans only its own keys: each master is scanned in turn.
        let masters = match &self.commands {
            Commands::Cluster(cluster) => super::endpoint::masters(&mut cluster.clone())
                .await
                .map_err(|error| failed(&self.shown, operation(), error, str::to_owned))?
                .into_iter()
                .map(Some)
                .collect(),
            _ => vec![None],
        };
        let mut keys = Vec::new();
        for master in masters {
            let mut cursor: u64 = 0;
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
                let (next, page): (u64, Vec<String>) = match (&master, &self.commands) {
                    (Some(node), Commands::Cluster(cluster)) => {
                        super::endpoint::on_node(&mut cluster.clone(), command, node)
                            .await
                            .map_err(|error| {
                                failed(&self.shown, operation(), error, str::to_owned)
                            })?
                    }
                    _ => self.query(&command, operation).await?,
                };
                keys.extend(page);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
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
        let (connection, answer) = match idle {
            Some(mut connection) => match command.query_async(&mut connection).await {
                // An idle connection can have broken while nobody used it (a cut, a restart),
                // and so can every other one kept since: they go, and the wait runs on a new
                // one, instead of failing and leaving the caller to back off.
                Err(error) if error.is_io_error() || error.is_connection_dropped() => {
                    self.waiting
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clear();
                    let mut connection = self.endpoint.open(&self.waiting_config).await?;
                    let answer = command.query_async(&mut connection).await;
                    (connection, answer)
                }
                answer => (connection, answer),
            },
            None => {
                let mut connection = self.endpoint.open(&self.waiting_config).await?;
                let answer = command.query_async(&mut connection).await;
                (connection, answer)
            }
        };
        let answer = answer?;
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
        || error.is_cluster_error()
        || super::endpoint::needs_another_node(&error)
        || matches!(
            error.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::MasterNameNotFoundBySentinel
                | ErrorKind::Server(ServerErrorKind::BusyLoading)
        ) {
        (
            RedisErrorKind::Connection,
            "the server could not be reached, the connection broke or timed out, or the node is \
             not (or no longer) the master, or no Sentinel names a live one for the service; \
             retrying later may succeed",
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
