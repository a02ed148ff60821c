//! A broker message as JSON: the one shape every `polyq` command shows and takes, so the output
//! of one command is the input of another.
//!
//! ```json
//! {"exchange": "", "routing_key": "orders.new",
//!  "properties": {"message_id": "m-1", "content_type": "application/json", "delivery_mode": 2},
//!  "headers": {"x-tenant": "acme", "x-acemq-attempt": {"type": "I", "value": 1}},
//!  "body": "{\"id\":\"o-1\"}"}
//! ```
//!
//! A body that is not valid UTF-8 is `{"base64": "..."}`. Header values: JSON strings are long
//! strings (`S`), JSON integers signed 64-bit (`l`), JSON floats 64-bit (`d`), booleans `t`,
//! arrays `A`, objects tables `F`, and `null` is void (`V`). `{"type": "<letter>", "value": ...}`
//! pins any exact type: `{"type": "b", "value": 1}` is what pika writes for a small int,
//! `{"type": "x", "value": "<base64>"}` a byte array, `{"type": "D", "value": {"scale": 2,
//! "value": 1234}}` a decimal, `{"type": "T", "value": <seconds>}` a timestamp,
//! `{"type": "d", "value": "NaN"}` (or `"Infinity"`, `"-Infinity"`) a float JSON cannot spell,
//! and `{"type": "S", "base64": "..."}` a long string that is not UTF-8. A table that itself
//! looks like a typed value is written as `{"type": "F", "value": {...}}`.
//!
//! Writing picks the plain form whenever it reads back as the same type, so
//! [`MessageJson::parse`] of [`MessageJson::to_json_pretty`] gives back the same message.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::properties::Properties;
use crate::value::{FieldTable, FieldValue};

/// A message as the `polyq` commands show and take it.
///
/// ```
/// use polyq_amqp::{FieldValue, MessageJson};
///
/// let message = MessageJson::parse(r#"{
///     "routing_key": "orders.new",
///     "properties": {"content_type": "application/json", "delivery_mode": 2},
///     "headers": {"x-tenant": "acme", "x-small": {"type": "b", "value": 1}},
///     "body": "{}"
/// }"#)?;
/// assert_eq!(message.exchange, "");
/// assert_eq!(message.properties.delivery_mode, Some(2));
/// assert_eq!(message.properties.headers["x-small"], FieldValue::I8(1));
/// assert_eq!(&message.body[..], b"{}");
/// assert_eq!(MessageJson::parse(&message.to_json_pretty())?, message);
/// # Ok::<(), polyq_amqp::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageJson {
    /// The exchange; `""` is the default exchange.
    pub exchange: String,
    /// The routing key.
    pub routing_key: String,
    /// Content properties; `properties.headers` travels as the top-level `headers` key.
    pub properties: Properties,
    /// The body.
    pub body: Bytes,
}

const OPERATION: &str = "read the message JSON";

impl MessageJson {
    /// A message from its parts.
    pub fn new(
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
        properties: Properties,
        body: impl Into<Bytes>,
    ) -> Self {
        Self {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            properties,
            body: body.into(),
        }
    }

    /// The message a delivery carries, as it sits in its queue.
    pub fn of_delivery(delivery: &crate::Delivery) -> Self {
        Self::new(
            delivery.exchange.clone(),
            delivery.routing_key.clone(),
            delivery.properties.clone(),
            delivery.body.clone(),
        )
    }

    /// Parses the JSON text of a message; see [`MessageJson::from_json`].
    pub fn parse(text: &str) -> Result<Self> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| invalid(OPERATION, format!("not JSON: {e}")))?;
        Self::from_json(&value)
    }

    /// Reads a message from JSON. Every key is optional (`exchange` and `routing_key` default
    /// to `""`, the body to empty); keys this shape does not define are ignored at the top
    /// level, so annotated output of another command (`redelivered`, ...) is accepted, but an
    /// unknown property is an error. Errors name the field and what was wrong with it.
    pub fn from_json(value: &Value) -> Result<Self> {
        let read = || -> std::result::Result<Self, String> {
            let object = value
                .as_object()
                .ok_or_else(|| format!("expected a JSON object, found {}", kind(value)))?;
            let text = |key: &str| match object.get(key) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => Err(format!("`{key}`: expected a string, found {}", kind(other))),
            };
            let mut properties = match object.get("properties") {
                None | Some(Value::Null) => Properties::default(),
                Some(p) => read_properties(p)?,
            };
            properties.headers = match object.get("headers") {
                None | Some(Value::Null) => FieldTable::new(),
                Some(h) => table_from_json(h, &Path::Root("headers"))?,
            };
            let body = match object.get("body") {
                None | Some(Value::Null) => Vec::new(),
                Some(b) => body_bytes(b, &Path::Root("body"))?,
            };
            Ok(Self {
                exchange: text("exchange")?,
                routing_key: text("routing_key")?,
                properties,
                body: Bytes::from(body),
            })
        };
        read().map_err(|reason| invalid(OPERATION, reason))
    }

    /// Pretty-printed JSON with the keys in the documented order.
    pub fn to_json_pretty(&self) -> String {
        // Strings, numbers and maps only: serialising cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

impl Serialize for MessageJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(5))?;
        map.serialize_entry("exchange", &self.exchange)?;
        map.serialize_entry("routing_key", &self.routing_key)?;
        map.serialize_entry("properties", &PropertiesJson(&self.properties))?;
        map.serialize_entry("headers", &headers_to_json(&self.properties.headers))?;
        map.serialize_entry("body", &body_to_json(&self.body))?;
        map.end()
    }
}

struct PropertiesJson<'a>(&'a Properties);

impl Serialize for PropertiesJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let p = self.0;
        let mut map = serializer.serialize_map(None)?;
        let texts = [
            ("message_id", &p.message_id),
            ("correlation_id", &p.correlation_id),
            ("content_type", &p.content_type),
            ("content_encoding", &p.content_encoding),
            ("reply_to", &p.reply_to),
            ("expiration", &p.expiration),
            ("type", &p.kind),
            ("user_id", &p.user_id),
            ("app_id", &p.app_id),
        ];
        for (key, value) in texts {
            if let Some(value) = value {
                map.serialize_entry(key, value)?;
            }
        }
        if let Some(mode) = p.delivery_mode {
            map.serialize_entry("delivery_mode", &mode)?;
        }
        if let Some(priority) = p.priority {
            map.serialize_entry("priority", &priority)?;
        }
        if let Some(timestamp) = p.timestamp {
            map.serialize_entry("timestamp", &timestamp)?;
        }
        map.end()
    }
}

/// Where a value sits in the JSON being read, spelt out only when an error names it: reading a
/// header table that is fine formats nothing.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root(&'a str),
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root(name) => f.write_str(name),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

/// AMQP properties from a JSON object, as the `properties` of a message reads them.
///
/// ```
/// use polyq_amqp::message_json::properties_from_json;
///
/// let properties = properties_from_json(&serde_json::json!({"message_id": "m-1", "delivery_mode": 2}))?;
/// assert_eq!(properties.message_id.as_deref(), Some("m-1"));
/// assert!(properties_from_json(&serde_json::json!({"priority": 300})).is_err());
/// # Ok::<(), polyq_amqp::Error>(())
/// ```
pub fn properties_from_json(value: &Value) -> Result<Properties> {
    read_properties(value).map_err(|reason| invalid("read properties from JSON", reason))
}

fn read_properties(value: &Value) -> std::result::Result<Properties, String> {
    let object = value
        .as_object()
        .ok_or_else(|| format!("`properties`: expected an object, found {}", kind(value)))?;
    let mut p = Properties::default();
    let root = Path::Root("properties");
    for (key, v) in object {
        let path = Path::Key(&root, key);
        if v.is_null() {
            continue;
        }
        let text = || {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("`{path}`: expected a string, found {}", kind(v)))
        };
        let octet = || {
            v.as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .ok_or_else(|| format!("`{path}`: expected an integer from 0 to 255, found {v}"))
        };
        match key.as_str() {
            "message_id" => p.message_id = Some(text()?),
            "correlation_id" => p.correlation_id = Some(text()?),
            "content_type" => p.content_type = Some(text()?),
            "content_encoding" => p.content_encoding = Some(text()?),
            "reply_to" => p.reply_to = Some(text()?),
            "expiration" => p.expiration = Some(text()?),
            "type" => p.kind = Some(text()?),
            "user_id" => p.user_id = Some(text()?),
            "app_id" => p.app_id = Some(text()?),
            "delivery_mode" => p.delivery_mode = Some(octet()?),
            "priority" => p.priority = Some(octet()?),
            "timestamp" => {
                p.timestamp = Some(v.as_u64().ok_or_else(|| {
                    format!("`{path}`: expected seconds since the Unix epoch, found {v}")
                })?)
            }
            "headers" => {
                return Err(
                    "`properties.headers`: headers go in the top-level `headers` object".into(),
                );
            }
            other => {
                return Err(format!(
                    "`properties.{other}`: not an AMQP property (expected one of message_id, \
                     correlation_id, content_type, content_encoding, delivery_mode, priority, \
                     reply_to, expiration, timestamp, type, user_id, app_id)"
                ));
            }
        }
    }
    Ok(p)
}

/// A body as JSON: its text when it is valid UTF-8, else `{"base64": "..."}`.
///
/// ```
/// use polyq_amqp::message_json::{body_from_json, body_to_json};
///
/// assert_eq!(body_to_json(b"hi"), serde_json::json!("hi"));
/// let binary = body_to_json(&[0xff, 0x00]);
/// assert_eq!(binary, serde_json::json!({"base64": "/wA="}));
/// assert_eq!(body_from_json(&binary)?, vec![0xff, 0x00]);
/// # Ok::<(), polyq_amqp::Error>(())
/// ```
pub fn body_to_json(body: &[u8]) -> Value {
    match std::str::from_utf8(body) {
        Ok(text) => Value::from(text),
        Err(_) => serde_json::json!({ "base64": STANDARD.encode(body) }),
    }
}

/// The bytes of a body given as text or as `{"base64": "..."}`.
pub fn body_from_json(value: &Value) -> Result<Vec<u8>> {
    body_bytes(value, &Path::Root("body"))
        .map_err(|reason| invalid("read a body from JSON", reason))
}

fn body_bytes(value: &Value, path: &Path<'_>) -> std::result::Result<Vec<u8>, String> {
    match value {
        Value::String(text) => Ok(text.as_bytes().to_vec()),
        Value::Object(object) if object.len() == 1 && object.contains_key("base64") => {
            decode_base64(&object["base64"], &Path::Key(path, "base64"))
        }
        other => Err(format!(
            "`{path}`: expected UTF-8 text or {{\"base64\": \"...\"}}, found {}",
            kind(other)
        )),
    }
}

/// A header table as a JSON object; see the module documentation for the value forms.
pub fn headers_to_json(table: &FieldTable) -> Value {
    Value::Object(
        table
            .iter()
            .map(|(name, value)| (name.clone(), field_value_to_json(value)))
            .collect(),
    )
}

/// A header table from a JSON object.
pub fn headers_from_json(value: &Value) -> Result<FieldTable> {
    table_from_json(value, &Path::Root("headers"))
        .map_err(|reason| invalid("read headers from JSON", reason))
}

/// One header value as JSON, in the plain form when that reads back as the same type.
///
/// ```
/// use polyq_amqp::FieldValue;
/// use polyq_amqp::message_json::{field_value_from_json, field_value_to_json};
/// use serde_json::json;
///
/// assert_eq!(field_value_to_json(&FieldValue::I64(7)), json!(7));
/// assert_eq!(field_value_to_json(&FieldValue::I32(7)), json!({"type": "I", "value": 7}));
/// assert_eq!(
///     field_value_to_json(&FieldValue::ByteArray(vec![1])),
///     json!({"type": "x", "value": "AQ=="})
/// );
/// assert_eq!(field_value_from_json(&json!({"type": "b", "value": 1}))?, FieldValue::I8(1));
/// assert!(field_value_from_json(&json!({"type": "b", "value": 300})).is_err());
/// # Ok::<(), polyq_amqp::Error>(())
/// ```
pub fn field_value_to_json(value: &FieldValue) -> Value {
    let typed = |letter: &str, value: Value| serde_json::json!({ "type": letter, "value": value });
    match value {
        FieldValue::Bool(b) => Value::Bool(*b),
        FieldValue::I64(n) => Value::from(*n),
        FieldValue::F64(f) if f.is_finite() => Value::from(*f),
        FieldValue::F64(f) => typed("d", Value::from(non_finite_name(*f))),
        FieldValue::F32(f) if f.is_finite() => typed("f", Value::from(f64::from(*f))),
        FieldValue::F32(f) => typed("f", Value::from(non_finite_name(f64::from(*f)))),
        FieldValue::I8(n) => typed("b", Value::from(*n)),
        FieldValue::U8(n) => typed("B", Value::from(*n)),
        FieldValue::I16(n) => typed("s", Value::from(*n)),
        FieldValue::U16(n) => typed("u", Value::from(*n)),
        FieldValue::I32(n) => typed("I", Value::from(*n)),
        FieldValue::U32(n) => typed("i", Value::from(*n)),
        FieldValue::Decimal { scale, value } => {
            typed("D", serde_json::json!({ "scale": scale, "value": value }))
        }
        FieldValue::LongString(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => Value::from(text),
            Err(_) => serde_json::json!({ "type": "S", "base64": STANDARD.encode(bytes) }),
        },
        FieldValue::Array(items) => Value::Array(items.iter().map(field_value_to_json).collect()),
        FieldValue::Timestamp(seconds) => typed("T", Value::from(*seconds)),
        FieldValue::Table(table) => {
            let object = headers_to_json(table);
            match &object {
                Value::Object(map) if looks_typed(map) => typed("F", object),
                _ => object,
            }
        }
        FieldValue::ByteArray(bytes) => typed("x", Value::from(STANDARD.encode(bytes))),
        FieldValue::Void => Value::Null,
    }
}

/// One header value from JSON.
pub fn field_value_from_json(value: &Value) -> Result<FieldValue> {
    value_from_json(value, &Path::Root("value"))
        .map_err(|reason| invalid("read a header value from JSON", reason))
}

fn table_from_json(value: &Value, path: &Path<'_>) -> std::result::Result<FieldTable, String> {
    let object = value
        .as_object()
        .ok_or_else(|| format!("`{path}`: expected an object, found {}", kind(value)))?;
    object
        .iter()
        .map(|(name, v)| Ok((name.clone(), value_from_json(v, &Path::Key(path, name))?)))
        .collect()
}

fn value_from_json(value: &Value, path: &Path<'_>) -> std::result::Result<FieldValue, String> {
    match value {
        Value::Null => Ok(FieldValue::Void),
        Value::Bool(b) => Ok(FieldValue::Bool(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(FieldValue::I64(i))
            } else if n.is_f64() {
                Ok(FieldValue::F64(n.as_f64().unwrap_or(f64::NAN)))
            } else {
                Err(format!(
                    "`{path}`: {n} does not fit a signed 64-bit integer; use {{\"type\": \"T\", \"value\": {n}}} for a timestamp"
                ))
            }
        }
        Value::String(s) => Ok(FieldValue::from(s.as_str())),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| value_from_json(item, &Path::Index(path, i)))
            .collect::<std::result::Result<_, _>>()
            .map(FieldValue::Array),
        Value::Object(map) if looks_typed(map) => typed_from_json(map, path),
        Value::Object(_) => table_from_json(value, path).map(FieldValue::Table),
    }
}

/// `{"type": <string>, "value": ...}` or `{"type": <string>, "base64": ...}`.
fn looks_typed(map: &Map<String, Value>) -> bool {
    map.len() == 2
        && map.get("type").is_some_and(Value::is_string)
        && (map.contains_key("value") || map.contains_key("base64"))
}

fn typed_from_json(
    map: &Map<String, Value>,
    path: &Path<'_>,
) -> std::result::Result<FieldValue, String> {
    let letter = map["type"].as_str().unwrap_or_default();
    if let Some(encoded) = map.get("base64") {
        return match letter {
            "S" => Ok(FieldValue::LongString(decode_base64(
                encoded,
                &Path::Key(path, "base64"),
            )?)),
            other => Err(format!(
                "`{path}`: \"base64\" is for type S only; type {other} takes \"value\""
            )),
        };
    }
    let v = &map["value"];
    let vpath = Path::Key(path, "value");
    let int = |range: &'static str| (v, letter, &vpath, range);
    Ok(match letter {
        "t" => FieldValue::Bool(
            v.as_bool()
                .ok_or_else(|| format!("`{vpath}`: type t holds true or false, found {v}"))?,
        ),
        "b" => FieldValue::I8(integer(int("-128 to 127"))?),
        "B" => FieldValue::U8(integer(int("0 to 255"))?),
        "s" => FieldValue::I16(integer(int("-32768 to 32767"))?),
        "u" => FieldValue::U16(integer(int("0 to 65535"))?),
        "I" => FieldValue::I32(integer(int("-2147483648 to 2147483647"))?),
        "i" => FieldValue::U32(integer(int("0 to 4294967295"))?),
        "l" => FieldValue::I64(integer(int("-2^63 to 2^63-1"))?),
        // Narrowing to f32 is what asking for type f means.
        "f" => FieldValue::F32(float(v, &vpath)? as f32),
        "d" => FieldValue::F64(float(v, &vpath)?),
        "D" => {
            let field = |key: &str| v.get(key).and_then(Value::as_u64);
            match (field("scale"), field("value")) {
                (Some(scale), Some(value)) => FieldValue::Decimal {
                    scale: u8::try_from(scale)
                        .map_err(|_| format!("`{vpath}.scale`: must be 0 to 255"))?,
                    value: u32::try_from(value)
                        .map_err(|_| format!("`{vpath}.value`: must be 0 to 4294967295"))?,
                },
                _ => {
                    return Err(format!(
                        "`{vpath}`: type D holds {{\"scale\": <0-255>, \"value\": <0-4294967295>}}, found {v}"
                    ));
                }
            }
        }
        "S" => FieldValue::from(
            v.as_str()
                .ok_or_else(|| format!("`{vpath}`: type S holds a string, found {}", kind(v)))?,
        ),
        "A" => match v {
            Value::Array(_) => value_from_json(v, &vpath)?,
            other => {
                return Err(format!(
                    "`{vpath}`: type A holds an array, found {}",
                    kind(other)
                ));
            }
        },
        "T" => FieldValue::Timestamp(v.as_u64().ok_or_else(|| {
            format!("`{vpath}`: type T holds seconds since the Unix epoch, found {v}")
        })?),
        "F" => FieldValue::Table(table_from_json(v, &vpath)?),
        "x" => FieldValue::ByteArray(decode_base64(v, &vpath)?),
        "V" if v.is_null() => FieldValue::Void,
        "V" => return Err(format!("`{vpath}`: type V holds null, found {v}")),
        other => {
            return Err(format!(
                "`{path}.type`: '{other}' is not an AMQP field type (t b B s u I i l f d D S A T F x V)"
            ));
        }
    })
}

/// An integer of the width `T`, or an error naming the range of the type `letter`.
fn integer<T: TryFrom<i64>>(
    (v, letter, path, range): (&Value, &str, &Path<'_>, &str),
) -> std::result::Result<T, String> {
    v.as_i64()
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| format!("`{path}`: type {letter} holds integers from {range}, found {v}"))
}

fn float(v: &Value, path: &Path<'_>) -> std::result::Result<f64, String> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| format!("`{path}`: not a number")),
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => Err(format!(
                "`{path}`: expected a number, \"NaN\", \"Infinity\" or \"-Infinity\", found \"{s}\""
            )),
        },
        other => Err(format!(
            "`{path}`: expected a number, found {}",
            kind(other)
        )),
    }
}

fn non_finite_name(f: f64) -> &'static str {
    if f.is_nan() {
        "NaN"
    } else if f > 0.0 {
        "Infinity"
    } else {
        "-Infinity"
    }
}

fn decode_base64(value: &Value, path: &Path<'_>) -> std::result::Result<Vec<u8>, String> {
    let text = value
        .as_str()
        .ok_or_else(|| format!("`{path}`: expected base64 text, found {}", kind(value)))?;
    STANDARD
        .decode(text)
        .map_err(|e| format!("`{path}`: not valid base64: {e}"))
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn invalid(operation: &str, reason: String) -> Error {
    Error::Invalid {
        operation: operation.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn every_type() -> FieldTable {
        let nested: FieldTable = [
            ("type".to_owned(), FieldValue::from("b")),
            ("value".to_owned(), FieldValue::I64(1)),
        ]
        .into();
        [
            ("t", FieldValue::Bool(true)),
            ("b", FieldValue::I8(-1)),
            ("B", FieldValue::U8(255)),
            ("s", FieldValue::I16(-300)),
            ("u", FieldValue::U16(65535)),
            ("I", FieldValue::I32(-70000)),
            ("i", FieldValue::U32(4_000_000_000)),
            ("l", FieldValue::I64(i64::MIN)),
            ("f", FieldValue::F32(1.5)),
            ("f-nan", FieldValue::F32(f32::NAN)),
            ("d", FieldValue::F64(2.0)),
            ("d-inf", FieldValue::F64(f64::NEG_INFINITY)),
            (
                "D",
                FieldValue::Decimal {
                    scale: 2,
                    value: 1234,
                },
            ),
            ("S", FieldValue::from("text")),
            ("S-bin", FieldValue::LongString(vec![0xff, 0xfe])),
            (
                "A",
                FieldValue::Array(vec![FieldValue::I8(1), FieldValue::from("a")]),
            ),
            ("T", FieldValue::Timestamp(u64::MAX)),
            ("F", FieldValue::Table(nested)),
            ("x", FieldValue::ByteArray(vec![0, 1, 2])),
            ("V", FieldValue::Void),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// NaN is not equal to itself; compare through the JSON form, which spells it.
    fn same(a: &FieldTable, b: &FieldTable) -> bool {
        headers_to_json(a) == headers_to_json(b) && a.len() == b.len()
    }

    #[test]
    fn every_field_type_round_trips() {
        let table = every_type();
        let back = headers_from_json(&headers_to_json(&table)).unwrap();
        assert!(same(&back, &table), "{back:?}");
        for (name, value) in &table {
            if name.ends_with("nan") {
                continue;
            }
            assert_eq!(&back[name], value, "{name}");
            assert_eq!(back[name].type_letter(), value.type_letter(), "{name}");
        }
    }

    #[test]
    fn whole_messages_round_trip_through_text() {
        let mut properties = Properties {
            message_id: Some("m-1".into()),
            correlation_id: Some("c".into()),
            content_type: Some("application/json".into()),
            content_encoding: Some("gzip".into()),
            delivery_mode: Some(2),
            priority: Some(9),
            reply_to: Some("replies".into()),
            expiration: Some("60000".into()),
            timestamp: Some(1_700_000_000),
            kind: Some("k".into()),
            user_id: Some("guest".into()),
            app_id: Some("polyq".into()),
            ..Properties::default()
        };
        properties.headers = every_type();
        for body in [b"{\"a\":1}".to_vec(), vec![0xff, 0x00, 0x80]] {
            let message = MessageJson::new("ex", "rk", properties.clone(), body);
            let text = message.to_json_pretty();
            let back = MessageJson::parse(&text).unwrap();
            assert_eq!(back.exchange, message.exchange);
            assert_eq!(back.routing_key, message.routing_key);
            assert_eq!(back.body, message.body);
            assert!(same(&back.properties.headers, &message.properties.headers));
            let (mut expected, mut actual) = (message.properties.clone(), back.properties.clone());
            (expected.headers, actual.headers) = (FieldTable::new(), FieldTable::new());
            assert_eq!(actual, expected);
            assert_eq!(back.to_json_pretty(), text);
        }
    }

    #[test]
    fn keys_come_out_in_the_documented_order() {
        let text = MessageJson::default().to_json_pretty();
        let order: Vec<usize> = ["exchange", "routing_key", "properties", "headers", "body"]
            .iter()
            .map(|key| text.find(&format!("\"{key}\"")).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    }

    #[test]
    fn bad_input_names_the_field() {
        for (input, fragment) in [
            (json!([]), "expected a JSON object"),
            (json!({"routing_key": 1}), "`routing_key`"),
            (
                json!({"properties": {"delivery_mode": 300}}),
                "`properties.delivery_mode`",
            ),
            (
                json!({"properties": {"colour": "red"}}),
                "`properties.colour`: not an AMQP property",
            ),
            (
                json!({"properties": {"headers": {}}}),
                "top-level `headers`",
            ),
            (
                json!({"headers": {"a": {"type": "b", "value": 128}}}),
                "`headers.a.value`",
            ),
            (
                json!({"headers": {"a": {"type": "q", "value": 1}}}),
                "`headers.a.type`",
            ),
            (
                json!({"headers": {"a": {"type": "x", "value": "!!"}}}),
                "not valid base64",
            ),
            (
                json!({"headers": {"a": [1, {"type": "T", "value": -1}]}}),
                "`headers.a[1].value`",
            ),
            (
                json!({"headers": {"a": 18446744073709551615_u64}}),
                "signed 64-bit",
            ),
            (json!({"body": 5}), "`body`"),
            (json!({"body": {"base64": 5}}), "`body.base64`"),
        ] {
            let err = MessageJson::from_json(&input).unwrap_err().to_string();
            assert!(err.contains(fragment), "{input}: {err}");
        }
    }

    #[test]
    fn extra_top_level_keys_are_ignored_and_missing_ones_default() {
        let message = MessageJson::from_json(&json!({"redelivered": true})).unwrap();
        assert_eq!(message, MessageJson::default());
    }
}
