//! What a contract doctor reports: one finding per violation, with a severity and a fix.

use std::fmt;

/// How much a finding matters. Ordered: `Info < Warning < Error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing breaks.
    Info,
    /// Works today, but against the contract or one step from a failure.
    Warning,
    /// Messages are refused, lost or stuck because of it.
    Error,
}

impl Severity {
    /// `info`, `warning` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad` so that a width lines findings up in a column.
        f.pad(self.as_str())
    }
}

/// One violation of a contract, found in a live estate.
///
/// ```
/// use polyq_runtime::{Finding, Severity};
///
/// let finding = Finding::new(
///     "acemq/rung-missing",
///     Severity::Error,
///     "queue orders",
///     "the rung orders.retry.40s is not declared",
///     "start the consumer once, it declares its rungs",
/// );
/// assert!(finding.is_error());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// The rule that found it, `<family>/<name>`, stable across releases.
    pub rule: &'static str,
    /// How much it matters.
    pub severity: Severity,
    /// What it is about: a queue, or a message of a queue.
    pub subject: String,
    /// What is wrong. Names headers and keys, never their values.
    pub message: String,
    /// What to do about it.
    pub fix: String,
}

impl Finding {
    /// A finding of `rule` about `subject`.
    pub fn new(
        rule: &'static str,
        severity: Severity,
        subject: impl Into<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            rule,
            severity,
            subject: subject.into(),
            message: message.into(),
            fix: fix.into(),
        }
    }

    /// Whether its severity is [`Severity::Error`].
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities_order_and_serialise_in_lowercase() {
        assert!(Severity::Info < Severity::Warning && Severity::Warning < Severity::Error);
        let finding = Finding::new("a/b", Severity::Warning, "queue q", "m", "f");
        let json = serde_json::to_value(&finding).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "rule": "a/b", "severity": "warning", "subject": "queue q",
                "message": "m", "fix": "f"
            })
        );
        assert!(!finding.is_error());
        assert_eq!(Severity::Error.to_string(), "error");
        assert_eq!(format!("{:<7}|", Severity::Info), "info   |");
    }
}
