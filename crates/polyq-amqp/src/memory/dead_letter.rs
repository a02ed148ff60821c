//! Dead-lettering as RabbitMQ does it: the `x-death` history and the cycle rule.

use crate::properties::Properties;
use crate::value::{FieldTable, FieldValue};

/// Why a message left its queue for the dead-letter exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reason {
    /// Its TTL ran out.
    Expired,
    /// A consumer rejected or nacked it without requeue.
    Rejected,
    /// The queue was over `x-max-length`.
    MaxLength,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::Expired => "expired",
            Reason::Rejected => "rejected",
            Reason::MaxLength => "maxlen",
        }
    }
}

/// One death being recorded.
#[derive(Debug)]
pub(super) struct Death<'a> {
    /// The queue the message left.
    pub(super) queue: &'a str,
    /// Why.
    pub(super) reason: Reason,
    /// The exchange the message had been published to.
    pub(super) exchange: &'a str,
    /// The routing key it had been published with.
    pub(super) routing_key: &'a str,
    /// Seconds since the Unix epoch.
    pub(super) time: u64,
}

/// The properties of a dead-lettered message: `x-death` updated, `x-first-death-*` set on the
/// first death, and a per-message `expiration` moved into the death record so the message does
/// not expire again downstream.
pub(super) fn record_death(properties: &Properties, death: &Death<'_>) -> Properties {
    let mut properties = properties.clone();
    let original_expiration = properties.expiration.take();
    let headers = &mut properties.headers;

    let mut history = match headers.remove("x-death") {
        Some(FieldValue::Array(entries)) => entries,
        _ => Vec::new(),
    };
    let previous = history.iter().position(|entry| {
        matches!(entry, FieldValue::Table(table)
            if text(table, "queue") == Some(death.queue)
                && text(table, "reason") == Some(death.reason.as_str()))
    });
    let entry = match previous {
        Some(index) => {
            let mut entry = history.remove(index);
            if let FieldValue::Table(table) = &mut entry {
                let count = table.get("count").and_then(FieldValue::as_i64).unwrap_or(0);
                table.insert("count".into(), FieldValue::I64(count.saturating_add(1)));
            }
            entry
        }
        None => {
            let mut table = FieldTable::new();
            table.insert("count".into(), FieldValue::I64(1));
            table.insert("reason".into(), death.reason.as_str().into());
            table.insert("queue".into(), death.queue.into());
            table.insert("time".into(), FieldValue::Timestamp(death.time));
            table.insert("exchange".into(), death.exchange.into());
            table.insert(
                "routing-keys".into(),
                FieldValue::Array(vec![death.routing_key.into()]),
            );
            if let Some(expiration) = original_expiration {
                table.insert("original-expiration".into(), expiration.into());
            }
            FieldValue::Table(table)
        }
    };
    history.insert(0, entry);
    headers.insert("x-death".into(), FieldValue::Array(history));

    for (name, value) in [
        ("x-first-death-reason", death.reason.as_str()),
        ("x-first-death-queue", death.queue),
        ("x-first-death-exchange", death.exchange),
    ] {
        headers
            .entry(name.to_owned())
            .or_insert_with(|| value.into());
    }
    properties
}

/// Whether delivering a dead-lettered message to `target` would close a loop that no consumer
/// takes part in: RabbitMQ drops the message for that queue when `target` already appears in its
/// `x-death` history and no death since then was a rejection.
pub(super) fn is_cycle(headers: &FieldTable, target: &str) -> bool {
    let Some(FieldValue::Array(history)) = headers.get("x-death") else {
        return false;
    };
    for entry in history {
        let FieldValue::Table(table) = entry else {
            continue;
        };
        if text(table, "reason") == Some(Reason::Rejected.as_str()) {
            return false;
        }
        if text(table, "queue") == Some(target) {
            return true;
        }
    }
    false
}

fn text<'a>(table: &'a FieldTable, name: &str) -> Option<&'a str> {
    table.get(name).and_then(FieldValue::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn death(queue: &'static str, reason: Reason) -> Death<'static> {
        Death {
            queue,
            reason,
            exchange: "orders",
            routing_key: "order.placed",
            time: 1_700_000_000,
        }
    }

    fn history(properties: &Properties) -> Vec<FieldTable> {
        let Some(FieldValue::Array(entries)) = properties.headers.get("x-death") else {
            panic!("no x-death in {properties:?}");
        };
        entries
            .iter()
            .map(|entry| match entry {
                FieldValue::Table(table) => table.clone(),
                other => panic!("x-death entry is not a table: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn first_death_writes_a_full_record() {
        let mut original = Properties::default();
        original.headers.insert("app".into(), "kept".into());
        let dead = record_death(&original, &death("work", Reason::Rejected));
        let entries = history(&dead);
        assert_eq!(entries.len(), 1);
        let entry = &entries[0];
        assert_eq!(entry["count"], FieldValue::I64(1));
        assert_eq!(entry["reason"], FieldValue::from("rejected"));
        assert_eq!(entry["queue"], FieldValue::from("work"));
        assert_eq!(entry["exchange"], FieldValue::from("orders"));
        assert_eq!(entry["time"], FieldValue::Timestamp(1_700_000_000));
        assert_eq!(
            entry["routing-keys"],
            FieldValue::Array(vec!["order.placed".into()])
        );
        assert!(!entry.contains_key("original-expiration"));
        assert_eq!(dead.headers["x-first-death-reason"], "rejected".into());
        assert_eq!(dead.headers["x-first-death-queue"], "work".into());
        assert_eq!(dead.headers["x-first-death-exchange"], "orders".into());
        assert_eq!(dead.headers["app"], "kept".into());
    }

    #[test]
    fn per_message_expiration_moves_into_the_record() {
        let original = Properties {
            expiration: Some("5000".into()),
            ..Properties::default()
        };
        let dead = record_death(&original, &death("rung", Reason::Expired));
        assert_eq!(dead.expiration, None);
        assert_eq!(history(&dead)[0]["original-expiration"], "5000".into());
    }

    #[test]
    fn same_queue_and_reason_counts_up_and_moves_first() {
        let once = record_death(&Properties::default(), &death("rung", Reason::Expired));
        let other = record_death(&once, &death("work", Reason::Rejected));
        let again = record_death(&other, &death("rung", Reason::Expired));
        let entries = history(&again);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0]["queue"], "rung".into());
        assert_eq!(entries[0]["count"], FieldValue::I64(2));
        assert_eq!(entries[1]["queue"], "work".into());
        assert_eq!(entries[1]["count"], FieldValue::I64(1));
        assert_eq!(again.headers["x-first-death-queue"], "rung".into());
        assert_eq!(again.headers["x-first-death-reason"], "expired".into());
    }

    #[test]
    fn same_queue_with_another_reason_is_a_new_record() {
        let expired = record_death(&Properties::default(), &death("q", Reason::Expired));
        let rejected = record_death(&expired, &death("q", Reason::Rejected));
        let entries = history(&rejected);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0]["reason"], "rejected".into());
        assert_eq!(entries[1]["reason"], "expired".into());
    }

    #[test]
    fn malformed_history_is_replaced_or_kept_without_panicking() {
        let mut original = Properties::default();
        original.headers.insert("x-death".into(), "garbage".into());
        let dead = record_death(&original, &death("q", Reason::Expired));
        assert_eq!(history(&dead).len(), 1);

        let mut odd = Properties::default();
        odd.headers.insert(
            "x-death".into(),
            FieldValue::Array(vec![FieldValue::I32(7)]),
        );
        let dead = record_death(&odd, &death("q", Reason::Expired));
        let Some(FieldValue::Array(entries)) = dead.headers.get("x-death") else {
            panic!("no history");
        };
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1], FieldValue::I32(7));
    }

    #[test]
    fn expiry_loop_back_to_a_queue_is_a_cycle() {
        let dead = record_death(&Properties::default(), &death("q", Reason::Expired));
        assert!(is_cycle(&dead.headers, "q"));
        assert!(!is_cycle(&dead.headers, "other"));
        assert!(!is_cycle(&FieldTable::new(), "q"));
    }

    #[test]
    fn a_rejection_in_the_loop_breaks_the_cycle() {
        let rejected = record_death(&Properties::default(), &death("work", Reason::Rejected));
        assert!(!is_cycle(&rejected.headers, "work"));
        let then_expired = record_death(&rejected, &death("rung", Reason::Expired));
        assert!(!is_cycle(&then_expired.headers, "work"));
        assert!(is_cycle(&then_expired.headers, "rung"));
    }

    #[test]
    fn retry_rung_back_to_its_origin_is_not_a_cycle() {
        let expired = record_death(&Properties::default(), &death("rung", Reason::Expired));
        assert!(!is_cycle(&expired.headers, "work"));
        let twice = record_death(&expired, &death("rung", Reason::Expired));
        assert!(!is_cycle(&twice.headers, "work"));
    }
}
