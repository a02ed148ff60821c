//! Every binding behind one type, chosen by URL.

use std::time::Duration;

use bytes::Bytes;

use super::{AmqpOptions, AmqpReceipt, AmqpTransport, Capabilities, Reserved, Transport};
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
}

impl ConnectOptions {
    /// Sets the AMQP prefetch window (default 100, see [`AmqpOptions::prefetch`]).
    pub fn prefetch(mut self, prefetch: u16) -> Self {
        self.amqp.prefetch = prefetch;
        self
    }

    /// Sets the Redis key layout (default [`RedisLayout::Default`]).
    pub fn redis_layout(mut self, layout: RedisLayout) -> Self {
        self.redis_layout = layout;
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
}

/// The receipt of an [`AnyTransport`] reservation.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyReceipt {
    /// From [`AnyTransport::Amqp`].
    Amqp(AmqpReceipt),
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
            "memory" | "amqp" | "amqps" => Ok(AnyTransport::Amqp(
                AmqpTransport::connect_with(url, options.amqp).await?,
            )),
            _ => Err(Error::UnsupportedUrl {
                url: polyq_amqp::redact_url(url),
                reason: if cfg!(feature = "redis") {
                    "expected memory://, amqp://, amqps://, redis:// or rediss://".to_owned()
                } else {
                    "expected memory://, amqp:// or amqps:// (redis:// needs the `redis` feature)"
                        .to_owned()
                },
            }),
        }
    }
}

/// Runs `$body` with `$t` bound to the binding and `$r` to its receipt.
macro_rules! with_receipt {
    ($self:ident, $receipt:ident, |$t:ident, $r:ident| $body:expr) => {
        match ($self, $receipt) {
            (AnyTransport::Amqp($t), AnyReceipt::Amqp($r)) => $body,
        }
    };
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
        match self {
            AnyTransport::Amqp(t) => t.capabilities(),
        }
    }

    async fn publish(&self, queue: &str, body: Bytes, headers: &[(String, String)]) -> Result<()> {
        match self {
            AnyTransport::Amqp(t) => t.publish(queue, body, headers).await,
        }
    }

    async fn reserve(&self, queue: &str, wait: Duration) -> Result<Option<Reserved<AnyReceipt>>> {
        match self {
            AnyTransport::Amqp(t) => Ok(wrap(t.reserve(queue, wait).await?, AnyReceipt::Amqp)),
        }
    }

    async fn ack(&self, receipt: &AnyReceipt) -> Result<()> {
        with_receipt!(self, receipt, |t, r| t.ack(r).await)
    }

    async fn retry(
        &self,
        receipt: &AnyReceipt,
        queue: &str,
        body: Bytes,
        headers: &[(String, String)],
        delay: Duration,
    ) -> Result<()> {
        with_receipt!(self, receipt, |t, r| t
            .retry(r, queue, body, headers, delay)
            .await)
    }

    async fn release(&self, receipt: &AnyReceipt, delay: Duration) -> Result<()> {
        with_receipt!(self, receipt, |t, r| t.release(r, delay).await)
    }

    async fn dead_letter(&self, receipt: &AnyReceipt, dlq: &str, body: Bytes) -> Result<()> {
        with_receipt!(self, receipt, |t, r| t.dead_letter(r, dlq, body).await)
    }

    fn schema_version(&self, receipt: &AnyReceipt) -> Option<String> {
        with_receipt!(self, receipt, |t, r| t.schema_version(r))
    }

    async fn unsubscribe(&self, queue: &str) -> Result<()> {
        match self {
            AnyTransport::Amqp(t) => t.unsubscribe(queue).await,
        }
    }
}
