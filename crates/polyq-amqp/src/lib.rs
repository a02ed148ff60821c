//! One AMQP 0-9-1 model for polyq.
//!
//! The AceMQ and BabelQueue runtimes talk to brokers through this crate: it is where their bytes
//! meet RabbitMQ or the embedded broker. [`Client`] has two implementations chosen by URL:
//!
//! - `amqp://` / `amqps://`: RabbitMQ over lapin (feature `amqp`, on by default). Every publishing
//!   channel runs in confirm mode; a mandatory publish that comes back is attributed to its own
//!   [`Confirm`]; a supervisor reconnects, declares the recorded topology again and resumes
//!   consumers; [`Health`] carries the broker's blocked notice.
//! - `memory://NAME`: the embedded in-process broker, with RabbitMQ's semantics for the subset
//!   both families use (exchanges of every kind, bindings, durable and exclusive queues,
//!   `x-message-ttl` with dead-letter exchanges and `x-death`, returns, confirms, prefetch, ack,
//!   nack, requeue). Every `memory://NAME` in one process is the same broker.
//!
//! ```
//! use polyq_amqp::{Client, OutgoingMessage, Properties, PublishOutcome, QueueSpec};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let client = Client::connect("memory://crate-docs").await?;
//! client.declare_queue(&QueueSpec::new("orders")).await?;
//! let message = OutgoingMessage::new("", "orders", Properties::default().persistent(), "{}");
//! assert_eq!(client.publish(message).await?.await?, PublishOutcome::Acked);
//! let delivery = client.get("orders").await?.expect("the message just published");
//! assert_eq!(&delivery.body[..], b"{}");
//! delivery.ack().await?;
//! # Ok::<(), polyq_amqp::Error>(())
//! # }).unwrap();
//! ```
//!
//! # Map of the crate
//!
//! - `client`: [`Client`], [`ClientOptions`], [`ConsumeOptions`], [`Confirm`], [`Acker`],
//!   [`Consumer`].
//! - `amqp`: RabbitMQ: session, recovery supervisor, confirm ledger, conversion to lapin types.
//! - `memory`: the embedded broker: routing, queues, expiry and dead-lettering, limits.
//! - `management`: RabbitMQ's management HTTP API: [`management::Management`] (feature
//!   `management`).
//! - [`message_json`]: the one JSON shape of a message on the `polyq` command line.
//! - `topology`, `properties`, `value`: [`QueueSpec`], [`ExchangeSpec`], [`Binding`],
//!   [`Properties`], [`FieldValue`].
//! - `error`: [`Error`], with predicates a caller decides with.
//!
//! A longer example on the embedded broker, a retry rung and a dead-letter queue:
//! `cargo run -p polyq-amqp --example embedded_broker`. How the two families use this crate:
//! the `acemq` and `babelqueue` crate docs, and `docs/` in the repository.
//!
// Without the feature its module is not built: its links lead to the feature's note instead.
#![cfg_attr(
    not(feature = "management"),
    doc = "[`management`]: crate#feature-flags\n[`management::Management`]: crate#feature-flags"
)]
//! # Feature flags
//!
//! - `amqp` (default): `amqp://` and `amqps://` over lapin. Without it, only `memory://`.
//! - `management`: [`management`], RabbitMQ's management HTTP API (which queues a vhost has,
//!   with depths, consumers, rates and arguments), over reqwest with rustls.
//! - `arbitrary`: [`FieldValue`] (and so [`FieldTable`]) implements `arbitrary::Arbitrary`, so a
//!   fuzz target can build header tables from its input.
//!
//! # Logging
//!
//! This crate logs through `tracing` by exchange, queue, routing key, ids and reply codes, never
//! a message body or a header value, and never a password. lapin, underneath, logs every
//! message the broker returns with its whole content (body bytes, headers) at `warn`, under the
//! target `lapin::returned_messages`; a library cannot filter its application's subscriber, so
//! add [`LAPIN_RETURN_LOG_OFF`] to yours. This crate logs each return itself, without content:
//!
//! ```
//! let filter = tracing_subscriber::EnvFilter::new("warn")
//!     .add_directive(polyq_amqp::LAPIN_RETURN_LOG_OFF.parse().expect("a valid directive"));
//! # drop(filter);
//! ```

mod addresses;
#[cfg(feature = "amqp")]
mod amqp;
pub mod browse;
mod client;
mod error;
mod health;
#[cfg(feature = "management")]
pub mod management;
mod memory;
mod message;
pub mod message_json;
mod properties;
mod redact;
mod tls;
mod topology;
mod value;
mod vhost;

/// The `tracing` filter directive that silences lapin's log line for a returned message, which
/// holds the message's body and header values: add it to the application's subscriber (see
/// [Logging](crate#logging)).
pub const LAPIN_RETURN_LOG_OFF: &str = "lapin::returned_messages=off";

pub use addresses::{join_addresses, split_addresses};
pub use client::{Acker, Client, ClientOptions, Confirm, ConsumeOptions, Consumer};
pub use error::{Error, Result, SourceError, error_chain};
pub use health::Health;
pub use message::{Delivery, OutgoingMessage, PublishOutcome, ReturnedMessage};
pub use message_json::MessageJson;
pub use properties::{Properties, SHORT_STRING_MAX, short_string_or_none};
pub use redact::redact_url;
pub use tls::TlsOptions;
pub use topology::{Binding, ExchangeKind, ExchangeSpec, QueueInfo, QueueSpec};
pub use value::{FieldTable, FieldValue};
pub use vhost::vhost_of;
