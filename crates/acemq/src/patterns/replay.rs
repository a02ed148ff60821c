//! Replay: messages set aside into `Q.dlq` or `Q.parked` moved back to `Q`.
//!
//! As in Java, a message always goes back to the queue `Q` by name through the default
//! exchange (never the exchange it was first published to, which could fan it out to other
//! queues again), with the envelope of [`Envelope::for_replay`]: attempt 1, first seen and
//! `x-acemq-error` kept, `acemq-replayed-from`, `acemq-replayed-at` and `acemq-replay-count`
//! stamped. Each message is published mandatory and confirmed, and only then is the copy in
//! the source queue acknowledged: a replay that dies half way duplicates at most one message
//! and loses none.
//!
//! A message the filter declines is held (left unacknowledged) until the pass ends and then
//! given back, so the pass continues past it (Python and Go; Java stops at the first miss).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use acemq::AceMq;
//! use acemq::patterns::replay::Replay;
//! use polyq_amqp::QueueSpec;
//!
//! let mq = AceMq::connect("memory://doc-replay").await?;
//! for queue in ["orders", "orders.dlq"] {
//!     mq.client().declare_queue(&QueueSpec::new(queue)).await?;
//! }
//! mq.publisher::<u32>("", "orders.dlq").send(&7).await?;
//!
//! let replay = Replay::from_queue(&mq, "orders.dlq")?;
//! assert_eq!(replay.destination(), "orders");
//! assert_eq!(replay.pending().await?, 1);
//! let report = replay.run().await?;
//! assert_eq!(report.moved, 1);
//! assert_eq!(mq.client().inspect_queue("orders").await?.message_count, 1);
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use polyq_amqp::{Delivery, OutgoingMessage, PublishOutcome};
use time::OffsetDateTime;

use super::PatternError;
use crate::contract::topology;
use crate::{AceMq, Envelope, RuntimeError};

/// Messages fetched per round by default.
pub const DEFAULT_BATCH_SIZE: usize = 100;

/// How long a replayed message waits for its confirm.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

type Filter = Arc<dyn Fn(&Envelope) -> bool + Send + Sync>;

/// A replay from one set-aside queue back to its source queue; configure, then
/// [`run`](Replay::run).
#[derive(Clone)]
#[must_use]
pub struct Replay {
    mq: AceMq,
    source: String,
    destination: String,
    batch_size: usize,
    limit: Option<u64>,
    dry_run: bool,
    filter: Option<Filter>,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("source", &self.source)
            .field("destination", &self.destination)
            .field("batch_size", &self.batch_size)
            .field("limit", &self.limit)
            .field("dry_run", &self.dry_run)
            .field("filtered", &self.filter.is_some())
            .finish()
    }
}

/// Why a replay pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The source queue had nothing more to give.
    Drained,
    /// The limit was reached.
    Limit,
}

/// What a replay did (or, in a dry run, would have done).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayReport {
    /// Messages moved back (in a dry run: that would have been moved).
    pub moved: u64,
    /// Messages the filter declined, given back to the source queue.
    pub skipped: u64,
    /// Why the pass ended; `None` while it runs (progress reports).
    pub stopped: Option<Stopped>,
}

impl Replay {
    /// A replay of `source` (`Q.dlq` or `Q.parked`) back to `Q`.
    pub fn from_queue(mq: &AceMq, source: &str) -> Result<Replay, PatternError> {
        let (destination, _) =
            topology::set_aside_source(source).ok_or_else(|| PatternError::NotASetAsideQueue {
                queue: source.to_owned(),
            })?;
        Ok(Replay {
            mq: mq.clone(),
            source: source.to_owned(),
            destination: destination.to_owned(),
            batch_size: DEFAULT_BATCH_SIZE,
            limit: None,
            dry_run: false,
            filter: None,
        })
    }

    /// A replay of `Q.dlq` back to `queue`.
    pub fn dead_letters(mq: &AceMq, queue: &str) -> Replay {
        Self::from_parts(mq, topology::dead_letter_queue(queue), queue)
    }

    /// A replay of `Q.parked` back to `queue`.
    pub fn parked(mq: &AceMq, queue: &str) -> Replay {
        Self::from_parts(mq, topology::parked_queue(queue), queue)
    }

    fn from_parts(mq: &AceMq, source: String, destination: &str) -> Replay {
        Replay {
            mq: mq.clone(),
            source,
            destination: destination.to_owned(),
            batch_size: DEFAULT_BATCH_SIZE,
            limit: None,
            dry_run: false,
            filter: None,
        }
    }

    /// Messages fetched per round (default [`DEFAULT_BATCH_SIZE`]; at least 1).
    pub fn batch_size(mut self, messages: usize) -> Self {
        self.batch_size = messages.max(1);
        self
    }

    /// Moves at most `messages` (default: no limit).
    pub fn limit(mut self, messages: u64) -> Self {
        self.limit = Some(messages);
        self
    }

    /// Counts what would move without moving anything; every message read is given back
    /// (which marks it redelivered). Default off.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Moves only messages whose envelope passes `filter`; the others are held until the pass
    /// ends and then given back to the source queue. Default: every message.
    pub fn filter(mut self, filter: impl Fn(&Envelope) -> bool + Send + Sync + 'static) -> Self {
        self.filter = Some(Arc::new(filter));
        self
    }

    /// The queue read from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The queue messages go back to.
    pub fn destination(&self) -> &str {
        &self.destination
    }

    /// Messages ready in the source queue now. Messages a pass just gave back (declined or
    /// dry-run) are counted once the broker has processed their return, which on RabbitMQ may
    /// be a moment after the pass ended.
    pub async fn pending(&self) -> Result<u32, PatternError> {
        Ok(self
            .mq
            .client()
            .inspect_queue(&self.source)
            .await?
            .message_count)
    }

    /// Runs one pass; see [`Replay::run_with_progress`].
    pub async fn run(&self) -> Result<ReplayReport, PatternError> {
        self.run_with_progress(|_| {}).await
    }

    /// Runs one pass, calling `progress` after each message read. Reads in rounds of the batch
    /// size until the source is empty or the limit is reached; messages published to the
    /// source during the pass may be moved too.
    ///
    /// On a failed publish the message is given back to the source, every held message too,
    /// and the error says where it stopped ([`PatternError::ReplayPublish`]); what was moved
    /// before stays moved.
    pub async fn run_with_progress(
        &self,
        mut progress: impl FnMut(&ReplayReport),
    ) -> Result<ReplayReport, PatternError> {
        let mut report = ReplayReport {
            moved: 0,
            skipped: 0,
            stopped: None,
        };
        let mut held: Vec<Delivery> = Vec::new();
        let result = self.pass(&mut report, &mut held, &mut progress).await;
        // Declined and dry-run messages go back whatever happened; a failure to give one back
        // leaves it to the broker, which requeues it when the channel closes.
        let mut give_back = Ok(());
        for delivery in held {
            if let Err(e) = delivery.nack(true).await {
                give_back = Err(e);
            }
        }
        result?;
        give_back?;
        Ok(report)
    }

    async fn pass(
        &self,
        report: &mut ReplayReport,
        held: &mut Vec<Delivery>,
        progress: &mut impl FnMut(&ReplayReport),
    ) -> Result<(), PatternError> {
        let client = self.mq.client();
        loop {
            // Never read more than the limit still allows, so a limited replay does not hold
            // (and mark redelivered) messages it will not move.
            let wanted = self.limit.map_or(self.batch_size, |limit| {
                usize::try_from(limit.saturating_sub(report.moved))
                    .unwrap_or(usize::MAX)
                    .min(self.batch_size)
            });
            let mut batch = Vec::with_capacity(wanted);
            while batch.len() < wanted {
                match client.get(&self.source).await? {
                    Some(delivery) => batch.push(delivery),
                    None => break,
                }
            }
            if batch.is_empty() {
                report.stopped = Some(if self.limit_reached(report) {
                    Stopped::Limit
                } else {
                    Stopped::Drained
                });
                progress(report);
                return Ok(());
            }
            for delivery in batch {
                let envelope =
                    Envelope::from_properties(&delivery.properties, &delivery.routing_key);
                let wanted = self.filter.as_ref().is_none_or(|keep| keep(&envelope));
                if !wanted || self.limit_reached(report) {
                    report.skipped += u64::from(!wanted);
                    held.push(delivery);
                } else if self.dry_run {
                    report.moved += 1;
                    held.push(delivery);
                } else {
                    self.move_back(&delivery, &envelope).await?;
                    report.moved += 1;
                }
                progress(report);
            }
        }
    }

    fn limit_reached(&self, report: &ReplayReport) -> bool {
        self.limit.is_some_and(|limit| report.moved >= limit)
    }

    /// Publishes the replayed copy to the destination, then acknowledges the original; gives
    /// the original back when the publish failed.
    async fn move_back(
        &self,
        delivery: &Delivery,
        envelope: &Envelope,
    ) -> Result<(), PatternError> {
        let mut properties = delivery.properties.clone();
        envelope
            .for_replay(&self.source, OffsetDateTime::now_utc())
            .write_properties(&mut properties);
        let message = OutgoingMessage::new(
            "",
            self.destination.as_str(),
            properties,
            delivery.body.clone(),
        );
        let cause = match self.mq.shared.republish(message, CONFIRM_TIMEOUT).await {
            Ok(PublishOutcome::Acked) => return Ok(delivery.ack().await?),
            // Through the default exchange, only a missing queue makes a publish unroutable.
            Ok(PublishOutcome::Returned(_)) => {
                RuntimeError::Transport(polyq_amqp::Error::NotFound {
                    kind: "queue",
                    name: self.destination.clone(),
                })
            }
            Ok(PublishOutcome::Nacked) => RuntimeError::Nacked {
                exchange: String::new(),
                routing_key: self.destination.clone(),
            },
            Err(error) => error,
        };
        delivery.nack(true).await?;
        Err(PatternError::ReplayPublish {
            source_queue: self.source.clone(),
            destination: self.destination.clone(),
            cause: Box::new(cause),
        })
    }
}
