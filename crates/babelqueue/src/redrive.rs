//! Redrive (ADR-0026, reference §4.6): move messages off a dead-letter queue back to where they
//! came from, reset for another round of attempts.
//!
//! A redrive reads the dead-letter queue's depth first and takes that many messages (at most
//! [`RedriveOptions::limit`]) off its head, in windows of at most [`RedriveOptions::window`]
//! messages (and never more than the binding hands out before some are settled: a prefetch
//! window, [`Transport::reservation_limit`]). Each message of a window is either
//! - **restored**, byte-identical with its headers, to the **end** of the dead-letter queue
//!   ([`Transport::move_to_end`]): undecodable records (poison), messages the filter turns
//!   down, messages with no queue to go to, everything on a dry run; or
//! - **redriven**: `dead_letter` removed, `attempts` reset to 0, every other key (unknown ones
//!   included) kept as it was, published to the target — `to_queue` when set, else the block's
//!   `original_queue`, else `meta.queue` — and acknowledged on the dead-letter queue only once
//!   its own publish was confirmed.
//!
//! The publishes of a window run concurrently; the restores follow them in dead-letter queue order
//! ([`Transport::move_all_to_end`]), and the next window is taken once the whole window is
//! settled.
//! Restored messages land behind the ones still to be taken, so none is met twice, and they keep
//! their relative order: a dry run, or a redrive that restores everything, leaves the queue as it
//! was; otherwise the restored ones end up behind anything dead-lettered while the redrive ran, as
//! the other SDKs' redrives leave them. This assumes the redrive is the dead-letter queue's only
//! consumer while it runs (another one taking messages makes it stop early, when the queue runs
//! dry, rather than meet its own restored messages).
//!
//! A failure stops the redrive after the window it happened in is settled, and comes back as
//! [`Error::Redrive`] carrying the report of everything settled so far. A message whose publish
//! failed is restored with the others (reported as [`RedriveAction::Failed`]); one whose
//! acknowledgement failed after its publish stays on the dead-letter queue, and a later redrive
//! publishes it again; messages not taken yet stay where they are.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> babelqueue::Result<()> {
//! use std::time::Duration;
//! use babelqueue::redrive::RedriveOptions;
//!
//! let queue = babelqueue::BabelQueue::builder("memory://doc-redrive")
//!     .queue("orders")
//!     .connect()
//!     .await?;
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
use futures_util::future::join_all;
use serde::Serialize;
use tracing::{info, warn};

use crate::envelope::Envelope;
use crate::transport::{Headers, Reserved, Transport};
use crate::worker::REPLAY_BYPASS_HEADER;
use crate::{Error, Result, Verdict, classify};

/// A filter: `true` redrives the message, `false` restores it.
pub type Filter = Arc<dyn Fn(&Envelope) -> bool + Send + Sync>;

/// The former name of [`Filter`].
#[deprecated(note = "renamed to `Filter`, the name acemq's replay uses")]
pub type Select = Filter;

/// How many messages a redrive window holds by default ([`RedriveOptions::window`]).
pub const DEFAULT_WINDOW: usize = 250;

/// What to redrive and where. Every setter documents its default.
#[derive(Clone)]
pub struct RedriveOptions {
    to_queue: Option<String>,
    limit: usize,
    dry_run: bool,
    filter: Option<Filter>,
    bypass: bool,
    bypass_uncarried: bool,
    wait: Duration,
    window: usize,
}

impl Default for RedriveOptions {
    fn default() -> Self {
        Self {
            to_queue: None,
            limit: 0,
            dry_run: false,
            filter: None,
            bypass: false,
            bypass_uncarried: false,
            wait: Duration::from_secs(1),
            window: DEFAULT_WINDOW,
        }
    }
}

impl std::fmt::Debug for RedriveOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedriveOptions")
            .field("to_queue", &self.to_queue)
            .field("limit", &self.limit)
            .field("dry_run", &self.dry_run)
            .field("filter", &self.filter.as_ref().map(|_| "<predicate>"))
            .field("bypass", &self.bypass)
            .field("bypass_uncarried", &self.bypass_uncarried)
            .field("wait", &self.wait)
            .field("window", &self.window)
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

    /// Takes at most `messages` messages off the dead-letter queue (default 0: all it holds when
    /// the redrive starts).
    pub fn limit(mut self, messages: usize) -> Self {
        self.limit = messages;
        self
    }

    /// The former name of [`RedriveOptions::limit`].
    #[deprecated(note = "renamed to `limit`, the name acemq's replay uses")]
    pub fn max(self, max: usize) -> Self {
        self.limit(max)
    }

    /// Reports the plan and restores everything (default `false`).
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Redrives only the messages `filter` returns `true` for (default: all); the others are
    /// restored.
    pub fn filter(mut self, filter: impl Fn(&Envelope) -> bool + Send + Sync + 'static) -> Self {
        self.filter = Some(Arc::new(filter));
        self
    }

    /// The former name of [`RedriveOptions::filter`].
    #[deprecated(note = "renamed to `filter`, the name acemq's replay uses")]
    pub fn select(self, select: impl Fn(&Envelope) -> bool + Send + Sync + 'static) -> Self {
        self.filter(select)
    }

    /// Stamps `bq-replay-bypass: 1` on redriven messages, so handlers can skip side effects
    /// ([`crate::worker::Job::is_replay`]); default `false`. On a binding that carries no
    /// headers (the Redis Laravel layout) the stamp cannot ride, so handlers would run their
    /// side effects again: the redrive is refused before anything moves, unless
    /// [`RedriveOptions::bypass_uncarried`] says to go on without it.
    pub fn bypass(mut self, bypass: bool) -> Self {
        self.bypass = bypass;
        self
    }

    /// With [`RedriveOptions::bypass`], redrives on a binding that carries no headers anyway,
    /// without the stamp (default `false`: such a redrive is refused).
    pub fn bypass_uncarried(mut self, go_on: bool) -> Self {
        self.bypass_uncarried = go_on;
        self
    }

    /// How long one reserve waits for the next message before the queue counts as empty
    /// (default 1 s); it only waits when something else took messages off the queue meanwhile.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// How many messages one window reserves before settling them, their publishes in flight
    /// together (default 250, at least 1). The binding's own bound comes first: on RabbitMQ and
    /// `memory://` a window is at most the prefetch window
    /// ([`Transport::reservation_limit`]). A larger window is faster and holds more
    /// reservations at once; a failure stops the redrive once its window is settled.
    pub fn window(mut self, window: usize) -> Self {
        self.window = window;
        self
    }
}

/// What happened to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RedriveAction {
    /// Published to its target and removed from the dead-letter queue.
    Redriven,
    /// Restored: the filter turned it down.
    NotSelected,
    /// Restored: a dry run.
    DryRun,
    /// Restored: it does not decode into an envelope, or has no queue to go to.
    Undecodable,
    /// Not redriven, and the redrive stopped with the error ([`Error::Redrive`]): its publish
    /// failed and it was restored (`redriven` is `false`), or it could not be settled on the
    /// dead-letter queue, where it stays (`redriven` is `true` when its copy was published).
    Failed,
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
    /// Messages published to their target and removed from the dead-letter queue.
    pub redriven: usize,
    /// Messages restored to the dead-letter queue as planned.
    pub skipped: usize,
    /// Messages of a failed redrive's last window that were not redriven
    /// ([`RedriveAction::Failed`]); 0 when the redrive succeeded.
    pub failed: usize,
    /// Every message taken off the dead-letter queue.
    pub items: Vec<RedriveItem>,
}

impl RedriveReport {
    fn push(&mut self, item: RedriveItem) {
        match item.action {
            RedriveAction::Redriven => self.redriven += 1,
            RedriveAction::Failed => self.failed += 1,
            RedriveAction::NotSelected | RedriveAction::DryRun | RedriveAction::Undecodable => {
                self.skipped += 1;
            }
        }
        self.items.push(item);
    }
}

/// Redrives the dead-letter queue `dlq` over `transport` (see the module documentation).
///
/// # Errors
/// [`Error::InvalidOption`] for a window of 0; the binding's error when the depth cannot be
/// read. Once messages are being taken, any failure (a reserve, a publish, a settle) comes as
/// [`Error::Redrive`] with the report so far and the failure as its source: the window in hand
/// is settled first, everything settled stays settled, and the rest stays on the dead-letter
/// queue.
pub async fn redrive<T: Transport>(
    transport: &T,
    dlq: &str,
    options: &RedriveOptions,
) -> Result<RedriveReport> {
    if options.window == 0 {
        return Err(Error::InvalidOption {
            option: "window",
            reason: "was 0; a redrive window must hold at least 1 message".to_owned(),
        });
    }
    if options.bypass && !options.bypass_uncarried && !transport.capabilities().headers {
        return Err(Error::InvalidOption {
            option: "bypass",
            reason: "this binding (the Redis Laravel layout) carries no headers, so \
                     bq-replay-bypass would be dropped and handlers would run their side effects \
                     again; redrive without the bypass, or allow redriving without the stamp \
                     (`bypass_uncarried`, `--force-bypass` on the command line)"
                .to_owned(),
        });
    }
    let depth = usize::try_from(transport.depth(dlq).await?).unwrap_or(usize::MAX);
    let limit = if options.limit == 0 {
        depth
    } else {
        depth.min(options.limit)
    };
    // A reserve beyond the binding's bound would only wait for a settle that never comes.
    let window = transport
        .reservation_limit()
        .map_or(options.window, |bound| options.window.min(bound.max(1)));
    let mut report = RedriveReport::default();
    let settled = settle_windows(transport, dlq, options, limit, window, &mut report).await;
    if let Err(error) = transport.unsubscribe(dlq).await {
        warn!(dlq, error = %polyq_amqp::error_chain(&error), "could not hand back prefetched dead-letter messages");
    }
    if let Err(error) = settled {
        return Err(Error::Redrive {
            dlq: dlq.to_owned(),
            report: Box::new(report),
            source: Box::new(error),
        });
    }
    info!(
        dlq,
        redriven = report.redriven,
        skipped = report.skipped,
        "redrive finished"
    );
    Ok(report)
}

/// Takes the first `limit` messages of `dlq`, `window` at a time, settling each window before
/// taking the next, so the binding's prefetch window keeps moving. Restored messages go to the
/// end, behind the `limit` taken, so they are not met again.
async fn settle_windows<T: Transport>(
    transport: &T,
    dlq: &str,
    options: &RedriveOptions,
    limit: usize,
    window: usize,
    report: &mut RedriveReport,
) -> Result<()> {
    while report.items.len() < limit {
        let want = window.min(limit - report.items.len());
        let mut taken = Vec::with_capacity(want);
        let mut stopped = None;
        while taken.len() < want {
            match transport.reserve(dlq, options.wait).await {
                Ok(Some(reserved)) => taken.push(reserved),
                // Someone else emptied it meanwhile: what is left is ours to meet next time.
                Ok(None) => break,
                Err(error) => {
                    stopped = Some(error);
                    break;
                }
            }
        }
        let ran_dry = taken.len() < want;
        let settled = settle_window(transport, dlq, options, &taken, report).await;
        match (stopped, settled) {
            (Some(error), _) | (None, Err(error)) => return Err(error),
            (None, Ok(())) if ran_dry => break,
            (None, Ok(())) => {}
        }
    }
    Ok(())
}

/// What to publish for a message that is to be redriven.
struct Publish {
    target: String,
    body: Result<String>,
    headers: Headers,
}

/// Why a redriven message did not leave the dead-letter queue.
enum NotRedriven {
    /// Its copy was not published (or could not be encoded): it is to be restored.
    Publish(Error),
    /// Its copy was published but the original could not be acknowledged.
    Ack(Error),
}

/// Settles one window: publishes the redriven messages concurrently, acknowledging each once its
/// own publish is confirmed, then restores the others (and any whose publish failed) in
/// dead-letter queue order, so they keep their order at the end. Every message of the
/// window is settled or left reserved (to come back when its reservation lapses) before the
/// first failure, if any, is returned.
async fn settle_window<T: Transport>(
    transport: &T,
    dlq: &str,
    options: &RedriveOptions,
    taken: &[Reserved<T::Receipt>],
    report: &mut RedriveReport,
) -> Result<()> {
    let headers_carried = transport.capabilities().headers;
    let (mut items, publishes): (Vec<RedriveItem>, Vec<Option<Publish>>) = taken
        .iter()
        .map(|reserved| plan(dlq, options, headers_carried, reserved))
        .unzip();
    let outcomes = join_all(publishes.into_iter().zip(taken).map(
        |(publish, reserved)| async move {
            match publish {
                Some(publish) => Some(publish_then_ack(transport, publish, reserved).await),
                None => None,
            }
        },
    ))
    .await;

    let mut first_error = None;
    let mut restores = Vec::new();
    for (index, (item, outcome)) in items.iter_mut().zip(outcomes).enumerate() {
        match outcome {
            None => restores.push(index),
            Some(Ok(())) => {
                item.redriven = true;
                item.action = RedriveAction::Redriven;
            }
            Some(Err(NotRedriven::Publish(error))) => {
                warn!(dlq, message_id = %item.message_id, to = %item.to, error = %polyq_amqp::error_chain(&error), "could not redrive a message; it is restored");
                item.action = RedriveAction::Failed;
                first_error.get_or_insert(error);
                restores.push(index);
            }
            Some(Err(NotRedriven::Ack(error))) => {
                warn!(dlq, message_id = %item.message_id, error = %polyq_amqp::error_chain(&error), "redriven, but the dead-letter copy could not be acknowledged: a later redrive redrives it again");
                item.redriven = true;
                item.action = RedriveAction::Failed;
                first_error.get_or_insert(error);
            }
        }
    }
    let receipts: Vec<&T::Receipt> = restores.iter().map(|&i| &taken[i].receipt).collect();
    let moved = transport.move_all_to_end(&receipts).await;
    for (&index, moved) in restores.iter().zip(moved) {
        if let Err(error) = moved {
            let item = &mut items[index];
            warn!(dlq, message_id = %item.message_id, error = %polyq_amqp::error_chain(&error), "could not restore a dead-letter message; the broker returns it when the reservation lapses");
            item.action = RedriveAction::Failed;
            first_error.get_or_insert(error);
        }
    }
    for item in items {
        report.push(item);
    }
    first_error.map_or(Ok(()), Err)
}

/// Publishes a redriven message's copy, then acknowledges the original.
async fn publish_then_ack<T: Transport>(
    transport: &T,
    publish: Publish,
    reserved: &Reserved<T::Receipt>,
) -> Result<(), NotRedriven> {
    let body = publish.body.map_err(NotRedriven::Publish)?;
    transport
        .publish(&publish.target, Bytes::from(body), &publish.headers)
        .await
        .map_err(NotRedriven::Publish)?;
    transport
        .ack(&reserved.receipt)
        .await
        .map_err(NotRedriven::Ack)
}

/// Decides what becomes of one reserved message: its report item, and what to publish when it
/// is to be redriven (`None`: restore it).
fn plan<R>(
    dlq: &str,
    options: &RedriveOptions,
    headers_carried: bool,
    reserved: &Reserved<R>,
) -> (RedriveItem, Option<Publish>) {
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
        return (item, None);
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

    if let Some(filter) = &options.filter
        && !filter(&envelope)
    {
        item.action = RedriveAction::NotSelected;
        return (item, None);
    }
    let target = options
        .to_queue
        .clone()
        .or_else(|| block.and_then(|b| b.original_queue))
        .or_else(|| envelope.meta().and_then(|m| m.queue()).map(str::to_owned))
        .filter(|queue| !queue.is_empty());
    let Some(target) = target else {
        return (item, None);
    };
    item.to.clone_from(&target);
    if options.dry_run {
        item.action = RedriveAction::DryRun;
        return (item, None);
    }

    envelope.remove_dead_letter();
    envelope.set_attempts(0);
    let mut headers: Headers = reserved
        .headers
        .iter()
        .filter(|(name, _)| name != REPLAY_BYPASS_HEADER)
        .cloned()
        .collect();
    item.bypassed = options.bypass && headers_carried;
    if item.bypassed {
        headers.push((REPLAY_BYPASS_HEADER.to_owned(), "1".to_owned()));
    }
    let publish = Publish {
        target,
        body: envelope.encode(),
        headers,
    };
    (item, Some(publish))
}
