//! The closed ASCII whitespace set every BabelQueue SDK trims and tests blankness with.
//!
//! Space, `\t`, `\n`, `\v` (0x0B), `\f` (0x0C) and `\r` — nothing else. Unicode spaces such as
//! U+00A0, U+0085, U+3000 or a BOM are *not* whitespace here: a Unicode-aware trim would make a
//! Rust consumer disagree with the other SDKs about which URNs and schema versions are blank.

/// Whether `byte` belongs to the closed ASCII whitespace set.
///
/// ```
/// use babelqueue::whitespace::is_ascii_space;
///
/// assert!(is_ascii_space(0x0B));
/// assert!(!is_ascii_space(0xA0));
/// ```
pub const fn is_ascii_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// `text` without leading and trailing characters of the closed ASCII whitespace set.
///
/// ```
/// use babelqueue::whitespace::trim;
///
/// assert_eq!(trim("\x0b urn:babel:a:b\r\n"), "urn:babel:a:b");
/// assert_eq!(trim("\u{a0}x\u{3000}"), "\u{a0}x\u{3000}");
/// ```
pub fn trim(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_ascii() && is_ascii_space(c as u8))
}

/// Whether `text` is empty or made only of the closed ASCII whitespace set.
///
/// ```
/// use babelqueue::whitespace::is_blank;
///
/// assert!(is_blank(" \t\x0b\x0c\r\n"));
/// assert!(!is_blank("\u{feff}"));
/// ```
pub fn is_blank(text: &str) -> bool {
    text.bytes().all(is_ascii_space)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_is_exactly_the_six_ascii_characters() {
        let members: Vec<u8> = (0..=255u8).filter(|b| is_ascii_space(*b)).collect();
        assert_eq!(members, vec![b'\t', b'\n', 0x0B, 0x0C, b'\r', b' ']);
    }

    #[test]
    fn unicode_spaces_are_not_blank_and_not_trimmed() {
        for text in ["\u{a0}", "\u{85}", "\u{3000}", "\u{feff}", "\u{2003}", "\0"] {
            assert!(!is_blank(text), "{text:?}");
            assert_eq!(trim(text), text);
        }
        assert!(is_blank(""));
    }
}
