//! What can go wrong asking RabbitMQ's management API.

use crate::SourceError;

/// A failed request to RabbitMQ's management API. Every message names the API's URL without
/// credentials (the password never appears in the text, nor in a source's); a handler decides
/// with [`is_connection`](Self::is_connection), [`is_transient`](Self::is_transient) and
/// [`is_refused`](Self::is_refused).
///
/// ```
/// use polyq_amqp::management::ManagementError;
///
/// let error = ManagementError::Refused {
///     url: "http://127.0.0.1:15672/api/".into(),
///     user: "guest".into(),
///     status: 401,
/// };
/// assert!(error.is_refused() && !error.is_transient());
/// assert!(error.to_string().contains("`guest`"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagementError {
    /// The AMQP or management URL cannot name a management API.
    #[error("invalid management URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL, credentials redacted.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The TLS settings cannot be used (a certificate or key that does not parse, or settings
    /// for an `http://` URL).
    #[error("cannot use the TLS settings for the management API at {url}: {reason}")]
    Tls {
        /// The API's URL.
        url: String,
        /// What is wrong.
        reason: String,
        /// The HTTP client's error, when it reported one.
        #[source]
        source: Option<SourceError>,
    },
    /// Nothing answered, the connection broke, or the answer did not come in time.
    #[error(
        "could not reach RabbitMQ's management API at {url} (is the rabbitmq_management plugin \
         enabled? `rabbitmq-plugins enable rabbitmq_management`; or pass the management URL)"
    )]
    Unreachable {
        /// The API's URL.
        url: String,
        /// The HTTP client's error.
        #[source]
        source: SourceError,
    },
    /// The API refused the credentials (401) or the user's rights (403).
    #[error(
        "the management API at {url} refused user `{user}` ({status}): check the password, and \
         give the user the `monitoring` or `management` tag and access to the vhost"
    )]
    Refused {
        /// The API's URL.
        url: String,
        /// The user it refused.
        user: String,
        /// The HTTP status.
        status: u16,
    },
    /// The API has no such object (404), typically a vhost that does not exist.
    #[error("the management API at {url} has no {what}")]
    NotFound {
        /// The API's URL.
        url: String,
        /// What was asked for, e.g. ``vhost `/` ``.
        what: String,
    },
    /// Any other answer than success.
    #[error("the management API at {url} answered {status} to {operation}: {reason}")]
    Status {
        /// The API's URL.
        url: String,
        /// What was asked.
        operation: String,
        /// The HTTP status.
        status: u16,
        /// The API's own explanation (its `reason`), or empty.
        reason: String,
    },
    /// The answer is not the JSON this client reads.
    #[error("the management API at {url} answered {operation} with unexpected content")]
    Decode {
        /// The API's URL.
        url: String,
        /// What was asked.
        operation: String,
        /// The decoder's error.
        #[source]
        source: SourceError,
    },
}

impl ManagementError {
    /// Whether the API could not be reached or the connection to it broke.
    pub fn is_connection(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }

    /// Whether asking again later may succeed: the API was unreachable, or answered with a
    /// server error (503 while the node starts).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Status { status, .. } => *status >= 500,
            _ => false,
        }
    }

    /// Whether the API refused the credentials or the user's rights.
    pub fn is_refused(&self) -> bool {
        matches!(self, Self::Refused { .. })
    }
}
