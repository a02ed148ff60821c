//! The errors of this crate: the contract layer's [`Error`], a value (cloneable, comparable)
//! describing bad input, and the runtime's [`RuntimeError`], which also carries the transport's
//! errors (neither cloneable nor comparable) and wraps the contract error where one is the cause.
//!
//! A handler decides between trying again and setting a message aside with one call:
//! [`RuntimeError::is_transient`] (and [`RuntimeError::is_connection`],
//! [`RuntimeError::may_have_been_published`]).

use std::time::Duration;

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

impl Error {
    /// Always `false`: a value the contract refuses is refused again on the next attempt.
    /// Present so that errors wrapping this one can delegate.
    pub fn is_transient(&self) -> bool {
        false
    }

    /// Always `false`: the contract layer does no I/O.
    pub fn is_connection(&self) -> bool {
        false
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong connecting, publishing or consuming. Messages name the exchange, routing key
/// or queue involved, and never contain credentials.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The broker could not be reached, or an operation on it failed.
    #[error(transparent)]
    Transport(#[from] polyq_amqp::Error),
    /// An envelope, policy or topology given to the runtime was refused by the contract layer.
    #[error(transparent)]
    Contract(#[from] Error),
    /// The payload could not be encoded.
    #[error(
        "cannot encode the payload for exchange `{exchange}` routing key `{routing_key}`: {reason}"
    )]
    Encode {
        /// The publisher's exchange (`""` is the default exchange).
        exchange: String,
        /// The publisher's routing key.
        routing_key: String,
        /// What the codec said.
        reason: String,
    },
    /// A publish interceptor refused the message.
    #[error(
        "publish to exchange `{exchange}` routing key `{routing_key}` refused by an interceptor: {reason}"
    )]
    Refused {
        /// The publisher's exchange.
        exchange: String,
        /// The publisher's routing key.
        routing_key: String,
        /// Why the interceptor refused it.
        reason: String,
    },
    /// A mandatory message matched no queue and the broker returned it.
    #[error(
        "message to exchange `{exchange}` with routing key `{routing_key}` is unroutable: no queue is bound for it ({reply_text}); declare and bind a queue, or allow unroutable messages on the publisher"
    )]
    Unroutable {
        /// The exchange it was published to.
        exchange: String,
        /// Its routing key.
        routing_key: String,
        /// The broker's explanation.
        reply_text: String,
    },
    /// The broker refused the message (a negative confirm).
    #[error(
        "broker refused the message to exchange `{exchange}` routing key `{routing_key}` (negative confirm); a queue may be over its length limit, or on a cluster without a leader"
    )]
    Nacked {
        /// The exchange it was published to.
        exchange: String,
        /// Its routing key.
        routing_key: String,
    },
    /// No confirm came in time; the message may or may not have been enqueued.
    #[error(
        "no confirm for the message to exchange `{exchange}` routing key `{routing_key}` within {timeout:?}; it may have been enqueued, so publish it again only if duplicates are harmless"
    )]
    ConfirmTimeout {
        /// The exchange it was published to.
        exchange: String,
        /// Its routing key.
        routing_key: String,
        /// How long the publisher waited.
        timeout: Duration,
    },
    /// Part of a batch failed; the rest may have been confirmed.
    #[error("{confirmed} of {total} messages confirmed, {failed} failed; first failure: {first}")]
    Batch {
        /// Messages in the batch.
        total: usize,
        /// Messages the broker confirmed.
        confirmed: usize,
        /// Messages that failed.
        failed: usize,
        /// The first failure, in batch order.
        first: Box<RuntimeError>,
    },
    /// A consumer option is out of range.
    #[error("invalid consumer option for queue `{queue}`: {reason}")]
    InvalidOption {
        /// The queue the consumer was for.
        queue: String,
        /// What is wrong.
        reason: String,
    },
    /// A consumer whose policy waits on broker rungs found their dead-letter route broken at
    /// start: a retry expiring on a rung would be dropped by the broker without a trace, so the
    /// consumer does not start. Nothing was subscribed.
    #[error(
        "the retry route of queue `{queue}` leads nowhere: {reason}; declare it (start the consumer          with declare(true), or apply the topology) and check it with `polyq doctor --policy`"
    )]
    RungRouteBroken {
        /// The source queue.
        queue: String,
        /// Which part of the route is missing.
        reason: String,
    },
    /// A connection option is out of range; nothing was connected.
    #[error("invalid connection option `{option}`: {reason}")]
    Config {
        /// The option, as its builder setter is named.
        option: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
}

impl RuntimeError {
    /// Whether the broker might have enqueued the message although the publish failed (a
    /// timeout or a confirm lost with the connection): then publishing again may duplicate it.
    pub fn may_have_been_published(&self) -> bool {
        match self {
            RuntimeError::ConfirmTimeout { .. } => true,
            RuntimeError::Transport(error) => error.may_have_been_published(),
            _ => false,
        }
    }

    /// Whether trying again later may succeed: the connection was lost or the broker was
    /// unavailable ([`polyq_amqp::Error::is_transient`]), the broker refused the message with a
    /// negative confirm (a queue over its length limit drains), or no confirm came in time. A
    /// refused envelope, an encoding failure, an unroutable message or a bad option fail the
    /// same way again. A batch is transient when its first failure is.
    ///
    /// ```
    /// use acemq::RuntimeError;
    ///
    /// let nacked = RuntimeError::Nacked {
    ///     exchange: "orders".into(),
    ///     routing_key: "order.created".into(),
    /// };
    /// assert!(nacked.is_transient());
    /// assert!(!nacked.is_connection());
    /// ```
    pub fn is_transient(&self) -> bool {
        match self {
            RuntimeError::Transport(error) => error.is_transient(),
            RuntimeError::Contract(error) => error.is_transient(),
            RuntimeError::Nacked { .. } | RuntimeError::ConfirmTimeout { .. } => true,
            RuntimeError::Batch { first, .. } => first.is_transient(),
            RuntimeError::Encode { .. }
            | RuntimeError::Refused { .. }
            | RuntimeError::Unroutable { .. }
            | RuntimeError::InvalidOption { .. }
            | RuntimeError::RungRouteBroken { .. }
            | RuntimeError::Config { .. } => false,
        }
    }

    /// Whether a consumer refused to start because the dead-letter route of its rungs leads
    /// nowhere ([`RuntimeError::RungRouteBroken`]).
    ///
    /// ```
    /// use acemq::RuntimeError;
    ///
    /// let broken = RuntimeError::RungRouteBroken {
    ///     queue: "orders".into(),
    ///     reason: "the exchange acemq.retry does not exist".into(),
    /// };
    /// assert!(broken.is_rung_route_broken());
    /// assert!(!broken.is_transient());
    /// ```
    pub fn is_rung_route_broken(&self) -> bool {
        matches!(self, RuntimeError::RungRouteBroken { .. })
    }

    /// Whether the message itself cannot be sent as it is ([`polyq_amqp::Error::is_invalid`]:
    /// a property value over 255 bytes, an `expiration` that is no TTL): sending it again
    /// fails the same way.
    ///
    /// ```
    /// use acemq::RuntimeError;
    ///
    /// let error = RuntimeError::Transport(polyq_amqp::Error::Invalid {
    ///     operation: "publish".into(),
    ///     reason: "property `expiration` is `+1`".into(),
    /// });
    /// assert!(error.is_invalid() && !error.is_transient());
    /// ```
    pub fn is_invalid(&self) -> bool {
        match self {
            RuntimeError::Transport(error) => error.is_invalid(),
            RuntimeError::Batch { first, .. } => first.is_invalid(),
            _ => false,
        }
    }

    /// Whether the failure is the link to the broker ([`polyq_amqp::Error::is_connection`]).
    pub fn is_connection(&self) -> bool {
        match self {
            RuntimeError::Transport(error) => error.is_connection(),
            RuntimeError::Contract(error) => error.is_connection(),
            RuntimeError::Batch { first, .. } => first.is_connection(),
            _ => false,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {

    #[test]
    fn a_blocked_publish_was_not_sent_and_is_transient() {
        let blocked = RuntimeError::Transport(polyq_amqp::Error::Blocked {
            exchange: "orders".to_owned(),
            reason: "low on memory".to_owned(),
            waited_ms: 30_000,
        });
        assert!(!blocked.may_have_been_published());
        assert!(blocked.is_transient());
    }
    use super::*;

    /// A transport failure of the connection, for the tests of the errors wrapping it.
    pub(crate) fn unavailable() -> polyq_amqp::Error {
        polyq_amqp::Error::Unavailable {
            url: "amqp://broker".to_owned(),
            operation: "publish".to_owned(),
            waited_ms: 30_000,
        }
    }

    fn unconfirmed() -> polyq_amqp::Error {
        polyq_amqp::Error::Unconfirmed {
            exchange: "orders".to_owned(),
            reason: "the broker's answer could not be attributed".to_owned(),
            source: None,
        }
    }

    fn nacked() -> RuntimeError {
        RuntimeError::Nacked {
            exchange: "orders".to_owned(),
            routing_key: "order.created".to_owned(),
        }
    }

    #[test]
    fn contract_errors_are_never_transient() {
        let error = Error::InvalidRoute {
            reason: "no steps".to_owned(),
        };
        assert!(!error.is_transient() && !error.is_connection());
        let runtime = RuntimeError::from(error);
        assert!(!runtime.is_transient() && !runtime.is_connection());
    }

    #[test]
    fn transport_errors_delegate_to_the_transport() {
        let lost = RuntimeError::from(unavailable());
        assert!(lost.is_transient() && lost.is_connection());
        assert!(!lost.may_have_been_published());
        let unconfirmed = RuntimeError::from(unconfirmed());
        assert!(unconfirmed.is_transient() && unconfirmed.may_have_been_published());
        let missing = RuntimeError::from(polyq_amqp::Error::NotFound {
            kind: "exchange",
            name: "orders".to_owned(),
        });
        assert!(!missing.is_transient() && !missing.is_connection());
    }

    #[test]
    fn a_nack_and_a_confirm_timeout_are_transient_without_a_connection_failure() {
        let timeout = RuntimeError::ConfirmTimeout {
            exchange: "orders".to_owned(),
            routing_key: "order.created".to_owned(),
            timeout: Duration::from_secs(5),
        };
        for error in [nacked(), timeout] {
            assert!(error.is_transient(), "{error:?}");
            assert!(!error.is_connection(), "{error:?}");
        }
    }

    #[test]
    fn refusals_of_the_message_or_the_options_are_not_transient() {
        for error in [
            RuntimeError::Unroutable {
                exchange: "orders".to_owned(),
                routing_key: "order.created".to_owned(),
                reply_text: "NO_ROUTE".to_owned(),
            },
            RuntimeError::Encode {
                exchange: "orders".to_owned(),
                routing_key: "order.created".to_owned(),
                reason: "not JSON".to_owned(),
            },
            RuntimeError::Refused {
                exchange: "orders".to_owned(),
                routing_key: "order.created".to_owned(),
                reason: "no tenant".to_owned(),
            },
            RuntimeError::InvalidOption {
                queue: "orders".to_owned(),
                reason: "prefetch must be at least 1".to_owned(),
            },
            RuntimeError::Config {
                option: "max_outstanding_confirms",
                reason: "must be at least 1".to_owned(),
            },
        ] {
            assert!(!error.is_transient() && !error.is_connection(), "{error:?}");
        }
    }

    #[test]
    fn a_batch_is_classed_by_its_first_failure() {
        let batch = |first: RuntimeError| RuntimeError::Batch {
            total: 3,
            confirmed: 2,
            failed: 1,
            first: Box::new(first),
        };
        let lost = batch(RuntimeError::from(unavailable()));
        assert!(lost.is_transient() && lost.is_connection());
        let refused = batch(RuntimeError::Encode {
            exchange: String::new(),
            routing_key: "q".to_owned(),
            reason: "not JSON".to_owned(),
        });
        assert!(!refused.is_transient());
    }
}
