//! The one error type of the crate.

use std::path::PathBuf;

#[cfg(feature = "redis")]
use crate::transport::redis::RedisErrorKind;

/// Why a body could not be decoded into an envelope: a *poison* body, never handed to a handler
/// and never treated as an unknown URN (it goes to the dead-letter queue as a poison record).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PoisonCause {
    /// The bytes are not valid UTF-8.
    #[error("the body is not valid UTF-8")]
    NotUtf8,
    /// The text is not one strict RFC 8259 JSON value.
    #[error("the body is not strict JSON: {0}")]
    InvalidJson(String),
    /// The JSON root is not an object.
    #[error("the JSON root is not an object")]
    NotAnObject,
    /// A known member has the wrong type (e.g. a numeric `trace_id`, a fractional `attempts`).
    #[error("member {pointer} {problem}")]
    Member {
        /// RFC 6901 pointer of the member.
        pointer: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Neither a non-blank string `job` nor a non-blank string `urn`.
    #[error("the body carries no valid 'job' or 'urn' identity")]
    NoIdentity,
}

/// Everything that can go wrong in the `babelqueue` crate.
///
/// A handler or an operator decides with [`Error::is_transient`] (worth trying again later) and
/// [`Error::is_connection`] (the link to the broker failed). Where a library underneath
/// reported the failure, its error is the [`source`](std::error::Error::source); the message of
/// a variant never repeats the text of its source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `make` was given a URN that is empty or only ASCII whitespace.
    #[error(
        "a BabelQueue message needs a stable, non-empty URN (e.g. urn:babel:orders:created); got {0:?}"
    )]
    BlankUrn(String),
    /// The payload is not a JSON object.
    #[error("data must be a JSON object (an empty payload is {{}}), not {found}")]
    DataNotObject {
        /// The JSON type that was supplied.
        found: &'static str,
    },
    /// A number that is not finite (NaN, ±infinity) cannot be written as JSON.
    #[error("{pointer} holds a non-finite number, which JSON cannot carry")]
    NonFiniteNumber {
        /// RFC 6901 pointer of the value that holds it.
        pointer: String,
    },
    /// A key the codec refuses to write: a core meta key supplied as an extra, a forbidden key,
    /// the `urn` alias, or the same extension key twice.
    #[error("refusing to write the envelope key {pointer}: {reason}")]
    ReservedKey {
        /// RFC 6901 pointer of the key.
        pointer: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Producer `meta` extras given as JSON text are not one JSON object.
    #[error("the producer meta must be one JSON object of extension keys: {0}")]
    InvalidMeta(String),
    /// A body is poison: it does not decode into an envelope.
    #[error("undecodable BabelQueue body: {0}")]
    Poison(PoisonCause),
    /// A value could not be serialised as JSON.
    #[error("could not serialise as JSON: {0}")]
    Json(serde_json::Error),
    /// `data` does not match the JSON Schema registered for its URN.
    #[error("data for {urn:?} does not match its URN schema: {violation}")]
    InvalidPayload {
        /// The message URN.
        urn: String,
        /// The first violation, with its pointer.
        violation: crate::schema::Violation,
    },
    /// A field `x-gdpr-sensitive` marks could not be encrypted on publish or decrypted on
    /// consume (feature `gdpr`); the source names the field and the cipher's reason. A worker
    /// retries the message, then dead-letters it with that reason.
    #[cfg(feature = "gdpr")]
    #[error("the sensitive fields of {urn:?}")]
    Gdpr {
        /// The message URN.
        urn: String,
        /// Which field, and why.
        #[source]
        source: crate::gdpr::Error,
    },
    /// A schema registry could not be read.
    #[error("schema registry {path}: {message}")]
    Registry {
        /// The registry file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// An idempotency store failed; the message should be retried.
    #[error("idempotency store: {0}")]
    Store(String),
    /// An idempotency store did not answer (unreachable, timed out, or a query failed); the
    /// delivery fails as a handler error would, and is retried.
    #[error("idempotency store {store} could not {operation}; check that it is reachable")]
    StoreFailed {
        /// Which store (`redis`, `postgres`, or the name a custom store gives).
        store: &'static str,
        /// What it was asked to do (`look up a message id`, `claim a message id`, ...).
        operation: &'static str,
        /// The client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A conformance manifest or fixture could not be read or is malformed.
    #[error("conformance suite {path}: {message}")]
    Suite {
        /// The file at fault.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The AMQP broker (RabbitMQ or the embedded `memory://` broker) failed an operation.
    #[error(transparent)]
    Amqp(#[from] polyq_amqp::Error),
    /// The broker did not take a published message (a negative confirm, or no queue to route to).
    #[error("the broker did not take the message for queue {queue:?}: {why}")]
    NotPublished {
        /// The queue it was addressed to.
        queue: String,
        /// What the broker answered.
        why: String,
    },
    /// A broker URL this crate cannot connect to.
    #[error("cannot connect to {url}: {reason}")]
    UnsupportedUrl {
        /// The URL, credentials redacted.
        url: String,
        /// What is wrong with it and what is accepted.
        reason: String,
    },
    /// A runtime option is out of range.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// Why it is refused.
        reason: String,
    },
    /// A redrive stopped part-way (a reserve, a publish or a settle failed). Everything in
    /// `report` is settled as it says; messages not in it were not taken and stay on the
    /// dead-letter queue, so running the redrive again once the cause is fixed goes on from there.
    #[error(
        "the redrive of {dlq:?} stopped after {} redriven, {} restored and {} failed (the rest stays on the dead-letter queue)",
        report.redriven,
        report.skipped,
        report.failed
    )]
    Redrive {
        /// The dead-letter queue.
        dlq: String,
        /// What was done before it stopped.
        report: Box<crate::redrive::RedriveReport>,
        /// What stopped it.
        source: Box<Error>,
    },
    /// A Redis operation failed, or a settle found its reservation no longer held (feature
    /// `redis`).
    #[cfg(feature = "redis")]
    #[error("Redis at {url}: {operation}: {message}")]
    Redis {
        /// The server, credentials hidden.
        url: String,
        /// What was being done, e.g. `reserve from "orders"`.
        operation: String,
        /// What kind of failure it is, for a caller to match.
        kind: RedisErrorKind,
        /// What went wrong and, where it helps, what to do.
        message: String,
        /// The Redis client's error (`redis::RedisError`), when it reported one.
        #[source]
        source: Option<polyq_amqp::SourceError>,
    },
}

// Written out rather than `#[from]`, which would also make them the source: their text is
// already part of the message.
impl From<PoisonCause> for Error {
    fn from(cause: PoisonCause) -> Self {
        Error::Poison(cause)
    }
}

impl From<serde_json::Error> for Error {
    fn from(error: serde_json::Error) -> Self {
        Error::Json(error)
    }
}

impl Error {
    /// Whether trying again later may succeed: the broker or the Redis server could not be
    /// reached or the connection broke ([`polyq_amqp::Error::is_transient`],
    /// [`RedisErrorKind::Connection`]), the broker did not take a published message (a
    /// negative confirm, or no queue yet to route to), or an idempotency store failed. A poison
    /// body, a refused envelope, a schema violation or a bad option fail the same way again. A
    /// stopped redrive is transient when what stopped it is.
    ///
    /// ```
    /// use babelqueue::Error;
    ///
    /// assert!(Error::Store("connection refused".into()).is_transient());
    /// assert!(!Error::BlankUrn(" ".into()).is_transient());
    /// ```
    ///
    // Without the feature `RedisErrorKind` is not public: the link leads to the feature's note.
    #[cfg_attr(
        not(feature = "redis"),
        doc = "[`RedisErrorKind::Connection`]: crate#feature-flags"
    )]
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Amqp(error) => error.is_transient(),
            #[cfg(feature = "redis")]
            Error::Redis { kind, .. } => *kind == RedisErrorKind::Connection,
            Error::NotPublished { .. } | Error::Store(_) | Error::StoreFailed { .. } => true,
            Error::Redrive { source, .. } => source.is_transient(),
            _ => false,
        }
    }

    /// Whether `data` breaks its URN's schema ([`Error::InvalidPayload`]).
    pub fn is_invalid_payload(&self) -> bool {
        matches!(self, Error::InvalidPayload { .. })
    }

    /// Whether a protected field could not be read back (`Error::Gdpr` of a decryption,
    /// feature `gdpr`): a wrong or missing key, or a tampered or foreign value.
    pub fn is_decrypt(&self) -> bool {
        match self {
            #[cfg(feature = "gdpr")]
            Error::Gdpr { source, .. } => source.is_decrypt(),
            _ => false,
        }
    }

    /// Whether the failure is the link to the broker or the Redis server.
    pub fn is_connection(&self) -> bool {
        match self {
            Error::Amqp(error) => error.is_connection(),
            #[cfg(feature = "redis")]
            Error::Redis { kind, .. } => *kind == RedisErrorKind::Connection,
            Error::Redrive { source, .. } => source.is_connection(),
            _ => false,
        }
    }

    /// Whether the broker might have taken a message although its publish failed (its confirm
    /// was lost with the connection): publishing it again may duplicate it.
    pub fn may_have_been_published(&self) -> bool {
        match self {
            Error::Amqp(error) => error.may_have_been_published(),
            #[cfg(feature = "redis")]
            Error::Redis { kind, .. } => *kind == RedisErrorKind::Unreplicated,
            Error::Redrive { source, .. } => source.may_have_been_published(),
            _ => false,
        }
    }
}

/// `Result` with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable() -> Error {
        Error::Amqp(polyq_amqp::Error::Unavailable {
            url: "amqp://broker".to_owned(),
            operation: "publish".to_owned(),
            waited_ms: 30_000,
        })
    }

    #[cfg(feature = "redis")]
    fn redis(kind: RedisErrorKind) -> Error {
        Error::Redis {
            url: "redis://127.0.0.1:6379/0".to_owned(),
            operation: "reserve from \"jobs\"".to_owned(),
            kind,
            message: "what went wrong".to_owned(),
            source: None,
        }
    }

    #[test]
    fn broker_errors_delegate_to_the_transport() {
        let lost = unavailable();
        assert!(lost.is_transient() && lost.is_connection() && !lost.may_have_been_published());
        let unconfirmed = Error::Amqp(polyq_amqp::Error::Unconfirmed {
            exchange: String::new(),
            reason: "the broker's answer could not be attributed".to_owned(),
            source: None,
        });
        assert!(unconfirmed.is_transient() && unconfirmed.may_have_been_published());
        let refused = Error::Amqp(polyq_amqp::Error::Precondition {
            operation: "declare queue `jobs`".to_owned(),
            reason: "inequivalent arg 'durable'".to_owned(),
        });
        assert!(!refused.is_transient() && !refused.is_connection());
    }

    #[cfg(feature = "redis")]
    #[test]
    fn a_lost_redis_connection_is_transient_and_a_refused_command_is_not() {
        let lost = redis(RedisErrorKind::Connection);
        assert!(lost.is_transient() && lost.is_connection());
        for kind in [
            RedisErrorKind::Command,
            RedisErrorKind::ReservationLost,
            RedisErrorKind::Unframeable,
        ] {
            let error = redis(kind);
            assert!(!error.is_transient() && !error.is_connection(), "{error:?}");
        }
    }

    #[test]
    fn a_refused_publish_and_a_store_failure_are_transient() {
        let nacked = Error::NotPublished {
            queue: "jobs".to_owned(),
            why: "negative publisher confirm".to_owned(),
        };
        assert!(nacked.is_transient() && !nacked.is_connection());
        assert!(Error::Store("connection refused".to_owned()).is_transient());
    }

    #[test]
    fn a_store_that_did_not_answer_is_transient_and_names_its_cause_once() {
        let error = Error::StoreFailed {
            store: "postgres",
            operation: "look up a message id",
            source: Box::new(std::io::Error::other("connection refused")),
        };
        assert!(error.is_transient());
        let chain = polyq_amqp::error_chain(&error).to_string();
        assert_eq!(chain.matches("connection refused").count(), 1, "{chain}");
        assert!(chain.starts_with("idempotency store postgres could not look up a message id"));
    }

    #[test]
    fn errors_of_the_input_are_not_transient() {
        for error in [
            Error::BlankUrn(String::new()),
            Error::Poison(PoisonCause::NotUtf8),
            Error::DataNotObject { found: "array" },
            Error::InvalidOption {
                option: "concurrency",
                reason: "must be at least 1".to_owned(),
            },
        ] {
            assert!(!error.is_transient() && !error.is_connection(), "{error:?}");
        }
    }

    #[test]
    fn a_stopped_redrive_is_classed_by_what_stopped_it() {
        let error = Error::Redrive {
            dlq: "jobs.dlq".to_owned(),
            report: Box::default(),
            source: Box::new(unavailable()),
        };
        assert!(error.is_transient() && error.is_connection());
    }

    #[test]
    fn a_poison_cause_is_in_the_message_and_not_repeated_as_the_source() {
        let error = Error::from(PoisonCause::NoIdentity);
        assert!(
            error
                .to_string()
                .contains(&PoisonCause::NoIdentity.to_string())
        );
        assert!(std::error::Error::source(&error).is_none());
    }
}
