//! OpenTelemetry tracing (feature `otel`, reference §4.9), through an in-memory exporter on
//! every binding: `publish <urn>` (PRODUCER) and `process <urn>` (CONSUMER) with exactly the
//! reference's attributes; the consumer's span is the child of the producer's through the
//! `traceparent` header (v0.2), through retries, the dead-letter queue and a redrive; where no
//! header travels (the Laravel layout, a producer that writes none) the envelope's `trace_id`
//! names the trace and the synthetic parent (v0.1); a failure records the exception and ERROR.

mod runtime_support;
mod tracing_support;

use babelqueue::MakeOptions;
use babelqueue::otel::{parent_span_id_of, trace_id_of, uuid_of};
use babelqueue::redrive::RedriveOptions;
use babelqueue::transport::Transport;
use babelqueue::worker::Job;
use opentelemetry::Value;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, TraceId};
use polyq_testkit::brokers::TestBroker;
use runtime_support::{Bound, IDLE};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_support::{attributes, current_trace, exporter, publish_in_a_span, span, spans};

const URN: &str = "urn:babel:orders:created";

fn pairs(expected: &[(&str, Value)]) -> Vec<(String, Value)> {
    let mut all: Vec<_> = expected
        .iter()
        .map(|(key, value)| ((*key).to_owned(), value.clone()))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

fn publish_attributes(id: &str) -> Vec<(String, Value)> {
    pairs(&[
        ("messaging.system", "babelqueue".into()),
        ("messaging.operation", "publish".into()),
        ("messaging.destination.name", URN.into()),
        ("messaging.message.id", id.to_owned().into()),
    ])
}

fn process_attributes(
    queue: &str,
    id: &str,
    trace_id: &str,
    attempts: i64,
) -> Vec<(String, Value)> {
    pairs(&[
        ("messaging.system", "babelqueue".into()),
        ("messaging.operation", "process".into()),
        ("messaging.destination.name", queue.to_owned().into()),
        ("messaging.message.id", id.to_owned().into()),
        (
            "messaging.message.conversation_id",
            trace_id.to_owned().into(),
        ),
        ("messaging.babelqueue.attempts", Value::I64(attempts)),
    ])
}

/// The trace a handler runs in, and the job, sent to the test.
type Seen = (TraceId, Job);

async fn a_job_is_processed_as_the_child_of_its_publish_span(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    let (trace, envelope) = publish_in_a_span(&bound, URN).await;
    let trace_id = envelope.trace_id().unwrap().to_owned();
    let id = envelope.meta().unwrap().id().unwrap().to_owned();
    assert_eq!(
        trace_id,
        uuid_of(trace),
        "the envelope names the span's trace"
    );

    let (tx, mut rx) = mpsc::unbounded_channel::<Seen>();
    let report = bound
        .queue
        .worker()
        .handle(URN, move |job: Job| {
            let _ = tx.send((current_trace(), job));
            async { Ok::<_, std::convert::Infallible>(()) }
        })
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1, "{report:?}");
    let (handled_in, job) = rx.recv().await.unwrap();
    assert_eq!(
        handled_in, trace,
        "the handler runs in the publisher's trace"
    );
    let traceparent = job.header("traceparent").expect("a traceparent header");
    let publish = span(trace, &format!("publish {URN}"));
    assert_eq!(
        traceparent,
        format!("00-{trace}-{}-01", publish.span_context.span_id())
    );

    let process = span(trace, &format!("process {URN}"));
    assert_eq!(publish.span_kind, SpanKind::Producer);
    assert_eq!(process.span_kind, SpanKind::Consumer);
    assert_eq!(process.parent_span_id, publish.span_context.span_id());
    assert!(process.parent_span_is_remote);
    assert_eq!(attributes(&publish), publish_attributes(&id));
    assert_eq!(
        attributes(&process),
        process_attributes(bound.name(), &id, &trace_id, 0)
    );
    assert_eq!(process.status, Status::Unset);
    assert!(process.events.is_empty());
}

polyq_testkit::both_brokers!(
    on memory, rabbitmq, redis;
    a_job_is_processed_as_the_child_of_its_publish_span
);

/// Fails `count` deliveries, returning the traces the handler ran in.
async fn fail(bound: &Bound, max_attempts: u32, count: u64) -> Vec<TraceId> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let report = bound
        .queue
        .worker()
        .max_attempts(max_attempts)
        .handle(URN, move |_job: Job| {
            let _ = tx.send(current_trace());
            async { Err("card declined") }
        })
        .consume(count, IDLE)
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    let mut seen = Vec::new();
    while let Ok(trace) = rx.try_recv() {
        seen.push(trace);
    }
    seen
}

async fn a_failure_records_the_exception_and_the_trace_survives_retry_dead_letter_and_redrive(
    broker: &'static TestBroker,
) {
    let bound = Bound::new(broker).await;
    let (trace, envelope) = publish_in_a_span(&bound, URN).await;
    let trace_id = envelope.trace_id().unwrap().to_owned();
    let id = envelope.meta().unwrap().id().unwrap().to_owned();

    // The first attempt fails and is retried; the retry fails and is dead-lettered.
    assert_eq!(fail(&bound, 2, 2).await, vec![trace, trace]);
    let done = bound
        .queue
        .redrive(&RedriveOptions::new().wait(IDLE))
        .await
        .unwrap();
    assert_eq!(done.redriven, 1, "{done:?}");
    let report = bound
        .queue
        .worker()
        .handle(URN, |_job: Job| async {
            Ok::<_, std::convert::Infallible>(())
        })
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1, "{report:?}");

    let publish = span(trace, &format!("publish {URN}"));
    let processed = spans(trace, &format!("process {URN}"));
    assert_eq!(processed.len(), 3, "two failures, then the redriven run");
    for (process, attempts) in processed.iter().zip([0, 1, 0]) {
        assert_eq!(
            process.parent_span_id,
            publish.span_context.span_id(),
            "every run is the child of the publish span"
        );
        assert_eq!(
            attributes(process),
            process_attributes(bound.name(), &id, &trace_id, attempts)
        );
    }
    for failed in &processed[..2] {
        assert_eq!(failed.status, Status::error("card declined"));
        let exception = failed
            .events
            .iter()
            .find(|event| event.name == "exception")
            .expect("an exception event");
        let attribute = |key: &str| {
            exception
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.to_string())
        };
        assert_eq!(
            attribute("exception.message").as_deref(),
            Some("card declined")
        );
        assert!(attribute("exception.type").is_some());
    }
    assert_eq!(processed[2].status, Status::Unset);
}

polyq_testkit::both_brokers!(
    on memory, rabbitmq, redis;
    a_failure_records_the_exception_and_the_trace_survives_retry_dead_letter_and_redrive
);

/// A job published with no `traceparent` (by a producer that writes none, or over the Laravel
/// layout, which has no header channel) is processed under the synthetic parent its `trace_id`
/// names.
async fn without_a_traceparent_the_trace_id_names_the_parent(broker: &'static TestBroker) {
    exporter();
    let bound = Bound::new(broker).await;
    let trace_id = format!("order-{}", uuid::Uuid::new_v4());
    let envelope = babelqueue::make(
        URN,
        &json!({"order_id": 7}),
        MakeOptions::new().queue(bound.name()).trace_id(&trace_id),
    )
    .unwrap();
    bound
        .transport()
        .publish(bound.name(), envelope.encode().unwrap().into(), &[])
        .await
        .unwrap();
    let trace = trace_id_of(&trace_id);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let report = bound
        .queue
        .worker()
        .handle(URN, move |_job: Job| {
            let _ = tx.send(current_trace());
            async { Ok::<_, std::convert::Infallible>(()) }
        })
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1, "{report:?}");
    assert_eq!(rx.recv().await, Some(trace));
    let process = span(trace, &format!("process {URN}"));
    assert_eq!(process.parent_span_id, parent_span_id_of(&trace_id));
    assert!(process.parent_span_is_remote);
    assert!(process.span_context.is_sampled());
}

polyq_testkit::both_brokers!(
    on memory, rabbitmq, redis, laravel;
    without_a_traceparent_the_trace_id_names_the_parent
);

/// Over the Laravel layout the publish span's trace still reaches the worker, through the
/// envelope's `trace_id` alone: the worker's span shares the trace under the synthetic parent.
async fn over_the_laravel_layout_the_trace_id_carries_the_trace(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    assert!(!bound.transport().capabilities().headers);
    let (trace, envelope) = publish_in_a_span(&bound, URN).await;
    let report = bound
        .queue
        .worker()
        .handle(URN, |job: Job| async move {
            assert_eq!(job.header("traceparent"), None);
            Ok::<_, std::convert::Infallible>(())
        })
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1, "{report:?}");
    let process = span(trace, &format!("process {URN}"));
    assert_eq!(
        process.parent_span_id,
        parent_span_id_of(envelope.trace_id().unwrap())
    );
}

polyq_testkit::both_brokers!(
    on laravel;
    over_the_laravel_layout_the_trace_id_carries_the_trace
);

/// A caller that continues a trace keeps its `trace_id`, and the publish span joins that trace
/// when nothing around it is traced; a publish that fails records the error on its span.
async fn a_continued_trace_is_kept_and_a_failed_publish_is_an_error(broker: &'static TestBroker) {
    exporter();
    let bound = Bound::new(broker).await;
    let trace_id = uuid::Uuid::new_v4().to_string();
    let envelope = bound
        .queue
        .publish_with(URN, &json!({}), MakeOptions::new().trace_id(&trace_id), &[])
        .await
        .unwrap();
    assert_eq!(envelope.trace_id(), Some(trace_id.as_str()));
    let trace = trace_id_of(&trace_id);
    let publish = span(trace, &format!("publish {URN}"));
    assert_eq!(publish.parent_span_id, parent_span_id_of(&trace_id));

    let checkout = tracing::info_span!("checkout");
    let failed_in = checkout.context().span().span_context().trace_id();
    let refused = bound
        .queue
        .publish("urn:babel:orders:refunded", &json!([1]))
        .instrument(checkout)
        .await;
    assert!(refused.is_err());
    let failed = span(failed_in, "publish urn:babel:orders:refunded");
    assert!(matches!(failed.status, Status::Error { .. }));
    assert!(failed.events.iter().any(|event| event.name == "exception"));
}

polyq_testkit::both_brokers!(
    on memory;
    a_continued_trace_is_kept_and_a_failed_publish_is_an_error
);
