//! ActiveMQ Artemis (AMQP 1.0 / JMS), for the conformance runner: the JMS type annotation, the
//! `bq_` properties and the delivery-count rule.

use super::APP_ID;
use crate::codec::envelope::Envelope;

/// The ActiveMQ Artemis (AMQP 1.0 / JMS) projection of an envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtemisProjection {
    /// The message annotation carrying the URN: `x-opt-jms-type` (JMSType).
    pub jms_type_annotation: &'static str,
    /// The URN.
    pub jms_type: Option<String>,
    /// `correlation-id` = `trace_id`.
    pub correlation_id: Option<String>,
    /// `creation-time` = `meta.created_at`.
    pub creation_time: Option<i64>,
    /// `bq_schema_version`, `bq_source_lang`, `bq_attempts`, `bq_app_id` (underscores: JMS names).
    pub properties: Vec<(&'static str, String)>,
}

/// The Artemis projection of an envelope.
pub fn artemis_projection(envelope: &Envelope) -> ArtemisProjection {
    let meta = envelope.meta();
    let properties = [
        (
            "bq_schema_version",
            meta.and_then(|m| m.schema_version()).map(|v| v.to_string()),
        ),
        (
            "bq_source_lang",
            meta.and_then(|m| m.lang()).map(str::to_owned),
        ),
        (
            "bq_attempts",
            Some(envelope.attempts().unwrap_or(0).to_string()),
        ),
        ("bq_app_id", Some(APP_ID.to_owned())),
    ]
    .into_iter()
    .filter_map(|(name, value)| value.map(|value| (name, value)))
    .collect();
    ArtemisProjection {
        jms_type_annotation: "x-opt-jms-type",
        jms_type: envelope.urn().map(str::to_owned),
        correlation_id: envelope.trace_id().map(str::to_owned),
        creation_time: meta.and_then(|m| m.created_at()),
        properties,
    }
}

/// Artemis attempts: `max(body, delivery-count)` (AMQP 0-based, no −1).
pub fn artemis_attempts(body_attempts: i64, delivery_count: Option<i64>) -> i64 {
    delivery_count.map_or(body_attempts, |count| body_attempts.max(count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delivery_count_raises_the_body_count() {
        assert_eq!(artemis_attempts(2, Some(5)), 5);
    }
}
