//! lapin errors as ours, and whether an operation that failed may be retried.

use lapin::ErrorKind;
use lapin::protocol::{AMQPError, AMQPErrorKind};

use crate::error::Error;

/// The object an operation was about, named in [`Error::NotFound`] when the broker's text does
/// not say.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target<'a> {
    /// `queue` or `exchange`.
    pub(super) kind: &'static str,
    /// Its name.
    pub(super) name: &'a str,
}

impl<'a> Target<'a> {
    pub(super) fn queue(name: &'a str) -> Self {
        Self {
            kind: "queue",
            name,
        }
    }

    pub(super) fn exchange(name: &'a str) -> Self {
        Self {
            kind: "exchange",
            name,
        }
    }
}

/// What a failed operation means for the caller.
#[derive(Debug)]
pub(super) enum Failure {
    /// Report this error.
    Fatal(Error),
    /// The channel closed under the operation while the connection stayed up (for example an
    /// earlier operation's error closed it): open a new channel and try again.
    ChannelGone,
    /// The connection is gone: wait for the supervisor to restore it, then try again.
    ConnectionGone,
}

/// Sorts a lapin error. `connection_up` is the connection's state after the failure, which tells
/// a closed channel from a lost connection when lapin reports both the same way.
pub(super) fn classify(
    operation: &str,
    target: Option<Target<'_>>,
    error: &lapin::Error,
    connection_up: bool,
) -> Failure {
    match error.kind() {
        ErrorKind::ProtocolError(amqp) => match amqp.kind() {
            AMQPErrorKind::Soft(_) => Failure::Fatal(from_amqp(operation, target, amqp)),
            // 320 CONNECTION_FORCED: an operator or the broker's shutdown closed the connection;
            // nothing is wrong with the operation itself.
            AMQPErrorKind::Hard(_) if amqp.get_id() == 320 => Failure::ConnectionGone,
            AMQPErrorKind::Hard(_) => Failure::Fatal(from_amqp(operation, target, amqp)),
        },
        ErrorKind::IOError(_)
        | ErrorKind::InvalidChannel(_)
        | ErrorKind::InvalidChannelState(..)
        | ErrorKind::InvalidConnectionState(_)
        | ErrorKind::MissingHeartbeatError => {
            if connection_up {
                Failure::ChannelGone
            } else {
                Failure::ConnectionGone
            }
        }
        _ => Failure::Fatal(client(operation, error)),
    }
}

/// A lapin error as ours, without retry considerations.
pub(super) fn from_lapin(
    operation: &str,
    target: Option<Target<'_>>,
    error: &lapin::Error,
) -> Error {
    match error.kind() {
        // CONNECTION_FORCED is the connection going away, not a refusal of the operation.
        ErrorKind::ProtocolError(amqp) if amqp.get_id() != 320 => {
            from_amqp(operation, target, amqp)
        }
        _ => client(operation, error),
    }
}

/// A failure of the client library itself, kept as the source.
fn client(operation: &str, error: &lapin::Error) -> Error {
    Error::Client {
        operation: operation.to_owned(),
        source: Box::new(error.clone()),
    }
}

/// An AMQP error reply: 404 names what is missing, 403 and 405/406 keep the broker's
/// explanation.
pub(super) fn from_amqp(operation: &str, target: Option<Target<'_>>, error: &AMQPError) -> Error {
    let text = error.get_message().as_str();
    match error.get_id() {
        404 => match missing_object(text).or(target.map(|t| (t.kind, t.name))) {
            Some((kind, name)) => Error::NotFound {
                kind,
                name: name.to_owned(),
            },
            None => protocol(operation, error),
        },
        403 => Error::AccessRefused {
            operation: operation.to_owned(),
            reason: text.to_owned(),
        },
        405 | 406 => Error::Precondition {
            operation: operation.to_owned(),
            reason: text.to_owned(),
        },
        _ => protocol(operation, error),
    }
}

fn protocol(operation: &str, error: &AMQPError) -> Error {
    Error::Protocol {
        operation: operation.to_owned(),
        reason: format!("{} {}", error.get_id(), error.get_message()),
    }
}

/// The kind and name RabbitMQ's 404 text gives: `NOT_FOUND - no queue 'q' in vhost '/'`.
fn missing_object(text: &str) -> Option<(&'static str, &str)> {
    for kind in ["queue", "exchange"] {
        let marker = format!("no {kind} '");
        if let Some(start) = text.find(&marker) {
            let rest = &text[start + marker.len()..];
            let end = rest.rfind("' in vhost").or_else(|| rest.find('\''))?;
            return Some((kind, &rest[..end]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amqp_error(id: u16, text: &str) -> lapin::Error {
        let error = AMQPError::from_id(id, text.into()).expect("known reply code");
        ErrorKind::ProtocolError(error).into()
    }

    fn fatal(failure: Failure) -> Error {
        match failure {
            Failure::Fatal(error) => error,
            other => panic!("expected a fatal error, got {other:?}"),
        }
    }

    #[test]
    fn not_found_names_the_missing_object_from_the_broker_text() {
        let error = amqp_error(404, "NOT_FOUND - no exchange 'orders.x' in vhost '/'");
        let mapped = fatal(classify(
            "bind queue",
            Some(Target::queue("q")),
            &error,
            true,
        ));
        assert!(
            matches!(&mapped, Error::NotFound { kind: "exchange", name } if name == "orders.x"),
            "{mapped:?}"
        );
    }

    #[test]
    fn not_found_falls_back_to_the_target() {
        let error = amqp_error(404, "NOT_FOUND");
        let mapped = fatal(classify("purge", Some(Target::queue("jobs")), &error, true));
        assert!(
            matches!(&mapped, Error::NotFound { kind: "queue", name } if name == "jobs"),
            "{mapped:?}"
        );
    }

    #[test]
    fn precondition_keeps_the_broker_text() {
        for id in [405, 406] {
            let text = "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q'";
            let mapped = fatal(classify(
                "declare queue `q`",
                None,
                &amqp_error(id, text),
                true,
            ));
            match mapped {
                Error::Precondition { operation, reason } => {
                    assert_eq!(operation, "declare queue `q`");
                    assert_eq!(reason, text);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn access_refused_names_the_operation_and_keeps_the_broker_text() {
        let text = "ACCESS_REFUSED - queue name 'amq.x' contains reserved prefix 'amq.*'";
        let mapped = fatal(classify(
            "declare queue `amq.x`",
            Some(Target::queue("amq.x")),
            &amqp_error(403, text),
            true,
        ));
        match &mapped {
            Error::AccessRefused { operation, reason } => {
                assert_eq!(operation, "declare queue `amq.x`");
                assert_eq!(reason, text);
            }
            other => panic!("expected AccessRefused, got {other:?}"),
        }
        assert_eq!(
            mapped.to_string(),
            format!("access refused: cannot declare queue `amq.x`: {text}")
        );
    }

    #[test]
    fn other_replies_are_protocol_errors_with_the_code() {
        let mapped = fatal(classify(
            "purge queue `q`",
            None,
            &amqp_error(530, "NOT_ALLOWED - attempt to reuse consumer tag 'c'"),
            true,
        ));
        assert!(
            matches!(&mapped, Error::Protocol { reason, .. } if reason.starts_with("530 ")),
            "{mapped:?}"
        );
    }

    #[test]
    fn forced_close_and_io_errors_wait_for_recovery() {
        let forced = amqp_error(320, "CONNECTION_FORCED - closed via management plugin");
        assert!(matches!(
            classify("publish", None, &forced, false),
            Failure::ConnectionGone
        ));
        let io: lapin::Error = std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
        assert!(matches!(
            classify("publish", None, &io, false),
            Failure::ConnectionGone
        ));
        assert!(matches!(
            classify("publish", None, &io, true),
            Failure::ChannelGone
        ));
    }

    fn io_error(kind: std::io::ErrorKind) -> lapin::Error {
        std::io::Error::from(kind).into()
    }

    #[test]
    fn a_lost_connection_is_transient_and_a_connection_failure() {
        for lost in [
            io_error(std::io::ErrorKind::ConnectionReset),
            ErrorKind::MissingHeartbeatError.into(),
            amqp_error(320, "CONNECTION_FORCED - broker shutdown"),
        ] {
            let error = from_lapin("publish", None, &lost);
            assert!(error.is_transient(), "{error:?}");
            assert!(error.is_connection(), "{error:?}");
            assert!(!error.may_have_been_published(), "{error:?}");
        }
    }

    #[test]
    fn a_closed_channel_is_transient_but_not_a_connection_failure() {
        let error = from_lapin(
            "purge queue `q`",
            None,
            &ErrorKind::InvalidChannel(7).into(),
        );
        assert!(error.is_transient(), "{error:?}");
        assert!(!error.is_connection(), "{error:?}");
    }

    #[test]
    fn refusals_by_the_broker_are_neither_transient_nor_connection_failures() {
        for (id, text) in [
            (404, "NOT_FOUND - no queue 'q' in vhost '/'"),
            (
                403,
                "ACCESS_REFUSED - queue name 'amq.x' contains reserved prefix 'amq.*'",
            ),
            (
                406,
                "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q'",
            ),
            (530, "NOT_ALLOWED - attempt to reuse consumer tag 'c'"),
        ] {
            let error = from_lapin(
                "declare queue `q`",
                Some(Target::queue("q")),
                &amqp_error(id, text),
            );
            assert!(!error.is_transient(), "{error:?}");
            assert!(!error.is_connection(), "{error:?}");
        }
        let faulty = from_lapin("publish", None, &ErrorKind::ChannelsLimitReached.into());
        assert!(!faulty.is_transient(), "{faulty:?}");
    }

    #[test]
    fn a_client_failure_keeps_the_lapin_error_as_its_source_and_does_not_repeat_it() {
        let error = from_lapin(
            "get from queue `q`",
            None,
            &io_error(std::io::ErrorKind::BrokenPipe),
        );
        let source = std::error::Error::source(&error).expect("the lapin error is the source");
        let lapin = source
            .downcast_ref::<lapin::Error>()
            .expect("the source is a lapin::Error");
        assert!(lapin.is_io_error(), "{lapin:?}");
        assert!(!error.to_string().contains(&lapin.to_string()), "{error}");
    }

    #[test]
    fn an_unconfirmed_publish_is_transient_and_may_have_been_published() {
        let error = Error::Unconfirmed {
            exchange: "orders".to_owned(),
            reason: "the channel or connection was lost".to_owned(),
            source: Some(Box::new(io_error(std::io::ErrorKind::ConnectionAborted))),
        };
        assert!(error.is_transient() && error.is_connection() && error.may_have_been_published());
        let unattributed = Error::Unconfirmed {
            exchange: "orders".to_owned(),
            reason: "the broker's answer could not be attributed".to_owned(),
            source: None,
        };
        assert!(unattributed.is_transient() && !unattributed.is_connection());
    }

    #[test]
    fn a_tls_failure_to_connect_is_a_connection_failure_that_repeats() {
        let refused =
            std::io::Error::new(std::io::ErrorKind::InvalidData, "invalid peer certificate");
        let error = Error::Connect {
            url: "amqps://broker".to_owned(),
            source: Box::new(lapin::Error::from(refused)),
        };
        assert!(error.is_connection() && !error.is_transient(), "{error:?}");
        let unreachable = Error::Connect {
            url: "amqp://broker".to_owned(),
            source: Box::new(io_error(std::io::ErrorKind::ConnectionRefused)),
        };
        assert!(unreachable.is_connection() && unreachable.is_transient());
    }

    #[test]
    fn errors_of_the_application_are_not_transient() {
        for error in [
            Error::Closed,
            Error::AlreadySettled,
            Error::StaleDelivery,
            Error::QueueLost {
                name: "amq.gen-1".to_owned(),
            },
            Error::Invalid {
                operation: "publish".to_owned(),
                reason: "too long".to_owned(),
            },
        ] {
            assert!(!error.is_transient() && !error.is_connection(), "{error:?}");
        }
        let unavailable = Error::Unavailable {
            url: "amqp://broker".to_owned(),
            operation: "publish".to_owned(),
            waited_ms: 30_000,
        };
        assert!(unavailable.is_transient() && unavailable.is_connection());
    }
}
