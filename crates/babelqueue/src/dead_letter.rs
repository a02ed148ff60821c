//! The `dead_letter` block and the poison record.

use std::fmt::Write as _;

use base64::Engine as _;

use crate::codec::envelope::{Envelope, RawJson, SOURCE_LANG, Slot};
use crate::codec::raw_json::{compact, push_str_literal};

/// Why a message was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadLetterReason {
    /// The handler failed and retries are exhausted.
    Failed,
    /// No handler for the URN (the `dead_letter` strategy, or `fail` once retries are exhausted).
    UnknownUrn,
    /// The body does not decode into an envelope.
    Poison,
}

impl DeadLetterReason {
    /// The wire spelling: `failed`, `unknown_urn`, `poison`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::Failed => "failed",
            DeadLetterReason::UnknownUrn => "unknown_urn",
            DeadLetterReason::Poison => "poison",
        }
    }
}

/// The additive `dead_letter` block, written in the key order `reason, error, exception,
/// failed_at, original_queue, attempts, lang`.
///
/// ```
/// use babelqueue::{DeadLetter, DeadLetterReason};
///
/// let block = DeadLetter::new(DeadLetterReason::Failed, "orders", 3)
///     .error("gateway timeout")
///     .failed_at(1749132730000);
/// assert_eq!(
///     block.to_json(),
///     r#"{"reason":"failed","error":"gateway timeout","exception":null,"failed_at":1749132730000,"original_queue":"orders","attempts":3,"lang":"rust"}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    reason: DeadLetterReason,
    error: Option<String>,
    exception: Option<String>,
    failed_at: i64,
    original_queue: String,
    attempts: i64,
    lang: String,
}

impl DeadLetter {
    /// A block dead-lettered now by this SDK (`lang` `"rust"`), without error text.
    pub fn new(reason: DeadLetterReason, original_queue: impl Into<String>, attempts: i64) -> Self {
        Self {
            reason,
            error: None,
            exception: None,
            failed_at: crate::codec::make::now_millis(),
            original_queue: original_queue.into(),
            attempts,
            lang: SOURCE_LANG.to_owned(),
        }
    }

    /// The human-readable error message.
    pub fn error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }

    /// The error's type name (informational).
    pub fn exception(mut self, exception: impl Into<String>) -> Self {
        self.exception = Some(exception.into());
        self
    }

    /// The dead-lettering time, Unix milliseconds (default: now).
    pub fn failed_at(mut self, failed_at: i64) -> Self {
        self.failed_at = failed_at;
        self
    }

    /// The block as compact JSON.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(160);
        out.push_str("{\"reason\":");
        push_str_literal(&mut out, self.reason.as_str());
        for (key, value) in [("error", &self.error), ("exception", &self.exception)] {
            let _ = write!(out, ",\"{key}\":");
            match value {
                Some(text) => push_str_literal(&mut out, text),
                None => out.push_str("null"),
            }
        }
        let _ = write!(out, ",\"failed_at\":{},\"original_queue\":", self.failed_at);
        push_str_literal(&mut out, &self.original_queue);
        let _ = write!(out, ",\"attempts\":{},\"lang\":", self.attempts);
        push_str_literal(&mut out, &self.lang);
        out.push('}');
        out
    }
}

/// A `dead_letter` block as read from a message (every field optional: other SDKs wrote it).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[non_exhaustive]
pub struct DeadLetterInfo {
    /// `failed`, `unknown_urn` or `poison`.
    pub reason: Option<String>,
    /// The error message.
    pub error: Option<String>,
    /// The error type name.
    pub exception: Option<String>,
    /// Unix milliseconds.
    pub failed_at: Option<i64>,
    /// The queue it was consumed from.
    pub original_queue: Option<String>,
    /// Attempts made before dead-lettering.
    pub attempts: Option<i64>,
    /// The SDK language that dead-lettered it.
    pub lang: Option<String>,
}

impl Envelope {
    /// Adds (or replaces) the `dead_letter` block, leaving the rest of the envelope as it was.
    ///
    /// ```
    /// use babelqueue::{DeadLetter, DeadLetterReason};
    ///
    /// let body = br#"{"job":"urn:babel:a:b","data":{"n":1.50},"attempts":3}"#;
    /// let mut envelope = babelqueue::decode(body).unwrap().envelope;
    /// envelope.annotate(&DeadLetter::new(DeadLetterReason::UnknownUrn, "orders", 3).failed_at(5));
    /// assert_eq!(
    ///     envelope.encode().unwrap(),
    ///     r#"{"job":"urn:babel:a:b","data":{"n":1.50},"attempts":3,"dead_letter":{"reason":"unknown_urn","error":null,"exception":null,"failed_at":5,"original_queue":"orders","attempts":3,"lang":"rust"}}"#
    /// );
    /// assert_eq!(envelope.dead_letter().unwrap().reason.as_deref(), Some("unknown_urn"));
    /// ```
    pub fn annotate(&mut self, block: &DeadLetter) {
        self.dead_letter = Slot::Set(RawJson::trusted(block.to_json()));
    }

    /// The `dead_letter` block, if present and readable.
    pub fn dead_letter(&self) -> Option<DeadLetterInfo> {
        self.dead_letter.get().and_then(|raw| raw.parse().ok())
    }
}

const JSON_WHITESPACE: [char; 4] = [' ', '\t', '\n', '\r'];

/// The dead-letter record for a poison body: nothing re-encoded, nothing lost.
///
/// - One strict JSON object (valid UTF-8, no unpaired surrogate escapes, no top-level
///   `dead_letter`): the original text with a `dead_letter` member spliced in before the closing
///   brace, so `1e400` and 64-bit integers survive as written.
/// - Other UTF-8 text: `{"raw":"<text>","dead_letter":{…}}`.
/// - Bytes that are not UTF-8: `{"raw":"<base64>","raw_encoding":"base64","dead_letter":{…}}`.
///
/// ```
/// use babelqueue::{DeadLetter, DeadLetterReason, poison_record};
///
/// let block = DeadLetter::new(DeadLetterReason::Poison, "orders", 0).failed_at(1);
/// let spliced = poison_record(br#"{"job":5,"n":1e400}"#, &block);
/// assert!(spliced.starts_with(r#"{"job":5,"n":1e400,"dead_letter":{"reason":"poison""#));
/// assert!(poison_record(b"not json", &block).starts_with(r#"{"raw":"not json","dead_letter""#));
/// assert!(poison_record(b"\xff", &block).starts_with(r#"{"raw":"/w==","raw_encoding":"base64""#));
/// ```
pub fn poison_record(body: &[u8], block: &DeadLetter) -> String {
    let block = block.to_json();
    let Ok(text) = std::str::from_utf8(body) else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(body);
        return format!(r#"{{"raw":"{encoded}","raw_encoding":"base64","dead_letter":{block}}}"#);
    };
    if is_spliceable(text) {
        let trimmed = text.trim_matches(JSON_WHITESPACE);
        let open = &trimmed[..trimmed.len() - 1];
        return if open[1..].trim_matches(JSON_WHITESPACE).is_empty() {
            format!(r#"{{"dead_letter":{block}}}"#)
        } else {
            format!(r#"{open},"dead_letter":{block}}}"#)
        };
    }
    let mut out = String::with_capacity(text.len() + block.len() + 32);
    out.push_str("{\"raw\":");
    push_str_literal(&mut out, text);
    let _ = write!(out, ",\"dead_letter\":{block}}}");
    out
}

fn is_spliceable(text: &str) -> bool {
    let Ok(members) = crate::codec::decode::object_members(text) else {
        return false;
    };
    members
        .iter()
        .all(|(key, raw)| key != "dead_letter" && compact(raw.get(), false).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> DeadLetter {
        DeadLetter::new(DeadLetterReason::Poison, "q", 2).failed_at(9)
    }

    const BLOCK: &str = r#"{"reason":"poison","error":null,"exception":null,"failed_at":9,"original_queue":"q","attempts":2,"lang":"rust"}"#;

    #[test]
    fn splices_objects_byte_for_byte() {
        assert_eq!(
            poison_record(b" {\"a\" : 12345678901234567890 ,\"a\":1 }\n", &block()),
            format!(r#"{{"a" : 12345678901234567890 ,"a":1 ,"dead_letter":{BLOCK}}}"#)
        );
        assert_eq!(
            poison_record(b"{ }", &block()),
            format!(r#"{{"dead_letter":{BLOCK}}}"#)
        );
    }

    #[test]
    fn wraps_what_cannot_be_spliced() {
        for (body, raw) in [
            (r#"{"dead_letter":1}"#, r#""{\"dead_letter\":1}""#),
            (r#"{"s":"\ud800"}"#, r#""{\"s\":\"\\ud800\"}""#),
            (r#"{"n":NaN}"#, r#""{\"n\":NaN}""#),
            ("[1]", r#""[1]""#),
            ("a\u{1}é", "\"a\\u0001é\""),
        ] {
            assert_eq!(
                poison_record(body.as_bytes(), &block()),
                format!(r#"{{"raw":{raw},"dead_letter":{BLOCK}}}"#),
                "{body}"
            );
        }
    }

    #[test]
    fn non_utf8_is_base64_of_the_exact_bytes() {
        let record = poison_record(b"{\"a\":\"\xc3\x28\"}", &block());
        assert_eq!(
            record,
            format!(
                r#"{{"raw":"eyJhIjoiwygifQ==","raw_encoding":"base64","dead_letter":{BLOCK}}}"#
            )
        );
    }

    #[test]
    fn block_escapes_error_text() {
        let b = DeadLetter::new(DeadLetterReason::Failed, "q", 1)
            .error("line\n\"quoted\"")
            .exception("App\\Exceptions\\GatewayTimeout")
            .failed_at(0);
        assert!(b.to_json().contains(
            r#""error":"line\n\"quoted\"","exception":"App\\Exceptions\\GatewayTimeout""#
        ));
    }
}
