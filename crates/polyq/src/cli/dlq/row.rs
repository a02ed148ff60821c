//! One dead-lettered message as the `dlq` verbs show and select it: the family's own inspection
//! view (`acemq::inspect`, `babelqueue::inspect`) beside the wire message, and the few fields
//! every verb filters and groups on, read from that view.

use std::time::Duration;

use acemq::time::OffsetDateTime;
use polyq_amqp::MessageJson;
use polyq_runtime::Fingerprint;
use serde::Serialize;
use serde_json::Value;

use super::store::Stored;
use crate::cli::babel::registry::Registry;
use crate::cli::keys::show_encrypted;
use acemq::codec::keyring::KeyRing;

/// The family a message belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Family {
    Acemq,
    Babelqueue,
}

/// What every verb reads of a message.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    pub(crate) position: usize,
    pub(crate) family: Family,
    pub(crate) id: Option<String>,
    #[serde(rename = "type")]
    pub(crate) message_type: Option<String>,
    pub(crate) attempts: Option<i64>,
    /// When it failed (BabelQueue's `failed_at`) or was first seen (AceMQ), epoch ms.
    pub(crate) at_ms: Option<i64>,
    pub(crate) age_ms: Option<u64>,
    pub(crate) error: Option<String>,
    pub(crate) exception: Option<String>,
    pub(crate) group: String,
    pub(crate) group_key: String,
    #[serde(skip)]
    pub(crate) fingerprint: Fingerprint,
    pub(crate) replayed_from: Option<String>,
    pub(crate) replay_count: Option<u32>,
    pub(crate) redelivered: bool,
}

/// A message read from a dead-letter queue.
pub(crate) struct Row {
    pub(crate) summary: Summary,
    /// The family's inspection view, as JSON.
    pub(crate) decoded: Value,
    /// BabelQueue's `dead_letter` block.
    pub(crate) dead_letter: Option<babelqueue::DeadLetterInfo>,
    pub(crate) message: MessageJson,
}

impl Row {
    /// Masks, in what the row shows (the decoded view and the wire body), the fields the
    /// registry's schema for the job's URN marks `x-gdpr-sensitive`; AceMQ rows and jobs whose
    /// URN has no schema are left as they are. The stored message is not touched.
    pub(crate) fn mask(&mut self, registry: &Registry) -> anyhow::Result<()> {
        if self.summary.family != Family::Babelqueue {
            return Ok(());
        }
        let mut seen = babelqueue::inspect::Inspection::of_input(&self.message.body);
        let Some(envelope) = seen.envelope_mut() else {
            return Ok(());
        };
        registry.read(envelope, true)?;
        self.message.body = envelope.encode()?.into();
        self.decoded = serde_json::to_value(&seen)?;
        Ok(())
    }
}

/// The written form of a [`Row`].
#[derive(Serialize)]
struct Written<'a> {
    #[serde(flatten)]
    summary: &'a Summary,
    dead_letter: Option<&'a babelqueue::DeadLetterInfo>,
    decoded: &'a Value,
    message: &'a MessageJson,
}

impl Serialize for Row {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Written {
            summary: &self.summary,
            dead_letter: self.dead_letter.as_ref(),
            decoded: &self.decoded,
            message: &self.message,
        }
        .serialize(serializer)
    }
}

/// Whether a message on AMQP carries AceMQ's envelope headers.
fn has_acemq_headers(message: &MessageJson) -> bool {
    message.properties.headers.keys().any(|name| {
        name.starts_with(acemq::headers::RESERVED_PREFIX)
            || name.starts_with(acemq::headers::SHARED_PREFIX)
    })
}

impl Row {
    /// Reads `stored`, the `position`-th message of its queue. On Redis everything is a
    /// BabelQueue job; on AMQP a message with AceMQ headers is AceMQ's, one whose body is a
    /// BabelQueue envelope is BabelQueue's, and anything else is read as AceMQ reads any AMQP
    /// message.
    pub(crate) fn read(position: usize, stored: Stored, redis: bool, now: OffsetDateTime) -> Self {
        let Stored {
            message,
            redelivered,
        } = stored;
        if redis || !has_acemq_headers(&message) {
            let inspection = if redis {
                babelqueue::inspect::Inspection::of_input(&message.body)
            } else {
                babelqueue::inspect::Inspection::of_body(&message.body, [])
            };
            if redis || inspection.envelope().is_some() {
                return Self::babel(position, inspection, message, redelivered, now);
            }
        }
        Self::acemq(position, message, redelivered, now)
    }

    fn acemq(
        position: usize,
        message: MessageJson,
        redelivered: bool,
        now: OffsetDateTime,
    ) -> Self {
        let inspection = acemq::inspect::Inspection::of_message(&message, now);
        let mut decoded = match &inspection {
            Ok(inspection) => serde_json::to_value(inspection).unwrap_or(Value::Null),
            Err(error) => serde_json::json!({"error": polyq_amqp::error_chain(error)}),
        };
        show_encrypted(&mut decoded, &message, None);
        let envelope = acemq::Envelope::from_headers_at(
            &message.properties.headers,
            &message.routing_key,
            message.properties.message_id.as_deref(),
            now,
        );
        let error = envelope.error().map(str::to_owned);
        let fingerprint = Fingerprint::of(None, error.as_deref().unwrap_or(""));
        let first_seen = envelope.first_seen();
        Self {
            summary: Summary {
                position,
                family: Family::Acemq,
                id: Some(envelope.id().to_owned()),
                message_type: Some(envelope.message_type().to_owned()),
                attempts: Some(i64::from(envelope.attempt())),
                at_ms: Some(acemq::wire::epoch_millis(first_seen)),
                age_ms: Some(millis(envelope.age_at(now))),
                error,
                exception: fingerprint.kind().map(str::to_owned),
                group: fingerprint.to_string(),
                group_key: fingerprint.key(),
                fingerprint,
                replayed_from: envelope.replayed_from().map(str::to_owned),
                replay_count: Some(envelope.replay_count()),
                redelivered,
            },
            decoded,
            dead_letter: None,
            message,
        }
    }

    /// The row with its encrypted AceMQ body, if any, opened with `keys`.
    pub(crate) fn with_keys(mut self, keys: Option<&KeyRing>) -> Self {
        if self.summary.family == Family::Acemq && keys.is_some() {
            show_encrypted(&mut self.decoded, &self.message, keys);
        }
        self
    }

    fn babel(
        position: usize,
        inspection: babelqueue::inspect::Inspection,
        message: MessageJson,
        redelivered: bool,
        now: OffsetDateTime,
    ) -> Self {
        let envelope = inspection.envelope();
        let dead_letter = inspection.dead_letter();
        let block = dead_letter.clone().unwrap_or_default();
        // A poison record has no envelope to fail in; its cause is the error.
        let error = block
            .error
            .clone()
            .or_else(|| inspection.poison().map(ToString::to_string));
        let fingerprint =
            Fingerprint::of(block.exception.as_deref(), error.as_deref().unwrap_or(""));
        let now_ms = acemq::wire::epoch_millis(now);
        Self {
            summary: Summary {
                position,
                family: Family::Babelqueue,
                id: envelope
                    .and_then(babelqueue::Envelope::meta)
                    .and_then(babelqueue::Meta::id)
                    .map(str::to_owned),
                message_type: inspection.urn().map(str::to_owned),
                attempts: block
                    .attempts
                    .or_else(|| envelope.and_then(babelqueue::Envelope::attempts)),
                at_ms: block.failed_at,
                age_ms: block
                    .failed_at
                    .and_then(|at| u64::try_from(now_ms.saturating_sub(at)).ok()),
                error,
                exception: fingerprint.kind().map(str::to_owned),
                group: fingerprint.to_string(),
                group_key: fingerprint.key(),
                fingerprint,
                replayed_from: None,
                replay_count: None,
                redelivered,
            },
            decoded: serde_json::to_value(&inspection).unwrap_or(Value::Null),
            dead_letter,
            message,
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Which messages a verb acts on; every filter given must match.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct Selection {
    /// Only the message(s) with this id (repeatable).
    #[arg(long = "id", value_name = "ID")]
    pub(crate) ids: Vec<String>,
    /// Only the messages of this failure group (the `group_key` of `dlq groups`).
    #[arg(long, value_name = "KEY")]
    pub(crate) group: Option<String>,
    /// Only this message type (AceMQ) or URN (BabelQueue).
    #[arg(long = "type", visible_alias = "urn", value_name = "TYPE")]
    pub(crate) message_type: Option<String>,
    /// Only messages whose error contains this text.
    #[arg(long, value_name = "TEXT")]
    pub(crate) error: Option<String>,
    /// Only messages older than this (`90s`, `15m`, `2h`, `3d`).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub(crate) older_than: Option<Duration>,
    /// Only messages whose wire form (body or header values) contains this text.
    #[arg(long, value_name = "TEXT")]
    pub(crate) grep: Option<String>,
}

impl Selection {
    /// Whether no filter was given: everything is selected.
    pub(crate) fn is_everything(&self) -> bool {
        self.ids.is_empty()
            && self.group.is_none()
            && self.message_type.is_none()
            && self.error.is_none()
            && self.older_than.is_none()
            && self.grep.is_none()
    }

    /// Whether `row` is selected.
    pub(crate) fn matches(&self, row: &Row) -> bool {
        let summary = &row.summary;
        let contains = |field: &Option<String>, text: &str| {
            field.as_deref().is_some_and(|field| field.contains(text))
        };
        (self.ids.is_empty() || summary.id.as_ref().is_some_and(|id| self.ids.contains(id)))
            && self
                .group
                .as_ref()
                .is_none_or(|key| *key == summary.group_key)
            && self
                .message_type
                .as_ref()
                .is_none_or(|wanted| summary.message_type.as_ref() == Some(wanted))
            && self
                .error
                .as_deref()
                .is_none_or(|text| contains(&summary.error, text))
            && self.older_than.is_none_or(|age| {
                summary
                    .age_ms
                    .is_some_and(|ms| u128::from(ms) > age.as_millis())
            })
            && self.grep.as_deref().is_none_or(|text| {
                serde_json::to_string(&row.message).is_ok_and(|wire| wire.contains(text))
            })
    }
}

/// `90s`, `15m`, `2h`, `3d`, or plain seconds.
pub(crate) fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}`: expected a number and a unit, e.g. 15m"))?;
    let seconds = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("`{text}`: the unit is one of s, m, h, d")),
    };
    Ok(Duration::from_secs(n.saturating_mul(seconds)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse() {
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_age("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_age("3d"), Ok(Duration::from_secs(259_200)));
        assert_eq!(parse_age("7"), Ok(Duration::from_secs(7)));
        assert!(parse_age("m").is_err());
        assert!(parse_age("5w").is_err());
    }
}
