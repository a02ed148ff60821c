//! The Redis bindings (`redis://`, `rediss://`, `redis+sentinel://`, `redis+cluster://`),
//! wire-compatible with the other SDKs:
//!
//! - [`RedisTransport`], the default layout every SDK shares: `RPUSH <queue>`, reservations in
//!   `<queue>:processing` with deadlines in `<queue>:processing:deadlines`, the `__bq_frame`
//!   header frame, `<queue>.dlq`.
//! - [`LaravelTransport`], Laravel's own queue layout: `queues:<queue>` with `:notify`,
//!   `:reserved` and `:delayed`, settled interchangeably with Laravel and Python workers.
//!
//! Both take a [`RedisOptions`]; the defaults are those of the Python SDK 1.24. Every reserve and
//! every settle is one Lua script, so one round trip, and each settle acts only while its
//! reservation is still held (otherwise it fails with [`RedisErrorKind::ReservationLost`] and
//! writes nothing). Waiting for work blocks on the server in slices of at most a second on a
//! connection of its own, never polls in a loop.
//!
//! Behind Redis Sentinel the transport follows the master the Sentinels name, asking again after
//! a failure; on a Redis Cluster every key of a queue must be in one slot, so queues are named
//! with a hash tag (`{orders}`) and one whose keys would span slots is refused before anything is
//! sent ([`RedisErrorKind::CrossSlot`]). Pushes and settles can wait for replicas
//! ([`RedisOptions::wait_for_replicas`]). `docs/RELIABILITY.md` says what each guarantees.

mod connection;
mod default_layout;
mod endpoint;
mod laravel;
mod scripts;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::runtime::Handle;

use crate::transport::{TlsOptions, Transport, move_each_to_end};

pub use default_layout::{RedisReceipt, RedisTransport};
pub use laravel::{LaravelReceipt, LaravelTransport};

/// What kind of failure an [`Error::Redis`](crate::Error::Redis) is.
///
/// ```
/// use babelqueue::Error;
/// use babelqueue::transport::redis::RedisErrorKind;
///
/// /// A settle that came too late: the reservation went back to the queue, nothing was written.
/// fn settled_too_late(error: &Error) -> bool {
///     matches!(error, Error::Redis { kind: RedisErrorKind::ReservationLost, .. })
/// }
/// # assert!(!settled_too_late(&Error::BlankUrn(String::new())));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisErrorKind {
    /// The server could not be reached, or the connection broke or timed out; retrying later may
    /// succeed. A settle that failed this way may or may not have happened; either way nothing is
    /// lost, as a reservation left unsettled comes back after its deadline.
    Connection,
    /// The server refused or failed the command (authentication, a wrong key type, a script
    /// error); retrying unchanged will not help.
    Command,
    /// A settle found its reservation no longer held: its deadline lapsed and it went back to the
    /// queue, or it was already settled. Nothing was written.
    ReservationLost,
    /// A body that is not UTF-8 was given with out-of-band headers, which only a JSON header
    /// frame can carry.
    Unframeable,
    /// On a Redis Cluster, the keys one step would touch are in different hash slots (a queue
    /// named without a hash tag, or a retry or dead-letter queue with another tag). Nothing was
    /// sent; the message says how to name the queue.
    CrossSlot,
    /// Fewer replicas than asked for ([`RedisOptions::wait_for_replicas`]) acknowledged a push
    /// or settle in time. The write is done on the master and not undone, but may be lost if
    /// the master fails before a replica has it; publishing again may duplicate the message.
    Unreplicated,
}

/// The schemes of the URLs a Redis transport connects to.
pub const URL_SCHEMES: [&str; 4] = ["redis", "rediss", "redis+sentinel", "redis+cluster"];

/// Whether `url` names a Redis server: one node (`redis://`, `rediss://`), a service behind
/// Redis Sentinel (`redis+sentinel://`) or a Redis Cluster (`redis+cluster://`).
///
/// ```
/// use babelqueue::transport::redis::is_redis_url;
///
/// assert!(is_redis_url("redis+sentinel://127.0.0.1:26379/mymaster"));
/// assert!(is_redis_url("REDIS://127.0.0.1"));
/// assert!(!is_redis_url("amqp://127.0.0.1"));
/// ```
pub fn is_redis_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        URL_SCHEMES
            .iter()
            .any(|known| known.eq_ignore_ascii_case(scheme))
    })
}

/// The keys the Laravel layout keeps beside a queue's ready list, by suffix.
const LARAVEL_SUFFIXES: [&str; 3] = [":notify", ":reserved", ":delayed"];

/// Settings shared by both Redis layouts. Every setter documents its default; the defaults are
/// the Python SDK's, so a Rust worker and a Python worker on one queue agree.
///
/// ```
/// use std::time::Duration;
/// use babelqueue::transport::redis::RedisOptions;
///
/// let options = RedisOptions::new()
///     .reservation_deadline(Some(Duration::from_secs(300)))
///     .block_slice(Duration::from_millis(250));
/// assert_eq!(options.dead_letter_queue("orders"), "orders.dlq");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisOptions {
    processing_suffix: String,
    dlq_suffix: String,
    reservation_deadline: Option<Duration>,
    key_prefix: String,
    retry_after: Option<Duration>,
    block_slice: Duration,
    migration_batch: Option<NonZeroUsize>,
    prefetch: usize,
    connection_timeout: Duration,
    response_timeout: Duration,
    tls: TlsOptions,
    wait_for_replicas: Option<ReplicaAcks>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            processing_suffix: ":processing".to_owned(),
            dlq_suffix: ".dlq".to_owned(),
            reservation_deadline: Some(Duration::from_secs(90)),
            key_prefix: "queues:".to_owned(),
            retry_after: Some(Duration::from_secs(90)),
            block_slice: Duration::from_secs(1),
            migration_batch: None,
            prefetch: 1,
            connection_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(5),
            tls: TlsOptions::default(),
            wait_for_replicas: None,
        }
    }
}

impl RedisOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Default layout: the suffix of the in-flight list, `<queue><suffix>`; its deadline set is
    /// `<queue><suffix>:deadlines`. Default `:processing`. Must not be empty.
    pub fn processing_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.processing_suffix = suffix.into();
        self
    }

    /// The suffix that names a queue's dead-letter queue (see
    /// [`dead_letter_queue`](Self::dead_letter_queue)). Default `.dlq`. Must not be empty.
    pub fn dlq_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.dlq_suffix = suffix.into();
        self
    }

    /// Default layout: how long a reservation may stay unsettled before the sweep that runs
    /// before every reserve returns it to the end of its queue (a worker killed mid-job loses
    /// nothing). Whole seconds, a fraction rounded up. `None` never sweeps this worker's
    /// reservations. Default 90 s.
    pub fn reservation_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.reservation_deadline = deadline;
        self
    }

    /// Laravel layout: the prefix of every key, `<prefix><queue>`. Default `queues:`, Laravel's.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Laravel layout: how long a reservation stays in `:reserved` before a pop (ours, Laravel's
    /// or Python's) migrates it back to the queue. Whole seconds, a fraction rounded up. `None`
    /// reserves until settled and recovers nobody's lapsed reservations. Default 90 s (Python's;
    /// Laravel's connector default is 60 s).
    pub fn retry_after(mut self, retry_after: Option<Duration>) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// The longest single block on the server while waiting for work; the wait is re-armed
    /// until the caller's `wait` is spent, and lapsed reservations and due delayed jobs are
    /// picked up at least this often. Between 1 ms and 1 s. Default 1 s.
    pub fn block_slice(mut self, slice: Duration) -> Self {
        self.block_slice = slice;
        self
    }

    /// How many lapsed reservations (default layout) or due members of each sorted set (Laravel
    /// layout) one reserve moves back at most. Default `None`: all of them.
    pub fn migration_batch(mut self, batch: Option<NonZeroUsize>) -> Self {
        self.migration_batch = batch;
        self
    }

    /// Default layout: how many messages one reserve takes off the queue at most, in the same
    /// round trip; the ones not handed out yet wait in this transport, already reserved (their
    /// deadlines running), for the next reserves of the queue. One held longer than half its
    /// deadline is put back at the end of the queue rather than handed out late, and
    /// [`Transport::unsubscribe`] puts all of a queue's back at its head, in the order they were
    /// in. More than one trades strict round-robin between workers for throughput: a worker that
    /// reserves one message at a time then makes one round trip per `prefetch` messages. Between
    /// 1 and 1,000. Default 1: every reserve takes exactly one message, as the other SDKs do.
    pub fn prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// How long connecting to the server may take. Default 5 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long the server may take to answer one command (a blocking wait gets its slice on
    /// top). Default 5 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The TLS settings of `rediss://`: the authorities to trust instead of the system's roots,
    /// and a client certificate for a server with `tls-auth-clients`. Default: the system's
    /// roots, no client certificate. Connecting `redis://` with settings here fails.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// Makes every push and every settle (ack, retry, release, dead-letter, the moves back to a
    /// queue) wait until `replicas` replicas have it (`WAIT replicas timeout`, sent with the
    /// write), for at most `timeout`; the write fails with [`RedisErrorKind::Unreplicated`] when
    /// fewer did. Replication stays asynchronous: this narrows the window in which a write the
    /// master acknowledged is lost with the master, it does not close it (see
    /// `docs/RELIABILITY.md`). The URL's `?wait_replicas=N&wait_timeout_ms=T` takes precedence.
    /// `timeout` must be shorter than [`response_timeout`](Self::response_timeout). Reserves
    /// never wait. Default: no waiting, as the other SDKs write.
    ///
    /// ```
    /// use std::time::Duration;
    /// use babelqueue::transport::redis::RedisOptions;
    ///
    /// let options = RedisOptions::new().wait_for_replicas(1, Duration::from_millis(500));
    /// # let _ = options;
    /// ```
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_for_replicas = (replicas > 0).then(|| ReplicaAcks::new(replicas, timeout));
        self
    }

    /// The dead-letter queue of `queue`: `<queue><dlq suffix>`, e.g. `orders.dlq`.
    pub fn dead_letter_queue(&self, queue: &str) -> String {
        format!("{queue}{}", self.dlq_suffix)
    }

    /// The queue whose dead-letter queue `dlq` is: the inverse of
    /// [`dead_letter_queue`](Self::dead_letter_queue); `None` for any other name.
    ///
    /// ```
    /// use babelqueue::transport::redis::RedisOptions;
    ///
    /// assert_eq!(RedisOptions::new().dead_letter_source("orders.dlq"), Some("orders"));
    /// assert_eq!(RedisOptions::new().dlq_suffix(":dead").dead_letter_source("orders.dlq"), None);
    /// ```
    pub fn dead_letter_source<'q>(&self, dlq: &'q str) -> Option<&'q str> {
        dlq.strip_suffix(self.dlq_suffix.as_str())
            .filter(|queue| !queue.is_empty())
    }

    /// Default layout: the in-flight list of `queue`, `<queue><processing suffix>`.
    pub fn processing_key(&self, queue: &str) -> String {
        format!("{queue}{}", self.processing_suffix)
    }

    /// Laravel layout: the ready list of `queue`, `<prefix><queue>`, e.g. `queues:orders`.
    pub fn laravel_key(&self, queue: &str) -> String {
        format!("{}{queue}", self.key_prefix)
    }

    /// The keys the default layout keeps for `queue`: the ready list, the in-flight list and
    /// its deadline set. A tool reads them to see a queue without a transport.
    pub fn default_layout_keys(&self, queue: &str) -> [String; 3] {
        let processing = self.processing_key(queue);
        [
            queue.to_owned(),
            format!("{processing}:deadlines"),
            processing,
        ]
    }

    /// The keys the Laravel layout keeps for `queue`: its `:notify`, `:reserved` and
    /// `:delayed` keys, then the ready list.
    pub fn laravel_layout_keys(&self, queue: &str) -> [String; 4] {
        let ready = self.laravel_key(queue);
        let [notify, reserved, delayed] = LARAVEL_SUFFIXES.map(|suffix| format!("{ready}{suffix}"));
        [notify, reserved, delayed, ready]
    }

    /// The queue name a key of either layout belongs to: the Laravel prefix and each layout's
    /// key suffixes taken off. For a tool that finds queues by scanning keys.
    ///
    /// ```
    /// use babelqueue::transport::redis::RedisOptions;
    ///
    /// let options = RedisOptions::new();
    /// assert_eq!(options.queue_of_key("queues:jobs:delayed"), "jobs");
    /// assert_eq!(options.queue_of_key("jobs:processing:deadlines"), "jobs");
    /// assert_eq!(options.queue_of_key("jobs.dlq"), "jobs.dlq");
    /// ```
    pub fn queue_of_key<'k>(&self, key: &'k str) -> &'k str {
        if let Some(laravel) = key.strip_prefix(self.key_prefix.as_str()) {
            return LARAVEL_SUFFIXES
                .iter()
                .find_map(|suffix| laravel.strip_suffix(suffix))
                .unwrap_or(laravel);
        }
        let processing = self.processing_suffix.as_str();
        key.strip_suffix(":deadlines")
            .and_then(|rest| rest.strip_suffix(processing))
            .or_else(|| key.strip_suffix(processing))
            .unwrap_or(key)
    }

    fn validate(&self) -> crate::Result<()> {
        let invalid = |option, reason: &str| {
            Err(crate::Error::InvalidOption {
                option,
                reason: reason.to_owned(),
            })
        };
        if self.processing_suffix.is_empty() {
            return invalid(
                "processing_suffix",
                "must not be empty: the in-flight list would be the queue itself",
            );
        }
        if self.dlq_suffix.is_empty() {
            return invalid(
                "dlq_suffix",
                "must not be empty: the dead-letter queue would be the queue itself",
            );
        }
        if self.block_slice < Duration::from_millis(1) || self.block_slice > Duration::from_secs(1)
        {
            return invalid(
                "block_slice",
                "must be between 1 ms and 1 s, so that lapsed reservations and due jobs are seen",
            );
        }
        if !(1..=1000).contains(&self.prefetch) {
            return invalid("prefetch", "must be between 1 and 1,000 messages");
        }
        if self.connection_timeout.is_zero() || self.response_timeout.is_zero() {
            return invalid(
                "connection_timeout/response_timeout",
                "must be longer than zero",
            );
        }
        Ok(())
    }

    /// The sweep or migration batch as the scripts take it (`-1` = all).
    fn batch_arg(&self) -> i64 {
        self.migration_batch
            .map_or(-1, |n| i64::try_from(n.get()).unwrap_or(i64::MAX))
    }
}

/// How many replicas must have a write before it counts as done, and how long to wait for
/// them ([`RedisOptions::wait_for_replicas`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReplicaAcks {
    replicas: u32,
    timeout: Duration,
}

impl ReplicaAcks {
    fn new(replicas: u32, timeout: Duration) -> Self {
        Self { replicas, timeout }
    }

    /// `WAIT`'s timeout argument; never `0`, which `WAIT` reads as "forever".
    fn timeout_ms(self) -> u64 {
        u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    fn validate(self, response_timeout: Duration) -> crate::Result<()> {
        if self.timeout.is_zero() || self.timeout >= response_timeout {
            return Err(crate::Error::InvalidOption {
                option: "wait_for_replicas",
                reason: format!(
                    "the timeout must be longer than zero and shorter than the response timeout \
                     ({} ms), or the connection gives up on WAIT first",
                    response_timeout.as_millis()
                ),
            });
        }
        Ok(())
    }
}

/// What gives a reservation back when its receipt is dropped without having been settled: a
/// release (to the end of the queue, as [`Transport::release`] with no delay puts it), spawned on
/// the Tokio runtime the receipt is dropped in. Shared by the copies of one receipt, so the last
/// copy dropped decides.
///
/// A settle that got the server's answer (done, or no longer held) counts as settled, so a
/// settled reservation is never released again; one whose answer was lost is released, which the
/// gated script turns into nothing when the settle did happen. With no runtime to spawn on (a
/// receipt dropped outside one, or while it shuts down), or once its transport is gone, the
/// reservation comes back when its deadline lapses (`reservation_deadline`, `retry_after`).
pub(super) struct GiveBack {
    settled: AtomicBool,
    release: Option<Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send + Sync>>,
}

impl GiveBack {
    /// A guard that runs `release` when dropped unsettled.
    pub(super) fn new<F>(release: impl FnOnce() -> F + Send + Sync + 'static) -> Arc<Self>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        Arc::new(Self {
            settled: AtomicBool::new(false),
            release: Some(Box::new(move || Box::pin(release()))),
        })
    }

    /// Marks the reservation settled, when a guard exists.
    pub(super) fn settled(guard: Option<&Arc<Self>>) {
        if let Some(guard) = guard {
            guard.settled.store(true, Ordering::Release);
        }
    }
}

impl std::fmt::Debug for GiveBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GiveBack")
            .field("settled", &self.settled.load(Ordering::Acquire))
            .finish_non_exhaustive()
    }
}

impl Drop for GiveBack {
    fn drop(&mut self) {
        if self.settled.load(Ordering::Acquire) {
            return;
        }
        let (Some(release), Ok(runtime)) = (self.release.take(), Handle::try_current()) else {
            return;
        };
        runtime.spawn(release());
    }
}

/// A guard that releases `receipt` (one that gives nothing back itself) of `queue` through the
/// transport `revive` makes of `inner`, as long as that transport still exists.
pub(super) fn release_on_drop<I, T>(
    inner: &Arc<I>,
    revive: fn(Arc<I>) -> T,
    receipt: T::Receipt,
    queue: String,
) -> Arc<GiveBack>
where
    I: Send + Sync + 'static,
    T: Transport,
{
    let inner = Arc::downgrade(inner);
    GiveBack::new(move || async move {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let released = revive(inner).release(&receipt, Duration::ZERO).await;
        gave_back(&queue, released);
    })
}

/// Logs the outcome of a release on drop: a reservation no longer held was settled or swept
/// meanwhile, anything else returns when its deadline lapses.
fn gave_back(queue: &str, released: crate::Result<()>) {
    match released {
        Ok(()) => tracing::debug!(queue, "a reservation dropped unsettled was released"),
        Err(crate::Error::Redis {
            kind: RedisErrorKind::ReservationLost,
            ..
        }) => {}
        Err(error) => {
            tracing::warn!(queue, %error, "could not release a reservation dropped unsettled; it returns when its deadline lapses")
        }
    }
}

/// A score `seconds` after `now`, as the scripts take it: whole seconds, a fraction rounded up,
/// or `+inf` for never.
fn deadline_score(now: i64, after: Option<Duration>) -> String {
    match after {
        Some(after) => now.saturating_add(whole_seconds_up(after)).to_string(),
        None => "+inf".to_owned(),
    }
}

/// Runs the [`scripts::EXTEND`] script: `member` of the sorted set `set` gets the deadline
/// `after` from now, while it is still there.
async fn extend_member(
    connection: &connection::Connection,
    set: String,
    member: &[u8],
    after: Option<Duration>,
) -> crate::Result<bool> {
    let mut extend = scripts::Call::new(&scripts::EXTEND);
    extend
        .key(&set)
        .arg(member)
        .arg(deadline_score(connection::now_seconds(), after));
    let extended: i64 = connection
        .invoke(&extend, || format!("extend a reservation in {set:?}"))
        .await?;
    Ok(extended == 1)
}

/// How long a reservation scored `after` from now is sure to stay held: the score counts whole
/// seconds from the floor of now, and a sweep lapses it once the floor of its own now reaches
/// it, so up to a second is lost. `None` for no deadline, or one of a second or less.
fn surely_held_for(after: Option<Duration>) -> Option<Duration> {
    let seconds = u64::try_from(whole_seconds_up(after?)).unwrap_or(u64::MAX);
    Some(Duration::from_secs(seconds.saturating_sub(1))).filter(|held| !held.is_zero())
}

fn whole_seconds_up(duration: Duration) -> i64 {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i64::try_from(seconds).unwrap_or(i64::MAX)
}

/// Tries `try_reserve` until it yields a job or `wait` has passed, blocking on `wait_for_work` for
/// at most `block_slice` between tries so that work arriving meanwhile is taken at once.
async fn reserve_within<R, Try, Block>(
    wait: Duration,
    block_slice: Duration,
    try_reserve: impl Fn() -> Try,
    wait_for_work: impl Fn(Duration) -> Block,
) -> crate::Result<Option<R>>
where
    Try: Future<Output = crate::Result<Option<R>>>,
    Block: Future<Output = crate::Result<()>>,
{
    let started = Instant::now();
    loop {
        if let Some(reserved) = try_reserve().await? {
            return Ok(Some(reserved));
        }
        let left = wait.saturating_sub(started.elapsed());
        if left < Duration::from_millis(1) {
            return Ok(None);
        }
        wait_for_work(left.min(block_slice)).await?;
    }
}

/// Moves `receipts`, all of `queue`, to its end with `bulk`, one script that answers for each
/// (each receipt is then marked with `settled`); one at a time when it does not answer.
async fn move_in_one_script<T: Transport>(
    transport: &T,
    connection: &connection::Connection,
    queue: &str,
    receipts: &[&T::Receipt],
    bulk: &scripts::Call,
    settled: impl Fn(&T::Receipt),
) -> Vec<crate::Result<()>> {
    let operation = || {
        format!(
            "move {} reservations of {queue:?} to its end",
            receipts.len()
        )
    };
    match connection
        .settle_each(bulk, receipts.len(), operation)
        .await
    {
        Some(moved) => {
            receipts.iter().for_each(|receipt| settled(receipt));
            moved
        }
        None => move_each_to_end(transport, receipts).await,
    }
}

/// The queue every receipt was reserved from, when there are some and they share one.
fn one_queue<'a>(mut queues: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let first = queues.next()?;
    queues.all(|queue| queue == first).then_some(first)
}

/// `text` as a `SCAN MATCH` glob that matches only itself.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_layout_names_its_keys_from_the_options() {
        let options = RedisOptions::new();
        assert_eq!(
            options.default_layout_keys("jobs"),
            ["jobs", "jobs:processing:deadlines", "jobs:processing"]
        );
        assert_eq!(
            options.laravel_layout_keys("jobs"),
            [
                "queues:jobs:notify",
                "queues:jobs:reserved",
                "queues:jobs:delayed",
                "queues:jobs"
            ]
        );
        let custom = RedisOptions::new()
            .processing_suffix(":busy")
            .key_prefix("app:");
        assert_eq!(custom.processing_key("jobs"), "jobs:busy");
        assert_eq!(custom.laravel_key("jobs"), "app:jobs");
        for key in custom
            .default_layout_keys("jobs")
            .into_iter()
            .chain(custom.laravel_layout_keys("jobs"))
        {
            assert_eq!(custom.queue_of_key(&key), "jobs", "{key}");
        }
        assert_eq!(custom.queue_of_key("queues:jobs"), "queues:jobs");
    }

    #[test]
    fn a_reservation_is_sure_to_hold_its_deadline_less_the_second_its_score_can_lose() {
        let held = |millis| surely_held_for(Some(Duration::from_millis(millis)));
        assert_eq!(held(90_000), Some(Duration::from_secs(89)));
        assert_eq!(held(1_500), Some(Duration::from_secs(1)));
        assert_eq!(held(2_000), Some(Duration::from_secs(1)));
        assert_eq!(held(1_000), None, "a one-second deadline can lapse at once");
        assert_eq!(held(0), None);
        assert_eq!(
            surely_held_for(None),
            None,
            "no deadline, nothing to extend"
        );
    }

    #[test]
    fn a_hash_tag_keeps_every_key_of_either_layout_in_one_slot() {
        use redis::cluster_routing::Slot;
        let one_slot = |keys: Vec<String>| {
            keys.windows(2)
                .all(|pair| Slot::for_key(&pair[0]) == Slot::for_key(&pair[1]))
        };
        let every_key = |options: &RedisOptions, queue: &str| {
            let dlq = options.dead_letter_queue(queue);
            let mut keys = options.default_layout_keys(queue).to_vec();
            keys.extend(options.laravel_layout_keys(queue));
            keys.extend([dlq.clone(), options.laravel_key(&dlq)]);
            keys
        };
        let options = RedisOptions::new();
        assert!(one_slot(every_key(&options, "{orders}")));
        assert!(one_slot(every_key(&options, "{orders}.high")));
        assert!(!one_slot(every_key(&options, "orders")));
        // An empty tag is no tag.
        assert!(!one_slot(every_key(&options, "{}orders")));
        let custom = RedisOptions::new()
            .processing_suffix("-busy")
            .dlq_suffix("-dead")
            .key_prefix("app:");
        assert!(one_slot(every_key(&custom, "{orders}")));
    }

    #[test]
    fn scores_are_whole_seconds_rounded_up_or_infinite() {
        assert_eq!(deadline_score(100, Some(Duration::from_secs(90))), "190");
        assert_eq!(deadline_score(100, Some(Duration::from_millis(1))), "101");
        assert_eq!(deadline_score(100, Some(Duration::ZERO)), "100");
        assert_eq!(deadline_score(100, None), "+inf");
        assert_eq!(
            deadline_score(i64::MAX - 1, Some(Duration::from_secs(5))),
            i64::MAX.to_string()
        );
    }

    #[test]
    fn options_refuse_what_would_break_the_layout() {
        let option = |options: RedisOptions| match options.validate() {
            Err(crate::Error::InvalidOption { option, .. }) => option,
            other => panic!("expected an invalid option, got {other:?}"),
        };
        assert_eq!(
            option(RedisOptions::new().processing_suffix("")),
            "processing_suffix"
        );
        assert_eq!(option(RedisOptions::new().dlq_suffix("")), "dlq_suffix");
        assert_eq!(
            option(RedisOptions::new().block_slice(Duration::ZERO)),
            "block_slice"
        );
        assert_eq!(
            option(RedisOptions::new().block_slice(Duration::from_secs(2))),
            "block_slice"
        );
        assert_eq!(option(RedisOptions::new().prefetch(0)), "prefetch");
        assert_eq!(option(RedisOptions::new().prefetch(1001)), "prefetch");
        assert!(RedisOptions::new().validate().is_ok());
    }

    #[test]
    fn batch_is_all_unless_bounded() {
        assert_eq!(RedisOptions::new().batch_arg(), -1);
        assert_eq!(
            RedisOptions::new()
                .migration_batch(NonZeroUsize::new(100))
                .batch_arg(),
            100
        );
    }
}
