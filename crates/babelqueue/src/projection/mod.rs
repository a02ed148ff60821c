//! Broker bindings as data: what each transport puts beside the envelope body, how it reconciles
//! `attempts` with the broker's own delivery count, and the `bq-schema-version` gate. Transports
//! only move bytes; the decisions live here.

use std::borrow::Cow;

use polyq_amqp::{FieldValue, Properties};

use crate::codec::envelope::Envelope;
use crate::codec::raw_json::push_str_literal;
use crate::codec::whitespace::{is_blank, trim};

/// `app_id` / `bq_app_id` of every BabelQueue producer.
pub const APP_ID: &str = "babelqueue";
/// The content type of every BabelQueue body.
pub const CONTENT_TYPE: &str = "application/json";

/// The AMQP 0-9-1 properties and headers of a RabbitMQ publish: `type` = URN, `correlation_id` =
/// `trace_id`, `message_id` = `meta.id`, `app_id` `babelqueue`, `application/json`, `utf-8`,
/// persistent, and native-typed headers `x-schema-version`, `x-source-lang`, `x-attempts`.
/// Out-of-band headers (`traceparent`, `bq-replay-bypass`, …) are merged first, so contract keys
/// win a collision; blank names and values are dropped. Missing sources are omitted.
///
/// ```
/// use polyq_amqp::FieldValue;
///
/// let envelope = babelqueue::make("urn:babel:a:b", &serde_json::json!({}), Default::default()).unwrap();
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
    props.kind = envelope.urn().map(str::to_owned);
    props.correlation_id = envelope.trace_id().map(str::to_owned);
    let meta = envelope.meta();
    props.message_id = meta.and_then(|m| m.id()).map(str::to_owned);
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

/// The string properties of a Pulsar (or, with [`kafka_headers`], Kafka) message: `bq-job`,
/// `bq-trace-id`, `bq-message-id`, `bq-schema-version`, `bq-source-lang`, `bq-attempts`.
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

/// The reserved key that marks a Redis header frame.
pub const FRAME_KEY: &str = "__bq_frame";

/// The Redis list value for `body` with out-of-band `headers`: the bare body when no header
/// survives (blank names and values are dropped), otherwise the frame
/// `{"__bq_frame":1,"headers":{…},"body":"<envelope>"}`.
///
/// ```
/// use babelqueue::projection::{frame, unframe};
///
/// assert_eq!(frame("{}", &[("traceparent", "")]), "{}");
/// let stored = frame(r#"{"job":"u"}"#, &[("traceparent", "00-a")]);
/// assert_eq!(stored, r#"{"__bq_frame":1,"headers":{"traceparent":"00-a"},"body":"{\"job\":\"u\"}"}"#);
/// let (body, headers) = unframe(&stored);
/// assert_eq!(body, r#"{"job":"u"}"#);
/// assert_eq!(headers, vec![("traceparent".to_owned(), "00-a".to_owned())]);
/// ```
pub fn frame<'a>(body: &'a str, headers: &[(&str, &str)]) -> Cow<'a, str> {
    let mut clean: Vec<(&str, &str)> = Vec::with_capacity(headers.len());
    for (name, value) in headers
        .iter()
        .filter(|(n, v)| !n.is_empty() && !v.is_empty())
    {
        match clean.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => clean.push((name, value)),
        }
    }
    if clean.is_empty() {
        return Cow::Borrowed(body);
    }
    let mut out = String::with_capacity(body.len() + 64);
    out.push_str("{\"");
    out.push_str(FRAME_KEY);
    out.push_str("\":1,\"headers\":{");
    for (i, (name, value)) in clean.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str_literal(&mut out, name);
        out.push(':');
        push_str_literal(&mut out, value);
    }
    out.push_str("},\"body\":");
    push_str_literal(&mut out, body);
    out.push('}');
    Cow::Owned(out)
}

/// Reads a stored Redis list value: the envelope body and the headers of a frame, or the value
/// itself (as the body, no headers) when it is not a frame. Keep the stored value as the ack
/// handle.
pub fn unframe(stored: &str) -> (Cow<'_, str>, Vec<(String, String)>) {
    #[derive(serde::Deserialize)]
    struct Frame {
        #[serde(rename = "__bq_frame")]
        marker: serde_json::Value,
        headers: Option<serde_json::Value>,
        body: serde_json::Value,
    }
    if !stored.starts_with('{') || !stored.contains("\"__bq_frame\"") {
        return (Cow::Borrowed(stored), Vec::new());
    }
    let Ok(frame) = serde_json::from_str::<Frame>(stored) else {
        return (Cow::Borrowed(stored), Vec::new());
    };
    let marked = match &frame.marker {
        serde_json::Value::Null | serde_json::Value::Bool(false) => false,
        serde_json::Value::Number(n) => n.as_f64() != Some(0.0),
        serde_json::Value::String(s) => !s.is_empty(),
        serde_json::Value::Array(a) => !a.is_empty(),
        serde_json::Value::Object(o) => !o.is_empty(),
        serde_json::Value::Bool(true) => true,
    };
    let serde_json::Value::String(body) = frame.body else {
        return (Cow::Borrowed(stored), Vec::new());
    };
    if !marked {
        return (Cow::Borrowed(stored), Vec::new());
    }
    let headers = match frame.headers {
        Some(serde_json::Value::Object(map)) => map
            .into_iter()
            .filter_map(|(name, value)| match value {
                serde_json::Value::String(v) if !name.is_empty() && !v.is_empty() => {
                    Some((name, v))
                }
                serde_json::Value::Null => None,
                other if !name.is_empty() => {
                    Some((name, other.to_string())).filter(|(_, v)| !v.is_empty())
                }
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    (Cow::Owned(body), headers)
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
    fn frame_drops_blank_headers_and_keeps_the_last_of_a_name() {
        let stored = frame("b", &[("a", "1"), ("", "x"), ("c", ""), ("a", "2")]);
        assert_eq!(stored, r#"{"__bq_frame":1,"headers":{"a":"2"},"body":"b"}"#);
        assert_eq!(
            unframe(&stored),
            (
                Cow::Owned("b".to_owned()),
                vec![("a".to_owned(), "2".to_owned())]
            )
        );
    }

    #[test]
    fn unframe_leaves_non_frames_alone() {
        for stored in [
            r#"{"job":"u"}"#,
            "not json",
            r#"{"__bq_frame":0,"body":"x"}"#,
            r#"{"__bq_frame":1,"body":5}"#,
        ] {
            let (body, headers) = unframe(stored);
            assert_eq!(body, stored);
            assert!(headers.is_empty());
        }
    }

    #[test]
    fn attempts_rules() {
        assert_eq!(asb_attempts(5, Some(2)), 5);
        assert_eq!(asb_attempts(3, Some(0)), 3);
        assert_eq!(kafka_attempts(5, Some(b"1")), 1);
        assert_eq!(kafka_attempts(3, None), 3);
        assert_eq!(kafka_attempts(3, Some(b"\xff")), 3);
        assert_eq!(artemis_attempts(2, Some(5)), 5);
        assert_eq!(sqs_attempts(3, None), 3);
    }
}
