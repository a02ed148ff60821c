//! The dispatch loop of one consumer: deliveries to handler tasks, at most `concurrency` at
//! once, pause and resume, and the drain.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::{FutureExt, StreamExt};
use polyq_amqp::{ConsumeOptions, Delivery};
use polyq_runtime::Refusal;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::handler::{HandlerError, Message, Outcome};
use super::idempotent::{Admission, Idempotency};
use super::{BoxHandler, DrainReport};
use crate::Envelope;
use crate::contract::codec::{Composite, Decode as _};
use crate::error::RuntimeError;
use crate::runtime::connection::AceMq;
use crate::runtime::engine::{Engine, Held};
use crate::runtime::telemetry::{self, ConsumeResult};

/// What the handler tasks of one consumer share.
pub(super) struct Worker<T> {
    pub(super) mq: AceMq,
    pub(super) queue: Arc<str>,
    pub(super) decoders: Composite<T>,
    pub(super) handler: BoxHandler<T>,
    pub(super) in_flight: Arc<AtomicUsize>,
    /// How to subscribe, on start and on each resume.
    pub(super) subscription: ConsumeOptions,
    /// Set when the consumer is idempotent.
    pub(super) idempotency: Option<Idempotency>,
    pub(super) engine: Engine,
}

/// What the application's handle asks of the dispatcher.
pub(super) enum Control {
    /// Stop the subscription; answer once it is cancelled.
    Pause(oneshot::Sender<()>),
    /// Subscribe again unless subscribed.
    Resume(oneshot::Sender<Result<(), RuntimeError>>),
    /// Stop for good, letting running handlers finish within the timeout.
    Drain(Duration),
}

/// How one handler task ended.
enum Ended {
    Finished,
    Interrupted,
}

impl Ended {
    /// The engine gives a delivery back only when the drain deadline interrupted it.
    fn after(result: ConsumeResult) -> Ended {
        match result {
            ConsumeResult::Failed => Ended::Interrupted,
            _ => Ended::Finished,
        }
    }
}

/// Runs until asked to drain (or until the handle is dropped), then drains. While paused, or
/// after the delivery stream ended on its own, there is no subscription: running handlers
/// carry on and the loop waits for the application's next request.
pub(super) async fn run<T: Send + 'static>(
    worker: Arc<Worker<T>>,
    stream: polyq_amqp::Consumer,
    concurrency: usize,
    mut controls: mpsc::UnboundedReceiver<Control>,
) -> DrainReport {
    let mut tasks: JoinSet<Ended> = JoinSet::new();
    let mut report = DrainReport::default();
    let mut subscribed = Some(stream);
    let timeout = loop {
        tokio::select! {
            biased;
            control = controls.recv() => match control {
                Some(Control::Drain(timeout)) => break timeout,
                // The handle was dropped.
                None => break super::DROP_DRAIN_TIMEOUT,
                Some(Control::Pause(done)) => {
                    if let Some(stream) = subscribed.take() {
                        let returned = worker.unsubscribe(stream).await;
                        tracing::debug!(queue = %worker.queue, returned, "consumer paused");
                    }
                    let _ = done.send(());
                }
                Some(Control::Resume(done)) => {
                    let resumed = match subscribed {
                        Some(_) => Ok(()),
                        None => worker.subscribe().await.map(|stream| {
                            tracing::debug!(queue = %worker.queue, "consumer resumed");
                            report.ended = None;
                            subscribed = Some(stream);
                        }),
                    };
                    let _ = done.send(resumed);
                }
            },
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(error) = joined {
                    tracing::error!(queue = %worker.queue, error = %polyq_amqp::error_chain(&error), "a consumer task failed");
                }
            }
            next = next_delivery(&mut subscribed), if tasks.len() < concurrency => match next {
                Some(Ok(delivery)) => {
                    worker.in_flight.fetch_add(1, Ordering::AcqRel);
                    tasks.spawn(Arc::clone(&worker).process(delivery));
                }
                ended => {
                    report.ended = Some(match ended {
                        Some(Err(error)) => {
                            tracing::error!(queue = %worker.queue, error = %polyq_amqp::error_chain(&error), "consumer stopped");
                            error.to_string()
                        }
                        _ => "the connection was closed".to_owned(),
                    });
                    if let Some(stream) = subscribed.take() {
                        report.returned += worker.unsubscribe(stream).await;
                    }
                }
            },
        }
    };
    if let Some(stream) = subscribed.take() {
        report.returned += worker.unsubscribe(stream).await;
    }

    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, tasks.join_next()).await {
            Ok(Some(joined)) => note(joined, &mut report),
            Ok(None) => break,
            Err(_) => {
                worker.engine.abort.cancel();
                while let Some(joined) = tasks.join_next().await {
                    note(joined, &mut report);
                }
                break;
            }
        }
    }
    tracing::debug!(queue = %worker.queue, ?report, "consumer drained");
    report
}

/// The subscription's next delivery; never, while there is no subscription.
async fn next_delivery(
    subscribed: &mut Option<polyq_amqp::Consumer>,
) -> Option<polyq_amqp::Result<Delivery>> {
    match subscribed {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

fn note(joined: Result<Ended, tokio::task::JoinError>, report: &mut DrainReport) {
    match joined {
        Ok(Ended::Finished) => report.completed += 1,
        Ok(Ended::Interrupted) => report.interrupted += 1,
        // Handler panics are caught inside the task; this is a bug in the engine itself.
        Err(error) => {
            tracing::error!(error = %polyq_amqp::error_chain(&error), "a consumer task failed");
            report.interrupted += 1;
        }
    }
}

impl<T: Send + 'static> Worker<T> {
    /// Subscribes to the queue.
    pub(super) async fn subscribe(&self) -> Result<polyq_amqp::Consumer, RuntimeError> {
        Ok(self
            .mq
            .shared
            .client
            .consume(&self.queue, &self.subscription)
            .await?)
    }

    /// Cancels the subscription and gives the deliveries received but not handed to a handler
    /// back to the broker, returning how many. Handlers already running keep their deliveries.
    async fn unsubscribe(&self, mut stream: polyq_amqp::Consumer) -> usize {
        // Collected before the cancel: giving them back earlier would let the broker send them
        // straight back.
        let mut unhandled = Vec::new();
        while let Some(Some(Ok(delivery))) = stream.next().now_or_never() {
            unhandled.push(delivery);
        }
        if let Err(error) = stream.cancel().await {
            tracing::debug!(queue = %self.queue, error = %polyq_amqp::error_chain(&error), "cancelling the consumer failed; its channel closes instead");
        }
        let returned = unhandled.len();
        for delivery in unhandled {
            if let Err(error) = delivery.nack(true).await {
                tracing::debug!(queue = %self.queue, error = %polyq_amqp::error_chain(&error), "returning an unhandled delivery failed; the broker redelivers it");
            }
        }
        returned
    }

    async fn process(self: Arc<Self>, delivery: Delivery) -> Ended {
        let ended = self.handle(delivery).await;
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        ended
    }

    async fn handle(&self, delivery: Delivery) -> Ended {
        let started = Instant::now();
        let Delivery {
            exchange,
            routing_key,
            redelivered,
            properties,
            body,
            acker,
        } = delivery;
        let envelope = Envelope::from_properties(&properties, &routing_key);
        let metrics = &self.engine.metrics;
        metrics.started(envelope.attempt());
        let reply_to = properties.reply_to.clone();
        let held = Held {
            properties,
            body,
            acker,
        };
        let content_type = held.properties.content_type.as_deref();
        let prepared = match self.decoders.prepare_for(content_type, &held.body) {
            Some(preparation) => preparation.await,
            None => Ok(()),
        };
        let payload =
            match prepared.and_then(|()| self.decoders.decode_for(content_type, &held.body)) {
                Ok(payload) => payload,
                Err(reason) => {
                    let result = self.engine.park_undecodable(&held, &reason.0).await;
                    metrics.finished(result, started.elapsed().as_secs_f64());
                    return Ended::after(result);
                }
            };

        let span = telemetry::process_span(&self.queue, &exchange, &routing_key);
        telemetry::adopt_trace_context(&span, &held.properties.headers);
        telemetry::record_envelope(&span, &envelope);
        let envelope = Arc::new(envelope);
        let message = Message {
            payload,
            envelope: Arc::clone(&envelope),
            queue: Arc::clone(&self.queue),
            exchange,
            routing_key,
            redelivered,
            reply_to,
        };
        let mut claimed = None;
        let mut store_failed = None;
        if let Some(idempotency) = &self.idempotency {
            match idempotency.admit(&self.engine, &held, &envelope).await {
                Admission::Run(key) => claimed = Some((idempotency, key)),
                Admission::Settled(result) => {
                    telemetry::record_outcome(&span, result.as_str());
                    metrics.finished(result, started.elapsed().as_secs_f64());
                    return Ended::after(result);
                }
                // Without a claim the handler must not run; the delivery fails as its error would.
                Admission::Failed(error) => store_failed = Some(error),
            }
        }
        let verdict = match store_failed {
            Some(error) => Verdict::Handled(Outcome::Retry(error)),
            None => {
                let run = self
                    .run_handler(message, &envelope)
                    .instrument(span.clone());
                tokio::select! {
                    verdict = run => verdict,
                    () = self.engine.abort.cancelled() => {
                        if let Some((idempotency, key)) = &claimed {
                            idempotency.finish(&self.queue, key, false).await;
                        }
                        let result = self.engine.give_back(&held, &self.queue, "drain deadline reached while the handler ran").await;
                        telemetry::record_outcome(&span, result.as_str());
                        metrics.finished(result, started.elapsed().as_secs_f64());
                        return Ended::Interrupted;
                    }
                }
            }
        };
        if let Some((idempotency, key)) = &claimed {
            let succeeded = matches!(verdict, Verdict::Handled(Outcome::Accept));
            idempotency.finish(&self.queue, key, succeeded).await;
        }
        let engine = &self.engine;
        let result = match verdict {
            Verdict::Handled(Outcome::Accept) => engine.settle(&held, ConsumeResult::Acked).await,
            Verdict::Handled(Outcome::Retry(error)) => {
                engine.retry(&held, &envelope, &error.to_string()).await
            }
            Verdict::Handled(Outcome::Reject(error)) => {
                let reason = format!("the handler reported an unprocessable message: {error}");
                engine
                    .dead_letter(&held, &envelope, reason, ConsumeResult::Rejected)
                    .await
            }
            Verdict::Handled(Outcome::Park(error)) => {
                engine
                    .park(&held, &envelope, format!("the handler parked it: {error}"))
                    .await
            }
            Verdict::Panicked(panic) => {
                let reason = format!("the handler panicked: {panic}");
                engine
                    .dead_letter(&held, &envelope, reason, ConsumeResult::Rejected)
                    .await
            }
        };
        telemetry::record_outcome(&span, result.as_str());
        metrics.finished(result, started.elapsed().as_secs_f64());
        Ended::after(result)
    }

    /// Interceptors around the handler; a panic in any of them or in the handler is caught.
    async fn run_handler(&self, message: Message<T>, envelope: &Envelope) -> Verdict {
        let interceptors = &self.mq.shared.consume_interceptors;
        let before =
            interceptors.before(|interceptor| interceptor.before_handle(&self.queue, envelope));
        let verdict = match before.refusal {
            Some(Refusal::Refused { error, .. }) => {
                Verdict::Handled(Outcome::Retry(HandlerError::from(error)))
            }
            // A failure like a refusal, so it takes the retry path rather than ending the task.
            Some(Refusal::Panicked { interceptor, panic }) => {
                tracing::error!(queue = %self.queue, interceptor, message = %panic, "a consume interceptor panicked before the handler; the delivery fails");
                Verdict::Handled(Outcome::Retry(HandlerError::from(format!(
                    "the consume interceptor `{interceptor}` panicked: {panic}"
                ))))
            }
            None => match polyq_runtime::catch_panic(async { (self.handler)(message).await }).await
            {
                Ok(outcome) => Verdict::Handled(outcome),
                Err(panic) => Verdict::Panicked(panic.into_message()),
            },
        };
        if before.passed > 0 {
            let panicked;
            let seen = match &verdict {
                Verdict::Handled(outcome) => outcome,
                Verdict::Panicked(panic) => {
                    panicked = Outcome::Reject(HandlerError::from(format!(
                        "the handler panicked: {panic}"
                    )));
                    &panicked
                }
            };
            interceptors.after(
                before.passed,
                |interceptor| interceptor.after_handle(&self.queue, envelope, seen),
                |interceptor, panic| {
                    tracing::error!(queue = %self.queue, interceptor, message = %panic, "a consume interceptor panicked after the handler; ignored");
                },
            );
        }
        verdict
    }
}

/// What came of running the handler.
enum Verdict {
    Handled(Outcome),
    Panicked(String),
}
