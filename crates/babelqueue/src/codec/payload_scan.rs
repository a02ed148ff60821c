//! Refuses non-finite floats before `serde_json` would silently write them as `null`, and tells
//! whether a payload carries raw JSON text that must be compacted and checked after serialising.

use serde::ser::{self, Serialize, Serializer};
use std::cell::Cell;
use std::fmt;

#[derive(Debug)]
pub(crate) struct NonFinite;

impl fmt::Display for NonFinite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("non-finite number")
    }
}

impl std::error::Error for NonFinite {}

impl ser::Error for NonFinite {
    fn custom<T: fmt::Display>(_: T) -> Self {
        NonFinite
    }
}

/// What one walk over a payload found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Every float is finite (an error of the value's own `Serialize` counts as not finite).
    pub(crate) finite: bool,
    /// It holds a `serde_json::value::RawValue`, whose text `serde_json` writes verbatim: it may
    /// carry whitespace, an out-of-range number or an unpaired surrogate escape.
    pub(crate) raw_text: bool,
}

/// The name `serde_json` serialises a `RawValue` under. A change of it would let raw text through
/// uncompacted, which `make`'s tests of a raw payload catch.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Walks `value` once, without writing anything.
pub(crate) fn scan<T: Serialize + ?Sized>(value: &T) -> Scan {
    let raw_text = Cell::new(false);
    let finite = value
        .serialize(Check {
            raw_text: &raw_text,
        })
        .is_ok();
    Scan {
        finite,
        raw_text: raw_text.get(),
    }
}

#[derive(Clone, Copy)]
struct Check<'a> {
    raw_text: &'a Cell<bool>,
}

macro_rules! accept {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method(self, _: $ty) -> Result<(), NonFinite> { Ok(()) })*
    };
}

impl<'a> Serializer for Check<'a> {
    type Ok = ();
    type Error = NonFinite;
    type SerializeSeq = Check<'a>;
    type SerializeTuple = Check<'a>;
    type SerializeTupleStruct = Check<'a>;
    type SerializeTupleVariant = Check<'a>;
    type SerializeMap = Check<'a>;
    type SerializeStruct = Check<'a>;
    type SerializeStructVariant = Check<'a>;

    accept!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_i128(i128),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_u128(u128),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str),
    );

    fn serialize_f32(self, v: f32) -> Result<(), NonFinite> {
        if v.is_finite() {
            Ok(())
        } else {
            Err(NonFinite)
        }
    }
    fn serialize_f64(self, v: f64) -> Result<(), NonFinite> {
        if v.is_finite() {
            Ok(())
        } else {
            Err(NonFinite)
        }
    }
    fn serialize_none(self) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), NonFinite> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), NonFinite> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        v: &T,
    ) -> Result<(), NonFinite> {
        v.serialize(self)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self, NonFinite> {
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, NonFinite> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, NonFinite> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, NonFinite> {
        Ok(self)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self, NonFinite> {
        Ok(self)
    }
    fn serialize_struct(self, name: &'static str, _: usize) -> Result<Self, NonFinite> {
        if name == RAW_VALUE_TOKEN {
            self.raw_text.set(true);
        }
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, NonFinite> {
        Ok(self)
    }
}

/// A compound serialiser that only walks its elements with [`Check`]; the arguments in
/// parentheses are the ones before the element, which carry no number.
macro_rules! check_elements {
    ($($compound:ident::$method:ident($($before:ty),*);)*) => {$(
        impl ser::$compound for Check<'_> {
            type Ok = ();
            type Error = NonFinite;
            fn $method<T: Serialize + ?Sized>(
                &mut self,
                $(_: $before,)*
                v: &T,
            ) -> Result<(), NonFinite> {
                v.serialize(*self)
            }
            fn end(self) -> Result<(), NonFinite> {
                Ok(())
            }
        }
    )*};
}

check_elements! {
    SerializeSeq::serialize_element();
    SerializeTuple::serialize_element();
    SerializeTupleStruct::serialize_field();
    SerializeTupleVariant::serialize_field();
    SerializeStruct::serialize_field(&'static str);
    SerializeStructVariant::serialize_field(&'static str);
}

impl ser::SerializeMap for Check<'_> {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), NonFinite> {
        k.serialize(*self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), NonFinite> {
        v.serialize(*self)
    }
    fn end(self) -> Result<(), NonFinite> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn finds_non_finite_floats_anywhere() {
        assert!(scan(&BTreeMap::from([("a", vec![1.0, 2.5])])).finite);
        assert!(!scan(&BTreeMap::from([("a", vec![1.0, f64::NAN])])).finite);
        assert!(!scan(&Some(f32::INFINITY)).finite);
        assert!(scan(&serde_json::json!({"x": [1, "s", null]})).finite);
    }

    #[test]
    fn finds_raw_json_text_anywhere() {
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str("[ 1e400 ]").unwrap();
        assert_eq!(
            scan(&BTreeMap::from([("a", vec![raw])])),
            Scan {
                finite: true,
                raw_text: true
            }
        );
        assert!(!scan(&serde_json::json!({"x": [1.5, "s"]})).raw_text);
        let both = (serde_json::value::to_raw_value(&1).unwrap(), f64::NAN);
        assert_eq!(
            scan(&both),
            Scan {
                finite: false,
                raw_text: true
            }
        );
    }
}
