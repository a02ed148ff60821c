//! Declared pipelines: named steps, each a queue `<pipeline>.<step>` bound with the step name
//! on the pipeline's direct exchange `<pipeline>`, each with its own consumer (retry policy,
//! concurrency, prefetch). Messages carry the `x-acemq-route` trio ([`RoutingSlip`]).
//!
//! As in Java, the slip on the message wins over the consumer's place in the declaration: a
//! step forwards to the slip's next step, so a message replayed into a step's queue resumes
//! the run there. A step returning `None` before the last step ends the run early (counted
//! apart from completed runs).
//!
//! As in Java, a run is one envelope: a step hands the envelope it received on to the next
//! step (same id, type, correlation, causation, first seen and origin, the application
//! headers, the route advanced), so an age limit and an idempotency key cover the whole run.
//! Only the attempt starts again at 1 for each step. Step queues are quorum queues, as Java
//! declares them.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use acemq::AceMq;
//! use acemq::patterns::pipeline::Pipeline;
//! use serde_json::{Value, json};
//!
//! let mq = AceMq::connect("memory://doc-pipeline").await?;
//! let orders = Pipeline::new(&mq, "orders", ["validate", "charge"])?;
//! orders.declare().await?;
//! let validate = orders
//!     .step("validate", |c| c, |m: acemq::Message<Value>| async move {
//!         Ok::<_, std::convert::Infallible>(Some(json!({"valid": m.payload()})))
//!     })
//!     .await?;
//! let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
//! let charge = orders
//!     .step("charge", |c| c, move |m: acemq::Message<Value>| {
//!         let done = done.clone();
//!         async move {
//!             done.send(m.payload().clone()).ok();
//!             Ok::<_, std::convert::Infallible>(Some(json!("charged")))
//!         }
//!     })
//!     .await?;
//! orders.start(&json!(7)).await?;
//! assert_eq!(finished.recv().await, Some(json!({"valid": 7})));
//! validate.drain(std::time::Duration::from_secs(5)).await;
//! charge.drain(std::time::Duration::from_secs(5)).await;
//! assert_eq!(orders.completed(), 1);
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use polyq_amqp::{Binding, ExchangeKind, ExchangeSpec, FieldTable, QueueSpec};
use serde_json::Value;

use super::PatternError;
use crate::contract::headers::SHARED_PREFIX;
use crate::contract::topology::{QUEUE_TYPE_ARGUMENT, QueueType};
use crate::runtime::consumer::{Consumer, ConsumerBuilder, HandlerError, Message, Outcome};
use crate::runtime::telemetry::{PipelineRunMetrics, RunResult};
use crate::{AceMq, Envelope, RoutingSlip, RuntimeError};

#[derive(Debug, Default)]
struct Runs {
    completed: AtomicU64,
    ended_early: AtomicU64,
}

/// A declared pipeline: its name (the direct exchange), its steps in order, and the counts of
/// runs that ended in this process. Cheap to clone; clones share the counts.
#[derive(Debug, Clone)]
pub struct Pipeline {
    mq: AceMq,
    name: String,
    steps: Arc<[String]>,
    runs: Arc<Runs>,
}

impl Pipeline {
    /// A pipeline `name` of `steps`. Step names are wire format (letters, digits, dashes,
    /// dots): they are routing keys and queue suffixes, and renaming one strands messages in
    /// flight.
    pub fn new<I, S>(mq: &AceMq, name: &str, steps: I) -> Result<Pipeline, PatternError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let slip = RoutingSlip::start_of(steps).map_err(RuntimeError::from)?;
        Ok(Pipeline {
            mq: mq.clone(),
            name: name.to_owned(),
            steps: slip.steps().into(),
            runs: Arc::default(),
        })
    }

    /// The pipeline's name, which is its exchange.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The steps, in order.
    pub fn steps(&self) -> &[String] {
        &self.steps
    }

    /// The queue of `step`: `<pipeline>.<step>`.
    pub fn queue_of(&self, step: &str) -> String {
        format!("{}.{step}", self.name)
    }

    /// Runs that went through their last step in this process.
    pub fn completed(&self) -> u64 {
        self.runs.completed.load(Ordering::Relaxed)
    }

    /// Runs a step ended before the last step by returning `None`.
    pub fn ended_early(&self) -> u64 {
        self.runs.ended_early.load(Ordering::Relaxed)
    }

    /// Declares the direct exchange, one durable quorum queue per step (no other arguments,
    /// as Java declares it, so either side may declare first) and its binding.
    pub async fn declare(&self) -> Result<(), PatternError> {
        let client = self.mq.client();
        client
            .declare_exchange(&ExchangeSpec::new(self.name.as_str(), ExchangeKind::Direct))
            .await?;
        for step in self.steps.iter() {
            let queue = self.queue_of(step);
            let spec = QueueSpec::new(queue.as_str())
                .argument(QUEUE_TYPE_ARGUMENT, QueueType::Quorum.as_str().into());
            client.declare_queue(&spec).await?;
            client
                .bind_queue(&Binding::new(queue, self.name.as_str(), step.as_str()))
                .await?;
        }
        Ok(())
    }

    /// Starts a run: publishes `payload` (JSON) to the first step with a fresh run id, in an
    /// envelope whose type is the pipeline's name (as Java's `Pipeline.send`). Returns the
    /// envelope sent; every hop of the run carries its id.
    pub async fn start(&self, payload: &Value) -> Result<Envelope, PatternError> {
        let slip = RoutingSlip::start_of(self.steps.iter().cloned()).map_err(RuntimeError::from)?;
        let first = slip.current().unwrap_or_default().to_owned();
        let envelope = Envelope::of(self.name.as_str())
            .route(slip)
            .build()
            .map_err(RuntimeError::from)?;
        Ok(self
            .mq
            .publisher::<Value>(self.name.as_str(), first)
            .send_with(payload, envelope)
            .await?)
    }

    /// Starts the consumer of `step`: `configure` sets its options on the builder (retry
    /// policy, concurrency, prefetch), `handler` does the step's work. `Ok(Some(next))` sends
    /// `next` on to the slip's next step (or completes the run after the last), `Ok(None)`
    /// ends the run, an error takes the consumer's retry path.
    pub async fn step<E, F, Fut>(
        &self,
        step: &str,
        configure: impl FnOnce(ConsumerBuilder<Value>) -> ConsumerBuilder<Value>,
        handler: F,
    ) -> Result<Consumer, PatternError>
    where
        E: Into<HandlerError> + Send + 'static,
        F: Fn(Message<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<Value>, E>> + Send + 'static,
    {
        let position = self
            .steps
            .iter()
            .position(|s| s == step)
            .and_then(|p| u32::try_from(p).ok())
            .ok_or_else(|| RuntimeError::InvalidOption {
                queue: self.queue_of(step),
                reason: format!(
                    "`{step}` is not a step of pipeline `{}` ({})",
                    self.name,
                    self.steps.join(", ")
                ),
            })?;
        let pipeline = self.clone();
        let handler = Arc::new(handler);
        let metrics = Arc::new(PipelineRunMetrics::new(
            &self.name,
            step,
            self.mq.shared.transport,
        ));
        let builder = configure(self.mq.consumer::<Value>(self.queue_of(step)));
        Ok(builder
            .start(move |message: Message<Value>| {
                let pipeline = pipeline.clone();
                let handler = Arc::clone(&handler);
                let metrics = Arc::clone(&metrics);
                async move {
                    let started = Instant::now();
                    // The message's own slip wins; one without a slip is placed here.
                    let slip = match message.envelope().route() {
                        Some(slip) => slip.clone(),
                        None => match RoutingSlip::start_of(pipeline.steps.iter().cloned())
                            .and_then(|s| {
                                RoutingSlip::new(s.steps().to_vec(), position, s.run_id())
                            }) {
                            Ok(slip) => slip,
                            Err(e) => return Outcome::reject(e),
                        },
                    };
                    let previous = message.envelope().clone();
                    let ended = match handler(message).await {
                        Ok(Some(next)) => {
                            let slip = slip.advance();
                            if let Some(step) = slip.current().map(str::to_owned) {
                                return pipeline.forward(&previous, step, slip, &next).await;
                            }
                            RunResult::Completed
                        }
                        Ok(None) if slip.next().is_some() => RunResult::EndedEarly,
                        Ok(None) => RunResult::Completed,
                        Err(e) => return Outcome::Retry(e.into()),
                    };
                    let runs = &pipeline.runs;
                    let counter = match ended {
                        RunResult::Completed => &runs.completed,
                        RunResult::EndedEarly => &runs.ended_early,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    metrics.record(ended, started.elapsed().as_secs_f64());
                    Outcome::Accept
                }
            })
            .await?)
    }

    /// Sends `payload` on to `step`, the slip's current one, in the envelope `previous`
    /// carried forward.
    async fn forward(
        &self,
        previous: &Envelope,
        step: String,
        slip: RoutingSlip,
        payload: &Value,
    ) -> Outcome {
        let envelope = match carried_forward(previous, slip) {
            Ok(envelope) => envelope,
            Err(e) => return Outcome::reject(e),
        };
        match self
            .mq
            .publisher::<Value>(self.name.as_str(), step)
            .send_with(payload, envelope)
            .await
        {
            Ok(_) => Outcome::Accept,
            Err(e) => Outcome::retry(e),
        }
    }
}

/// The envelope of a declared pipeline's next hop: the one received, carried forward as Java's
/// `envelope.toBuilder().route(slip)` does (id, type, version, correlation, causation, first
/// seen, origin, claim and application headers kept), with the route advanced. Unlike Java the
/// attempt starts again at 1, since it counts this step's tries and the next step has made
/// none; and what describes only the delivery just handled stays behind: the shared `acemq-`
/// headers (replay stamps, reply address) and the error of a replayed dead letter.
fn carried_forward(previous: &Envelope, slip: RoutingSlip) -> crate::Result<Envelope> {
    Envelope::of(previous.message_type())
        .id(previous.id())
        .version(previous.version())
        .correlation_id(previous.correlation_id())
        .causation_id(previous.causation_id().unwrap_or_default())
        .first_seen(previous.first_seen())
        .origin(previous.origin().unwrap_or_default())
        .claim(previous.claim().unwrap_or_default())
        .headers(application_headers(previous.headers()))
        .route(slip)
        .build()
}

/// The headers a hop carries on: the application's, not the shared `acemq-` ones that
/// describe this delivery (replay stamps, reply address, carried slip).
pub(crate) fn application_headers(headers: &FieldTable) -> FieldTable {
    headers
        .iter()
        .filter(|(name, _)| !name.starts_with(SHARED_PREFIX))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}
