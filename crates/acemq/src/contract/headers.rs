//! Header names of the AceMQ wire contract and the two namespaces they live in.
//!
//! `x-acemq-` is reserved: every header with that prefix belongs to the engine, is read onto the
//! [`Envelope`](crate::Envelope) when known and is dropped from the application headers either
//! way. `acemq-` is shared: AceMQ writes and reads those headers, but on the wire they are
//! ordinary application headers that reach the handler.

/// The reserved prefix. Every header starting with it is owned by the engine.
pub const RESERVED_PREFIX: &str = "x-acemq-";

/// The shared prefix: headers AceMQ writes and reads that are still application headers.
pub const SHARED_PREFIX: &str = "acemq-";

/// Message identifier (string). Mirrored by the AMQP `message-id` property.
pub const ID: &str = "x-acemq-id";
/// Logical message type (string), such as `order.placed`.
pub const TYPE: &str = "x-acemq-type";
/// Payload schema version (32-bit integer, at least 1).
pub const VERSION: &str = "x-acemq-version";
/// Correlation identifier of the whole flow (string).
pub const CORRELATION: &str = "x-acemq-correlation";
/// Identifier of the immediate parent message (string), written only when set.
pub const CAUSATION: &str = "x-acemq-causation";
/// Delivery attempt (32-bit integer, from 1).
pub const ATTEMPT: &str = "x-acemq-attempt";
/// First publish time (64-bit integer, epoch milliseconds).
pub const FIRST_SEEN: &str = "x-acemq-first-seen";
/// The publishing process, `<client name>@<host>` (string).
pub const ORIGIN: &str = "x-acemq-origin";
/// Why a message was set aside into `.dlq` or `.parked` (string).
pub const ERROR: &str = "x-acemq-error";
/// Where an externally stored payload is, set by the application only (string).
pub const CLAIM: &str = "x-acemq-claim";
/// Declared-pipeline steps, comma-joined (string).
pub const ROUTE: &str = "x-acemq-route";
/// Index of the step a declared-pipeline message is for (32-bit integer, from 0).
pub const ROUTE_POSITION: &str = "x-acemq-route-position";
/// Run identifier of a declared pipeline, constant across hops (string).
pub const ROUTE_ID: &str = "x-acemq-route-id";

/// Queue a replayed message came back from (string).
pub const REPLAYED_FROM: &str = "acemq-replayed-from";
/// When a message was last replayed (RFC 3339 string with milliseconds and `Z`).
pub const REPLAYED_AT: &str = "acemq-replayed-at";
/// How many times a message has been replayed (32-bit integer).
pub const REPLAY_COUNT: &str = "acemq-replay-count";
/// Queue a responder should answer to; written beside the AMQP `reply-to` property.
pub const REPLY_TO: &str = "acemq-reply-to";
/// A responder's failure, written on an error reply.
pub const RESPONDER_ERROR: &str = "acemq-error";
/// The JSON itinerary of a carried routing slip.
pub const ROUTING_SLIP: &str = "acemq-routing-slip";
/// W3C trace context parent.
pub const TRACEPARENT: &str = "traceparent";
/// W3C trace context vendor state.
pub const TRACESTATE: &str = "tracestate";

/// Whether a header belongs to the engine.
///
/// The test is the prefix, not a list, so a header added to the contract by a newer release of
/// another port never reaches application code that predates it. Shared `acemq-` headers do not
/// match.
///
/// ```
/// use acemq::headers::{is_ace_header, SHARED_PREFIX};
///
/// assert!(is_ace_header("x-acemq-id"));
/// assert!(is_ace_header("x-acemq-added-next-year"));
/// assert!(!is_ace_header("acemq-reply-to"));
/// assert!(!is_ace_header("traceparent"));
/// assert_eq!(SHARED_PREFIX, "acemq-");
/// ```
pub fn is_ace_header(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
}
