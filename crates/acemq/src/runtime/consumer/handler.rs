//! What a handler receives and what it answers.

use std::fmt;
use std::sync::Arc;

use crate::Envelope;
use crate::runtime::interceptor::BoxError;

/// A decoded delivery: the payload, its envelope and where it came from.
#[derive(Debug)]
pub struct Message<T> {
    pub(crate) payload: T,
    pub(crate) envelope: Arc<Envelope>,
    pub(crate) queue: Arc<str>,
    pub(crate) exchange: String,
    pub(crate) routing_key: String,
    pub(crate) redelivered: bool,
    pub(crate) reply_to: Option<String>,
}

impl<T> Message<T> {
    /// The decoded payload.
    pub fn payload(&self) -> &T {
        &self.payload
    }

    /// The payload, giving up the rest.
    pub fn into_payload(self) -> T {
        self.payload
    }

    /// The envelope: id, type, correlation, attempt, application headers, ...
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// The queue it was consumed from.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The exchange it was published to (`""` for the default exchange, which retries use).
    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    /// The AMQP `reply-to` property. AceMQ requesters also write the address as the
    /// `acemq-reply-to` header ([`Envelope::headers`]), which responders read first.
    pub fn reply_to(&self) -> Option<&str> {
        self.reply_to.as_deref()
    }

    /// The routing key it was published with.
    pub fn routing_key(&self) -> &str {
        &self.routing_key
    }

    /// Whether the broker delivered it before without an acknowledgement (a crash or lost
    /// connection); retries are republished, so they are not redeliveries.
    pub fn redelivered(&self) -> bool {
        self.redelivered
    }
}

/// A handler's failure: the error and the name of its type, which the reason written to
/// `x-acemq-error` carries (`exhausted 3 attempts: ParseIntError: invalid digit found in
/// string`).
///
/// Anything convertible into `Box<dyn Error + Send + Sync>` converts into it, so `?` works on
/// `std` errors, `anyhow::Error` and strings. Strings and type-erased errors are named `Error`.
pub struct HandlerError {
    kind: String,
    error: BoxError,
}

impl HandlerError {
    /// The name of the error's type, such as `ParseIntError`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The error itself.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }
}

impl<E: Into<BoxError> + 'static> From<E> for HandlerError {
    fn from(error: E) -> Self {
        Self {
            kind: kind_of(std::any::type_name::<E>()).to_owned(),
            error: error.into(),
        }
    }
}

/// The last path segment of a type name, or `Error` for strings and type-erased errors.
fn kind_of(type_name: &str) -> &str {
    let base = type_name.split('<').next().unwrap_or(type_name);
    let last = base
        .rsplit("::")
        .next()
        .unwrap_or(base)
        .trim_start_matches('&');
    match last {
        "str" | "String" | "Box" | "Cow" | "" => "Error",
        other => other,
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.error)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("kind", &self.kind)
            .field("error", &self.error)
            .finish()
    }
}

/// What a handler decided about a message.
#[derive(Debug)]
pub enum Outcome {
    /// Done: acknowledge it.
    Accept,
    /// Failed: try again by the consumer's retry policy, or set it aside into `Q.dlq` once the
    /// policy gives up.
    Retry(HandlerError),
    /// Can never succeed (fatal): straight into `Q.dlq`, no retries.
    Reject(HandlerError),
    /// Cannot be read as intended: into `Q.parked`, no retries.
    Park(HandlerError),
}

impl Outcome {
    /// [`Outcome::Retry`] with `error`.
    pub fn retry(error: impl Into<HandlerError>) -> Self {
        Outcome::Retry(error.into())
    }

    /// [`Outcome::Reject`] with `error`.
    pub fn reject(error: impl Into<HandlerError>) -> Self {
        Outcome::Reject(error.into())
    }

    /// [`Outcome::Park`] with `error`.
    pub fn park(error: impl Into<HandlerError>) -> Self {
        Outcome::Park(error.into())
    }

    /// The failure, unless the outcome is [`Outcome::Accept`].
    pub fn error(&self) -> Option<&HandlerError> {
        match self {
            Outcome::Accept => None,
            Outcome::Retry(e) | Outcome::Reject(e) | Outcome::Park(e) => Some(e),
        }
    }
}

/// What a handler may return: an [`Outcome`], `()` (accept), or a `Result` whose error means
/// [`Outcome::Retry`].
pub trait IntoOutcome {
    /// The outcome this value stands for.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Outcome {
        Outcome::Accept
    }
}

impl<E: Into<HandlerError>> IntoOutcome for Result<(), E> {
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(()) => Outcome::Accept,
            Err(error) => Outcome::Retry(error.into()),
        }
    }
}

impl<E: Into<HandlerError>> IntoOutcome for Result<Outcome, E> {
    fn into_outcome(self) -> Outcome {
        self.unwrap_or_else(|error| Outcome::Retry(error.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_named_by_their_type() {
        let parse = "x".parse::<u8>().unwrap_err();
        assert_eq!(HandlerError::from(parse).kind(), "ParseIntError");
        assert_eq!(HandlerError::from("boom").to_string(), "Error: boom");
        assert_eq!(HandlerError::from(String::from("boom")).kind(), "Error");
        let boxed: BoxError = "x".into();
        assert_eq!(HandlerError::from(boxed).kind(), "Error");
        assert_eq!(kind_of("anyhow::Error"), "Error");
    }

    #[test]
    fn a_returned_error_is_a_retry() {
        let failed: Result<(), &str> = Err("no");
        assert!(matches!(failed.into_outcome(), Outcome::Retry(_)));
        assert!(matches!(().into_outcome(), Outcome::Accept));
        let parked: Result<Outcome, &str> = Ok(Outcome::park("unreadable"));
        assert!(matches!(parked.into_outcome(), Outcome::Park(_)));
    }
}
