//! Redrive (ADR-0026, reference §4.6): move messages off a dead-letter queue back to where they
//! came from, reset for another round of attempts.
//!
//! A redrive reads the dead-letter queue's depth first and takes that many messages (at most
//! `max`) off its head, one at a time, settling each before taking the next, so it holds one
//! message at a time and a prefetch window never limits how many it gets through. Each is either
//! - **restored**, byte-identical with its headers, to the **end** of the dead-letter queue
//!   ([`Transport::move_to_end`]): undecodable records (poison), messages the selection
//!   predicate turns down, messages with no queue to go to, everything on a dry run; or
//! - **redriven**: `dead_letter` removed, `attempts` reset to 0, every other key (unknown ones
//!   included) kept as it was, published to the target — `to_queue` when set, else the block's
//!   `original_queue`, else `meta.queue` — and only then acknowledged on the dead-letter queue.
//!
//! Restored messages land behind the ones still to be taken, so none is met twice, and they keep
//! their relative order: a dry run, or a redrive that restores everything, leaves the queue as it
//! was; otherwise the restored ones end up behind anything dead-lettered while the redrive ran, as
//! the other SDKs' redrives leave them. This assumes the redrive is the dead-letter queue's only
//! consumer while it runs (another one taking messages makes it stop early, when the queue runs
//! dry, rather than meet its own restored messages).
//!
//! A failed publish restores that message and returns the error; the ones already settled stay
//! settled and the rest stay where they are. A failed acknowledgement after a publish also stops
//! the redrive: that message stays on the dead-letter queue and a later redrive publishes it again.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> babelqueue::Result<()> {
//! use std::time::Duration;
//! use babelqueue::redrive::RedriveOptions;
//!
//! let queue = babelqueue::BabelQueue::builder("memory://doc-redrive").queue("orders").connect().await?;
//! queue.publish("urn:babel:orders:created", &serde_json::json!({})).await?;
//! // No handler: the default strategy fails the message until it is dead-lettered.
//! let report = queue.worker().max_attempts(1).consume(1, Duration::from_secs(1)).await?;
//! assert_eq!(report.dead_lettered, 1);
//!
//! let plan = queue.redrive(&RedriveOptions::new().dry_run(true)).await?;
//! assert_eq!((plan.redriven, plan.skipped), (0, 1));
//! assert_eq!(plan.items[0].to, "orders");
//! let done = queue.redrive(&RedriveOptions::new()).await?;
//! assert_eq!(done.redriven, 1);
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use tracing::{info, warn};

use crate::envelope::Envelope;
use crate::transport::{Headers, Reserved, Transport};
use crate::worker::REPLAY_BYPASS_HEADER;
use crate::{Result, Verdict, classify};

/// A selection predicate: `true` redrives the message, `false` restores it.
pub type Select = Arc<dyn Fn(&Envelope) -> bool + Send + Sync>;

/// What to redrive and where. Every setter documents its default.
#[derive(Clone)]
pub struct RedriveOptions {
    to_queue: Option<String>,
    max: usize,
    dry_run: bool,
    select: Option<Select>,
    bypass: bool,
    wait: Duration,
}

impl Default for RedriveOptions {
    fn default() -> Self {
        Self {
            to_queue: None,
            max: 0,
            dry_run: false,
            select: None,
            bypass: false,
            wait: Duration::from_secs(1),
        }
    }
}

impl std::fmt::Debug for RedriveOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedriveOptions")
            .field("to_queue", &self.to_queue)
            .field("max", &self.max)
            .field("dry_run", &self.dry_run)
            .field("select", &self.select.as_ref().map(|_| "<predicate>"))
            .field("bypass", &self.bypass)
            .field("wait", &self.wait)
            .finish()
    }
}

impl RedriveOptions {
    /// Everything, each message to its own source queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends every redriven message to `queue` instead of its source (default: the source).
    pub fn to_queue(mut self, queue: impl Into<String>) -> Self {
        self.to_queue = Some(queue.into());
        self
    }

    /// Takes at most `max` messages off the dead-letter queue (default 0: all it holds when the
    /// redrive starts).
    pub fn max(mut self, max: usize) -> Self {
        self.max = max;
        self
    }

    /// Reports the plan and restores everything (default `false`).
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Redrives only the messages `select` returns `true` for (default: all).
    pub fn select(mut self, select: impl Fn(&Envelope) -> bool + Send + Sync + 'static) -> Self {
        self.select = Some(Arc::new(select));
        self
    }

    /// Stamps `bq-replay-bypass: 1` on redriven messages where the binding carries headers, so
    /// handlers can skip side effects ([`crate::worker::Job::is_replay`]); default `false`.
    pub fn bypass(mut self, bypass: bool) -> Self {
        self.bypass = bypass;
        self
    }

    /// How long one reserve waits for the next message before the queue counts as empty
    /// (default 1 s); it only waits when something else took messages off the queue meanwhile.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }
}

/// What happened to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RedriveAction {
    /// Published to its target and removed from the dead-letter queue.
    Redriven,
    /// Restored: the selection predicate turned it down.
    NotSelected,
    /// Restored: a dry run.
    DryRun,
    /// Restored: it does not decode into an envelope, or has no queue to go to.
    Undecodable,
}

/// One message of a redrive, in the shape the other SDKs report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RedriveItem {
    /// `meta.id` (empty when undecodable).
    pub message_id: String,
    /// `trace_id` (empty when undecodable).
    pub trace_id: String,
    /// The URN (empty when undecodable).
    pub urn: String,
    /// `dead_letter.reason` (empty when absent).
    pub reason: String,
    /// The dead-letter queue it was taken from.
    pub from: String,
    /// The target queue: the plan on a dry run or a refusal, empty when undecodable.
    pub to: String,
    /// `true` only when it was published to `to`.
    pub redriven: bool,
    /// `true` when `bq-replay-bypass` was stamped on it.
    pub bypassed: bool,
    /// What happened to it.
    pub action: RedriveAction,
}

/// The result of a redrive: totals and one item per message, in dead-letter queue order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RedriveReport {
    /// Messages published to their target.
    pub redriven: usize,
    /// Messages restored to the dead-letter queue.
    pub skipped: usize,
    /// Every message taken off the dead-letter queue.
    pub items: Vec<RedriveItem>,
}

/// Redrives the dead-letter queue `dlq` over `transport` (see the module documentation).
///
/// # Errors
/// The binding's error when the depth cannot be read, a reserve fails, or a message cannot be
/// settled; the message in hand is restored first where it still can be, everything already
/// settled stays settled, and the rest stays on the dead-letter queue.
pub async fn redrive<T: Transport>(
    transport: &T,
    dlq: &str,
    options: &RedriveOptions,
) -> Result<RedriveReport> {
    let depth = usize::try_from(transport.depth(dlq).await?).unwrap_or(usize::MAX);
    let limit = if options.max == 0 {
        depth
    } else {
        depth.min(options.max)
    };
    let mut report = RedriveReport::default();
    let settled = settle_each(transport, dlq, options, limit, &mut report).await;
    if let Err(error) = transport.unsubscribe(dlq).await {
        warn!(dlq, %error, "could not hand back prefetched dead-letter messages");
    }
    settled?;
    info!(
        dlq,
        redriven = report.redriven,
        skipped = report.skipped,
        "redrive finished"
    );
    Ok(report)
}

/// Takes the first `limit` messages of `dlq` one by one, settling each before the next, so the
/// binding's window keeps moving and only one is held at a time. Restored messages go to the end,
/// behind the `limit` taken, so they are not met again.
async fn settle_each<T: Transport>(
    transport: &T,
    dlq: &str,
    options: &RedriveOptions,
    limit: usize,
    report: &mut RedriveReport,
) -> Result<()> {
    while report.items.len() < limit {
        let Some(reserved) = transport.reserve(dlq, options.wait).await? else {
            // Someone else emptied it meanwhile: what is left is ours to meet next time.
            break;
        };
        let item = redrive_one(transport, dlq, options, &reserved).await?;
        if item.redriven {
            report.redriven += 1;
        } else {
            report.skipped += 1;
        }
        report.items.push(item);
    }
    Ok(())
}

/// Settles one reserved message: restored to the end of `dlq`, or published to its target and
/// then acknowledged.
async fn redrive_one<T: Transport>(
    transport: &T,
    dlq: &str,
    options: &RedriveOptions,
    reserved: &Reserved<T::Receipt>,
) -> Result<RedriveItem> {
    let mut item = RedriveItem {
        message_id: String::new(),
        trace_id: String::new(),
        urn: String::new(),
        reason: String::new(),
        from: dlq.to_owned(),
        to: String::new(),
        redriven: false,
        bypassed: false,
        action: RedriveAction::Undecodable,
    };
    let Verdict::Accepted(decoded) = classify(&reserved.body) else {
        transport.move_to_end(&reserved.receipt).await?;
        return Ok(item);
    };
    let mut envelope = decoded.envelope;
    let block = envelope.dead_letter();
    item.message_id = envelope
        .meta()
        .and_then(|m| m.id())
        .unwrap_or_default()
        .to_owned();
    item.trace_id = envelope.trace_id().unwrap_or_default().to_owned();
    item.urn = envelope.urn().unwrap_or_default().to_owned();
    item.reason = block
        .as_ref()
        .and_then(|b| b.reason.clone())
        .unwrap_or_default();

    if let Some(select) = &options.select
        && !select(&envelope)
    {
        item.action = RedriveAction::NotSelected;
        transport.move_to_end(&reserved.receipt).await?;
        return Ok(item);
    }
    let target = options
        .to_queue
        .clone()
        .or_else(|| block.and_then(|b| b.original_queue))
        .or_else(|| envelope.meta().and_then(|m| m.queue()).map(str::to_owned))
        .filter(|queue| !queue.is_empty());
    let Some(target) = target else {
        transport.move_to_end(&reserved.receipt).await?;
        return Ok(item);
    };
    item.to.clone_from(&target);
    if options.dry_run {
        item.action = RedriveAction::DryRun;
        transport.move_to_end(&reserved.receipt).await?;
        return Ok(item);
    }

    envelope.remove_dead_letter();
    envelope.set_attempts(0);
    let mut headers: Headers = reserved
        .headers
        .iter()
        .filter(|(name, _)| name != REPLAY_BYPASS_HEADER)
        .cloned()
        .collect();
    item.bypassed = options.bypass && transport.capabilities().headers;
    if item.bypassed {
        headers.push((REPLAY_BYPASS_HEADER.to_owned(), "1".to_owned()));
    }
    let published = match envelope.encode() {
        Ok(body) => {
            transport
                .publish(&target, Bytes::from(body), &headers)
                .await
        }
        Err(error) => Err(error),
    };
    if let Err(error) = published {
        restore_after_failure(transport, dlq, reserved).await;
        return Err(error);
    }
    if let Err(error) = transport.ack(&reserved.receipt).await {
        // Going on could meet it again (a broker hands an unacknowledged message back at the
        // head), so stop here.
        warn!(dlq, message_id = %item.message_id, %error, "redriven, but the dead-letter copy could not be acknowledged: a later redrive redrives it again");
        return Err(error);
    }
    item.redriven = true;
    item.action = RedriveAction::Redriven;
    Ok(item)
}

/// Restores a message that could not be redriven; failing that, the broker returns it when the
/// reservation lapses or the connection closes.
async fn restore_after_failure<T: Transport>(
    transport: &T,
    dlq: &str,
    reserved: &Reserved<T::Receipt>,
) {
    if let Err(error) = transport.move_to_end(&reserved.receipt).await {
        warn!(dlq, %error, "could not restore a dead-letter message; the broker returns it when the reservation lapses");
    }
}
