//! AMQP basic properties, independent of any client crate.

use crate::value::FieldTable;

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
    /// Per-message TTL in milliseconds, as a decimal string.
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
}
