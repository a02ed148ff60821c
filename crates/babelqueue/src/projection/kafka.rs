//! Apache Kafka, for the conformance runner: record headers (Pulsar's properties as bytes), the
//! record timestamp and the `bq-attempts` rule.

use super::pulsar::pulsar_properties;
use crate::codec::envelope::Envelope;
use crate::codec::whitespace::trim;

/// The Kafka record headers (UTF-8 bytes), the same six as [`pulsar_properties`].
pub fn kafka_headers(envelope: &Envelope) -> Vec<(&'static str, Vec<u8>)> {
    pulsar_properties(envelope)
        .into_iter()
        .map(|(name, value)| (name, value.into_bytes()))
        .collect()
}

/// The Kafka record timestamp: `meta.created_at`.
pub fn kafka_timestamp(envelope: &Envelope) -> Option<i64> {
    envelope.meta().and_then(|m| m.created_at())
}

/// Kafka attempts: the `bq-attempts` header when present and readable (authoritative, even when
/// lower than the body), else the body count.
pub fn kafka_attempts(body_attempts: i64, bq_attempts: Option<&[u8]>) -> i64 {
    bq_attempts
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .and_then(|text| trim(text).parse::<i64>().ok())
        .unwrap_or(body_attempts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readable_header_wins_even_when_lower() {
        assert_eq!(kafka_attempts(5, Some(b"1")), 1);
        assert_eq!(kafka_attempts(3, None), 3);
        assert_eq!(kafka_attempts(3, Some(b"\xff")), 3);
    }
}
