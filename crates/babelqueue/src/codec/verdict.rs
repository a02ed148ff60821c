//! The consumer verdict on a body: process it, reject (quarantine) it, or set it aside as poison,
//! by the contract's checks in the contract's order.

use std::fmt;

use crate::codec::decode::{Decoded, decode};
use crate::codec::envelope::{Envelope, RawJson, SCHEMA_VERSION, Slot};
use crate::codec::whitespace::is_blank;
use crate::error::PoisonCause;

/// Why a consumer must not process a decoded envelope: the first failing check, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// No non-blank `job` (or `urn` alias).
    MissingUrn,
    /// `meta` is missing or not an object.
    MissingMeta,
    /// `meta.schema_version` is not the integer 1: quarantine (dead-letter), don't drop.
    UnsupportedSchemaVersion,
    /// `data` is missing or not an object.
    InvalidData,
    /// `trace_id` is missing, not a string, or blank.
    MissingTraceId,
    /// `attempts` is missing or not an integer.
    InvalidAttempts,
}

impl Reason {
    /// The machine-readable reason, as every SDK spells it (`missing_urn`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::MissingUrn => "missing_urn",
            Reason::MissingMeta => "missing_meta",
            Reason::UnsupportedSchemaVersion => "unsupported_schema_version",
            Reason::InvalidData => "invalid_data",
            Reason::MissingTraceId => "missing_trace_id",
            Reason::InvalidAttempts => "invalid_attempts",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Envelope {
    /// The consumer verdict: `Ok` when the envelope may be processed, otherwise the first
    /// failing [`Reason`]. `meta.lang`, `meta.id` and `meta.created_at` are not checked.
    ///
    /// ```
    /// use babelqueue::Reason;
    ///
    /// let body = br#"{"job":"urn:babel:a:b","trace_id":"t","data":{},"meta":{"schema_version":2},"attempts":0}"#;
    /// let envelope = babelqueue::decode(body).unwrap().envelope;
    /// assert_eq!(envelope.accepts(), Err(Reason::UnsupportedSchemaVersion));
    /// ```
    pub fn accepts(&self) -> Result<(), Reason> {
        if self.urn().is_none() {
            return Err(Reason::MissingUrn);
        }
        let Some(meta) = self.meta.get() else {
            return Err(Reason::MissingMeta);
        };
        if meta.schema_version != Slot::Set(SCHEMA_VERSION) {
            return Err(Reason::UnsupportedSchemaVersion);
        }
        if !self.data.get().is_some_and(RawJson::is_object) {
            return Err(Reason::InvalidData);
        }
        if self.trace_id().is_none_or(is_blank) {
            return Err(Reason::MissingTraceId);
        }
        if self.attempts.get().is_none() {
            return Err(Reason::InvalidAttempts);
        }
        Ok(())
    }
}

/// What a consumer does with a body: process it, reject (quarantine) it, or set it aside as
/// poison. Poison is distinct from an unknown URN: it never reaches the URN lookup.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// A valid envelope: look up its URN.
    Accepted(Decoded),
    /// A readable envelope with an identity that fails [`Envelope::accepts`].
    Rejected {
        /// What was decoded.
        decoded: Decoded,
        /// The first failing check.
        reason: Reason,
    },
    /// Not decodable, or no identity.
    Poison(PoisonCause),
}

/// Decodes `body` and classifies it.
///
/// ```
/// use babelqueue::{PoisonCause, Verdict};
///
/// assert!(matches!(babelqueue::classify(b"[1]"), Verdict::Poison(PoisonCause::NotAnObject)));
/// assert!(matches!(
///     babelqueue::classify(br#"{"job":" "}"#),
///     Verdict::Poison(PoisonCause::NoIdentity)
/// ));
/// ```
pub fn classify(body: &[u8]) -> Verdict {
    match decode(body) {
        Err(cause) => Verdict::Poison(cause),
        Ok(decoded) if decoded.envelope.urn().is_none() => Verdict::Poison(PoisonCause::NoIdentity),
        Ok(decoded) => match decoded.envelope.accepts() {
            Ok(()) => Verdict::Accepted(decoded),
            Err(reason) => Verdict::Rejected { decoded, reason },
        },
    }
}
