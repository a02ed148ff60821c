//! The error of the patterns.

use std::time::Duration;

use crate::RuntimeError;

/// What went wrong in a replay, a request or a responder. Wraps the runtime's error where the
/// cause was a publish, a consume or the broker.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PatternError {
    /// Publishing, consuming or declaring failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// An operation on the broker failed.
    #[error(transparent)]
    Transport(#[from] polyq_amqp::Error),
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
        "replay from `{source_queue}` to `{destination}` stopped: {reason}; the message stays in `{source_queue}`"
    )]
    ReplayPublish {
        /// The queue read from.
        source_queue: String,
        /// The queue the message was for.
        destination: String,
        /// What the broker said.
        reason: String,
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
