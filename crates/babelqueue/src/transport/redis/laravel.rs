//! Laravel's Redis queue layout, as the BabelQueue Laravel driver and the Python SDK's
//! `laravel_compat=True` use it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::connection::{Connection, block_seconds, now_seconds};
use super::{
    GiveBack, RedisOptions, deadline_score, extend_member, glob_escape, move_in_one_script,
    one_queue, release_on_drop, reserve_within, scripts, surely_held_for, whole_seconds_up,
};
use crate::transport::{Capabilities, Reserved, Transport, move_each_to_end};

/// Laravel's Redis queue layout, keys under a prefix (default `queues:`):
///
/// | key | type | role |
/// |---|---|---|
/// | `queues:<queue>` | list | ready jobs |
/// | `queues:<queue>:notify` | list | one wake-up token per job made ready |
/// | `queues:<queue>:reserved` | sorted set | reserved copies scored reserved-until |
/// | `queues:<queue>:delayed` | sorted set | released and delayed jobs scored available-at |
/// | `queues:<queue>.dlq` | list | the dead-letter queue (a Laravel queue of its own) |
///
/// Scores are epoch seconds.
///
/// A pop first migrates due `:delayed` members and lapsed `:reserved` members back to the queue,
/// then reserves the head as Laravel does: the reserved member is the job re-encoded by the
/// server's cjson with `attempts + 1`, so a Laravel or Python worker can settle a reservation made
/// here and the reverse. A job that cjson cannot decode, or whose `attempts` is not a number, is
/// reserved raw. The job handed over is always the raw job as it was queued, never the
/// re-encoding; the reserved member is only the handle that settles it.
///
/// Jobs that went through Laravel's own release or a recovery come back as that cjson
/// re-encoding: `/` written `\/`, keys reordered, `[]` turned into `{}`, numbers shortened to 14
/// significant digits. They are ordinary JSON and decode as such.
///
/// Out-of-band headers cannot ride here (Laravel's reserve must decode the job, so no frame can
/// wrap it): they are dropped, as every SDK drops them on this layout, with a warning the first
/// time for each queue; `trace_id` inside the envelope still travels. Retries and releases can be delayed, in whole seconds rounded up.
///
/// ```no_run
/// use std::time::Duration;
/// use babelqueue::transport::Transport;
/// use babelqueue::transport::redis::{LaravelTransport, RedisOptions};
///
/// # async fn run() -> babelqueue::Result<()> {
/// let laravel = LaravelTransport::connect("redis://127.0.0.1:6379/0", RedisOptions::new()).await?;
/// if let Some(job) = laravel.reserve("orders", Duration::from_secs(5)).await? {
///     // Hand it back in 30 s, unchanged, to `queues:orders:delayed`.
///     laravel.release(&job.receipt, Duration::from_secs(30)).await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LaravelTransport {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    connection: Connection,
    options: RedisOptions,
    /// The queues a publish already dropped headers for: warned once each.
    headers_dropped: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// A reservation on the Laravel layout: the raw job and its member in `:reserved`.
///
/// One handed out by [`LaravelTransport`]'s reserve, dropped without having been settled (the
/// last copy of it, when cloned), releases the job through `:delayed`, due at once, in a task
/// spawned on the current Tokio runtime, so it is delivered again now rather than after
/// `retry_after`; without a runtime, or once its transport is gone, the next pop's migration
/// returns it when `retry_after` lapses. A settled one, or one made with
/// [`LaravelReceipt::new`], does nothing.
#[derive(Debug, Clone)]
pub struct LaravelReceipt {
    queue: String,
    job: Bytes,
    reserved: Bytes,
    give_back: Option<Arc<GiveBack>>,
}

impl LaravelReceipt {
    /// The receipt of a reservation made by any worker on this layout (Laravel, Python or this
    /// crate): `queue` as named without the prefix, the `job` it took off the queue and its exact
    /// `reserved` member. Lets one worker settle what another reserved; dropping it unsettled
    /// gives nothing back, as the reservation is not this receipt's own.
    pub fn new(queue: impl Into<String>, job: Bytes, reserved: Bytes) -> Self {
        Self {
            queue: queue.into(),
            job,
            reserved,
            give_back: None,
        }
    }

    /// Marks it settled, so that dropping it gives nothing back.
    fn settled(&self) {
        GiveBack::settled(self.give_back.as_ref());
    }

    /// The queue it was reserved from, without the prefix.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The job as it was queued, before the reserve re-encoded it.
    pub fn job(&self) -> &Bytes {
        &self.job
    }

    /// Its member in `:reserved`: the job re-encoded with `attempts + 1`, or the raw job when it
    /// could not be.
    pub fn reserved(&self) -> &Bytes {
        &self.reserved
    }
}

impl LaravelTransport {
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
                headers_dropped: std::sync::Mutex::default(),
            }),
        })
    }

    /// The options it was connected with.
    pub fn options(&self) -> &RedisOptions {
        &self.inner.options
    }

    /// The ready list of `queue`: `<prefix><queue>`, e.g. `queues:orders`; the other keys add
    /// `:notify`, `:reserved` and `:delayed` to it.
    pub fn key(&self, queue: &str) -> String {
        self.inner.options.laravel_key(queue)
    }

    /// Up to `limit` jobs (all with `None`) from the head of `queue`'s ready list, in order,
    /// without taking any (`LRANGE`).
    pub async fn browse(&self, queue: &str, limit: Option<u64>) -> crate::Result<Vec<Bytes>> {
        self.inner
            .connection
            .list_head(&self.key(queue), limit)
            .await
    }

    /// Removes each of `jobs` once from `queue`'s ready list, as [`browse`](Self::browse)
    /// returned them, in one atomic pass over the list however many there are: a job given `n`
    /// times takes the first `n` equal ones from the head and no more. Answers how many went:
    /// fewer when the list holds some no longer.
    pub async fn remove_all(&self, queue: &str, jobs: &[impl AsRef<[u8]>]) -> crate::Result<u64> {
        self.inner
            .connection
            .list_remove_all(&self.key(queue), jobs)
            .await
    }

    /// Removes every message of `queue`'s ready list at once and answers how many there were.
    pub async fn purge(&self, queue: &str) -> crate::Result<u64> {
        self.inner.connection.list_purge(&self.key(queue)).await
    }

    /// Deletes `queue` and its dead-letter queue, each with the `:notify`, `:reserved` and
    /// `:delayed` keys beside its ready list, in one `DEL`, and answers how many of those keys
    /// existed. Their jobs go with them, reserved and delayed ones too: a settle of one of
    /// those reservations then fails as no longer held. For tearing down a queue nothing works
    /// on any more (a test's, a benchmark's).
    ///
    /// # Errors
    /// [`RedisErrorKind::CrossSlot`](super::RedisErrorKind::CrossSlot) on a cluster for a queue
    /// without a hash tag, before anything is sent; [`Error::Redis`](crate::Error::Redis) when
    /// the server cannot be reached.
    pub async fn delete_queue(&self, queue: &str) -> crate::Result<u64> {
        let options = &self.inner.options;
        let mut keys = options.laravel_layout_keys(queue).to_vec();
        keys.extend(options.laravel_layout_keys(&options.dead_letter_queue(queue)));
        self.inner
            .connection
            .delete_keys(queue, &keys, || format!("delete the queue {queue:?}"))
            .await
    }

    /// The dead-letter queues on the server in this layout: every list
    /// `<prefix><queue><dlq suffix>`, named without the prefix.
    pub async fn dead_letter_queues(&self) -> crate::Result<Vec<String>> {
        let options = &self.inner.options;
        let pattern = format!(
            "{}*{}",
            glob_escape(&options.key_prefix),
            glob_escape(&options.dlq_suffix)
        );
        let keys = self
            .inner
            .connection
            .keys_matching(&pattern, "list")
            .await?;
        Ok(keys
            .into_iter()
            .filter_map(|key| key.strip_prefix(&options.key_prefix).map(str::to_owned))
            .collect())
    }

    /// Migrates what is due, then reserves the head of `queue`; `None` when it is empty.
    async fn try_reserve(&self, queue: &str) -> crate::Result<Option<Reserved<LaravelReceipt>>> {
        self.check_queue(queue, || format!("reserve from {queue:?}"))?;
        let options = &self.inner.options;
        let ready = self.key(queue);
        let now = now_seconds();
        let mut pop = scripts::Call::new(&scripts::LARAVEL_POP);
        pop.key(&ready)
            .key(format!("{ready}:reserved"))
            .key(format!("{ready}:notify"))
            .key(format!("{ready}:delayed"))
            .arg(now)
            .arg(options.batch_arg())
            .arg(deadline_score(now, options.retry_after))
            .arg(if options.retry_after.is_some() {
                "1"
            } else {
                "0"
            });
        let popped: Option<(Vec<u8>, Vec<u8>)> = self
            .inner
            .connection
            .invoke(&pop, || format!("reserve from {ready:?}"))
            .await?;
        Ok(popped.map(|(job, reserved)| {
            let job = Bytes::from(job);
            let receipt = LaravelReceipt::new(queue, job.clone(), Bytes::from(reserved));
            Reserved {
                body: job,
                headers: Vec::new(),
                broker_attempts: None,
                receipt: LaravelReceipt {
                    give_back: Some(self.give_back(receipt.clone())),
                    ..receipt
                },
            }
        }))
    }

    /// Refuses, on a cluster, a queue whose keys (with its dead-letter queue's) span slots.
    fn check_queue(&self, queue: &str, operation: impl FnOnce() -> String) -> crate::Result<()> {
        let options = &self.inner.options;
        let mut keys = options.laravel_layout_keys(queue).to_vec();
        keys.push(options.laravel_key(&options.dead_letter_queue(queue)));
        self.inner.connection.check_queue(queue, &keys, operation)
    }

    /// Releases the reservation of `receipt` (one that gives nothing back itself) when the
    /// receipt handed out with it is dropped unsettled.
    fn give_back(&self, receipt: LaravelReceipt) -> Arc<GiveBack> {
        let queue = receipt.queue.clone();
        release_on_drop(
            &self.inner,
            |inner| LaravelTransport { inner },
            receipt,
            queue,
        )
    }

    /// Blocks for at most `slice` until a job is made ready on `queue`.
    async fn wait_for_work(&self, queue: &str, slice: Duration) -> crate::Result<()> {
        // Laravel's wait: a token on the notify list says a job was made ready. The slice
        // bounds the wait so that due delayed jobs and lapsed reservations, which carry no
        // token until migrated, are picked up.
        let notify = format!("{}:notify", self.key(queue));
        let _token: redis::Value = self
            .inner
            .connection
            .block(
                redis::cmd("BLPOP").arg(&notify).arg(block_seconds(slice)),
                || format!("wait for work on {notify:?}"),
            )
            .await?;
        Ok(())
    }

    /// Moves a reservation to `queue`'s `:delayed` set as `body`, due `delay` from now.
    async fn hand_back(
        &self,
        receipt: &LaravelReceipt,
        queue: &str,
        body: &[u8],
        delay: Duration,
        operation: impl Fn() -> String,
    ) -> crate::Result<()> {
        let available_at = now_seconds().saturating_add(whole_seconds_up(delay));
        let mut release = scripts::Call::new(&scripts::LARAVEL_RELEASE);
        release
            .key(format!("{}:reserved", self.key(&receipt.queue)))
            .key(format!("{}:delayed", self.key(queue)))
            .arg(&receipt.reserved[..])
            .arg(body)
            .arg(available_at);
        let settled: i64 = self
            .inner
            .connection
            .invoke_durable(&release, &operation)
            .await?;
        receipt.settled();
        if settled == 1 {
            Ok(())
        } else {
            Err(self.inner.connection.lost(operation()))
        }
    }

    /// Pushes `body` to the end of `queue`'s ready list (with a wake-up token) and settles the
    /// reservation in one step, only while it is still held.
    async fn push_settled(
        &self,
        receipt: &LaravelReceipt,
        queue: &str,
        body: &[u8],
        operation: impl Fn() -> String,
    ) -> crate::Result<()> {
        let target = self.key(queue);
        let mut push = scripts::Call::new(&scripts::LARAVEL_SETTLE_PUSH);
        push.key(format!("{}:reserved", self.key(&receipt.queue)))
            .key(&target)
            .key(format!("{target}:notify"))
            .arg(&receipt.reserved[..])
            .arg(body);
        let settled: i64 = self
            .inner
            .connection
            .invoke_durable(&push, &operation)
            .await?;
        receipt.settled();
        if settled == 1 {
            Ok(())
        } else {
            Err(self.inner.connection.lost(operation()))
        }
    }
}

impl Transport for LaravelTransport {
    type Receipt = LaravelReceipt;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            delay: true,
            headers: false,
        }
    }

    async fn publish(
        &self,
        queue: &str,
        body: Bytes,
        headers: &[(String, String)],
    ) -> crate::Result<()> {
        if headers
            .iter()
            .any(|(name, value)| !name.is_empty() && !value.is_empty())
        {
            let first = self
                .inner
                .headers_dropped
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(queue.to_owned());
            if first {
                // Once per queue: a `traceparent` or `bq-replay-bypass` lost matters, and
                // every publish of a traced producer would repeat it.
                tracing::warn!(
                    queue,
                    "out-of-band headers (traceparent, bq-replay-bypass, ...) cannot ride on the \
                     Laravel layout; dropped (said once per queue)"
                );
            } else {
                tracing::debug!(
                    queue,
                    "out-of-band headers cannot ride on the Laravel layout; dropped"
                );
            }
        }
        let ready = self.key(queue);
        let operation = || format!("publish to {ready:?}");
        self.check_queue(queue, operation)?;
        let mut push = scripts::Call::new(&scripts::LARAVEL_PUSH);
        push.key(&ready)
            .key(format!("{ready}:notify"))
            .arg(&body[..]);
        let _pushed: i64 = self
            .inner
            .connection
            .invoke_durable(&push, operation)
            .await?;
        Ok(())
    }

    async fn reserve(
        &self,
        queue: &str,
        wait: Duration,
    ) -> crate::Result<Option<Reserved<LaravelReceipt>>> {
        reserve_within(
            wait,
            self.inner.options.block_slice,
            || self.try_reserve(queue),
            |slice| self.wait_for_work(queue, slice),
        )
        .await
    }

    async fn ack(&self, receipt: &LaravelReceipt) -> crate::Result<()> {
        let reserved = format!("{}:reserved", self.key(&receipt.queue));
        let operation = || format!("ack a reservation in {reserved:?}");
        let removed: i64 = self
            .inner
            .connection
            .query_durable(
                redis::cmd("ZREM").arg(&reserved).arg(&receipt.reserved[..]),
                operation,
            )
            .await?;
        receipt.settled();
        if removed == 1 {
            Ok(())
        } else {
            Err(self.inner.connection.lost(operation()))
        }
    }

    async fn retry(
        &self,
        receipt: &LaravelReceipt,
        queue: &str,
        body: Bytes,
        _headers: &[(String, String)],
        delay: Duration,
    ) -> crate::Result<()> {
        self.hand_back(receipt, queue, &body, delay, || {
            format!("retry a reservation of {:?} on {queue:?}", receipt.queue)
        })
        .await
    }

    async fn release(&self, receipt: &LaravelReceipt, delay: Duration) -> crate::Result<()> {
        self.hand_back(receipt, &receipt.queue, &receipt.job, delay, || {
            format!("release a reservation of {:?}", receipt.queue)
        })
        .await
    }

    fn reservation_holds_for(&self) -> Option<Duration> {
        surely_held_for(self.inner.options.retry_after)
    }

    /// Rescores its reserved member in `:reserved`, the reserved-until every Laravel, Python
    /// and polyq pop migrates by.
    async fn extend_reservation(&self, receipt: &LaravelReceipt) -> crate::Result<bool> {
        extend_member(
            &self.inner.connection,
            format!("{}:reserved", self.key(&receipt.queue)),
            &receipt.reserved,
            self.inner.options.retry_after,
        )
        .await
    }

    /// `<queue><dlq suffix>` ([`RedisOptions::dlq_suffix`]).
    fn dead_letter_queue(&self, queue: &str) -> String {
        self.inner.options.dead_letter_queue(queue)
    }

    async fn dead_letter(
        &self,
        receipt: &LaravelReceipt,
        dlq: &str,
        body: Bytes,
    ) -> crate::Result<()> {
        let operation = || {
            format!(
                "dead-letter a reservation of {:?} to {dlq:?}",
                receipt.queue
            )
        };
        self.push_settled(receipt, dlq, &body, operation).await
    }

    /// The job as it was queued, pushed to the end of its ready list with a wake-up token, in
    /// one step with the settle; not through `:delayed`, where a byte-identical job already
    /// waiting would absorb it.
    async fn move_to_end(&self, receipt: &LaravelReceipt) -> crate::Result<()> {
        self.push_settled(receipt, &receipt.queue, &receipt.job, || {
            format!("move a reservation of {:?} to its end", receipt.queue)
        })
        .await
    }

    /// Reservations of one queue move in one script run, in order; others one at a time.
    async fn move_all_to_end(&self, receipts: &[&LaravelReceipt]) -> Vec<crate::Result<()>> {
        let Some(queue) = one_queue(receipts.iter().map(|receipt| receipt.queue.as_str())) else {
            return move_each_to_end(self, receipts).await;
        };
        let target = self.key(queue);
        let mut push = scripts::Call::new(&scripts::LARAVEL_SETTLE_PUSH_ALL);
        push.key(format!("{target}:reserved"))
            .key(&target)
            .key(format!("{target}:notify"));
        for receipt in receipts {
            push.arg(&receipt.reserved[..]).arg(&receipt.job[..]);
        }
        move_in_one_script(
            self,
            &self.inner.connection,
            queue,
            receipts,
            &push,
            LaravelReceipt::settled,
        )
        .await
    }

    /// `LLEN` of the ready list.
    /// What pops would take now: the ready list, plus the due `:delayed` members and (when lapsed
    /// reservations are recovered) the lapsed `:reserved` ones, which a pop migrates first. A
    /// released job is among them: Laravel releases through `:delayed`, even without a delay.
    async fn depth(&self, queue: &str) -> crate::Result<u64> {
        let ready = self.key(queue);
        let now = now_seconds();
        let connection = &self.inner.connection;
        let mut depth: u64 = connection
            .query(redis::cmd("LLEN").arg(&ready), || {
                format!("count the jobs of {ready:?}")
            })
            .await?;
        let mut due = vec![format!("{ready}:delayed")];
        if self.inner.options.retry_after.is_some() {
            due.push(format!("{ready}:reserved"));
        }
        for key in due {
            let command = redis::cmd("ZCOUNT").arg(&key).arg("-inf").arg(now).clone();
            depth += connection
                .query::<u64>(&command, || format!("count the due jobs of {key:?}"))
                .await?;
        }
        Ok(depth)
    }
}
