//! The error of the runtime: connecting, publishing and consuming.
//!
//! The contract layer's [`Error`](crate::Error) is a value (cloneable, comparable) describing
//! bad input; the runtime's failures also carry the transport's errors, which are neither, so
//! they get this type, which wraps the contract error where one is the cause.

use std::time::Duration;

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
    Contract(#[from] crate::Error),
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
        "broker refused the message to exchange `{exchange}` routing key `{routing_key}` (negative confirm); a queue may be over its length limit"
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
}

impl RuntimeError {
    /// Whether the broker might have enqueued the message although the publish failed (a
    /// timeout, a confirm lost with the connection, or a block of the connection that caught
    /// the message already sent): then publishing again may duplicate it.
    pub fn may_have_been_published(&self) -> bool {
        matches!(
            self,
            RuntimeError::ConfirmTimeout { .. }
                | RuntimeError::Transport(
                    polyq_amqp::Error::Unconfirmed { .. }
                        | polyq_amqp::Error::Blocked {
                            may_have_been_published: true,
                            ..
                        }
                )
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(may_have_been_published: bool) -> RuntimeError {
        RuntimeError::Transport(polyq_amqp::Error::Blocked {
            exchange: "orders".to_owned(),
            reason: "low on memory".to_owned(),
            waited_ms: 30_000,
            may_have_been_published,
        })
    }

    #[test]
    fn a_blocked_publish_may_have_been_published_only_if_it_was_sent() {
        assert!(blocked(true).may_have_been_published());
        assert!(!blocked(false).may_have_been_published());
    }
}
