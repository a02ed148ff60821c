//! The retry engine at work: the decisions of [`retry`](crate::retry) carried out against the
//! broker. A retry republishes the message with its attempt raised (to the rung queue for a
//! broker wait, to the source queue after a consumer wait) and then acknowledges the original;
//! a message given up on is republished into `Q.dlq` or `Q.parked` with `x-acemq-error`, then
//! acknowledged. Every republish is mandatory and confirmed; when one fails, the delivery goes
//! back to the broker (`nack` with requeue) instead of being lost.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use polyq_amqp::{Acker, FieldValue, OutgoingMessage, Properties, PublishOutcome};
use tokio_util::sync::CancellationToken;

use crate::Envelope;
use crate::contract::retry::{RetryDecision, RetryPolicy, WaitPlace};
use crate::contract::{headers, topology};
use crate::runtime::connection::Shared;
use crate::runtime::telemetry::{ConsumeMetrics, ConsumeResult};

/// How long a republish waits for its confirm before the delivery is given back.
const REPUBLISH_CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// A delivery the engine may republish and must settle.
pub(crate) struct Held {
    pub(crate) properties: Properties,
    pub(crate) body: Bytes,
    pub(crate) acker: Acker,
}

/// How a republish ended.
enum Republished {
    Routed,
    Unroutable,
    Failed(String),
}

/// One consumer's engine.
pub(crate) struct Engine {
    pub(crate) shared: Arc<Shared>,
    pub(crate) queue: Arc<str>,
    pub(crate) policy: RetryPolicy,
    pub(crate) metrics: ConsumeMetrics,
    /// Fires at the drain deadline: a consumer wait in progress gives its delivery back.
    pub(crate) abort: CancellationToken,
}

impl Engine {
    /// After a failed attempt: retry by the policy, or set the message aside into `Q.dlq`
    /// with `<reason>: <error>`.
    pub(crate) async fn retry(
        &self,
        held: &Held,
        envelope: &Envelope,
        error: &str,
    ) -> ConsumeResult {
        let decision =
            self.policy
                .decide(envelope.attempt(), Some(envelope.age()), &mut rand::rng());
        let wait = match decision {
            RetryDecision::GiveUp(reason) => {
                return self
                    .dead_letter(
                        held,
                        envelope,
                        format!("{reason}: {error}"),
                        ConsumeResult::DeadLettered,
                    )
                    .await;
            }
            RetryDecision::Retry(wait) => wait,
        };
        let next = match envelope.next_attempt() {
            Ok(next) => next,
            // The attempt counter is at the wire's ceiling: nothing more can be counted.
            Err(_) => {
                let reason = format!("exhausted {} attempts: {error}", envelope.attempt());
                return self
                    .dead_letter(held, envelope, reason, ConsumeResult::DeadLettered)
                    .await;
            }
        };
        let mut properties = held.properties.clone();
        next.write_properties(&mut properties);
        let mut delay = wait.delay();
        if wait.place() == WaitPlace::Broker {
            let rung = topology::retry_queue(&self.queue, wait.delay());
            match self
                .republish(&rung, properties.clone(), held.body.clone())
                .await
            {
                Republished::Routed => return self.settle(held, ConsumeResult::Retried).await,
                Republished::Unroutable => {
                    tracing::warn!(queue = %self.queue, %rung, "retry rung queue missing; waiting in the consumer instead");
                    self.metrics.rung_missing(&rung);
                    delay = self.policy.jittered(wait.scheduled(), &mut rand::rng());
                }
                Republished::Failed(reason) => return self.give_back(held, &rung, &reason).await,
            }
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = self.abort.cancelled() => return self.give_back(held, &self.queue, "drain deadline reached during a retry wait").await,
        }
        match self
            .republish(&self.queue, properties, held.body.clone())
            .await
        {
            Republished::Routed => self.settle(held, ConsumeResult::Retried).await,
            Republished::Unroutable => {
                self.give_back(held, &self.queue, "the source queue is gone")
                    .await
            }
            Republished::Failed(reason) => self.give_back(held, &self.queue, &reason).await,
        }
    }

    /// Into `Q.dlq` with `x-acemq-error = reason`, counted as `result` (`dead_lettered` when
    /// the engine gave up, `rejected` when the handler declared the message fatal).
    pub(crate) async fn dead_letter(
        &self,
        held: &Held,
        envelope: &Envelope,
        reason: String,
        result: ConsumeResult,
    ) -> ConsumeResult {
        let target = topology::dead_letter_queue(&self.queue);
        self.set_aside(held, envelope, &target, reason, result)
            .await
    }

    /// Into `Q.parked` at the handler's request.
    pub(crate) async fn park(
        &self,
        held: &Held,
        envelope: &Envelope,
        reason: String,
    ) -> ConsumeResult {
        let target = topology::parked_queue(&self.queue);
        self.set_aside(held, envelope, &target, reason, ConsumeResult::Parked)
            .await
    }

    /// Into `Q.parked` because the body cannot be decoded: the original bytes and properties
    /// unchanged, with `x-acemq-error = could not be decoded: <reason>` added.
    pub(crate) async fn park_undecodable(&self, held: &Held, reason: &str) -> ConsumeResult {
        let target = topology::parked_queue(&self.queue);
        let mut properties = held.properties.clone();
        properties.headers.insert(
            headers::ERROR.to_owned(),
            FieldValue::from(format!("could not be decoded: {reason}").as_str()),
        );
        tracing::warn!(queue = %self.queue, %reason, "undecodable message parked");
        match self.republish(&target, properties, held.body.clone()).await {
            Republished::Routed => self.settle(held, ConsumeResult::Parked).await,
            Republished::Unroutable => {
                self.give_back(held, &target, "the parking queue is gone")
                    .await
            }
            Republished::Failed(why) => self.give_back(held, &target, &why).await,
        }
    }

    /// Acknowledges after the handler accepted, or after a confirmed republish.
    pub(crate) async fn settle(&self, held: &Held, result: ConsumeResult) -> ConsumeResult {
        if let Err(error) = held.acker.ack().await {
            // A delivery from a channel that has since closed comes again: at least once.
            tracing::debug!(queue = %self.queue, error = %polyq_amqp::error_chain(&error), "acknowledgement not delivered; the broker will redeliver");
        }
        result
    }

    /// Gives the delivery back to the broker (requeued, the attempt unchanged) because moving
    /// it to `target` failed.
    pub(crate) async fn give_back(&self, held: &Held, target: &str, reason: &str) -> ConsumeResult {
        tracing::error!(queue = %self.queue, %target, %reason, "could not move the message; giving it back to the broker");
        self.metrics.set_aside_failed(target);
        if let Err(error) = held.acker.nack(true).await {
            tracing::debug!(queue = %self.queue, error = %polyq_amqp::error_chain(&error), "requeue not delivered; the broker will redeliver");
        }
        ConsumeResult::Failed
    }

    async fn set_aside(
        &self,
        held: &Held,
        envelope: &Envelope,
        target: &str,
        reason: String,
        result: ConsumeResult,
    ) -> ConsumeResult {
        let marked = envelope.to_builder().error(reason.as_str()).build();
        let mut properties = held.properties.clone();
        match marked {
            Ok(marked) => marked.write_properties(&mut properties),
            // Unreachable for an envelope read off the wire (its counters are in range); the
            // reason still travels.
            Err(_) => {
                properties
                    .headers
                    .insert(headers::ERROR.to_owned(), FieldValue::from(reason.as_str()));
            }
        }
        tracing::warn!(queue = %self.queue, %target, %reason, id = envelope.id(), "message set aside");
        match self.republish(target, properties, held.body.clone()).await {
            Republished::Routed => self.settle(held, result).await,
            Republished::Unroutable => self.give_back(held, target, "the queue is gone").await,
            Republished::Failed(why) => self.give_back(held, target, &why).await,
        }
    }

    /// Publishes to `queue` through the default exchange, mandatory, and waits for the
    /// confirm.
    async fn republish(&self, queue: &str, properties: Properties, body: Bytes) -> Republished {
        let message = OutgoingMessage::new("", queue, properties, body);
        match self
            .shared
            .republish(message, REPUBLISH_CONFIRM_TIMEOUT)
            .await
        {
            Ok(PublishOutcome::Acked) => Republished::Routed,
            Ok(PublishOutcome::Returned(_)) => Republished::Unroutable,
            Ok(PublishOutcome::Nacked) => Republished::Failed("the broker refused it".to_owned()),
            Err(error) => Republished::Failed(polyq_amqp::error_chain(&error)),
        }
    }
}
