//! Broker bindings for the worker runtime: each moves bytes and settles reservations, and knows
//! nothing of the envelope. Retry, dead-letter and redrive decisions are made once, in the runtime,
//! and run unchanged on every binding.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

mod amqp;
mod any;
#[cfg(feature = "redis")]
pub mod redis;

pub use amqp::{AmqpOptions, AmqpReceipt, AmqpTransport, DEFAULT_RESEND_LOST};
pub use any::{AnyReceipt, AnyTransport, ConnectOptions, RedisLayout};
pub use polyq_amqp::{Health, TlsOptions};

/// Out-of-band headers that ride beside a body (`traceparent`, `tracestate`, `bq-replay-bypass`),
/// in the order they were read or are to be written.
pub type Headers = Vec<(String, String)>;

/// What a binding can do beyond moving bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// A retry or release can be delayed by the broker (Laravel `:delayed`, RabbitMQ TTL queues).
    pub delay: bool,
    /// Out-of-band headers survive the trip (AMQP headers, the Redis header frame).
    pub headers: bool,
}

/// One reserved message: the envelope bytes exactly as stored (unwrapped from any header frame),
/// its out-of-band headers, and the receipt that settles it.
#[derive(Debug)]
pub struct Reserved<R> {
    /// The envelope bytes as the producer wrote them.
    pub body: Bytes,
    /// Out-of-band headers that came with it.
    pub headers: Headers,
    /// The broker's own count of earlier attempts, where it keeps one apart from the body (the
    /// RabbitMQ `x-attempts` header); reconciled with the body by the projection rules.
    pub broker_attempts: Option<i64>,
    /// Settles this reservation.
    pub receipt: R,
}

/// The dead-letter queue of `queue` on a binding that does not name it otherwise:
/// `<queue>.dlq`.
///
/// ```
/// assert_eq!(babelqueue::transport::default_dead_letter_queue("jobs"), "jobs.dlq");
/// ```
pub fn default_dead_letter_queue(queue: &str) -> String {
    format!("{queue}.dlq")
}

/// The queue whose default dead-letter queue `dlq` is (`orders.dlq` → `orders`): the inverse
/// of [`default_dead_letter_queue`]; `None` for any other name.
///
/// ```
/// use babelqueue::transport::default_dead_letter_source;
///
/// assert_eq!(default_dead_letter_source("orders.dlq"), Some("orders"));
/// assert_eq!(default_dead_letter_source("orders"), None);
/// ```
pub fn default_dead_letter_source(dlq: &str) -> Option<&str> {
    dlq.strip_suffix(".dlq").filter(|queue| !queue.is_empty())
}

/// A broker binding. Every method that settles a reservation leaves it unsettled when it fails,
/// so the message comes back rather than being lost.
pub trait Transport: Send + Sync + 'static {
    /// Identifies one reservation. The bindings' receipts give their reservation back when
    /// dropped without being settled (a requeue or a release), so one nobody will settle is not
    /// held until the broker's own timeout.
    type Receipt: Send + Sync + 'static;

    /// What this binding can do.
    fn capabilities(&self) -> Capabilities;

    /// Publishes a body to a queue, waiting for the broker to take it (a confirm on RabbitMQ).
    fn publish(
        &self,
        queue: &str,
        body: Bytes,
        headers: &[(String, String)],
    ) -> impl Future<Output = crate::Result<()>> + Send;

    /// Reserves the next message of a queue, waiting up to `wait`; `None` when there is none.
    fn reserve(
        &self,
        queue: &str,
        wait: Duration,
    ) -> impl Future<Output = crate::Result<Option<Reserved<Self::Receipt>>>> + Send;

    /// Removes a handled message for good.
    fn ack(&self, receipt: &Self::Receipt) -> impl Future<Output = crate::Result<()>> + Send;

    /// Replaces a reserved message with `body` (its next attempt) on `queue`, after `delay` where
    /// the binding can delay, then settles the reservation.
    fn retry(
        &self,
        receipt: &Self::Receipt,
        queue: &str,
        body: Bytes,
        headers: &[(String, String)],
        delay: Duration,
    ) -> impl Future<Output = crate::Result<()>> + Send;

    /// Puts a reserved message back unchanged, after `delay` where the binding can delay.
    fn release(
        &self,
        receipt: &Self::Receipt,
        delay: Duration,
    ) -> impl Future<Output = crate::Result<()>> + Send;

    /// Moves a reserved message, unchanged (its bytes as stored and its headers), to the end of
    /// the queue it was reserved from, then settles the reservation; one atomic step where the
    /// binding has one. Redrive restores with it, so a restored message lands behind everything
    /// it has yet to take and is not met again.
    fn move_to_end(
        &self,
        receipt: &Self::Receipt,
    ) -> impl Future<Output = crate::Result<()>> + Send;

    /// Moves reserved messages of one queue to its end as [`Transport::move_to_end`] moves each,
    /// landing in the order given; one result per receipt, in that order, and a failed move
    /// leaves only its own reservation unsettled. A binding that can have several moves in flight
    /// and still keep their order overrides it. Default: one after another.
    fn move_all_to_end(
        &self,
        receipts: &[&Self::Receipt],
    ) -> impl Future<Output = Vec<crate::Result<()>>> + Send {
        move_each_to_end(self, receipts)
    }

    /// How many messages `queue` holds ready now, reservations not counted; 0 for a queue that
    /// does not exist.
    fn depth(&self, queue: &str) -> impl Future<Output = crate::Result<u64>> + Send;

    /// The dead-letter queue of `queue` on this binding, where the worker writes and
    /// [`crate::BabelQueue::redrive`] reads: `<queue>.dlq` unless the binding names it otherwise
    /// (the Redis bindings' [`dlq_suffix`]). Default `<queue>.dlq`.
    ///
    // Without the feature the Redis bindings are not built: the link leads to the feature's note.
    #[cfg_attr(
        feature = "redis",
        doc = "[`dlq_suffix`]: redis::RedisOptions::dlq_suffix"
    )]
    #[cfg_attr(not(feature = "redis"), doc = "[`dlq_suffix`]: crate#feature-flags")]
    fn dead_letter_queue(&self, queue: &str) -> String {
        default_dead_letter_queue(queue)
    }

    /// Writes `body` to the dead-letter queue `dlq`, then settles the reservation.
    fn dead_letter(
        &self,
        receipt: &Self::Receipt,
        dlq: &str,
        body: Bytes,
    ) -> impl Future<Output = crate::Result<()>> + Send;

    /// The broker's schema-version property of a reservation, read before its body is decoded
    /// (the schema-version gate, [`crate::projection::schema_version_gate`]); `None` where the
    /// binding carries none. Default: none.
    fn schema_version(&self, receipt: &Self::Receipt) -> Option<String> {
        let _ = receipt;
        None
    }

    /// How many reservations of one queue the binding hands out before some of them are settled
    /// (a prefetch window), or `None` when it does not bound them. A redrive holds no more than
    /// this at once, since a reserve beyond it would only wait. Default: `None`.
    fn reservation_limit(&self) -> Option<usize> {
        None
    }

    /// The least time a reservation, just taken or just extended, is sure to stay held before
    /// the broker, or another SDK's sweeper, may hand the message out again: on Redis the
    /// reservation deadline (`reservation_deadline`, `retry_after`) less the second its
    /// whole-second score can lose. `None` where a reservation holds until settled or until the
    /// connection that took it is gone (RabbitMQ, `memory://`), or where a deadline too short to
    /// extend leaves no sure time (under 2 s on Redis). While a handler runs, the runtime extends
    /// its reservation three times within it ([`Transport::extend_reservation`]). Default: `None`.
    fn reservation_holds_for(&self) -> Option<Duration> {
        None
    }

    /// Pushes the deadline of a reservation one full deadline past now, in the structure the
    /// other SDKs' sweepers read (the deadline set of the default Redis layout, `:reserved` of
    /// the Laravel one), so a message whose handler still runs is not handed out twice. `false`
    /// when the reservation is no longer held (it lapsed and was swept, or it was settled): it
    /// is then not brought back. Default: `true`, nothing to extend.
    fn extend_reservation(
        &self,
        receipt: &Self::Receipt,
    ) -> impl Future<Output = crate::Result<bool>> + Send {
        let _ = receipt;
        std::future::ready(Ok(true))
    }

    /// The state of the binding's connection, where it keeps one: the `memory://` and
    /// `amqp://` bindings report their client's [`Health`] (the embedded broker is up until its
    /// client is closed). `None` where the binding keeps no connection state: the Redis bindings
    /// reconnect on the next command, so an outage shows only as the connection error of the
    /// command that met it. Default: `None`.
    fn health(&self) -> Option<Health> {
        None
    }

    /// A watch that sees every change of [`Transport::health`], or `None` where that is `None`.
    /// Default: `None`.
    fn health_watch(&self) -> Option<tokio::sync::watch::Receiver<Health>> {
        None
    }

    /// Hands back what the binding holds for `queue` beyond the reservations it gave out (a
    /// prefetch window), so other consumers get it. The runtime calls it when it stops reserving
    /// from a queue; a later [`Transport::reserve`] starts again. Default: nothing is held.
    fn unsubscribe(&self, queue: &str) -> impl Future<Output = crate::Result<()>> + Send {
        let _ = queue;
        std::future::ready(Ok(()))
    }
}

/// [`Transport::move_all_to_end`] one message after another.
pub(crate) async fn move_each_to_end<T: Transport + ?Sized>(
    transport: &T,
    receipts: &[&T::Receipt],
) -> Vec<crate::Result<()>> {
    let mut moved = Vec::with_capacity(receipts.len());
    for receipt in receipts {
        moved.push(transport.move_to_end(receipt).await);
    }
    moved
}
