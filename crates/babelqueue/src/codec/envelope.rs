//! The envelope and its parts: [`Envelope`], [`Meta`] and [`RawJson`], the contract's key lists
//! (core, known, forbidden) and the RFC 6901 [`pointer()`] every warning and error names a key
//! by. The canonical bytes are written by `encode`, read by `decode`.

use std::borrow::Cow;
use std::fmt;

use serde::de::DeserializeOwned;

use crate::codec::whitespace::is_blank;
use crate::error::{Error, Result};

/// The only envelope version there is.
pub const SCHEMA_VERSION: i64 = 1;
/// The `meta.lang` this SDK writes.
pub const SOURCE_LANG: &str = "rust";
/// The core `meta` keys, in canonical order.
pub const CORE_META_KEYS: [&str; 5] = ["id", "queue", "lang", "schema_version", "created_at"];
/// The known top-level keys, in canonical order.
pub const TOP_LEVEL_KEYS: [&str; 6] =
    ["job", "trace_id", "data", "meta", "attempts", "dead_letter"];
/// Forbidden keys as RFC 6901 pointers: dropped with a warning on decode, refused on encode.
pub const FORBIDDEN_POINTERS: [&str; 5] = [
    "/timestamp",
    "/meta/max_retries",
    "/meta/attempts",
    "/meta/source",
    "/meta/ts",
];
/// Forbidden top-level keys (besides the inbound-only `urn` alias).
pub(crate) const FORBIDDEN_TOP: [&str; 1] = ["timestamp"];
/// Forbidden `meta` keys.
pub(crate) const FORBIDDEN_META: [&str; 4] = ["max_retries", "attempts", "source", "ts"];

/// Text the envelope owns. Ids, URNs, queue names and traces are short: kept inline up to 40 bytes
/// (a hyphenated UUID is 36), they cost no allocation to make, decode or drop.
pub(crate) type Text = smallstr::SmallString<[u8; 40]>;

/// A JSON value kept as the compact text it arrived as: numbers, escapes and key order are never
/// re-formatted, so a retry, redrive or relay re-emits the producer's bytes.
///
/// ```
/// use babelqueue::RawJson;
///
/// let raw = RawJson::from_json("{ \"big\": 12345678901234567890, \"x\": 1.0 }").unwrap();
/// assert_eq!(raw.as_str(), r#"{"big":12345678901234567890,"x":1.0}"#);
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RawJson(String);

impl RawJson {
    /// Checks `text` as strict JSON and keeps it, with insignificant whitespace removed.
    ///
    /// # Errors
    /// [`Error::Json`] when `text` is not one JSON value; [`Error::Poison`] when it holds an
    /// unpaired surrogate escape.
    pub fn from_json(text: &str) -> Result<Self> {
        let raw: &serde_json::value::RawValue = serde_json::from_str(text)?;
        Ok(Self::compacted(raw.get(), false, String::new)?)
    }

    /// Serialises `value` (which cannot hold a non-finite number).
    ///
    /// # Errors
    /// [`Error::Json`] when the value cannot be serialised.
    pub fn from_value(value: &serde_json::Value) -> Result<Self> {
        Ok(Self(serde_json::to_string(value)?))
    }

    /// `raw` compacted; `pointer` names it in the error and is only built on failure.
    pub(crate) fn compacted(
        raw: &str,
        finite_numbers: bool,
        pointer: impl FnOnce() -> String,
    ) -> std::result::Result<Self, crate::PoisonCause> {
        crate::codec::raw_json::compact(raw, finite_numbers)
            .map(|text| Self(text.into_owned()))
            .map_err(|issue| crate::PoisonCause::Member {
                pointer: pointer(),
                problem: issue.describe().to_owned(),
            })
    }

    /// Trusted text: produced by `serde_json` or by this crate, already compact.
    pub(crate) fn trusted(text: String) -> Self {
        Self(text)
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Deserialises the value.
    ///
    /// # Errors
    /// [`Error::Json`] when it does not match `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T> {
        Ok(serde_json::from_str(&self.0)?)
    }

    /// Whether the value is a JSON object.
    pub fn is_object(&self) -> bool {
        self.0.starts_with('{')
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A known member: absent, present with `null`, or present with a value. Absent and `null` are
/// kept apart so that a re-encode writes exactly what arrived.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum Slot<T> {
    #[default]
    Absent,
    Null,
    Set(T),
}

impl<T> Slot<T> {
    pub(crate) fn get(&self) -> Option<&T> {
        match self {
            Slot::Set(value) => Some(value),
            _ => None,
        }
    }
}

/// `meta.lang` as kept: the static text when it is this crate's language.
pub(crate) fn lang_text(lang: Cow<'_, str>) -> Cow<'static, str> {
    if lang == SOURCE_LANG {
        Cow::Borrowed(SOURCE_LANG)
    } else {
        Cow::Owned(lang.into_owned())
    }
}

/// The `meta` block: producer-set, immutable descriptive metadata.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Meta {
    pub(crate) id: Slot<Text>,
    pub(crate) queue: Slot<Text>,
    /// The language this crate writes is kept as the static text, without an allocation.
    pub(crate) lang: Slot<Cow<'static, str>>,
    pub(crate) schema_version: Slot<i64>,
    pub(crate) created_at: Slot<i64>,
    pub(crate) extras: Vec<(String, RawJson)>,
}

impl Meta {
    /// `meta.id`, the per-message identity (the idempotency key).
    pub fn id(&self) -> Option<&str> {
        self.id.get().map(Text::as_str)
    }

    /// `meta.queue`, the logical queue the producer addressed.
    pub fn queue(&self) -> Option<&str> {
        self.queue.get().map(Text::as_str)
    }

    /// `meta.lang`, the producing SDK's language; any value is accepted and forwarded.
    pub fn lang(&self) -> Option<&str> {
        self.lang.get().map(AsRef::as_ref)
    }

    /// `meta.schema_version`.
    pub fn schema_version(&self) -> Option<i64> {
        self.schema_version.get().copied()
    }

    /// `meta.created_at`, Unix milliseconds.
    pub fn created_at(&self) -> Option<i64> {
        self.created_at.get().copied()
    }

    /// Extension keys after the core keys, in arrival order, with their exact JSON values.
    pub fn extras(&self) -> &[(String, RawJson)] {
        &self.extras
    }

    pub(crate) fn set_queue(&mut self, queue: String) {
        self.queue = Slot::Set(Text::from(queue));
    }
}

/// One BabelQueue envelope: `{job, trace_id, data, meta, attempts[, dead_letter]}` plus any
/// extension keys, as decoded or as built by [`make`](crate::make).
///
/// `data`, `dead_letter` and extension values are kept as the JSON text they arrived as, so
/// re-encoding (a retry, a dead-letter move, a redrive, a relay) re-emits the producer's bytes.
///
/// ```
/// let body = br#"{"job":"urn:babel:orders:created","trace_id":"t-1","data":{"n":1.0},
///   "meta":{"id":"i","queue":"orders","lang":"cobol","schema_version":1,"created_at":1,"x":[]},
///   "attempts":0,"extra_top":true}"#;
/// let mut envelope = babelqueue::decode(body).unwrap().envelope;
/// envelope.set_attempts(1);
/// assert_eq!(
///     envelope.encode().unwrap(),
///     r#"{"job":"urn:babel:orders:created","trace_id":"t-1","data":{"n":1.0},"meta":{"id":"i","queue":"orders","lang":"cobol","schema_version":1,"created_at":1,"x":[]},"attempts":1,"extra_top":true}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub(crate) job: Text,
    pub(crate) trace_id: Slot<Text>,
    pub(crate) data: Slot<RawJson>,
    pub(crate) meta: Slot<Meta>,
    pub(crate) attempts: Slot<i64>,
    pub(crate) dead_letter: Slot<RawJson>,
    pub(crate) extras: Vec<(String, RawJson)>,
}

impl Envelope {
    /// The URN (`job`, with the `urn` alias already folded in on decode), or `None` when the
    /// envelope has no identity.
    pub fn urn(&self) -> Option<&str> {
        (!is_blank(&self.job)).then_some(self.job.as_str())
    }

    /// `trace_id`, the cross-service correlation id.
    pub fn trace_id(&self) -> Option<&str> {
        self.trace_id.get().map(Text::as_str)
    }

    /// `data` as the JSON text it arrived as (an object on every accepted envelope).
    pub fn data(&self) -> Option<&RawJson> {
        self.data.get()
    }

    /// Deserialises `data`.
    ///
    /// # Errors
    /// [`Error::Json`] when `data` is missing or does not match `T`.
    pub fn data_as<T: DeserializeOwned>(&self) -> Result<T> {
        Ok(serde_json::from_str(
            self.data.get().map_or("null", RawJson::as_str),
        )?)
    }

    /// The `meta` block.
    pub fn meta(&self) -> Option<&Meta> {
        self.meta.get()
    }

    /// `attempts`, the transport retry counter.
    pub fn attempts(&self) -> Option<i64> {
        self.attempts.get().copied()
    }

    /// Sets `attempts` (what a retry, a broker-count reconciliation or a redrive does).
    pub fn set_attempts(&mut self, attempts: i64) {
        self.attempts = Slot::Set(attempts);
    }

    /// Sets `meta.queue` (the runtime's publish addresses the target queue), creating `meta` when
    /// it is missing.
    pub fn set_queue(&mut self, queue: impl Into<String>) {
        match &mut self.meta {
            Slot::Set(meta) => meta.set_queue(queue.into()),
            slot => {
                let mut meta = Meta::default();
                meta.set_queue(queue.into());
                *slot = Slot::Set(meta);
            }
        }
    }

    /// Replaces `data`: what field encryption does on publish, and decryption for the handler.
    ///
    /// # Errors
    /// [`Error::DataNotObject`] unless `data` is a JSON object.
    pub fn set_data(&mut self, data: &serde_json::Value) -> Result<()> {
        use serde_json::Value;
        let found = match data {
            Value::Object(_) => {
                self.data = Slot::Set(RawJson::from_value(data)?);
                return Ok(());
            }
            Value::Array(_) => "an array",
            Value::String(_) => "a string",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::Null => "null",
        };
        Err(Error::DataNotObject { found })
    }

    /// The `dead_letter` block as it arrived, if any.
    pub fn dead_letter_raw(&self) -> Option<&RawJson> {
        self.dead_letter.get()
    }

    /// Removes the `dead_letter` block (what a redrive does before re-publishing).
    pub fn remove_dead_letter(&mut self) {
        self.dead_letter = Slot::Absent;
    }

    /// Unknown top-level keys, in arrival order, with their exact JSON values.
    pub fn extras(&self) -> &[(String, RawJson)] {
        &self.extras
    }

    /// Adds or replaces an unknown top-level key.
    ///
    /// # Errors
    /// [`Error::ReservedKey`] for a known key, a forbidden key or the `urn` alias.
    pub fn set_extra(&mut self, key: impl Into<String>, value: RawJson) -> Result<()> {
        let key = key.into();
        if TOP_LEVEL_KEYS.contains(&key.as_str())
            || key == "urn"
            || FORBIDDEN_TOP.contains(&key.as_str())
        {
            return Err(Error::ReservedKey {
                pointer: pointer(&[&key]),
                reason: "known, forbidden and alias keys cannot be set as extension keys",
            });
        }
        match self.extras.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.extras.push((key, value)),
        }
        Ok(())
    }
}

/// The RFC 6901 pointer of a path of keys (`~` as `~0`, `/` as `~1`).
///
/// ```
/// assert_eq!(babelqueue::envelope::pointer(&["meta", "a/b~c"]), "/meta/a~1b~0c");
/// ```
pub fn pointer(path: &[&str]) -> String {
    let mut out = String::new();
    for segment in path {
        out.push('/');
        out.push_str(&segment.replace('~', "~0").replace('/', "~1"));
    }
    out
}
