//! AMQP basic properties, independent of any client crate.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::value::FieldTable;

/// The longest per-message TTL RabbitMQ accepts, ten years in milliseconds; a longer one closes
/// the publishing channel.
const MAX_EXPIRATION_MS: u64 = 315_360_000_000;

/// The most bytes an AMQP short string holds: every text property, header name, exchange and
/// queue name. A publish with a longer one fails with [`Error::Invalid`].
pub const SHORT_STRING_MAX: usize = 255;

/// `value` when it fits a short-string property, else `None`: for a projection that must leave
/// out a value the property cannot hold rather than fail the publish.
///
/// ```
/// assert_eq!(polyq_amqp::short_string_or_none("m-1"), Some("m-1".to_owned()));
/// assert_eq!(polyq_amqp::short_string_or_none(&"x".repeat(256)), None);
/// ```
pub fn short_string_or_none(value: &str) -> Option<String> {
    (value.len() <= SHORT_STRING_MAX).then(|| value.to_owned())
}

/// The AMQP 0-9-1 `basic` content properties of a message.
///
/// An empty `headers` table is written as no headers at all.
///
/// ```
/// use polyq_amqp::{FieldValue, Properties};
///
/// let mut props = Properties::default()
///     .with_content_type("application/json")
///     .persistent();
/// props.headers.insert("x-tenant".into(), FieldValue::from("acme"));
/// assert_eq!(props.delivery_mode, Some(2));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Properties {
    /// MIME content type of the body.
    pub content_type: Option<String>,
    /// MIME content encoding of the body.
    pub content_encoding: Option<String>,
    /// Application headers.
    pub headers: FieldTable,
    /// 1 = transient, 2 = persistent.
    pub delivery_mode: Option<u8>,
    /// Message priority, 0 to 9.
    pub priority: Option<u8>,
    /// Correlation identifier.
    pub correlation_id: Option<String>,
    /// Address to reply to.
    pub reply_to: Option<String>,
    /// Per-message TTL in milliseconds, as a decimal string from `0` to `315360000000` (ten
    /// years, RabbitMQ's limit). A publish with any other value fails with
    /// [`Error::Invalid`] before it is sent, where RabbitMQ would close the channel.
    pub expiration: Option<String>,
    /// Application message identifier.
    pub message_id: Option<String>,
    /// Message timestamp, seconds since the Unix epoch.
    pub timestamp: Option<u64>,
    /// The AMQP `type` property.
    pub kind: Option<String>,
    /// Creating user id (checked by RabbitMQ against the connection's user).
    pub user_id: Option<String>,
    /// Creating application id.
    pub app_id: Option<String>,
}

impl Properties {
    /// Sets the content type.
    pub fn with_content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }

    /// Marks the message persistent (delivery mode 2).
    pub fn persistent(mut self) -> Self {
        self.delivery_mode = Some(2);
        self
    }

    /// The `expiration` as a TTL, or [`Error::Invalid`] naming the property and its value when
    /// a broker would refuse it. Signs are refused although RabbitMQ takes `+1` and `-0`: the
    /// property is documented as digits only, which every broker reads alike. `operation` is
    /// only written out on that error: every publish asks, and few carry an expiration.
    pub(crate) fn expiration_ttl(
        &self,
        operation: impl std::fmt::Display,
    ) -> Result<Option<Duration>> {
        let Some(text) = self.expiration.as_deref() else {
            return Ok(None);
        };
        let millis = (!text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()))
            .then(|| text.parse::<u64>().ok())
            .flatten()
            .filter(|millis| *millis <= MAX_EXPIRATION_MS);
        match millis {
            Some(millis) => Ok(Some(Duration::from_millis(millis))),
            None => Err(Error::Invalid {
                operation: operation.to_string(),
                reason: format!(
                    "property `expiration` is `{text}`; expected a whole number of \
                     milliseconds from 0 to {MAX_EXPIRATION_MS}"
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ttl(expiration: &str) -> Result<Option<Duration>> {
        Properties {
            expiration: Some(expiration.to_owned()),
            ..Properties::default()
        }
        .expiration_ttl("publish")
    }

    #[test]
    fn expiration_is_decimal_milliseconds_up_to_ten_years() {
        assert_eq!(
            Properties::default().expiration_ttl("publish").unwrap(),
            None
        );
        assert_eq!(ttl("0").unwrap(), Some(Duration::ZERO));
        assert_eq!(ttl("1500").unwrap(), Some(Duration::from_millis(1500)));
        assert_eq!(
            ttl("315360000000").unwrap(),
            Some(Duration::from_millis(MAX_EXPIRATION_MS))
        );
        for bad in [
            "",
            "soon",
            "-1",
            "+1",
            " 1",
            "1.5",
            "315360000001",
            "99999999999999999999999",
        ] {
            match ttl(bad) {
                Err(Error::Invalid { operation, reason }) => {
                    assert_eq!(operation, "publish");
                    assert!(
                        reason.starts_with(&format!("property `expiration` is `{bad}`")),
                        "{reason}"
                    );
                }
                other => panic!("{bad:?}: expected Invalid, got {other:?}"),
            }
        }
    }
}
