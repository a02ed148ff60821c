//! RabbitMQ, and the embedded broker the same transport serves: the properties and native-typed
//! headers of a publish, and the consume-side reconciliation of `attempts` with `x-attempts`.

use polyq_amqp::{FieldValue, Properties, short_string_or_none};

use super::{APP_ID, CONTENT_TYPE};
use crate::codec::envelope::Envelope;

/// The AMQP 0-9-1 properties and headers of a RabbitMQ publish: `type` = URN, `correlation_id` =
/// `trace_id`, `message_id` = `meta.id`, `app_id` `babelqueue`, `application/json`, `utf-8`,
/// persistent, and native-typed headers `x-schema-version`, `x-source-lang`, `x-attempts`.
/// A URN, `trace_id` or `meta.id` over the 255 bytes an AMQP property holds is left out of its
/// property (the body carries it as it came), so that such a job can still be published,
/// retried and dead-lettered. Out-of-band headers (`traceparent`, `bq-replay-bypass`, …) are merged first, so contract keys
/// win a collision; blank names and values are dropped. Missing sources are omitted.
///
/// ```
/// use polyq_amqp::FieldValue;
///
/// let envelope =
///     babelqueue::make("urn:babel:a:b", &serde_json::json!({}), Default::default()).unwrap();
/// let props = babelqueue::projection::rabbitmq_properties(&envelope, &[("traceparent", "00-x")]);
/// assert_eq!(props.kind.as_deref(), Some("urn:babel:a:b"));
/// assert_eq!(props.headers["x-schema-version"], FieldValue::I32(1));
/// assert_eq!(props.headers["traceparent"].as_str(), Some("00-x"));
/// ```
pub fn rabbitmq_properties(envelope: &Envelope, out_of_band: &[(&str, &str)]) -> Properties {
    let mut props = Properties::default()
        .with_content_type(CONTENT_TYPE)
        .persistent();
    props.content_encoding = Some("utf-8".to_owned());
    props.app_id = Some(APP_ID.to_owned());
    props.kind = envelope.urn().and_then(short_string_or_none);
    props.correlation_id = envelope.trace_id().and_then(short_string_or_none);
    let meta = envelope.meta();
    props.message_id = meta.and_then(|m| m.id()).and_then(short_string_or_none);
    for (name, value) in out_of_band {
        if !name.is_empty() && !value.is_empty() {
            props
                .headers
                .insert((*name).to_owned(), FieldValue::from(*value));
        }
    }
    if let Some(version) = meta.and_then(|m| m.schema_version()) {
        props
            .headers
            .insert("x-schema-version".to_owned(), amqp_integer(version));
    }
    if let Some(lang) = meta.and_then(|m| m.lang()) {
        props
            .headers
            .insert("x-source-lang".to_owned(), FieldValue::from(lang));
    }
    if let Some(attempts) = envelope.attempts() {
        props
            .headers
            .insert("x-attempts".to_owned(), amqp_integer(attempts));
    }
    props
}

/// An integer header as the other SDKs write it: signed 32-bit when it fits, else 64-bit.
fn amqp_integer(value: i64) -> FieldValue {
    i32::try_from(value).map_or(FieldValue::I64(value), FieldValue::I32)
}

/// RabbitMQ consume-side attempts: the larger of the body count and an integer `x-attempts`
/// header of any width (a Laravel peer may count only in the header).
///
/// ```
/// use polyq_amqp::FieldValue;
/// use babelqueue::projection::rabbitmq_attempts;
///
/// assert_eq!(rabbitmq_attempts(1, Some(&FieldValue::I8(3))), 3);
/// assert_eq!(rabbitmq_attempts(4, Some(&FieldValue::from("9"))), 4);
/// ```
pub fn rabbitmq_attempts(body_attempts: i64, x_attempts: Option<&FieldValue>) -> i64 {
    x_attempts
        .and_then(FieldValue::as_i64)
        .map_or(body_attempts, |header| body_attempts.max(header))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rabbitmq_contract_headers_win_over_out_of_band_ones() {
        let body = br#"{"job":"urn:babel:a:b","trace_id":"t","data":{},"meta":{"id":"i","lang":"cobol","schema_version":1},"attempts":3000000000}"#;
        let envelope = crate::decode(body).unwrap().envelope;
        let props = rabbitmq_properties(
            &envelope,
            &[
                ("x-attempts", "9"),
                ("x-source-lang", "php"),
                ("traceparent", "00-x"),
                ("", "v"),
                ("k", ""),
            ],
        );
        assert_eq!(props.headers.len(), 4, "{:?}", props.headers);
        assert_eq!(props.headers["x-attempts"], FieldValue::I64(3_000_000_000));
        assert_eq!(props.headers["x-source-lang"].as_str(), Some("cobol"));
        assert_eq!(props.headers["x-schema-version"], FieldValue::I32(1));
        assert_eq!(props.delivery_mode, Some(2));
        assert_eq!(props.content_encoding.as_deref(), Some("utf-8"));
        assert_eq!(
            (props.message_id.as_deref(), props.correlation_id.as_deref()),
            (Some("i"), Some("t"))
        );
        assert_eq!(props.timestamp, None);
    }

    #[test]
    fn values_over_255_bytes_are_left_out_of_their_properties() {
        let fits = "f".repeat(255);
        let long = "l".repeat(256);
        for (value, projected) in [(&fits, Some(fits.as_str())), (&long, None)] {
            let body = format!(
                r#"{{"job":"urn:babel:a:{value}","trace_id":"{value}","data":{{}},"meta":{{"id":"{value}"}}}}"#
            );
            let envelope = crate::decode(body.as_bytes()).unwrap().envelope;
            let props = rabbitmq_properties(&envelope, &[]);
            assert_eq!(props.message_id.as_deref(), projected);
            assert_eq!(props.correlation_id.as_deref(), projected);
            assert_eq!(
                props.kind.is_some(),
                projected.is_some() && value.len() + "urn:babel:a:".len() <= 255
            );
        }
    }
}
