//! One AMQP 0-9-1 model for polyq.
//!
//! The AceMQ and BabelQueue runtimes talk to brokers through this crate. It has two
//! implementations chosen by URL: `amqp://` / `amqps://` over lapin (feature `amqp`), and
//! `memory://`, an embedded in-process broker with the same semantics.

mod properties;
mod redact;
mod value;

pub use properties::Properties;
pub use redact::redact_url;
pub use value::{FieldTable, FieldValue};
