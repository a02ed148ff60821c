//! The fast reader of a body in the shape this crate's (and every SDK's) `encode` writes: compact,
//! no escape anywhere, only the known members `job`, `trace_id`, `data`, `meta` and `attempts`,
//! each at most once, of the expected types, and `meta` with only its core members.
//!
//! It checks what it reads as strictly as the full reader in `decode` (RFC 8259 grammar, UTF-8,
//! control characters, finite numbers in `data`) and returns `None` for anything outside that
//! shape, valid or not: the full reader then decides, so every error, warning and edge case has
//! one implementation. A body it accepts decodes to exactly what the full reader returns, which
//! the tests below check on generated and edited bodies.
//!
//! The shape is narrow enough to be read in one pass without a general parser: with no backslash
//! and no control character in the body, a string ends at the next quote, and every key is one of
//! a few literals. General JSON parsers spend several times longer on the same body (measured:
//! `serde_json` 4,300 instructions to check it, `sonic-rs` 5,000 and `simd-json` 7,300 on a
//! portable x86-64 build), which alone is more than the whole envelope may cost.

use std::borrow::Cow;

use crate::codec::decode::Decoded;
use crate::codec::envelope::{Envelope, Meta, RawJson, Slot, Text, lang_text};
use crate::codec::raw_json::is_finite_number;

/// How deep `data` may nest here; deeper values go to the full reader, which applies the limit.
const MAX_DEPTH: u32 = 100;

/// The envelope in `text` when it has the canonical shape (a decode without warnings), `None`
/// otherwise.
pub(crate) fn decode(text: &str) -> Option<Decoded> {
    let bytes = text.as_bytes();
    // A backslash or a control character anywhere leaves the shape: outside strings a control
    // character could only be whitespace. Checked over the whole body at once, without early
    // exit, so that the compiler turns it into vector compares.
    if bytes
        .iter()
        .fold(false, |found, &b| found | (b < 0x20) | (b == b'\\'))
    {
        return None;
    }
    let mut reader = Reader { text, i: 0 };
    reader.byte(b'{')?;
    // Members are read into locals and the result is built once at the end, in place: the
    // envelope is a few hundred bytes, and every move of it is a copy.
    let mut job = Text::new();
    let (mut trace_id, mut data, mut meta, mut attempts) =
        (Slot::Absent, Slot::Absent, Slot::Absent, Slot::Absent);
    let mut seen = 0_u8;
    if !reader.eat(b'}') {
        loop {
            // The first letter tells which key it can be.
            let member = match reader.after_quote()? {
                b'j' if reader.word(b"\"job\":") => 0,
                b't' if reader.word(b"\"trace_id\":") => 1,
                b'd' if reader.word(b"\"data\":") => 2,
                b'm' if reader.word(b"\"meta\":") => 3,
                b'a' if reader.word(b"\"attempts\":") => 4,
                _ => return None,
            };
            if seen & (1 << member) != 0 {
                return None;
            }
            seen |= 1 << member;
            match member {
                0 => job = Text::from(reader.string()?),
                1 => trace_id = Slot::Set(Text::from(reader.string()?)),
                2 => data = Slot::Set(reader.data()?),
                3 => meta = Slot::Set(reader.meta()?),
                _ => attempts = Slot::Set(reader.integer()?),
            }
            if !reader.eat(b',') {
                break;
            }
        }
        reader.byte(b'}')?;
    }
    if reader.i != bytes.len() {
        return None;
    }
    Some(Decoded {
        envelope: Envelope {
            job,
            trace_id,
            data,
            meta,
            attempts,
            dead_letter: Slot::Absent,
            extras: Vec::new(),
        },
        warnings: Vec::new(),
    })
}

/// The index of the first quote in `bytes`, a word of eight bytes at a time. The strings of an
/// envelope are short (keys, ids, codes): a call to the vector search costs more here than the
/// whole word loop (measured: 140 instructions less per decode of the reference body).
fn find_quote(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const QUOTES: u64 = u64::from_ne_bytes([b'"'; 8]);
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let x = u64::from_le_bytes(word.try_into().ok()?) ^ QUOTES;
        // A zero byte of `x` is a quote. The lowest flagged byte is always one: a borrow only
        // flags bytes above a true zero.
        let found = x.wrapping_sub(ONES) & !x & HIGHS;
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == b'"')
        .map(|i| at + i)
}

/// A position in a body that holds no backslash and no control character.
struct Reader<'a> {
    text: &'a str,
    i: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.i).copied()
    }

    /// The byte after the next one: a key's first letter when a key starts here.
    fn after_quote(&self) -> Option<u8> {
        self.text.as_bytes().get(self.i + 1).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.i += usize::from(found);
        found
    }

    fn byte(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }

    /// Whether `word` is at the position, stepping over it if so.
    fn word<const N: usize>(&mut self, word: &[u8; N]) -> bool {
        let found = self.text.as_bytes()[self.i..].first_chunk::<N>() == Some(word);
        self.i += if found { N } else { 0 };
        found
    }

    fn byte_word<const N: usize>(&mut self, word: &[u8; N]) -> Option<()> {
        self.word(word).then_some(())
    }

    /// A string's content: with no backslash in the body, it ends at the next quote.
    #[inline(always)]
    fn string(&mut self) -> Option<&'a str> {
        let start = self.i + 1;
        self.skip_string()?;
        self.text.get(start..self.i - 1)
    }

    /// Steps over a string (valid as it is: UTF-8, no control character, no escape).
    #[inline(always)]
    fn skip_string(&mut self) -> Option<()> {
        self.byte(b'"')?;
        self.i += find_quote(&self.text.as_bytes()[self.i..])? + 1;
        Some(())
    }

    /// An integer member: an integer literal that fits 64 bits (`-0` reads as 0, as in
    /// `typed_members`). A fraction, an exponent or a larger integer leaves the shape.
    #[inline(always)]
    fn integer(&mut self) -> Option<i64> {
        let negative = self.eat(b'-');
        let start = self.i;
        let mut magnitude = 0_u64;
        for &d in &self.text.as_bytes()[start..] {
            if !d.is_ascii_digit() {
                break;
            }
            magnitude = magnitude
                .checked_mul(10)?
                .checked_add(u64::from(d - b'0'))?;
            self.i += 1;
        }
        let digits = self.i - start;
        // A leading zero is only valid alone.
        if digits == 0 || (digits > 1 && self.text.as_bytes()[start] == b'0') {
            return None;
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        if negative {
            0_i64.checked_sub_unsigned(magnitude)
        } else {
            i64::try_from(magnitude).ok()
        }
    }

    /// Steps over a number literal, checking its grammar.
    fn number(&mut self) -> Option<()> {
        self.eat(b'-');
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.') {
            self.some_digits()?;
        }
        if self.eat(b'e') || self.eat(b'E') {
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        let rest = &self.text.as_bytes()[self.i..];
        self.i += rest
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(rest.len());
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }

    /// `meta` with only its core members, each at most once.
    fn meta(&mut self) -> Option<Meta> {
        self.byte(b'{')?;
        let (mut id, mut queue, mut lang, mut schema_version, mut created_at) = (
            Slot::Absent,
            Slot::Absent,
            Slot::Absent,
            Slot::Absent,
            Slot::Absent,
        );
        if !self.eat(b'}') {
            let mut seen = 0_u8;
            loop {
                let member = match self.after_quote()? {
                    b'i' if self.word(b"\"id\":") => 0,
                    b'q' if self.word(b"\"queue\":") => 1,
                    b'l' if self.word(b"\"lang\":") => 2,
                    b's' if self.word(b"\"schema_version\":") => 3,
                    b'c' if self.word(b"\"created_at\":") => 4,
                    _ => return None,
                };
                if seen & (1 << member) != 0 {
                    return None;
                }
                seen |= 1 << member;
                match member {
                    0 => id = Slot::Set(Text::from(self.string()?)),
                    1 => queue = Slot::Set(Text::from(self.string()?)),
                    2 => lang = Slot::Set(lang_text(Cow::Borrowed(self.string()?))),
                    3 => schema_version = Slot::Set(self.integer()?),
                    _ => created_at = Slot::Set(self.integer()?),
                }
                if !self.eat(b',') {
                    break;
                }
            }
            self.byte(b'}')?;
        }
        Some(Meta {
            id,
            queue,
            lang,
            schema_version,
            created_at,
            extras: Vec::new(),
        })
    }

    /// `data`: an object, checked in full (grammar, finite numbers, nesting) and kept as written.
    fn data(&mut self) -> Option<RawJson> {
        let start = self.i;
        if self.peek()? != b'{' {
            return None;
        }
        // One bit per open container, set for an object.
        let mut stack: u128 = 0;
        let mut depth = 0_u32;
        loop {
            // A value starts here.
            match self.peek()? {
                open @ (b'{' | b'[') => {
                    self.i += 1;
                    let close = if open == b'{' { b'}' } else { b']' };
                    if !self.eat(close) {
                        depth += 1;
                        if depth > MAX_DEPTH {
                            return None;
                        }
                        stack = stack << 1 | u128::from(open == b'{');
                        if open == b'{' {
                            self.member_name()?;
                        }
                        continue;
                    }
                }
                b'"' => self.skip_string()?,
                b't' => self.byte_word(b"true")?,
                b'f' => self.byte_word(b"false")?,
                b'n' => self.byte_word(b"null")?,
                b'-' | b'0'..=b'9' => {
                    let start = self.i;
                    self.number()?;
                    if !is_finite_number(&self.text[start..self.i]) {
                        return None;
                    }
                }
                _ => return None,
            }
            // After a value: close what ends here, then expect the next element or member.
            loop {
                if depth == 0 {
                    return Some(RawJson::trusted(self.text[start..self.i].to_owned()));
                }
                let in_object = stack & 1 == 1;
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        if in_object {
                            self.member_name()?;
                        }
                        break;
                    }
                    b'}' if in_object => {}
                    b']' if !in_object => {}
                    _ => return None,
                }
                self.i += 1;
                stack >>= 1;
                depth -= 1;
            }
        }
    }

    /// A member name and its colon, inside `data`.
    #[inline(always)]
    fn member_name(&mut self) -> Option<()> {
        self.skip_string()?;
        self.byte(b':')
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::decode::decode_any;
    use proptest::prelude::*;

    /// The canonical reader either leaves `text` to the full reader or agrees with it.
    fn agrees(text: &str) -> bool {
        match decode(text) {
            None => true,
            Some(decoded) => decode_any(text) == Ok(decoded),
        }
    }

    const META: &str =
        r#"{"id":"i","queue":"q","lang":"rust","schema_version":1,"created_at":1700000000000}"#;

    fn body(data: &str) -> String {
        format!(
            r#"{{"job":"urn:babel:a:b","trace_id":"t","data":{data},"meta":{META},"attempts":0}}"#
        )
    }

    #[test]
    fn finds_the_first_quote_at_every_position() {
        for len in 0..20 {
            for at in 0..len {
                let mut bytes = vec![b'a'; len];
                bytes[at] = b'"';
                if at + 2 < len {
                    bytes[at + 2] = b'"';
                }
                assert_eq!(find_quote(&bytes), Some(at), "{len} {at}");
                // A byte that differs from a quote in the high bit only, and one just below it.
                bytes[at] = 0xA2;
                assert_eq!(find_quote(&bytes), (at + 2 < len).then_some(at + 2));
                bytes[at] = 0x21;
                assert_eq!(find_quote(&bytes), (at + 2 < len).then_some(at + 2));
            }
            assert_eq!(find_quote(&vec![b'!'; len]), None);
        }
    }

    #[test]
    fn takes_canonical_bodies_and_agrees() {
        for data in [
            "{}",
            r#"{"order_id":1042,"amount":99.9,"currency":"EUR","note":"café ☕"}"#,
            r#"{"a":[],"b":[1,-0,0.5,1e5,1E-5,-2.5e+3],"c":{"d":[true,false,null,{"e":{}}]}}"#,
            r#"{"big":12345678901234567890,"x":1.0,"k":"k","k":"dup"}"#,
            "{\"\":\"\",\"/\":\"a/b\",\"u\":\"😀\u{2028}\"}",
        ] {
            let text = body(data);
            let decoded = decode(&text).unwrap_or_else(|| panic!("not taken: {text}"));
            assert_eq!(decoded.envelope.data().unwrap().as_str(), data);
            assert_eq!(decoded.envelope.encode().unwrap(), text);
            assert!(agrees(&text), "{text}");
        }
        for text in [
            "{}",
            r#"{"job":"urn:babel:a:b"}"#,
            r#"{"attempts":-9223372036854775808,"meta":{}}"#,
            r#"{"job":" ","meta":{"lang":"go","schema_version":-0}}"#,
        ] {
            assert!(decode(text).is_some(), "{text}");
            assert!(agrees(text), "{text}");
        }
    }

    #[test]
    fn leaves_everything_else_to_the_full_reader() {
        for text in [
            // Not canonical, but valid: escapes, whitespace, other members, duplicates, nulls.
            &body(r#"{"a":"\u00e9"}"#),
            &body(r#"{"a": 1}"#),
            r#"{"job":"u","urn":"v"}"#,
            r#"{"job":"u","x":1}"#,
            r#"{"job":"u","job":"v"}"#,
            r#"{"job":"u","meta":{"ts":1}}"#,
            r#"{"job":"u","meta":{"id":"a","id":"b"}}"#,
            r#"{"job":"u","meta":{"x":1}}"#,
            r#"{"job":"u","trace_id":null}"#,
            r#"{"job":"u","data":null}"#,
            r#"{"job":"u","dead_letter":{}}"#,
            r#"{"job":1}"#,
            " {}",
            "{} ",
            // Members of the wrong type or range: poison, with the full reader's cause.
            r#"{"job":"u","attempts":1.0}"#,
            r#"{"job":"u","attempts":1e2}"#,
            r#"{"job":"u","attempts":9223372036854775808}"#,
            r#"{"job":"u","attempts":-9223372036854775809}"#,
            r#"{"job":"u","attempts":"1"}"#,
            r#"{"job":"u","data":[]}"#,
            r#"{"job":"u","data":{"n":1e400}}"#,
            &body(&format!(r#"{{"n":{}}}"#, "9".repeat(400))),
            // Invalid JSON.
            r#"{"job":"u","data":{"n":01}}"#,
            r#"{"job":"u","data":{"n":1.}}"#,
            r#"{"job":"u","data":{"n":.5}}"#,
            r#"{"job":"u","data":{"n":1e}}"#,
            r#"{"job":"u","data":{"n":-}}"#,
            r#"{"job":"u","data":{"n":+1}}"#,
            r#"{"job":"u","data":{"n":tru}}"#,
            r#"{"job":"u","data":{"n":[1,]}}"#,
            r#"{"job":"u","data":{"n":1,}}"#,
            r#"{"job":"u","data":{"n":[1}}"#,
            r#"{"job":"u","data":{"n":{]}}"#,
            r#"{"job":"u","data":{"n"}}"#,
            r#"{"job":"u","data":{1:2}}"#,
            r#"{"job":"u","data":{"n":"a"#,
            r#"{"job":"u","attempts":01}"#,
            r#"{"job":"u",}"#,
            r#"{"job":"u""#,
            r#"{"job":"u"}}"#,
            "{\"job\":\"a\u{1}b\"}",
            "{\"job\":\"a\tb\"}",
            "{\"job\":\"a\u{0}b\"}",
            r#"{"job":"u"}x"#,
            r#"{"job":"u"}{}"#,
            r#"{"job":"u","data":{"s":"\ud800"}}"#,
            r#"{"job":"u","data":{"s":"\x"}}"#,
        ] {
            assert!(decode(text).is_none(), "{text}");
        }
        // `data` itself is one level; an empty innermost array opens none.
        let deep = body(&format!(
            "{{\"x\":{}{}}}",
            "[".repeat(MAX_DEPTH as usize + 1),
            "]".repeat(MAX_DEPTH as usize + 1)
        ));
        assert!(decode(&deep).is_none());
        let deepest = body(&format!(
            "{{\"x\":{}{}}}",
            "[".repeat(MAX_DEPTH as usize),
            "]".repeat(MAX_DEPTH as usize)
        ));
        assert!(decode(&deepest).is_some());
        assert!(agrees(&deepest));
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "\\PC{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(6, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec(("[a-z\"]{0,4}", inner), 0..6)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
            ]
        })
    }

    /// Bytes that change what a body means when they replace or join another.
    const EDITS: &[u8] = b"{}[]\",:\\ -+.0123456789eEtrufalsn\x01\x7fx";

    proptest! {
        #[test]
        fn agrees_with_the_full_reader_on_edited_bodies(
            data in r#"\{("[a-z]{0,3}":(-?(0|[1-9][0-9]{0,2})(\.[0-9])?|"[a-zé ☕]{0,4}"|true|null|\[\]|\{\}),){0,4}"z":0\}"#,
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), 0..3_u8), 0..3),
        ) {
            let mut text = body(&data).into_bytes();
            let canonical = std::str::from_utf8(&text).unwrap();
            prop_assert!(decode(canonical).is_some(), "{}", canonical);
            prop_assert!(agrees(canonical));
            for (at, byte, how) in edits {
                let at = at.index(text.len());
                let byte = EDITS[byte.index(EDITS.len())];
                match how {
                    0 => text[at] = byte,
                    1 => text.insert(at, byte),
                    _ => {
                        text.remove(at);
                    }
                }
            }
            if let Ok(text) = std::str::from_utf8(&text) {
                prop_assert!(agrees(text), "{}", text);
            }
        }

        #[test]
        fn agrees_with_the_full_reader_on_any_payload(
            data in proptest::collection::vec(("[a-z]{0,4}", json_value()), 0..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let data = serde_json::Value::Object(data.into_iter().collect()).to_string();
            let text = body(&data);
            if !text.contains('\\') {
                prop_assert!(decode(&text).is_some(), "{}", text);
            }
            prop_assert!(agrees(&text), "{}", text);
            // Every prefix is invalid JSON, which only the full reader may report.
            let cut = cut.index(text.len());
            if let Some(prefix) = text.get(..cut) {
                prop_assert!(decode(prefix).is_none(), "{}", prefix);
            }
        }
    }
}
