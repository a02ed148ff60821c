//! Which bindings a message matches: topic patterns and headers tables, as RabbitMQ reads them.

use crate::value::{FieldTable, FieldValue};

/// Whether a topic binding `pattern` matches a routing `key`.
///
/// Both are dot-separated words; in the pattern `*` stands for exactly one word and `#` for zero
/// or more. An empty string has no words, as in RabbitMQ (so `#` matches `""` and `*` does not).
pub(super) fn topic_matches(pattern: &str, key: &str) -> bool {
    let pattern = words(pattern);
    let key = words(key);
    // matches[j]: the pattern suffix being processed matches key[j..]. Dynamic programming keeps
    // patterns with many `#` linear in the key instead of exponential.
    let mut matches = vec![false; key.len() + 1];
    matches[key.len()] = true;
    for word in pattern.iter().rev() {
        let mut next = vec![false; key.len() + 1];
        match *word {
            "#" => {
                // `#` then the rest: the rest matches here, or `#` swallows one more word.
                for j in (0..=key.len()).rev() {
                    next[j] = matches[j] || (j < key.len() && next[j + 1]);
                }
            }
            "*" => {
                next[..key.len()].copy_from_slice(&matches[1..]);
            }
            literal => {
                for j in 0..key.len() {
                    next[j] = key[j] == literal && matches[j + 1];
                }
            }
        }
        matches = next;
    }
    matches[0]
}

fn words(text: &str) -> Vec<&str> {
    if text.is_empty() {
        Vec::new()
    } else {
        text.split('.').collect()
    }
}

/// Whether a headers-exchange binding (its arguments) matches a message's headers.
///
/// `x-match` is `all` (the default) or `any`; binding arguments whose name starts with `x-` are
/// not matched. A void argument matches on the header's presence alone.
pub(super) fn headers_match(binding: &FieldTable, headers: &FieldTable) -> bool {
    let any = binding
        .get("x-match")
        .and_then(FieldValue::as_str)
        .is_some_and(|mode| mode == "any");
    let mut criteria = binding
        .iter()
        .filter(|(name, _)| !name.starts_with("x-"))
        .map(|(name, wanted)| match (wanted, headers.get(name)) {
            (_, None) => false,
            (FieldValue::Void, Some(_)) => true,
            (wanted, Some(actual)) => super::args::same_value(wanted, actual),
        });
    if any {
        criteria.any(|matched| matched)
    } else {
        criteria.all(|matched| matched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_patterns_match_only_themselves() {
        assert!(topic_matches("a.b.c", "a.b.c"));
        assert!(!topic_matches("a.b.c", "a.b"));
        assert!(!topic_matches("a.b", "a.b.c"));
        assert!(!topic_matches("a.b.c", "a.b.d"));
        assert!(topic_matches("", ""));
        assert!(!topic_matches("", "a"));
        assert!(!topic_matches("a", ""));
    }

    #[test]
    fn star_is_exactly_one_word() {
        assert!(topic_matches("*", "a"));
        assert!(!topic_matches("*", ""));
        assert!(!topic_matches("*", "a.b"));
        assert!(topic_matches("a.*.c", "a.b.c"));
        assert!(topic_matches("a.*.c", "a..c"));
        assert!(!topic_matches("a.*.c", "a.c"));
        assert!(!topic_matches("a.*.c", "a.b.b.c"));
        assert!(topic_matches("*.*", "a.b"));
        assert!(!topic_matches("*.*", "a"));
    }

    #[test]
    fn hash_is_zero_or_more_words() {
        assert!(topic_matches("#", ""));
        assert!(topic_matches("#", "a"));
        assert!(topic_matches("#", "a.b.c"));
        assert!(topic_matches("a.#", "a"));
        assert!(topic_matches("a.#", "a.b.c"));
        assert!(!topic_matches("a.#", "b.a"));
        assert!(topic_matches("#.c", "c"));
        assert!(topic_matches("#.c", "a.b.c"));
        assert!(!topic_matches("#.c", "a.b.c.d"));
        assert!(topic_matches("a.#.c", "a.c"));
        assert!(topic_matches("a.#.c", "a.b.b.c"));
        assert!(!topic_matches("a.#.c", "a.b.b.d"));
        assert!(topic_matches("#.#", "a"));
        assert!(topic_matches("#.*", "a"));
        assert!(!topic_matches("#.*", ""));
        assert!(topic_matches("*.#", "a.b"));
        assert!(topic_matches("#.b.#", "a.b.c"));
        assert!(topic_matches("#.b.#", "b"));
        assert!(!topic_matches("#.b.#", "a.c"));
    }

    #[test]
    fn wildcards_are_words_not_substrings() {
        assert!(!topic_matches("a*", "ab"));
        assert!(!topic_matches("a#", "ab"));
        assert!(!topic_matches("a.*", "ab"));
        assert!(topic_matches("a*", "a*"));
    }

    #[test]
    fn many_hashes_stay_fast() {
        let pattern = vec!["#"; 40].join(".") + ".z";
        let key = vec!["a"; 200].join(".");
        assert!(!topic_matches(&pattern, &key));
        assert!(topic_matches(&pattern, &(key + ".z")));
    }

    fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
        entries
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.clone()))
            .collect()
    }

    #[test]
    fn headers_all_needs_every_argument() {
        let binding = table(&[("a", "1".into()), ("b", FieldValue::I32(2))]);
        assert!(headers_match(
            &binding,
            &table(&[
                ("a", "1".into()),
                ("b", FieldValue::I64(2)),
                ("c", true.into())
            ])
        ));
        assert!(!headers_match(&binding, &table(&[("a", "1".into())])));
        assert!(!headers_match(
            &binding,
            &table(&[("a", "2".into()), ("b", FieldValue::I32(2))])
        ));
    }

    #[test]
    fn headers_any_needs_one_argument() {
        let binding = table(&[
            ("x-match", "any".into()),
            ("a", "1".into()),
            ("b", FieldValue::Void),
        ]);
        assert!(headers_match(&binding, &table(&[("a", "1".into())])));
        assert!(headers_match(&binding, &table(&[("b", false.into())])));
        assert!(!headers_match(&binding, &table(&[("a", "2".into())])));
        assert!(!headers_match(&binding, &FieldTable::new()));
    }

    #[test]
    fn headers_ignore_x_arguments() {
        let binding = table(&[("x-match", "all".into()), ("x-other", "1".into())]);
        assert!(headers_match(&binding, &FieldTable::new()));
    }
}
