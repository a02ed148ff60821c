//! Decoding: strict JSON in, identity resolved, forbidden keys dropped with warnings, unknown keys
//! kept, a body that is not an envelope reported as poison with its cause. Bodies in the canonical
//! shape take the fast reader of `fast_decode`; everything else, and every error, is read here.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, RwLock};

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::codec::envelope::{Envelope, FORBIDDEN_META, Meta, RawJson, Slot, lang_text, pointer};
use crate::codec::typed_members::{Frame, FrameSeed, Key, NOT_INTEGER, NOT_STRING, Typed, integer};
use crate::codec::whitespace::is_blank;
use crate::error::PoisonCause;

/// Something a decode dropped or ignored, named by its RFC 6901 pointer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Warning {
    /// RFC 6901 pointer of the key, e.g. `/meta/ts`.
    pub pointer: String,
    /// What happened to it.
    pub message: String,
}

/// A decoded envelope and the warnings its decode raised.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The envelope (possibly without identity: see [`Envelope::urn`]).
    pub envelope: Envelope,
    /// Forbidden keys dropped, a non-string `job` ignored, a `urn` beside `job` dropped.
    pub warnings: Vec<Warning>,
}

/// A callback that receives every decode warning.
pub type WarningHook = Arc<dyn Fn(&Warning) + Send + Sync>;

static WARNING_HOOK: RwLock<Option<WarningHook>> = RwLock::new(None);

/// Installs (or, with `None`, removes) the process-wide hook every decode warning is passed to,
/// besides being returned in [`Decoded::warnings`] and logged through `tracing`.
///
/// ```
/// use std::sync::{Arc, Mutex};
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let sink = seen.clone();
/// babelqueue::set_warning_hook(Some(Arc::new(move |w: &babelqueue::Warning| {
///     sink.lock().unwrap().push(w.pointer.clone());
/// })));
/// babelqueue::decode(br#"{"job":"urn:babel:a:b","timestamp":1}"#).unwrap();
/// babelqueue::set_warning_hook(None);
/// assert!(seen.lock().unwrap().contains(&"/timestamp".to_owned()));
/// ```
pub fn set_warning_hook(hook: Option<WarningHook>) {
    let mut slot = WARNING_HOOK
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *slot = hook;
}

fn report(warnings: &[Warning]) {
    if warnings.is_empty() {
        return;
    }
    let hook = WARNING_HOOK
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    for warning in warnings {
        // The target docs/babelqueue-contract.md names, rather than this file's module path.
        tracing::warn!(
            target: "babelqueue::codec",
            pointer = %warning.pointer,
            "{}",
            warning.message
        );
        if let Some(hook) = &hook {
            hook(warning);
        }
    }
}

/// The members of one JSON object, in order, duplicates included.
struct Members<'de>(Vec<(Cow<'de, str>, &'de RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(8);
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    let value: &'de RawValue = map.next_value()?;
                    members.push((key, value));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// The members of `text`, which must be one JSON object.
pub(crate) fn object_members(text: &str) -> Result<Vec<(Cow<'_, str>, &RawValue)>, PoisonCause> {
    serde_json::from_str::<Members<'_>>(text)
        .map(|Members(members)| members)
        .map_err(|error| parse_failure(text, error))
}

fn member_error(pointer: String, problem: &str) -> PoisonCause {
    PoisonCause::Member {
        pointer,
        problem: problem.to_owned(),
    }
}

fn raw_slot(
    raw: Option<&RawValue>,
    finite: bool,
    path: &[&str],
) -> Result<Slot<RawJson>, PoisonCause> {
    match raw {
        None => Ok(Slot::Absent),
        Some(raw) if raw.get() == "null" => Ok(Slot::Null),
        Some(raw) => RawJson::compacted(raw.get(), finite, || pointer(path)).map(Slot::Set),
    }
}

fn slot<T, U: From<T>>(member: Option<Typed<T>>) -> Slot<U> {
    match member {
        None | Some(Typed::Other) => Slot::Absent,
        Some(Typed::Null) => Slot::Null,
        Some(Typed::Value(value)) => Slot::Set(U::from(value)),
    }
}

/// Unknown members: the first position of a name, the value of its last occurrence.
fn extras(
    members: Vec<(Cow<'_, str>, &RawValue)>,
    parent: &[&str],
) -> Result<Vec<(String, RawJson)>, PoisonCause> {
    let mut out: Vec<(String, RawJson)> = Vec::with_capacity(members.len());
    for (key, raw) in members {
        let value = RawJson::compacted(raw.get(), false, || {
            let mut path = parent.to_vec();
            path.push(&key);
            pointer(&path)
        })?;
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => out.push((key.into_owned(), value)),
        }
    }
    Ok(out)
}

/// Decodes one body: strict RFC 8259 JSON in UTF-8, one object, known members of the right type.
///
/// Identity is resolved as the contract says: a non-blank string `job` wins (a `urn` beside it is
/// dropped with a warning); a non-string `job` is ignored with a warning; a missing, empty or
/// blank `job` falls back to a valid `urn`. Forbidden keys are dropped with a warning and never
/// re-emitted; every other unknown key is kept. Warnings are also passed to the hook installed
/// with [`set_warning_hook`] and logged through `tracing`.
///
/// An object without identity decodes (its [`Envelope::urn`] is `None`); use
/// [`classify`](crate::classify) for the full consumer verdict.
///
/// # Errors
/// The [`PoisonCause`] when the body does not decode into an envelope.
///
/// ```
/// let decoded = babelqueue::decode(br#"{"urn":"urn:babel:a:b","meta":{"ts":1,"TS":2}}"#).unwrap();
/// assert_eq!(decoded.envelope.urn(), Some("urn:babel:a:b"));
/// assert_eq!(decoded.warnings[0].pointer, "/meta/ts");
/// assert_eq!(decoded.envelope.meta().unwrap().extras()[0].0, "TS");
/// ```
pub fn decode(body: &[u8]) -> Result<Decoded, PoisonCause> {
    let text = simdutf8::basic::from_utf8(body).map_err(|_| PoisonCause::NotUtf8)?;
    match crate::codec::fast_decode::decode(text) {
        Some(decoded) => Ok(decoded),
        None => decode_any(text),
    }
}

/// Decodes any UTF-8 body: the reader behind [`decode`] for what the fast reader leaves.
pub(crate) fn decode_any(text: &str) -> Result<Decoded, PoisonCause> {
    let mut frame = Frame::default();
    let mut parser = serde_json::Deserializer::from_str(text);
    FrameSeed(&mut frame)
        .deserialize(&mut parser)
        .and_then(|()| parser.end())
        .map_err(|error| parse_failure(text, error))?;
    if let Some((pointer, problem)) = frame.wrong {
        return Err(member_error(pointer, problem));
    }
    if let Some(raw) = frame.dead_letter.filter(|raw| raw.get() != "null") {
        check_dead_letter(raw.get())?;
    }

    let mut warnings = Vec::new();
    if frame.timestamp {
        warnings.push(dropped("/timestamp"));
    }
    let meta = match frame.meta {
        None | Some(Typed::Other) => Slot::Absent,
        Some(Typed::Null) => Slot::Null,
        Some(Typed::Value(())) => {
            let fields = frame.meta_fields;
            for key in FORBIDDEN_META {
                if fields.forbidden.contains(&key) {
                    warnings.push(dropped(&pointer(&["meta", key])));
                }
            }
            Slot::Set(Meta {
                id: slot(fields.id),
                queue: slot(fields.queue),
                lang: slot(fields.lang.map(|lang| lang.map(lang_text))),
                schema_version: slot(fields.schema_version),
                created_at: slot(fields.created_at),
                extras: extras(fields.extras, &["meta"])?,
            })
        }
    };
    let job = resolve_identity(frame.job, frame.urn, &mut warnings);
    let envelope = Envelope {
        job: job.into(),
        trace_id: slot(frame.trace_id),
        data: raw_slot(frame.data, true, &["data"])?,
        meta,
        attempts: slot(frame.attempts),
        dead_letter: raw_slot(frame.dead_letter, false, &["dead_letter"])?,
        extras: extras(frame.extras, &[])?,
    };
    report(&warnings);
    Ok(Decoded { envelope, warnings })
}

fn parse_failure(text: &str, error: serde_json::Error) -> PoisonCause {
    let starts_object = text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{');
    if !starts_object && serde_json::from_str::<de::IgnoredAny>(text).is_ok() {
        PoisonCause::NotAnObject
    } else {
        PoisonCause::InvalidJson(error.to_string())
    }
}

fn dropped(pointer: &str) -> Warning {
    Warning {
        pointer: pointer.to_owned(),
        message: format!(
            "dropped the forbidden envelope key {pointer} (non-canonical, message-envelope §10)"
        ),
    }
}

fn resolve_identity(
    job: Option<Typed<String>>,
    urn: Option<Typed<String>>,
    warnings: &mut Vec<Warning>,
) -> String {
    let job = match job {
        None => None,
        Some(Typed::Value(text)) => Some(text),
        Some(Typed::Null | Typed::Other) => {
            warnings.push(Warning {
                pointer: "/job".to_owned(),
                message: "ignored the non-string envelope key /job (identity falls back to urn)"
                    .to_owned(),
            });
            None
        }
    };
    let job_valid = job.as_deref().is_some_and(|text| !is_blank(text));
    match urn {
        None => job.unwrap_or_default(),
        Some(_) if job_valid => {
            warnings.push(Warning {
                pointer: "/urn".to_owned(),
                message: "dropped the urn alias: a valid job is present and wins".to_owned(),
            });
            job.unwrap_or_default()
        }
        Some(Typed::Value(alias)) if !is_blank(&alias) => alias,
        Some(_) => job.unwrap_or_default(),
    }
}

fn check_dead_letter(text: &str) -> Result<(), PoisonCause> {
    for (key, raw) in object_members(text)? {
        let (ok, problem) = match key.as_ref() {
            "reason" | "error" | "exception" | "original_queue" | "lang" => (
                !matches!(
                    serde_json::from_str::<Typed<String>>(raw.get()),
                    Ok(Typed::Other) | Err(_)
                ),
                NOT_STRING,
            ),
            "failed_at" | "attempts" => (!matches!(integer(raw), Typed::Other), NOT_INTEGER),
            _ => (true, ""),
        };
        if !ok {
            return Err(member_error(pointer(&["dead_letter", &key]), problem));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::verdict::{Reason, Verdict, classify};

    fn decode_str(body: &str) -> Result<Decoded, PoisonCause> {
        decode(body.as_bytes())
    }

    fn pointers(decoded: &Decoded) -> Vec<&str> {
        decoded
            .warnings
            .iter()
            .map(|w| w.pointer.as_str())
            .collect()
    }

    const GOOD: &str = r#""trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0"#;

    #[test]
    fn job_wins_over_urn_with_a_warning() {
        let d = decode_str(&format!(r#"{{"job":"a","urn":"b",{GOOD}}}"#)).unwrap();
        assert_eq!(d.envelope.urn(), Some("a"));
        assert_eq!(pointers(&d), ["/urn"]);
        assert!(!d.envelope.encode().unwrap().contains("\"urn\""));
    }

    #[test]
    fn non_string_job_is_ignored_with_a_warning_and_falls_back() {
        for job in [
            "null",
            "5",
            "false",
            "{}",
            "[]",
            "0",
            "1e400",
            r#"{"n":-1e999}"#,
        ] {
            let d = decode_str(&format!(r#"{{"job":{job},"urn":"b",{GOOD}}}"#)).unwrap();
            assert_eq!(d.envelope.urn(), Some("b"), "{job}");
            assert_eq!(pointers(&d), ["/job"], "{job}");
        }
    }

    #[test]
    fn blank_job_falls_back_silently_and_unicode_space_is_not_blank() {
        let d = decode_str(&format!(r#"{{"job":" \u000b\f","urn":"b",{GOOD}}}"#)).unwrap();
        assert_eq!(d.envelope.urn(), Some("b"));
        assert!(d.warnings.is_empty());
        let d = decode_str(&format!(r#"{{"job":"\u00a0","urn":"b",{GOOD}}}"#)).unwrap();
        assert_eq!(d.envelope.urn(), Some("\u{a0}"));
        assert_eq!(pointers(&d), ["/urn"]);
    }

    #[test]
    fn no_identity_is_poison_not_a_rejection() {
        for body in [
            format!("{{{GOOD}}}"),
            format!(r#"{{"job":"  ",{GOOD}}}"#),
            format!(r#"{{"urn":5,{GOOD}}}"#),
            format!(r#"{{"job":1,"urn":"\t",{GOOD}}}"#),
        ] {
            assert_eq!(
                classify(body.as_bytes()),
                Verdict::Poison(PoisonCause::NoIdentity),
                "{body}"
            );
        }
    }

    #[test]
    fn duplicate_members_last_wins() {
        let d = decode_str(&format!(r#"{{"job":"a","job":"b","x":1,"x":2,{GOOD}}}"#)).unwrap();
        assert_eq!(d.envelope.urn(), Some("b"));
        assert_eq!(d.envelope.extras().len(), 1);
        assert_eq!(d.envelope.extras()[0].1.as_str(), "2");
    }

    #[test]
    fn forbidden_keys_warn_in_table_order_and_are_never_kept() {
        let d = decode_str(
            r#"{"meta":{"ts":1,"source":"x","attempts":2,"max_retries":3,"id":"i"},"timestamp":0,"job":"u"}"#,
        )
        .unwrap();
        assert_eq!(
            pointers(&d),
            [
                "/timestamp",
                "/meta/max_retries",
                "/meta/attempts",
                "/meta/source",
                "/meta/ts"
            ]
        );
        assert_eq!(
            d.envelope.encode().unwrap(),
            r#"{"job":"u","meta":{"id":"i"}}"#
        );
    }

    #[test]
    fn key_matching_is_case_sensitive() {
        let d = decode_str(r#"{"job":"u","JOB":"x","TIMESTAMP":1,"meta":{"TS":1,"Attempts":2}}"#)
            .unwrap();
        assert!(d.warnings.is_empty());
        assert_eq!(
            d.envelope.encode().unwrap(),
            r#"{"job":"u","meta":{"TS":1,"Attempts":2},"JOB":"x","TIMESTAMP":1}"#
        );
    }

    #[test]
    fn wrong_member_types_are_poison() {
        for (body, at) in [
            (r#"{"job":"u","trace_id":5}"#, "/trace_id"),
            (r#"{"job":"u","attempts":1.0}"#, "/attempts"),
            (r#"{"job":"u","attempts":"1"}"#, "/attempts"),
            (r#"{"job":"u","attempts":9223372036854775808}"#, "/attempts"),
            (r#"{"job":"u","data":[]}"#, "/data"),
            (r#"{"job":"u","data":{"n":1e400}}"#, "/data"),
            (r#"{"job":"u","meta":[]}"#, "/meta"),
            (r#"{"job":"u","meta":{"id":5}}"#, "/meta/id"),
            (
                r#"{"job":"u","meta":{"schema_version":"1"}}"#,
                "/meta/schema_version",
            ),
            (
                r#"{"job":"u","dead_letter":{"failed_at":"x"}}"#,
                "/dead_letter/failed_at",
            ),
            (r#"{"job":"u","trace_id":7,"trace_id":"t"}"#, "/trace_id"),
            (r#"{"job":"u","x":"\ud800"}"#, "/x"),
        ] {
            match decode_str(body) {
                Err(PoisonCause::Member { pointer, .. }) => assert_eq!(pointer, at, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn undecodable_bodies_are_poison() {
        assert_eq!(decode(b"{\"job\":\"\xff\"}"), Err(PoisonCause::NotUtf8));
        for body in [
            "",
            "nul",
            "{\"job\":NaN}",
            "{\"job\":\"u\"} x",
            "\u{feff}{}",
            "{\"a\":1,}",
        ] {
            assert!(
                matches!(decode_str(body), Err(PoisonCause::InvalidJson(_))),
                "{body:?}"
            );
        }
        for body in ["null", "[]", "1", "\"s\""] {
            assert_eq!(decode_str(body), Err(PoisonCause::NotAnObject), "{body}");
        }
    }

    #[test]
    fn reasons_come_in_contract_order() {
        let cases = [
            (r#"{"job":"u"}"#, Reason::MissingMeta),
            (r#"{"job":"u","meta":null}"#, Reason::MissingMeta),
            (r#"{"job":"u","meta":{}}"#, Reason::UnsupportedSchemaVersion),
            (
                r#"{"job":"u","meta":{"schema_version":2}}"#,
                Reason::UnsupportedSchemaVersion,
            ),
            (
                r#"{"job":"u","meta":{"schema_version":1},"data":null}"#,
                Reason::InvalidData,
            ),
            (
                r#"{"job":"u","meta":{"schema_version":1},"data":{}}"#,
                Reason::MissingTraceId,
            ),
            (
                r#"{"job":"u","meta":{"schema_version":1},"data":{},"trace_id":" \r"}"#,
                Reason::MissingTraceId,
            ),
            (
                r#"{"job":"u","meta":{"schema_version":1},"data":{},"trace_id":"t"}"#,
                Reason::InvalidAttempts,
            ),
        ];
        for (body, reason) in cases {
            assert_eq!(
                decode_str(body).unwrap().envelope.accepts(),
                Err(reason),
                "{body}"
            );
        }
    }

    #[test]
    fn null_members_are_re_emitted_as_null() {
        let body = r#"{"job":"u","trace_id":null,"data":null,"meta":{"id":null},"attempts":null,"dead_letter":null}"#;
        assert_eq!(decode_str(body).unwrap().envelope.encode().unwrap(), body);
    }
}
