//! Redis: the header frame the shared list layout stores to carry out-of-band headers beside the
//! body in one list value, as every SDK writes and reads it.

use std::borrow::Cow;

use crate::codec::raw_json::push_str_literal;

/// The reserved key that marks a Redis header frame.
pub const FRAME_KEY: &str = "__bq_frame";

/// The Redis list value for `body` with out-of-band `headers`: the bare body when no header
/// survives (blank names and values are dropped), otherwise the frame
/// `{"__bq_frame":1,"headers":{…},"body":"<envelope>"}`.
///
/// ```
/// use babelqueue::projection::{frame, unframe};
///
/// assert_eq!(frame("{}", &[("traceparent", "")]), "{}");
/// let stored = frame(r#"{"job":"u"}"#, &[("traceparent", "00-a")]);
/// assert_eq!(
///     stored,
///     r#"{"__bq_frame":1,"headers":{"traceparent":"00-a"},"body":"{\"job\":\"u\"}"}"#
/// );
/// let (body, headers) = unframe(&stored);
/// assert_eq!(body, r#"{"job":"u"}"#);
/// assert_eq!(headers, vec![("traceparent".to_owned(), "00-a".to_owned())]);
/// ```
pub fn frame<'a>(body: &'a str, headers: &[(&str, &str)]) -> Cow<'a, str> {
    let mut clean: Vec<(&str, &str)> = Vec::with_capacity(headers.len());
    for (name, value) in headers
        .iter()
        .filter(|(n, v)| !n.is_empty() && !v.is_empty())
    {
        match clean.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => clean.push((name, value)),
        }
    }
    if clean.is_empty() {
        return Cow::Borrowed(body);
    }
    let mut out = String::with_capacity(body.len() + 64);
    out.push_str("{\"");
    out.push_str(FRAME_KEY);
    out.push_str("\":1,\"headers\":{");
    for (i, (name, value)) in clean.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str_literal(&mut out, name);
        out.push(':');
        push_str_literal(&mut out, value);
    }
    out.push_str("},\"body\":");
    push_str_literal(&mut out, body);
    out.push('}');
    Cow::Owned(out)
}

/// Reads a stored Redis list value: the envelope body and the headers of a frame, or the value
/// itself (as the body, no headers) when it is not a frame. Keep the stored value as the ack
/// handle.
pub fn unframe(stored: &str) -> (Cow<'_, str>, Vec<(String, String)>) {
    #[derive(serde::Deserialize)]
    struct Frame {
        #[serde(rename = "__bq_frame")]
        marker: serde_json::Value,
        headers: Option<serde_json::Value>,
        body: serde_json::Value,
    }
    if !stored.starts_with('{') || !stored.contains("\"__bq_frame\"") {
        return (Cow::Borrowed(stored), Vec::new());
    }
    let Ok(frame) = serde_json::from_str::<Frame>(stored) else {
        return (Cow::Borrowed(stored), Vec::new());
    };
    let marked = match &frame.marker {
        serde_json::Value::Null | serde_json::Value::Bool(false) => false,
        serde_json::Value::Number(n) => n.as_f64() != Some(0.0),
        serde_json::Value::String(s) => !s.is_empty(),
        serde_json::Value::Array(a) => !a.is_empty(),
        serde_json::Value::Object(o) => !o.is_empty(),
        serde_json::Value::Bool(true) => true,
    };
    let serde_json::Value::String(body) = frame.body else {
        return (Cow::Borrowed(stored), Vec::new());
    };
    if !marked {
        return (Cow::Borrowed(stored), Vec::new());
    }
    let headers = match frame.headers {
        Some(serde_json::Value::Object(map)) => map
            .into_iter()
            .filter_map(|(name, value)| match value {
                serde_json::Value::String(v) if !name.is_empty() && !v.is_empty() => {
                    Some((name, v))
                }
                serde_json::Value::Null => None,
                other if !name.is_empty() => {
                    Some((name, other.to_string())).filter(|(_, v)| !v.is_empty())
                }
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    (Cow::Owned(body), headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_drops_blank_headers_and_keeps_the_last_of_a_name() {
        let stored = frame("b", &[("a", "1"), ("", "x"), ("c", ""), ("a", "2")]);
        assert_eq!(stored, r#"{"__bq_frame":1,"headers":{"a":"2"},"body":"b"}"#);
        assert_eq!(
            unframe(&stored),
            (
                Cow::Owned("b".to_owned()),
                vec![("a".to_owned(), "2".to_owned())]
            )
        );
    }

    #[test]
    fn unframe_leaves_non_frames_alone() {
        for stored in [
            r#"{"job":"u"}"#,
            "not json",
            r#"{"__bq_frame":0,"body":"x"}"#,
            r#"{"__bq_frame":1,"body":5}"#,
        ] {
            let (body, headers) = unframe(stored);
            assert_eq!(body, stored);
            assert!(headers.is_empty());
        }
    }
}
