//! Broker bindings as data: what each transport puts beside the envelope body, how it reconciles
//! `attempts` with the broker's own delivery count, and the `bq-schema-version` gate. Transports
//! only move bytes; the decisions live here, one file per broker.
//!
//! RabbitMQ ([`rabbitmq_properties`], [`rabbitmq_attempts`]) and the Redis header frame
//! ([`frame`], [`unframe`]) are what the live transports use. SQS, Azure Service Bus, Pulsar, Kafka
//! and Artemis have no transport here: their projections are the contract the conformance runner
//! checks, kept so that a Rust producer or relay agrees with the other SDKs on those brokers.

mod artemis;
mod azure_service_bus;
mod kafka;
mod pulsar;
mod rabbitmq;
mod redis;
mod sqs;

pub use artemis::{ArtemisProjection, artemis_attempts, artemis_projection};
pub use azure_service_bus::{
    AsbProjection, AsbValue, asb_attempts, asb_projection, asb_schema_version_gate,
};
pub use kafka::{kafka_attempts, kafka_headers, kafka_timestamp};
pub use pulsar::{pulsar_attempts, pulsar_properties};
pub use rabbitmq::{rabbitmq_attempts, rabbitmq_properties};
pub use redis::{FRAME_KEY, frame, unframe};
pub use sqs::{SqsAttribute, sqs_attempts, sqs_attributes};

use crate::codec::whitespace::is_blank;

/// `app_id` / `bq_app_id` of every BabelQueue producer.
pub const APP_ID: &str = "babelqueue";
/// The content type of every BabelQueue body.
pub const CONTENT_TYPE: &str = "application/json";

/// The verdict of the broker schema-version gate, taken before the body is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaGate {
    /// Decode the body normally (its own `meta.schema_version` check still applies).
    Decode,
    /// Do not decode: dead-letter the raw body without a `dead_letter` block, never retry.
    Reject,
}

/// The `bq-schema-version` (Artemis: `bq_schema_version`) gate of SQS, Pulsar, Kafka and Artemis:
/// absent, empty or ASCII-blank decodes; otherwise only exactly `"1"`, compared untrimmed.
///
/// ```
/// use babelqueue::projection::{SchemaGate, schema_version_gate};
///
/// assert_eq!(schema_version_gate(Some(" \t")), SchemaGate::Decode);
/// assert_eq!(schema_version_gate(Some(" 1")), SchemaGate::Reject);
/// assert_eq!(schema_version_gate(Some("\u{a0}")), SchemaGate::Reject);
/// ```
pub fn schema_version_gate(value: Option<&str>) -> SchemaGate {
    match value {
        None => SchemaGate::Decode,
        Some(text) if is_blank(text) || text == "1" => SchemaGate::Decode,
        Some(_) => SchemaGate::Reject,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_follows_the_contract_cases() {
        for value in ["1", "", " \t", " ", "\n\u{b}\u{c}\r"] {
            assert_eq!(
                schema_version_gate(Some(value)),
                SchemaGate::Decode,
                "{value:?}"
            );
        }
        for value in [
            "2",
            "01",
            "x",
            " 1",
            "1 ",
            "\t1\n",
            "\u{a0}",
            "\u{85}",
            "\u{3000}",
            "\u{feff}",
            "\u{a0}1",
            "1\u{3000}",
        ] {
            assert_eq!(
                schema_version_gate(Some(value)),
                SchemaGate::Reject,
                "{value:?}"
            );
        }
    }
}
