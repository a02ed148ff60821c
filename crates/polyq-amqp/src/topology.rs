//! What a client declares: exchanges, queues and bindings, as plain data.

use crate::value::FieldTable;

/// The routing behaviour of an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExchangeKind {
    /// Routes on exact routing-key equality.
    Direct,
    /// Routes on dotted patterns with `*` (one word) and `#` (zero or more words).
    Topic,
    /// Routes to every bound queue.
    Fanout,
    /// Routes on header matching (declared for compatibility; routing is the broker's).
    Headers,
}

impl ExchangeKind {
    /// The AMQP name of the kind: `direct`, `topic`, `fanout` or `headers`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Headers => "headers",
        }
    }
}

/// An exchange declaration.
///
/// ```
/// use polyq_amqp::{ExchangeKind, ExchangeSpec};
///
/// let dlx = ExchangeSpec::new("acemq.dlx", ExchangeKind::Direct);
/// assert!(dlx.durable);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeSpec {
    /// Exchange name.
    pub name: String,
    /// Routing behaviour.
    pub kind: ExchangeKind,
    /// Survives a broker restart. Default `true`.
    pub durable: bool,
    /// Deleted when its last binding goes. Default `false`.
    pub auto_delete: bool,
    /// Declaration arguments.
    pub arguments: FieldTable,
}

impl ExchangeSpec {
    /// A durable exchange with no arguments.
    pub fn new(name: impl Into<String>, kind: ExchangeKind) -> Self {
        Self {
            name: name.into(),
            kind,
            durable: true,
            auto_delete: false,
            arguments: FieldTable::new(),
        }
    }
}

/// A queue declaration.
///
/// ```
/// use polyq_amqp::{FieldValue, QueueSpec};
///
/// let rung = QueueSpec::new("acemq.retry.5000")
///     .argument("x-message-ttl", FieldValue::I32(5000))
///     .argument("x-dead-letter-exchange", FieldValue::from(""));
/// assert_eq!(rung.arguments.len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSpec {
    /// Queue name; empty asks the broker to name it ([`QueueInfo::name`] says how).
    ///
    /// After a reconnect, `amqp://` declares client-named queues again. A server-named queue
    /// keeps its name only as long as the broker keeps the queue: one that is exclusive or
    /// auto-delete goes with the connection, and its consumers then end with
    /// [`Error::QueueLost`](crate::Error::QueueLost) instead of resuming on a queue with a new
    /// name.
    pub name: String,
    /// Survives a broker restart. Default `true`.
    pub durable: bool,
    /// Owned by this connection and deleted with it. Default `false`.
    pub exclusive: bool,
    /// Deleted when its last consumer goes. Default `false`.
    pub auto_delete: bool,
    /// Declaration arguments (`x-message-ttl`, `x-dead-letter-exchange`, `x-queue-type`, ...).
    pub arguments: FieldTable,
}

impl QueueSpec {
    /// A durable, shared queue with no arguments.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
        }
    }

    /// Adds one declaration argument.
    pub fn argument(mut self, name: impl Into<String>, value: crate::FieldValue) -> Self {
        self.arguments.insert(name.into(), value);
        self
    }
}

/// A binding of a queue to an exchange.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// The bound queue.
    pub queue: String,
    /// The source exchange.
    pub exchange: String,
    /// The binding key (a pattern for topic exchanges).
    pub routing_key: String,
    /// Binding arguments.
    pub arguments: FieldTable,
}

impl Binding {
    /// A binding with no arguments.
    pub fn new(
        queue: impl Into<String>,
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
    ) -> Self {
        Self {
            queue: queue.into(),
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            arguments: FieldTable::new(),
        }
    }
}

/// What the broker reports about a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    /// The queue name (the broker's, when it named the queue).
    pub name: String,
    /// Messages ready for delivery.
    pub message_count: u32,
    /// Active consumers.
    pub consumer_count: u32,
}
