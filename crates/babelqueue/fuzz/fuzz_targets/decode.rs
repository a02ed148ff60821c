//! Decodes arbitrary bytes as a BabelQueue body. Beyond "never panics", every body that decodes
//! must re-encode to a fixed point, and every body must yield a poison record that is valid JSON.
#![no_main]

use babelqueue::{DeadLetter, DeadLetterReason};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    if let Ok(decoded) = babelqueue::decode(body)
        && let Ok(once) = decoded.envelope.encode()
    {
        let again = babelqueue::decode(once.as_bytes()).expect("a canonical body decodes");
        assert!(again.warnings.is_empty());
        assert_eq!(again.envelope.encode().expect("re-encodes"), once);
    }
    let record = babelqueue::poison_record(
        body,
        &DeadLetter::new(DeadLetterReason::Poison, "q", 0).failed_at(0),
    );
    let parsed: Result<serde::de::IgnoredAny, _> = serde_json::from_str(&record);
    assert!(parsed.is_ok(), "the poison record is JSON: {record}");
});
