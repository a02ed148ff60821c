//! Amazon SQS, for the conformance runner: message attributes and the receive-count rule.

use crate::codec::envelope::Envelope;
use crate::codec::whitespace::trim;

/// One SQS message attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsAttribute {
    /// The attribute name (`bq-job`, …).
    pub name: &'static str,
    /// `String` or `Number`.
    pub data_type: &'static str,
    /// The value as text.
    pub string_value: String,
}

/// The SQS `MessageAttributes`: `bq-job`, `bq-trace-id`, `bq-message-id` (String),
/// `bq-schema-version` (Number), `bq-source-lang` (String), `bq-created-at` (Number), in that
/// order; missing sources are omitted.
pub fn sqs_attributes(envelope: &Envelope) -> Vec<SqsAttribute> {
    let meta = envelope.meta();
    let fields: [(&'static str, &'static str, Option<String>); 6] = [
        ("bq-job", "String", envelope.urn().map(str::to_owned)),
        (
            "bq-trace-id",
            "String",
            envelope.trace_id().map(str::to_owned),
        ),
        (
            "bq-message-id",
            "String",
            meta.and_then(|m| m.id()).map(str::to_owned),
        ),
        (
            "bq-schema-version",
            "Number",
            meta.and_then(|m| m.schema_version()).map(|v| v.to_string()),
        ),
        (
            "bq-source-lang",
            "String",
            meta.and_then(|m| m.lang()).map(str::to_owned),
        ),
        (
            "bq-created-at",
            "Number",
            meta.and_then(|m| m.created_at()).map(|v| v.to_string()),
        ),
    ];
    fields
        .into_iter()
        .filter_map(|(name, data_type, value)| {
            value.map(|string_value| SqsAttribute {
                name,
                data_type,
                string_value,
            })
        })
        .collect()
}

/// SQS attempts: `max(body, ApproximateReceiveCount − 1)`; an absent or unreadable count is
/// ignored.
///
/// ```
/// use babelqueue::projection::sqs_attempts;
///
/// assert_eq!(sqs_attempts(0, Some("3")), 2);
/// assert_eq!(sqs_attempts(4, Some("not-a-number")), 4);
/// ```
pub fn sqs_attempts(body_attempts: i64, approximate_receive_count: Option<&str>) -> i64 {
    approximate_receive_count
        .and_then(|count| trim(count).parse::<i64>().ok())
        .map_or(body_attempts, |count| {
            body_attempts.max(count.saturating_sub(1))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_receive_count_keeps_the_body_count() {
        assert_eq!(sqs_attempts(3, None), 3);
    }
}
