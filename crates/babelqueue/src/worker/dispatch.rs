//! One reserved message, from bytes to settlement (reference §4.2): schema-version gate → decode
//! (poison check) → URN lookup (unknown-URN strategy) → interceptors and handler → ack, retry
//! with `attempts+1`, or dead-letter with the `dead_letter` block.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tracing::instrument::Instrumented;
use tracing::{Instrument as _, Span, debug, error, warn};

use super::handler::{Failure, HandlerFuture, Registry};
use super::interceptor::Interceptors;
use super::{AfterFailure, Job, JobContext, JobResult, Settings, Shutdown, UnknownUrn};
use crate::dead_letter::{DeadLetter, DeadLetterReason, poison_record};
use crate::envelope::Envelope;
use crate::payload::{PayloadRules, exception_name};
use crate::projection::{SchemaGate, schema_version_gate};
use crate::telemetry;
use crate::transport::{Headers, Reserved, Transport};
use crate::{Verdict, classify};

/// How one message was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The handler succeeded (and the ack was sent, or its failure logged).
    Succeeded,
    /// Re-published with `attempts+1`.
    Retried,
    /// Written to the dead-letter queue.
    DeadLettered,
    /// Put back unchanged (the `release` strategy, or a stop that could not wait).
    Released,
    /// Acknowledged and dropped (the `delete` strategy, or exhausted with dead-lettering off).
    Deleted,
    /// Settling failed; the message was handed back to the broker, or left for it to return.
    Unsettled,
}

/// What every message of one worker shares.
pub(crate) struct Context<T: Transport> {
    pub(crate) transport: Arc<T>,
    pub(crate) queue: String,
    pub(crate) dead_letter_queue: String,
    pub(crate) registry: Registry,
    pub(crate) interceptors: Interceptors,
    pub(crate) payload: PayloadRules,
    pub(crate) settings: Settings,
}

/// Why a message is being dead-lettered or retried.
struct Fault {
    reason: DeadLetterReason,
    failure: Failure,
}

impl<T: Transport> Context<T> {
    pub(crate) async fn dispatch(
        &self,
        reserved: Reserved<T::Receipt>,
        shutdown: &Shutdown,
    ) -> Outcome {
        let Reserved {
            body,
            headers,
            broker_attempts,
            receipt,
        } = reserved;

        if let Some(version) = self.transport.schema_version(&receipt)
            && schema_version_gate(Some(&version)) == SchemaGate::Reject
        {
            warn!(
                queue = %self.queue,
                schema_version = %shown(&version),
                "unsupported broker schema version: dead-lettering the raw body, never retried"
            );
            return self.dead_letter(&receipt, body, shutdown).await;
        }

        let mut envelope = match classify(&body) {
            Verdict::Accepted(decoded) => decoded.envelope,
            Verdict::Poison(cause) => {
                return self
                    .poison(
                        &receipt,
                        &body,
                        broker_attempts,
                        cause.to_string(),
                        shutdown,
                    )
                    .await;
            }
            Verdict::Rejected { reason, .. } => {
                let why = format!("the envelope is not accepted: {reason}");
                return self
                    .poison(&receipt, &body, broker_attempts, why, shutdown)
                    .await;
            }
        };
        let counted = envelope.attempts().unwrap_or(0);
        let mut attempts = broker_attempts.map_or(counted, |broker| counted.max(broker));
        if attempts < 0 {
            // The Python SDK counts on from a negative counter, so from i64::MIN it would retry
            // without end; counting from 0 keeps the retries bounded. A huge counter needs no
            // care: it is past `max_attempts` at once and dead-lettered, as in Python.
            warn!(queue = %self.queue, attempts, "negative attempts counter: counted from 0 so that retries stay bounded");
            attempts = 0;
        }
        envelope.set_attempts(attempts);
        let urn = envelope.urn().unwrap_or_default().to_owned();

        let Some(handler) = self.registry.get(&urn).cloned() else {
            return self
                .unknown_urn(&receipt, envelope, &headers, &urn, shutdown)
                .await;
        };

        let span = telemetry::process_span(&envelope, &self.queue, attempts, &headers);
        // The handler sees the checked, decrypted payload; a retry and the dead-letter queue
        // carry `envelope`, the body as it arrived.
        let (seen, refused) = match self.payload.incoming(&envelope) {
            Ok(clear) => (clear.unwrap_or_else(|| envelope.clone()), None),
            Err(error) => {
                let failure = Failure {
                    message: polyq_amqp::error_chain(&error),
                    exception: exception_name(&error).to_owned(),
                    hand_back: false,
                };
                (envelope.clone(), Some(failure))
            }
        };
        let job = Job::new(seen, headers.clone(), self.queue.clone());
        let call = |job| match refused {
            Some(failure) => Box::pin(std::future::ready(Err(failure))) as HandlerFuture,
            None => handler.call(job),
        };
        if self.interceptors.is_empty() {
            let run = span.in_scope(|| call(job)).instrument(span.clone());
            return self
                .settle_handled(&receipt, run, &span, envelope, &headers, &urn, shutdown)
                .await
                .0;
        }
        // The handler owns its job; the interceptors look at a copy that outlives it.
        let seen = job.clone();
        let context = JobContext::new(&seen);
        let (passed, refusal) = span.in_scope(|| self.interceptors.before(&context));
        let run = match refusal {
            Some(refusal) => Box::pin(std::future::ready(Err(refusal))),
            None => span.in_scope(|| call(job)),
        }
        .instrument(span.clone());
        let (outcome, result) = self
            .settle_handled(&receipt, run, &span, envelope, &headers, &urn, shutdown)
            .await;
        span.in_scope(|| self.interceptors.after(passed, &context, &result));
        outcome
    }

    /// Awaits the handler (or a refusal standing in for it) and settles the message by its
    /// result, which is returned as the interceptors see it.
    #[allow(clippy::too_many_arguments)] // one message's parts, each used once
    async fn settle_handled(
        &self,
        receipt: &T::Receipt,
        run: Instrumented<HandlerFuture>,
        span: &Span,
        envelope: Envelope,
        headers: &Headers,
        urn: &str,
        shutdown: &Shutdown,
    ) -> (Outcome, JobResult) {
        let handled = tokio::select! {
            handled = run => handled,
            never = self.keep_reserved(receipt, urn) => match never {},
            () = shutdown.stopping_now() => {
                warn!(queue = %self.queue, urn, "stopping: releasing the message of an unfinished handler");
                let outcome = self.release(receipt, Duration::ZERO, shutdown).await;
                return (outcome, JobResult::Interrupted);
            }
        };
        match handled {
            Ok(()) => {
                if let Err(error) = self.transport.ack(receipt).await {
                    // The work is done: a lost ack means a redelivery, never a retry.
                    warn!(queue = %self.queue, urn, error = %polyq_amqp::error_chain(&error), "ack after success failed; the broker may deliver the message again");
                }
                (Outcome::Succeeded, JobResult::Succeeded)
            }
            Err(failure) if failure.hand_back => {
                warn!(queue = %self.queue, urn, error = %failure.message, "another consumer holds the idempotency claim: the message goes back unchanged, no attempt counted");
                let outcome = self
                    .release(receipt, self.settings.redelivery_pause, shutdown)
                    .await;
                let next = AfterFailure::HandedBack;
                (
                    outcome,
                    JobResult::Failed {
                        error: failure.message,
                        next,
                    },
                )
            }
            Err(failure) => {
                telemetry::record_exception(span, &failure.exception, &failure.message);
                let error = failure.message.clone();
                let fault = Fault {
                    reason: DeadLetterReason::Failed,
                    failure,
                };
                let outcome = self
                    .retry_or_dead_letter(receipt, envelope, headers, fault, shutdown)
                    .await;
                let next = match outcome {
                    Outcome::Retried => AfterFailure::Retried,
                    Outcome::DeadLettered => AfterFailure::DeadLettered,
                    Outcome::Deleted => AfterFailure::Dropped,
                    // A failed job is retried, dead-lettered, dropped, or handed back when that
                    // failed.
                    _ => AfterFailure::HandedBack,
                };
                (outcome, JobResult::Failed { error, next })
            }
        }
    }

    /// Extends the reservation of a running handler three times within the time it is sure to
    /// hold, so the sweep of any SDK sharing the queue does not hand it to a second worker while
    /// this one works (one failed extension is survived); only a worker that died stops
    /// extending. Never finishes: it is dropped with the handler. Where reservations do not
    /// lapse, it only waits.
    async fn keep_reserved(&self, receipt: &T::Receipt, urn: &str) -> Infallible {
        let Some(every) = self
            .transport
            .reservation_holds_for()
            .map(|held| held / 3)
            .filter(|every| !every.is_zero())
        else {
            return std::future::pending().await;
        };
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match self.transport.extend_reservation(receipt).await {
                Ok(true) => debug!(queue = %self.queue, urn, "reservation extended"),
                Ok(false) => {
                    warn!(queue = %self.queue, urn, "the reservation lapsed before its handler finished: the message may run a second time elsewhere, and settling it will find it gone");
                    return std::future::pending().await;
                }
                Err(error) => {
                    warn!(queue = %self.queue, urn, error = %polyq_amqp::error_chain(&error), "could not extend the reservation of a running handler; trying again");
                }
            }
        }
    }

    async fn unknown_urn(
        &self,
        receipt: &T::Receipt,
        mut envelope: Envelope,
        headers: &Headers,
        urn: &str,
        shutdown: &Shutdown,
    ) -> Outcome {
        let failure = Failure {
            message: format!("no handler is registered for URN {urn:?}"),
            exception: "UnknownUrn".to_owned(),
            hand_back: false,
        };
        match self.settings.unknown_urn {
            UnknownUrn::Delete => {
                warn!(queue = %self.queue, urn, "no handler: dropping the message (unknown-URN strategy delete)");
                self.ack_dropped(receipt, "unknown_urn").await
            }
            UnknownUrn::Release => {
                debug!(queue = %self.queue, urn, "no handler: releasing the message (unknown-URN strategy release)");
                self.release(receipt, self.settings.unknown_urn_release_delay, shutdown)
                    .await
            }
            UnknownUrn::DeadLetter => {
                let block = self.block(DeadLetterReason::UnknownUrn, &envelope, &failure);
                envelope.annotate(&block);
                self.dead_letter_envelope(receipt, &envelope, shutdown)
                    .await
            }
            UnknownUrn::Fail => {
                let fault = Fault {
                    reason: DeadLetterReason::UnknownUrn,
                    failure,
                };
                self.retry_or_dead_letter(receipt, envelope, headers, fault, shutdown)
                    .await
            }
        }
    }

    async fn retry_or_dead_letter(
        &self,
        receipt: &T::Receipt,
        mut envelope: Envelope,
        headers: &Headers,
        fault: Fault,
        shutdown: &Shutdown,
    ) -> Outcome {
        let attempts = envelope.attempts().unwrap_or(0).saturating_add(1);
        envelope.set_attempts(attempts);
        if attempts < i64::from(self.settings.max_attempts) {
            let delay = self.settings.backoff.delay(attempts);
            debug!(queue = %self.queue, attempts, ?delay, error = %fault.failure.message, "retrying");
            let body = match envelope.encode() {
                Ok(body) => Bytes::from(body),
                Err(error) => return self.unencodable(receipt, &error, shutdown).await,
            };
            return match self
                .transport
                .retry(receipt, &self.queue, body, headers, delay)
                .await
            {
                Ok(()) => Outcome::Retried,
                Err(error) => {
                    error!(queue = %self.queue, error = %polyq_amqp::error_chain(&error), "retry publish failed; the message was not acknowledged");
                    self.hand_back(receipt, shutdown).await
                }
            };
        }
        if !self.settings.dead_letter {
            warn!(queue = %self.queue, attempts, error = %fault.failure.message, "attempts exhausted: dropping the message (dead-lettering off)");
            return self.ack_dropped(receipt, "attempts_exhausted").await;
        }
        warn!(queue = %self.queue, attempts, error = %fault.failure.message, "attempts exhausted: dead-lettering");
        let block = self.block(fault.reason, &envelope, &fault.failure);
        envelope.annotate(&block);
        self.dead_letter_envelope(receipt, &envelope, shutdown)
            .await
    }

    fn block(
        &self,
        reason: DeadLetterReason,
        envelope: &Envelope,
        failure: &Failure,
    ) -> DeadLetter {
        let original_queue = envelope
            .meta()
            .and_then(|meta| meta.queue())
            .filter(|queue| !queue.is_empty())
            .unwrap_or(&self.queue);
        DeadLetter::new(reason, original_queue, envelope.attempts().unwrap_or(0))
            .error(failure.message.clone())
            .exception(failure.exception.clone())
    }

    async fn dead_letter_envelope(
        &self,
        receipt: &T::Receipt,
        envelope: &Envelope,
        shutdown: &Shutdown,
    ) -> Outcome {
        match envelope.encode() {
            Ok(body) => self.dead_letter(receipt, body.into(), shutdown).await,
            Err(error) => self.unencodable(receipt, &error, shutdown).await,
        }
    }

    /// A decoded envelope always re-encodes; if it ever does not, say so and keep the message.
    async fn unencodable(
        &self,
        receipt: &T::Receipt,
        error: &crate::Error,
        shutdown: &Shutdown,
    ) -> Outcome {
        error!(queue = %self.queue, error = %polyq_amqp::error_chain(error), "cannot re-encode the envelope; the message was not acknowledged");
        self.hand_back(receipt, shutdown).await
    }

    async fn poison(
        &self,
        receipt: &T::Receipt,
        body: &[u8],
        broker_attempts: Option<i64>,
        cause: String,
        shutdown: &Shutdown,
    ) -> Outcome {
        // Whatever the unknown-URN strategy says: that strategy is about messages that decode
        // and name a URN nobody handles, and a body nobody can read is never dropped unseen.
        warn!(queue = %self.queue, %cause, "poison message: dead-lettering it on its first delivery");
        let block = DeadLetter::new(
            DeadLetterReason::Poison,
            self.queue.clone(),
            broker_attempts.unwrap_or(0).max(0),
        )
        .error(cause)
        .exception("PoisonCause");
        let record = poison_record(body, &block);
        self.dead_letter(receipt, record.into(), shutdown).await
    }

    async fn dead_letter(&self, receipt: &T::Receipt, body: Bytes, shutdown: &Shutdown) -> Outcome {
        match self
            .transport
            .dead_letter(receipt, &self.dead_letter_queue, body)
            .await
        {
            Ok(()) => Outcome::DeadLettered,
            Err(error) => {
                error!(
                    queue = %self.queue,
                    dead_letter_queue = %self.dead_letter_queue,
                    error = %polyq_amqp::error_chain(&error),
                    "dead-letter write failed; the message was not acknowledged and comes back"
                );
                self.hand_back(receipt, shutdown).await
            }
        }
    }

    /// Acknowledges a message dropped on purpose, counted by
    /// [`MESSAGES_DROPPED_TOTAL`](super::MESSAGES_DROPPED_TOTAL) with `reason`.
    async fn ack_dropped(&self, receipt: &T::Receipt, reason: &'static str) -> Outcome {
        metrics::counter!(
            super::MESSAGES_DROPPED_TOTAL,
            "queue" => self.queue.clone(),
            "reason" => reason,
        )
        .increment(1);
        match self.transport.ack(receipt).await {
            Ok(()) => Outcome::Deleted,
            Err(error) => {
                warn!(queue = %self.queue, error = %polyq_amqp::error_chain(&error), "ack of a dropped message failed; it may come back");
                Outcome::Unsettled
            }
        }
    }

    async fn release(&self, receipt: &T::Receipt, delay: Duration, shutdown: &Shutdown) -> Outcome {
        match self.transport.release(receipt, delay).await {
            Ok(()) => Outcome::Released,
            Err(error) => {
                error!(queue = %self.queue, error = %polyq_amqp::error_chain(&error), "release failed; the message was not acknowledged");
                self.hand_back(receipt, shutdown).await
            }
        }
    }

    /// After a failed settlement: the message goes back unchanged, after a pause so a broken
    /// dead-letter queue does not turn into a busy loop. When even that fails the reservation is
    /// dropped unsettled: its receipt gives it back once more as it is dropped, and failing that
    /// the broker returns it (channel close, reservation deadline).
    async fn hand_back(&self, receipt: &T::Receipt, shutdown: &Shutdown) -> Outcome {
        tokio::select! {
            () = tokio::time::sleep(self.settings.redelivery_pause) => {}
            () = shutdown.stopping_now() => {}
        }
        if let Err(error) = self.transport.release(receipt, Duration::ZERO).await {
            error!(queue = %self.queue, error = %polyq_amqp::error_chain(&error), "could not hand the message back either; the broker returns it when the reservation lapses");
        }
        Outcome::Unsettled
    }
}

/// A header value for a log line: escaped and cut at 64 characters.
fn shown(value: &str) -> String {
    let escaped = value.escape_default().to_string();
    match escaped.char_indices().nth(64) {
        Some((cut, _)) => format!("{}...", &escaped[..cut]),
        None => escaped,
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn logged_header_values_are_escaped_and_bounded() {
        assert_eq!(shown("2"), "2");
        assert_eq!(shown("\t1\n"), "\\t1\\n");
        let long = "x".repeat(100);
        assert_eq!(shown(&long), format!("{}...", "x".repeat(64)));
    }
}
