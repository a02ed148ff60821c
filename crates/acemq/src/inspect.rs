//! What an operator sees of an AceMQ message, and the way back.
//!
//! [`Inspection`] is the envelope a handler would get, with the payload decoded, as one flat
//! JSON object (the keys of [`FIELDS`]); [`MessageView`] puts it beside the wire message it came
//! from, in the message JSON shape of [`polyq_amqp::message_json`]. [`encode`] goes the other
//! way: envelope fields in the same keys to the wire message a publisher would send. Every
//! `polyq acemq` command that shows or takes envelopes, and every tool built on them, renders
//! these views, so a message reads the same everywhere.
//!
//! The rules are the contract's own: payloads are read as JSON when the [`Json`] codec accepts
//! their content type, shown as text in the other text formats (YAML, TOML, XML, plain text),
//! and as their raw bytes with a `payload_note` saying what is missing to read them in the
//! binary ones ([`Format`]: Protobuf, Avro, registered Avro, encrypted); counters, headers and routes are checked by [`EnvelopeBuilder`] and
//! [`RoutingSlip`]. This module only maps JSON to and from them. No I/O.
//!
//! With the feature `encryption`, `EncryptedView` shows an encrypted body's key id and, given
//! the key ring, its plaintext, beside the raw bytes the inspection shows.
//!
//! ```
//! use acemq::inspect::{Inspection, encode};
//! use acemq::wire;
//! use serde_json::json;
//!
//! let now = wire::from_epoch_millis(1_767_323_045_678).unwrap();
//! let fields = json!({
//!     "id": "m-1",
//!     "routing_key": "orders.new",
//!     "attempt": 2,
//!     "payload": {"id": "o-1"}
//! });
//! let message = encode(&fields, "checkout@app-7", now)?;
//! assert_eq!(message.properties.message_id.as_deref(), Some("m-1"));
//!
//! let seen = Inspection::of_message(&message, now)?;
//! assert_eq!(seen.envelope().attempt(), 2);
//! let printed = serde_json::to_value(&seen)?;
//! assert_eq!(printed["type"], "orders.new");
//! assert_eq!(printed["payload"], json!({"id": "o-1"}));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use polyq_amqp::message_json::{body_from_json, body_to_json, headers_from_json, headers_to_json};
use polyq_amqp::{FieldValue, MessageJson, Properties};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::codec::{Decode, Format, JSON_CONTENT_TYPE, Json};
use crate::{Envelope, EnvelopeBuilder, Error, Itinerary, RoutingSlip, Stop, headers, provenance};
use crate::{wire, wire::type_for};

/// Every key [`encode`] takes: the keys of [`FIELDS`], then where the message goes.
const INPUT_FIELDS: &[&str] = &[
    "id",
    "type",
    "version",
    "correlation_id",
    "causation_id",
    "attempt",
    "first_seen",
    "age_ms",
    "origin",
    "error",
    "claim",
    "route",
    "itinerary",
    "replayed_from",
    "replayed_at",
    "replay_count",
    "headers",
    "content_type",
    "payload",
    "payload_note",
    "routing_key",
    "exchange",
];

/// The keys of an [`Inspection`], in the order they are written.
///
/// `first_seen` is epoch milliseconds, `age_ms` the age at the inspection's "now",
/// `replayed_at` RFC 3339, `headers` the application headers in the message JSON value forms,
/// `payload` the decoded body, `payload_note` why the payload is shown as raw bytes (the schema,
/// descriptor or key it needs); absent values are `null`.
pub const FIELDS: &[&str] = INPUT_FIELDS.split_at(20).0;

/// Why a message cannot be shown, or envelope fields cannot become a message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The message's `acemq-routing-slip` header cannot be read.
    #[error("headers.{}", headers::ROUTING_SLIP)]
    RoutingSlip(#[source] Error),
    /// The body is not JSON although its content type says it is.
    #[error("body: not valid JSON for content type {content_type}")]
    Body {
        /// The content type the message carries.
        content_type: String,
        /// What the JSON parser found.
        #[source]
        source: serde_json::Error,
    },
    /// The envelope fields given to [`encode`] are not a JSON object.
    #[error("expected a JSON object of envelope fields")]
    NotAnObject,
    /// A key [`encode`] does not take.
    #[error(
        "field `{field}`: not an envelope field (expected any of {})",
        INPUT_FIELDS.join(", ")
    )]
    UnknownField {
        /// The key as given.
        field: String,
    },
    /// A field of the wrong JSON type.
    #[error("field `{field}`: expected {expected}, found {found}")]
    FieldType {
        /// The field, dotted for nested ones (`route.steps`).
        field: &'static str,
        /// What the field takes.
        expected: &'static str,
        /// The JSON that was given.
        found: String,
    },
    /// A field the envelope contract refuses (a counter out of range, a reserved header, a
    /// malformed route or itinerary).
    #[error("field `{field}`")]
    Field {
        /// The field.
        field: &'static str,
        /// The contract's reason.
        #[source]
        source: Error,
    },
    /// Header values that have no AMQP form.
    #[error("field `headers`")]
    Headers(#[source] polyq_amqp::Error),
    /// A payload for a content type that is not JSON, given neither as text nor as base64.
    #[error("field `payload`: content type {content_type} is not JSON")]
    Payload {
        /// The content type of the message.
        content_type: String,
        /// Why the payload is not a body.
        #[source]
        source: polyq_amqp::Error,
    },
}

impl InspectError {
    /// The input field this error is about, when it is about one (`route.steps` for a nested
    /// field); `None` for errors about the message as a whole.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::UnknownField { field } => Some(field),
            Self::FieldType { field, .. } | Self::Field { field, .. } => Some(field),
            Self::Headers(_) => Some("headers"),
            Self::Payload { .. } => Some("payload"),
            Self::RoutingSlip(_) | Self::Body { .. } | Self::NotAnObject => None,
        }
    }
}

/// The envelope a handler would see and the payload it would get, at a given "now".
///
/// Serializes as one flat JSON object with the keys of [`FIELDS`] in that order.
#[derive(Debug, Clone, PartialEq)]
pub struct Inspection {
    envelope: Envelope,
    itinerary: Option<Itinerary>,
    age: Duration,
    content_type: Option<String>,
    payload: Value,
    payload_note: Option<String>,
}

impl Inspection {
    /// The envelope of a wire message as a consumer reads it (a missing first-seen defaults to
    /// `now`), with its body decoded.
    pub fn of_message(message: &MessageJson, now: OffsetDateTime) -> Result<Self, InspectError> {
        let properties = &message.properties;
        let envelope = Envelope::from_headers_at(
            &properties.headers,
            &message.routing_key,
            properties.message_id.as_deref(),
            now,
        );
        Self::of(
            envelope,
            properties.content_type.as_deref(),
            &message.body,
            now,
        )
    }

    /// An envelope with the body it travels with.
    ///
    /// The body is parsed JSON when the [`Json`] codec reads its content type (an error when it
    /// does not parse), parsed JSON or else text for a message without a content type, the raw
    /// bytes as `{"base64": ...}` with a [`payload_note`](Self::payload_note) for the binary
    /// formats of [`Format`] (Protobuf, Avro, registered Avro, encrypted), and otherwise text
    /// (YAML, TOML, XML, plain text), or `{"base64": ...}` when it is not UTF-8; an empty body is
    /// `null`.
    pub fn of(
        envelope: Envelope,
        content_type: Option<&str>,
        body: &[u8],
        now: OffsetDateTime,
    ) -> Result<Self, InspectError> {
        let itinerary = envelope.itinerary().map_err(InspectError::RoutingSlip)?;
        let (payload, payload_note) = decode_payload(content_type, body)?;
        Ok(Self {
            age: envelope.age_at(now),
            envelope,
            itinerary,
            content_type: content_type.map(str::to_owned),
            payload,
            payload_note,
        })
    }

    /// The envelope.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// The carried itinerary, when the message has one.
    pub fn itinerary(&self) -> Option<&Itinerary> {
        self.itinerary.as_ref()
    }

    /// How long ago the message was first seen, at the inspection's "now".
    pub fn age(&self) -> Duration {
        self.age
    }

    /// The message's content type.
    pub fn content_type(&self) -> Option<&str> {
        self.content_type.as_deref()
    }

    /// The decoded body.
    pub fn payload(&self) -> &Value {
        &self.payload
    }

    /// Why the payload is shown as its raw bytes: what reading it needs (a Protobuf
    /// descriptor, an Avro schema, the schema registry's schema of a given id, the key of a
    /// given id), or what is wrong with its framing; `None` when the payload is shown decoded.
    pub fn payload_note(&self) -> Option<&str> {
        self.payload_note.as_deref()
    }
}

/// The written form of an [`Inspection`]; the field order is the output order.
#[derive(Serialize)]
struct Flat<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    message_type: &'a str,
    version: u32,
    correlation_id: &'a str,
    causation_id: Option<&'a str>,
    attempt: u32,
    first_seen: i64,
    age_ms: u128,
    origin: Option<&'a str>,
    error: Option<&'a str>,
    claim: Option<&'a str>,
    route: Option<Value>,
    itinerary: Option<Value>,
    replayed_from: Option<&'a str>,
    replayed_at: Option<String>,
    replay_count: u32,
    headers: Value,
    content_type: Option<&'a str>,
    payload: &'a Value,
    payload_note: Option<&'a str>,
}

impl Serialize for Inspection {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let envelope = &self.envelope;
        Flat {
            id: envelope.id(),
            message_type: envelope.message_type(),
            version: envelope.version(),
            correlation_id: envelope.correlation_id(),
            causation_id: envelope.causation_id(),
            attempt: envelope.attempt(),
            first_seen: wire::epoch_millis(envelope.first_seen()),
            age_ms: self.age.as_millis(),
            origin: envelope.origin(),
            error: envelope.error(),
            claim: envelope.claim(),
            route: envelope.route().map(|route| {
                serde_json::json!({
                    "steps": route.steps(),
                    "position": route.position(),
                    "run_id": route.run_id(),
                })
            }),
            itinerary: self.itinerary.as_ref().map(|itinerary| {
                let stops = |stops: &[Stop]| serde_json::to_value(stops).unwrap_or_default();
                serde_json::json!({"steps": stops(itinerary.steps()), "done": stops(itinerary.done())})
            }),
            replayed_from: envelope.replayed_from(),
            replayed_at: envelope.replayed_at().map(wire::format_instant),
            replay_count: envelope.replay_count(),
            headers: headers_to_json(envelope.headers()),
            content_type: self.content_type.as_deref(),
            payload: &self.payload,
            payload_note: self.payload_note.as_deref(),
        }
        .serialize(serializer)
    }
}

/// A message as it sits on a queue: the wire message beside its [`Inspection`], or beside
/// the reason it has none.
///
/// Serializes as the message JSON keys, then `redelivered`, `envelope` (the inspection, `null`
/// when there is none) and, only when there is none, `envelope_error` (the reason with its
/// causes). The output is itself message JSON that [`MessageJson::parse`] reads back.
#[derive(Debug)]
pub struct MessageView {
    message: MessageJson,
    redelivered: bool,
    inspection: Result<Inspection, InspectError>,
}

impl MessageView {
    /// Inspects `message` at `now`; `redelivered` is the broker's flag on the delivery.
    pub fn new(message: MessageJson, redelivered: bool, now: OffsetDateTime) -> Self {
        let inspection = Inspection::of_message(&message, now);
        Self {
            message,
            redelivered,
            inspection,
        }
    }

    /// The wire message.
    pub fn message(&self) -> &MessageJson {
        &self.message
    }

    /// Whether the broker delivered the message before.
    pub fn redelivered(&self) -> bool {
        self.redelivered
    }

    /// The inspection, or why the message cannot be shown as an envelope.
    pub fn inspection(&self) -> Result<&Inspection, &InspectError> {
        self.inspection.as_ref()
    }
}

/// The written form of a [`MessageView`].
#[derive(Serialize)]
struct ViewJson<'a> {
    #[serde(flatten)]
    message: &'a MessageJson,
    redelivered: bool,
    envelope: Option<&'a Inspection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    envelope_error: Option<String>,
}

impl Serialize for MessageView {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ViewJson {
            message: &self.message,
            redelivered: self.redelivered,
            envelope: self.inspection.as_ref().ok(),
            envelope_error: self.inspection.as_ref().err().map(with_causes),
        }
        .serialize(serializer)
    }
}

/// An error and each of its causes, `: `-separated.
fn with_causes(error: &InspectError) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// What an operator sees of an encrypted body (`application/vnd.acemq.encrypted`): the key id
/// its clear header names, and, given the key ring, the plaintext decoded as a body without a
/// content type is (JSON, else text, else `{"base64": ...}`: the inner codec's content type is
/// not on the wire). Never a key.
///
/// Serializes as `{"key_id", "payload", "note"}`: `payload` is `null` and `note` says why when
/// the plaintext is not shown (no key ring, a key the ring does not hold, a tag that does not
/// verify, a body that is not the framing).
///
/// ```
/// use acemq::codec::encrypted::seal;
/// use acemq::codec::keyring::KeyRing;
/// use acemq::inspect::EncryptedView;
/// use serde_json::json;
///
/// let keys = KeyRing::new("orders-2026-09", &[7; 32])?;
/// let body = seal(&keys, br#"{"id":"o-1"}"#)?;
/// let content_type = Some("application/vnd.acemq.encrypted");
/// let seen = EncryptedView::of(content_type, &body, Some(&keys)).unwrap();
/// assert_eq!(
///     serde_json::to_value(&seen)?,
///     json!({"key_id": "orders-2026-09", "payload": {"id": "o-1"}, "note": null})
/// );
/// let without = EncryptedView::of(content_type, &body, None).unwrap();
/// assert_eq!(without.key_id(), Some("orders-2026-09"));
/// assert!(without.payload().is_none());
/// assert!(EncryptedView::of(Some("application/json"), b"{}", Some(&keys)).is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "encryption")]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EncryptedView {
    key_id: Option<String>,
    payload: Option<Value>,
    note: Option<String>,
}

#[cfg(feature = "encryption")]
impl EncryptedView {
    /// The view of `body`, or `None` when `content_type` is not the encrypted codec's.
    pub fn of(
        content_type: Option<&str>,
        body: &[u8],
        keys: Option<&crate::codec::keyring::KeyRing>,
    ) -> Option<Self> {
        use crate::codec::Format;
        use crate::codec::encrypted::{EncryptionError, key_id_of, open};
        if !Format::Encrypted.names(content_type) {
            return None;
        }
        let key_id = key_id_of(body).map(str::to_owned);
        let (payload, note) = match (keys, &key_id) {
            (_, None) => (None, Some(EncryptionError::NotEncrypted.to_string())),
            (None, Some(_)) => (
                None,
                Some("no key ring given: the plaintext is not shown".to_owned()),
            ),
            (Some(keys), Some(_)) => match open(keys, body) {
                Ok(plaintext) => (
                    decode_payload(None, &plaintext)
                        .ok()
                        .map(|(payload, _)| payload),
                    None,
                ),
                Err(error) => (None, Some(error.to_string())),
            },
        };
        Some(Self {
            key_id,
            payload,
            note,
        })
    }

    /// The key id the body's header names; `None` when the body is not the framing.
    pub fn key_id(&self) -> Option<&str> {
        self.key_id.as_deref()
    }

    /// The decoded plaintext, when the key ring opened it.
    pub fn payload(&self) -> Option<&Value> {
        self.payload.as_ref()
    }

    /// Why the plaintext is not shown.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }
}

/// The body as a handler would get it, with a note when it is shown as raw bytes; see
/// [`Inspection::of`].
fn decode_payload(
    content_type: Option<&str>,
    body: &[u8],
) -> Result<(Value, Option<String>), InspectError> {
    if body.is_empty() {
        return Ok((Value::Null, None));
    }
    let Some(content_type) = content_type else {
        return Ok((
            serde_json::from_slice(body).unwrap_or_else(|_| body_to_json(body)),
            None,
        ));
    };
    let note = match Format::of(content_type) {
        Some(Format::Json) => {
            let payload = serde_json::from_slice(body).map_err(|source| InspectError::Body {
                content_type: content_type.to_owned(),
                source,
            })?;
            return Ok((payload, None));
        }
        Some(Format::Protobuf) => {
            "Protobuf: shown as raw bytes; reading it needs the message's descriptor (.proto)"
                .to_owned()
        }
        Some(Format::Avro) => {
            "Avro: shown as raw bytes; reading it needs the writer's schema".to_owned()
        }
        Some(Format::AvroRegistered) => registered_avro_note(body),
        // A decrypted view, given the key, belongs here: the key id names the key to use.
        Some(Format::Encrypted) => encrypted_note(body),
        _ => return Ok((body_to_json(body), None)),
    };
    Ok((
        serde_json::json!({"base64": BASE64.encode(body)}),
        Some(note),
    ))
}

/// What a registered Avro body needs: the schema its framing names (a zero byte, then the
/// schema id, 4 bytes big-endian).
fn registered_avro_note(body: &[u8]) -> String {
    match body {
        [0, a, b, c, d, ..] => format!(
            "registered Avro, schema id {}: shown as raw bytes; reading it needs that schema \
             from the schema registry",
            u32::from_be_bytes([*a, *b, *c, *d])
        ),
        _ => "registered Avro without its framing (a zero byte, then a 4-byte schema id): \
              shown as raw bytes"
            .to_owned(),
    }
}

/// What an encrypted body needs: the key its framing names (`0xAE 0x01`, the key id's length
/// in one byte, the key id, a 12-byte nonce, then the ciphertext and its 16-byte tag).
fn encrypted_note(body: &[u8]) -> String {
    const NONCE: usize = 12;
    const TAG: usize = 16;
    let key_id = match body {
        [0xAE, 0x01, len, rest @ ..] if rest.len() >= usize::from(*len) + NONCE + TAG => {
            std::str::from_utf8(&rest[..usize::from(*len)]).ok()
        }
        _ => None,
    };
    match key_id {
        Some(key_id) => format!(
            "encrypted with key id `{key_id}`: shown as raw bytes; reading it needs that key"
        ),
        None => "encrypted, but not in the AceMQ framing (0xAE 0x01, key id length, key id, \
                 12-byte nonce, ciphertext and tag): shown as raw bytes"
            .to_owned(),
    }
}

/// The JSON codec's own rule, so that what is shown as JSON is what a consumer decodes as JSON.
fn is_json(content_type: &str) -> bool {
    Decode::<Value>::accepts(&Json, Some(content_type))
}

/// The wire message for envelope fields (the keys of [`FIELDS`], `age_ms` ignored) plus
/// `routing_key` and `exchange` (both default to `""`).
///
/// Build defaults are applied at `now`: a new id, correlation = id, version 1, attempt 1, first
/// seen = `now`, type from the routing key ([`wire::type_for`]), `origin` stamped when the
/// fields set none ([`provenance::stamp`]), content type `application/json`, persistent
/// delivery. A JSON payload is written as JSON; for another content type it is text or
/// `{"base64": "..."}`. With `id` given, the output depends only on the arguments.
pub fn encode(
    fields: &Value,
    origin: &str,
    now: OffsetDateTime,
) -> Result<MessageJson, InspectError> {
    let fields = fields.as_object().ok_or(InspectError::NotAnObject)?;
    if let Some(unknown) = fields.keys().find(|k| !INPUT_FIELDS.contains(&k.as_str())) {
        return Err(InspectError::UnknownField {
            field: unknown.clone(),
        });
    }
    let get = |key: &str| fields.get(key).filter(|v| !v.is_null());
    let routing_key = text(get("routing_key"), "routing_key")?.unwrap_or_default();
    let exchange = text(get("exchange"), "exchange")?.unwrap_or_default();
    let envelope = build(fields, &routing_key, now)?;
    let envelope = provenance::stamp(envelope, origin);

    let content_type =
        text(get("content_type"), "content_type")?.unwrap_or_else(|| JSON_CONTENT_TYPE.to_owned());
    let body = match get("payload") {
        None => Vec::new(),
        // A `Value` always has a JSON text: its Display is the compact serialization.
        Some(payload) if is_json(&content_type) => payload.to_string().into_bytes(),
        Some(payload) => body_from_json(payload).map_err(|source| InspectError::Payload {
            content_type: content_type.clone(),
            source,
        })?,
    };
    let mut properties = Properties::default()
        .with_content_type(content_type)
        .persistent();
    envelope.write_properties(&mut properties);
    Ok(MessageJson::new(exchange, routing_key, properties, body))
}

/// The envelope the fields describe, checked by the builder.
fn build(
    fields: &Map<String, Value>,
    routing_key: &str,
    now: OffsetDateTime,
) -> Result<Envelope, InspectError> {
    let get = |key: &str| fields.get(key).filter(|v| !v.is_null());
    let message_type =
        text(get("type"), "type")?.unwrap_or_else(|| type_for(routing_key).to_owned());
    let mut builder = Envelope::of(message_type);
    for (key, set) in [
        ("id", EnvelopeBuilder::id as fn(_, String) -> _),
        ("correlation_id", EnvelopeBuilder::correlation_id),
        ("causation_id", EnvelopeBuilder::causation_id),
        ("origin", EnvelopeBuilder::origin),
        ("error", EnvelopeBuilder::error),
        ("claim", EnvelopeBuilder::claim),
        ("replayed_from", EnvelopeBuilder::replayed_from),
    ] {
        if let Some(value) = text(get(key), key)? {
            builder = set(builder, value);
        }
    }
    for (key, set) in [
        ("version", EnvelopeBuilder::version as fn(_, u32) -> _),
        ("attempt", EnvelopeBuilder::attempt),
        ("replay_count", EnvelopeBuilder::replay_count),
    ] {
        if let Some(value) = counter(get(key), key)? {
            builder = set(builder, value);
        }
    }
    if let Some(at) = instant(get("first_seen"), "first_seen")? {
        builder = builder.first_seen(at);
    }
    if let Some(at) = instant(get("replayed_at"), "replayed_at")? {
        builder = builder.replayed_at(at);
    }
    if let Some(route) = get("route") {
        builder = builder.route(route_from(route)?);
    }
    if let Some(headers) = get("headers") {
        for (name, value) in headers_from_json(headers).map_err(InspectError::Headers)? {
            builder = builder.header(name, value);
        }
    }
    if let Some(itinerary) = get("itinerary") {
        let slip =
            Itinerary::parse(&itinerary.to_string()).map_err(|source| InspectError::Field {
                field: "itinerary",
                source,
            })?;
        builder = builder.header(headers::ROUTING_SLIP, slip.to_json());
    }
    builder.build_at(now).map_err(|error| match error {
        // The refusal names the number as given, not as it was narrowed to a counter.
        Error::CounterOutOfRange { field, min, value } => InspectError::Field {
            field,
            source: Error::CounterOutOfRange {
                field,
                min,
                value: get(field).and_then(Value::as_u64).unwrap_or(value),
            },
        },
        source => InspectError::Field {
            field: "headers",
            source,
        },
    })
}

fn type_error(field: &'static str, expected: &'static str, found: &Value) -> InspectError {
    InspectError::FieldType {
        field,
        expected,
        found: found.to_string(),
    }
}

fn text(value: Option<&Value>, field: &'static str) -> Result<Option<String>, InspectError> {
    match value {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(type_error(field, "a string", other)),
    }
}

/// A whole number for a counter; the range is the builder's to check, so a number too large
/// for `u32` is passed on as `u32::MAX`, which every counter refuses.
fn counter(value: Option<&Value>, field: &'static str) -> Result<Option<u32>, InspectError> {
    value
        .map(|value| {
            value
                .as_u64()
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
                .ok_or_else(|| type_error(field, "a whole number", value))
        })
        .transpose()
}

fn instant(
    value: Option<&Value>,
    field: &'static str,
) -> Result<Option<OffsetDateTime>, InspectError> {
    value
        .map(|value| {
            match value {
                Value::Number(n) => n.as_i64().and_then(wire::from_epoch_millis),
                Value::String(s) => wire::read_instant(&FieldValue::from(s.as_str())),
                _ => None,
            }
            .ok_or_else(|| type_error(field, "epoch milliseconds or RFC 3339", value))
        })
        .transpose()
}

fn route_from(value: &Value) -> Result<RoutingSlip, InspectError> {
    let object = value.as_object().ok_or_else(|| {
        type_error(
            "route",
            r#"{"steps": [...], "position": n, "run_id": "..."}"#,
            value,
        )
    })?;
    let field = |key: &str| object.get(key).filter(|v| !v.is_null());
    let steps: Vec<String> = field("steps")
        .and_then(Value::as_array)
        .and_then(|steps| {
            steps
                .iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .ok_or_else(|| {
            type_error(
                "route.steps",
                "an array of step names",
                field("steps").unwrap_or(&Value::Null),
            )
        })?;
    let position = counter(field("position"), "route.position")?.unwrap_or(0);
    let refused = |source| InspectError::Field {
        field: "route",
        source,
    };
    let run_id = match text(field("run_id"), "route.run_id")? {
        Some(id) => id,
        None => RoutingSlip::start_of(steps.clone())
            .map_err(refused)?
            .run_id()
            .to_owned(),
    };
    RoutingSlip::new(steps, position, run_id).map_err(refused)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use time::macros::datetime;

    use super::*;

    const NOW: OffsetDateTime = datetime!(2026-01-02 03:04:05.678 UTC);

    fn printed(inspection: &Inspection) -> Value {
        serde_json::to_value(inspection).unwrap()
    }

    fn encode_error(fields: Value) -> InspectError {
        encode(&fields, "tests@host", NOW).unwrap_err()
    }

    /// The error with its causes, as the CLI prints it.
    fn reported(fields: Value) -> String {
        with_causes(&encode_error(fields))
    }

    #[test]
    fn an_inspection_writes_every_field_in_order() {
        let message = MessageJson::parse(
            &json!({
                "routing_key": "orders.new",
                "properties": {"message_id": "m-1", "content_type": "application/json"},
                "headers": {"x-acemq-type": "order.placed", "x-acemq-first-seen": 1_767_323_045_678_i64, "x-tenant": "acme"},
                "body": "{\"id\":\"o-1\"}",
            })
            .to_string(),
        )
        .unwrap();
        let seen = Inspection::of_message(&message, NOW + time::Duration::minutes(1)).unwrap();
        let text = serde_json::to_string(&seen).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut sorted = FIELDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(keys, sorted);
        let positions: Vec<usize> = FIELDS
            .iter()
            .map(|key| text.find(&format!("\"{key}\":")).unwrap())
            .collect();
        assert!(positions.is_sorted(), "{text}");
        assert_eq!(value["id"], "m-1");
        assert_eq!(value["type"], "order.placed");
        assert_eq!(value["correlation_id"], "m-1");
        assert_eq!(value["age_ms"], 60_000);
        assert_eq!(seen.age(), Duration::from_secs(60));
        assert_eq!(value["headers"], json!({"x-tenant": "acme"}));
        assert_eq!(value["payload"], json!({"id": "o-1"}));
        assert_eq!(seen.payload(), &json!({"id": "o-1"}));
        assert_eq!(seen.content_type(), Some("application/json"));
        assert!(seen.itinerary().is_none());
    }

    #[test]
    fn encode_applies_build_defaults_and_the_origin() {
        let message = encode(
            &json!({"routing_key": "orders.new", "payload": {"id": "o-1"}}),
            "checkout@app-7",
            NOW,
        )
        .unwrap();
        let headers = &message.properties.headers;
        let id = headers["x-acemq-id"].as_str().unwrap().to_owned();
        assert_eq!(id.len(), 36);
        assert_eq!(message.properties.message_id.as_deref(), Some(id.as_str()));
        assert_eq!(
            headers["x-acemq-correlation"],
            FieldValue::from(id.as_str())
        );
        assert_eq!(headers["x-acemq-type"], FieldValue::from("orders.new"));
        assert_eq!(headers["x-acemq-version"], FieldValue::I32(1));
        assert_eq!(headers["x-acemq-attempt"], FieldValue::I32(1));
        assert_eq!(
            headers["x-acemq-first-seen"],
            FieldValue::I64(1_767_323_045_678)
        );
        assert_eq!(
            headers["x-acemq-origin"],
            FieldValue::from("checkout@app-7")
        );
        assert!(!headers.contains_key("x-acemq-causation"));
        assert_eq!(
            message.properties.content_type.as_deref(),
            Some("application/json")
        );
        assert_eq!(message.properties.delivery_mode, Some(2));
        assert_eq!(message.routing_key, "orders.new");
        assert_eq!(&message.body[..], br#"{"id":"o-1"}"#);

        let pinned = json!({"id": "m-1", "routing_key": "orders.new"});
        assert_eq!(
            encode(&pinned, "o", NOW).unwrap(),
            encode(&pinned, "o", NOW).unwrap()
        );
        let fanout = encode(&json!({}), "o", NOW).unwrap();
        assert_eq!(
            fanout.properties.headers["x-acemq-type"],
            FieldValue::from("message")
        );
        assert!(fanout.body.is_empty());
    }

    #[test]
    fn inspection_of_encode_gives_back_the_fields() {
        let input = json!({
            "id": "m-1",
            "type": "order.placed",
            "version": 2,
            "correlation_id": "corr",
            "causation_id": "cause",
            "attempt": 3,
            "first_seen": "2026-01-02T03:04:05.678Z",
            "origin": "orders@host-7",
            "error": "exhausted 3 attempts: boom",
            "claim": "s3://payloads/o-1",
            "route": {"steps": ["validate", "charge"], "position": 1, "run_id": "run-1"},
            "itinerary": {"steps": [{"exchange": "billing", "routingKey": "invoice.send", "name": "send"}]},
            "replayed_from": "orders.new.dlq",
            "replayed_at": "2026-02-03T04:05:06.789+00:00",
            "replay_count": 1,
            "headers": {"x-tenant": "acme", "x-small": {"type": "b", "value": 1}},
            "content_type": "text/plain",
            "payload": "hello",
            "routing_key": "orders.new",
        });
        let message = encode(&input, "other@host", NOW).unwrap();
        assert_eq!(&message.body[..], b"hello");
        // The message survives its JSON form, as between two commands.
        let message = MessageJson::parse(&message.to_json_pretty()).unwrap();
        let seen = Inspection::of_message(&message, NOW).unwrap();
        let decoded = printed(&seen);
        for key in [
            "id",
            "type",
            "version",
            "correlation_id",
            "causation_id",
            "attempt",
            "origin",
            "error",
            "claim",
            "route",
            "replayed_from",
            "replay_count",
            "content_type",
            "payload",
        ] {
            assert_eq!(decoded[key], input[key], "{key}");
        }
        assert_eq!(decoded["first_seen"], 1_767_323_045_678_i64);
        assert_eq!(decoded["age_ms"], 0);
        assert_eq!(decoded["replayed_at"], "2026-02-03T04:05:06.789Z");
        assert_eq!(decoded["itinerary"]["steps"], input["itinerary"]["steps"]);
        assert_eq!(decoded["itinerary"]["done"], json!([]));
        assert_eq!(
            decoded["headers"]["x-small"],
            json!({"type": "b", "value": 1})
        );
        assert_eq!(decoded["headers"]["x-tenant"], "acme");
        assert_eq!(seen.envelope().route().unwrap().run_id(), "run-1");
        assert_eq!(seen.itinerary().unwrap().steps().len(), 1);
    }

    #[test]
    fn a_route_without_a_run_id_gets_a_fresh_one() {
        let message = encode(&json!({"route": {"steps": ["a", "b"]}}), "o", NOW).unwrap();
        let seen = Inspection::of_message(&message, NOW).unwrap();
        let route = seen.envelope().route().unwrap();
        assert_eq!(
            (route.steps(), route.position()),
            (&["a".to_owned(), "b".to_owned()][..], 0)
        );
        assert!(!route.run_id().is_empty());
    }

    #[test]
    fn payloads_follow_the_json_codecs_content_types() {
        let body = |ct: Option<&str>, body: &[u8]| decode_payload(ct, body).map(|(p, _)| p);
        // Every content type the codec reads as JSON, parameters and aliases included.
        for json_type in [
            "application/json",
            "application/json; charset=utf-8",
            "text/json",
            "application/vnd.acme+json",
        ] {
            assert_eq!(
                body(Some(json_type), b"[1]").unwrap(),
                json!([1]),
                "{json_type}"
            );
            assert!(
                matches!(body(Some(json_type), b"{"), Err(InspectError::Body { .. })),
                "{json_type}"
            );
            assert!(Decode::<Value>::accepts(&Json, Some(json_type)));
        }
        assert_eq!(body(Some("text/plain"), b"[1]").unwrap(), json!("[1]"));
        assert_eq!(
            body(Some("application/octet-stream"), &[0xff, 0]).unwrap(),
            json!({"base64": "/wA="})
        );
        assert_eq!(body(None, b"[1]").unwrap(), json!([1]));
        assert_eq!(body(None, b"plain").unwrap(), json!("plain"));
        assert_eq!(body(Some("application/json"), b"").unwrap(), Value::Null);

        let raw = encode(
            &json!({"content_type": "application/octet-stream", "payload": {"base64": "/wA="}}),
            "o",
            NOW,
        )
        .unwrap();
        assert_eq!(&raw.body[..], &[0xff, 0]);
        let vendor = encode(
            &json!({"content_type": "application/vnd.acme+json", "payload": {"a": 1}}),
            "o",
            NOW,
        )
        .unwrap();
        assert_eq!(&vendor.body[..], br#"{"a":1}"#);
    }

    #[test]
    fn every_format_is_shown_beside_what_reading_it_needs() {
        let shown = |ct: &str, body: &[u8]| {
            let seen =
                Inspection::of(Envelope::of("t").build().unwrap(), Some(ct), body, NOW).unwrap();
            (
                seen.payload().clone(),
                seen.payload_note().map(str::to_owned),
            )
        };
        // Text formats as text, nothing missing.
        for (ct, body) in [
            ("application/yaml", "orderId: o-1\n"),
            ("text/x-yaml", "items:\n- widget\n"),
            ("application/toml", "orderId = \"o-1\"\n"),
            (
                "text/xml; charset=utf-8",
                "<OrderPlaced><orderId>o-1</orderId></OrderPlaced>",
            ),
        ] {
            assert_eq!(shown(ct, body.as_bytes()), (json!(body), None), "{ct}");
        }
        // Binary formats as their raw bytes, even where they happen to be UTF-8.
        let (payload, note) = shown("application/x-protobuf", b"\n\x03o-1");
        assert_eq!(payload, json!({"base64": "CgNvLTE="}));
        assert!(note.unwrap().contains("needs the message's descriptor"));
        let (payload, note) = shown("avro/binary", b"\x06o-1\xb4B\x08acme");
        assert_eq!(payload, json!({"base64": "Bm8tMbRCCGFjbWU="}));
        assert!(note.unwrap().contains("needs the writer's schema"));
        let (payload, note) = shown(
            "application/vnd.acemq.avro",
            b"\x00\x00\x00\x01\x07\x06o-1\xb4B\x08acme",
        );
        assert_eq!(payload, json!({"base64": "AAAAAQcGby0xtEIIYWNtZQ=="}));
        assert_eq!(
            note.unwrap(),
            "registered Avro, schema id 263: shown as raw bytes; reading it needs that schema \
             from the schema registry"
        );
        let (_, note) = shown("application/vnd.acemq.avro", b"\x01abc");
        assert!(
            note.unwrap()
                .starts_with("registered Avro without its framing")
        );

        let mut sealed = vec![0xAE, 0x01, 7];
        sealed.extend_from_slice(b"orders1");
        sealed.extend_from_slice(&[9; 12 + 16 + 3]);
        let (payload, note) = shown("application/vnd.acemq.encrypted", &sealed);
        assert_eq!(payload, json!({"base64": BASE64.encode(&sealed)}));
        assert_eq!(
            note.unwrap(),
            "encrypted with key id `orders1`: shown as raw bytes; reading it needs that key"
        );
        // Too short for its nonce and tag, or another framing: said so.
        for bad in [&sealed[..sealed.len() - 4], &[0xAE, 0x02, 0][..], b"plain"] {
            let (_, note) = shown("application/vnd.acemq.encrypted", bad);
            assert!(
                note.unwrap()
                    .starts_with("encrypted, but not in the AceMQ framing"),
                "{bad:?}"
            );
        }

        // The note is one of the fields, and encode takes it back (and ignores it).
        let message = MessageJson::parse(
            r#"{"properties": {"content_type": "application/x-protobuf"}, "body": {"base64": "CgNvLTE="}}"#,
        )
        .unwrap();
        let written = serde_json::to_value(Inspection::of_message(&message, NOW).unwrap()).unwrap();
        let mut keys: Vec<_> = written.as_object().unwrap().keys().cloned().collect();
        let mut fields = FIELDS.to_vec();
        keys.sort();
        fields.sort_unstable();
        assert_eq!(keys, fields);
        let again = encode(&written, "o", NOW).unwrap();
        assert_eq!(again.body, message.body);
    }

    #[test]
    fn bad_input_names_the_field() {
        for (fields, field, fragment) in [
            (
                json!({"version": 0}),
                "version",
                "field `version`: version must be at least 1 and at most 2147483647, was 0",
            ),
            (
                json!({"attempt": 5_000_000_000_u64}),
                "attempt",
                "was 5000000000",
            ),
            (
                json!({"replay_count": 2_147_483_648_u64}),
                "replay_count",
                "replay_count must be at least 0",
            ),
            (
                json!({"attempt": "two"}),
                "attempt",
                "field `attempt`: expected a whole number, found \"two\"",
            ),
            (json!({"attempt": -1}), "attempt", "field `attempt`"),
            (
                json!({"colour": "red"}),
                "colour",
                "field `colour`: not an envelope field (expected any of id, type,",
            ),
            (
                json!({"headers": {"x-acemq-id": "mine"}}),
                "headers",
                "field `headers`: header 'x-acemq-id' is owned by AceMQ and is derived from the envelope, so it cannot be set directly",
            ),
            (
                json!({"headers": {"x-big": {"type": "b", "value": 300}}}),
                "headers",
                "field `headers`: ",
            ),
            (
                json!({"first_seen": "yesterday"}),
                "first_seen",
                "field `first_seen`: expected epoch milliseconds or RFC 3339",
            ),
            (
                json!({"route": {"steps": ["a,b"]}}),
                "route",
                "field `route`: invalid route",
            ),
            (
                json!({"route": {"steps": "a"}}),
                "route.steps",
                "field `route.steps`",
            ),
            (json!({"route": ["a"]}), "route", "field `route`"),
            (
                json!({"route": {"steps": ["a"], "position": 2_147_483_648_u64}}),
                "route",
                "position must be at most 2147483647",
            ),
            (
                json!({"itinerary": {"steps": 3}}),
                "itinerary",
                "field `itinerary`",
            ),
            (
                json!({"content_type": "application/octet-stream", "payload": 3}),
                "payload",
                "field `payload`: content type application/octet-stream is not JSON: ",
            ),
            (
                json!({"origin": 7}),
                "origin",
                "field `origin`: expected a string, found 7",
            ),
        ] {
            let error = encode_error(fields.clone());
            assert_eq!(error.field(), Some(field), "{fields}");
            let text = reported(fields.clone());
            assert!(text.contains(fragment), "{fields}: {text}");
        }
        assert!(matches!(encode_error(json!([])), InspectError::NotAnObject));
        assert_eq!(InspectError::NotAnObject.field(), None);
    }

    #[test]
    fn unreadable_messages_say_why() {
        let slip =
            MessageJson::parse(r#"{"headers": {"acemq-routing-slip": "[]"}, "body": ""}"#).unwrap();
        let error = Inspection::of_message(&slip, NOW).unwrap_err();
        assert!(matches!(
            error,
            InspectError::RoutingSlip(Error::InvalidItinerary { .. })
        ));
        assert!(
            with_causes(&error)
                .starts_with("headers.acemq-routing-slip: cannot read the routing slip")
        );

        let body = MessageJson::parse(
            r#"{"properties": {"content_type": "application/json"}, "body": "{"}"#,
        )
        .unwrap();
        let error = Inspection::of_message(&body, NOW).unwrap_err();
        assert!(
            with_causes(&error)
                .starts_with("body: not valid JSON for content type application/json: ")
        );
        assert_eq!(error.field(), None);
    }

    #[cfg(feature = "encryption")]
    #[test]
    fn an_encrypted_body_shows_its_key_id_and_with_the_ring_its_plaintext() {
        use crate::codec::encrypted::{ENCRYPTED_CONTENT_TYPE, seal};
        use crate::codec::keyring::KeyRing;
        let keys = KeyRing::new("k1", &[7; 32]).unwrap();
        let other = KeyRing::new("k2", &[8; 32]).unwrap();
        let encrypted = Some(ENCRYPTED_CONTENT_TYPE);
        let view = |body: &[u8], keys| {
            serde_json::to_value(EncryptedView::of(encrypted, body, keys).unwrap()).unwrap()
        };
        let body = seal(&keys, b"{\"id\":\"o-1\"}").unwrap();
        assert_eq!(
            view(&body, Some(&keys)),
            json!({"key_id": "k1", "payload": {"id": "o-1"}, "note": null})
        );
        assert_eq!(
            view(&body, None),
            json!({"key_id": "k1", "payload": null, "note": "no key ring given: the plaintext is not shown"})
        );
        let unknown = view(&body, Some(&other));
        assert_eq!(unknown["key_id"], "k1");
        assert!(
            unknown["note"].as_str().unwrap().contains("it holds k2"),
            "{unknown}"
        );
        let text = seal(&keys, b"plain words").unwrap();
        assert_eq!(view(&text, Some(&keys))["payload"], "plain words");
        let binary = seal(&keys, &[0xff, 0x00]).unwrap();
        assert_eq!(
            view(&binary, Some(&keys))["payload"],
            json!({"base64": "/wA="})
        );
        let plain = view(b"{}", Some(&keys));
        assert_eq!(plain["key_id"], Value::Null);
        assert!(
            plain["note"]
                .as_str()
                .unwrap()
                .starts_with("not an encrypted AceMQ body")
        );
        assert!(EncryptedView::of(Some("application/json"), &body, Some(&keys)).is_none());
        assert!(EncryptedView::of(None, &body, Some(&keys)).is_none());
    }

    #[test]
    fn a_view_puts_the_inspection_beside_the_wire_message() {
        let message = encode(
            &json!({"id": "m-1", "routing_key": "q", "payload": [1]}),
            "o",
            NOW,
        )
        .unwrap();
        let view = MessageView::new(message.clone(), true, NOW);
        assert!(view.redelivered());
        assert_eq!(view.message(), &message);
        let written = serde_json::to_value(&view).unwrap();
        assert_eq!(written["redelivered"], true);
        assert_eq!(written["envelope"]["id"], "m-1");
        assert_eq!(written["envelope"]["payload"], json!([1]));
        assert!(written.get("envelope_error").is_none());
        assert_eq!(MessageJson::from_json(&written).unwrap(), message);
        assert_eq!(view.inspection().unwrap().envelope().id(), "m-1");

        let broken = MessageJson::parse(
            r#"{"properties": {"content_type": "application/json"}, "body": "{"}"#,
        )
        .unwrap();
        let view = MessageView::new(broken, false, NOW);
        let written = serde_json::to_value(&view).unwrap();
        assert_eq!(written["envelope"], Value::Null);
        assert!(
            written["envelope_error"]
                .as_str()
                .unwrap()
                .starts_with("body: not valid JSON")
        );
        assert!(view.inspection().is_err());
    }
}
