//! Every binding behind one type, chosen by URL.

use std::time::Duration;

use bytes::Bytes;

#[cfg(feature = "redis")]
use super::redis::{LaravelReceipt, LaravelTransport, RedisOptions, RedisReceipt, RedisTransport};
use super::{
    AmqpOptions, AmqpReceipt, AmqpTransport, Capabilities, Health, Reserved, TlsOptions, Transport,
    move_each_to_end,
};
use crate::{Error, Result};

/// Which Redis key layout a `redis://` / `rediss://` URL uses (reference §3.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RedisLayout {
    /// The SDK-owned reliable queue: `<queue>`, `<queue>:processing` (Go, Python, Node, Java,
    /// .NET, PHP `RedisTransport`).
    #[default]
    Default,
    /// Laravel's layout: `queues:<queue>`, `:notify`, `:reserved`, `:delayed`.
    Laravel,
}

/// Options of [`AnyTransport::connect`]. Every setter documents its default.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// Options of `memory://`, `amqp://` and `amqps://`.
    pub amqp: AmqpOptions,
    /// The key layout of `redis://` and `rediss://`. Default [`RedisLayout::Default`].
    pub redis_layout: RedisLayout,
    /// Options of `redis://` and `rediss://` (both layouts).
    #[cfg(feature = "redis")]
    pub redis: RedisOptions,
    /// TLS of `amqps://` and `rediss://`, for whichever the URL names. When set, it is used
    /// instead of the TLS settings inside `amqp` and `redis`. Default: not set.
    pub tls: TlsOptions,
}

impl ConnectOptions {
    /// Sets the AMQP prefetch window (default 100, see [`AmqpOptions::prefetch`]).
    pub fn prefetch(mut self, prefetch: u16) -> Self {
        self.amqp.prefetch = prefetch;
        self
    }

    /// Sets how long an AMQP publish whose confirm was lost with the connection is sent again
    /// (default 30 s, see [`AmqpOptions::resend_lost`]).
    pub fn resend_lost(mut self, within: Option<Duration>) -> Self {
        self.amqp.resend_lost = within;
        self
    }

    /// Sets the Redis key layout (default [`RedisLayout::Default`]).
    pub fn redis_layout(mut self, layout: RedisLayout) -> Self {
        self.redis_layout = layout;
        self
    }

    /// Sets the TLS settings of `amqps://` and `rediss://` (see [`TlsOptions`]); they win over
    /// those inside the AMQP and Redis options, whatever the order of the calls.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// Sets the Redis options (default [`RedisOptions::default`]).
    #[cfg(feature = "redis")]
    pub fn redis(mut self, options: RedisOptions) -> Self {
        self.redis = options;
        self
    }
}

/// The binding a URL names: `memory://[name]` (the embedded broker, the default when the URL is
/// empty), `amqp://` / `amqps://` (RabbitMQ), `redis://` / `rediss://` (feature `redis`, in the
/// layout of [`ConnectOptions::redis_layout`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> babelqueue::Result<()> {
/// use babelqueue::transport::{AnyTransport, ConnectOptions, Transport};
///
/// let transport = AnyTransport::connect("memory://doc-any", ConnectOptions::default()).await?;
/// assert!(transport.capabilities().delay);
/// assert!(AnyTransport::connect("kafka://x", ConnectOptions::default()).await.is_err());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AnyTransport {
    /// `memory://`, `amqp://`, `amqps://`.
    Amqp(AmqpTransport),
    /// `redis://`, `rediss://` in the default layout.
    #[cfg(feature = "redis")]
    Redis(RedisTransport),
    /// `redis://`, `rediss://` in the Laravel layout.
    #[cfg(feature = "redis")]
    Laravel(LaravelTransport),
}

/// The receipt of an [`AnyTransport`] reservation.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyReceipt {
    /// From [`AnyTransport::Amqp`].
    Amqp(AmqpReceipt),
    /// From [`AnyTransport::Redis`].
    #[cfg(feature = "redis")]
    Redis(RedisReceipt),
    /// From [`AnyTransport::Laravel`].
    #[cfg(feature = "redis")]
    Laravel(LaravelReceipt),
}

impl AnyTransport {
    /// Connects to the binding the URL's scheme names (an empty URL is `memory://`).
    ///
    /// # Errors
    /// [`Error::UnsupportedUrl`] for another scheme (or `redis://` without the `redis` feature);
    /// the binding's own error when the broker cannot be reached.
    pub async fn connect(url: &str, options: ConnectOptions) -> Result<Self> {
        let url = if url.is_empty() { "memory://" } else { url };
        let scheme = url
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase())
            .unwrap_or_default();
        match scheme.as_str() {
            "memory" | "amqp" | "amqps" => {
                let mut amqp = options.amqp;
                if options.tls.is_set() {
                    amqp.tls = options.tls;
                }
                Ok(AnyTransport::Amqp(
                    AmqpTransport::connect_with(url, amqp).await?,
                ))
            }
            #[cfg(feature = "redis")]
            scheme if crate::transport::redis::URL_SCHEMES.contains(&scheme) => {
                let redis = if options.tls.is_set() {
                    options.redis.tls(options.tls)
                } else {
                    options.redis
                };
                Ok(match options.redis_layout {
                    RedisLayout::Default => {
                        AnyTransport::Redis(RedisTransport::connect(url, redis).await?)
                    }
                    RedisLayout::Laravel => {
                        AnyTransport::Laravel(LaravelTransport::connect(url, redis).await?)
                    }
                })
            }
            _ => Err(Error::UnsupportedUrl {
                url: polyq_amqp::redact_url(url),
                reason: if cfg!(feature = "redis") {
                    "expected memory://, amqp://, amqps://, redis://, rediss://, \
                     redis+sentinel:// or redis+cluster://"
                        .to_owned()
                } else {
                    "expected memory://, amqp:// or amqps:// (redis:// needs the `redis` feature)"
                        .to_owned()
                },
            }),
        }
    }
}

/// Runs `$body` with `$t` bound to the binding and `$r` to its receipt.
/// A receipt of another binding is refused with `$refused`.
macro_rules! with_receipt {
    ($self:ident, $receipt:ident, |$t:ident, $r:ident| $body:expr, $refused:expr) => {
        #[allow(unreachable_patterns)]
        match ($self, $receipt) {
            (AnyTransport::Amqp($t), AnyReceipt::Amqp($r)) => $body,
            #[cfg(feature = "redis")]
            (AnyTransport::Redis($t), AnyReceipt::Redis($r)) => $body,
            #[cfg(feature = "redis")]
            (AnyTransport::Laravel($t), AnyReceipt::Laravel($r)) => $body,
            _ => $refused,
        }
    };
}

/// Runs `$body` with `$t` bound to the binding.
macro_rules! with_binding {
    ($self:ident, |$t:ident| $body:expr) => {
        match $self {
            AnyTransport::Amqp($t) => $body,
            #[cfg(feature = "redis")]
            AnyTransport::Redis($t) => $body,
            #[cfg(feature = "redis")]
            AnyTransport::Laravel($t) => $body,
        }
    };
}

fn foreign_receipt() -> Error {
    Error::InvalidOption {
        option: "receipt",
        reason: "it was issued by another binding than the one asked to settle it".to_owned(),
    }
}

/// A binding whose receipts an [`AnyReceipt`] holds.
trait Binding: Transport {
    fn own(receipt: &AnyReceipt) -> Option<&Self::Receipt>;
}

impl Binding for AmqpTransport {
    fn own(receipt: &AnyReceipt) -> Option<&AmqpReceipt> {
        match receipt {
            AnyReceipt::Amqp(receipt) => Some(receipt),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
}

#[cfg(feature = "redis")]
impl Binding for RedisTransport {
    fn own(receipt: &AnyReceipt) -> Option<&RedisReceipt> {
        match receipt {
            AnyReceipt::Redis(receipt) => Some(receipt),
            _ => None,
        }
    }
}

#[cfg(feature = "redis")]
impl Binding for LaravelTransport {
    fn own(receipt: &AnyReceipt) -> Option<&LaravelReceipt> {
        match receipt {
            AnyReceipt::Laravel(receipt) => Some(receipt),
            _ => None,
        }
    }
}

/// `binding`'s own bulk move of `receipts`, when every one of them is its own.
async fn in_bulk<T: Binding>(binding: &T, receipts: &[&AnyReceipt]) -> Option<Vec<Result<()>>> {
    let own: Vec<&T::Receipt> = receipts
        .iter()
        .map(|receipt| T::own(receipt))
        .collect::<Option<_>>()?;
    Some(binding.move_all_to_end(&own).await)
}

/// Wraps a binding's reservation in the [`AnyReceipt`] variant.
fn wrap<R>(
    reserved: Option<Reserved<R>>,
    variant: fn(R) -> AnyReceipt,
) -> Option<Reserved<AnyReceipt>> {
    reserved.map(|r| Reserved {
        body: r.body,
        headers: r.headers,
        broker_attempts: r.broker_attempts,
        receipt: variant(r.receipt),
    })
}

impl Transport for AnyTransport {
    type Receipt = AnyReceipt;

    fn capabilities(&self) -> Capabilities {
        with_binding!(self, |t| t.capabilities())
    }

    async fn publish(&self, queue: &str, body: Bytes, headers: &[(String, String)]) -> Result<()> {
        with_binding!(self, |t| t.publish(queue, body, headers).await)
    }

    async fn reserve(&self, queue: &str, wait: Duration) -> Result<Option<Reserved<AnyReceipt>>> {
        match self {
            AnyTransport::Amqp(t) => Ok(wrap(t.reserve(queue, wait).await?, AnyReceipt::Amqp)),
            #[cfg(feature = "redis")]
            AnyTransport::Redis(t) => Ok(wrap(t.reserve(queue, wait).await?, AnyReceipt::Redis)),
            #[cfg(feature = "redis")]
            AnyTransport::Laravel(t) => {
                Ok(wrap(t.reserve(queue, wait).await?, AnyReceipt::Laravel))
            }
        }
    }

    async fn ack(&self, receipt: &AnyReceipt) -> Result<()> {
        with_receipt!(self, receipt, |t, r| t.ack(r).await, Err(foreign_receipt()))
    }

    async fn retry(
        &self,
        receipt: &AnyReceipt,
        queue: &str,
        body: Bytes,
        headers: &[(String, String)],
        delay: Duration,
    ) -> Result<()> {
        with_receipt!(
            self,
            receipt,
            |t, r| t.retry(r, queue, body, headers, delay).await,
            Err(foreign_receipt())
        )
    }

    async fn release(&self, receipt: &AnyReceipt, delay: Duration) -> Result<()> {
        with_receipt!(
            self,
            receipt,
            |t, r| t.release(r, delay).await,
            Err(foreign_receipt())
        )
    }

    async fn move_to_end(&self, receipt: &AnyReceipt) -> Result<()> {
        with_receipt!(
            self,
            receipt,
            |t, r| t.move_to_end(r).await,
            Err(foreign_receipt())
        )
    }

    /// The binding's own bulk move when every receipt is its own; one at a time otherwise (a
    /// foreign receipt is then refused by `move_to_end`).
    async fn move_all_to_end(&self, receipts: &[&AnyReceipt]) -> Vec<Result<()>> {
        match with_binding!(self, |t| in_bulk(t, receipts).await) {
            Some(moved) => moved,
            None => move_each_to_end(self, receipts).await,
        }
    }

    async fn depth(&self, queue: &str) -> Result<u64> {
        with_binding!(self, |t| t.depth(queue).await)
    }

    async fn dead_letter(&self, receipt: &AnyReceipt, dlq: &str, body: Bytes) -> Result<()> {
        with_receipt!(
            self,
            receipt,
            |t, r| t.dead_letter(r, dlq, body).await,
            Err(foreign_receipt())
        )
    }

    fn dead_letter_queue(&self, queue: &str) -> String {
        with_binding!(self, |t| t.dead_letter_queue(queue))
    }

    fn schema_version(&self, receipt: &AnyReceipt) -> Option<String> {
        with_receipt!(self, receipt, |t, r| t.schema_version(r), None)
    }

    fn reservation_limit(&self) -> Option<usize> {
        with_binding!(self, |t| t.reservation_limit())
    }

    fn reservation_holds_for(&self) -> Option<Duration> {
        with_binding!(self, |t| t.reservation_holds_for())
    }

    async fn extend_reservation(&self, receipt: &AnyReceipt) -> Result<bool> {
        with_receipt!(
            self,
            receipt,
            |t, r| t.extend_reservation(r).await,
            Err(foreign_receipt())
        )
    }

    fn health(&self) -> Option<Health> {
        with_binding!(self, |t| t.health())
    }

    fn health_watch(&self) -> Option<tokio::sync::watch::Receiver<Health>> {
        with_binding!(self, |t| t.health_watch())
    }

    async fn unsubscribe(&self, queue: &str) -> Result<()> {
        with_binding!(self, |t| t.unsubscribe(queue).await)
    }
}
