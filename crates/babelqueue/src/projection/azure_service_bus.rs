//! Azure Service Bus, for the conformance runner: message fields, typed application properties,
//! the delivery-count rule and its own schema-version gate.

use super::{CONTENT_TYPE, SchemaGate, schema_version_gate};
use crate::codec::envelope::Envelope;

/// An Azure Service Bus application property value, with its AMQP 1.0 type.
#[derive(Debug, Clone, PartialEq)]
pub enum AsbValue {
    /// Present with no value.
    Null,
    /// `string`.
    String(String),
    /// `byte`.
    Byte(i8),
    /// `short`.
    Short(i16),
    /// `int`.
    Int(i32),
    /// `long`.
    Long(i64),
    /// `ubyte`.
    UByte(u8),
    /// `ushort`.
    UShort(u16),
    /// `uint`.
    UInt(u32),
    /// `ulong`.
    ULong(u64),
    /// `float`.
    Float(f32),
    /// `double`.
    Double(f64),
    /// Any other type (boolean, binary, timestamp, …).
    Other,
}

impl AsbValue {
    /// The value of an integral type of any width.
    pub fn as_integer(&self) -> Option<i128> {
        match *self {
            AsbValue::Byte(v) => Some(v.into()),
            AsbValue::Short(v) => Some(v.into()),
            AsbValue::Int(v) => Some(v.into()),
            AsbValue::Long(v) => Some(v.into()),
            AsbValue::UByte(v) => Some(v.into()),
            AsbValue::UShort(v) => Some(v.into()),
            AsbValue::UInt(v) => Some(v.into()),
            AsbValue::ULong(v) => Some(v.into()),
            _ => None,
        }
    }
}

/// The Azure Service Bus projection of an envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct AsbProjection {
    /// `Subject` = URN.
    pub subject: Option<String>,
    /// `CorrelationId` = `trace_id`.
    pub correlation_id: Option<String>,
    /// `MessageId` = `meta.id`.
    pub message_id: Option<String>,
    /// `ContentType` = `application/json`.
    pub content_type: &'static str,
    /// `bq-schema-version` (number), `bq-source-lang` (string), `bq-created-at` (number).
    pub application_properties: Vec<(&'static str, AsbValue)>,
}

/// The Azure Service Bus message fields and application properties of an envelope.
pub fn asb_projection(envelope: &Envelope) -> AsbProjection {
    let meta = envelope.meta();
    let mut application_properties = Vec::with_capacity(3);
    if let Some(version) = meta.and_then(|m| m.schema_version()) {
        application_properties.push(("bq-schema-version", AsbValue::Long(version)));
    }
    if let Some(lang) = meta.and_then(|m| m.lang()) {
        application_properties.push(("bq-source-lang", AsbValue::String(lang.to_owned())));
    }
    if let Some(created) = meta.and_then(|m| m.created_at()) {
        application_properties.push(("bq-created-at", AsbValue::Long(created)));
    }
    AsbProjection {
        subject: envelope.urn().map(str::to_owned),
        correlation_id: envelope.trace_id().map(str::to_owned),
        message_id: meta.and_then(|m| m.id()).map(str::to_owned),
        content_type: CONTENT_TYPE,
        application_properties,
    }
}

/// Azure Service Bus attempts: `max(body, DeliveryCount − 1)`; `DeliveryCount` ≤ 1 keeps the
/// body count.
pub fn asb_attempts(body_attempts: i64, delivery_count: Option<i64>) -> i64 {
    match delivery_count {
        Some(count) if count > 1 => body_attempts.max(count - 1),
        _ => body_attempts,
    }
}

/// The Azure Service Bus gate: as [`schema_version_gate`] for strings, `null` counts as absent,
/// an integral 1 of any width decodes, every other value (2, 0, 1.5, a float 1.0) rejects.
pub fn asb_schema_version_gate(value: Option<&AsbValue>) -> SchemaGate {
    match value {
        None | Some(AsbValue::Null) => SchemaGate::Decode,
        Some(AsbValue::String(text)) => schema_version_gate(Some(text)),
        Some(other) if other.as_integer() == Some(1) => SchemaGate::Decode,
        Some(_) => SchemaGate::Reject,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asb_gate_takes_an_integral_one_of_any_width() {
        for (value, gate) in [
            (AsbValue::Float(1.0), SchemaGate::Reject),
            (AsbValue::Double(1.0), SchemaGate::Reject),
            (AsbValue::Double(1.5), SchemaGate::Reject),
            (AsbValue::UByte(1), SchemaGate::Decode),
            (AsbValue::ULong(1), SchemaGate::Decode),
            (AsbValue::Int(1), SchemaGate::Decode),
            (AsbValue::Int(0), SchemaGate::Reject),
            (AsbValue::Long(2), SchemaGate::Reject),
        ] {
            assert_eq!(asb_schema_version_gate(Some(&value)), gate, "{value:?}");
        }
        assert_eq!(
            asb_schema_version_gate(Some(&AsbValue::Null)),
            SchemaGate::Decode
        );
    }

    #[test]
    fn the_delivery_count_minus_one_never_lowers_the_body_count() {
        assert_eq!(asb_attempts(5, Some(2)), 5);
        assert_eq!(asb_attempts(3, Some(0)), 3);
    }
}
