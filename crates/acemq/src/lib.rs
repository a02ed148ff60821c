//! AceMQ for Rust.
//!
//! The AceMQ envelope travels in AMQP headers (`x-acemq-*` reserved, `acemq-*` shared); this
//! crate writes and reads it exactly as the Java reference and the Go, Python, Ruby and .NET ports
//! do.
//!
//! The contract layer is pure: no I/O, no async, and only the neutral AMQP types of
//! `polyq-amqp` ([`FieldValue`](polyq_amqp::FieldValue), [`FieldTable`](polyq_amqp::FieldTable),
//! [`Properties`](polyq_amqp::Properties)).
//!
//! - [`Envelope`] and [`EnvelopeBuilder`]: the fields, their defaults and derivations.
//! - [`wire`]: the envelope to and from headers and `message-id` (methods on [`Envelope`]).
//! - [`RoutingSlip`] (declared pipelines) and [`Itinerary`] (the carried JSON slip).
//! - [`retry`]: policies, the schedule, the retry decision, jitter, broker waits.
//! - [`topology`]: queue names, rung arguments and the declared topology as data.
//! - [`provenance`]: the origin a publisher stamps.
//!
//! ```
//! use acemq::Envelope;
//! use polyq_amqp::Properties;
//!
//! let sent = Envelope::of("order.placed").header("x-tenant", "acme").build()?;
//! let mut properties = Properties::default().with_content_type("application/json");
//! sent.write_properties(&mut properties);
//!
//! let received = Envelope::from_properties(&properties, "orders.new");
//! assert_eq!(received, sent);
//! # Ok::<(), acemq::Error>(())
//! ```

pub mod codec;
mod connection;
pub mod consumer;
mod engine;
mod envelope;
mod error;
pub mod headers;
pub mod interceptor;
mod itinerary;
mod lenient;
#[cfg(feature = "otel")]
mod otel;
pub mod patterns;
pub mod provenance;
pub mod publisher;
pub mod retry;
mod route;
pub mod telemetry;
pub mod topology;
pub mod topology_apply;
pub mod wire;

pub use connection::{AceMq, AceMqBuilder, DEFAULT_MAX_OUTSTANDING_CONFIRMS, DEFAULT_URL};
pub use consumer::{Consumer, ConsumerBuilder, DrainReport, HandlerError, Message, Outcome};
pub use envelope::{Envelope, EnvelopeBuilder, FALLBACK_TYPE};
pub use error::{Error, Result, RuntimeError};
pub use itinerary::{Itinerary, Stop};
pub use publisher::{PendingConfirm, Publisher};
pub use route::RoutingSlip;
/// The date-time crate of this API ([`time::OffsetDateTime`] for first-seen and replay times).
pub use time;
