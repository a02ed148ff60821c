//! Declaration arguments: the ones the embedded broker honours, and RabbitMQ's equivalence rules
//! for redeclaring an existing exchange or queue.

use std::time::Duration;

use crate::topology::{ExchangeSpec, QueueSpec};
use crate::value::{FieldTable, FieldValue};

/// The queue arguments that change the embedded broker's behaviour.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct QueueArgs {
    /// `x-message-ttl`: how long a message may stay in the queue.
    pub(super) message_ttl: Option<Duration>,
    /// `x-dead-letter-exchange`: where expired, rejected and overflowing messages go.
    pub(super) dead_letter_exchange: Option<String>,
    /// `x-dead-letter-routing-key`: replaces the message's routing key when dead-lettering.
    pub(super) dead_letter_routing_key: Option<String>,
    /// `x-max-length`: most ready messages.
    pub(super) max_length: Option<usize>,
    /// `x-overflow`: what happens to a message beyond `x-max-length`.
    pub(super) overflow: Overflow,
}

/// The `x-overflow` behaviours of a queue at its length limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Overflow {
    /// `drop-head`: the oldest message is dropped or dead-lettered to make room.
    #[default]
    DropHead,
    /// `reject-publish`: the new message is refused and its publisher confirm is a nack.
    RejectPublish,
    /// `reject-publish-dlx`: as `reject-publish`, and the refused message is dead-lettered.
    RejectPublishDlx,
}

impl QueueArgs {
    /// Reads the honoured arguments, refusing values RabbitMQ refuses (with its wording).
    pub(super) fn parse(arguments: &FieldTable) -> Result<Self, String> {
        Ok(Self {
            message_ttl: non_negative(arguments, "x-message-ttl")?.map(Duration::from_millis),
            dead_letter_exchange: text(arguments, "x-dead-letter-exchange")?,
            dead_letter_routing_key: text(arguments, "x-dead-letter-routing-key")?,
            max_length: non_negative(arguments, "x-max-length")?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            overflow: match text(arguments, "x-overflow")?.as_deref() {
                None | Some("drop-head") => Overflow::DropHead,
                Some("reject-publish") => Overflow::RejectPublish,
                Some("reject-publish-dlx") => Overflow::RejectPublishDlx,
                Some(other) => {
                    return Err(format!(
                        "invalid arg 'x-overflow': '{other}' is not drop-head, reject-publish \
                         or reject-publish-dlx"
                    ));
                }
            },
        })
    }
}

fn non_negative(arguments: &FieldTable, name: &str) -> Result<Option<u64>, String> {
    let Some(value) = arguments.get(name) else {
        return Ok(None);
    };
    let Some(number) = integer(value) else {
        return Err(format!(
            "invalid arg '{name}': expected integer, got {}",
            type_name(value)
        ));
    };
    u64::try_from(number)
        .map(Some)
        .map_err(|_| format!("invalid arg '{name}': value {number} is negative"))
}

fn text(arguments: &FieldTable, name: &str) -> Result<Option<String>, String> {
    match arguments.get(name) {
        None => Ok(None),
        Some(FieldValue::LongString(bytes)) => {
            Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
        }
        Some(other) => Err(format!(
            "invalid arg '{name}': expected longstr, got {}",
            type_name(other)
        )),
    }
}

/// Integer value of the integer types; RabbitMQ treats them as one class when comparing, and a
/// timestamp is not among them.
fn integer(value: &FieldValue) -> Option<i64> {
    match value {
        FieldValue::Timestamp(_) => None,
        other => other.as_i64(),
    }
}

/// Whether two values are the same for declaration equivalence and header matching: integers
/// compare by value whatever their width, everything else by type and value.
pub(super) fn same_value(a: &FieldValue, b: &FieldValue) -> bool {
    match (integer(a), integer(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// RabbitMQ's name for a field type, used in error messages.
fn type_name(value: &FieldValue) -> &'static str {
    match value {
        FieldValue::Bool(_) => "bool",
        FieldValue::I8(_) => "byte",
        FieldValue::U8(_) => "unsignedbyte",
        FieldValue::I16(_) => "short",
        FieldValue::U16(_) => "unsignedshort",
        FieldValue::I32(_) => "signedint",
        FieldValue::U32(_) => "unsignedint",
        FieldValue::I64(_) => "long",
        FieldValue::F32(_) => "float",
        FieldValue::F64(_) => "double",
        FieldValue::Decimal { .. } => "decimal",
        FieldValue::LongString(_) => "longstr",
        FieldValue::Array(_) => "array",
        FieldValue::Timestamp(_) => "timestamp",
        FieldValue::Table(_) => "table",
        FieldValue::ByteArray(_) => "binary",
        FieldValue::Void => "void",
    }
}

fn describe(value: Option<&FieldValue>) -> String {
    match value {
        None => "none".to_owned(),
        Some(FieldValue::LongString(bytes)) => {
            format!(
                "the value '{}' of type 'longstr'",
                String::from_utf8_lossy(bytes)
            )
        }
        Some(value) => match integer(value) {
            Some(number) => format!("the value '{number}' of type '{}'", type_name(value)),
            None => format!("a value of type '{}'", type_name(value)),
        },
    }
}

/// Queue arguments RabbitMQ compares on redeclaration; others are accepted whatever they are.
const CHECKED_QUEUE_ARGUMENTS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-type",
    "x-single-active-consumer",
    "x-delivery-limit",
];

/// Exchange arguments RabbitMQ compares on redeclaration.
const CHECKED_EXCHANGE_ARGUMENTS: &[&str] = &["alternate-exchange"];

/// Why redeclaring `existing` as `wanted` fails, as RabbitMQ's PRECONDITION_FAILED words it.
pub(super) fn queue_mismatch(existing: &QueueSpec, wanted: &QueueSpec) -> Option<String> {
    let name = &existing.name;
    flag_mismatch("durable", "queue", name, existing.durable, wanted.durable)
        .or_else(|| {
            flag_mismatch(
                "auto_delete",
                "queue",
                name,
                existing.auto_delete,
                wanted.auto_delete,
            )
        })
        .or_else(|| {
            arguments_mismatch(
                "queue",
                name,
                CHECKED_QUEUE_ARGUMENTS,
                &existing.arguments,
                &wanted.arguments,
            )
        })
}

/// Why redeclaring the exchange `existing` as `wanted` fails.
pub(super) fn exchange_mismatch(existing: &ExchangeSpec, wanted: &ExchangeSpec) -> Option<String> {
    let name = &existing.name;
    if existing.kind != wanted.kind {
        return Some(format!(
            "inequivalent arg 'type' for exchange '{name}': received '{}' but current is '{}'",
            wanted.kind.as_str(),
            existing.kind.as_str()
        ));
    }
    flag_mismatch(
        "durable",
        "exchange",
        name,
        existing.durable,
        wanted.durable,
    )
    .or_else(|| {
        flag_mismatch(
            "auto_delete",
            "exchange",
            name,
            existing.auto_delete,
            wanted.auto_delete,
        )
    })
    .or_else(|| {
        arguments_mismatch(
            "exchange",
            name,
            CHECKED_EXCHANGE_ARGUMENTS,
            &existing.arguments,
            &wanted.arguments,
        )
    })
}

fn flag_mismatch(
    flag: &str,
    kind: &str,
    name: &str,
    existing: bool,
    wanted: bool,
) -> Option<String> {
    (existing != wanted).then(|| {
        format!(
            "inequivalent arg '{flag}' for {kind} '{name}': received '{wanted}' but current is '{existing}'"
        )
    })
}

fn arguments_mismatch(
    kind: &str,
    name: &str,
    checked: &[&str],
    existing: &FieldTable,
    wanted: &FieldTable,
) -> Option<String> {
    checked.iter().find_map(|argument| {
        let current = effective(existing, argument);
        let received = effective(wanted, argument);
        let same = match (&current, &received) {
            (None, None) => true,
            (Some(a), Some(b)) => same_value(a, b),
            _ => false,
        };
        (!same).then(|| {
            format!(
                "inequivalent arg '{argument}' for {kind} '{name}': received {} but current is {}",
                describe(received.as_ref()),
                describe(current.as_ref())
            )
        })
    })
}

/// An argument's value with RabbitMQ's default filled in where it has one: a queue declared
/// without `x-queue-type` is a classic queue.
fn effective(arguments: &FieldTable, name: &str) -> Option<FieldValue> {
    match (arguments.get(name), name) {
        (None, "x-queue-type") => Some(FieldValue::from("classic")),
        (value, _) => value.cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::ExchangeKind;

    #[test]
    fn honoured_arguments_are_read() {
        let spec = QueueSpec::new("q")
            .argument("x-message-ttl", FieldValue::I64(1500))
            .argument("x-dead-letter-exchange", "dlx".into())
            .argument("x-dead-letter-routing-key", "dead".into())
            .argument("x-max-length", FieldValue::U8(3));
        let args = QueueArgs::parse(&spec.arguments).unwrap();
        assert_eq!(args.message_ttl, Some(Duration::from_millis(1500)));
        assert_eq!(args.dead_letter_exchange.as_deref(), Some("dlx"));
        assert_eq!(args.dead_letter_routing_key.as_deref(), Some("dead"));
        assert_eq!(args.max_length, Some(3));
        assert_eq!(args.overflow, Overflow::DropHead);
        for (value, overflow) in [
            ("drop-head", Overflow::DropHead),
            ("reject-publish", Overflow::RejectPublish),
            ("reject-publish-dlx", Overflow::RejectPublishDlx),
        ] {
            let spec = QueueSpec::new("q").argument("x-overflow", value.into());
            assert_eq!(
                QueueArgs::parse(&spec.arguments).unwrap().overflow,
                overflow
            );
        }
        let unknown = QueueSpec::new("q").argument("x-overflow", "drop-tail".into());
        assert!(
            QueueArgs::parse(&unknown.arguments)
                .unwrap_err()
                .contains("'drop-tail'")
        );
        assert_eq!(
            QueueArgs::parse(&FieldTable::new()).unwrap(),
            QueueArgs::default()
        );
    }

    #[test]
    fn invalid_arguments_are_refused_with_their_name() {
        let text_ttl = QueueSpec::new("q").argument("x-message-ttl", "abc".into());
        let error = QueueArgs::parse(&text_ttl.arguments).unwrap_err();
        assert!(
            error.contains("'x-message-ttl'") && error.contains("longstr"),
            "{error}"
        );
        let negative = QueueSpec::new("q").argument("x-message-ttl", FieldValue::I32(-1));
        let error = QueueArgs::parse(&negative.arguments).unwrap_err();
        assert!(error.contains("negative"), "{error}");
        let number_dlx = QueueSpec::new("q").argument("x-dead-letter-exchange", 1.into());
        assert!(QueueArgs::parse(&number_dlx.arguments).is_err());
    }

    #[test]
    fn queue_redeclaration_compares_flags_and_checked_arguments() {
        let base = QueueSpec::new("q").argument("x-message-ttl", FieldValue::I32(1000));
        assert_eq!(queue_mismatch(&base, &base.clone()), None);
        let wider = QueueSpec::new("q").argument("x-message-ttl", FieldValue::I64(1000));
        assert_eq!(
            queue_mismatch(&base, &wider),
            None,
            "integer widths are one class"
        );
        let unknown = base.clone().argument("x-custom", 1.into());
        assert_eq!(
            queue_mismatch(&base, &unknown),
            None,
            "unchecked arguments are ignored"
        );

        let other_ttl = QueueSpec::new("q").argument("x-message-ttl", FieldValue::I32(5));
        let reason = queue_mismatch(&base, &other_ttl).unwrap();
        assert!(reason.contains("'x-message-ttl'"), "{reason}");
        let reason = queue_mismatch(&base, &QueueSpec::new("q")).unwrap();
        assert!(reason.contains("received none"), "{reason}");
        let transient = QueueSpec {
            durable: false,
            ..base.clone()
        };
        let reason = queue_mismatch(&base, &transient).unwrap();
        assert!(reason.contains("'durable'"), "{reason}");
    }

    #[test]
    fn queue_type_defaults_to_classic() {
        let plain = QueueSpec::new("q");
        let classic = QueueSpec::new("q").argument("x-queue-type", "classic".into());
        let quorum = QueueSpec::new("q").argument("x-queue-type", "quorum".into());
        assert_eq!(queue_mismatch(&plain, &classic), None);
        assert!(queue_mismatch(&quorum, &plain).is_some());
        assert_eq!(queue_mismatch(&quorum, &quorum.clone()), None);
    }

    #[test]
    fn exchange_redeclaration_compares_kind_and_flags() {
        let direct = ExchangeSpec::new("x", ExchangeKind::Direct);
        assert_eq!(exchange_mismatch(&direct, &direct.clone()), None);
        let topic = ExchangeSpec::new("x", ExchangeKind::Topic);
        let reason = exchange_mismatch(&direct, &topic).unwrap();
        assert!(
            reason.contains("received 'topic' but current is 'direct'"),
            "{reason}"
        );
        let transient = ExchangeSpec {
            durable: false,
            ..direct.clone()
        };
        assert!(
            exchange_mismatch(&direct, &transient)
                .unwrap()
                .contains("'durable'")
        );
        let mut alternate = direct.clone();
        alternate
            .arguments
            .insert("alternate-exchange".into(), "ae".into());
        assert!(exchange_mismatch(&direct, &alternate).is_some());
    }
}
