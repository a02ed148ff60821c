//! A job on the Laravel Redis layout: the raw job, or the server's cjson re-encoding of it that
//! comes back after a Laravel release or a crash recovery (`/` written `\/`). Decoding never
//! panics, and the re-encoding reads as the same envelope as the job it came from.

/// `text` with every `/` that is not already escaped written `\/`, as cjson writes it. Outside
/// strings JSON has neither `/` nor `\`, so this changes no valid job's meaning.
fn escape_slashes(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut escaped = false;
    for c in text.chars() {
        if c == '/' && !escaped {
            out.push('\\');
        }
        escaped = c == '\\' && !escaped;
        out.push(c);
    }
    out
}

/// The canonical bytes of the envelope in `body`, slashes escaped: the same job compares equal
/// however its strings escape `/`. Compared as text, not as `serde_json::Value`, which refuses
/// numbers beyond `f64` that JSON (and the envelope) allow.
fn canonical(body: &[u8]) -> Option<String> {
    let decoded = babelqueue::decode(body).ok()?;
    Some(escape_slashes(&decoded.envelope.encode().ok()?))
}

/// The target's checks on one input: panics when one fails.
pub fn check(data: &[u8]) {
    let _ = babelqueue::classify(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let reencoded = escape_slashes(text);
    if reencoded == text {
        return;
    }
    assert_eq!(
        canonical(data),
        canonical(reencoded.as_bytes()),
        "the cjson re-encoding reads differently: {reencoded}"
    );
    assert_eq!(
        babelqueue::decode(data).is_ok(),
        babelqueue::decode(reencoded.as_bytes()).is_ok()
    );
}
