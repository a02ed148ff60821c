//! BabelQueue for Rust.
//!
//! The `{job, trace_id, data, meta, attempts}` JSON envelope that the PHP, Go, Python, Node, .NET
//! and Java SDKs produce and consume, written and read byte-compatibly.
//!
//! The contract layer is pure functions and types, no I/O, no async:
//!
//! - [`make`] builds an envelope, [`Envelope::encode`] writes the canonical bytes.
//! - [`decode`] reads strict JSON, resolves identity, drops forbidden keys with [`Warning`]s and
//!   keeps unknown keys; [`Envelope::accepts`] and [`classify`] give the consumer verdict.
//! - [`dead_letter`] annotates envelopes and builds poison records.
//! - [`projection`] holds every broker binding as data (RabbitMQ, SQS, Azure Service Bus, Pulsar,
//!   Kafka, Artemis, the Redis header frame) and the schema-version gates.
//! - [`idempotency`], [`schema`] and [`urn`] are the optional helpers; [`conformance`] runs the
//!   cross-SDK conformance suite.
//!
//! On top of it, the runtime (async, tokio):
//!
//! - [`BabelQueue`] connects to a queue by URL (`memory://`, `amqp://`, `redis://`), publishes,
//!   and hands out [`worker::Worker`]s and [`redrive`]s.
//! - [`transport`] holds the broker bindings, all behind one [`transport::Transport`] trait, so
//!   [`worker`] and [`redrive`] run the same code on every broker.
//! - See `docs/babelqueue-runtime.md` for the runtime's choices and what runs where.
//!
//! ```
//! use serde_json::json;
//!
//! let envelope = babelqueue::make(
//!     "urn:babel:orders:created",
//!     &json!({"order_id": 1042, "note": "café ☕"}),
//!     babelqueue::MakeOptions::new().queue("orders"),
//! )?;
//! let body = envelope.encode()?;
//! let decoded = babelqueue::decode(body.as_bytes())?;
//! assert_eq!(decoded.envelope, envelope);
//! assert_eq!(decoded.envelope.accepts(), Ok(()));
//! # Ok::<(), babelqueue::Error>(())
//! ```

mod canonical;
mod client;
mod codec;
pub mod conformance;
pub mod dead_letter;
pub mod envelope;
mod error;
mod finite;
pub mod idempotency;
pub mod inspect;
mod make;
pub mod projection;
mod rawjson;
pub mod redrive;
pub mod schema;
pub mod transport;
mod typed;
pub mod urn;
pub mod whitespace;
pub mod worker;

pub use client::{BabelQueue, BabelQueueBuilder};

pub use codec::{
    Decoded, Reason, Verdict, Warning, WarningHook, classify, decode, set_warning_hook,
};
pub use dead_letter::{DeadLetter, DeadLetterInfo, DeadLetterReason, poison_record};
pub use envelope::{Envelope, Meta, RawJson, SCHEMA_VERSION, SOURCE_LANG};
pub use error::{Error, PoisonCause, Result};
pub use make::{MakeOptions, Message, make};
