//! The Redis header frame (`__bq_frame`): any stored value unframes without a panic, and a
//! body framed with headers unframes to that body and those headers.

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use babelqueue::projection::{frame, unframe};

/// Frames `body` with `headers` and checks what unframing gives back. A frame is written only
/// when a header survives (blank ones are dropped, a repeated name keeps its last value).
fn frames_and_unframes(body: &str, headers: &[(&str, &str)]) {
    let mut expected = BTreeMap::new();
    for (name, value) in headers
        .iter()
        .filter(|(n, v)| !n.is_empty() && !v.is_empty())
    {
        expected.insert(name.to_string(), value.to_string());
    }
    let stored = frame(body, headers);
    if expected.is_empty() {
        assert_eq!(stored, body, "a body with no headers was framed");
        return;
    }
    let (unframed, read) = unframe(&stored);
    assert_eq!(unframed, body, "the frame lost its body: {stored}");
    let read: BTreeMap<String, String> = read.into_iter().collect();
    assert_eq!(read, expected, "the frame lost its headers: {stored}");
}

/// The target's checks on one input: panics when one fails.
pub fn check(data: &[u8]) {
    if let Ok(stored) = std::str::from_utf8(data) {
        let (body, headers) = unframe(stored);
        let pairs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        frames_and_unframes(&body, &pairs);
    }
    let mut u = Unstructured::new(data);
    if let Ok((body, headers)) = <(String, Vec<(String, String)>)>::arbitrary(&mut u) {
        let pairs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        frames_and_unframes(&body, &pairs);
    }
}
