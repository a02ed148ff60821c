//! The BabelQueue rules of `polyq doctor`: a stored body and a queue's keys judged against the
//! contract, pure.
//!
//! [`check_body`] judges one envelope as it sits in a queue (the Redis header frame already
//! taken off); [`check_queue`] judges what a caller found for a queue name on the broker
//! ([`QueueState`]).
//!
//! ```
//! use babelqueue::doctor::{self, Severity};
//!
//! let body = br#"{"job":"urn:babel:a:b","trace_id":"t","data":{},"meta":{"schema_version":2},"attempts":0}"#;
//! let findings = doctor::check_body("queue jobs, message 1", body);
//! assert_eq!(findings[0].rule, doctor::rules::UNSUPPORTED_SCHEMA_VERSION);
//! assert_eq!(findings[0].severity, Severity::Error);
//! ```

pub use polyq_runtime::{Finding, Severity};

use crate::codec::decode::decode;
use crate::codec::envelope::FORBIDDEN_POINTERS;
use crate::codec::verdict::Reason;
use crate::error::PoisonCause;

/// The rule names, `babelqueue/<name>`.
pub mod rules {
    /// The queue does not exist.
    pub const QUEUE_MISSING: &str = "babelqueue/queue-missing";
    /// A body no consumer can decode: not UTF-8, not strict JSON, not an object, a mistyped
    /// member.
    pub const UNDECODABLE_BODY: &str = "babelqueue/undecodable-body";
    /// A forbidden (non-canonical, legacy) key, dropped by every consumer.
    pub const FORBIDDEN_KEY: &str = "babelqueue/forbidden-key";
    /// `meta.schema_version` other than 1.
    pub const UNSUPPORTED_SCHEMA_VERSION: &str = "babelqueue/unsupported-schema-version";
    /// No non-blank `job` or `urn`.
    pub const BLANK_URN: &str = "babelqueue/blank-urn";
    /// `meta.lang` outside the producer schema's set.
    pub const UNKNOWN_LANG: &str = "babelqueue/unknown-lang";
    /// A queue without its dead-letter queue.
    pub const DEAD_LETTER_QUEUE_MISSING: &str = "babelqueue/dead-letter-queue-missing";
    /// One queue name with keys of both Redis layouts.
    pub const MIXED_REDIS_LAYOUTS: &str = "babelqueue/mixed-redis-layouts";
}

/// The `meta.lang` values the producer schema knows (`php, go, python, java, dotnet, node`),
/// and `rust`, which this crate writes.
pub const KNOWN_LANGS: [&str; 7] = ["php", "go", "python", "java", "dotnet", "node", "rust"];

/// The findings on one stored envelope: an undecodable body, a blank URN, an unsupported
/// `meta.schema_version`, forbidden keys, and a `meta.lang` outside [`KNOWN_LANGS`]. Keys are
/// named by their pointer; no value from the body is quoted.
pub fn check_body(subject: &str, body: &[u8]) -> Vec<Finding> {
    let decoded = match decode(body) {
        Ok(decoded) => decoded,
        Err(cause) => return vec![poison(subject, &cause)],
    };
    if decoded.envelope.urn().is_none() {
        return vec![poison(subject, &PoisonCause::NoIdentity)];
    }
    let mut findings = Vec::new();
    if decoded.envelope.accepts() == Err(Reason::UnsupportedSchemaVersion) {
        findings.push(Finding::new(
            rules::UNSUPPORTED_SCHEMA_VERSION,
            Severity::Error,
            subject,
            "meta.schema_version is not the integer 1; every consumer rejects it",
            "fix the producer to write schema_version 1; redrive the rejected jobs once it does",
        ));
    }
    for warning in &decoded.warnings {
        if FORBIDDEN_POINTERS.contains(&warning.pointer.as_str()) {
            findings.push(Finding::new(
                rules::FORBIDDEN_KEY,
                Severity::Warning,
                subject,
                format!(
                    "the forbidden key {} is in the envelope; consumers drop it",
                    warning.pointer
                ),
                "fix the producer: the key is non-canonical (message-envelope §10), and what it \
                 meant is lost on the consumer",
            ));
        }
    }
    let lang = decoded.envelope.meta().and_then(|meta| meta.lang());
    if let Some(lang) = lang.filter(|lang| !KNOWN_LANGS.contains(lang)) {
        let shown = if lang.len() <= 16 && lang.bytes().all(|b| b.is_ascii_alphanumeric()) {
            format!(" ({lang})")
        } else {
            String::new()
        };
        findings.push(Finding::new(
            rules::UNKNOWN_LANG,
            Severity::Info,
            subject,
            format!(
                "meta.lang{shown} is outside the known set {}",
                KNOWN_LANGS.join(", ")
            ),
            "consumers accept it; a producer should name its language from the set, or the set \
             needs extending by an ADR",
        ));
    }
    findings
}

fn poison(subject: &str, cause: &PoisonCause) -> Finding {
    let (rule, message) = match cause {
        PoisonCause::NoIdentity => (
            rules::BLANK_URN,
            "the envelope has no non-blank job or urn; consumers set it aside as poison".to_owned(),
        ),
        // The parser's text can quote the body, so only the kind of failure is reported.
        PoisonCause::InvalidJson(_) => (
            rules::UNDECODABLE_BODY,
            "the body is not strict JSON".to_owned(),
        ),
        other => (rules::UNDECODABLE_BODY, other.to_string()),
    };
    Finding::new(
        rule,
        Severity::Error,
        subject,
        message,
        "fix the producer; consumers set the job aside as poison, and `polyq babel decode` \
         shows what is wrong with it",
    )
}

/// What a caller found for one queue name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueState {
    /// Whether the queue exists; `None` where that cannot be told (on Redis, an empty queue has
    /// no key).
    pub queue: Option<bool>,
    /// Whether its dead-letter queue exists; `None` where that cannot be told (a Redis list
    /// exists only while it holds something).
    pub dead_letter_queue: Option<bool>,
    /// Whether keys of the default Redis layout exist for the name.
    pub default_layout_keys: bool,
    /// Whether keys of the Laravel Redis layout exist for the name.
    pub laravel_layout_keys: bool,
}

/// The findings on queue `queue`: a missing queue (the only finding then), a missing
/// dead-letter queue, and keys of both Redis layouts for one name.
pub fn check_queue(queue: &str, dead_letter_queue: &str, state: &QueueState) -> Vec<Finding> {
    let subject = format!("queue {queue}");
    if state.queue == Some(false) {
        return vec![Finding::new(
            rules::QUEUE_MISSING,
            Severity::Error,
            subject,
            "the queue does not exist",
            "declare it (a worker declares its queue when it starts), or correct --queue",
        )];
    }
    let mut findings = Vec::new();
    if state.dead_letter_queue == Some(false) {
        findings.push(Finding::new(
            rules::DEAD_LETTER_QUEUE_MISSING,
            Severity::Warning,
            &subject,
            format!("its dead-letter queue {dead_letter_queue} does not exist"),
            format!(
                "declare {dead_letter_queue} (a worker declares it when it starts); a job that \
                 fails for good has nowhere to go until then"
            ),
        ));
    }
    if state.default_layout_keys && state.laravel_layout_keys {
        findings.push(Finding::new(
            rules::MIXED_REDIS_LAYOUTS,
            Severity::Error,
            &subject,
            "keys of both the default and the Laravel Redis layout exist for this name; \
             workers of one layout never see the jobs of the other",
            "pick one layout for the queue, configure every producer and worker with it, and \
             move the other layout's jobs over",
        ));
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules_of(findings: &[Finding]) -> Vec<&'static str> {
        findings.iter().map(|f| f.rule).collect()
    }

    const VALID: &str = r#"{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"id":"i","queue":"orders","lang":"python","schema_version":1,"created_at":1},"attempts":0}"#;

    fn with(from: &str, to: &str) -> Vec<Finding> {
        assert!(VALID.contains(from));
        check_body("m", VALID.replacen(from, to, 1).as_bytes())
    }

    #[test]
    fn a_valid_envelope_in_any_known_language_has_no_findings() {
        for lang in KNOWN_LANGS {
            assert!(
                with(r#""python""#, &format!("\"{lang}\"")).is_empty(),
                "{lang}"
            );
        }
    }

    #[test]
    fn forbidden_keys_are_warnings_named_by_pointer() {
        let findings = with(r#""attempts":0"#, r#""attempts":0,"timestamp":1"#);
        assert_eq!(rules_of(&findings), [rules::FORBIDDEN_KEY]);
        assert!(findings[0].message.contains("/timestamp"));
        let findings = with(r#""created_at":1"#, r#""created_at":1,"ts":1,"source":"x""#);
        assert_eq!(
            rules_of(&findings),
            [rules::FORBIDDEN_KEY, rules::FORBIDDEN_KEY]
        );
        assert_eq!(findings[0].severity, Severity::Warning);
    }

    #[test]
    fn a_urn_beside_a_job_is_not_a_forbidden_key() {
        assert!(with(r#""trace_id""#, r#""urn":"urn:babel:x:y","trace_id""#).is_empty());
    }

    #[test]
    fn schema_versions_other_than_one_are_errors() {
        for version in ["2", "0", "\"1\"", "1.5"] {
            let findings = with(
                r#""schema_version":1"#,
                &format!(r#""schema_version":{version}"#),
            );
            let rule = rules_of(&findings);
            assert!(
                rule == [rules::UNSUPPORTED_SCHEMA_VERSION] || rule == [rules::UNDECODABLE_BODY],
                "{version}: {rule:?}"
            );
            assert!(findings[0].is_error());
        }
        assert_eq!(
            rules_of(&with(r#""schema_version":1"#, r#""schema_version":2"#)),
            [rules::UNSUPPORTED_SCHEMA_VERSION]
        );
    }

    #[test]
    fn blank_or_missing_urns_are_errors() {
        for job in [r#""job":"   ""#, r#""job":"""#] {
            let findings = with(r#""job":"urn:babel:orders:created""#, job);
            assert_eq!(rules_of(&findings), [rules::BLANK_URN], "{job}");
            assert!(findings[0].is_error());
        }
    }

    #[test]
    fn an_unknown_lang_is_information_and_only_short_words_are_shown() {
        let findings = with(r#""python""#, r#""cobol""#);
        assert_eq!(rules_of(&findings), [rules::UNKNOWN_LANG]);
        assert_eq!(findings[0].severity, Severity::Info);
        assert!(findings[0].message.contains("(cobol)"));
        let findings = with(r#""python""#, r#""<script>secret</script>""#);
        assert!(!findings[0].message.contains("secret"));
    }

    #[test]
    fn undecodable_bodies_are_errors_that_quote_nothing() {
        for body in [&b"[1]"[..], b"{not json secret", b"\xff\xfe"] {
            let findings = check_body("m", body);
            assert_eq!(rules_of(&findings), [rules::UNDECODABLE_BODY], "{body:?}");
            assert!(!findings[0].message.contains("secret"));
        }
    }

    #[test]
    fn queue_rules() {
        assert!(check_queue("q", "q.dlq", &QueueState::default()).is_empty());
        let missing = QueueState {
            dead_letter_queue: Some(false),
            ..QueueState::default()
        };
        let findings = check_queue("q", "q.dlq", &missing);
        assert_eq!(rules_of(&findings), [rules::DEAD_LETTER_QUEUE_MISSING]);
        assert!(findings[0].message.contains("q.dlq"));
        let present = QueueState {
            dead_letter_queue: Some(true),
            ..QueueState::default()
        };
        assert!(check_queue("q", "q.dlq", &present).is_empty());
        let mixed = QueueState {
            default_layout_keys: true,
            laravel_layout_keys: true,
            ..QueueState::default()
        };
        assert_eq!(
            rules_of(&check_queue("q", "q.dlq", &mixed)),
            [rules::MIXED_REDIS_LAYOUTS]
        );
        let one = QueueState {
            default_layout_keys: true,
            ..QueueState::default()
        };
        assert!(check_queue("q", "q.dlq", &one).is_empty());
        let gone = QueueState {
            queue: Some(false),
            dead_letter_queue: Some(false),
            ..QueueState::default()
        };
        assert_eq!(
            rules_of(&check_queue("q", "q.dlq", &gone)),
            [rules::QUEUE_MISSING]
        );
    }
}
