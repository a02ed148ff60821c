//! The client: one API, an implementation chosen by URL.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;

#[cfg(feature = "amqp")]
use crate::amqp;
use crate::error::{Error, Result};
use crate::health::Health;
use crate::memory;
use crate::message::{Delivery, OutgoingMessage, PublishOutcome};
use crate::tls::TlsOptions;
use crate::topology::{Binding, ExchangeSpec, QueueInfo, QueueSpec};

/// Options shared by both implementations. Every setter documents its default; start from
/// [`ClientOptions::default`] (fields may be added, so the struct cannot be written out).
///
/// ```
/// use std::time::Duration;
/// use polyq_amqp::ClientOptions;
///
/// let options = ClientOptions::default()
///     .connection_name("billing")
///     .recovery_wait(Duration::from_secs(5));
/// assert_eq!(options.connection_name, "billing");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientOptions {
    /// Connection name shown by the broker's management tools. Default `polyq`.
    pub connection_name: String,
    /// How long an operation waits for a lost connection to come back before failing with
    /// [`Error::Unavailable`]. Default 30 s.
    pub recovery_wait: Duration,
    /// First reconnect delay; doubles on each failed attempt. Default 100 ms.
    pub reconnect_initial: Duration,
    /// Cap of the reconnect delay. Default 1 s: the client then tries again at least every
    /// second, so that publishing resumes within about a second of the broker taking
    /// connections again (see `docs/RELIABILITY.md`).
    pub reconnect_max: Duration,
    /// How long a publish not sent yet waits while the broker blocks the connection
    /// (RabbitMQ's memory and disk alarms) before failing, unsent, with [`Error::Blocked`].
    /// A publish the block catches already sent is not bounded by it: its [`Confirm`] waits
    /// for the broker's answer, which comes once the alarm clears, as a confirm does in the
    /// Java and .NET clients (bound that wait with [`Client::timeout_unblocked`]). Default
    /// 30 s. The embedded broker has no alarms, so it never waits.
    pub blocked_timeout: Duration,
    /// Trusted authorities and client certificate of an `amqps://` connection. Default: the
    /// system's roots, no client certificate.
    pub tls: TlsOptions,
    /// Publishes that outlive a connection loss: when `Some(within)`, a publish whose confirm
    /// was lost with the connection (or whose frames never reached the broker) is sent again,
    /// the same properties (message id included) and bytes, on the recovered connection, and
    /// again after each further loss, until `within` after [`Client::publish`] was called,
    /// not counting the time the broker blocked the connection (an alarm holds confirms back;
    /// it loses nothing).
    /// Its [`Confirm`] fails only when that deadline passes; a nack or a return is still the
    /// broker's answer. The broker may then hold the message twice (its first copy was routed
    /// but the confirm never came back): consumers dedupe on the message id.
    ///
    /// Default `None`: the confirm fails at once with [`Error::Unconfirmed`] and the caller
    /// publishes again, since a plain AMQP message may carry no id to dedupe on. AceMQ and
    /// BabelQueue, whose messages always carry one, turn it on by default. The embedded broker
    /// never loses a connection, so the option changes nothing there.
    pub resend_lost: Option<Duration>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            connection_name: "polyq".to_owned(),
            recovery_wait: Duration::from_secs(30),
            reconnect_initial: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(1),
            blocked_timeout: Duration::from_secs(30),
            tls: TlsOptions::default(),
            resend_lost: None,
        }
    }
}

impl ClientOptions {
    /// Sets the connection name (default `polyq`).
    pub fn connection_name(mut self, name: impl Into<String>) -> Self {
        self.connection_name = name.into();
        self
    }

    /// Sets how long operations wait for recovery (default 30 s).
    pub fn recovery_wait(mut self, wait: Duration) -> Self {
        self.recovery_wait = wait;
        self
    }

    /// Sets the reconnect backoff bounds (default 100 ms doubling to 1 s).
    pub fn reconnect_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.reconnect_initial = initial;
        self.reconnect_max = max;
        self
    }

    /// Sets how long a publish waits for the broker to unblock the connection (default 30 s).
    pub fn blocked_timeout(mut self, timeout: Duration) -> Self {
        self.blocked_timeout = timeout;
        self
    }

    /// Sets the TLS settings of `amqps://` (default [`TlsOptions::default`]). Connecting any
    /// other URL with settings here fails.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// Sends publishes whose confirm was lost with the connection again until `within` after
    /// each publish (`None`, the default, fails their confirm at once); see
    /// [`ClientOptions::resend_lost`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use polyq_amqp::ClientOptions;
    ///
    /// let options = ClientOptions::default().resend_lost(Some(Duration::from_secs(60)));
    /// assert_eq!(options.resend_lost, Some(Duration::from_secs(60)));
    /// assert_eq!(ClientOptions::default().resend_lost, None);
    /// ```
    pub fn resend_lost(mut self, within: Option<Duration>) -> Self {
        self.resend_lost = within;
        self
    }
}

/// Options of one consumer. Every setter documents its default; start from
/// [`ConsumeOptions::default`] (fields may be added, so the struct cannot be written out).
///
/// ```
/// use polyq_amqp::ConsumeOptions;
///
/// let options = ConsumeOptions::default().prefetch(10).exclusive(true);
/// assert!(options.exclusive);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConsumeOptions {
    /// Most unacknowledged deliveries the broker hands this consumer at once. Default 50.
    pub prefetch: u16,
    /// Consumer tag; the broker chooses one when `None`. Default `None`.
    pub tag: Option<String>,
    /// Refuse other consumers on the queue. Default `false`.
    pub exclusive: bool,
}

impl Default for ConsumeOptions {
    fn default() -> Self {
        Self {
            prefetch: 50,
            tag: None,
            exclusive: false,
        }
    }
}

impl ConsumeOptions {
    /// Sets the prefetch window (default 50).
    pub fn prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Sets the consumer tag (default: the broker chooses one).
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }

    /// Refuses other consumers on the queue while this one consumes (default `false`).
    pub fn exclusive(mut self, exclusive: bool) -> Self {
        self.exclusive = exclusive;
        self
    }
}

/// A connection to a broker, chosen by URL: `memory://[name]` for the embedded broker,
/// `amqp://` or `amqps://` for RabbitMQ (feature `amqp`). Cheap to clone; clones share the
/// connection.
///
/// # The embedded broker
///
/// `memory://name` is a broker inside the process, shared by every client that connects to the
/// same name (`memory://` and `memory://other` are two brokers); it lives as long as the process
/// and keeps nothing on disk. It follows RabbitMQ's semantics, checked by the same behavioural
/// tests on both:
///
/// - the default exchange and `direct`, `topic` (`*`, `#`), `fanout` and `headers` (`x-match`
///   `all`/`any`) exchanges, the `amq.*` system exchanges, and RabbitMQ's equivalence rules on
///   redeclaration ([`Error::Precondition`]);
/// - durable, exclusive (owned by the declaring client, refused to others, deleted when it
///   closes), auto-delete and server-named (`amq.gen-...`) queues;
/// - `x-message-ttl` and the `expiration` property (expiry at the head, on time whether or not
///   anyone consumes), `x-dead-letter-exchange` / `x-dead-letter-routing-key` on expiry,
///   rejection and overflow with RabbitMQ's `x-death` history, `x-max-length` with `x-overflow`
///   `drop-head`, `reject-publish` (nacked confirm) or `reject-publish-dlx`;
/// - confirms (settled by the time [`Client::publish`] returns), mandatory returns (312
///   `NO_ROUTE`), prefetch windows, round-robin across consumers, requeue to the original
///   position flagged `redelivered`; closing a client requeues what it had not settled.
///
/// Other queue arguments (`x-queue-type` included) are accepted and compared on redeclaration,
/// but do not change behaviour: a quorum queue behaves as a classic one.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polyq_amqp::Error> {
/// use polyq_amqp::{Client, OutgoingMessage, Properties, PublishOutcome, QueueSpec};
///
/// let client = Client::connect("memory://doc-client").await?;
/// client.declare_queue(&QueueSpec::new("greetings")).await?;
/// let confirm = client
///     .publish(OutgoingMessage::new("", "greetings", Properties::default(), "hello"))
///     .await?;
/// assert_eq!(confirm.await?, PublishOutcome::Acked);
/// let delivery = client.get("greetings").await?.expect("a message");
/// assert_eq!(&delivery.body[..], b"hello");
/// delivery.ack().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Memory(memory::MemoryClient),
    #[cfg(feature = "amqp")]
    Amqp(amqp::AmqpClient),
}

macro_rules! dispatch {
    ($self:ident.$method:ident($($arg:expr),*)) => {
        match &$self.backend {
            Backend::Memory(client) => client.$method($($arg),*).await,
            #[cfg(feature = "amqp")]
            Backend::Amqp(client) => client.$method($($arg),*).await,
        }
    };
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("url", &self.url()).finish()
    }
}

impl Client {
    /// Connects with default options.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects with the given options.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Self> {
        let scheme = url
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        options
            .tls
            .check_scheme(scheme.as_deref() == Some("amqps"))
            .map_err(|reason| Error::InvalidUrl {
                url: crate::redact_url(url),
                reason: reason.to_owned(),
            })?;
        let backend = match scheme.as_deref() {
            Some("memory") => Backend::Memory(memory::MemoryClient::connect(url, &options)?),
            #[cfg(feature = "amqp")]
            Some("amqp" | "amqps") => {
                Backend::Amqp(amqp::AmqpClient::connect(url, &options).await?)
            }
            _ => {
                return Err(Error::InvalidUrl {
                    url: crate::redact_url(url),
                    reason: if cfg!(feature = "amqp") {
                        "expected memory://, amqp:// or amqps://".to_owned()
                    } else {
                        "expected memory:// (amqp:// needs the `amqp` feature)".to_owned()
                    },
                });
            }
        };
        Ok(Self { backend })
    }

    /// The URL this client was opened with, credentials redacted.
    pub fn url(&self) -> String {
        match &self.backend {
            Backend::Memory(client) => client.url(),
            #[cfg(feature = "amqp")]
            Backend::Amqp(client) => client.url(),
        }
    }

    /// The connection's health now: [`Health::Up`] (with the broker's reason while it blocks
    /// publishing), [`Health::Recovering`] while `amqp://` reconnects, [`Health::Closed`] after
    /// [`Client::close`]. `memory://` is up until closed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polyq_amqp::Error> {
    /// use polyq_amqp::{Client, Health};
    ///
    /// let client = Client::connect("memory://doc-health").await?;
    /// assert!(matches!(client.health(), Health::Up { generation: 0, blocked: None, .. }));
    /// client.close().await?;
    /// assert_eq!(client.health(), Health::Closed);
    /// # Ok(())
    /// # }
    /// ```
    pub fn health(&self) -> Health {
        match &self.backend {
            Backend::Memory(client) => client.health(),
            #[cfg(feature = "amqp")]
            Backend::Amqp(client) => client.health(),
        }
    }

    /// Watches the connection's [`Health`]: the receiver holds the current state and wakes on
    /// every change (lost, each failed reconnect, up again, blocked, unblocked, closed). Its
    /// `changed()` fails once every clone of the client and its consumers is gone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polyq_amqp::Error> {
    /// use polyq_amqp::{Client, Health};
    ///
    /// let client = Client::connect("memory://doc-health-watch").await?;
    /// let mut health = client.health_watch();
    /// assert!(health.borrow_and_update().is_up());
    /// let closing = client.clone();
    /// tokio::spawn(async move { closing.close().await });
    /// let closed = health.wait_for(|h| *h == Health::Closed).await;
    /// assert!(closed.is_ok());
    /// # Ok(())
    /// # }
    /// ```
    pub fn health_watch(&self) -> tokio::sync::watch::Receiver<Health> {
        match &self.backend {
            Backend::Memory(client) => client.health_watch(),
            #[cfg(feature = "amqp")]
            Backend::Amqp(client) => client.health_watch(),
        }
    }

    /// Waits for `future` for at most `limit`, not counting the time the broker blocks this
    /// connection (`connection.blocked`); `None` when the limit passed first. For a bound on a
    /// publish's [`Confirm`]: a block holds the confirm back until the alarm clears, when the
    /// broker answers it (ack or nack), so a bound that ran out meanwhile would have the
    /// caller send again a message the broker still enqueues. Start it when the wait starts.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polyq_amqp::Error> {
    /// use std::time::Duration;
    /// use polyq_amqp::{Client, OutgoingMessage, Properties, PublishOutcome, QueueSpec};
    ///
    /// let client = Client::connect("memory://doc-timeout-unblocked").await?;
    /// client.declare_queue(&QueueSpec::new("jobs")).await?;
    /// let confirm = client
    ///     .publish(OutgoingMessage::new("", "jobs", Properties::default(), "hello"))
    ///     .await?;
    /// let outcome = client.timeout_unblocked(Duration::from_secs(30), confirm).await;
    /// assert!(matches!(outcome, Some(Ok(PublishOutcome::Acked))));
    /// # Ok(())
    /// # }
    /// ```
    pub fn timeout_unblocked<F: Future>(
        &self,
        limit: Duration,
        future: F,
    ) -> impl Future<Output = Option<F::Output>> + use<F> {
        crate::health::unblocked_timeout(self.health_watch(), limit, future)
    }

    /// Declares an exchange (idempotent when the declaration matches).
    pub async fn declare_exchange(&self, spec: &ExchangeSpec) -> Result<()> {
        dispatch!(self.declare_exchange(spec))
    }

    /// Checks that an exchange exists without declaring it (passive declare); [`Error::NotFound`]
    /// when it does not. Only existence is proven: a passive declare carries no type or flags to
    /// compare, so an exchange of another type passes too.
    pub async fn inspect_exchange(&self, name: &str) -> Result<()> {
        dispatch!(self.inspect_exchange(name))
    }

    /// Deletes an exchange.
    pub async fn delete_exchange(&self, name: &str) -> Result<()> {
        dispatch!(self.delete_exchange(name))
    }

    /// Declares a queue and reports its counts (idempotent when the declaration matches).
    pub async fn declare_queue(&self, spec: &QueueSpec) -> Result<QueueInfo> {
        dispatch!(self.declare_queue(spec))
    }

    /// Reports a queue's counts without declaring it (passive declare); [`Error::NotFound`]
    /// when it does not exist.
    pub async fn inspect_queue(&self, name: &str) -> Result<QueueInfo> {
        dispatch!(self.inspect_queue(name))
    }

    /// Deletes a queue, returning how many messages it held.
    pub async fn delete_queue(&self, name: &str) -> Result<u32> {
        dispatch!(self.delete_queue(name))
    }

    /// Removes every ready message from a queue, returning how many.
    pub async fn purge_queue(&self, name: &str) -> Result<u32> {
        dispatch!(self.purge_queue(name))
    }

    /// Binds a queue to an exchange.
    pub async fn bind_queue(&self, binding: &Binding) -> Result<()> {
        dispatch!(self.bind_queue(binding))
    }

    /// Removes a binding.
    pub async fn unbind_queue(&self, binding: &Binding) -> Result<()> {
        dispatch!(self.unbind_queue(binding))
    }

    /// Publishes a message. Resolves once the message is queued on the connection, behind
    /// every earlier publish, to a [`Confirm`] that resolves when the broker settles it;
    /// awaiting confirms later lets many publishes be in flight at once. On `amqp://` the
    /// connection's writer puts the message on the socket after `publish` returned (a message
    /// it could not write is sent again by the confirm), so only the confirm says that the
    /// broker has it.
    pub async fn publish(&self, message: OutgoingMessage) -> Result<Confirm> {
        match &self.backend {
            Backend::Memory(client) => client.publish(message),
            // lapin's side of a publish is a future of some 3 KB. Inline, it would make this
            // future as large, and every publish, `memory://` ones too, would move it into
            // the future of each caller that awaits it; boxed, only `amqp://` publishes pay,
            // with one allocation beside the socket write.
            #[cfg(feature = "amqp")]
            Backend::Amqp(client) => Box::pin(client.publish(message)).await,
        }
    }

    /// Fetches one message with `basic.get`, to be settled manually.
    pub async fn get(&self, queue: &str) -> Result<Option<Delivery>> {
        dispatch!(self.get(queue))
    }

    /// Starts a consumer on a queue; deliveries must be settled manually.
    pub async fn consume(&self, queue: &str, options: &ConsumeOptions) -> Result<Consumer> {
        dispatch!(self.consume(queue, options))
    }

    /// Closes the connection; unsettled deliveries go back to their queues.
    pub async fn close(&self) -> Result<()> {
        dispatch!(self.close())
    }
}

/// The broker's answer to one publish, still to come.
#[must_use = "a publish is only safe once its confirm says Acked"]
pub struct Confirm {
    state: ConfirmState,
}

// A window of confirms (a `FuturesUnordered` of them) is borrowed across `.await`s in spawned
// tasks, which needs `Sync` as well as `Send`.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Confirm>();
};

enum ConfirmState {
    Pending(Pin<Box<dyn Future<Output = Result<PublishOutcome>> + Send + Sync>>),
    /// Acked on publish (the embedded broker): no future to allocate per message. `false`
    /// once the outcome has been taken.
    Acked(bool),
}

impl Confirm {
    /// Wraps a backend's confirm future.
    pub(crate) fn new(
        future: impl Future<Output = Result<PublishOutcome>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            state: ConfirmState::Pending(Box::pin(future)),
        }
    }

    /// A confirm the broker already gave.
    pub(crate) fn settled(outcome: PublishOutcome) -> Self {
        match outcome {
            PublishOutcome::Acked => Self {
                state: ConfirmState::Acked(true),
            },
            other => Self::new(std::future::ready(Ok(other))),
        }
    }
}

impl std::fmt::Debug for Confirm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Confirm")
    }
}

impl Future for Confirm {
    type Output = Result<PublishOutcome>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            ConfirmState::Pending(future) => future.as_mut().poll(cx),
            // Polling again after completion is a caller bug; `Closed` is the honest answer.
            ConfirmState::Acked(pending) => Poll::Ready(if std::mem::take(pending) {
                Ok(PublishOutcome::Acked)
            } else {
                Err(Error::Closed)
            }),
        }
    }
}

/// Settles one delivery. Dropped unsettled, it requeues the delivery (`nack` with requeue) so
/// that it is delivered again, flagged `redelivered`, instead of being held until its channel
/// or connection closes; dropped after a settlement, it does nothing.
#[derive(Debug)]
pub struct Acker {
    inner: AckerInner,
}

#[derive(Debug)]
pub(crate) enum AckerInner {
    Memory(memory::Acker),
    #[cfg(feature = "amqp")]
    Amqp(amqp::Acker),
}

impl From<AckerInner> for Acker {
    fn from(inner: AckerInner) -> Self {
        Self { inner }
    }
}

impl Acker {
    /// Acknowledges the delivery.
    pub async fn ack(&self) -> Result<()> {
        match &self.inner {
            AckerInner::Memory(acker) => acker.ack().await,
            #[cfg(feature = "amqp")]
            AckerInner::Amqp(acker) => acker.ack().await,
        }
    }

    /// Negatively acknowledges the delivery, requeueing it or dead-lettering it.
    pub async fn nack(&self, requeue: bool) -> Result<()> {
        match &self.inner {
            AckerInner::Memory(acker) => acker.nack(requeue).await,
            #[cfg(feature = "amqp")]
            AckerInner::Amqp(acker) => acker.nack(requeue).await,
        }
    }

    /// Rejects the delivery, requeueing it or dead-lettering it.
    pub async fn reject(&self, requeue: bool) -> Result<()> {
        match &self.inner {
            AckerInner::Memory(acker) => acker.reject(requeue).await,
            #[cfg(feature = "amqp")]
            AckerInner::Amqp(acker) => acker.reject(requeue).await,
        }
    }
}

/// A stream of deliveries from one queue. It survives connection recovery on `amqp://`.
pub struct Consumer {
    inner: ConsumerInner,
}

pub(crate) enum ConsumerInner {
    Memory(memory::Consumer),
    #[cfg(feature = "amqp")]
    Amqp(amqp::Consumer),
}

impl From<ConsumerInner> for Consumer {
    fn from(inner: ConsumerInner) -> Self {
        Self { inner }
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Consumer")
    }
}

impl Consumer {
    /// Stops the consumer. Deliveries not yet settled stay unacknowledged until they are settled
    /// or dropped (which requeues them), or until the channel closes.
    pub async fn cancel(self) -> Result<()> {
        match self.inner {
            ConsumerInner::Memory(consumer) => consumer.cancel().await,
            #[cfg(feature = "amqp")]
            ConsumerInner::Amqp(consumer) => consumer.cancel().await,
        }
    }
}

impl Consumer {
    /// Stops the consumer and gives back at once every delivery it carried that is still
    /// unsettled, even those still held: `amqp://` closes its channel, whose unacknowledged
    /// messages the broker requeues in their order. The embedded broker requeues them when the
    /// client closes, so there it only cancels.
    pub(crate) async fn close_channel(self) -> Result<()> {
        match self.inner {
            ConsumerInner::Memory(consumer) => consumer.cancel().await,
            #[cfg(feature = "amqp")]
            ConsumerInner::Amqp(consumer) => consumer.close_channel().await,
        }
    }

    /// Whether [`close_channel`](Self::close_channel) gives the unsettled deliveries back
    /// (though a quorum queue may show them ready only a while later), rather than the close of
    /// the client.
    pub(crate) fn gives_back_when_closed(&self) -> bool {
        match self.inner {
            ConsumerInner::Memory(_) => false,
            #[cfg(feature = "amqp")]
            ConsumerInner::Amqp(_) => true,
        }
    }
}

impl Stream for Consumer {
    type Item = Result<Delivery>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match &mut self.inner {
            ConsumerInner::Memory(consumer) => Pin::new(consumer).poll_next(cx),
            #[cfg(feature = "amqp")]
            ConsumerInner::Amqp(consumer) => Pin::new(consumer).poll_next(cx),
        }
    }
}
