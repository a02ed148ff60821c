//! The one error type of this crate.

/// An error of the library underneath, kept as the [`source`](std::error::Error::source) of
/// ours. It is boxed so that this crate's API does not depend on that library's version;
/// downcast it (`error.downcast_ref::<lapin::Error>()`) to inspect it.
pub type SourceError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong talking to a broker. Every message names the operation and the object, and
/// never contains credentials.
///
/// A handler decides with the predicates: [`Error::is_transient`] (worth trying again later),
/// [`Error::is_connection`] (the link to the broker failed) and
/// [`Error::may_have_been_published`]. Where the AMQP client library (lapin) reported the
/// failure, its error is the [`source`](std::error::Error::source), so the chain reaches the
/// I/O error; the message of a variant never repeats the text of its source.
///
/// ```
/// use polyq_amqp::Error;
///
/// let error = Error::Unavailable {
///     url: "amqp://localhost".into(),
///     operation: "publish".into(),
///     waited_ms: 30_000,
/// };
/// assert!(error.is_transient() && error.is_connection());
/// ```
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
    #[error("could not connect to {url}")]
    Connect {
        /// The URL, credentials redacted.
        url: String,
        /// Why, as the client library reported it (the password, if any, replaced by `***`).
        #[source]
        source: SourceError,
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
        /// The client library's error, when it reported one.
        #[source]
        source: Option<SourceError>,
    },
    /// The broker blocked publishing on the connection (`connection.blocked`: a memory or disk
    /// alarm on RabbitMQ) and did not lift the block within
    /// [`ClientOptions::blocked_timeout`](crate::ClientOptions::blocked_timeout), so the
    /// message was not sent: publishing it again duplicates nothing. The block lifts once the
    /// alarm clears; consuming carries on meanwhile. (A publish the block caught already sent
    /// does not fail: its confirm waits for the broker's answer.) The embedded broker never
    /// blocks.
    #[error(
        "publish to exchange `{exchange}` blocked by the broker for {waited_ms} ms ({reason}); it was not sent: publish it again once the broker has memory or disk to spare"
    )]
    Blocked {
        /// The exchange it was published to (`""` is the default exchange).
        exchange: String,
        /// The broker's reason for the block (for instance `low on memory`).
        reason: String,
        /// How long the publish waited for the block to lift.
        waited_ms: u64,
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
    /// Any other reply of the broker, or a reply the client did not expect.
    #[error("{operation} failed: {reason}")]
    Protocol {
        /// What was attempted.
        operation: String,
        /// What the broker said (its reply code and text), or what was unexpected.
        reason: String,
    },
    /// The AMQP client library failed the operation (the connection or channel broke, or the
    /// library could not carry out the operation); the [`source`](std::error::Error::source)
    /// is its error.
    #[error("{operation} failed in the AMQP client")]
    Client {
        /// What was attempted.
        operation: String,
        /// The client library's error.
        #[source]
        source: SourceError,
    },
}

impl Error {
    /// Whether trying again later may succeed: the broker was unreachable or the connection
    /// was lost (and did not come back in time), or a publish went unconfirmed. A refused
    /// declaration, a missing object, a denied permission or a bad argument fails the same way
    /// again, so those are not transient.
    pub fn is_transient(&self) -> bool {
        match self {
            // An alarm clears once the broker has memory or disk again.
            Error::Unavailable { .. } | Error::Unconfirmed { .. } | Error::Blocked { .. } => true,
            Error::Connect { source, .. } | Error::Client { source, .. } => {
                lapin_is_transient(source)
            }
            _ => false,
        }
    }

    /// Whether the failure is the link to the broker: it could not be reached, or the
    /// connection was lost.
    pub fn is_connection(&self) -> bool {
        match self {
            Error::Unavailable { .. } | Error::Connect { .. } => true,
            Error::Unconfirmed {
                source: Some(source),
                ..
            }
            | Error::Client { source, .. } => lapin_is_connection(source),
            _ => false,
        }
    }

    /// Whether the argument itself cannot be sent (a short string over 255 bytes, an
    /// `expiration` that is not a TTL): the same message fails the same way every time, so no
    /// retry can cure it.
    ///
    /// ```
    /// let error = polyq_amqp::Error::Invalid {
    ///     operation: "publish".into(),
    ///     reason: "property `message_id` is 300 bytes long".into(),
    /// };
    /// assert!(error.is_invalid() && !error.is_transient());
    /// ```
    pub fn is_invalid(&self) -> bool {
        matches!(self, Error::Invalid { .. })
    }

    /// Whether the broker might have enqueued the message although the publish failed (its
    /// confirm was lost with the channel or connection): publishing it again may duplicate it.
    pub fn may_have_been_published(&self) -> bool {
        matches!(self, Error::Unconfirmed { .. })
    }
}

/// The connection broke under the operation: an I/O error, a missed heartbeat, a connection
/// found closed, or the broker or an operator closing it (320 CONNECTION_FORCED).
#[cfg(feature = "amqp")]
fn lapin_is_connection(error: &SourceError) -> bool {
    use lapin::ErrorKind;
    let Some(error) = error.downcast_ref::<lapin::Error>() else {
        return false;
    };
    match error.kind() {
        // TLS failures (a certificate refused) surface as invalid data: they repeat.
        ErrorKind::IOError(io) => io.kind() != std::io::ErrorKind::InvalidData,
        ErrorKind::MissingHeartbeatError | ErrorKind::InvalidConnectionState(_) => true,
        ErrorKind::ProtocolError(amqp) => amqp.get_id() == 320,
        _ => false,
    }
}

/// The connection or channel broke under the operation; one opened again can carry it. A
/// refusal by the broker, a protocol or TLS mismatch, or a library fault is not transient.
#[cfg(feature = "amqp")]
fn lapin_is_transient(error: &SourceError) -> bool {
    lapin_is_connection(error)
        || error.downcast_ref::<lapin::Error>().is_some_and(|error| {
            matches!(
                error.kind(),
                lapin::ErrorKind::InvalidChannel(_) | lapin::ErrorKind::InvalidChannelState(..)
            )
        })
}

// Without the client library no error has its source.
#[cfg(not(feature = "amqp"))]
fn lapin_is_connection(_: &SourceError) -> bool {
    false
}

#[cfg(not(feature = "amqp"))]
fn lapin_is_transient(_: &SourceError) -> bool {
    false
}

/// `error` and its sources in one line, outermost first, each cause once: `a: b: c`.
///
/// The errors of polyq never repeat their source's text, but some libraries underneath do
/// (lapin's `IO error: reset` has the I/O error `reset` as its source); a source whose text
/// ends the text before it is therefore left out. Use it where an error becomes text (a log
/// field, a header, a record); the CLI prints its errors this way.
///
/// ```
/// let error = polyq_amqp::Error::Unconfirmed {
///     exchange: "orders".into(),
///     reason: "the channel or connection was lost".into(),
///     source: Some(Box::new(std::io::Error::other("connection reset by peer"))),
/// };
/// assert_eq!(
///     polyq_amqp::error_chain(&error),
///     "publish to exchange `orders` unconfirmed: the channel or connection was lost; \
///      publish it again: connection reset by peer"
/// );
/// ```
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut last = line.clone();
    let mut next = error.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !last.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        last = text;
        next = cause.source();
    }
    line
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
