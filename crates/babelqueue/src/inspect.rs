//! What an operator sees of a BabelQueue job: the consumer's verdict on its body, beside the
//! envelope it decodes to.
//!
//! [`Inspection`] is what `polyq babel decode` and `polyq babel consume` print, one JSON object
//! per job, and what every tool that shows jobs renders: whether a consumer would accept the
//! body, why not (a [`Reason`] or a [`PoisonCause`]), its URN, the decode's [`Warning`]s, the
//! canonical re-encoding of the envelope and the out-of-band headers. The verdict is
//! [`classify`]'s, so a job reads here exactly as a worker reads it. No I/O.
//!
//! ```
//! use babelqueue::inspect::Inspection;
//!
//! let body = br#"{"job":"urn:babel:orders:created","data":{},"attempts":1}"#;
//! let seen = Inspection::of_body(body, []);
//! assert_eq!(seen.urn(), Some("urn:babel:orders:created"));
//! assert!(!seen.accepts()); // no meta: a consumer rejects it
//! let printed = serde_json::to_value(&seen)?;
//! assert_eq!(printed["reason"], "missing_meta");
//! assert_eq!(printed["poison"], false);
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::collections::BTreeMap;

use polyq_amqp::MessageJson;
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::projection::{FRAME_KEY, unframe};
use crate::{DeadLetterInfo, Decoded, Envelope, PoisonCause, Reason, Verdict, Warning, classify};

/// A job body as a consumer sees it.
///
/// Serializes as one JSON object with, in this order: `accepts`, `reason` (the
/// [`Reason::as_str`] spelling, or `null`), `urn`, `poison`, `poison_cause` (the cause's message,
/// or `null`), `warnings`, `envelope` (the canonical re-encoding as a string, `null` when the body
/// does not decode) and, when there are any, `headers`.
#[derive(Debug, Clone, PartialEq)]
pub struct Inspection {
    decoded: Option<Decoded>,
    reason: Option<Reason>,
    poison: Option<PoisonCause>,
    headers: BTreeMap<String, String>,
}

impl Inspection {
    /// The verdict on an envelope body and its out-of-band headers.
    ///
    /// A body without identity is poison and still shows the envelope it decodes to (a poison
    /// record's `dead_letter` block, for one).
    pub fn of_body(body: &[u8], headers: impl IntoIterator<Item = (String, String)>) -> Self {
        let (decoded, reason, poison) = match classify(body) {
            Verdict::Accepted(decoded) => (Some(decoded), None, None),
            Verdict::Rejected { decoded, reason } => (Some(decoded), Some(reason), None),
            Verdict::Poison(cause) => (crate::decode(body).ok(), None, Some(cause)),
        };
        Self {
            decoded,
            reason,
            poison,
            headers: headers.into_iter().collect(),
        }
    }

    /// The verdict on a job given in any form it is stored or shown in: a bare envelope body, a
    /// Redis list value (the header frame is unwrapped into headers), or a message in the
    /// [`polyq_amqp::message_json`] shape (its body is inspected).
    pub fn of_input(input: &[u8]) -> Self {
        let body = message_body(input);
        match std::str::from_utf8(&body) {
            Ok(text) => {
                let (inner, headers) = unframe(text);
                Self::of_body(inner.as_bytes(), headers)
            }
            Err(_) => Self::of_body(&body, []),
        }
    }

    /// Whether a consumer would hand the job to a handler.
    pub fn accepts(&self) -> bool {
        self.decoded.is_some() && self.reason.is_none() && self.poison.is_none()
    }

    /// Why a consumer rejects a readable envelope.
    pub fn reason(&self) -> Option<Reason> {
        self.reason
    }

    /// Why the body is poison.
    pub fn poison(&self) -> Option<&PoisonCause> {
        self.poison.as_ref()
    }

    /// The job's URN, when it has one.
    pub fn urn(&self) -> Option<&str> {
        self.envelope().and_then(Envelope::urn)
    }

    /// The envelope the body decodes to.
    pub fn envelope(&self) -> Option<&Envelope> {
        self.decoded.as_ref().map(|decoded| &decoded.envelope)
    }

    /// The envelope, to change what is shown (decrypted or masked fields); the verdict stays
    /// the one on the body as it came.
    pub fn envelope_mut(&mut self) -> Option<&mut Envelope> {
        self.decoded.as_mut().map(|decoded| &mut decoded.envelope)
    }

    /// What the decode dropped or ignored.
    pub fn warnings(&self) -> &[Warning] {
        self.decoded
            .as_ref()
            .map_or(&[][..], |decoded| &decoded.warnings[..])
    }

    /// The `dead_letter` block of a dead-lettered job, when it has a readable one.
    pub fn dead_letter(&self) -> Option<DeadLetterInfo> {
        self.envelope().and_then(Envelope::dead_letter)
    }

    /// The out-of-band headers, by name.
    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.headers
    }
}

/// The written form of an [`Inspection`]; the field order is the output order.
#[derive(Serialize)]
struct Report<'a> {
    accepts: bool,
    reason: Option<&'static str>,
    urn: Option<&'a str>,
    poison: bool,
    poison_cause: Option<String>,
    warnings: &'a [Warning],
    envelope: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    headers: &'a BTreeMap<String, String>,
}

impl Serialize for Inspection {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Report {
            accepts: self.accepts(),
            reason: self.reason.map(Reason::as_str),
            urn: self.urn(),
            poison: self.poison.is_some(),
            poison_cause: self.poison.as_ref().map(PoisonCause::to_string),
            warnings: self.warnings(),
            envelope: self.envelope().and_then(|envelope| envelope.encode().ok()),
            headers: &self.headers,
        }
        .serialize(serializer)
    }
}

/// The body inside `input`: the `body` of a message in the message JSON shape, else `input`
/// itself. An envelope or a header frame that merely has a `body` member is not a message.
fn message_body(input: &[u8]) -> Vec<u8> {
    let shaped = serde_json::from_slice::<Value>(input).ok().filter(|value| {
        value.get("body").is_some()
            && value.get("job").is_none()
            && value.get("urn").is_none()
            && value.get(FRAME_KEY).is_none()
            && ["exchange", "routing_key", "properties", "headers"]
                .iter()
                .any(|k| value.get(k).is_some())
    });
    match shaped.and_then(|value| MessageJson::from_json(&value).ok()) {
        Some(message) => message.body.to_vec(),
        None => input.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{DeadLetter, DeadLetterReason, MakeOptions, make, poison_record};

    fn printed(inspection: &Inspection) -> Value {
        serde_json::to_value(inspection).unwrap()
    }

    fn valid_body() -> String {
        make(
            "urn:babel:orders:created",
            &json!({"id": 1}),
            MakeOptions::new().queue("orders"),
        )
        .unwrap()
        .encode()
        .unwrap()
    }

    #[test]
    fn an_accepted_body_prints_its_canonical_envelope() {
        let body = valid_body();
        let seen = Inspection::of_body(body.as_bytes(), []);
        assert!(seen.accepts());
        let text = serde_json::to_string(&seen).unwrap();
        let order = [
            "accepts",
            "reason",
            "urn",
            "poison",
            "poison_cause",
            "warnings",
            "envelope",
        ];
        let positions: Vec<usize> = order
            .iter()
            .map(|key| text.find(&format!("\"{key}\":")).unwrap())
            .collect();
        assert!(positions.is_sorted(), "{text}");
        let value = printed(&seen);
        assert_eq!(value["accepts"], true);
        assert_eq!(value["reason"], Value::Null);
        assert_eq!(value["urn"], "urn:babel:orders:created");
        assert_eq!(value["poison"], false);
        assert_eq!(value["poison_cause"], Value::Null);
        assert_eq!(value["warnings"], json!([]));
        assert_eq!(value["envelope"], body);
        assert!(value.get("headers").is_none());
        assert!(seen.dead_letter().is_none());
    }

    #[test]
    fn rejections_and_poison_say_why() {
        let rejected =
            Inspection::of_body(br#"{"job":"urn:babel:a:b","data":{},"attempts":1}"#, []);
        assert_eq!(rejected.reason(), Some(Reason::MissingMeta));
        assert!(!rejected.accepts());
        assert_eq!(printed(&rejected)["reason"], "missing_meta");

        let not_json = Inspection::of_body(b"not json", []);
        assert!(matches!(
            not_json.poison(),
            Some(PoisonCause::InvalidJson(_))
        ));
        let value = printed(&not_json);
        assert_eq!(
            (value["accepts"].clone(), value["poison"].clone()),
            (json!(false), json!(true))
        );
        assert!(
            value["poison_cause"]
                .as_str()
                .unwrap()
                .starts_with("the body is not strict JSON")
        );
        assert_eq!(value["envelope"], Value::Null);
        assert_eq!(value["urn"], Value::Null);

        // A body without identity is poison, and still shows what it decodes to.
        let blank = Inspection::of_body(br#"{"job":" ","data":{}}"#, []);
        assert_eq!(blank.poison(), Some(&PoisonCause::NoIdentity));
        assert!(blank.envelope().is_some());
    }

    #[test]
    fn warnings_and_headers_are_kept() {
        let seen = Inspection::of_body(
            br#"{"job":"urn:babel:a:b","urn":"urn:babel:c:d","data":{},"attempts":1}"#,
            [("traceparent".to_owned(), "00-abc".to_owned())],
        );
        assert!(!seen.warnings().is_empty());
        let value = printed(&seen);
        assert_eq!(value["warnings"][0]["pointer"], "/urn");
        assert_eq!(value["headers"], json!({"traceparent": "00-abc"}));
        assert_eq!(seen.headers()["traceparent"], "00-abc");
    }

    #[test]
    fn a_dead_letter_block_is_read() {
        let block = DeadLetter::new(DeadLetterReason::Failed, "orders", 3)
            .error("boom")
            .failed_at(5);
        let mut envelope = crate::decode(valid_body().as_bytes()).unwrap().envelope;
        envelope.annotate(&block);
        let seen = Inspection::of_body(envelope.encode().unwrap().as_bytes(), []);
        let info = seen.dead_letter().unwrap();
        assert_eq!(info.reason.as_deref(), Some("failed"));
        assert_eq!(info.error.as_deref(), Some("boom"));
        assert_eq!(info.original_queue.as_deref(), Some("orders"));

        let poison = poison_record(
            b"not json",
            &DeadLetter::new(DeadLetterReason::Poison, "orders", 0),
        );
        let seen = Inspection::of_body(poison.as_bytes(), []);
        assert_eq!(seen.poison(), Some(&PoisonCause::NoIdentity));
        assert_eq!(
            seen.dead_letter().unwrap().reason.as_deref(),
            Some("poison")
        );
    }

    #[test]
    fn any_stored_form_is_read() {
        let body = valid_body();
        let bare = Inspection::of_input(body.as_bytes());
        assert!(bare.accepts());

        let framed = crate::projection::frame(&body, &[("traceparent", "00-abc")]);
        let seen = Inspection::of_input(framed.as_bytes());
        assert_eq!(seen.headers()["traceparent"], "00-abc");
        assert_eq!(seen.envelope(), bare.envelope());

        let message = json!({"routing_key": "orders", "properties": {}, "body": body}).to_string();
        assert_eq!(Inspection::of_input(message.as_bytes()), bare);

        // An envelope with a `body` member of its own is inspected as it is.
        let own = br#"{"job":"urn:babel:a:b","body":"x","routing_key":"q"}"#;
        assert_eq!(Inspection::of_input(own), Inspection::of_body(own, []));

        assert!(Inspection::of_input(&[0xff, 0xfe]).poison() == Some(&PoisonCause::NotUtf8));
    }
}
