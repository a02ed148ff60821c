//! Messages going out, coming back unroutable, and coming in.

use bytes::Bytes;

use crate::Properties;

/// A message to publish.
///
/// ```
/// use polyq_amqp::{OutgoingMessage, Properties};
///
/// let message = OutgoingMessage::new("", "orders", Properties::default().persistent(), "{}");
/// assert!(message.mandatory);
/// ```
#[derive(Debug, Clone)]
pub struct OutgoingMessage {
    /// Target exchange; `""` is the default exchange.
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// When `true` (the default) an unroutable message comes back as
    /// [`PublishOutcome::Returned`] instead of being dropped by the broker.
    pub mandatory: bool,
    /// Content properties and headers.
    pub properties: Properties,
    /// The body.
    pub body: Bytes,
}

impl OutgoingMessage {
    /// A mandatory message.
    pub fn new(
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
        properties: Properties,
        body: impl Into<Bytes>,
    ) -> Self {
        Self {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            mandatory: true,
            properties,
            body: body.into(),
        }
    }
}

/// How the broker settled a publish. There is no "not requested": every publishing channel runs
/// in confirm mode.
// Returns are rare and matched by value; boxing the large variant would burden every caller.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum PublishOutcome {
    /// The broker took responsibility for the message.
    Acked,
    /// The broker refused the message (for example a queue over its length limit with
    /// `reject-publish`, or a quorum queue of a cluster that has no leader). After a nack the
    /// client publishes on a new channel (at most once a second), since RabbitMQ 3.x can keep
    /// refusing a quorum queue's publishes on the channel that first met its leader down.
    Nacked,
    /// A mandatory message matched no queue and came back.
    Returned(ReturnedMessage),
}

/// A mandatory message that no queue took.
#[derive(Debug, Clone, PartialEq)]
pub struct ReturnedMessage {
    /// AMQP reply code (312 `NO_ROUTE`).
    pub reply_code: u16,
    /// The broker's explanation.
    pub reply_text: String,
    /// The exchange it was published to.
    pub exchange: String,
    /// The routing key it was published with.
    pub routing_key: String,
    /// Its properties.
    pub properties: Properties,
    /// Its body.
    pub body: Bytes,
}

/// A message delivered by a consumer or fetched by `basic.get`, waiting to be settled.
///
/// Settle it exactly once with [`Delivery::ack`], [`Delivery::nack`] or [`Delivery::reject`].
/// A delivery (or its [`Acker`](crate::Acker)) that is dropped unsettled is requeued at once, as
/// `nack(requeue = true)` would, and delivered again flagged `redelivered`; one that was settled
/// is not settled again.
#[derive(Debug)]
pub struct Delivery {
    /// The exchange it was published to.
    pub exchange: String,
    /// The routing key it was published with.
    pub routing_key: String,
    /// `true` when the broker delivered it before and it was not acknowledged.
    pub redelivered: bool,
    /// Content properties and headers.
    pub properties: Properties,
    /// The body.
    pub body: Bytes,
    /// Settles the delivery; can be split off to settle after the body has been moved.
    pub acker: crate::Acker,
}

impl Delivery {
    /// Acknowledges the delivery: the broker forgets it.
    pub async fn ack(&self) -> Result<(), crate::Error> {
        self.acker.ack().await
    }

    /// Negatively acknowledges it; with `requeue` the broker delivers it again (flagged
    /// `redelivered`), without it the queue's dead-letter exchange receives it, if any.
    pub async fn nack(&self, requeue: bool) -> Result<(), crate::Error> {
        self.acker.nack(requeue).await
    }

    /// Rejects it, with the same requeue semantics as [`Delivery::nack`].
    pub async fn reject(&self, requeue: bool) -> Result<(), crate::Error> {
        self.acker.reject(requeue).await
    }
}
