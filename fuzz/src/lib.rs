//! What the fuzz targets share: AMQP header tables built from fuzz input, and a fixed clock.

use arbitrary::{Arbitrary, Unstructured};
use polyq_amqp::{FieldTable, FieldValue, MessageJson};
use time::OffsetDateTime;

/// "Now" for every reader that takes a clock, so a run is deterministic: 2026-01-01T00:00:00Z,
/// a whole millisecond (the envelope keeps milliseconds).
pub fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_767_225_600).expect("a valid instant")
}

/// The header names the AceMQ readers look up: a fuzz-built table draws most of its names from
/// here, so the mutations reach the readers instead of landing in application headers.
const KNOWN_NAMES: &[&str] = &[
    acemq::headers::ID,
    acemq::headers::TYPE,
    acemq::headers::VERSION,
    acemq::headers::CORRELATION,
    acemq::headers::CAUSATION,
    acemq::headers::ATTEMPT,
    acemq::headers::FIRST_SEEN,
    acemq::headers::ORIGIN,
    acemq::headers::ERROR,
    acemq::headers::CLAIM,
    acemq::headers::ROUTE,
    acemq::headers::ROUTE_POSITION,
    acemq::headers::ROUTE_ID,
    acemq::headers::REPLAYED_FROM,
    acemq::headers::REPLAYED_AT,
    acemq::headers::REPLAY_COUNT,
    acemq::headers::REPLY_TO,
    acemq::headers::RESPONDER_ERROR,
    acemq::headers::ROUTING_SLIP,
    acemq::headers::TRACEPARENT,
    acemq::headers::TRACESTATE,
    "x-acemq-unknown",
];

#[derive(Debug, Arbitrary)]
enum Name {
    Known(u8),
    Other(String),
}

impl Name {
    fn into_string(self) -> String {
        match self {
            Name::Known(i) => KNOWN_NAMES[usize::from(i) % KNOWN_NAMES.len()].to_owned(),
            Name::Other(name) => name,
        }
    }
}

/// An AMQP field value in the shape `arbitrary` can build, one variant per wire type.
#[derive(Debug, Arbitrary)]
enum Value {
    Bool(bool),
    I8(i8),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    F32(f32),
    F64(f64),
    Decimal { scale: u8, value: u32 },
    Text(String),
    LongString(Vec<u8>),
    Array(Vec<Value>),
    Timestamp(u64),
    Table(Vec<(Name, Value)>),
    ByteArray(Vec<u8>),
    Void,
}

impl From<Value> for FieldValue {
    fn from(value: Value) -> Self {
        match value {
            Value::Bool(v) => FieldValue::Bool(v),
            Value::I8(v) => FieldValue::I8(v),
            Value::U8(v) => FieldValue::U8(v),
            Value::I16(v) => FieldValue::I16(v),
            Value::U16(v) => FieldValue::U16(v),
            Value::I32(v) => FieldValue::I32(v),
            Value::U32(v) => FieldValue::U32(v),
            Value::I64(v) => FieldValue::I64(v),
            Value::F32(v) => FieldValue::F32(v),
            Value::F64(v) => FieldValue::F64(v),
            Value::Decimal { scale, value } => FieldValue::Decimal { scale, value },
            Value::Text(v) => FieldValue::LongString(v.into_bytes()),
            Value::LongString(v) => FieldValue::LongString(v),
            Value::Array(items) => FieldValue::Array(items.into_iter().map(Into::into).collect()),
            Value::Timestamp(v) => FieldValue::Timestamp(v),
            Value::Table(entries) => FieldValue::Table(table_of(entries)),
            Value::ByteArray(v) => FieldValue::ByteArray(v),
            Value::Void => FieldValue::Void,
        }
    }
}

fn table_of(entries: Vec<(Name, Value)>) -> FieldTable {
    entries
        .into_iter()
        .map(|(name, value)| (name.into_string(), value.into()))
        .collect()
}

/// A header table built by `arbitrary`.
pub fn arbitrary_table(u: &mut Unstructured<'_>) -> arbitrary::Result<FieldTable> {
    Ok(table_of(Vec::arbitrary(u)?))
}

/// What a delivery gives the AceMQ readers: headers, routing key and `message-id`.
#[derive(Debug)]
pub struct Delivery {
    /// The headers.
    pub headers: FieldTable,
    /// The routing key.
    pub routing_key: String,
    /// The AMQP `message-id` property.
    pub message_id: Option<String>,
}

impl Delivery {
    /// Input starting with `{` is a message in the `polyq` message JSON shape, so the seeds are
    /// the fixtures' messages as they are; any other input is built by `arbitrary`.
    pub fn read(data: &[u8]) -> Option<Self> {
        if data.first() == Some(&b'{') {
            let message = MessageJson::parse(std::str::from_utf8(data).ok()?).ok()?;
            return Some(Self {
                headers: message.properties.headers,
                routing_key: message.routing_key,
                message_id: message.properties.message_id,
            });
        }
        let mut u = Unstructured::new(data);
        Some(Self {
            headers: arbitrary_table(&mut u).ok()?,
            routing_key: String::arbitrary(&mut u).ok()?,
            message_id: Option::arbitrary(&mut u).ok()?,
        })
    }
}
