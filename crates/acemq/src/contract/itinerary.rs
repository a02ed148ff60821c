//! The carried routing slip: the `acemq-routing-slip` JSON itinerary that Go, Python and Ruby
//! write by default and Java reads as `Itinerary`.

use polyq_amqp::{FieldTable, FieldValue};
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use crate::contract::envelope::Envelope;
use crate::contract::{headers, lenient};
use crate::error::{Error, Result};

/// One stop of an itinerary. Empty strings are absent: `name` and `completed_at` are then
/// left out of the JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stop {
    exchange: String,
    #[serde(rename = "routingKey")]
    routing_key: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    #[serde(rename = "completedAt", skip_serializing_if = "String::is_empty")]
    completed_at: String,
}

impl Stop {
    /// A stop publishing to `exchange` (`""` is the default exchange, where the routing key is
    /// a queue name) with `routing_key`, named `name` for logs (may be empty).
    pub fn new(
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            name: name.into(),
            completed_at: String::new(),
        }
    }

    /// The exchange, empty for the default one.
    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    /// The routing key.
    pub fn routing_key(&self) -> &str {
        &self.routing_key
    }

    /// The name, empty when the stop was never given one.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// When the stop was completed, exactly as written (Java and Go write seconds with `Z`,
    /// Python microseconds with `+00:00`; nothing computes with it), empty while it has not been.
    pub fn completed_at(&self) -> &str {
        &self.completed_at
    }
}

/// The stops a message still has to make and the ones it made, carried in the message.
///
/// Written byte-identical to Java and Go: compact JSON, fields in the order `exchange`,
/// `routingKey`, `name`, `completedAt`, and `done` omitted while empty.
///
/// ```
/// use acemq::{Itinerary, Stop};
/// use time::macros::datetime;
///
/// let slip = Itinerary::of([
///     Stop::new("billing", "invoice.create", "create"),
///     Stop::new("billing", "invoice.send", "send"),
/// ]);
/// assert_eq!(
///     slip.to_json(),
///     r#"{"steps":[{"exchange":"billing","routingKey":"invoice.create","name":"create"},{"exchange":"billing","routingKey":"invoice.send","name":"send"}]}"#
/// );
/// let next = slip.advance(datetime!(2026-01-02 03:04:05.678 UTC));
/// assert_eq!(next.next().map(|stop| stop.routing_key()), Some("invoice.send"));
/// assert_eq!(next.done()[0].completed_at(), "2026-01-02T03:04:05Z");
/// assert_eq!(Itinerary::parse(&next.to_json())?, next);
/// # Ok::<(), acemq::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Itinerary {
    steps: Vec<Stop>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    done: Vec<Stop>,
}

impl Itinerary {
    /// An itinerary of `stops`, none done yet.
    pub fn of(stops: impl IntoIterator<Item = Stop>) -> Self {
        Self {
            steps: stops.into_iter().collect(),
            done: Vec::new(),
        }
    }

    /// A copy with `stop` appended to the stops still to make.
    pub fn then(&self, stop: Stop) -> Self {
        let mut extended = self.clone();
        extended.steps.push(stop);
        extended
    }

    /// The stop the message is going to, or `None` when the itinerary is finished.
    pub fn next(&self) -> Option<&Stop> {
        self.steps.first()
    }

    /// A copy with the first stop moved to the end of `done`, stamped with `now` to the second
    /// in UTC. An itinerary with no stops left is returned unchanged.
    pub fn advance(&self, now: OffsetDateTime) -> Self {
        let mut advanced = self.clone();
        if !advanced.steps.is_empty() {
            let mut stop = advanced.steps.remove(0);
            stop.completed_at = lenient::rfc3339_seconds(now);
            advanced.done.push(stop);
        }
        advanced
    }

    /// Whether every stop has been made.
    pub fn is_finished(&self) -> bool {
        self.steps.is_empty()
    }

    /// The stops still to make, in order.
    pub fn steps(&self) -> &[Stop] {
        &self.steps
    }

    /// The stops already made, oldest first.
    pub fn done(&self) -> &[Stop] {
        &self.done
    }

    /// The header value as it travels: compact JSON.
    pub fn to_json(&self) -> String {
        // Only strings and vectors of them: serialising cannot fail, and an empty object is
        // never what this type holds.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Writes the itinerary into `headers` under `acemq-routing-slip`.
    pub fn write_headers(&self, table: &mut FieldTable) {
        table.insert(
            headers::ROUTING_SLIP.into(),
            FieldValue::from(self.to_json()),
        );
    }

    /// Reads the itinerary a message carries, or `None` when it has no `acemq-routing-slip`
    /// header.
    ///
    /// A header that is not text, not JSON, not an object, or whose `steps` or `done` is
    /// neither an array nor null, is [`Error::InvalidItinerary`]; the runtime treats that as
    /// fatal.
    pub fn from_headers(table: &FieldTable) -> Result<Option<Self>> {
        let Some(value) = table.get(headers::ROUTING_SLIP) else {
            return Ok(None);
        };
        let text = match value {
            FieldValue::LongString(bytes) | FieldValue::ByteArray(bytes) => {
                std::str::from_utf8(bytes).map_err(|_| invalid("the header is not UTF-8 text"))?
            }
            other => {
                return Err(invalid(format!(
                    "the header has to be text, and this one is of AMQP type '{}'",
                    other.type_letter()
                )));
            }
        };
        Self::parse(text).map(Some)
    }

    /// Parses an itinerary in any form the ports write: compact or spaced, `done` absent, null
    /// or `[]`, any `completedAt` format. Missing or null `steps` is an empty list, and a stop's
    /// missing or null field is empty.
    pub fn parse(text: &str) -> Result<Self> {
        let root: Value =
            serde_json::from_str(text).map_err(|e| invalid(format!("not JSON: {e}")))?;
        let Value::Object(root) = root else {
            return Err(invalid(format!(
                "a routing slip has to be a JSON object, and this one is: {}",
                abbreviate(text)
            )));
        };
        Ok(Self {
            steps: stops(root.get("steps"), "steps")?,
            done: stops(root.get("done"), "done")?,
        })
    }
}

impl Envelope {
    /// The carried itinerary in this message's `acemq-routing-slip` header; see
    /// [`Itinerary::from_headers`].
    pub fn itinerary(&self) -> Result<Option<Itinerary>> {
        Itinerary::from_headers(self.headers())
    }
}

fn stops(value: Option<&Value>, field: &str) -> Result<Vec<Stop>> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items.iter().map(stop).collect()),
        Some(other) => Err(invalid(format!(
            "the {field} of a routing slip have to be a JSON array, and these are: {}",
            abbreviate(&other.to_string())
        ))),
    }
}

fn stop(value: &Value) -> Stop {
    // Read as Java reads a node: a field that is missing, null or not scalar is empty.
    let text = |field: &str| match value.get(field) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    };
    Stop {
        exchange: text("exchange"),
        routing_key: text("routingKey"),
        name: text("name"),
        completed_at: text("completedAt"),
    }
}

fn abbreviate(text: &str) -> String {
    const LIMIT: usize = 120;
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidItinerary {
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JAVA: &str = r#"{"steps":[{"exchange":"billing","routingKey":"invoice.send","name":"send"}],"done":[{"exchange":"billing","routingKey":"invoice.create","name":"create","completedAt":"2026-01-02T03:04:05Z"}]}"#;

    #[test]
    fn java_and_go_bytes_round_trip_exactly() {
        let slip = Itinerary::parse(JAVA).unwrap();
        assert_eq!(slip.to_json(), JAVA);
        assert_eq!(slip.steps()[0].name(), "send");
        assert_eq!(slip.done()[0].completed_at(), "2026-01-02T03:04:05Z");
    }

    #[test]
    fn python_form_reads_the_same() {
        let python = r#"{"steps": [{"exchange": "", "routingKey": "q"}], "done": []}"#;
        let slip = Itinerary::parse(python).unwrap();
        assert_eq!(
            slip.to_json(),
            r#"{"steps":[{"exchange":"","routingKey":"q"}]}"#
        );
        let python_done = r#"{"steps": [], "done": [{"exchange": "x", "routingKey": "k", "completedAt": "2026-01-02T03:04:05.123456+00:00"}]}"#;
        let slip = Itinerary::parse(python_done).unwrap();
        assert!(slip.is_finished());
        assert_eq!(
            slip.done()[0].completed_at(),
            "2026-01-02T03:04:05.123456+00:00"
        );
    }

    #[test]
    fn unreadable_slips_are_typed_errors() {
        for bad in [
            "",
            "not json",
            "[]",
            "\"text\"",
            r#"{"steps":{}}"#,
            r#"{"done":"x"}"#,
        ] {
            assert!(
                matches!(Itinerary::parse(bad), Err(Error::InvalidItinerary { .. })),
                "{bad}"
            );
        }
        let mut table = FieldTable::new();
        table.insert(headers::ROUTING_SLIP.into(), FieldValue::I32(1));
        assert!(Itinerary::from_headers(&table).is_err());
        table.insert(
            headers::ROUTING_SLIP.into(),
            FieldValue::LongString(vec![0xff]),
        );
        assert!(Itinerary::from_headers(&table).is_err());
        assert_eq!(Itinerary::from_headers(&FieldTable::new()), Ok(None));
    }

    #[test]
    fn missing_steps_are_empty_and_advancing_a_finished_slip_changes_nothing() {
        let slip = Itinerary::parse("{}").unwrap();
        assert!(slip.is_finished());
        assert_eq!(slip.advance(OffsetDateTime::UNIX_EPOCH), slip);
        assert_eq!(slip.to_json(), r#"{"steps":[]}"#);
    }

    #[test]
    fn then_appends_and_headers_carry_the_json() {
        let slip = Itinerary::default().then(Stop::new("", "q", ""));
        let mut table = FieldTable::new();
        slip.write_headers(&mut table);
        assert_eq!(Itinerary::from_headers(&table), Ok(Some(slip)));
    }
}
