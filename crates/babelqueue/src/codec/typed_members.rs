//! One pass over a body: the known members are deserialised straight into their types, and a
//! member of the wrong type is recorded (as the Go reference's typed decode would reject it)
//! without stopping the parse, so every occurrence of a repeated member is checked.

use std::borrow::Cow;
use std::fmt;

use serde::de::{
    self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::value::RawValue;

/// A member name, borrowed from the body unless it holds escapes.
pub(crate) struct Key<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A member read as `T` when it has the expected JSON type.
#[derive(Debug)]
pub(crate) enum Typed<T> {
    /// The expected type.
    Value(T),
    /// `null`.
    Null,
    /// Any other JSON type (the value was consumed and checked for syntax only).
    Other,
}

macro_rules! other_types {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method<E: de::Error>(self, _: $ty) -> Result<Self::Value, E> { Ok(Typed::Other) })*
    };
}

macro_rules! drain_containers {
    () => {
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Typed::Null)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Typed::Other)
        }
    };
}

impl<T> Typed<T> {
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Typed<U> {
        match self {
            Typed::Value(value) => Typed::Value(f(value)),
            Typed::Null => Typed::Null,
            Typed::Other => Typed::Other,
        }
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Typed<Cow<'de, str>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Typed::Value(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Typed::Value(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Typed::Value(Cow::Owned(v)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Typed::Other)
    }
    other_types!(
        visit_bool(bool),
        visit_i64(i64),
        visit_u64(u64),
        visit_f64(f64)
    );
    drain_containers!();
}

/// A string member, borrowed from the body unless it holds escapes.
impl<'de> Deserialize<'de> for Typed<Cow<'de, str>> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TextVisitor)
    }
}

impl<'de> Deserialize<'de> for Typed<String> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Typed::<Cow<'de, str>>::deserialize(deserializer).map(|text| text.map(Cow::into_owned))
    }
}

/// An integer member, read from its raw text: an integer literal (no fraction or exponent) that
/// fits 64 bits. Read raw because `serde_json` reports `-0` as a float, where every other SDK
/// reads the integer 0.
pub(crate) fn integer(raw: &RawValue) -> Typed<i64> {
    match raw.get() {
        "null" => Typed::Null,
        "-0" => Typed::Value(0),
        text => text.parse().map_or(Typed::Other, Typed::Value),
    }
}

/// The members of the `meta` object, read in the same pass.
#[derive(Debug, Default)]
pub(crate) struct MetaFields<'de> {
    pub(crate) id: Option<Typed<String>>,
    pub(crate) queue: Option<Typed<String>>,
    /// Borrowed: the common `"rust"` is then kept without an allocation.
    pub(crate) lang: Option<Typed<Cow<'de, str>>>,
    pub(crate) schema_version: Option<Typed<i64>>,
    pub(crate) created_at: Option<Typed<i64>>,
    /// Forbidden keys seen, as they are spelled in the forbidden table.
    pub(crate) forbidden: Vec<&'static str>,
    pub(crate) extras: Vec<(Cow<'de, str>, &'de RawValue)>,
    /// The first member of the wrong type, as `(key, problem)`.
    pub(crate) wrong: Option<(&'static str, &'static str)>,
}

fn check<T>(
    slot: &mut Option<Typed<T>>,
    value: Typed<T>,
    key: &'static str,
    problem: &'static str,
    wrong: &mut Option<(&'static str, &'static str)>,
) {
    if matches!(value, Typed::Other) && wrong.is_none() {
        *wrong = Some((key, problem));
    }
    *slot = Some(value);
}

pub(crate) const NOT_STRING: &str = "is not a string";
pub(crate) const NOT_INTEGER: &str = "is not an integer that fits 64 bits";

/// Reads `meta` in place: an object fills the fields (anew for a repeated `meta`) and reads as
/// `Typed::Value(())`. Returning the fields by value would copy them through every layer of the
/// parser.
pub(crate) struct MetaSeed<'a, 'de>(pub(crate) &'a mut MetaFields<'de>);

impl<'de> DeserializeSeed<'de> for MetaSeed<'_, 'de> {
    type Value = Typed<()>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetaSeed<'_, 'de> {
    type Value = Typed<()>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let meta = self.0;
        *meta = MetaFields::default();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match key.as_ref() {
                "id" => check(
                    &mut meta.id,
                    map.next_value()?,
                    "id",
                    NOT_STRING,
                    &mut meta.wrong,
                ),
                "queue" => check(
                    &mut meta.queue,
                    map.next_value()?,
                    "queue",
                    NOT_STRING,
                    &mut meta.wrong,
                ),
                "lang" => check(
                    &mut meta.lang,
                    map.next_value()?,
                    "lang",
                    NOT_STRING,
                    &mut meta.wrong,
                ),
                "schema_version" => {
                    let raw: &'de RawValue = map.next_value()?;
                    check(
                        &mut meta.schema_version,
                        integer(raw),
                        "schema_version",
                        NOT_INTEGER,
                        &mut meta.wrong,
                    );
                }
                "created_at" => {
                    let raw: &'de RawValue = map.next_value()?;
                    check(
                        &mut meta.created_at,
                        integer(raw),
                        "created_at",
                        NOT_INTEGER,
                        &mut meta.wrong,
                    );
                }
                other => {
                    let value: &'de RawValue = map.next_value()?;
                    match crate::codec::envelope::FORBIDDEN_META
                        .iter()
                        .find(|k| **k == other)
                    {
                        Some(known) => {
                            if !meta.forbidden.contains(known) {
                                meta.forbidden.push(known);
                            }
                        }
                        None => meta.extras.push((key, value)),
                    }
                }
            }
        }
        Ok(Typed::Value(()))
    }
    other_types!(
        visit_bool(bool),
        visit_i64(i64),
        visit_u64(u64),
        visit_f64(f64),
        visit_str(&str)
    );
    drain_containers!();
}

/// The top level of a body, in one pass.
#[derive(Debug, Default)]
pub(crate) struct Frame<'de> {
    pub(crate) job: Option<Typed<String>>,
    pub(crate) urn: Option<Typed<String>>,
    pub(crate) trace_id: Option<Typed<String>>,
    pub(crate) attempts: Option<Typed<i64>>,
    pub(crate) data: Option<&'de RawValue>,
    /// What `meta` held; its fields are in `meta_fields` when it was an object.
    pub(crate) meta: Option<Typed<()>>,
    pub(crate) meta_fields: MetaFields<'de>,
    pub(crate) dead_letter: Option<&'de RawValue>,
    pub(crate) timestamp: bool,
    pub(crate) extras: Vec<(Cow<'de, str>, &'de RawValue)>,
    /// The first member of the wrong type, as `(pointer, problem)`.
    pub(crate) wrong: Option<(String, &'static str)>,
}

impl Frame<'_> {
    fn flag(&mut self, pointer: impl FnOnce() -> String, problem: &'static str) {
        if self.wrong.is_none() {
            self.wrong = Some((pointer(), problem));
        }
    }
}

/// `job` and `urn` may hold any JSON value (a non-string is ignored, not poison), so they are read
/// raw: a typed read would fail the whole body on a number such as `1e400`.
fn identity(
    raw: &RawValue,
    pointer: &str,
    wrong: &mut Option<(String, &'static str)>,
) -> Typed<String> {
    let text = raw.get();
    if text == "null" {
        return Typed::Null;
    }
    if !text.starts_with('"') {
        return Typed::Other;
    }
    // A string literal that `serde_json` has checked and that holds no escape is its own text.
    if !text.contains('\\') {
        return Typed::Value(text[1..text.len() - 1].to_owned());
    }
    match serde_json::from_str(text) {
        Ok(value) => Typed::Value(value),
        Err(_) => {
            if wrong.is_none() {
                *wrong = Some((
                    pointer.to_owned(),
                    "holds an unpaired UTF-16 surrogate escape",
                ));
            }
            Typed::Other
        }
    }
}

fn object_or_null(raw: &RawValue) -> bool {
    let text = raw.get();
    text.starts_with('{') || text == "null"
}

/// Reads a body's top level into a [`Frame`] in place, for the reason [`MetaSeed`] does.
pub(crate) struct FrameSeed<'a, 'de>(pub(crate) &'a mut Frame<'de>);

impl<'de> DeserializeSeed<'de> for FrameSeed<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        struct FrameVisitor<'a, 'de>(&'a mut Frame<'de>);
        impl<'de> Visitor<'de> for FrameVisitor<'_, 'de> {
            type Value = ();
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
                let frame = self.0;
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    match key.as_ref() {
                        "job" => {
                            let raw: &'de RawValue = map.next_value()?;
                            frame.job = Some(identity(raw, "/job", &mut frame.wrong));
                        }
                        "urn" => {
                            let raw: &'de RawValue = map.next_value()?;
                            frame.urn = Some(identity(raw, "/urn", &mut frame.wrong));
                        }
                        "trace_id" => {
                            let value: Typed<String> = map.next_value()?;
                            if matches!(value, Typed::Other) {
                                frame.flag(|| "/trace_id".to_owned(), NOT_STRING);
                            }
                            frame.trace_id = Some(value);
                        }
                        "attempts" => {
                            let raw: &'de RawValue = map.next_value()?;
                            let value = integer(raw);
                            if matches!(value, Typed::Other) {
                                frame.flag(|| "/attempts".to_owned(), NOT_INTEGER);
                            }
                            frame.attempts = Some(value);
                        }
                        "data" => {
                            let value: &'de RawValue = map.next_value()?;
                            if !object_or_null(value) {
                                frame.flag(|| "/data".to_owned(), "is not an object");
                            }
                            // The last `data` is kept and checked in full later; an earlier
                            // occurrence must hold only finite numbers too.
                            if let Some(previous) = frame.data.replace(value)
                                && let Err(issue) =
                                    crate::codec::raw_json::compact(previous.get(), true)
                            {
                                frame.flag(|| "/data".to_owned(), issue.describe());
                            }
                        }
                        "dead_letter" => {
                            let value: &'de RawValue = map.next_value()?;
                            if !object_or_null(value) {
                                frame.flag(|| "/dead_letter".to_owned(), "is not an object");
                            }
                            frame.dead_letter = Some(value);
                        }
                        "meta" => {
                            let value = map.next_value_seed(MetaSeed(&mut frame.meta_fields))?;
                            match value {
                                Typed::Other => {
                                    frame.flag(|| "/meta".to_owned(), "is not an object")
                                }
                                Typed::Value(()) => {
                                    if let Some((key, problem)) = frame.meta_fields.wrong {
                                        frame.flag(|| format!("/meta/{key}"), problem);
                                    }
                                }
                                Typed::Null => {}
                            }
                            frame.meta = Some(value);
                        }
                        "timestamp" => {
                            map.next_value::<IgnoredAny>()?;
                            frame.timestamp = true;
                        }
                        _ => {
                            let value: &'de RawValue = map.next_value()?;
                            frame.extras.push((key, value));
                        }
                    }
                }
                Ok(())
            }
        }
        deserializer.deserialize_map(FrameVisitor(self.0))
    }
}
