//! The envelope on the wire: AMQP headers and the `message-id` property.
//!
//! Writing puts out strings and integers only, with the widths the Java reference uses (`I` for
//! version, attempt, route position and replay count; `l` for first seen), and writes the
//! envelope's fields over the application headers so the two cannot disagree. Reading is
//! forgiving in one direction only: any integer width, floats, numeric strings and byte strings
//! are accepted, missing or unreadable values take their defaults, and every reserved header,
//! known or not, is kept out of the application headers. Reading never fails and never panics.

use polyq_amqp::{FieldTable, FieldValue, Properties};
use time::OffsetDateTime;

use crate::contract::envelope::{Envelope, EnvelopeBuilder, FALLBACK_TYPE, new_id};
use crate::contract::route::RoutingSlip;
use crate::contract::{headers, lenient};

impl Envelope {
    /// The headers to publish: the application headers with every envelope field written over
    /// them. Absent optional fields write nothing.
    ///
    /// ```
    /// use acemq::Envelope;
    /// use polyq_amqp::FieldValue;
    ///
    /// let envelope = Envelope::of("order.placed").id("m-1").header("x-tenant", "acme").build()?;
    /// let headers = envelope.to_headers();
    /// assert_eq!(headers["x-acemq-id"], FieldValue::from("m-1"));
    /// assert_eq!(headers["x-acemq-attempt"], FieldValue::I32(1));
    /// assert_eq!(headers["x-acemq-first-seen"].type_letter(), 'l');
    /// assert_eq!(headers["x-tenant"], FieldValue::from("acme"));
    /// assert!(!headers.contains_key("x-acemq-causation"));
    /// # Ok::<(), acemq::Error>(())
    /// ```
    pub fn to_headers(&self) -> FieldTable {
        let mut table = self.headers().clone();
        let mut put = |name: &str, value: FieldValue| {
            table.insert(name.to_owned(), value);
        };
        put(headers::ID, FieldValue::from(self.id()));
        put(headers::TYPE, FieldValue::from(self.message_type()));
        put(headers::VERSION, int32(self.version()));
        put(
            headers::CORRELATION,
            FieldValue::from(self.correlation_id()),
        );
        put(headers::ATTEMPT, int32(self.attempt()));
        put(
            headers::FIRST_SEEN,
            FieldValue::I64(lenient::to_epoch_millis(self.first_seen())),
        );
        for (name, value) in [
            (headers::CAUSATION, self.causation_id()),
            (headers::ORIGIN, self.origin()),
            (headers::ERROR, self.error()),
            (headers::CLAIM, self.claim()),
            (headers::REPLAYED_FROM, self.replayed_from()),
        ] {
            if let Some(value) = value {
                put(name, FieldValue::from(value));
            }
        }
        if let Some(at) = self.replayed_at() {
            put(
                headers::REPLAYED_AT,
                FieldValue::from(lenient::rfc3339_millis(at)),
            );
        }
        if self.replay_count() > 0 {
            put(headers::REPLAY_COUNT, int32(self.replay_count()));
        }
        if let Some(route) = self.route() {
            route.write_headers(&mut table);
        }
        table
    }

    /// Writes the envelope into publish properties: the headers of
    /// [`Envelope::to_headers`] replace `properties.headers`, and `message-id` mirrors the id.
    /// An id longer than the 255 bytes the property holds travels in `x-acemq-id` alone, the
    /// property left out, so that a message another port sent with such an id can still be
    /// retried and set aside. Content type and delivery mode are the publisher's and are left
    /// alone.
    ///
    /// ```
    /// use acemq::Envelope;
    /// use polyq_amqp::{FieldValue, Properties};
    ///
    /// let long = "i".repeat(300);
    /// let mut properties = Properties::default();
    /// Envelope::of("order.placed").id(long.as_str()).build()?.write_properties(&mut properties);
    /// assert_eq!(properties.message_id, None);
    /// assert_eq!(properties.headers["x-acemq-id"], FieldValue::from(long.as_str()));
    /// # Ok::<(), acemq::Error>(())
    /// ```
    pub fn write_properties(&self, properties: &mut Properties) {
        properties.headers = self.to_headers();
        properties.message_id = polyq_amqp::short_string_or_none(self.id());
    }

    /// Reads the envelope a handler sees from a delivery's properties and routing key, with
    /// the system clock as "now" for a missing first-seen time.
    pub fn from_properties(properties: &Properties, routing_key: &str) -> Envelope {
        Self::from_headers(
            &properties.headers,
            routing_key,
            properties.message_id.as_deref(),
        )
    }

    /// Reads an envelope from headers, routing key and AMQP `message-id`; see
    /// [`Envelope::from_headers_at`].
    pub fn from_headers(
        table: &FieldTable,
        routing_key: &str,
        message_id: Option<&str>,
    ) -> Envelope {
        Self::from_headers_at(table, routing_key, message_id, OffsetDateTime::now_utc())
    }

    /// Reads an envelope, taking `now` as the first-seen time when the header is missing or
    /// unreadable.
    ///
    /// Fallbacks: a missing type is the routing key (an empty routing key gives `message`); a
    /// missing id is the `message-id`, then a new UUID; a missing correlation is the id;
    /// unreadable version or attempt is 1. A message with no AceMQ headers at all reads as a
    /// first attempt typed by its routing key.
    ///
    /// ```
    /// use acemq::Envelope;
    /// use polyq_amqp::{FieldTable, FieldValue};
    ///
    /// let mut headers = FieldTable::new();
    /// headers.insert("x-acemq-attempt".into(), FieldValue::from("4"));
    /// headers.insert("x-acemq-from-the-future".into(), FieldValue::from("?"));
    /// headers.insert("x-tenant".into(), FieldValue::from("acme"));
    /// let envelope = Envelope::from_headers(&headers, "order.placed", Some("m-1"));
    /// assert_eq!(envelope.id(), "m-1");
    /// assert_eq!(envelope.message_type(), "order.placed");
    /// assert_eq!(envelope.attempt(), 4);
    /// assert_eq!(envelope.headers().keys().collect::<Vec<_>>(), ["x-tenant"]);
    /// ```
    pub fn from_headers_at(
        table: &FieldTable,
        routing_key: &str,
        message_id: Option<&str>,
        now: OffsetDateTime,
    ) -> Envelope {
        let get = |name: &str| table.get(name);
        let id = lenient::text(get(headers::ID))
            .or_else(|| message_id.filter(|id| !id.is_empty()).map(str::to_owned))
            .unwrap_or_else(new_id);
        let mut builder = Envelope::of(
            lenient::text(get(headers::TYPE)).unwrap_or_else(|| type_for(routing_key).to_owned()),
        )
        .id(id)
        .version(lenient::counter(get(headers::VERSION), 1).unwrap_or(1))
        .attempt(lenient::counter(get(headers::ATTEMPT), 1).unwrap_or(1))
        .route(RoutingSlip::from_headers(table))
        .headers(
            table
                .iter()
                .filter(|(name, _)| !headers::is_ace_header(name))
                .map(|(name, value)| (name.clone(), value.clone())),
        );
        builder = set_text(
            builder,
            get(headers::CORRELATION),
            EnvelopeBuilder::correlation_id,
        );
        builder = set_text(
            builder,
            get(headers::CAUSATION),
            EnvelopeBuilder::causation_id,
        );
        builder = set_text(builder, get(headers::ORIGIN), EnvelopeBuilder::origin);
        builder = set_text(builder, get(headers::ERROR), EnvelopeBuilder::error);
        builder = set_text(builder, get(headers::CLAIM), EnvelopeBuilder::claim);
        if let Some(first_seen) = lenient::epoch_millis(get(headers::FIRST_SEEN)) {
            builder = builder.first_seen(first_seen);
        }
        builder.assemble(now)
    }
}

/// The type a message gets from its routing key when it carries none: the routing key itself,
/// or `message` for the empty routing key of a fanout publish.
///
/// ```
/// assert_eq!(acemq::wire::type_for("order.placed"), "order.placed");
/// assert_eq!(acemq::wire::type_for(""), "message");
/// ```
pub fn type_for(routing_key: &str) -> &str {
    if routing_key.is_empty() {
        FALLBACK_TYPE
    } else {
        routing_key
    }
}

/// Milliseconds since the Unix epoch, as `x-acemq-first-seen` carries them.
///
/// ```
/// use acemq::wire::{epoch_millis, from_epoch_millis};
///
/// let at = from_epoch_millis(1_767_323_045_678).unwrap();
/// assert_eq!(epoch_millis(at), 1_767_323_045_678);
/// ```
pub fn epoch_millis(at: OffsetDateTime) -> i64 {
    lenient::to_epoch_millis(at)
}

/// The instant `millis` after the Unix epoch, when the calendar can represent it.
pub fn from_epoch_millis(millis: i64) -> Option<OffsetDateTime> {
    lenient::from_epoch_millis(millis)
}

/// `acemq-replayed-at` as written: RFC 3339 in UTC with milliseconds and `Z`.
///
/// ```
/// let at = acemq::wire::from_epoch_millis(1_770_091_506_789).unwrap();
/// assert_eq!(acemq::wire::format_instant(at), "2026-02-03T04:05:06.789Z");
/// ```
pub fn format_instant(at: OffsetDateTime) -> String {
    lenient::rfc3339_millis(at)
}

/// An instant in any form `acemq-replayed-at` travels in: epoch milliseconds (a number or
/// numeric text), RFC 3339 with `Z`, or with an offset such as Python's `+00:00`.
///
/// ```
/// use acemq::wire::read_instant;
/// use polyq_amqp::FieldValue;
///
/// let legacy = read_instant(&FieldValue::I64(1_770_091_506_789));
/// assert_eq!(legacy, read_instant(&FieldValue::from("2026-02-03T04:05:06.789Z")));
/// assert_eq!(legacy, read_instant(&FieldValue::from("2026-02-03T04:05:06.789000+00:00")));
/// assert_eq!(read_instant(&FieldValue::from("soon")), None);
/// ```
pub fn read_instant(value: &FieldValue) -> Option<OffsetDateTime> {
    lenient::instant(Some(value))
}

fn set_text(
    builder: EnvelopeBuilder,
    value: Option<&FieldValue>,
    set: fn(EnvelopeBuilder, String) -> EnvelopeBuilder,
) -> EnvelopeBuilder {
    match lenient::text(value) {
        Some(text) => set(builder, text),
        None => builder,
    }
}

fn int32(value: u32) -> FieldValue {
    // Envelope counters are bounded by i32::MAX at build.
    FieldValue::I32(i32::try_from(value).unwrap_or(i32::MAX))
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const NOW: OffsetDateTime = datetime!(2026-05-06 07:08:09.010 UTC);

    #[test]
    fn no_headers_reads_as_a_first_attempt_typed_by_the_routing_key() {
        let envelope = Envelope::from_headers_at(&FieldTable::new(), "orders.new", None, NOW);
        assert_eq!(envelope.message_type(), "orders.new");
        assert_eq!(envelope.attempt(), 1);
        assert_eq!(envelope.version(), 1);
        assert_eq!(envelope.first_seen(), NOW);
        assert_eq!(envelope.id().len(), 36);
        assert_eq!(envelope.correlation_id(), envelope.id());
        let fanout = Envelope::from_headers_at(&FieldTable::new(), "", Some(""), NOW);
        assert_eq!(fanout.message_type(), "message");
        assert_eq!(fanout.id().len(), 36);
    }

    #[test]
    fn unreadable_values_take_their_defaults() {
        let table: FieldTable = [
            (headers::ID, FieldValue::from("")),
            (headers::VERSION, FieldValue::I8(0)),
            (headers::ATTEMPT, FieldValue::from("soon")),
            (headers::FIRST_SEEN, FieldValue::Bool(true)),
            (headers::ORIGIN, FieldValue::from("")),
            (headers::TYPE, FieldValue::Array(vec![])),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let envelope = Envelope::from_headers_at(&table, "rk", Some("mid"), NOW);
        assert_eq!(envelope.id(), "mid");
        assert_eq!(envelope.message_type(), "rk");
        assert_eq!((envelope.version(), envelope.attempt()), (1, 1));
        assert_eq!(envelope.first_seen(), NOW);
        assert_eq!(envelope.origin(), None);
        assert!(envelope.headers().is_empty());
    }

    #[test]
    fn writing_uses_java_widths_and_mirrors_the_message_id() {
        let envelope = Envelope::of("t")
            .route(RoutingSlip::new(["a"], 0, "r").unwrap())
            .replay_count(2)
            .build_at(NOW)
            .unwrap();
        let mut properties = Properties::default().with_content_type("application/json");
        envelope.write_properties(&mut properties);
        let table = &properties.headers;
        assert_eq!(properties.message_id.as_deref(), Some(envelope.id()));
        assert_eq!(properties.content_type.as_deref(), Some("application/json"));
        for (name, letter) in [
            (headers::VERSION, 'I'),
            (headers::ATTEMPT, 'I'),
            (headers::ROUTE_POSITION, 'I'),
            (headers::REPLAY_COUNT, 'I'),
            (headers::FIRST_SEEN, 'l'),
            (headers::ID, 'S'),
            (headers::ROUTE, 'S'),
        ] {
            assert_eq!(table[name].type_letter(), letter, "{name}");
        }
        assert_eq!(Envelope::from_properties(&properties, "ignored"), envelope);
    }
}
