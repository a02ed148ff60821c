//! The BabelQueue body: `decode` and `classify` never panic; the fast reader of canonical
//! bodies agrees with the full reader on every body it takes (differential); the canonical
//! bytes of a decoded envelope decode back to the same bytes; every body, decodable or not, gives
//! a poison record that is JSON.

use babelqueue::fuzzing::{fast_decode, full_decode};
use babelqueue::{DeadLetter, DeadLetterReason, poison_record};

/// The target's checks on one input: panics when one fails.
pub fn check(data: &[u8]) {
    let _ = babelqueue::classify(data);
    let record = poison_record(
        data,
        &DeadLetter::new(DeadLetterReason::Poison, "q", 0).failed_at(0),
    );
    let parsed: Result<serde::de::IgnoredAny, _> = serde_json::from_str(&record);
    assert!(parsed.is_ok(), "the poison record is not JSON: {record}");
    let decoded = babelqueue::decode(data);
    let Ok(text) = std::str::from_utf8(data) else {
        assert!(decoded.is_err(), "a body that is not UTF-8 decoded");
        return;
    };
    let full = full_decode(text);
    if let Some(fast) = fast_decode(text) {
        assert_eq!(
            full.as_ref(),
            Ok(&fast),
            "the fast reader disagrees with the full one"
        );
    }
    assert_eq!(decoded, full, "decode is neither reader");
    let Ok(decoded) = full else {
        return;
    };
    let Ok(encoded) = decoded.envelope.encode() else {
        return;
    };
    let again = babelqueue::decode(encoded.as_bytes()).expect("canonical bytes decode");
    assert!(again.warnings.is_empty(), "canonical bytes warn: {encoded}");
    assert_eq!(
        again.envelope.encode().ok().as_deref(),
        Some(encoded.as_str())
    );
}
