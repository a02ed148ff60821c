//! The error of the patterns.

use std::time::Duration;

use crate::RuntimeError;

/// What went wrong in a replay, a request or a responder. Wraps the runtime's error where the
/// cause was a publish, a consume or the broker: a failure of the broker always reaches a caller
/// as `PatternError::Runtime(RuntimeError::Transport(..))`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PatternError {
    /// Publishing, consuming, declaring or another operation on the broker failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A replay was asked to read a queue that is neither `Q.dlq` nor `Q.parked`.
    #[error(
        "cannot replay from `{queue}`: replay reads a dead-letter queue `<queue>.dlq` or a parking queue `<queue>.parked` and moves the messages back to `<queue>`"
    )]
    NotASetAsideQueue {
        /// The queue given.
        queue: String,
    },
    /// A replayed message could not be moved; it was given back to its source queue, where it
    /// stays, and the replay stopped.
    #[error(
        "replay from `{source_queue}` to `{destination}` stopped; the message stays in `{source_queue}`"
    )]
    ReplayPublish {
        /// The queue read from.
        source_queue: String,
        /// The queue the message was for.
        destination: String,
        /// Why the publish to the destination failed.
        #[source]
        cause: Box<RuntimeError>,
    },
    /// No reply came within the call's timeout. The request may or may not have been handled.
    #[error(
        "no reply to request `{correlation_id}` sent to exchange `{exchange}` routing key `{routing_key}` within {timeout:?}; the responder may still have done the work"
    )]
    Timeout {
        /// The request's correlation id.
        correlation_id: String,
        /// The exchange the request was published to.
        exchange: String,
        /// The request's routing key.
        routing_key: String,
        /// How long the call waited.
        timeout: Duration,
    },
    /// The responder's handler failed and it answered with `acemq-error`.
    #[error("the responder failed request `{correlation_id}`: {error}")]
    Responder {
        /// The request's correlation id.
        correlation_id: String,
        /// The responder's `acemq-error` text.
        error: String,
    },
    /// The reply's body could not be decoded.
    #[error("cannot decode the reply to request `{correlation_id}`: {reason}")]
    Decode {
        /// The request's correlation id.
        correlation_id: String,
        /// What the codec said.
        reason: String,
    },
    /// The requester was closed while a call waited.
    #[error("the requester was closed before a reply to `{correlation_id}` arrived")]
    Closed {
        /// The request's correlation id.
        correlation_id: String,
    },
    /// A claim-check store could not store or return a body.
    #[error("claim-check store failed for key `{key}`: {reason}")]
    ClaimStore {
        /// The key.
        key: String,
        /// What the store said.
        reason: String,
    },
    /// A body read as claim-checked has no valid frame.
    #[error("cannot read a claim-checked body: {reason}")]
    ClaimFrame {
        /// What is wrong with it.
        reason: String,
    },
}

impl From<polyq_amqp::Error> for PatternError {
    fn from(error: polyq_amqp::Error) -> Self {
        PatternError::Runtime(RuntimeError::Transport(error))
    }
}

impl PatternError {
    /// Whether trying again later may succeed: the runtime's failure was transient
    /// ([`RuntimeError::is_transient`]), or no reply came in time. A refused replay source, a
    /// responder's failure, an undecodable reply or claim-check frame fail the same way again;
    /// so does a requester that was closed.
    pub fn is_transient(&self) -> bool {
        match self {
            PatternError::Runtime(error) => error.is_transient(),
            PatternError::ReplayPublish { cause, .. } => cause.is_transient(),
            PatternError::Timeout { .. } => true,
            _ => false,
        }
    }

    /// Whether the failure is the link to the broker ([`RuntimeError::is_connection`]).
    pub fn is_connection(&self) -> bool {
        match self {
            PatternError::Runtime(error) => error.is_connection(),
            PatternError::ReplayPublish { cause, .. } => cause.is_connection(),
            _ => false,
        }
    }

    /// Whether the broker might have enqueued a message although its publish failed
    /// ([`RuntimeError::may_have_been_published`]).
    pub fn may_have_been_published(&self) -> bool {
        match self {
            PatternError::Runtime(error) => error.may_have_been_published(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::tests::unavailable;

    #[test]
    fn a_transport_failure_reaches_callers_through_the_runtime_error() {
        fn fails() -> Result<(), PatternError> {
            Err(unavailable())?
        }
        let error = fails().unwrap_err();
        assert!(
            matches!(
                &error,
                PatternError::Runtime(RuntimeError::Transport(
                    polyq_amqp::Error::Unavailable { .. }
                ))
            ),
            "{error:?}"
        );
        assert!(error.is_transient() && error.is_connection());
    }

    #[test]
    fn a_reply_timeout_is_transient_and_a_responder_failure_is_not() {
        let timeout = PatternError::Timeout {
            correlation_id: "c-1".to_owned(),
            exchange: String::new(),
            routing_key: "rpc".to_owned(),
            timeout: Duration::from_secs(5),
        };
        assert!(timeout.is_transient() && !timeout.is_connection());
        for error in [
            PatternError::Responder {
                correlation_id: "c-1".to_owned(),
                error: "boom".to_owned(),
            },
            PatternError::NotASetAsideQueue {
                queue: "orders".to_owned(),
            },
            PatternError::Closed {
                correlation_id: "c-1".to_owned(),
            },
        ] {
            assert!(!error.is_transient() && !error.is_connection(), "{error:?}");
        }
    }

    #[test]
    fn a_stopped_replay_is_classed_by_its_cause_and_keeps_it_as_the_source() {
        let error = PatternError::ReplayPublish {
            source_queue: "orders.dlq".to_owned(),
            destination: "orders".to_owned(),
            cause: Box::new(RuntimeError::from(unavailable())),
        };
        assert!(error.is_transient() && error.is_connection());
        let source = std::error::Error::source(&error).expect("the cause is the source");
        assert!(!error.to_string().contains(&source.to_string()), "{error}");
    }
}
