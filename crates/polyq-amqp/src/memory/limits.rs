//! AMQP's size limits, enforced as the wire enforces them on `amqp://`: names, routing keys,
//! property values and table keys are short strings of at most 255 bytes. The embedded broker
//! refuses what RabbitMQ could not be sent, so code tested on it does not fail in production.

use crate::error::{Error, Result};
use crate::properties::{Properties, SHORT_STRING_MAX};
use crate::value::{FieldTable, FieldValue};

/// Refuses a short string over 255 bytes, naming it. `what` is only written out on that error:
/// a publish checks every property and header it carries.
pub(super) fn short(operation: &str, what: impl std::fmt::Display, value: &str) -> Result<()> {
    if value.len() <= SHORT_STRING_MAX {
        Ok(())
    } else {
        Err(Error::Invalid {
            operation: operation.to_owned(),
            reason: format!(
                "{what} is {} bytes long; AMQP short strings hold at most {SHORT_STRING_MAX}",
                value.len()
            ),
        })
    }
}

/// Checks the keys of a table and of every table nested in it.
pub(super) fn table(operation: &str, table: &FieldTable) -> Result<()> {
    for (name, value) in table {
        short(
            operation,
            format_args!("header or argument name `{name}`"),
            name,
        )?;
        nested(operation, value)?;
    }
    Ok(())
}

fn nested(operation: &str, value: &FieldValue) -> Result<()> {
    match value {
        FieldValue::Table(inner) => table(operation, inner),
        FieldValue::Array(values) => values.iter().try_for_each(|v| nested(operation, v)),
        _ => Ok(()),
    }
}

/// Checks every short-string property and the headers.
pub(super) fn properties(operation: &str, properties: &Properties) -> Result<()> {
    for (what, value) in [
        ("content_type", &properties.content_type),
        ("content_encoding", &properties.content_encoding),
        ("correlation_id", &properties.correlation_id),
        ("reply_to", &properties.reply_to),
        ("expiration", &properties.expiration),
        ("message_id", &properties.message_id),
        ("type", &properties.kind),
        ("user_id", &properties.user_id),
        ("app_id", &properties.app_id),
    ] {
        if let Some(value) = value {
            short(operation, format_args!("property `{what}`"), value)?;
        }
    }
    table(operation, &properties.headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_strings_hold_255_bytes() {
        assert!(short("op", "name", &"a".repeat(255)).is_ok());
        let error = short("op", "queue name", &"a".repeat(256)).unwrap_err();
        assert!(
            matches!(&error, Error::Invalid { reason, .. } if reason.contains("queue name is 256 bytes")),
            "{error:?}"
        );
    }

    #[test]
    fn nested_table_keys_are_checked() {
        let long = "k".repeat(256);
        let mut inner = FieldTable::new();
        inner.insert(long.clone(), FieldValue::Void);
        let mut outer = FieldTable::new();
        outer.insert(
            "array".into(),
            FieldValue::Array(vec![FieldValue::Table(inner)]),
        );
        assert!(table("op", &outer).is_err());
        let props = Properties {
            app_id: Some(long),
            ..Properties::default()
        };
        assert!(properties("op", &props).is_err());
        assert!(properties("op", &Properties::default()).is_ok());
    }
}
