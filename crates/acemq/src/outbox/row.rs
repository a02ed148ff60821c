//! A message as the outbox table holds it, and back: pure conversions, no I/O.
//!
//! `headers` is the JSON map of the AMQP headers (the Go port writes the same column), and
//! `properties` the other properties in the `polyq` message JSON shape, so every value keeps
//! its AMQP type through the database and the relay sends what the publisher would have.

use bytes::Bytes;
use polyq_amqp::message_json::{
    MessageJson, headers_from_json, headers_to_json, properties_from_json,
};
use polyq_amqp::{OutgoingMessage, Properties};
use serde_json::Value;

/// The columns a message is written to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredMessage {
    pub id: String,
    pub exchange: String,
    pub routing_key: String,
    pub body: Vec<u8>,
    pub content_type: String,
    pub headers: String,
    pub properties: Option<String>,
    pub mandatory: bool,
}

impl StoredMessage {
    /// A row a lease read back, with its failed attempts so far; the same columns in every
    /// SQL dialect.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub fn read<'r, R: sqlx::Row>(row: &'r R) -> Result<(Self, i32), sqlx::Error>
    where
        &'static str: sqlx::ColumnIndex<R>,
        String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        Vec<u8>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        bool: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        i32: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    {
        let stored = Self {
            id: row.try_get("id")?,
            exchange: row.try_get("exchange")?,
            routing_key: row.try_get("routing_key")?,
            body: row.try_get("body")?,
            content_type: row.try_get("content_type")?,
            headers: row.try_get("headers")?,
            properties: row.try_get("properties")?,
            mandatory: row.try_get("mandatory")?,
        };
        Ok((stored, row.try_get("attempts")?))
    }

    /// `insert` with the columns bound in the order every dialect's insert names them: `id`,
    /// `exchange`, `routing_key`, `body`, `content_type`, `headers`, `properties`, `mandatory`.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub fn bind<'q, D: sqlx::Database>(
        &'q self,
        insert: sqlx::query::Query<'q, D, D::Arguments<'q>>,
    ) -> sqlx::query::Query<'q, D, D::Arguments<'q>>
    where
        String: sqlx::Encode<'q, D> + sqlx::Type<D>,
        Option<String>: sqlx::Encode<'q, D>,
        Vec<u8>: sqlx::Encode<'q, D> + sqlx::Type<D>,
        bool: sqlx::Encode<'q, D> + sqlx::Type<D>,
    {
        insert
            .bind(&self.id)
            .bind(&self.exchange)
            .bind(&self.routing_key)
            .bind(&self.body)
            .bind(&self.content_type)
            .bind(&self.headers)
            .bind(&self.properties)
            .bind(self.mandatory)
    }

    /// The columns for `message`, keyed by the envelope's message id.
    pub fn of(id: String, message: &OutgoingMessage) -> Self {
        let mut rest = message.properties.clone();
        let headers = std::mem::take(&mut rest.headers);
        let content_type = rest.content_type.take().unwrap_or_default();
        let properties = (rest != Properties::default()).then(|| {
            let json = MessageJson::new("", "", rest, Bytes::new());
            // Strings, numbers and maps only: neither serialising nor the lookup can fail.
            serde_json::to_value(&json)
                .ok()
                .and_then(|mut value| value.get_mut("properties").map(Value::take))
                .unwrap_or(Value::Null)
                .to_string()
        });
        Self {
            id,
            exchange: message.exchange.clone(),
            routing_key: message.routing_key.clone(),
            body: message.body.to_vec(),
            content_type,
            headers: headers_to_json(&headers).to_string(),
            properties,
            mandatory: message.mandatory,
        }
    }

    /// The message to publish, or why the row cannot be one (a column another writer filled
    /// with something that is not the JSON this layout defines).
    pub fn into_message(self) -> Result<OutgoingMessage, String> {
        let headers: Value = serde_json::from_str(&self.headers)
            .map_err(|e| format!("the headers column is not JSON: {e}"))?;
        let headers = headers_from_json(&headers)
            .map_err(|e| format!("the headers column is not a header table: {e}"))?;
        let mut properties = match &self.properties {
            None => Properties::default(),
            Some(text) => {
                let value: Value = serde_json::from_str(text)
                    .map_err(|e| format!("the properties column is not JSON: {e}"))?;
                properties_from_json(&value)
                    .map_err(|e| format!("the properties column is not AMQP properties: {e}"))?
            }
        };
        properties.headers = headers;
        if !self.content_type.is_empty() {
            properties.content_type = Some(self.content_type);
        }
        let mut message =
            OutgoingMessage::new(self.exchange, self.routing_key, properties, self.body);
        message.mandatory = self.mandatory;
        Ok(message)
    }
}

#[cfg(test)]
mod tests {
    use polyq_amqp::FieldValue;

    use super::*;

    fn sample() -> OutgoingMessage {
        let mut properties = Properties {
            content_type: Some("application/json".into()),
            delivery_mode: Some(2),
            message_id: Some("m-1".into()),
            correlation_id: Some("c-1".into()),
            ..Properties::default()
        };
        properties
            .headers
            .insert("x-acemq-attempt".into(), FieldValue::I32(1));
        properties
            .headers
            .insert("x-small".into(), FieldValue::I8(3));
        properties.headers.insert(
            "x-acemq-type".into(),
            FieldValue::LongString("order.placed".into()),
        );
        let mut message =
            OutgoingMessage::new("orders", "order.placed", properties, &b"{\"id\":7}"[..]);
        message.mandatory = false;
        message
    }

    #[test]
    fn a_message_comes_back_as_it_went_in_with_every_header_width() {
        let message = sample();
        let stored = StoredMessage::of("m-1".into(), &message);
        assert_eq!(stored.content_type, "application/json");
        let back = stored.into_message().unwrap();
        assert_eq!(back.exchange, message.exchange);
        assert_eq!(back.routing_key, message.routing_key);
        assert_eq!(back.properties, message.properties);
        assert_eq!(back.body, message.body);
        assert!(!back.mandatory);
    }

    #[test]
    fn a_row_written_without_properties_publishes_with_its_content_type_and_headers() {
        let stored = StoredMessage {
            id: "go-1".into(),
            exchange: "".into(),
            routing_key: "orders".into(),
            body: b"{}".to_vec(),
            content_type: "application/json".into(),
            headers: r#"{"x-acemq-type":"order.placed"}"#.into(),
            properties: None,
            mandatory: true,
        };
        let message = stored.into_message().unwrap();
        assert_eq!(
            message.properties.content_type.as_deref(),
            Some("application/json")
        );
        assert_eq!(
            message.properties.headers["x-acemq-type"],
            FieldValue::LongString("order.placed".into())
        );
    }

    #[test]
    fn a_malformed_headers_column_says_which_column_and_why() {
        let mut stored = StoredMessage::of("m-1".into(), &sample());
        stored.headers = "not json".into();
        let reason = stored.into_message().unwrap_err();
        assert!(
            reason.starts_with("the headers column is not JSON"),
            "{reason}"
        );
    }
}
