//! The dispatch loop of one consumer: deliveries to handler tasks, at most `concurrency` at
//! once, and the drain.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::{FutureExt, StreamExt};
use polyq_amqp::Delivery;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::handler::{HandlerError, Message, Outcome};
use super::{BoxHandler, DrainReport};
use crate::Envelope;
use crate::codec::Decoders;
use crate::connection::AceMq;
use crate::engine::{Engine, Held};
use crate::telemetry::{self, ConsumeResult};

/// What the handler tasks of one consumer share.
pub(super) struct Worker<T> {
    pub(super) mq: AceMq,
    pub(super) queue: Arc<str>,
    pub(super) decoders: Decoders<T>,
    pub(super) handler: BoxHandler<T>,
    pub(super) in_flight: Arc<AtomicUsize>,
    pub(super) engine: Engine,
}

/// How one handler task ended.
enum Ended {
    Finished,
    Interrupted,
}

/// Runs until asked to drain (or until the delivery stream ends), then drains.
pub(super) async fn run<T: Send + 'static>(
    worker: Arc<Worker<T>>,
    mut stream: polyq_amqp::Consumer,
    concurrency: usize,
    mut drain: oneshot::Receiver<Duration>,
) -> DrainReport {
    let mut tasks: JoinSet<Ended> = JoinSet::new();
    let mut report = DrainReport::default();
    let timeout = loop {
        tokio::select! {
            biased;
            timeout = &mut drain => break timeout.unwrap_or(super::DROP_DRAIN_TIMEOUT),
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(error) = joined {
                    tracing::error!(queue = %worker.queue, %error, "a consumer task failed");
                }
            }
            next = stream.next(), if tasks.len() < concurrency => match next {
                Some(Ok(delivery)) => {
                    worker.in_flight.fetch_add(1, Ordering::AcqRel);
                    tasks.spawn(Arc::clone(&worker).process(delivery));
                }
                Some(Err(error)) => {
                    tracing::error!(queue = %worker.queue, %error, "consumer stopped");
                    report.ended = Some(error.to_string());
                    break wait_for_drain(drain).await;
                }
                None => {
                    report.ended = Some("the connection was closed".to_owned());
                    break wait_for_drain(drain).await;
                }
            },
        }
    };
    // Deliveries already received but not handed to a handler: collect them before the
    // cancel (giving them back earlier would let the broker send them straight back), then
    // return them.
    let mut unhandled = Vec::new();
    while let Some(Some(Ok(delivery))) = stream.next().now_or_never() {
        unhandled.push(delivery);
    }
    if let Err(error) = stream.cancel().await {
        tracing::debug!(queue = %worker.queue, %error, "cancelling the consumer failed; its channel closes instead");
    }
    for delivery in unhandled {
        if let Err(error) = delivery.nack(true).await {
            tracing::debug!(queue = %worker.queue, %error, "returning an unhandled delivery failed; the broker redelivers it");
        }
        report.returned += 1;
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

/// After the stream ended on its own, waits for the application's drain (or the handle's
/// drop) so the report reaches it.
async fn wait_for_drain(drain: oneshot::Receiver<Duration>) -> Duration {
    drain.await.unwrap_or(super::DROP_DRAIN_TIMEOUT)
}

fn note(joined: Result<Ended, tokio::task::JoinError>, report: &mut DrainReport) {
    match joined {
        Ok(Ended::Finished) => report.completed += 1,
        Ok(Ended::Interrupted) => report.interrupted += 1,
        // Handler panics are caught inside the task; this is a bug in the engine itself.
        Err(error) => {
            tracing::error!(%error, "a consumer task failed");
            report.interrupted += 1;
        }
    }
}

impl<T: Send + 'static> Worker<T> {
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
        let payload = match self
            .decoders
            .decode(held.properties.content_type.as_deref(), &held.body)
        {
            Ok(payload) => payload,
            Err(reason) => {
                let result = self.engine.park_undecodable(&held, &reason).await;
                metrics.finished(result, started.elapsed().as_secs_f64());
                return Ended::Finished;
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
        let run = self
            .run_handler(message, &envelope)
            .instrument(span.clone());
        let verdict = tokio::select! {
            verdict = run => verdict,
            () = self.engine.abort.cancelled() => {
                let result = self.engine.give_back(&held, &self.queue, "drain deadline reached while the handler ran").await;
                telemetry::record_outcome(&span, result.as_str());
                metrics.finished(result, started.elapsed().as_secs_f64());
                return Ended::Interrupted;
            }
        };
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
        Ended::Finished
    }

    /// Interceptors around the handler; a panic anywhere in the handler is caught.
    async fn run_handler(&self, message: Message<T>, envelope: &Envelope) -> Verdict {
        let interceptors = &self.mq.shared.consume_interceptors;
        let mut before_ran = 0;
        let mut failed = None;
        for interceptor in interceptors {
            match interceptor.before_handle(&self.queue, envelope) {
                Ok(()) => before_ran += 1,
                Err(error) => {
                    failed = Some(HandlerError::from(error));
                    break;
                }
            }
        }
        let verdict = match failed {
            Some(error) => Verdict::Handled(Outcome::Retry(error)),
            None => {
                let handled = AssertUnwindSafe(async { (self.handler)(message).await })
                    .catch_unwind()
                    .await;
                match handled {
                    Ok(outcome) => Verdict::Handled(outcome),
                    Err(panic) => Verdict::Panicked(panic_message(panic.as_ref())),
                }
            }
        };
        if before_ran > 0 {
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
            for interceptor in interceptors[..before_ran].iter().rev() {
                interceptor.after_handle(&self.queue, envelope, seen);
            }
        }
        verdict
    }
}

/// What came of running the handler.
enum Verdict {
    Handled(Outcome),
    Panicked(String),
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
