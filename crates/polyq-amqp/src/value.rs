//! Header values: a neutral type for every AMQP 0-9-1 field type.
//!
//! The contract layers of both families read and write headers through these types only, so they
//! never depend on a client crate; the `amqp` implementation converts at the edge.

use std::collections::BTreeMap;

/// A header table (AMQP `field-table`). Keys are header names.
pub type FieldTable = BTreeMap<String, FieldValue>;

/// One AMQP 0-9-1 field value, with the type letters RabbitMQ uses on the wire.
///
/// ```
/// use polyq_amqp::FieldValue;
///
/// let attempt = FieldValue::from(2_i32);
/// assert_eq!(attempt.type_letter(), 'I');
/// assert_eq!(FieldValue::from("order.placed").as_str(), Some("order.placed"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum FieldValue {
    /// `t`: boolean.
    Bool(bool),
    /// `b`: signed 8-bit integer.
    I8(i8),
    /// `B`: unsigned 8-bit integer.
    U8(u8),
    /// `s`: signed 16-bit integer.
    I16(i16),
    /// `u`: unsigned 16-bit integer.
    U16(u16),
    /// `I`: signed 32-bit integer.
    I32(i32),
    /// `i`: unsigned 32-bit integer.
    U32(u32),
    /// `l`: signed 64-bit integer.
    I64(i64),
    /// `f`: 32-bit float.
    F32(f32),
    /// `d`: 64-bit float.
    F64(f64),
    /// `D`: decimal, `value / 10^scale`.
    Decimal {
        /// Number of decimal digits after the point.
        scale: u8,
        /// Unscaled value.
        value: u32,
    },
    /// `S`: long string. Bytes, because the wire does not promise UTF-8.
    LongString(Vec<u8>),
    /// `A`: array of values.
    Array(Vec<FieldValue>),
    /// `T`: timestamp, seconds since the Unix epoch.
    Timestamp(u64),
    /// `F`: nested table.
    Table(FieldTable),
    /// `x`: byte array.
    ByteArray(Vec<u8>),
    /// `V`: no value.
    Void,
}

impl FieldValue {
    /// The RabbitMQ wire type letter of this value.
    pub fn type_letter(&self) -> char {
        match self {
            FieldValue::Bool(_) => 't',
            FieldValue::I8(_) => 'b',
            FieldValue::U8(_) => 'B',
            FieldValue::I16(_) => 's',
            FieldValue::U16(_) => 'u',
            FieldValue::I32(_) => 'I',
            FieldValue::U32(_) => 'i',
            FieldValue::I64(_) => 'l',
            FieldValue::F32(_) => 'f',
            FieldValue::F64(_) => 'd',
            FieldValue::Decimal { .. } => 'D',
            FieldValue::LongString(_) => 'S',
            FieldValue::Array(_) => 'A',
            FieldValue::Timestamp(_) => 'T',
            FieldValue::Table(_) => 'F',
            FieldValue::ByteArray(_) => 'x',
            FieldValue::Void => 'V',
        }
    }

    /// The text of a long string that is valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FieldValue::LongString(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    /// The value of any integer type that fits in an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            FieldValue::I8(v) => Some(v.into()),
            FieldValue::U8(v) => Some(v.into()),
            FieldValue::I16(v) => Some(v.into()),
            FieldValue::U16(v) => Some(v.into()),
            FieldValue::I32(v) => Some(v.into()),
            FieldValue::U32(v) => Some(v.into()),
            FieldValue::I64(v) => Some(v),
            FieldValue::Timestamp(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }
}

impl From<&str> for FieldValue {
    fn from(value: &str) -> Self {
        FieldValue::LongString(value.as_bytes().to_vec())
    }
}

impl From<String> for FieldValue {
    fn from(value: String) -> Self {
        FieldValue::LongString(value.into_bytes())
    }
}

impl From<bool> for FieldValue {
    fn from(value: bool) -> Self {
        FieldValue::Bool(value)
    }
}

impl From<i32> for FieldValue {
    fn from(value: i32) -> Self {
        FieldValue::I32(value)
    }
}

impl From<i64> for FieldValue {
    fn from(value: i64) -> Self {
        FieldValue::I64(value)
    }
}

impl From<f64> for FieldValue {
    fn from(value: f64) -> Self {
        FieldValue::F64(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_of_every_width_read_as_i64() {
        let values = [
            FieldValue::I8(-3),
            FieldValue::U8(3),
            FieldValue::I16(-3),
            FieldValue::U16(3),
            FieldValue::I32(-3),
            FieldValue::U32(3),
            FieldValue::I64(-3),
        ];
        for v in values {
            assert_eq!(v.as_i64().map(i64::abs), Some(3), "{v:?}");
        }
        assert_eq!(FieldValue::Timestamp(u64::MAX).as_i64(), None);
        assert_eq!(FieldValue::from("3").as_i64(), None);
    }

    #[test]
    fn non_utf8_long_string_has_no_text() {
        assert_eq!(FieldValue::LongString(vec![0xff, 0xfe]).as_str(), None);
        assert_eq!(FieldValue::ByteArray(b"abc".to_vec()).as_str(), None);
    }
}
