//! Edit and replay: a corrected copy of one dead-lettered message goes back to the queue it
//! failed on, marked as edited, and the original leaves the dead-letter queue only once the
//! copy's publish is confirmed (killed in between, both are kept, never neither).
//!
//! The copy is what a replay would publish, with the edited body: for AceMQ the envelope of
//! `Envelope::for_replay` (attempt 1, replay stamps); for BabelQueue what a redrive publishes
//! (`dead_letter` removed, `attempts` 0) to the block's `original_queue`, else `meta.queue`.
//! The mark is the header [`EDITED`] (RFC 3339 time of the edit) on AMQP, and for BabelQueue
//! also the top-level extension key [`EDITED`] in the envelope, `{"at": <epoch ms>, "from":
//! <dead-letter queue>}`: a Redis list holds no headers, and every SDK keeps unknown
//! top-level keys through decode and re-encode.

use acemq::patterns::replay::Replay;
use acemq::time::OffsetDateTime;
use anyhow::Context as _;
use babelqueue::Verdict;
use babelqueue::envelope::RawJson;
use polyq_amqp::{FieldValue, MessageJson};

use super::row::{Family, Row};
use super::store::{BrokerArgs, Store};

/// The header (and, for BabelQueue, envelope key) that marks an edited copy.
pub(crate) const EDITED: &str = "x-polyq-edited";

/// Publishes `row` with `body` in place of its own to the queue it failed on, then removes the
/// original from `queue`; answers the queue the copy went to.
pub(crate) async fn replay_edited(
    broker: &BrokerArgs,
    store: &Store,
    queue: &str,
    row: &Row,
    body: &str,
) -> anyhow::Result<String> {
    let now = OffsetDateTime::now_utc();
    let mut copy = row.message.clone();
    let at = now
        .format(&acemq::time::format_description::well_known::Rfc3339)
        .context("the time of the edit")?;
    let destination = match row.summary.family {
        Family::Acemq => {
            let mq = broker.acemq().await?;
            let replay = Replay::from_queue(&mq, queue);
            mq.close().await.ok();
            let destination = replay
                .with_context(|| format!("--queue {queue}: not a .dlq or .parked queue"))?
                .destination()
                .to_owned();
            acemq::Envelope::from_headers_at(
                &row.message.properties.headers,
                &row.message.routing_key,
                row.message.properties.message_id.as_deref(),
                now,
            )
            .for_replay(queue, now)
            .write_properties(&mut copy.properties);
            checked_acemq_body(copy.properties.content_type.as_deref(), body)?;
            copy.body = body.as_bytes().to_vec().into();
            destination
        }
        Family::Babelqueue => {
            let (destination, encoded) = redriven(queue, body, now)?;
            copy.body = encoded.into_bytes().into();
            destination
        }
    };
    if store.is_redis() {
        // A Redis list holds the envelope alone: the mark is in it.
        copy.properties = polyq_amqp::Properties::default();
    } else {
        // Last, so that nothing written above replaces it.
        copy.properties
            .headers
            .insert(EDITED.to_owned(), FieldValue::from(at));
    }
    store
        .push(&destination, std::slice::from_ref(&copy), || {})
        .await?;
    remove_one(store, queue, &row.message).await?;
    Ok(destination)
}

/// An edited AceMQ body whose content type the JSON codec reads must be JSON, which is then
/// sent as typed: the consumer would otherwise park the copy as undecodable.
fn checked_acemq_body(content_type: Option<&str>, body: &str) -> anyhow::Result<()> {
    use acemq::codec::{Decode, Json};
    type Any = serde::de::IgnoredAny;
    if Decode::<Any>::accepts(&Json, content_type) {
        serde_json::from_str::<Any>(body).with_context(|| {
            format!(
                "the edited body is not JSON, which its content type `{}` says it is; correct it",
                content_type.unwrap_or(acemq::codec::JSON_CONTENT_TYPE)
            )
        })?;
    }
    Ok(())
}

/// The edited BabelQueue envelope as a redrive publishes it, marked, and where it goes.
fn redriven(dlq: &str, body: &str, now: OffsetDateTime) -> anyhow::Result<(String, String)> {
    let Verdict::Accepted(decoded) = babelqueue::classify(body.as_bytes()) else {
        anyhow::bail!(
            "the edited body is not an envelope BabelQueue accepts; keep `job`, `data` and `meta`"
        );
    };
    let mut envelope = decoded.envelope;
    let destination = envelope
        .dead_letter()
        .and_then(|block| block.original_queue)
        .or_else(|| {
            envelope
                .meta()
                .and_then(|meta| meta.queue())
                .map(str::to_owned)
        })
        .filter(|queue| !queue.is_empty())
        .context(
            "the envelope names no queue to go to (`dead_letter.original_queue` or `meta.queue`)",
        )?;
    envelope.remove_dead_letter();
    envelope.set_attempts(0);
    let mark = serde_json::json!({"at": acemq::wire::epoch_millis(now), "from": dlq});
    envelope.set_extra(EDITED, RawJson::from_value(&mark)?)?;
    Ok((destination, envelope.encode()?))
}

/// Removes the first message of `queue` equal to `original`.
async fn remove_one(store: &Store, queue: &str, original: &MessageJson) -> anyhow::Result<()> {
    let mut found = false;
    let removed = store
        .remove(queue, |message| {
            let hit = !found && message == original;
            found |= hit;
            hit
        })
        .await?;
    anyhow::ensure!(
        removed == 1,
        "the copy was published, but the original was no longer in {queue} to remove"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::checked_acemq_body;

    #[test]
    fn an_edited_json_body_must_be_json_and_other_bodies_are_taken_as_typed() {
        for content_type in [
            None,
            Some("application/json"),
            Some("application/vnd.a+json"),
        ] {
            assert!(checked_acemq_body(content_type, r#"{"z":1,"a":2.50}"#).is_ok());
            let error = checked_acemq_body(content_type, "{\"z\":").unwrap_err();
            assert!(
                format!("{error:#}").starts_with("the edited body is not JSON"),
                "{error:#}"
            );
        }
        assert!(checked_acemq_body(Some("text/plain"), "{\"z\":").is_ok());
    }
}
