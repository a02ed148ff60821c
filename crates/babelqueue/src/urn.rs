//! The recommended URN form, `urn:babel:<context>:<event>`: a lint, never a rejection. Every
//! SDK accepts any non-blank string as a URN.

/// Why a URN does not follow the recommended form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrnLint {
    /// It does not start with `urn:babel:`.
    MissingPrefix,
    /// It is not `urn:babel:<context>:<event>` with exactly two segments after the prefix.
    WrongSegmentCount,
    /// The context segment is empty or has characters outside `a-z 0-9 _ -`.
    BadContext,
    /// The event segment is empty or has characters outside `a-z 0-9 _ . -`.
    BadEvent,
}

impl UrnLint {
    /// A sentence for a log line.
    pub fn describe(self) -> &'static str {
        match self {
            UrnLint::MissingPrefix => "does not start with urn:babel:",
            UrnLint::WrongSegmentCount => "is not urn:babel:<context>:<event>",
            UrnLint::BadContext => "has a context segment outside [a-z0-9_-]+",
            UrnLint::BadEvent => "has an event segment outside [a-z0-9_.-]+",
        }
    }
}

/// Checks `urn` against `^urn:babel:[a-z0-9_-]+:[a-z0-9_.-]+$`.
///
/// ```
/// use babelqueue::urn::{UrnLint, lint};
///
/// assert_eq!(lint("urn:babel:orders:invoice.requested"), None);
/// assert_eq!(lint("OrderCreated"), Some(UrnLint::MissingPrefix));
/// assert_eq!(lint("urn:babel:Orders:created"), Some(UrnLint::BadContext));
/// ```
pub fn lint(urn: &str) -> Option<UrnLint> {
    let Some(rest) = urn.strip_prefix("urn:babel:") else {
        return Some(UrnLint::MissingPrefix);
    };
    let mut parts = rest.split(':');
    let (Some(context), Some(event), None) = (parts.next(), parts.next(), parts.next()) else {
        return Some(UrnLint::WrongSegmentCount);
    };
    let plain = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-';
    if context.is_empty() || !context.bytes().all(plain) {
        return Some(UrnLint::BadContext);
    }
    if event.is_empty() || !event.bytes().all(|b| plain(b) || b == b'.') {
        return Some(UrnLint::BadEvent);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_examples_pass_and_near_misses_are_named() {
        for urn in [
            "urn:babel:orders:created",
            "urn:babel:a:b",
            "urn:babel:notifications:email.welcome",
            "urn:babel:orders:created.v2",
        ] {
            assert_eq!(lint(urn), None, "{urn}");
        }
        assert_eq!(lint("urn:babel:orders"), Some(UrnLint::WrongSegmentCount));
        assert_eq!(lint("urn:babel:a:b:c"), Some(UrnLint::WrongSegmentCount));
        assert_eq!(lint("urn:babel:a.b:c"), Some(UrnLint::BadContext));
        assert_eq!(lint("urn:babel:a:"), Some(UrnLint::BadEvent));
        assert_eq!(lint("urn:babel:a:B"), Some(UrnLint::BadEvent));
    }
}
