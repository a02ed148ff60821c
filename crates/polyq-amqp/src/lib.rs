//! One AMQP 0-9-1 model for polyq.
//!
//! The AceMQ and BabelQueue runtimes talk to brokers through this crate. It has two
//! implementations chosen by URL: `amqp://` / `amqps://` over lapin (feature `amqp`), and
//! `memory://`, an embedded in-process broker with the same semantics.

#[cfg(feature = "amqp")]
mod amqp;
mod client;
mod error;
mod health;
mod memory;
mod message;
pub mod message_json;
mod properties;
mod redact;
mod tls;
mod topology;
mod value;

pub use client::{Acker, Client, ClientOptions, Confirm, ConsumeOptions, Consumer};
pub use error::{Error, Result, SourceError, error_chain};
pub use health::Health;
pub use message::{Delivery, OutgoingMessage, PublishOutcome, ReturnedMessage};
pub use message_json::MessageJson;
pub use properties::Properties;
pub use redact::redact_url;
pub use tls::TlsOptions;
pub use topology::{Binding, ExchangeKind, ExchangeSpec, QueueInfo, QueueSpec};
pub use value::{FieldTable, FieldValue};
