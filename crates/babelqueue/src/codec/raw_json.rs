//! Byte-level work on JSON text that `serde_json` has already checked for syntax: compacting a raw
//! value without re-formatting it, the strictness checks RFC 8259 leaves to the reader, and the
//! minimal string escaping of the canonical frame.

use std::borrow::Cow;

/// Why a raw JSON value is not strict enough to travel on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strictness {
    /// A `\uD800`–`\uDFFF` escape that is not half of a high+low pair.
    UnpairedSurrogate,
    /// A number that does not fit a finite IEEE-754 double (`1e400`).
    NonFiniteNumber,
    /// Arrays and objects nested deeper than [`MAX_DEPTH`].
    TooDeep,
}

/// The deepest nesting a value may have: the limit `serde_json` itself applies, so every value
/// this crate accepts can be deserialised by a handler.
pub(crate) const MAX_DEPTH: usize = 128;

impl Strictness {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Strictness::UnpairedSurrogate => "holds an unpaired UTF-16 surrogate escape",
            Strictness::NonFiniteNumber => "holds a number that is not a finite double",
            Strictness::TooDeep => "nests arrays and objects more than 128 levels deep",
        }
    }
}

/// `raw` (syntactically valid JSON) with the insignificant whitespace removed, every other byte
/// kept: numbers, escapes and key order stay exactly as the producer wrote them. Borrows when
/// there is nothing to remove. With `finite_numbers`, a number that does not fit a finite double
/// is refused; so is nesting deeper than [`MAX_DEPTH`].
pub(crate) fn compact(raw: &str, finite_numbers: bool) -> Result<Cow<'_, str>, Strictness> {
    let bytes = raw.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    let mut depth = 0_usize;
    while let Some(&byte) = bytes.get(i) {
        i += 1;
        match byte {
            b'"' => i = skip_string(bytes, i)?,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(Strictness::TooDeep);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b' ' | b'\t' | b'\n' | b'\r' => {
                let buf = out.get_or_insert_with(|| String::with_capacity(raw.len()));
                buf.push_str(&raw[copied..i - 1]);
                copied = i;
            }
            b'-' | b'0'..=b'9' => {
                let start = i - 1;
                i += bytes[i..]
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .unwrap_or(bytes.len() - i);
                if finite_numbers && !is_finite_number(&raw[start..i]) {
                    return Err(Strictness::NonFiniteNumber);
                }
            }
            _ => {}
        }
    }
    Ok(match out {
        Some(mut buf) => {
            buf.push_str(&raw[copied..]);
            Cow::Owned(buf)
        }
        None => Cow::Borrowed(raw),
    })
}

pub(crate) fn is_finite_number(literal: &str) -> bool {
    // Without an exponent, fewer than 309 digits cannot reach f64::MAX (about 1.8e308).
    let plain = literal.len() < 309 && !literal.bytes().any(|b| b == b'e' || b == b'E');
    plain || literal.parse::<f64>().is_ok_and(f64::is_finite)
}

/// Index just past the string literal whose content starts at `i`, checking surrogate escapes.
/// Only quotes and backslashes matter inside a string that `serde_json` has already checked.
fn skip_string(bytes: &[u8], mut i: usize) -> Result<usize, Strictness> {
    let mut pending_high = false;
    loop {
        let Some(offset) = bytes[i..].iter().position(|&b| b == b'"' || b == b'\\') else {
            return Ok(bytes.len());
        };
        if pending_high && offset > 0 {
            return Err(Strictness::UnpairedSurrogate);
        }
        i += offset;
        if bytes[i] == b'"' {
            return if pending_high {
                Err(Strictness::UnpairedSurrogate)
            } else {
                Ok(i + 1)
            };
        }
        let unit = (bytes.get(i + 1) == Some(&b'u'))
            .then(|| bytes.get(i + 2..i + 6))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u16::from_str_radix(hex, 16).ok());
        match unit {
            Some(0xD800..=0xDBFF) if !pending_high => pending_high = true,
            Some(0xDC00..=0xDFFF) if pending_high => pending_high = false,
            Some(0xD800..=0xDFFF) => return Err(Strictness::UnpairedSurrogate),
            _ if pending_high => return Err(Strictness::UnpairedSurrogate),
            _ => {}
        }
        i += if unit.is_some() { 6 } else { 2 };
    }
}

const fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Appends `text` as a JSON string literal with only the escapes JSON requires: `"`, `\` and the
/// control characters (`\b \f \n \r \t`, the others as lowercase `\u00XX`). `/` and non-ASCII are
/// written as they are, the way every BabelQueue SDK writes them.
#[inline(always)]
pub(crate) fn push_str_literal(out: &mut String, text: &str) {
    out.reserve(text.len() + 2);
    out.push('"');
    // Almost every string needs no escape: a check without early exit over the whole text
    // compiles to vector compares, several times faster than stopping at the first hit.
    if text.bytes().fold(false, |found, b| found | needs_escape(b)) {
        push_escaped(out, text);
    } else {
        out.push_str(text);
    }
    out.push('"');
}

fn push_escaped(out: &mut String, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(offset) = bytes[start..].iter().position(|&b| needs_escape(b)) {
        let i = start + offset;
        out.push_str(&text[start..i]);
        match bytes[i] {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0C => out.push_str("\\f"),
            byte => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xF)]));
            }
        }
        start = i + 1;
    }
    out.push_str(&text[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_keeps_numbers_escapes_and_order() {
        let raw = "{ \"b\" : 1.0,\n \"a\":[ 12345678901234567890 , \"x y\\u00e9\\/\" ] }";
        assert_eq!(
            compact(raw, true).unwrap(),
            "{\"b\":1.0,\"a\":[12345678901234567890,\"x y\\u00e9\\/\"]}"
        );
        assert!(matches!(
            compact("{\"a\":1}", true).unwrap(),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn non_finite_numbers_are_refused_only_when_asked() {
        assert_eq!(compact("[1e400]", true), Err(Strictness::NonFiniteNumber));
        assert_eq!(compact("[-1e400]", true), Err(Strictness::NonFiniteNumber));
        assert!(compact("[1e400]", false).is_ok());
        assert!(compact("[1e308, -0.0, 9007199254740993]", true).is_ok());
    }

    #[test]
    fn nesting_is_bounded() {
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(compact(&ok, false).is_ok());
        let deep = format!("[{ok}]");
        assert_eq!(compact(&deep, false), Err(Strictness::TooDeep));
    }

    #[test]
    fn unpaired_surrogate_escapes_are_refused() {
        for bad in [
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud800x""#,
            r#""\ud800\n""#,
            r#""\ud800\ud800""#,
        ] {
            assert_eq!(
                compact(bad, true),
                Err(Strictness::UnpairedSurrogate),
                "{bad}"
            );
        }
        assert!(compact(r#""\ud83d\ude00 \u0041""#, true).is_ok());
    }

    #[test]
    fn literal_escapes_only_what_json_requires() {
        let mut out = String::new();
        push_str_literal(&mut out, "a/b\"c\\d\n\u{1}\u{7f}é☕\u{2028}");
        assert_eq!(out, "\"a/b\\\"c\\\\d\\n\\u0001\u{7f}é☕\u{2028}\"");
    }
}
