//! What the fuzz targets share: AMQP header tables built from fuzz input, and a fixed clock.

pub mod targets;

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

/// A field value: any [`FieldValue`], as polyq-amqp's `arbitrary` feature builds it, or one of
/// the shapes the readers act on, drawn more often than arbitrary bytes would give them: text
/// (most headers are strings) and arrays and tables whose names are again mostly [`Name::Known`].
#[derive(Debug, Arbitrary)]
enum Value {
    Any(FieldValue),
    Text(String),
    Array(Vec<Value>),
    Table(Vec<(Name, Value)>),
}

impl From<Value> for FieldValue {
    fn from(value: Value) -> Self {
        match value {
            Value::Any(value) => value,
            Value::Text(text) => FieldValue::LongString(text.into_bytes()),
            Value::Array(items) => FieldValue::Array(items.into_iter().map(Into::into).collect()),
            Value::Table(entries) => FieldValue::Table(table_of(entries)),
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
