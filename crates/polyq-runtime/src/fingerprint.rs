//! Error fingerprints: failures that differ only in the values they mention fall in one group.
//!
//! An operator facing a dead-letter queue of thousands wants to see "3 kinds of failure", not
//! 3,000 distinct texts. [`Fingerprint::of`] keeps the error's type (given apart, as a
//! BabelQueue `dead_letter.exception`, or read from a `Type: message` prefix as an AceMQ
//! `x-acemq-error` carries it) and normalises the message: quoted values become `'…'`, UUIDs
//! `<uuid>`, long hexadecimal ids `<hex>`, numbers `<n>`, and runs of whitespace one space. Both
//! families group with this one function, so a group means the same thing everywhere.
//!
//! ```
//! use polyq_runtime::Fingerprint;
//!
//! let a = Fingerprint::of(None, "KeyError: order 1042 not found in 'eu-west'");
//! let b = Fingerprint::of(None, "KeyError: order 7 not found in 'us-east'");
//! assert_eq!(a, b);
//! assert_eq!(a.kind(), Some("KeyError"));
//! assert_eq!(a.message(), "order <n> not found in '…'");
//! assert_eq!(a.key().len(), 16);
//! ```

use std::fmt;

/// The normalised form of an error: its type, if known, and its message with the values taken
/// out. Equal fingerprints are the same failure.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint {
    kind: Option<String>,
    message: String,
}

impl Fingerprint {
    /// The fingerprint of an error with the type name `kind` (when the producer recorded one)
    /// and the text `message`. Without a `kind`, a leading `Type: ` in the message is taken as
    /// the type when `Type` reads as a type name (`ValueError`, `java.io.IOException`,
    /// `acemq::Error`, `HTTP404Error`).
    pub fn of(kind: Option<&str>, message: &str) -> Self {
        let given = kind.map(str::trim).filter(|kind| !kind.is_empty());
        let (kind, message) = match given {
            Some(kind) => (Some(kind.to_owned()), message),
            None => match split_type(message) {
                Some((kind, rest)) => (Some(kind.to_owned()), rest),
                None => (None, message),
            },
        };
        Self {
            kind,
            message: normalise(message),
        }
    }

    /// The error's type name, when the producer recorded one or the message starts with one.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// The message with quoted values, ids and numbers replaced.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// A short stable name for the group: 16 hexadecimal digits of the FNV-1a hash of the
    /// fingerprint's text, the same on every machine and in every release.
    pub fn key(&self) -> String {
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let hash = self.to_string().bytes().fold(OFFSET, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(PRIME)
        });
        format!("{hash:016x}")
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Some(kind) if self.message.is_empty() => f.write_str(kind),
            Some(kind) => write!(f, "{kind}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// The failures of one [`Fingerprint`], as [`group`] gathers them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Group<S> {
    /// What the failures have in common.
    pub fingerprint: Fingerprint,
    /// How many failures.
    pub count: u64,
    /// The earliest and latest time given with a failure (any unit; the dead-letter tools
    /// use epoch milliseconds), `None` when no failure of the group had one.
    pub first_seen: Option<i64>,
    /// See [`Group::first_seen`].
    pub last_seen: Option<i64>,
    /// The sample given with the group's first failure.
    pub sample: S,
}

/// Gathers failures, each a fingerprint, a time when known and a sample, into groups: the
/// largest first, groups of equal size in the order their first failure came.
///
/// ```
/// use polyq_runtime::{Fingerprint, group};
///
/// let failures = [("KeyError: 1", 30), ("OSError: disk 2 full", 10), ("KeyError: 7", 20)];
/// let groups = group(
///     failures
///         .iter()
///         .map(|(error, at)| (Fingerprint::of(None, error), Some(*at), *error)),
/// );
/// assert_eq!(groups[0].fingerprint.to_string(), "KeyError: <n>");
/// assert_eq!(
///     (groups[0].count, groups[0].first_seen, groups[0].last_seen),
///     (2, Some(20), Some(30))
/// );
/// assert_eq!(groups[0].sample, "KeyError: 1");
/// assert_eq!(groups[1].count, 1);
/// ```
pub fn group<S>(
    failures: impl IntoIterator<Item = (Fingerprint, Option<i64>, S)>,
) -> Vec<Group<S>> {
    let mut groups: Vec<Group<S>> = Vec::new();
    let mut index: std::collections::HashMap<Fingerprint, usize> = std::collections::HashMap::new();
    for (fingerprint, at, sample) in failures {
        if let Some(&slot) = index.get(&fingerprint) {
            let group = &mut groups[slot];
            group.count += 1;
            group.first_seen = match (group.first_seen, at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            group.last_seen = group.last_seen.max(at);
        } else {
            index.insert(fingerprint.clone(), groups.len());
            groups.push(Group {
                fingerprint,
                count: 1,
                first_seen: at,
                last_seen: at,
                sample,
            });
        }
    }
    // Stable: groups of equal size keep their order of first appearance.
    groups.sort_by_key(|group| std::cmp::Reverse(group.count));
    groups
}

/// `("Type", "rest")` for `"Type: rest"` when `Type` reads as a type name: starts with a letter
/// or `_`, holds only word characters, `.`, `$` and `::`, and has an upper-case letter (so a
/// lower-case lead such as `handler failed: …` or `error: …` stays part of the message).
fn split_type(message: &str) -> Option<(&str, &str)> {
    let message = message.trim_start();
    let mut end = None;
    let bytes = message.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b':' if bytes.get(i + 1) == Some(&b':') => i += 2,
            b':' => {
                end = Some(i);
                break;
            }
            b if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'$' => i += 1,
            _ => return None,
        }
    }
    let end = end?;
    let kind = &message[..end];
    let first = kind.as_bytes().first()?;
    let reads_as_type = (first.is_ascii_alphabetic() || *first == b'_')
        && kind.bytes().any(|b| b.is_ascii_uppercase())
        && !kind.ends_with('.');
    reads_as_type.then(|| (kind, message[end + 1..].trim_start()))
}

/// The message with its values replaced, whitespace collapsed and trimmed.
fn normalise(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    let mut out = String::with_capacity(message.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '\'' | '"' | '`')
            && let Some(close) = chars[i + 1..].iter().position(|&d| d == c)
        {
            out.push(c);
            out.push('…');
            out.push(c);
            i += close + 2;
            continue;
        }
        if c.is_whitespace() {
            if !out.is_empty() && !out.ends_with(' ') {
                out.push(' ');
            }
            i += 1;
            continue;
        }
        if c.is_ascii_alphanumeric() && !continues_word(&chars, i) {
            let id = uuid_at(&chars[i..])
                .map(|len| ("<uuid>", len))
                .or_else(|| hex_id_at(&chars[i..]).map(|len| ("<hex>", len)));
            if let Some((placeholder, len)) = id {
                out.push_str(placeholder);
                i += len;
                continue;
            }
        }
        if c.is_ascii_digit() {
            i += number_len(&chars[i..]);
            out.push_str("<n>");
            continue;
        }
        out.push(c);
        i += 1;
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out
}

/// Whether position `i` is inside a word (a letter or digit before it), where an id cannot
/// start.
fn continues_word(chars: &[char], i: usize) -> bool {
    i > 0 && chars[i - 1].is_ascii_alphanumeric()
}

/// The length of a word of hexadecimal digits starting at the head of `chars`.
fn hex_run(chars: &[char]) -> usize {
    chars.iter().take_while(|c| c.is_ascii_hexdigit()).count()
}

/// The end of a word is not followed by another word character.
fn word_ends(chars: &[char], at: usize) -> bool {
    chars
        .get(at)
        .is_none_or(|c| !c.is_ascii_alphanumeric() && *c != '_')
}

/// A UUID (`8-4-4-4-12` hexadecimal digits) at the head of `chars`.
fn uuid_at(chars: &[char]) -> Option<usize> {
    let mut at = 0;
    for (n, group) in [8, 4, 4, 4, 12].into_iter().enumerate() {
        if n > 0 {
            (chars.get(at) == Some(&'-')).then_some(())?;
            at += 1;
        }
        (hex_run(&chars[at..]) >= group).then_some(())?;
        at += group;
    }
    word_ends(chars, at).then_some(at)
}

/// A hexadecimal id at the head of `chars`: at least 8 hexadecimal digits, with at least one
/// digit and one letter among them (so plain numbers and words such as `deadbeef`… are told
/// apart from `a3f9c2e17b`); an optional `0x` prefix.
fn hex_id_at(chars: &[char]) -> Option<usize> {
    let prefix = if chars.starts_with(&['0', 'x']) { 2 } else { 0 };
    let run = hex_run(&chars[prefix..]);
    let word = &chars[prefix..prefix + run];
    let mixed = word.iter().any(char::is_ascii_digit) && word.iter().any(char::is_ascii_alphabetic);
    (word_ends(chars, prefix + run) && (run >= 8 && mixed || prefix == 2 && run > 0))
        .then_some(prefix + run)
}

/// The length of the number at the head of `chars`: digits, with one `.` or `,` between digits.
fn number_len(chars: &[char]) -> usize {
    let mut len = chars.iter().take_while(|c| c.is_ascii_digit()).count();
    while matches!(chars.get(len), Some('.' | ',' | '_'))
        && chars.get(len + 1).is_some_and(char::is_ascii_digit)
    {
        len += 1;
        len += chars[len..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(text: &str) -> String {
        Fingerprint::of(None, text).message().to_owned()
    }

    #[test]
    fn numbers_become_placeholders() {
        assert_eq!(message("timeout after 30 s"), "timeout after <n> s");
        assert_eq!(message("took 1.5 s, 2,000 rows"), "took <n> s, <n> rows");
        assert_eq!(message("1_000_000 bytes"), "<n> bytes");
        assert_eq!(message("order o-1042 failed"), "order o-<n> failed");
        assert_eq!(message("user42 and v2"), "user<n> and v<n>");
        assert_eq!(message("end."), "end.");
        assert_eq!(message("at 3."), "at <n>.");
        assert_eq!(message("-7 is negative"), "-<n> is negative");
    }

    #[test]
    fn ids_become_placeholders() {
        assert_eq!(
            message("job 0b6e1c52-9d7a-4c11-8f3e-2a4b5c6d7e8f lost"),
            "job <uuid> lost"
        );
        assert_eq!(
            message("job 0B6E1C52-9D7A-4C11-8F3E-2A4B5C6D7E8F lost"),
            "job <uuid> lost"
        );
        assert_eq!(
            message("commit a3f9c2e17b broke it"),
            "commit <hex> broke it"
        );
        assert_eq!(message("at 0xdeadbeef"), "at <hex>");
        assert_eq!(message("at 0x1f"), "at <hex>");
        // All letters, or all digits, is not a hexadecimal id.
        assert_eq!(message("deadbeefcafe"), "deadbeefcafe");
        assert_eq!(message("12345678"), "<n>");
        // Too short, or inside a word.
        assert_eq!(message("a1b2"), "a<n>b<n>");
        assert_eq!(message("xa3f9c2e17b"), "xa<n>f<n>c<n>e<n>b");
        // A UUID that runs on is not a UUID.
        assert_eq!(
            message("0b6e1c52-9d7a-4c11-8f3e-2a4b5c6d7e8fz"),
            "<hex>-<n>d<n>a-<n>c<n>-<n>f<n>e-<n>a<n>b<n>c<n>d<n>e<n>fz"
        );
    }

    #[test]
    fn quoted_values_become_placeholders() {
        assert_eq!(message("no key 'eu-west-1'"), "no key '…'");
        assert_eq!(
            message(r#"bad field "amount" = 3"#),
            r#"bad field "…" = <n>"#
        );
        assert_eq!(message("column `id` missing"), "column `…` missing");
        assert_eq!(message("two 'a' and 'b'"), "two '…' and '…'");
        assert_eq!(message("empty ''"), "empty '…'");
        // An unmatched quote is kept; an apostrophe without a partner too.
        assert_eq!(message("it's 5"), "it's <n>");
        assert_eq!(message("unterminated \"abc"), "unterminated \"abc");
    }

    #[test]
    fn whitespace_collapses() {
        assert_eq!(message("  a \t\n b  "), "a b");
        assert_eq!(message(""), "");
        assert_eq!(message("   "), "");
    }

    #[test]
    fn non_ascii_is_kept() {
        assert_eq!(message("échec n° 12 für Müller"), "échec n° <n> für Müller");
        assert_eq!(message("٣ arabic digits stay"), "٣ arabic digits stay");
    }

    #[test]
    fn a_type_prefix_is_the_kind() {
        for (text, kind, rest) in [
            ("ValueError: bad 1", "ValueError", "bad <n>"),
            (
                "java.io.IOException: closed",
                "java.io.IOException",
                "closed",
            ),
            ("acemq::Error: x", "acemq::Error", "x"),
            ("Outer$Inner: y", "Outer$Inner", "y"),
            ("_Private: z", "_Private", "z"),
            ("HTTP404Error: gone", "HTTP404Error", "gone"),
            ("TypeError:no space", "TypeError", "no space"),
            ("KeyError:", "KeyError", ""),
        ] {
            let print = Fingerprint::of(None, text);
            assert_eq!(
                (print.kind(), print.message()),
                (Some(kind), rest),
                "{text}"
            );
        }
    }

    #[test]
    fn what_does_not_read_as_a_type_stays_in_the_message() {
        for text in [
            "handler failed: boom",
            "error: x",
            "no colon here",
            "Two Words: x",
            "1Error: x",
            "Error.: x",
            ": leading colon",
            "ValueError bad: x",
            "",
        ] {
            let print = Fingerprint::of(None, text);
            assert_eq!(print.kind(), None, "{text}");
        }
        assert_eq!(
            Fingerprint::of(None, "handler failed: id 3").message(),
            "handler failed: id <n>"
        );
    }

    #[test]
    fn a_given_kind_wins_and_blank_kinds_are_none() {
        let print = Fingerprint::of(Some(" ValueError "), "KeyError: 1");
        assert_eq!(print.kind(), Some("ValueError"));
        assert_eq!(print.message(), "KeyError: <n>");
        let blank = Fingerprint::of(Some("  "), "KeyError: 1");
        assert_eq!(blank.kind(), Some("KeyError"));
        assert_eq!(blank.message(), "<n>");
    }

    #[test]
    fn groups_count_span_and_keep_the_first_sample() {
        let failures = [
            ("A: 1", Some(5), 'a'),
            ("B: x", None, 'b'),
            ("A: 2", None, 'c'),
            ("B: y", Some(9), 'd'),
            ("A: 3", Some(1), 'e'),
            ("C", None, 'f'),
        ];
        let groups = group(
            failures
                .iter()
                .map(|(error, at, sample)| (Fingerprint::of(None, error), *at, *sample)),
        );
        // Text, count, first and last seen, sample.
        type Seen = (String, u64, Option<i64>, Option<i64>, char);
        let seen: Vec<Seen> = groups
            .iter()
            .map(|g| {
                (
                    g.fingerprint.to_string(),
                    g.count,
                    g.first_seen,
                    g.last_seen,
                    g.sample,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("A: <n>".to_owned(), 3, Some(1), Some(5), 'a'),
                ("B: x".to_owned(), 1, None, None, 'b'),
                ("B: y".to_owned(), 1, Some(9), Some(9), 'd'),
                ("C".to_owned(), 1, None, None, 'f'),
            ]
        );
        assert!(group(Vec::<(Fingerprint, Option<i64>, ())>::new()).is_empty());
    }

    #[test]
    fn display_and_key() {
        assert_eq!(
            Fingerprint::of(None, "ValueError: 1").to_string(),
            "ValueError: <n>"
        );
        assert_eq!(Fingerprint::of(None, "KeyError:").to_string(), "KeyError");
        assert_eq!(Fingerprint::of(None, "just 2").to_string(), "just <n>");
        // FNV-1a of the empty string is the offset basis: the key is the documented hash.
        assert_eq!(Fingerprint::of(None, "").key(), "cbf29ce484222325");
        assert_eq!(Fingerprint::of(None, "a").key(), "af63dc4c8601ec8c");
        let one = Fingerprint::of(None, "ValueError: order 1 in 'x'");
        let two = Fingerprint::of(Some("ValueError"), "order 22 in 'yy'");
        assert_eq!(one, two);
        assert_eq!(one.key(), two.key());
        assert_ne!(one.key(), Fingerprint::of(None, "ValueError: order").key());
    }
}
