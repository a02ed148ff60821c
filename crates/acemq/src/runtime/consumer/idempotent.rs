//! The idempotent consumer's steps around the handler: claim before work, confirm after
//! success, release after failure; a duplicate acknowledged unhandled, a message another
//! instance works on republished unchanged after [`IN_PROGRESS_WAIT`].

use std::sync::Arc;

use metrics::Counter;

use super::handler::HandlerError;
use crate::Envelope;
use crate::idempotency::{ClaimResult, IN_PROGRESS_WAIT, IdempotencyStore, KeyFn};
use crate::runtime::engine::{Engine, Held};
use crate::runtime::telemetry::{ConsumeResult, POLYQ_IDEMPOTENCY_TOTAL};

/// A consumer's store, how it derives keys, and its meters.
pub(super) struct Idempotency {
    store: Arc<dyn IdempotencyStore>,
    key: Option<KeyFn>,
    meters: Meters,
}

struct Meters {
    claimed: Counter,
    duplicate: Counter,
    in_progress: Counter,
    unavailable: Counter,
}

/// What the claim decided for one delivery.
pub(super) enum Admission {
    /// Claimed under this key: run the handler, then [`Idempotency::finish`].
    Run(String),
    /// Settled without the handler (a duplicate, or republished for later).
    Settled(ConsumeResult),
    /// The store failed: the delivery fails as a handler error would.
    Failed(HandlerError),
}

impl Idempotency {
    pub(super) fn new(
        store: Arc<dyn IdempotencyStore>,
        key: Option<KeyFn>,
        queue: &str,
        transport: &'static str,
    ) -> Self {
        let meter = |outcome: &'static str| metrics::counter!(POLYQ_IDEMPOTENCY_TOTAL, "queue" => queue.to_owned(), "transport" => transport, "outcome" => outcome);
        Self {
            store,
            key,
            meters: Meters {
                claimed: meter("claimed"),
                duplicate: meter("duplicate"),
                in_progress: meter("in_progress"),
                unavailable: meter("unavailable"),
            },
        }
    }

    /// Claims the message's key and settles what must not reach the handler.
    pub(super) async fn admit(
        &self,
        engine: &Engine,
        held: &Held,
        envelope: &Envelope,
    ) -> Admission {
        let key = match &self.key {
            Some(key_of) => key_of(envelope),
            None => envelope.id().to_owned(),
        };
        match self.store.claim(&key).await {
            Ok(ClaimResult::Claimed) => {
                self.meters.claimed.increment(1);
                Admission::Run(key)
            }
            Ok(ClaimResult::AlreadyConfirmed) => {
                self.meters.duplicate.increment(1);
                tracing::debug!(queue = %engine.queue, %key, "duplicate of a confirmed message; acknowledged without the handler");
                Admission::Settled(engine.settle(held, ConsumeResult::Acked).await)
            }
            Ok(ClaimResult::InProgress) => {
                self.meters.in_progress.increment(1);
                tracing::debug!(queue = %engine.queue, %key, "another instance holds a live claim; republishing for later");
                tokio::select! {
                    () = tokio::time::sleep(IN_PROGRESS_WAIT) => {}
                    () = engine.abort.cancelled() => {
                        return Admission::Settled(engine.give_back(held, &engine.queue, "drain deadline reached while another instance held the claim").await);
                    }
                }
                Admission::Settled(
                    engine
                        .republish_unchanged(held, ConsumeResult::InProgress)
                        .await,
                )
            }
            Err(error) => {
                self.meters.unavailable.increment(1);
                tracing::warn!(queue = %engine.queue, %key, error = %polyq_amqp::error_chain(&error), "the idempotency store failed; the delivery fails and is tried again");
                Admission::Failed(HandlerError::from(error))
            }
        }
    }

    /// After the handler: confirms `key` when it succeeded, releases it otherwise. A failure
    /// here is logged, not fatal: an unconfirmed claim expires with its lease, which is the
    /// documented at-least-once window.
    pub(super) async fn finish(&self, queue: &str, key: &str, succeeded: bool) {
        let (done, what) = if succeeded {
            (self.store.confirm(key).await, "confirming")
        } else {
            (self.store.release(key).await, "releasing")
        };
        if let Err(error) = done {
            tracing::error!(queue, %key, error = %polyq_amqp::error_chain(&error), "{what} the idempotency claim failed; it expires with its lease");
        }
    }
}
