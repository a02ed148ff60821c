//! The one error type of this crate.

/// What was wrong with a value handed to the contract layer.
///
/// Reading headers off the wire never fails (unreadable values take their defaults); these
/// errors come from building envelopes, routes and policies, and from itineraries that cannot
/// be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An application header used the reserved `x-acemq-` prefix.
    #[error(
        "header '{name}' is owned by AceMQ and is derived from the envelope, so it cannot be set directly"
    )]
    ReservedHeader {
        /// The refused header name.
        name: String,
    },
    /// A counter (`version`, `attempt`, `replay_count`) outside the range the wire carries.
    #[error("{field} must be at least {min} and at most 2147483647, was {value}")]
    CounterOutOfRange {
        /// `version`, `attempt` or `replay_count`.
        field: &'static str,
        /// The smallest value allowed.
        min: u32,
        /// The refused value.
        value: u64,
    },
    /// A declared route that cannot travel in `x-acemq-route`.
    #[error("invalid route: {reason}")]
    InvalidRoute {
        /// What is wrong with it.
        reason: String,
    },
    /// An `acemq-routing-slip` header that cannot be read. The runtime treats this as fatal:
    /// a slip that does not parse will not parse on the next attempt either.
    #[error("cannot read the routing slip on this message: {reason}")]
    InvalidItinerary {
        /// What is wrong with it.
        reason: String,
    },
    /// A retry policy argument out of range.
    #[error("invalid retry policy: {reason}")]
    InvalidPolicy {
        /// What is wrong with it.
        reason: String,
    },
    /// Retry policy text that does not follow the grammar
    /// `exponential(n, d, d)` / `fixed(n, d)` / `none()` with optional `.giveUpAfter(d)`.
    #[error("cannot parse retry policy `{text}`: {reason}")]
    PolicySyntax {
        /// The text as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A topology that cannot be declared as asked.
    #[error("invalid topology: {reason}")]
    InvalidTopology {
        /// What is wrong with it.
        reason: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
