//! Refuses non-finite floats before `serde_json` would silently write them as `null`.

use serde::ser::{self, Serialize, Serializer};
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

/// Whether every float in `value` is finite. Serialisation errors of `value` itself are left to
/// the real serialiser to report.
pub(crate) fn all_finite<T: Serialize + ?Sized>(value: &T) -> bool {
    value.serialize(Check).is_ok()
}

struct Check;

macro_rules! accept {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method(self, _: $ty) -> Result<(), NonFinite> { Ok(()) })*
    };
}

impl Serializer for Check {
    type Ok = ();
    type Error = NonFinite;
    type SerializeSeq = Check;
    type SerializeTuple = Check;
    type SerializeTupleStruct = Check;
    type SerializeTupleVariant = Check;
    type SerializeMap = Check;
    type SerializeStruct = Check;
    type SerializeStructVariant = Check;

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
        v.serialize(Check)
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
        v.serialize(Check)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        v: &T,
    ) -> Result<(), NonFinite> {
        v.serialize(Check)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Check, NonFinite> {
        Ok(Check)
    }
    fn serialize_tuple(self, _: usize) -> Result<Check, NonFinite> {
        Ok(Check)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Check, NonFinite> {
        Ok(Check)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Check, NonFinite> {
        Ok(Check)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Check, NonFinite> {
        Ok(Check)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Check, NonFinite> {
        Ok(Check)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Check, NonFinite> {
        Ok(Check)
    }
}

/// A compound serialiser that only walks its elements with [`Check`]; the arguments in
/// parentheses are the ones before the element, which carry no number.
macro_rules! check_elements {
    ($($compound:ident::$method:ident($($before:ty),*);)*) => {$(
        impl ser::$compound for Check {
            type Ok = ();
            type Error = NonFinite;
            fn $method<T: Serialize + ?Sized>(
                &mut self,
                $(_: $before,)*
                v: &T,
            ) -> Result<(), NonFinite> {
                v.serialize(Check)
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

impl ser::SerializeMap for Check {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), NonFinite> {
        k.serialize(Check)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), NonFinite> {
        v.serialize(Check)
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
        assert!(all_finite(&BTreeMap::from([("a", vec![1.0, 2.5])])));
        assert!(!all_finite(&BTreeMap::from([("a", vec![1.0, f64::NAN])])));
        assert!(!all_finite(&Some(f32::INFINITY)));
        assert!(all_finite(&serde_json::json!({"x": [1, "s", null]})));
    }
}
