//! Conversion between the neutral value model and lapin's types, at the edge of the client.
//!
//! Outgoing conversion is fallible: AMQP short strings (property values, header names, exchange
//! and queue names) hold at most 255 bytes, and an oversized one must fail with an error naming
//! it rather than panic inside lapin. Incoming conversion is total: anything lapin parsed has a
//! neutral counterpart.

use std::fmt::Display;

use lapin::BasicProperties;
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::types::{
    AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable as LapinTable, LongString,
    ShortString,
};

use crate::error::{Error, Result};
use crate::properties::Properties;
use crate::tls::TlsOptions;
use crate::value::{FieldTable, FieldValue};

/// A short string, or an error saying which one was too long. `what` is only formatted for the
/// error: names are checked on every publish.
pub(super) fn short(operation: &str, what: impl Display, value: &str) -> Result<ShortString> {
    ShortString::try_new(value).map_err(|_| Error::Invalid {
        operation: operation.to_owned(),
        reason: format!(
            "{what} is {} bytes long; AMQP short strings hold at most 255",
            value.len()
        ),
    })
}

/// A neutral value as lapin's, for the wire.
pub(super) fn value_to_amqp(operation: &str, value: &FieldValue) -> Result<AMQPValue> {
    Ok(match value {
        FieldValue::Bool(v) => AMQPValue::Boolean(*v),
        FieldValue::I8(v) => AMQPValue::ShortShortInt(*v),
        FieldValue::U8(v) => AMQPValue::ShortShortUInt(*v),
        FieldValue::I16(v) => AMQPValue::ShortInt(*v),
        FieldValue::U16(v) => AMQPValue::ShortUInt(*v),
        FieldValue::I32(v) => AMQPValue::LongInt(*v),
        FieldValue::U32(v) => AMQPValue::LongUInt(*v),
        FieldValue::I64(v) => AMQPValue::LongLongInt(*v),
        FieldValue::F32(v) => AMQPValue::Float(*v),
        FieldValue::F64(v) => AMQPValue::Double(*v),
        FieldValue::Decimal { scale, value } => AMQPValue::DecimalValue(DecimalValue {
            scale: *scale,
            value: *value,
        }),
        FieldValue::LongString(bytes) => AMQPValue::LongString(LongString::from(bytes.clone())),
        FieldValue::Array(values) => AMQPValue::FieldArray(FieldArray::from(
            values
                .iter()
                .map(|v| value_to_amqp(operation, v))
                .collect::<Result<Vec<_>>>()?,
        )),
        FieldValue::Timestamp(v) => AMQPValue::Timestamp(*v),
        FieldValue::Table(table) => AMQPValue::FieldTable(table_to_amqp(operation, table)?),
        FieldValue::ByteArray(bytes) => AMQPValue::ByteArray(ByteArray::from(bytes.clone())),
        FieldValue::Void => AMQPValue::Void,
    })
}

/// A neutral table as lapin's, for the wire.
pub(super) fn table_to_amqp(operation: &str, table: &FieldTable) -> Result<LapinTable> {
    let mut out = LapinTable::default();
    for (name, value) in table {
        out.insert(
            short(
                operation,
                format_args!("header or argument name `{name}`"),
                name,
            )?,
            value_to_amqp(operation, value)?,
        );
    }
    Ok(out)
}

/// A value read from the wire. lapin has no short-string type letter on the wire (RabbitMQ reads
/// `s` as a signed 16-bit integer), so a short string can only be a value lapin built itself;
/// it is read as the long string it is on every other client.
pub(super) fn value_from_amqp(value: &AMQPValue) -> FieldValue {
    match value {
        AMQPValue::Boolean(v) => FieldValue::Bool(*v),
        AMQPValue::ShortShortInt(v) => FieldValue::I8(*v),
        AMQPValue::ShortShortUInt(v) => FieldValue::U8(*v),
        AMQPValue::ShortInt(v) => FieldValue::I16(*v),
        AMQPValue::ShortUInt(v) => FieldValue::U16(*v),
        AMQPValue::LongInt(v) => FieldValue::I32(*v),
        AMQPValue::LongUInt(v) => FieldValue::U32(*v),
        AMQPValue::LongLongInt(v) => FieldValue::I64(*v),
        AMQPValue::Float(v) => FieldValue::F32(*v),
        AMQPValue::Double(v) => FieldValue::F64(*v),
        AMQPValue::DecimalValue(d) => FieldValue::Decimal {
            scale: d.scale,
            value: d.value,
        },
        AMQPValue::ShortString(s) => FieldValue::LongString(s.as_str().as_bytes().to_vec()),
        AMQPValue::LongString(s) => FieldValue::LongString(s.as_bytes().to_vec()),
        AMQPValue::FieldArray(values) => {
            FieldValue::Array(values.as_slice().iter().map(value_from_amqp).collect())
        }
        AMQPValue::Timestamp(v) => FieldValue::Timestamp(*v),
        AMQPValue::FieldTable(table) => FieldValue::Table(table_from_amqp(table)),
        AMQPValue::ByteArray(bytes) => FieldValue::ByteArray(bytes.as_slice().to_vec()),
        AMQPValue::Void => FieldValue::Void,
    }
}

/// A table read from the wire.
pub(super) fn table_from_amqp(table: &LapinTable) -> FieldTable {
    table
        .inner()
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), value_from_amqp(value)))
        .collect()
}

/// Our properties as lapin's, for a publish.
pub(super) fn properties_to_amqp(operation: &str, props: &Properties) -> Result<BasicProperties> {
    let text = |what: &str, value: &Option<String>| -> Result<Option<ShortString>> {
        value
            .as_deref()
            .map(|v| short(operation, format_args!("property `{what}`"), v))
            .transpose()
    };
    let mut out = BasicProperties::default();
    if let Some(v) = text("content_type", &props.content_type)? {
        out = out.with_content_type(v);
    }
    if let Some(v) = text("content_encoding", &props.content_encoding)? {
        out = out.with_content_encoding(v);
    }
    if !props.headers.is_empty() {
        out = out.with_headers(table_to_amqp(operation, &props.headers)?);
    }
    if let Some(v) = props.delivery_mode {
        out = out.with_delivery_mode(v);
    }
    if let Some(v) = props.priority {
        out = out.with_priority(v);
    }
    if let Some(v) = text("correlation_id", &props.correlation_id)? {
        out = out.with_correlation_id(v);
    }
    if let Some(v) = text("reply_to", &props.reply_to)? {
        out = out.with_reply_to(v);
    }
    // RabbitMQ closes the channel on an expiration it cannot read; refuse it here instead.
    props.expiration_ttl(operation)?;
    if let Some(v) = text("expiration", &props.expiration)? {
        out = out.with_expiration(v);
    }
    if let Some(v) = text("message_id", &props.message_id)? {
        out = out.with_message_id(v);
    }
    if let Some(v) = props.timestamp {
        out = out.with_timestamp(v);
    }
    if let Some(v) = text("type", &props.kind)? {
        out = out.with_type(v);
    }
    if let Some(v) = text("user_id", &props.user_id)? {
        out = out.with_user_id(v);
    }
    if let Some(v) = text("app_id", &props.app_id)? {
        out = out.with_app_id(v);
    }
    Ok(out)
}

/// lapin's properties of a received message as ours. The deprecated `cluster_id` has no
/// counterpart and is dropped.
pub(super) fn properties_from_amqp(props: &BasicProperties) -> Properties {
    let text = |value: &Option<ShortString>| value.as_ref().map(|v| v.as_str().to_owned());
    Properties {
        content_type: text(props.content_type()),
        content_encoding: text(props.content_encoding()),
        headers: props
            .headers()
            .as_ref()
            .map(table_from_amqp)
            .unwrap_or_default(),
        delivery_mode: *props.delivery_mode(),
        priority: *props.priority(),
        correlation_id: text(props.correlation_id()),
        reply_to: text(props.reply_to()),
        expiration: text(props.expiration()),
        message_id: text(props.message_id()),
        timestamp: *props.timestamp(),
        kind: text(props.kind()),
        user_id: text(props.user_id()),
        app_id: text(props.app_id()),
    }
}

/// lapin's TLS settings for the client's: extra trusted authorities, and the client certificate
/// as a PEM chain with its PKCS#8 key.
pub(super) fn lapin_tls(tls: &TlsOptions) -> OwnedTLSConfig {
    OwnedTLSConfig {
        identity: tls
            .client_certificate_pem()
            .map(|(certificate, key)| OwnedIdentity::PKCS8 {
                pem: certificate.as_bytes().to_vec(),
                key: key.as_bytes().to_vec(),
            }),
        cert_chain: tls.root_certificates_pem().map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_value() -> Vec<FieldValue> {
        let mut nested = FieldTable::new();
        nested.insert("inner".into(), FieldValue::from("x"));
        vec![
            FieldValue::Bool(true),
            FieldValue::I8(-8),
            FieldValue::U8(200),
            FieldValue::I16(-16_000),
            FieldValue::U16(60_000),
            FieldValue::I32(-2_000_000_000),
            FieldValue::U32(4_000_000_000),
            FieldValue::I64(i64::MIN),
            FieldValue::F32(1.5),
            FieldValue::F64(-2.25),
            FieldValue::Decimal {
                scale: 2,
                value: 12_345,
            },
            FieldValue::LongString(vec![0xff, b'a']),
            FieldValue::Array(vec![FieldValue::I32(1), FieldValue::from("two")]),
            FieldValue::Timestamp(1_700_000_000),
            FieldValue::Table(nested),
            FieldValue::ByteArray(vec![0, 1, 2, 255]),
            FieldValue::Void,
        ]
    }

    #[test]
    fn every_field_value_round_trips_with_its_type() {
        for value in every_value() {
            let amqp = value_to_amqp("test", &value).expect("converts");
            assert_eq!(
                amqp.get_type().get_id(),
                value.type_letter(),
                "type letter of {value:?}"
            );
            assert_eq!(value_from_amqp(&amqp), value);
        }
    }

    #[test]
    fn lapin_short_strings_read_as_long_strings() {
        let short = AMQPValue::ShortString("order.placed".into());
        assert_eq!(value_from_amqp(&short), FieldValue::from("order.placed"));
    }

    #[test]
    fn oversized_header_names_are_refused_with_the_name() {
        let mut table = FieldTable::new();
        let name = "h".repeat(256);
        table.insert(name.clone(), FieldValue::Bool(true));
        let error = table_to_amqp("publish", &table).expect_err("256-byte name");
        assert!(matches!(error, Error::Invalid { .. }), "{error:?}");
        assert!(error.to_string().contains(&name[..20]), "{error}");
    }

    #[test]
    fn properties_round_trip() {
        let mut headers = FieldTable::new();
        for (i, value) in every_value().into_iter().enumerate() {
            headers.insert(format!("h{i}"), value);
        }
        let props = Properties {
            content_type: Some("application/json".into()),
            content_encoding: Some("gzip".into()),
            headers,
            delivery_mode: Some(2),
            priority: Some(5),
            correlation_id: Some("corr".into()),
            reply_to: Some("replies".into()),
            expiration: Some("60000".into()),
            message_id: Some("m-1".into()),
            timestamp: Some(1_700_000_000),
            kind: Some("order.placed".into()),
            user_id: Some("guest".into()),
            app_id: Some("polyq".into()),
        };
        let amqp = properties_to_amqp("publish", &props).expect("converts");
        assert_eq!(properties_from_amqp(&amqp), props);
    }

    #[test]
    fn empty_headers_are_no_headers() {
        let amqp = properties_to_amqp("publish", &Properties::default()).expect("converts");
        assert_eq!(amqp.headers(), &None);
        assert_eq!(amqp, BasicProperties::default());
    }

    #[test]
    fn invalid_expiration_is_refused_with_its_value() {
        let props = Properties {
            expiration: Some("soon".into()),
            ..Properties::default()
        };
        match properties_to_amqp("publish", &props) {
            Err(Error::Invalid { operation, reason }) => {
                assert_eq!(operation, "publish");
                assert!(reason.contains("`expiration` is `soon`"), "{reason}");
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn oversized_property_is_refused_with_its_name() {
        let props = Properties {
            message_id: Some("m".repeat(300)),
            ..Properties::default()
        };
        let error = properties_to_amqp("publish", &props).expect_err("300-byte id");
        assert!(error.to_string().contains("message_id"), "{error}");
    }
}
