//! What can go wrong writing to, or relaying from, the outbox.

use crate::error::RuntimeError;

/// An outbox failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The table name is not a plain SQL identifier; it reaches SQL by interpolation, since no
    /// database binds identifiers as parameters.
    #[error(
        "outbox table name {0:?} is not a plain SQL identifier: use letters, digits and `_`, at most 63, not starting with a digit"
    )]
    InvalidTable(String),
    /// A relay option is out of range.
    #[error("outbox relay option `{option}` {reason}")]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// What is wrong with its value.
        reason: &'static str,
    },
    /// The message could not be built as the publisher would send it (encoding, an interceptor
    /// refused it, an invalid envelope); nothing was written.
    #[error("could not build the outbox message")]
    Message(#[source] RuntimeError),
    /// A statement against the outbox table failed.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    #[error("could not {operation} the outbox table `{table}`")]
    Database {
        /// What was being done.
        operation: &'static str,
        /// The table.
        table: String,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
}

impl OutboxError {
    /// Whether trying again later can succeed: the database was unreachable or the pool was
    /// exhausted, not a mistake in the statement or the configuration.
    pub fn is_transient(&self) -> bool {
        match self {
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Self::Database { source, .. } => polyq_runtime::outbox::sqlx_is_transient(source),
            Self::Message(error) => error.is_transient(),
            Self::InvalidTable(_) | Self::InvalidOption { .. } => false,
        }
    }

    /// Whether the database connection was lost or could not be had.
    pub fn is_connection(&self) -> bool {
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        if let Self::Database { source, .. } = self {
            return polyq_runtime::outbox::sqlx_is_connection(source);
        }
        false
    }
}
