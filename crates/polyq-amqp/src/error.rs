//! The one error type of this crate.

/// What went wrong talking to a broker. Every message names the operation and the object, and
/// never contains credentials.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL is malformed or names a scheme this build does not support.
    #[error("invalid broker URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL, credentials redacted.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The broker could not be reached or refused the connection.
    #[error("could not connect to {url}: {reason}")]
    Connect {
        /// The URL, credentials redacted.
        url: String,
        /// Why.
        reason: String,
    },
    /// The connection is down and did not come back within the configured bound.
    #[error(
        "broker at {url} unavailable for {waited_ms} ms while trying to {operation}; giving up"
    )]
    Unavailable {
        /// The URL, credentials redacted.
        url: String,
        /// What was attempted.
        operation: String,
        /// How long it waited for recovery.
        waited_ms: u64,
    },
    /// The named queue or exchange does not exist (AMQP 404).
    #[error("{kind} `{name}` does not exist")]
    NotFound {
        /// `queue` or `exchange`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// A queue the broker named (declared with an empty name) was deleted with the connection
    /// that declared it, so its consumer cannot resume after a reconnect.
    ///
    /// RabbitMQ deletes exclusive queues with their connection, and auto-delete queues once
    /// their last consumer's channel closes. Declaring again would give the queue a new name,
    /// which publishers and `reply_to` addresses that know the old one would never learn of, and
    /// the messages the old queue held are gone; the client therefore ends the consumer with
    /// this error and forgets the queue's bindings rather than re-declaring it under a new name.
    /// A server-named queue that is neither exclusive nor auto-delete survives a lost connection
    /// and is consumed again as usual.
    #[error(
        "server-named queue `{name}` was deleted with the connection that declared it; \
         declare a new queue, bind it and consume from it"
    )]
    QueueLost {
        /// The name the broker had given the queue.
        name: String,
    },
    /// A declaration conflicts with an existing object of the same name (AMQP 406), or an
    /// exclusive queue belongs to another connection (AMQP 405).
    #[error("cannot {operation}: {reason}")]
    Precondition {
        /// What was attempted.
        operation: String,
        /// The broker's explanation.
        reason: String,
    },
    /// The broker refused the operation (AMQP 403 ACCESS_REFUSED): the user lacks the
    /// permission on the vhost or object, or the name is reserved (RabbitMQ keeps names
    /// starting with `amq.` to itself, and the default exchange cannot be declared, deleted or
    /// bound). Retrying does not help; grant the permission or pick another name.
    #[error("access refused: cannot {operation}: {reason}")]
    AccessRefused {
        /// What was attempted.
        operation: String,
        /// The broker's explanation.
        reason: String,
    },
    /// The connection or channel closed before the broker confirmed the publish. The message
    /// may or may not have been enqueued: publish it again (consumers must tolerate the
    /// duplicate).
    #[error("publish to exchange `{exchange}` unconfirmed: {reason}; publish it again")]
    Unconfirmed {
        /// The exchange it was published to (`""` is the default exchange).
        exchange: String,
        /// Why no confirm came.
        reason: String,
    },
    /// The broker blocked publishing on the connection (`connection.blocked`: a memory or disk
    /// alarm on RabbitMQ) and did not lift the block within
    /// [`ClientOptions::blocked_timeout`](crate::ClientOptions::blocked_timeout). The block
    /// lifts once the alarm clears; consuming carries on meanwhile. The embedded broker never
    /// blocks.
    #[error(
        "publish to exchange `{exchange}` blocked by the broker for {waited_ms} ms ({reason}); {}",
        if *may_have_been_published {
            "the broker may still enqueue it once the alarm clears, so publish it again only if duplicates are harmless"
        } else {
            "it was not sent: publish it again once the broker has memory or disk to spare"
        }
    )]
    Blocked {
        /// The exchange it was published to (`""` is the default exchange).
        exchange: String,
        /// The broker's reason for the block (for instance `low on memory`).
        reason: String,
        /// How long the publish waited for the block to lift.
        waited_ms: u64,
        /// Whether the message was already sent when the block caught it, so that the broker
        /// may enqueue it once it reads from the connection again.
        may_have_been_published: bool,
    },
    /// An argument cannot be sent as given (for example a header name longer than AMQP allows).
    #[error("cannot {operation}: {reason}")]
    Invalid {
        /// What was attempted.
        operation: String,
        /// What is wrong with the argument.
        reason: String,
    },
    /// The delivery came on a channel that has since closed; the broker redelivers it, so it
    /// must not be settled on another channel.
    #[error("delivery belongs to a channel that has closed; the broker will redeliver it")]
    StaleDelivery,
    /// The delivery was already acknowledged, rejected or requeued.
    #[error("delivery already settled")]
    AlreadySettled,
    /// The client or consumer was closed by the application.
    #[error("client closed")]
    Closed,
    /// Any other failure reported by the broker or the client library.
    #[error("{operation} failed: {reason}")]
    Protocol {
        /// What was attempted.
        operation: String,
        /// What the broker or client library said.
        reason: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
