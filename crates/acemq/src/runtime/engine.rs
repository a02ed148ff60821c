//! The retry engine at work: the decisions of [`retry`](crate::retry) carried out against the
//! broker. A retry republishes the message with its attempt raised (to the rung queue for a
//! broker wait, to the source queue after a consumer wait) and then acknowledges the original;
//! a message given up on is republished into `Q.dlq` or `Q.parked` with `x-acemq-error`, then
//! acknowledged. Every republish is mandatory and confirmed: RabbitMQ acknowledges a plain
//! publish whose only queue is a classic queue on a node that is down, and drops it, while a
//! mandatory one comes back. One that does not land (returned, refused, unconfirmed) is
//! published again after a backoff while the delivery is held, until it lands: never
//! acknowledged into nothing, and never requeued, which would redeliver it at once in a loop
//! and, on a quorum queue, spend its delivery limit. Only the drain deadline gives a held
//! delivery back to the broker (`nack` with requeue). A republish refused for the message
//! itself (a property value the broker cannot take) fails alike every time, so it is not tried
//! again: the delivery is parked in `Q.parked` as it came, with the reason.

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

/// How long a republish waits for its confirm before it counts as not landed.
const REPUBLISH_CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// The wait before a republish that did not land is tried again; doubled after each further
/// miss, up to [`MOVE_BACKOFF_MAX`].
const MOVE_BACKOFF_FIRST: Duration = Duration::from_millis(100);

/// The longest wait between two tries of a republish that does not land: a missing queue
/// costs the broker two publishes a minute per held delivery, and a queue declared meanwhile
/// receives the message within this long.
const MOVE_BACKOFF_MAX: Duration = Duration::from_secs(30);

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
    /// Refused before it was sent: the message cannot be published as it is, ever.
    Invalid(String),
}

impl Republished {
    /// Why a republish into `target` that did not land missed.
    fn missed(self, target: &str) -> String {
        match self {
            Republished::Routed => String::new(),
            Republished::Unroutable => {
                format!("no queue `{target}` took it: it is missing, or its node is down")
            }
            Republished::Failed(why) | Republished::Invalid(why) => why,
        }
    }
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
                    tracing::warn!(queue = %self.queue, %rung, "retry rung queue missing, or its node is down; waiting in the consumer instead");
                    self.metrics.rung_missing(&rung);
                    delay = self.policy.jittered(wait.scheduled(), &mut rand::rng());
                }
                missed @ (Republished::Failed(_) | Republished::Invalid(_)) => {
                    return self
                        .land(
                            held,
                            &rung,
                            properties,
                            ConsumeResult::Retried,
                            Some(missed),
                        )
                        .await;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = self.abort.cancelled() => return self.give_back(held, &self.queue, "drain deadline reached during a retry wait").await,
        }
        self.land(held, &self.queue, properties, ConsumeResult::Retried, None)
            .await
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
        self.land(held, &target, properties, ConsumeResult::Parked, None)
            .await
    }

    /// Acknowledges after the handler accepted, or after a confirmed republish.
    pub(crate) async fn settle(&self, held: &Held, result: ConsumeResult) -> ConsumeResult {
        if let Err(error) = held.acker.ack().await {
            // A delivery from a channel that has since closed comes again: at least once.
            tracing::debug!(queue = %self.queue, error = %polyq_amqp::error_chain(&error), "acknowledgement not delivered; the broker will redeliver");
        }
        result
    }

    /// Gives the delivery back to the broker (requeued, the attempt unchanged) because the
    /// drain deadline came before it could be moved to `target`.
    pub(crate) async fn give_back(&self, held: &Held, target: &str, reason: &str) -> ConsumeResult {
        tracing::error!(queue = %self.queue, %target, %reason, "could not move the message; giving it back to the broker");
        if let Err(error) = held.acker.nack(true).await {
            tracing::debug!(queue = %self.queue, error = %polyq_amqp::error_chain(&error), "requeue not delivered; the broker will redeliver");
        }
        ConsumeResult::Failed
    }

    /// Republishes the held delivery to its own queue with its properties unchanged (the
    /// attempt too), then acknowledges it, reporting `result`: for a message that is to come
    /// back later without consuming an attempt.
    pub(crate) async fn republish_unchanged(
        &self,
        held: &Held,
        result: ConsumeResult,
    ) -> ConsumeResult {
        self.land(held, &self.queue, held.properties.clone(), result, None)
            .await
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
        // A per-message TTL would expire the copy in `.dlq` or `.parked` and lose it; RabbitMQ's
        // own dead-lettering drops `expiration` for the same reason.
        properties.expiration = None;
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
        self.land(held, target, properties, result, None).await
    }

    /// Republishes the held delivery's body with `properties` into `target` until the broker
    /// routes and confirms it, then acknowledges the delivery and reports `result`. `missed`
    /// is how a try already made did not land. Each miss is counted
    /// (`acemq.messages.set.aside.failed`) and followed by a backoff, the delivery held
    /// meanwhile; the drain deadline gives it back to the broker instead. A refusal of the
    /// message itself is not tried again: the delivery is parked as it came (see
    /// [`as_it_came`]), counted `parked`.
    ///
    /// Held rather than given back without requeue, as Python does so that the source queue's
    /// own dead-letter arguments catch it: the consumer cannot tell whether the source queue
    /// has them, and where it does they route through `acemq.dlx` to `Q.dlq`, so a copy that
    /// missed a `Q.dlq` that is not there would be dropped by the broker.
    async fn land(
        &self,
        held: &Held,
        target: &str,
        properties: Properties,
        result: ConsumeResult,
        mut missed: Option<Republished>,
    ) -> ConsumeResult {
        let (mut target, mut properties, mut result) = (target.to_owned(), properties, result);
        let mut parked_as_it_came = false;
        let mut backoff = MOVE_BACKOFF_FIRST;
        loop {
            match missed.take() {
                None => {}
                Some(Republished::Invalid(why)) if !parked_as_it_came => {
                    let reason = format!("could not be republished into `{target}`: {why}");
                    tracing::error!(queue = %self.queue, %target, %reason, "the message cannot be republished as it is; parking it as it came");
                    self.metrics.set_aside_failed(&target);
                    properties = as_it_came(&held.properties, &reason);
                    target = topology::parked_queue(&self.queue);
                    result = ConsumeResult::Parked;
                    parked_as_it_came = true;
                }
                Some(miss) => {
                    let reason = miss.missed(&target);
                    tracing::error!(queue = %self.queue, %target, %reason, retry_in = ?backoff, "could not move the message; holding it and trying again");
                    self.metrics.set_aside_failed(&target);
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = self.abort.cancelled() => {
                            return self.give_back(held, &target, "drain deadline reached before the message could be moved").await;
                        }
                    }
                    backoff = (backoff * 2).min(MOVE_BACKOFF_MAX);
                }
            }
            missed = match self
                .republish(&target, properties.clone(), held.body.clone())
                .await
            {
                Republished::Routed => return self.settle(held, result).await,
                miss => Some(miss),
            };
        }
    }

    /// Publishes to `queue` through the default exchange, mandatory, and waits for the
    /// confirm. The `user_id` property is left out: RabbitMQ refuses a publish whose `user_id`
    /// is not the publishing connection's user, so a message another user sent with it could
    /// never be moved by this connection.
    async fn republish(&self, queue: &str, mut properties: Properties, body: Bytes) -> Republished {
        properties.user_id = None;
        let message = OutgoingMessage::new("", queue, properties, body);
        match self
            .shared
            .republish(message, REPUBLISH_CONFIRM_TIMEOUT)
            .await
        {
            Ok(PublishOutcome::Acked) => Republished::Routed,
            Ok(PublishOutcome::Returned(_)) => Republished::Unroutable,
            Ok(PublishOutcome::Nacked) => Republished::Failed("the broker refused it".to_owned()),
            Err(error) if error.is_invalid() => Republished::Invalid(error.to_string()),
            Err(error) => Republished::Failed(polyq_amqp::error_chain(&error)),
        }
    }
}

/// The properties of a delivery parked because it cannot be republished as the engine would
/// write it: as it came, with `x-acemq-error = reason`, less what a publish could be refused
/// for. An `expiration` is left out (a parked message must not expire, and the broker reads
/// some spellings it refuses on a publish); a text property over 255 bytes (which a delivery
/// never carries) is left out too.
fn as_it_came(received: &Properties, reason: &str) -> Properties {
    let mut properties = received.clone();
    properties.expiration = None;
    for text in [
        &mut properties.content_type,
        &mut properties.content_encoding,
        &mut properties.correlation_id,
        &mut properties.reply_to,
        &mut properties.message_id,
        &mut properties.kind,
        &mut properties.app_id,
    ] {
        *text = text.as_deref().and_then(polyq_amqp::short_string_or_none);
    }
    properties
        .headers
        .insert(headers::ERROR.to_owned(), FieldValue::from(reason));
    properties
}
