//! The default Redis layout, shared by the Go, Python, Node, Java, .NET and PHP SDKs.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::connection::{Connection, block_seconds, now_seconds};
use super::{
    GiveBack, RedisOptions, deadline_score, extend_member, glob_escape, move_in_one_script,
    one_queue, release_on_drop, reserve_within, scripts, surely_held_for,
};
use crate::projection::{frame, unframe};
use crate::transport::{Capabilities, Headers, Reserved, Transport, move_each_to_end};

/// The default Redis layout: the one every BabelQueue SDK shares, keys named after the queue
/// verbatim.
///
/// | key | type | role |
/// |---|---|---|
/// | `<queue>` | list | ready jobs; [`publish`](Transport::publish) is `RPUSH` |
/// | `<queue>:processing` | list | reservations, moved there atomically from the head (FIFO) |
/// | `<queue>:processing:deadlines` | sorted set | `<token>:<stored value>` scored its deadline |
/// | `<queue>.dlq` | list | the dead-letter queue |
///
/// A deadline member's token is 32 hex digits, one per reservation, and its score the reserve's
/// `floor(now) + deadline`, in epoch seconds.
///
/// Before every reserve a sweep returns lapsed reservations to the end of their queue, bytes and
/// `attempts` unchanged, so a worker killed mid-job loses nothing; a settle acts only while its
/// own deadline member exists, so a late settle of a swept reservation touches nothing
/// (Python 1.24's scheme, ADR-0033: each side recovers the other's reservations).
///
/// Out-of-band headers ride in the `__bq_frame` header frame
/// ([`projection::frame`](crate::projection::frame)); the stored value, frame or bare envelope,
/// is the reservation's handle. This layout cannot delay, so the `delay` of a retry or release
/// is ignored: the message goes to the end of the queue at once.
///
/// ```no_run
/// use std::time::Duration;
/// use babelqueue::transport::Transport;
/// use babelqueue::transport::redis::{RedisOptions, RedisTransport};
///
/// # async fn run() -> babelqueue::Result<()> {
/// let redis = RedisTransport::connect("redis://127.0.0.1:6379/0", RedisOptions::new()).await?;
/// let body = babelqueue::make(
///     "urn:babel:orders:created",
///     &serde_json::json!({"order_id": 1042}),
///     babelqueue::MakeOptions::new().queue("orders"),
/// )?
/// .encode()?;
/// redis.publish("orders", body.into(), &[]).await?;
/// if let Some(job) = redis.reserve("orders", Duration::from_secs(5)).await? {
///     // … handle job.body …
///     redis.ack(&job.receipt).await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RedisTransport {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    connection: Connection,
    options: RedisOptions,
    /// Reserved by a prefetching reserve and not handed out yet, per queue, in queue order.
    held: Mutex<HashMap<String, VecDeque<Held>>>,
}

#[derive(Debug)]
struct Held {
    since: Instant,
    reserved: Reserved<RedisReceipt>,
}

/// A reservation on the default layout: the value as stored in `<queue>:processing` and the
/// token of its deadline member `<token>:<value>`.
///
/// Dropped without having been settled (the last copy of it, when cloned), it releases the
/// reservation to the end of its queue in a task spawned on the current Tokio runtime, so the
/// message is delivered again now rather than when its deadline lapses; without a runtime, or
/// once its transport is gone, the deadline sweep returns it. A settled one does nothing.
#[derive(Debug, Clone)]
pub struct RedisReceipt {
    queue: String,
    stored: Bytes,
    token: String,
    headers: Headers,
    give_back: Option<Arc<GiveBack>>,
}

impl RedisReceipt {
    /// The queue it was reserved from.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The value exactly as stored: the bare envelope, or its header frame.
    pub fn stored(&self) -> &Bytes {
        &self.stored
    }

    /// The reservation token: 32 lowercase hex digits.
    pub fn token(&self) -> &str {
        &self.token
    }
}

impl RedisTransport {
    /// Connects to the server at `url`: `redis://host[:port][/db]`, `rediss://` for TLS,
    /// `redis+sentinel://host:port[,host:port…]/service[/db]` for the master Redis Sentinel
    /// names, or `redis+cluster://host:port[,host:port…]` for a Redis Cluster (queues named
    /// with a hash tag, `{orders}`); any of them with `?wait_replicas=N&wait_timeout_ms=T`
    /// ([`RedisOptions::wait_for_replicas`]).
    ///
    /// # Errors
    /// [`Error::UnsupportedUrl`](crate::Error::UnsupportedUrl) for a URL that is not a Redis
    /// one, [`Error::InvalidOption`](crate::Error::InvalidOption) for options out of range, and
    /// [`Error::Redis`](crate::Error::Redis) when the server cannot be reached.
    pub async fn connect(url: &str, options: RedisOptions) -> crate::Result<Self> {
        let connection = Connection::open(url, &options).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                connection,
                options,
                held: Mutex::default(),
            }),
        })
    }

    /// The options it was connected with.
    pub fn options(&self) -> &RedisOptions {
        &self.inner.options
    }

    /// Up to `limit` values of the list `key`, head first, exactly as stored, read with
    /// `LRANGE`: nothing is reserved or taken. None when `key` is not a list. For tools that
    /// look at a queue of either layout (the connection is the same) without working it.
    pub async fn read_list(&self, key: &str, limit: usize) -> crate::Result<Vec<Bytes>> {
        let connection = &self.inner.connection;
        let kind: String = connection
            .query(redis::cmd("TYPE").arg(key), || {
                format!("read the type of {key:?}")
            })
            .await?;
        if kind != "list" {
            return Ok(Vec::new());
        }
        let limit = u64::try_from(limit).unwrap_or(u64::MAX);
        connection.list_head(key, Some(limit)).await
    }

    /// Every key holding a list or a sorted set, the types both layouts keep queues in,
    /// found with `SCAN ... TYPE` (incremental, no `KEYS`); pair with
    /// [`RedisOptions::queue_of_key`] to name the queues.
    pub async fn scan_queue_keys(&self) -> crate::Result<Vec<String>> {
        let connection = &self.inner.connection;
        let mut keys = connection.keys_matching("*", "list").await?;
        keys.extend(connection.keys_matching("*", "zset").await?);
        Ok(keys)
    }

    /// How many values the key holds: `LLEN` of a list, `ZCARD` of a sorted set (the types both
    /// layouts keep queues in), 0 for a key that does not exist or holds anything else. For
    /// tools that count a queue of either layout: ready, in flight, delayed, dead.
    pub async fn key_len(&self, key: &str) -> crate::Result<u64> {
        let connection = &self.inner.connection;
        let kind: String = connection
            .query(redis::cmd("TYPE").arg(key), || {
                format!("read the type of {key:?}")
            })
            .await?;
        let command = match kind.as_str() {
            "list" => "LLEN",
            "zset" => "ZCARD",
            _ => return Ok(0),
        };
        connection
            .query(redis::cmd(command).arg(key), || {
                format!("count the values of {key:?}")
            })
            .await
    }

    /// Whether any of `keys` exists (`EXISTS`).
    pub async fn any_exists(&self, keys: &[String]) -> crate::Result<bool> {
        let count: u64 = self
            .inner
            .connection
            .query(redis::cmd("EXISTS").arg(keys), || {
                format!("look for the keys {keys:?}")
            })
            .await?;
        Ok(count > 0)
    }

    /// The in-flight list of `queue`: `<queue>:processing`.
    pub fn processing_key(&self, queue: &str) -> String {
        self.inner.options.processing_key(queue)
    }

    /// The deadline set of `queue`: `<queue>:processing:deadlines`.
    pub fn deadlines_key(&self, queue: &str) -> String {
        format!("{}:deadlines", self.processing_key(queue))
    }

    /// Up to `limit` stored values (all with `None`) from the head of `queue`, in order,
    /// without taking any (`LRANGE`). A value is the body, or the `__bq_frame` header frame
    /// around it ([`crate::inspect::Inspection::of_input`] reads both).
    pub async fn browse(&self, queue: &str, limit: Option<u64>) -> crate::Result<Vec<Bytes>> {
        self.inner.connection.list_head(queue, limit).await
    }

    /// Removes each of the stored values `stored` once from `queue`, as
    /// [`browse`](Self::browse) returned them, in one atomic pass over the queue however many
    /// there are: a value given `n` times takes the first `n` equal ones from the head and no
    /// more. Answers how many went: fewer when the queue holds some no longer.
    pub async fn remove_all(&self, queue: &str, stored: &[impl AsRef<[u8]>]) -> crate::Result<u64> {
        self.inner.connection.list_remove_all(queue, stored).await
    }

    /// Appends a stored value to `queue` byte for byte (`RPUSH`), frame and all, as
    /// [`browse`](Self::browse) returned it.
    pub async fn push_stored(&self, queue: &str, stored: &[u8]) -> crate::Result<()> {
        let _length: i64 = self
            .inner
            .connection
            .query_durable(redis::cmd("RPUSH").arg(queue).arg(stored), || {
                format!("publish to {queue:?}")
            })
            .await?;
        Ok(())
    }

    /// Removes every message of `queue` at once and answers how many there were.
    pub async fn purge(&self, queue: &str) -> crate::Result<u64> {
        self.inner.connection.list_purge(queue).await
    }

    /// Deletes `queue` and its dead-letter queue, each with the in-flight list and deadline set
    /// this layout keeps beside it, in one `DEL`, and answers how many of those keys existed.
    /// Their messages go with them, reserved ones too: a settle of one of those reservations
    /// then fails as no longer held, and what this transport had prefetched from `queue` is
    /// forgotten. For tearing down a queue nothing works on any more (a test's, a benchmark's).
    ///
    /// # Errors
    /// [`RedisErrorKind::CrossSlot`](super::RedisErrorKind::CrossSlot) on a cluster for a queue
    /// without a hash tag, before anything is sent; [`Error::Redis`](crate::Error::Redis) when
    /// the server cannot be reached.
    pub async fn delete_queue(&self, queue: &str) -> crate::Result<u64> {
        let options = &self.inner.options;
        let mut keys = options.default_layout_keys(queue).to_vec();
        keys.extend(options.default_layout_keys(&options.dead_letter_queue(queue)));
        let deleted = self
            .inner
            .connection
            .delete_keys(queue, &keys, || format!("delete the queue {queue:?}"))
            .await?;
        self.inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(queue);
        Ok(deleted)
    }

    /// The dead-letter queues on the server: every list named `<queue><dlq suffix>`, except
    /// those under the Laravel layout's key prefix (see
    /// [`LaravelTransport::dead_letter_queues`](super::LaravelTransport::dead_letter_queues)).
    pub async fn dead_letter_queues(&self) -> crate::Result<Vec<String>> {
        let options = &self.inner.options;
        let pattern = format!("*{}", glob_escape(&options.dlq_suffix));
        let keys = self
            .inner
            .connection
            .keys_matching(&pattern, "list")
            .await?;
        Ok(keys
            .into_iter()
            .filter(|key| !key.starts_with(&options.key_prefix))
            .collect())
    }

    /// A message reserved earlier by a prefetching reserve, or else the sweep and reserve
    /// script; `None` when the queue is empty.
    async fn try_reserve(&self, queue: &str) -> crate::Result<Option<Reserved<RedisReceipt>>> {
        if let Some(held) = self.take_held(queue).await {
            return Ok(Some(held));
        }
        self.check_queue(queue, || format!("reserve from {queue:?}"))?;
        let options = &self.inner.options;
        let tokens: Vec<String> = (0..options.prefetch)
            .map(|_| format!("{:032x}", rand::random::<u128>()))
            .collect();
        let now = now_seconds();
        let mut reserve = scripts::Call::new(&scripts::RESERVE);
        reserve
            .key(queue)
            .key(self.processing_key(queue))
            .key(self.deadlines_key(queue))
            .arg(now)
            .arg(options.batch_arg())
            .arg(deadline_score(now, options.reservation_deadline))
            .arg(&tokens);
        let taken: Vec<Vec<u8>> = self
            .inner
            .connection
            .invoke(&reserve, || format!("reserve from {queue:?}"))
            .await?;
        let mut taken = taken
            .into_iter()
            .zip(tokens)
            .map(|(stored, token)| reservation(&self.inner, queue, Bytes::from(stored), token));
        let first = taken.next();
        let mut rest = taken.peekable();
        if rest.peek().is_some() {
            let since = Instant::now();
            let mut held = self
                .inner
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            held.entry(queue.to_owned())
                .or_default()
                .extend(rest.map(|reserved| Held { since, reserved }));
        }
        Ok(first)
    }

    /// Blocks for at most `slice` until `queue` holds something.
    async fn wait_for_work(&self, queue: &str, slice: Duration) -> crate::Result<()> {
        // Moving the tail of the queue to its own tail changes nothing, but blocks until the
        // queue holds something: the reserve itself stays in the script above, atomic with
        // its deadline member. Dropping this wait midway is harmless for the same reason.
        let _tail: redis::Value = self
            .inner
            .connection
            .block(
                redis::cmd("BLMOVE")
                    .arg(queue)
                    .arg(queue)
                    .arg("RIGHT")
                    .arg("RIGHT")
                    .arg(block_seconds(slice)),
                || format!("wait for work on {queue:?}"),
            )
            .await?;
        Ok(())
    }

    /// The next held message of `queue` that is still well within its deadline; the ones held
    /// too long go back to the end of the queue instead.
    async fn take_held(&self, queue: &str) -> Option<Reserved<RedisReceipt>> {
        let fresh_for = self
            .inner
            .options
            .reservation_deadline
            .map(|deadline| deadline / 2);
        let mut stale = Vec::new();
        let fresh = {
            let mut held = self
                .inner
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let waiting = held.get_mut(queue)?;
            loop {
                match waiting.pop_front() {
                    Some(next) if fresh_for.is_none_or(|limit| next.since.elapsed() < limit) => {
                        break Some(next.reserved);
                    }
                    Some(next) => stale.push(next.reserved.receipt),
                    None => break None,
                }
            }
        };
        for receipt in stale {
            self.put_back(&receipt, End::Tail).await;
        }
        fresh
    }

    /// Puts a held reservation back at one end of its queue, unchanged. A failure is only
    /// logged: the reservation is then swept back when its deadline lapses.
    async fn put_back(&self, receipt: &RedisReceipt, end: End) {
        let put_back = self
            .settle(
                receipt,
                Some((&receipt.queue, &receipt.stored, end)),
                || format!("put back a prefetched message of {:?}", receipt.queue),
            )
            .await;
        if let Err(error) = put_back {
            tracing::warn!(queue = %receipt.queue, error = %polyq_amqp::error_chain(&error), "could not put back a prefetched message; it returns when its deadline lapses");
        }
    }

    /// Refuses, on a cluster, a queue whose keys (with its dead-letter queue's) span slots.
    fn check_queue(&self, queue: &str, operation: impl FnOnce() -> String) -> crate::Result<()> {
        let options = &self.inner.options;
        let mut keys = options.default_layout_keys(queue).to_vec();
        keys.push(options.dead_letter_queue(queue));
        self.inner.connection.check_queue(queue, &keys, operation)
    }

    /// The value to store for `body` with `headers`: the bare body when no header survives
    /// (blank names and values are dropped), else its header frame.
    fn stored_value(
        &self,
        body: Bytes,
        headers: &[(String, String)],
        operation: impl FnOnce() -> String,
    ) -> crate::Result<Bytes> {
        if headers
            .iter()
            .all(|(name, value)| name.is_empty() || value.is_empty())
        {
            return Ok(body);
        }
        let Ok(text) = std::str::from_utf8(&body) else {
            return Err(self.inner.connection.unframeable(operation()));
        };
        let pairs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        Ok(match frame(text, &pairs) {
            Cow::Owned(framed) => Bytes::from(framed),
            Cow::Borrowed(_) => body,
        })
    }

    /// Runs the gated settle script: removes the reservation and, with a target, pushes a value
    /// to that end of that list in the same step.
    async fn settle(
        &self,
        receipt: &RedisReceipt,
        target: Option<(&str, &[u8], End)>,
        operation: impl Fn() -> String,
    ) -> crate::Result<()> {
        let mut settle = scripts::Call::new(&scripts::SETTLE);
        settle
            .key(self.processing_key(&receipt.queue))
            .key(self.deadlines_key(&receipt.queue))
            .arg(&receipt.token)
            .arg(&receipt.stored[..]);
        if let Some((list, value, end)) = target {
            settle.key(list).arg(value);
            if end == End::Head {
                settle.arg("head");
            }
        }
        let settled: i64 = self
            .inner
            .connection
            .invoke_durable(&settle, &operation)
            .await?;
        GiveBack::settled(receipt.give_back.as_ref());
        if settled == 1 {
            Ok(())
        } else {
            Err(self.inner.connection.lost(operation()))
        }
    }
}

/// Which end of a list a settle pushes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// In front: handed out next, as if never taken.
    Head,
    /// Behind everything else.
    Tail,
}

/// A stored value as handed over: unframed, with its headers and receipt.
fn reservation(
    inner: &Arc<Inner>,
    queue: &str,
    stored: Bytes,
    token: String,
) -> Reserved<RedisReceipt> {
    let (body, headers) = match std::str::from_utf8(&stored) {
        Ok(text) => match unframe(text) {
            (Cow::Owned(body), headers) => (Bytes::from(body), headers),
            (Cow::Borrowed(_), headers) => (stored.clone(), headers),
        },
        Err(_) => (stored.clone(), Vec::new()),
    };
    Reserved {
        body,
        headers: headers.clone(),
        broker_attempts: None,
        receipt: RedisReceipt {
            give_back: Some(give_back(inner, queue, &stored, &token)),
            queue: queue.to_owned(),
            stored,
            token,
            headers,
        },
    }
}

/// Releases the reservation `token` of `stored` when its receipt is dropped unsettled.
fn give_back(inner: &Arc<Inner>, queue: &str, stored: &Bytes, token: &str) -> Arc<GiveBack> {
    let receipt = RedisReceipt {
        queue: queue.to_owned(),
        stored: stored.clone(),
        token: token.to_owned(),
        headers: Headers::new(),
        give_back: None,
    };
    release_on_drop(
        inner,
        |inner| RedisTransport { inner },
        receipt,
        queue.to_owned(),
    )
}

impl Transport for RedisTransport {
    type Receipt = RedisReceipt;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            delay: false,
            headers: true,
        }
    }

    async fn publish(
        &self,
        queue: &str,
        body: Bytes,
        headers: &[(String, String)],
    ) -> crate::Result<()> {
        let operation = || format!("publish to {queue:?}");
        self.check_queue(queue, operation)?;
        let value = self.stored_value(body, headers, operation)?;
        let _length: i64 = self
            .inner
            .connection
            .query_durable(redis::cmd("RPUSH").arg(queue).arg(&value[..]), operation)
            .await?;
        Ok(())
    }

    async fn reserve(
        &self,
        queue: &str,
        wait: Duration,
    ) -> crate::Result<Option<Reserved<RedisReceipt>>> {
        reserve_within(
            wait,
            self.inner.options.block_slice,
            || self.try_reserve(queue),
            |slice| self.wait_for_work(queue, slice),
        )
        .await
    }

    async fn ack(&self, receipt: &RedisReceipt) -> crate::Result<()> {
        self.settle(receipt, None, || {
            format!("ack a reservation of {:?}", receipt.queue)
        })
        .await
    }

    async fn retry(
        &self,
        receipt: &RedisReceipt,
        queue: &str,
        body: Bytes,
        headers: &[(String, String)],
        _delay: Duration,
    ) -> crate::Result<()> {
        let operation = || format!("retry a reservation of {:?} on {queue:?}", receipt.queue);
        let value = self.stored_value(body, headers, operation)?;
        self.settle(receipt, Some((queue, &value, End::Tail)), operation)
            .await
    }

    async fn release(&self, receipt: &RedisReceipt, _delay: Duration) -> crate::Result<()> {
        self.settle(
            receipt,
            Some((&receipt.queue, &receipt.stored, End::Tail)),
            || format!("release a reservation of {:?}", receipt.queue),
        )
        .await
    }

    /// A release: this layout always releases to the end of the queue, frame and all.
    async fn move_to_end(&self, receipt: &RedisReceipt) -> crate::Result<()> {
        self.release(receipt, Duration::ZERO).await
    }

    /// Reservations of one queue move in one script run, in order; others one at a time.
    async fn move_all_to_end(&self, receipts: &[&RedisReceipt]) -> Vec<crate::Result<()>> {
        let Some(queue) = one_queue(receipts.iter().map(|receipt| receipt.queue.as_str())) else {
            return move_each_to_end(self, receipts).await;
        };
        let mut settle = scripts::Call::new(&scripts::SETTLE_ALL_TO_END);
        settle
            .key(self.processing_key(queue))
            .key(self.deadlines_key(queue))
            .key(queue);
        for receipt in receipts {
            settle.arg(&receipt.token).arg(&receipt.stored[..]);
        }
        move_in_one_script(
            self,
            &self.inner.connection,
            queue,
            receipts,
            &settle,
            |receipt| GiveBack::settled(receipt.give_back.as_ref()),
        )
        .await
    }

    fn reservation_holds_for(&self) -> Option<Duration> {
        surely_held_for(self.inner.options.reservation_deadline)
    }

    /// Rescores its member `<token>:<value>` in `<queue>:processing:deadlines`.
    async fn extend_reservation(&self, receipt: &RedisReceipt) -> crate::Result<bool> {
        let mut member = format!("{}:", receipt.token).into_bytes();
        member.extend_from_slice(&receipt.stored);
        extend_member(
            &self.inner.connection,
            self.deadlines_key(&receipt.queue),
            &member,
            self.inner.options.reservation_deadline,
        )
        .await
    }

    /// `LLEN <queue>`.
    async fn depth(&self, queue: &str) -> crate::Result<u64> {
        self.inner
            .connection
            .query(redis::cmd("LLEN").arg(queue), || {
                format!("count the messages of {queue:?}")
            })
            .await
    }

    async fn unsubscribe(&self, queue: &str) -> crate::Result<()> {
        let held = self
            .inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(queue)
            .unwrap_or_default();
        // Pushed to the head last one first, they are back in front in the order they were in.
        for held in held.into_iter().rev() {
            self.put_back(&held.reserved.receipt, End::Head).await;
        }
        Ok(())
    }

    /// `<queue><dlq suffix>` ([`RedisOptions::dlq_suffix`]).
    fn dead_letter_queue(&self, queue: &str) -> String {
        self.inner.options.dead_letter_queue(queue)
    }

    async fn dead_letter(
        &self,
        receipt: &RedisReceipt,
        dlq: &str,
        body: Bytes,
    ) -> crate::Result<()> {
        let operation = || {
            format!(
                "dead-letter a reservation of {:?} to {dlq:?}",
                receipt.queue
            )
        };
        // The headers that came with the message stay with it in the dead-letter queue, as the
        // other SDKs keep them; a body that cannot be framed goes bare rather than not at all.
        let value = self
            .stored_value(body.clone(), &receipt.headers, operation)
            .unwrap_or_else(|_| {
                tracing::warn!(
                    queue = %receipt.queue,
                    dlq,
                    "the dead-letter body is not UTF-8, so it is stored without the message's headers"
                );
                body
            });
        self.settle(receipt, Some((dlq, &value, End::Tail)), operation)
            .await
    }
}
