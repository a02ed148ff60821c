//! A queue as the management API describes it.

use serde::Deserialize;
use serde_json::{Map, Value};

/// One queue of a vhost, as `GET /api/queues/{vhost}` describes it.
///
/// The counts are the broker's statistics, which it emits every few seconds
/// (`collect_statistics_interval`, 5 s by default): they lag the queue by up to that much, and
/// are `None` for a queue declared moments ago that has none yet. Rates are `None` until the
/// queue has seen the traffic they measure.
///
/// ```
/// use polyq_amqp::management::QueueStats;
///
/// let queue: QueueStats = serde_json::from_str(
///     r#"{"name": "orders", "vhost": "/", "type": "quorum", "durable": true,
///         "messages_ready": 3, "messages_unacknowledged": 1, "consumers": 2,
///         "arguments": {"x-queue-type": "quorum", "x-dead-letter-exchange": "acemq.dlx",
///                       "x-dead-letter-routing-key": "orders.dlq"},
///         "message_stats": {"publish_details": {"rate": 1.5}}}"#,
/// )?;
/// assert_eq!(queue.queue_type(), "quorum");
/// assert_eq!(queue.dead_letter_exchange(), Some("acemq.dlx"));
/// assert_eq!(queue.dead_letter_routing_key(), Some("orders.dlq"));
/// assert_eq!(queue.messages_ready, Some(3));
/// assert_eq!(queue.rates.publish, Some(1.5));
/// assert_eq!(queue.rates.ack, None);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "Described")]
#[non_exhaustive]
pub struct QueueStats {
    /// The queue's name.
    pub name: String,
    /// Its vhost.
    pub vhost: String,
    /// `classic`, `quorum` or `stream`, as the broker reports it (`None` from brokers too old
    /// to say; [`queue_type`](Self::queue_type) falls back to the arguments).
    pub kind: Option<String>,
    /// Survives a broker restart.
    pub durable: bool,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// Belongs to one connection.
    pub exclusive: bool,
    /// Messages ready for delivery.
    pub messages_ready: Option<u64>,
    /// Messages delivered and not yet acknowledged.
    pub messages_unacknowledged: Option<u64>,
    /// Consumers subscribed.
    pub consumers: Option<u64>,
    /// Messages per second, as the broker last measured them.
    pub rates: Rates,
    /// The declaration arguments (`x-queue-type`, `x-dead-letter-exchange`, ...).
    pub arguments: Map<String, Value>,
}

/// Message rates of a queue, per second; each `None` until the queue has seen such traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct Rates {
    /// Published into the queue.
    pub publish: Option<f64>,
    /// Delivered to consumers or fetched with `basic.get`.
    pub deliver_get: Option<f64>,
    /// Acknowledged.
    pub ack: Option<f64>,
    /// Delivered again after a requeue.
    pub redeliver: Option<f64>,
}

impl QueueStats {
    /// The queue type: what the broker reports, else `x-queue-type`, else `classic` (the type
    /// a declaration without it gets).
    pub fn queue_type(&self) -> &str {
        self.kind
            .as_deref()
            .or_else(|| self.text_argument("x-queue-type"))
            .unwrap_or("classic")
    }

    /// `x-dead-letter-exchange`, where rejected and expired messages go.
    pub fn dead_letter_exchange(&self) -> Option<&str> {
        self.text_argument("x-dead-letter-exchange")
    }

    /// `x-dead-letter-routing-key`, the key they go with (their own when absent).
    pub fn dead_letter_routing_key(&self) -> Option<&str> {
        self.text_argument("x-dead-letter-routing-key")
    }

    /// The argument `name` when it is text.
    pub fn text_argument(&self, name: &str) -> Option<&str> {
        self.arguments.get(name).and_then(Value::as_str)
    }
}

/// The wire shape; every member optional, so a broker that leaves one out (or a newer one that
/// changes it) still reads.
#[derive(Deserialize)]
struct Described {
    name: String,
    #[serde(default)]
    vhost: String,
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    durable: bool,
    #[serde(default)]
    auto_delete: bool,
    #[serde(default)]
    exclusive: bool,
    #[serde(default, deserialize_with = "lenient_count")]
    messages_ready: Option<u64>,
    #[serde(default, deserialize_with = "lenient_count")]
    messages_unacknowledged: Option<u64>,
    #[serde(default, deserialize_with = "lenient_count")]
    consumers: Option<u64>,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(default)]
    message_stats: Option<Map<String, Value>>,
}

/// A count, or `None` for anything that is not a non-negative integer.
fn lenient_count<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    Ok(Option::<Value>::deserialize(deserializer)?.and_then(|value| value.as_u64()))
}

impl From<Described> for QueueStats {
    fn from(described: Described) -> Self {
        let stats = described.message_stats.unwrap_or_default();
        let rate = |name: &str| {
            stats
                .get(&format!("{name}_details"))
                .and_then(|details| details.get("rate"))
                .and_then(Value::as_f64)
        };
        Self {
            rates: Rates {
                publish: rate("publish"),
                deliver_get: rate("deliver_get"),
                ack: rate("ack"),
                redeliver: rate("redeliver"),
            },
            name: described.name,
            vhost: described.vhost,
            kind: described.kind,
            durable: described.durable,
            auto_delete: described.auto_delete,
            exclusive: described.exclusive,
            messages_ready: described.messages_ready,
            messages_unacknowledged: described.messages_unacknowledged,
            consumers: described.consumers,
            arguments: described.arguments.unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_without_statistics_yet_reads_with_none() {
        let queue: QueueStats =
            serde_json::from_str(r#"{"name": "fresh", "arguments": {}}"#).expect("reads");
        assert_eq!(queue.messages_ready, None);
        assert_eq!(queue.consumers, None);
        assert_eq!(queue.rates, Rates::default());
        assert_eq!(queue.queue_type(), "classic");
        assert_eq!(queue.dead_letter_exchange(), None);
    }

    #[test]
    fn odd_values_do_not_fail_the_read() {
        let queue: QueueStats = serde_json::from_str(
            r#"{"name": "q", "messages_ready": -1, "consumers": "x", "arguments": null,
                "message_stats": {"ack_details": {"rate": "fast"}, "publish_details": 3}}"#,
        )
        .expect("reads");
        assert_eq!(queue.messages_ready, None);
        assert_eq!(queue.consumers, None);
        assert_eq!(queue.rates.ack, None);
        assert_eq!(queue.rates.publish, None);
        assert!(queue.arguments.is_empty());
    }

    #[test]
    fn the_type_falls_back_to_the_argument() {
        let queue: QueueStats =
            serde_json::from_str(r#"{"name": "q", "arguments": {"x-queue-type": "stream"}}"#)
                .expect("reads");
        assert_eq!(queue.queue_type(), "stream");
    }
}
