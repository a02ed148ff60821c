//! Metrics with the Java reference's names (through the `metrics` facade) and `tracing` spans
//! with the reference's names and attributes.
//!
//! Metric handles are registered when a publisher or consumer is made, so the hot path only
//! increments them: install the `metrics` recorder before making publishers and consumers.
//! Durations are histograms in seconds.
//!
//! Spans: `publish` (PRODUCER) and `process` (CONSUMER), named `<destination> publish` and
//! `<queue> process` through the `otel.name` field, which OpenTelemetry layers use as the span
//! name. With the `otel` feature, the publish span's context travels in the W3C `traceparent` /
//! `tracestate` headers and becomes the parent of the consumer's `process` span.

use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};
use polyq_amqp::FieldTable;
use tracing::Span;
use tracing::field::Empty;

/// Publish latency until the confirm, by outcome.
pub const PUBLISH_DURATION: &str = "acemq.publish.duration";
/// Publishes, by outcome `confirmed`, `unroutable` or `failed`.
pub const PUBLISH_TOTAL: &str = "acemq.publish.total";
/// Handling time of a delivery, by outcome.
pub const CONSUME_DURATION: &str = "acemq.consume.duration";
/// Handled deliveries, by outcome `acked`, `retried`, `dead_lettered` or `rejected`: exactly
/// the reference's set, so that dashboards built for the Java library read these numbers.
/// Deliveries that ended otherwise are on [`POLYQ_CONSUME_TOTAL`].
pub const CONSUME_TOTAL: &str = "acemq.consume.total";
/// polyq's own: deliveries that ended in an outcome the reference's consume meters do not
/// have, by outcome `parked` (a handler park, or an undecodable body, into `.parked`),
/// `failed` (given back to the broker at a drain deadline) or `in_progress` (an idempotent
/// consumer found another instance's live claim and republished the message unchanged).
pub const POLYQ_CONSUME_TOTAL: &str = "polyq.acemq.consume.total";
/// polyq's own: handling time of the deliveries counted by [`POLYQ_CONSUME_TOTAL`], by outcome.
pub const POLYQ_CONSUME_DURATION: &str = "polyq.acemq.consume.duration";
/// polyq's own (the reference names no idempotency meter): claims of an idempotent consumer,
/// by `queue` and outcome `claimed`, `duplicate` (already confirmed: acknowledged, handler not
/// run), `in_progress` (another instance's live lease) or `unavailable` (the store failed).
pub const POLYQ_IDEMPOTENCY_TOTAL: &str = "polyq.acemq.idempotency.total";
/// The attempt number of each handled delivery.
pub const CONSUME_ATTEMPTS: &str = "acemq.consume.attempts";
/// Deliveries being handled now.
pub const CONSUME_IN_FLIGHT: &str = "acemq.consume.in.flight";
/// Messages republished for another attempt.
pub const MESSAGES_RETRIED_TOTAL: &str = "acemq.messages.retried.total";
/// Messages set aside, by outcome `dead_lettered` (into `.dlq`) or `parked` (into `.parked`).
pub const MESSAGES_DEAD_LETTERED_TOTAL: &str = "acemq.messages.dead.lettered.total";
/// Set-asides (or retry republishes) that did not land, one per miss, by `queue` and `target`:
/// tried again, or parked as it came when the broker cannot take the message as it is.
pub const MESSAGES_SET_ASIDE_FAILED: &str = "acemq.messages.set.aside.failed";
/// Broker waits that found no rung queue and fell back to a consumer wait, by `queue` and
/// `rung`.
pub const RETRY_RUNG_MISSING: &str = "acemq.retry.rung.missing";
/// Messages acknowledged without being handled, set aside or answered, on purpose, by `queue`
/// and `reason`: `no_reply_address` (a request nobody can be answered), `reply_queue_gone` (the
/// requester's reply queue is gone, so the reply was not delivered).
pub const MESSAGES_DROPPED_TOTAL: &str = "polyq.acemq.messages.dropped.total";
/// Time from sending a request to its reply or its timeout, by outcome.
pub const REQUEST_DURATION: &str = "acemq.request.duration";
/// Requests, by outcome `answered` (a reply came, an error reply too) or `timed_out`.
pub const REQUEST_TOTAL: &str = "acemq.request.total";
/// Gauge: seconds the oldest unpublished outbox row has waited, by `table`.
pub const OUTBOX_LAG: &str = "acemq.outbox.lag";
/// Counter of outbox rows relayed, by `outcome` (`published`, `failed`) and `table`.
pub const OUTBOX_TOTAL: &str = "acemq.outbox.total";
/// Handling time of the step that ended a pipeline run, by `pipeline`, `step` and outcome.
pub const PIPELINE_RUN_DURATION: &str = "acemq.pipeline.run.duration";
/// Pipeline runs that ended, by `pipeline`, `step` (where it ended) and outcome `completed`
/// or `ended_early`.
pub const PIPELINE_RUN_TOTAL: &str = "acemq.pipeline.run.total";

/// How a publish ended, as the `outcome` tag and span attribute say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PublishResult {
    Confirmed,
    Unroutable,
    Failed,
}

impl PublishResult {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PublishResult::Confirmed => "confirmed",
            PublishResult::Unroutable => "unroutable",
            PublishResult::Failed => "failed",
        }
    }
}

/// A total and a duration per outcome, registered up front so recording only increments.
struct OutcomeMeters<const N: usize> {
    totals: [Counter; N],
    durations: [Histogram; N],
}

impl<const N: usize> OutcomeMeters<N> {
    fn new(
        total: &'static str,
        duration: &'static str,
        tags: &[(&'static str, String)],
        outcomes: [&'static str; N],
    ) -> Self {
        let labels = |outcome: &'static str| {
            let mut labels = tags.to_vec();
            labels.push(("outcome", outcome.to_owned()));
            labels
        };
        Self {
            totals: outcomes.map(|o| counter!(total, &labels(o))),
            durations: outcomes.map(|o| histogram!(duration, &labels(o))),
        }
    }

    /// Records one ending with the outcome at `index` (the order given to `new`).
    fn record(&self, index: usize, seconds: f64) {
        if let (Some(total), Some(duration)) = (self.totals.get(index), self.durations.get(index)) {
            total.increment(1);
            duration.record(seconds);
        }
    }
}

/// One publisher's meters.
pub(crate) struct PublishMetrics(OutcomeMeters<3>);

impl PublishMetrics {
    pub(crate) fn new(exchange: &str, routing_key: &str, transport: &'static str) -> Self {
        Self(OutcomeMeters::new(
            PUBLISH_TOTAL,
            PUBLISH_DURATION,
            &[
                ("exchange", exchange.to_owned()),
                ("routing.key", routing_key.to_owned()),
                ("transport", transport.to_owned()),
            ],
            [
                PublishResult::Confirmed,
                PublishResult::Unroutable,
                PublishResult::Failed,
            ]
            .map(PublishResult::as_str),
        ))
    }

    pub(crate) fn record(&self, result: PublishResult, seconds: f64) {
        self.0.record(result as usize, seconds);
    }
}

/// How a request ended, as the `outcome` tag says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestResult {
    Answered,
    TimedOut,
}

impl RequestResult {
    fn as_str(self) -> &'static str {
        match self {
            RequestResult::Answered => "answered",
            RequestResult::TimedOut => "timed_out",
        }
    }
}

/// One requester's meters.
pub(crate) struct RequestMetrics(OutcomeMeters<2>);

impl RequestMetrics {
    pub(crate) fn new(transport: &'static str) -> Self {
        Self(OutcomeMeters::new(
            REQUEST_TOTAL,
            REQUEST_DURATION,
            &[("transport", transport.to_owned())],
            [RequestResult::Answered, RequestResult::TimedOut].map(RequestResult::as_str),
        ))
    }

    pub(crate) fn record(&self, result: RequestResult, seconds: f64) {
        self.0.record(result as usize, seconds);
    }
}

/// How a pipeline run ended, as the `outcome` tag says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunResult {
    Completed,
    EndedEarly,
}

impl RunResult {
    fn as_str(self) -> &'static str {
        match self {
            RunResult::Completed => "completed",
            RunResult::EndedEarly => "ended_early",
        }
    }
}

/// The run meters of one pipeline step.
pub(crate) struct PipelineRunMetrics(OutcomeMeters<2>);

impl PipelineRunMetrics {
    pub(crate) fn new(pipeline: &str, step: &str, transport: &'static str) -> Self {
        Self(OutcomeMeters::new(
            PIPELINE_RUN_TOTAL,
            PIPELINE_RUN_DURATION,
            &[
                ("pipeline", pipeline.to_owned()),
                ("step", step.to_owned()),
                ("transport", transport.to_owned()),
            ],
            [RunResult::Completed, RunResult::EndedEarly].map(RunResult::as_str),
        ))
    }

    pub(crate) fn record(&self, result: RunResult, seconds: f64) {
        self.0.record(result as usize, seconds);
    }
}

/// How a delivery ended, as the `outcome` tag and span attribute say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConsumeResult {
    Acked,
    Retried,
    DeadLettered,
    Rejected,
    Parked,
    /// The delivery went back to the broker: the drain deadline interrupted its handler, its
    /// retry wait, or a move that had not landed yet.
    Failed,
    /// Another instance holds a live idempotency claim: republished unchanged for later.
    InProgress,
}

impl ConsumeResult {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ConsumeResult::Acked => "acked",
            ConsumeResult::Retried => "retried",
            ConsumeResult::DeadLettered => "dead_lettered",
            ConsumeResult::Rejected => "rejected",
            ConsumeResult::Parked => "parked",
            ConsumeResult::Failed => "failed",
            ConsumeResult::InProgress => "in_progress",
        }
    }
}

/// The outcomes of the reference's `acemq.consume.*` meters.
const REFERENCE_RESULTS: [ConsumeResult; 4] = [
    ConsumeResult::Acked,
    ConsumeResult::Retried,
    ConsumeResult::DeadLettered,
    ConsumeResult::Rejected,
];

/// The outcomes only polyq has, on `polyq.acemq.consume.*`.
const POLYQ_RESULTS: [ConsumeResult; 3] = [
    ConsumeResult::Parked,
    ConsumeResult::Failed,
    ConsumeResult::InProgress,
];

/// One consumer's meters.
pub(crate) struct ConsumeMetrics {
    queue: String,
    transport: &'static str,
    reference: OutcomeMeters<4>,
    polyq: OutcomeMeters<3>,
    attempts: Histogram,
    in_flight: Gauge,
    retried: Counter,
    dead_lettered: Counter,
    parked: Counter,
}

impl ConsumeMetrics {
    pub(crate) fn new(queue: &str, transport: &'static str) -> Self {
        let base = [
            ("queue", queue.to_owned()),
            ("transport", transport.to_owned()),
        ];
        let with = |name: &'static str, value: &'static str| {
            let [a, b] = base.clone();
            [a, b, (name, value.to_owned())]
        };
        Self {
            queue: queue.to_owned(),
            transport,
            reference: OutcomeMeters::new(
                CONSUME_TOTAL,
                CONSUME_DURATION,
                &base,
                REFERENCE_RESULTS.map(ConsumeResult::as_str),
            ),
            polyq: OutcomeMeters::new(
                POLYQ_CONSUME_TOTAL,
                POLYQ_CONSUME_DURATION,
                &base,
                POLYQ_RESULTS.map(ConsumeResult::as_str),
            ),
            attempts: histogram!(CONSUME_ATTEMPTS, &base),
            in_flight: gauge!(CONSUME_IN_FLIGHT, &base),
            retried: counter!(MESSAGES_RETRIED_TOTAL, &base),
            dead_lettered: counter!(
                MESSAGES_DEAD_LETTERED_TOTAL,
                &with("outcome", "dead_lettered")
            ),
            parked: counter!(MESSAGES_DEAD_LETTERED_TOTAL, &with("outcome", "parked")),
        }
    }

    pub(crate) fn started(&self, attempt: u32) {
        self.in_flight.increment(1.0);
        self.attempts.record(f64::from(attempt));
    }

    pub(crate) fn finished(&self, result: ConsumeResult, seconds: f64) {
        self.in_flight.decrement(1.0);
        let position = |results: &[ConsumeResult]| results.iter().position(|r| *r == result);
        if let Some(index) = position(&REFERENCE_RESULTS) {
            self.reference.record(index, seconds);
        } else if let Some(index) = position(&POLYQ_RESULTS) {
            self.polyq.record(index, seconds);
        }
        match result {
            ConsumeResult::Retried => self.retried.increment(1),
            ConsumeResult::DeadLettered | ConsumeResult::Rejected => {
                self.dead_lettered.increment(1)
            }
            ConsumeResult::Parked => self.parked.increment(1),
            ConsumeResult::Acked | ConsumeResult::Failed | ConsumeResult::InProgress => {}
        }
    }

    /// A set-aside or retry republish into `target` did not land; rare, so registered on use.
    pub(crate) fn set_aside_failed(&self, target: &str) {
        counter!(
            MESSAGES_SET_ASIDE_FAILED,
            "queue" => self.queue.clone(),
            "target" => target.to_owned(),
            "transport" => self.transport,
        )
        .increment(1);
    }

    /// A broker wait found no rung queue; rare, so registered on use.
    pub(crate) fn rung_missing(&self, rung: &str) {
        counter!(
            RETRY_RUNG_MISSING,
            "queue" => self.queue.clone(),
            "rung" => rung.to_owned(),
            "transport" => self.transport,
        )
        .increment(1);
    }
}

/// The `<destination> publish` span. The destination is the exchange, or the routing key
/// (the queue) for the default exchange.
pub(crate) fn publish_span(exchange: &str, routing_key: &str) -> Span {
    let span = tracing::info_span!(
        "publish",
        otel.name = Empty,
        otel.kind = "producer",
        otel.status_code = Empty,
        messaging.system = "rabbitmq",
        messaging.operation = "publish",
        messaging.destination.name = exchange,
        messaging.rabbitmq.destination.routing_key = routing_key,
        messaging.message.id = Empty,
        messaging.message.conversation_id = Empty,
        messaging.acemq.message_type = Empty,
        messaging.acemq.attempt = Empty,
        messaging.acemq.outcome = Empty,
    );
    if !span.is_disabled() {
        let destination = if exchange.is_empty() {
            routing_key
        } else {
            exchange
        };
        span.record("otel.name", format!("{destination} publish"));
    }
    span
}

/// The `<queue> process` span, child of the publisher's span when the message carries a
/// trace context (feature `otel`).
pub(crate) fn process_span(queue: &str, exchange: &str, routing_key: &str) -> Span {
    let span = tracing::info_span!(
        "process",
        otel.name = Empty,
        otel.kind = "consumer",
        otel.status_code = Empty,
        messaging.system = "rabbitmq",
        messaging.operation = "process",
        messaging.destination.name = exchange,
        messaging.rabbitmq.destination.routing_key = routing_key,
        messaging.acemq.queue = queue,
        messaging.message.id = Empty,
        messaging.message.conversation_id = Empty,
        messaging.acemq.message_type = Empty,
        messaging.acemq.attempt = Empty,
        messaging.acemq.outcome = Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("{queue} process"));
    }
    span
}

/// The `<queue> process` span of a message taken by a consumer of its own (an inspection tool
/// that shows messages rather than handling them), named and tagged as the consumer's and the
/// child of the publisher's span through its headers' trace context (feature `otel`); the
/// caller records its outcome with [`record_outcome`].
///
/// ```
/// let headers = polyq_amqp::FieldTable::default();
/// let span = acemq::telemetry::consume_span("orders", "", "orders", &headers);
/// acemq::telemetry::record_outcome(&span, "acked");
/// ```
pub fn consume_span(queue: &str, exchange: &str, routing_key: &str, headers: &FieldTable) -> Span {
    let span = process_span(queue, exchange, routing_key);
    adopt_trace_context(&span, headers);
    span
}

/// Records the envelope's attributes on a publish or process span.
pub(crate) fn record_envelope(span: &Span, envelope: &crate::Envelope) {
    if span.is_disabled() {
        return;
    }
    span.record("messaging.message.id", envelope.id());
    span.record(
        "messaging.message.conversation_id",
        envelope.correlation_id(),
    );
    span.record("messaging.acemq.message_type", envelope.message_type());
    span.record("messaging.acemq.attempt", envelope.attempt());
}

/// Records how the span's work ended (`messaging.acemq.outcome`); `unroutable`, `failed`,
/// `dead_lettered` and `rejected` mark it as an error (Java keeps `rejected` an error).
pub fn record_outcome(span: &Span, outcome: &'static str) {
    if span.is_disabled() {
        return;
    }
    span.record("messaging.acemq.outcome", outcome);
    if matches!(
        outcome,
        "unroutable" | "failed" | "dead_lettered" | "rejected"
    ) {
        span.record("otel.status_code", "ERROR");
    }
}

/// Writes the span's W3C trace context into `headers` (feature `otel`; without it nothing is
/// written, as the reference writes `traceparent` only when OpenTelemetry is present).
pub(crate) fn inject_trace_context(span: &Span, headers: &mut FieldTable) {
    #[cfg(feature = "otel")]
    crate::runtime::otel::inject(span, headers);
    #[cfg(not(feature = "otel"))]
    let _ = (span, headers);
}

/// Makes the W3C trace context in `headers`, if any, the parent of `span` (feature `otel`).
pub(crate) fn adopt_trace_context(span: &Span, headers: &FieldTable) {
    #[cfg(feature = "otel")]
    crate::runtime::otel::extract(span, headers);
    #[cfg(not(feature = "otel"))]
    let _ = (span, headers);
}

/// The metrics in the Prometheus text format (feature `prometheus`).
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub mod prometheus {
    pub use metrics_exporter_prometheus::PrometheusHandle;

    /// Installs a Prometheus recorder as the process's `metrics` recorder and returns the
    /// handle whose [`render`](PrometheusHandle::render) gives the text exposition (metric
    /// names with `_` for `.`, as Micrometer exports Java's). Install it before making
    /// publishers and consumers; serve `render()` from the application's own HTTP endpoint.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let metrics = acemq::telemetry::prometheus::install()?;
    /// let mq = acemq::AceMq::connect("memory://doc-prometheus").await?;
    /// let publisher = mq.publisher::<u32>("", "nowhere").allow_unroutable();
    /// publisher.send(&1).await?;
    /// assert!(metrics.render().contains("acemq_publish_total"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn install() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
        metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()
    }
}

/// A message of `queue` dropped on purpose for `reason` (see [`MESSAGES_DROPPED_TOTAL`]); rare,
/// so registered on use.
pub(crate) fn dropped(queue: &str, reason: &'static str) {
    counter!(MESSAGES_DROPPED_TOTAL, "queue" => queue.to_owned(), "reason" => reason).increment(1);
}
