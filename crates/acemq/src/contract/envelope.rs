//! The envelope: identity, causation, provenance and the counters the retry engine keeps.

use std::time::Duration;

use polyq_amqp::{FieldTable, FieldValue};
use time::OffsetDateTime;

use crate::contract::route::RoutingSlip;
use crate::contract::{headers, lenient};
use crate::error::{Error, Result};

/// The type given to a message whose routing key is empty (a fanout publish): there is no such
/// thing as an empty type.
pub const FALLBACK_TYPE: &str = "message";

/// What travels with a message besides its body.
///
/// Immutable: the engine derives a new envelope ([`Envelope::next_attempt`],
/// [`Envelope::causing`], [`Envelope::to_builder`]) rather than changing one, so the envelope a
/// handler was given still says what it said after the retry path built the next one. Optional
/// values are `Option`s: an absent value is an absent header, never an empty one.
///
/// The replay stamps are shared-namespace headers, so they appear twice, as fields and as
/// entries of [`Envelope::headers`]; the two always agree (a set field is written over the
/// header at build, and a replay header given without its field is read into it).
///
/// ```
/// use acemq::Envelope;
///
/// let envelope = Envelope::of("order.placed")
///     .version(2)
///     .header("x-tenant", "acme")
///     .build()?;
/// assert_eq!(envelope.message_type(), "order.placed");
/// assert_eq!(envelope.attempt(), 1);
/// assert_eq!(envelope.correlation_id(), envelope.id());
/// assert_eq!(envelope.causation_id(), None);
///
/// let retry = envelope.next_attempt()?;
/// assert_eq!(retry.attempt(), 2);
/// assert_eq!(retry.first_seen(), envelope.first_seen());
/// # Ok::<(), acemq::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    id: String,
    message_type: String,
    version: u32,
    correlation_id: String,
    causation_id: Option<String>,
    attempt: u32,
    first_seen: OffsetDateTime,
    origin: Option<String>,
    error: Option<String>,
    claim: Option<String>,
    route: Option<RoutingSlip>,
    replayed_from: Option<String>,
    replayed_at: Option<OffsetDateTime>,
    replay_count: u32,
    headers: FieldTable,
}

impl Envelope {
    /// Starts an envelope for the logical type `message_type` (an empty type becomes
    /// [`FALLBACK_TYPE`]).
    pub fn of(message_type: impl Into<String>) -> EnvelopeBuilder {
        EnvelopeBuilder::new(message_type.into())
    }

    /// Unique message identifier and the default idempotency key.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The logical type, such as `order.placed`.
    pub fn message_type(&self) -> &str {
        &self.message_type
    }

    /// Payload schema version, at least 1.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Identifier of the whole flow; a chain starts by correlating with itself.
    pub fn correlation_id(&self) -> &str {
        &self.correlation_id
    }

    /// Identifier of the immediate parent message.
    pub fn causation_id(&self) -> Option<&str> {
        self.causation_id.as_deref()
    }

    /// Delivery attempt, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the message was first published, to the millisecond.
    pub fn first_seen(&self) -> OffsetDateTime {
        self.first_seen
    }

    /// The publishing process, conventionally `service@host`.
    pub fn origin(&self) -> Option<&str> {
        self.origin.as_deref()
    }

    /// Why the message was set aside into `.dlq` or `.parked`.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Where the payload is, if the application stored it outside the message.
    pub fn claim(&self) -> Option<&str> {
        self.claim.as_deref()
    }

    /// The declared-pipeline route, when the message is travelling one.
    pub fn route(&self) -> Option<&RoutingSlip> {
        self.route.as_ref()
    }

    /// The queue the message was replayed from, when it is a replay.
    pub fn replayed_from(&self) -> Option<&str> {
        self.replayed_from.as_deref()
    }

    /// When it was last replayed, to the millisecond.
    pub fn replayed_at(&self) -> Option<OffsetDateTime> {
        self.replayed_at
    }

    /// How many times it has been replayed; 0 for a message that never was.
    pub fn replay_count(&self) -> u32 {
        self.replay_count
    }

    /// Application headers: everything but the reserved `x-acemq-` ones.
    pub fn headers(&self) -> &FieldTable {
        &self.headers
    }

    /// Age at `now`, measured from [`Envelope::first_seen`]. A first-seen time in the future
    /// (clock skew between hosts) gives zero: a negative age behaves as young.
    ///
    /// ```
    /// use std::time::Duration;
    /// use acemq::Envelope;
    /// use time::macros::datetime;
    ///
    /// let envelope = Envelope::of("t")
    ///     .first_seen(datetime!(2026-01-01 00:00 UTC))
    ///     .build()?;
    /// assert_eq!(envelope.age_at(datetime!(2026-01-01 00:02 UTC)), Duration::from_secs(120));
    /// assert_eq!(envelope.age_at(datetime!(2025-12-31 00:00 UTC)), Duration::ZERO);
    /// # Ok::<(), acemq::Error>(())
    /// ```
    pub fn age_at(&self, now: OffsetDateTime) -> Duration {
        Duration::try_from(now - self.first_seen).unwrap_or(Duration::ZERO)
    }

    /// Age now, by the system clock; see [`Envelope::age_at`].
    pub fn age(&self) -> Duration {
        self.age_at(OffsetDateTime::now_utc())
    }

    /// A copy for the next delivery attempt: the counter advanced, everything else (first seen
    /// included) preserved.
    ///
    /// Fails only when the attempt would pass the wire's 32-bit ceiling.
    pub fn next_attempt(&self) -> Result<Envelope> {
        self.to_builder()
            .attempt(self.attempt.saturating_add(1))
            .build()
    }

    /// The envelope a replay republishes: back to attempt 1 (so the message gets the whole
    /// retry ladder again), stamped with the queue it came back from, the replay time and a
    /// replay count one higher. Everything else is kept, first seen included (an age-limited
    /// policy may therefore give up on a replayed message at its first failure), and so is the
    /// error that put it aside, as Java keeps it.
    ///
    /// ```
    /// use acemq::Envelope;
    /// use time::macros::datetime;
    ///
    /// let failed = Envelope::of("t").attempt(5).error("exhausted 5 attempts: boom").build()?;
    /// let replayed = failed.for_replay("orders.new.dlq", datetime!(2026-02-03 04:05:06.789 UTC));
    /// assert_eq!(replayed.attempt(), 1);
    /// assert_eq!(replayed.replay_count(), 1);
    /// assert_eq!(replayed.replayed_from(), Some("orders.new.dlq"));
    /// assert_eq!(replayed.error(), failed.error());
    /// assert_eq!(replayed.first_seen(), failed.first_seen());
    /// let again = replayed.for_replay("orders.new.dlq", datetime!(2026-02-04 00:00 UTC));
    /// assert_eq!(again.replay_count(), 2);
    /// # Ok::<(), acemq::Error>(())
    /// ```
    pub fn for_replay(&self, from_queue: &str, at: OffsetDateTime) -> Envelope {
        self.to_builder()
            .attempt(1)
            .replayed_from(from_queue)
            .replayed_at(at)
            // Bounded like every counter on the wire; a message replayed two billion times
            // keeps saying so rather than wrapping to zero.
            .replay_count(self.replay_count.saturating_add(1).min(i32::MAX as u32))
            .assemble(self.first_seen)
    }

    /// A builder for a message caused by this one: correlation carried across, causation set
    /// to this message's id, origin inherited, and everything else new (id, first seen, attempt
    /// 1, no application headers).
    ///
    /// ```
    /// use acemq::Envelope;
    ///
    /// let placed = Envelope::of("order.placed").origin("orders@host-7").build()?;
    /// let charged = placed.causing("payment.charged").build()?;
    /// assert_eq!(charged.correlation_id(), placed.correlation_id());
    /// assert_eq!(charged.causation_id(), Some(placed.id()));
    /// assert_eq!(charged.origin(), Some("orders@host-7"));
    /// assert_ne!(charged.id(), placed.id());
    /// # Ok::<(), acemq::Error>(())
    /// ```
    pub fn causing(&self, message_type: impl Into<String>) -> EnvelopeBuilder {
        let mut builder = EnvelopeBuilder::new(message_type.into());
        builder.correlation_id = Some(self.correlation_id.clone());
        builder.causation_id = Some(self.id.clone());
        builder.origin = self.origin.clone();
        builder
    }

    /// A builder holding every value of this envelope, for an interceptor stamping something
    /// onto each outgoing message.
    pub fn to_builder(&self) -> EnvelopeBuilder {
        EnvelopeBuilder {
            id: Some(self.id.clone()),
            message_type: self.message_type.clone(),
            version: self.version,
            correlation_id: Some(self.correlation_id.clone()),
            causation_id: self.causation_id.clone(),
            attempt: self.attempt,
            first_seen: Some(self.first_seen),
            origin: self.origin.clone(),
            error: self.error.clone(),
            claim: self.claim.clone(),
            route: self.route.clone(),
            // The replay fields are in the headers already and are read back from there.
            replayed_from: None,
            replayed_at: None,
            replay_count: None,
            headers: self.headers.clone(),
            refused: None,
        }
    }
}

/// Builds an [`Envelope`]; start with [`Envelope::of`].
///
/// Defaults are applied by [`EnvelopeBuilder::build`], not when reading: a random lowercase
/// UUID v4 id, correlation = id, version 1, attempt 1, first seen = now. An empty string given
/// for any text field means "not set". A reserved header name passed to
/// [`EnvelopeBuilder::header`] is reported by `build`, so chains stay readable.
#[derive(Debug, Clone)]
#[must_use]
pub struct EnvelopeBuilder {
    id: Option<String>,
    message_type: String,
    version: u32,
    correlation_id: Option<String>,
    causation_id: Option<String>,
    attempt: u32,
    first_seen: Option<OffsetDateTime>,
    origin: Option<String>,
    error: Option<String>,
    claim: Option<String>,
    route: Option<RoutingSlip>,
    // `Some("")`, `Some(None)` and `Some(0)` clear; `None` reads the header, if any.
    replayed_from: Option<String>,
    replayed_at: Option<Option<OffsetDateTime>>,
    replay_count: Option<u32>,
    headers: FieldTable,
    refused: Option<Error>,
}

impl EnvelopeBuilder {
    fn new(message_type: String) -> Self {
        Self {
            id: None,
            message_type,
            version: 1,
            correlation_id: None,
            causation_id: None,
            attempt: 1,
            first_seen: None,
            origin: None,
            error: None,
            claim: None,
            route: None,
            replayed_from: None,
            replayed_at: None,
            replay_count: None,
            headers: FieldTable::new(),
            refused: None,
        }
    }

    /// Message identifier. Default: a random lowercase UUID v4.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Logical type, replacing the one given to [`Envelope::of`].
    pub fn message_type(mut self, message_type: impl Into<String>) -> Self {
        self.message_type = message_type.into();
        self
    }

    /// Payload schema version, 1 to 2147483647. Default 1.
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Flow identifier. Default: the message id.
    pub fn correlation_id(mut self, correlation_id: impl Into<String>) -> Self {
        self.correlation_id = Some(correlation_id.into());
        self
    }

    /// Identifier of the message that caused this one. Default: none.
    pub fn causation_id(mut self, causation_id: impl Into<String>) -> Self {
        self.causation_id = Some(causation_id.into());
        self
    }

    /// Delivery attempt, 1 to 2147483647. Default 1.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// First publish time (kept to the millisecond, the precision of the wire). Default: now.
    pub fn first_seen(mut self, first_seen: OffsetDateTime) -> Self {
        self.first_seen = Some(first_seen);
        self
    }

    /// Publishing process, conventionally `service@host`. Default: none, and the publisher
    /// stamps its own (see [`crate::provenance`]).
    pub fn origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = Some(origin.into());
        self
    }

    /// Why the message was set aside. Default: none.
    pub fn error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }

    /// Where an externally stored payload is, conventionally a URI. Default: none; the engine
    /// never sets it.
    pub fn claim(mut self, claim: impl Into<String>) -> Self {
        self.claim = Some(claim.into());
        self
    }

    /// The declared-pipeline route, or `None` to clear it. Default: none.
    pub fn route(mut self, route: impl Into<Option<RoutingSlip>>) -> Self {
        self.route = route.into();
        self
    }

    /// Queue the message was replayed from. Default: read from the `acemq-replayed-from`
    /// header, if present.
    pub fn replayed_from(mut self, queue: impl Into<String>) -> Self {
        self.replayed_from = Some(queue.into());
        self
    }

    /// When it was replayed (kept to the millisecond), or `None` to clear it. Default: read
    /// from the `acemq-replayed-at` header, if present.
    pub fn replayed_at(mut self, at: impl Into<Option<OffsetDateTime>>) -> Self {
        self.replayed_at = Some(at.into());
        self
    }

    /// How many times it has been replayed; 0 clears it. Default: read from the
    /// `acemq-replay-count` header, if present, else 0.
    pub fn replay_count(mut self, count: u32) -> Self {
        self.replay_count = Some(count);
        self
    }

    /// Adds one application header. A reserved `x-acemq-` name is refused: `build` then fails
    /// with [`Error::ReservedHeader`].
    ///
    /// ```
    /// use acemq::Envelope;
    ///
    /// let err = Envelope::of("order.placed").header("x-acemq-id", "mine").build().unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "header 'x-acemq-id' is owned by AceMQ and is derived from the envelope, so it cannot be set directly"
    /// );
    /// ```
    pub fn header(mut self, name: impl Into<String>, value: impl Into<FieldValue>) -> Self {
        let name = name.into();
        if headers::is_ace_header(&name) {
            self.refused.get_or_insert(Error::ReservedHeader { name });
        } else {
            self.headers.insert(name, value.into());
        }
        self
    }

    /// Adds application headers, silently skipping reserved names: this is the form for copying
    /// an incoming message's headers onto an outgoing one, where reserved names are expected
    /// and must not propagate.
    ///
    /// ```
    /// use acemq::Envelope;
    /// use polyq_amqp::FieldValue;
    ///
    /// let incoming = [
    ///     ("x-acemq-id".to_owned(), FieldValue::from("old")),
    ///     ("x-tenant".to_owned(), FieldValue::from("acme")),
    /// ];
    /// let envelope = Envelope::of("t").headers(incoming).build()?;
    /// assert_eq!(envelope.headers().len(), 1);
    /// # Ok::<(), acemq::Error>(())
    /// ```
    pub fn headers<I, K>(mut self, headers: I) -> Self
    where
        I: IntoIterator<Item = (K, FieldValue)>,
        K: Into<String>,
    {
        for (name, value) in headers {
            let name = name.into();
            if !headers::is_ace_header(&name) {
                self.headers.insert(name, value);
            }
        }
        self
    }

    /// Builds with the system clock as "now"; see [`EnvelopeBuilder::build_at`].
    pub fn build(self) -> Result<Envelope> {
        self.build_at(OffsetDateTime::now_utc())
    }

    /// Builds, taking `now` as the default first-seen time.
    ///
    /// Fails when a reserved header was given to [`EnvelopeBuilder::header`], or when version or
    /// attempt is below 1 (refused rather than corrected: a caller asking for attempt 0 has a
    /// bug) or above the wire's 2147483647, and likewise for a replay count above it.
    pub fn build_at(self, now: OffsetDateTime) -> Result<Envelope> {
        if let Some(refused) = self.refused {
            return Err(refused);
        }
        check_counter("version", self.version, 1)?;
        check_counter("attempt", self.attempt, 1)?;
        if let Some(count) = self.replay_count {
            check_counter("replay_count", count, 0)?;
        }
        Ok(self.assemble(now))
    }

    /// Applies the defaults; the counters have been checked.
    pub(crate) fn assemble(self, now: OffsetDateTime) -> Envelope {
        let mut headers = self.headers;
        let replayed_from = reconcile(
            &mut headers,
            headers::REPLAYED_FROM,
            self.replayed_from.map(non_empty),
            lenient::text,
            |queue| FieldValue::from(queue.as_str()),
        );
        let replayed_at = reconcile(
            &mut headers,
            headers::REPLAYED_AT,
            self.replayed_at
                .map(|at| at.map(lenient::truncate_to_millis)),
            lenient::instant,
            |at| FieldValue::from(lenient::rfc3339_millis(*at)),
        );
        let replay_count = reconcile(
            &mut headers,
            headers::REPLAY_COUNT,
            self.replay_count.map(|count| (count > 0).then_some(count)),
            |value| lenient::counter(value, 1),
            |count| FieldValue::I32(i32::try_from(*count).unwrap_or(i32::MAX)),
        );
        let id = self.id.and_then(non_empty).unwrap_or_else(new_id);
        let message_type = non_empty(self.message_type).unwrap_or_else(|| FALLBACK_TYPE.into());
        Envelope {
            correlation_id: self
                .correlation_id
                .and_then(non_empty)
                .unwrap_or_else(|| id.clone()),
            id,
            message_type,
            version: self.version,
            causation_id: self.causation_id.and_then(non_empty),
            attempt: self.attempt,
            first_seen: lenient::truncate_to_millis(self.first_seen.unwrap_or(now)),
            origin: self.origin.and_then(non_empty),
            error: self.error.and_then(non_empty),
            claim: self.claim.and_then(non_empty),
            route: self.route,
            replayed_from,
            replayed_at,
            replay_count: replay_count.unwrap_or(0),
            headers,
        }
    }
}

/// Makes a replay field and its header agree: a field that was set is written over the header
/// (or removes it when cleared); an unset field is read from the header, which is then
/// rewritten in the canonical form.
fn reconcile<T>(
    headers: &mut FieldTable,
    name: &str,
    set: Option<Option<T>>,
    read: impl Fn(Option<&FieldValue>) -> Option<T>,
    write: impl Fn(&T) -> FieldValue,
) -> Option<T> {
    let explicit = set.is_some();
    let value = match set {
        Some(value) => value,
        None => read(headers.get(name)),
    };
    match &value {
        Some(v) => {
            headers.insert(name.to_owned(), write(v));
        }
        None if explicit => {
            headers.remove(name);
        }
        // Unset and unreadable: left exactly as the application gave it.
        None => {}
    }
    value
}

fn check_counter(field: &'static str, value: u32, min: u32) -> Result<()> {
    if value < min || value > i32::MAX as u32 {
        return Err(Error::CounterOutOfRange {
            field,
            min,
            value: u64::from(value),
        });
    }
    Ok(())
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

/// A random lowercase UUID v4, the default message id.
pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn defaults_are_applied_at_build() {
        let now = datetime!(2026-01-02 03:04:05.678_9 UTC);
        let envelope = Envelope::of("t").build_at(now).unwrap();
        assert_eq!(envelope.id().len(), 36);
        assert_eq!(envelope.id(), envelope.id().to_lowercase());
        assert_eq!(
            uuid::Uuid::parse_str(envelope.id())
                .unwrap()
                .get_version_num(),
            4
        );
        assert_eq!(envelope.correlation_id(), envelope.id());
        assert_eq!((envelope.version(), envelope.attempt()), (1, 1));
        assert_eq!(
            envelope.first_seen(),
            datetime!(2026-01-02 03:04:05.678 UTC)
        );
        assert_eq!(envelope.replay_count(), 0);
        assert!(envelope.headers().is_empty());
    }

    #[test]
    fn counters_below_one_are_refused() {
        for (builder, field) in [
            (Envelope::of("t").version(0), "version"),
            (Envelope::of("t").attempt(0), "attempt"),
            (Envelope::of("t").attempt(1 << 31), "attempt"),
            (Envelope::of("t").replay_count(1 << 31), "replay_count"),
        ] {
            match builder.build() {
                Err(Error::CounterOutOfRange { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        assert_eq!(
            Envelope::of("t")
                .attempt(0)
                .build()
                .unwrap_err()
                .to_string(),
            "attempt must be at least 1 and at most 2147483647, was 0"
        );
    }

    #[test]
    fn empty_text_is_absent_and_an_empty_type_is_message() {
        let envelope = Envelope::of("")
            .id("")
            .correlation_id("")
            .causation_id("")
            .origin("")
            .error("")
            .claim("")
            .replayed_from("")
            .build()
            .unwrap();
        assert_eq!(envelope.message_type(), FALLBACK_TYPE);
        assert_eq!(envelope.id().len(), 36);
        assert_eq!(envelope.correlation_id(), envelope.id());
        assert_eq!(
            (
                envelope.causation_id(),
                envelope.origin(),
                envelope.error(),
                envelope.claim()
            ),
            (None, None, None, None)
        );
        assert_eq!(envelope.replayed_from(), None);
    }

    #[test]
    fn shared_headers_are_accepted_and_replay_headers_agree_with_fields() {
        let envelope = Envelope::of("t")
            .header(headers::REPLY_TO, "replies")
            .header(headers::REPLAYED_AT, FieldValue::I64(1_770_091_506_789))
            .header(headers::REPLAY_COUNT, "2")
            .header(headers::REPLAYED_FROM, "orders.new.dlq")
            .build()
            .unwrap();
        assert_eq!(envelope.replay_count(), 2);
        assert_eq!(envelope.replayed_from(), Some("orders.new.dlq"));
        assert_eq!(
            envelope.replayed_at(),
            Some(datetime!(2026-02-03 04:05:06.789 UTC))
        );
        assert_eq!(
            envelope.headers()[headers::REPLAYED_AT],
            FieldValue::from("2026-02-03T04:05:06.789Z")
        );
        assert_eq!(
            envelope.headers()[headers::REPLAY_COUNT],
            FieldValue::I32(2)
        );

        let cleared = envelope
            .to_builder()
            .replay_count(0)
            .replayed_at(None)
            .build()
            .unwrap();
        assert_eq!(cleared.replay_count(), 0);
        assert_eq!(cleared.replayed_at(), None);
        assert!(!cleared.headers().contains_key(headers::REPLAY_COUNT));
        assert!(!cleared.headers().contains_key(headers::REPLAYED_AT));
        assert_eq!(cleared.replayed_from(), Some("orders.new.dlq"));
    }

    #[test]
    fn unreadable_replay_headers_stay_as_given() {
        let envelope = Envelope::of("t")
            .header(headers::REPLAY_COUNT, "many")
            .build()
            .unwrap();
        assert_eq!(envelope.replay_count(), 0);
        assert_eq!(
            envelope.headers()[headers::REPLAY_COUNT],
            FieldValue::from("many")
        );
    }

    #[test]
    fn the_first_reserved_header_is_reported() {
        let err = Envelope::of("t")
            .header("x-acemq-attempt", 3)
            .header("x-acemq-id", "x")
            .build()
            .unwrap_err();
        assert_eq!(
            err,
            Error::ReservedHeader {
                name: "x-acemq-attempt".into()
            }
        );
    }

    #[test]
    fn to_builder_round_trips_and_next_attempt_keeps_everything_else() {
        let envelope = Envelope::of("t")
            .causation_id("c")
            .origin("o@h")
            .error("e")
            .claim("s3://x")
            .route(RoutingSlip::new(["a", "b"], 1, "run").unwrap())
            .replayed_from("q.dlq")
            .replayed_at(datetime!(2026-01-01 00:00 UTC))
            .replay_count(3)
            .header("x-tenant", "acme")
            .build()
            .unwrap();
        assert_eq!(envelope.to_builder().build().unwrap(), envelope);
        let next = envelope.next_attempt().unwrap();
        assert_eq!(next.attempt(), 2);
        assert_eq!(next.to_builder().attempt(1).build().unwrap(), envelope);
        let ceiling = envelope
            .to_builder()
            .attempt(i32::MAX as u32)
            .build()
            .unwrap();
        assert!(ceiling.next_attempt().is_err());
    }
}
