//! Producing: the canonical envelope for a URN and a payload.

use std::borrow::Cow;

use serde::Serialize;

use crate::codec::envelope::{
    CORE_META_KEYS, Envelope, FORBIDDEN_META, Meta, RawJson, SCHEMA_VERSION, SOURCE_LANG, Slot,
    Text, pointer,
};
use crate::codec::whitespace::{is_blank, trim};
use crate::error::{Error, Result};

/// Options of [`make`]: the logical queue, a trace to continue, and producer `meta` extras.
///
/// ```
/// use babelqueue::MakeOptions;
/// use serde_json::json;
///
/// let options = MakeOptions::new()
///     .queue("orders")
///     .trace_id("7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b")
///     .meta("ext", json!({"acme": {"tier": "gold"}}));
/// let envelope =
///     babelqueue::make("urn:babel:orders:created", &json!({"order_id": 1}), options).unwrap();
/// assert_eq!(envelope.meta().unwrap().extras()[0].1.as_str(), r#"{"acme":{"tier":"gold"}}"#);
/// ```
#[derive(Debug, Clone, Default)]
pub struct MakeOptions {
    // Kept inline up to 40 bytes, as in the envelope: a queue name or trace id costs no
    // allocation on the way in.
    queue: Option<Text>,
    trace_id: Option<Text>,
    meta: Vec<(String, RawJson)>,
}

impl MakeOptions {
    /// Defaults: queue `"default"`, a new trace, no extras.
    pub fn new() -> Self {
        Self::default()
    }

    /// The logical queue written to `meta.queue` (default `"default"`).
    pub fn queue(mut self, queue: impl AsRef<str>) -> Self {
        self.queue = Some(Text::from(queue.as_ref()));
        self
    }

    /// A trace to continue: reused verbatim after trimming the ASCII whitespace set (it need not be
    /// a UUID). A blank value mints a new trace, like no value at all.
    pub fn trace_id(mut self, trace_id: impl AsRef<str>) -> Self {
        self.trace_id = Some(Text::from(trace_id.as_ref()));
        self
    }

    /// The trace [`make`] continues: the given one trimmed, `None` when none or blank.
    pub(crate) fn continued_trace(&self) -> Option<&str> {
        self.trace_id
            .as_deref()
            .map(trim)
            .filter(|trace| !is_blank(trace))
    }

    /// A producer `meta` extra, written after the core meta keys in the order given. Recommended
    /// shape: `meta.ext.<vendor>`. A core key, a forbidden key or a key given twice makes
    /// [`make`] fail.
    pub fn meta(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        // `Value`'s display is its compact JSON text, and a `Value` cannot hold a non-finite
        // number.
        self.meta
            .push((key.into(), RawJson::trusted(value.to_string())));
        self
    }

    /// Adds every member of the JSON object `text` as a producer `meta` extra, in the order
    /// written and with the values exactly as written.
    ///
    /// # Errors
    /// [`Error::InvalidMeta`] when `text` is not one strict JSON object.
    ///
    /// ```
    /// let options = babelqueue::MakeOptions::new()
    ///     .meta_json(r#"{"z": 1.50, "a": {"b": 2}}"#)
    ///     .unwrap();
    /// let envelope = babelqueue::make("urn:babel:a:b", &(), options).unwrap();
    /// assert!(envelope.encode().unwrap().contains(r#""z":1.50,"a":{"b":2}}"#));
    /// ```
    pub fn meta_json(mut self, text: &str) -> Result<Self> {
        let members = crate::codec::decode::object_members(text)
            .map_err(|cause| Error::InvalidMeta(cause.to_string()))?;
        for (key, raw) in members {
            let value = RawJson::compacted(raw.get(), true, || pointer(&["meta", &key]))
                .map_err(|cause| Error::InvalidMeta(Error::Poison(cause).to_string()))?;
            self.meta.push((key.into_owned(), value));
        }
        Ok(self)
    }
}

/// A message type that knows its URN and payload, and optionally the trace it continues.
///
/// ```
/// use babelqueue::{MakeOptions, Message};
///
/// #[derive(serde::Serialize)]
/// struct OrderCreated { order_id: u64 }
///
/// impl Message for OrderCreated {
///     type Payload = Self;
///     fn urn(&self) -> &str { "urn:babel:orders:created" }
///     fn payload(&self) -> &Self { self }
/// }
///
/// let envelope = OrderCreated { order_id: 7 }.to_envelope(MakeOptions::new()).unwrap();
/// assert_eq!(envelope.data().unwrap().as_str(), r#"{"order_id":7}"#);
/// ```
pub trait Message {
    /// The payload type, serialised as `data` (it must serialise to a JSON object).
    type Payload: Serialize + ?Sized;

    /// The stable URN that identifies this message type on the wire.
    fn urn(&self) -> &str;

    /// The business payload.
    fn payload(&self) -> &Self::Payload;

    /// A trace to continue instead of minting a new one.
    fn trace_id(&self) -> Option<&str> {
        None
    }

    /// Builds the envelope through [`make`]; a trace id from [`Message::trace_id`] wins over one
    /// in `options`.
    ///
    /// # Errors
    /// As [`make`].
    fn to_envelope(&self, options: MakeOptions) -> Result<Envelope> {
        let options = match self.trace_id() {
            Some(trace) => options.trace_id(trace),
            None => options,
        };
        make(self.urn(), self.payload(), options)
    }
}

/// Builds the canonical envelope for `urn` and `data`: URN trimmed (blank is an error), trace
/// continued or a new lowercase UUID v4, a new `meta.id`, `meta.lang` `"rust"`,
/// `schema_version` 1, `created_at` now in Unix milliseconds, `attempts` 0. `data` must serialise
/// to a JSON object; `null` (e.g. `()` or `None`) becomes `{}`.
///
/// # Errors
/// [`Error::BlankUrn`], [`Error::DataNotObject`], [`Error::NonFiniteNumber`] (NaN and infinities
/// are refused rather than written as `null`), [`Error::ReservedKey`] for a bad meta extra,
/// [`Error::Json`] when `data` cannot be serialised.
///
/// ```
/// use serde_json::json;
///
/// let envelope =
///     babelqueue::make(" urn:babel:orders:created\n", &json!({}), Default::default()).unwrap();
/// assert_eq!(envelope.urn(), Some("urn:babel:orders:created"));
/// assert_eq!(envelope.meta().unwrap().lang(), Some("rust"));
/// assert!(envelope.encode().unwrap().contains(r#""data":{}"#));
/// assert!(babelqueue::make("  ", &json!({}), Default::default()).is_err());
/// assert!(babelqueue::make("u", &json!([1]), Default::default()).is_err());
/// ```
pub fn make<T: Serialize + ?Sized>(urn: &str, data: &T, options: MakeOptions) -> Result<Envelope> {
    let job = trim(urn);
    if job.is_empty() {
        return Err(Error::BlankUrn(urn.to_owned()));
    }
    let scan = crate::codec::payload_scan::scan(data);
    if !scan.finite {
        return Err(Error::NonFiniteNumber {
            pointer: "/data".to_owned(),
        });
    }
    let data = serde_json::to_string(data)?;
    let data = match data.as_bytes().first() {
        Some(b'{') => data,
        _ if data == "null" => "{}".to_owned(),
        Some(b'[') => return Err(Error::DataNotObject { found: "an array" }),
        Some(b'"') => return Err(Error::DataNotObject { found: "a string" }),
        Some(b't' | b'f') => return Err(Error::DataNotObject { found: "a boolean" }),
        _ => return Err(Error::DataNotObject { found: "a number" }),
    };
    // Raw JSON text in the payload is compacted and checked like a decoded `data`; everything
    // else `serde_json` wrote compact, with finite numbers and valid strings.
    let compacted = match scan.raw_text {
        false => Ok(None),
        true => crate::codec::raw_json::compact(&data, true).map(|text| match text {
            Cow::Borrowed(_) => None,
            Cow::Owned(text) => Some(text),
        }),
    };
    let data = match compacted {
        Ok(text) => RawJson::trusted(text.unwrap_or(data)),
        Err(crate::codec::raw_json::Strictness::NonFiniteNumber) => {
            return Err(Error::NonFiniteNumber {
                pointer: "/data".to_owned(),
            });
        }
        Err(issue) => {
            return Err(Error::Poison(crate::PoisonCause::Member {
                pointer: "/data".to_owned(),
                problem: issue.describe().to_owned(),
            }));
        }
    };
    let trace_id = match options.continued_trace() {
        Some(trace) => Text::from(trace),
        None => new_uuid(),
    };
    let mut extras: Vec<(String, RawJson)> = Vec::with_capacity(options.meta.len());
    for (key, value) in &options.meta {
        let reason = if CORE_META_KEYS.contains(&key.as_str()) {
            Some("it collides with a core meta key")
        } else if FORBIDDEN_META.contains(&key.as_str()) {
            Some("it is a forbidden key (message-envelope §10)")
        } else if extras.iter().any(|(k, _)| k == key) {
            Some("the same extension key was supplied twice")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Error::ReservedKey {
                pointer: pointer(&["meta", key]),
                reason,
            });
        }
        extras.push((key.clone(), value.clone()));
    }
    Ok(Envelope {
        job: Text::from(job),
        trace_id: Slot::Set(trace_id),
        data: Slot::Set(data),
        meta: Slot::Set(Meta {
            id: Slot::Set(new_uuid()),
            queue: Slot::Set(options.queue.unwrap_or_else(|| Text::from("default"))),
            lang: Slot::Set(Cow::Borrowed(SOURCE_LANG)),
            schema_version: Slot::Set(SCHEMA_VERSION),
            created_at: Slot::Set(now_millis()),
            extras,
        }),
        attempts: Slot::Set(0),
        dead_letter: Slot::Absent,
        extras: Vec::new(),
    })
}

/// A random (version 4) UUID, lowercase and hyphenated. uuid's `fast-rng` draws it from the
/// thread-local CSPRNG rather than one `getrandom` call per id, which costs more than the rest of
/// `make` together.
fn new_uuid() -> Text {
    Text::from(
        &*uuid::Uuid::new_v4()
            .hyphenated()
            .encode_lower(&mut uuid::Uuid::encode_buffer()),
    )
}

/// Now, in Unix milliseconds (UTC), floored.
pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fresh_ids_are_lowercase_v4_and_distinct() {
        let env = make("u", &json!({}), MakeOptions::new()).unwrap();
        let meta = env.meta().unwrap();
        for id in [env.trace_id().unwrap(), meta.id().unwrap()] {
            let parsed = uuid::Uuid::parse_str(id).unwrap();
            assert_eq!(parsed.get_version_num(), 4);
            assert_eq!(id, id.to_lowercase());
        }
        assert_ne!(env.trace_id(), meta.id());
        assert_eq!(meta.queue(), Some("default"));
        assert_eq!(env.attempts(), Some(0));
        assert!(meta.created_at().unwrap() > 1_700_000_000_000);
    }

    #[test]
    fn inherited_trace_is_trimmed_and_reused_verbatim() {
        let env = make(
            "u",
            &json!({}),
            MakeOptions::new().trace_id("\t trace-xyz \x0b"),
        )
        .unwrap();
        assert_eq!(env.trace_id(), Some("trace-xyz"));
        let env = make("u", &json!({}), MakeOptions::new().trace_id(" \u{a0} ")).unwrap();
        assert_eq!(env.trace_id(), Some("\u{a0}"));
        let env = make("u", &json!({}), MakeOptions::new().trace_id(" \r\n")).unwrap();
        assert!(uuid::Uuid::parse_str(env.trace_id().unwrap()).is_ok());
    }

    #[test]
    fn unicode_space_urn_is_not_blank() {
        assert_eq!(
            make("\u{3000}", &json!({}), MakeOptions::new())
                .unwrap()
                .urn(),
            Some("\u{3000}")
        );
        assert!(matches!(
            make("\x0c\x0b", &json!({}), MakeOptions::new()),
            Err(Error::BlankUrn(_))
        ));
    }

    #[test]
    fn data_must_be_an_object_and_finite() {
        assert_eq!(
            make("u", &(), MakeOptions::new())
                .unwrap()
                .data()
                .unwrap()
                .as_str(),
            "{}"
        );
        for bad in [json!([]), json!(1), json!("s"), json!(true)] {
            assert!(
                matches!(
                    make("u", &bad, MakeOptions::new()),
                    Err(Error::DataNotObject { .. })
                ),
                "{bad}"
            );
        }
        let nan = std::collections::BTreeMap::from([("x", f64::NAN)]);
        assert!(matches!(
            make("u", &nan, MakeOptions::new()),
            Err(Error::NonFiniteNumber { .. })
        ));
        let raw: Box<serde_json::value::RawValue> =
            serde_json::from_str(r#"{"x": [1, 1e400]}"#).unwrap();
        assert!(matches!(
            make("u", &raw, MakeOptions::new()),
            Err(Error::NonFiniteNumber { .. })
        ));
    }

    #[test]
    fn meta_extras_are_refused_with_their_pointer() {
        for (key, at) in [
            ("id", "/meta/id"),
            ("created_at", "/meta/created_at"),
            ("ts", "/meta/ts"),
            ("max_retries", "/meta/max_retries"),
        ] {
            match make("u", &json!({}), MakeOptions::new().meta(key, json!(1))) {
                Err(Error::ReservedKey { pointer, .. }) => assert_eq!(pointer, at),
                other => panic!("{key}: {other:?}"),
            }
        }
        let twice = MakeOptions::new()
            .meta("a/b", json!(1))
            .meta("a/b", json!(2));
        match make("u", &json!({}), twice) {
            Err(Error::ReservedKey { pointer, .. }) => assert_eq!(pointer, "/meta/a~1b"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn canonical_frame_order() {
        let data: Box<serde_json::value::RawValue> =
            serde_json::from_str(r#"{"z": 1, "a": "é/☕"}"#).unwrap();
        let env = make(
            "urn:babel:a/b",
            &data,
            MakeOptions::new().queue("q").meta("ext", json!({"v": 1})),
        )
        .unwrap();
        let text = env.encode().unwrap();
        let meta = env.meta().unwrap();
        let expected = format!(
            r#"{{"job":"urn:babel:a/b","trace_id":"{}","data":{{"z":1,"a":"é/☕"}},"meta":{{"id":"{}","queue":"q","lang":"rust","schema_version":1,"created_at":{},"ext":{{"v":1}}}},"attempts":0}}"#,
            env.trace_id().unwrap(),
            meta.id().unwrap(),
            meta.created_at().unwrap()
        );
        assert_eq!(text, expected);
    }
}
