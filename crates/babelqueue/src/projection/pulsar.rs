//! Apache Pulsar, for the conformance runner: string message properties and the redelivery rule.

use crate::codec::envelope::Envelope;

/// The string properties of a Pulsar (or, with [`kafka_headers`](super::kafka_headers), Kafka)
/// message: `bq-job`, `bq-trace-id`, `bq-message-id`, `bq-schema-version`, `bq-source-lang`,
/// `bq-attempts`.
pub fn pulsar_properties(envelope: &Envelope) -> Vec<(&'static str, String)> {
    let meta = envelope.meta();
    [
        ("bq-job", envelope.urn().map(str::to_owned)),
        ("bq-trace-id", envelope.trace_id().map(str::to_owned)),
        (
            "bq-message-id",
            meta.and_then(|m| m.id()).map(str::to_owned),
        ),
        (
            "bq-schema-version",
            meta.and_then(|m| m.schema_version()).map(|v| v.to_string()),
        ),
        (
            "bq-source-lang",
            meta.and_then(|m| m.lang()).map(str::to_owned),
        ),
        (
            "bq-attempts",
            Some(envelope.attempts().unwrap_or(0).to_string()),
        ),
    ]
    .into_iter()
    .filter_map(|(name, value)| value.map(|value| (name, value)))
    .collect()
}

/// Pulsar attempts: a valid `bq-attempts` property (plain ASCII digits fitting a signed 32-bit
/// integer) replaces the body count, then `max(…, RedeliveryCount)` (0-based, no −1).
///
/// ```
/// use babelqueue::projection::pulsar_attempts;
///
/// assert_eq!(pulsar_attempts(2, None, Some(5)), 5);
/// assert_eq!(pulsar_attempts(2, Some("7"), Some(5)), 7);
/// assert_eq!(pulsar_attempts(2, Some("+7"), None), 2);
/// ```
pub fn pulsar_attempts(
    body_attempts: i64,
    bq_attempts: Option<&str>,
    redelivery_count: Option<i64>,
) -> i64 {
    let base = bq_attempts
        .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|text| text.parse::<i32>().ok())
        .map_or(body_attempts, i64::from);
    redelivery_count.map_or(base, |count| base.max(count))
}
