//! OpenTelemetry tracing against the Python SDK's `babelqueue.otel` (1.24, extra `[otel]`, with
//! the OpenTelemetry SDK's in-memory exporter on the Python side), on RabbitMQ and the default
//! Redis layout, both directions: a job one side publishes inside a span is processed by the
//! other in the same trace, as the child of the producer's span; and the `trace_id` mapping
//! gives the Python SDK's ids.
//!
//! The interpreter is `POLYQ_PYTHON`, which `scripts/test` sets up (`scripts/python-peer`).

mod runtime_support;
mod tracing_support;

use babelqueue::otel::{parent_span_id_of, trace_id_of, uuid_of};
use babelqueue::worker::Job;
use opentelemetry::trace::{SpanKind, TraceId};
use polyq_testkit::brokers::TestBroker;
use runtime_support::{Bound, IDLE};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing_support::{current_trace, exporter, publish_in_a_span, span};

const URN: &str = "urn:babel:orders:created";

/// Runs one command of tests/python/tracing_peer.py and returns its JSON answer.
async fn peer(command: &str, args: Value) -> Value {
    runtime_support::python_peer("tracing_peer.py", command, args).await
}

/// The span named `name` among the peer's.
fn peer_span<'a>(answer: &'a Value, name: &str) -> &'a Value {
    answer["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|span| span["name"] == name)
        .unwrap_or_else(|| panic!("no span {name} in {answer}"))
}

async fn python_publishes_in_a_span_and_rust_processes_in_its_trace(broker: &'static TestBroker) {
    exporter();
    let bound = Bound::new(broker).await;
    let sent = peer(
        "publish",
        json!({"url": broker.url(), "queue": bound.name(), "urn": URN, "data": {"order_id": 1042}}),
    )
    .await;
    let python_publish = peer_span(&sent, &format!("publish {URN}"));
    let trace = TraceId::from_hex(sent["trace_id"].as_str().unwrap()).unwrap();
    assert_eq!(python_publish["kind"], "PRODUCER");
    assert_eq!(python_publish["trace_id"], sent["trace_id"]);

    let (tx, mut rx) = mpsc::unbounded_channel();
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
    assert_eq!(handled_in, trace, "the handler runs in Python's trace");
    assert_eq!(job.trace_id(), Some(uuid_of(trace).as_str()));
    assert!(job.header("traceparent").is_some());

    let process = span(trace, &format!("process {URN}"));
    assert_eq!(process.span_kind, SpanKind::Consumer);
    assert_eq!(
        process.parent_span_id.to_string(),
        python_publish["span_id"].as_str().unwrap(),
        "the child of Python's publish span"
    );
    assert!(process.parent_span_is_remote);
}

polyq_testkit::both_brokers!(
    on rabbitmq, redis;
    python_publishes_in_a_span_and_rust_processes_in_its_trace
);

async fn rust_publishes_in_a_span_and_python_processes_in_its_trace(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    let (trace, envelope) = publish_in_a_span(&bound, URN).await;
    let publish = span(trace, &format!("publish {URN}"));

    let answer = peer(
        "consume",
        json!({"url": broker.url(), "queue": bound.name(), "urn": URN, "max": 1}),
    )
    .await;
    assert_eq!(answer["processed"], 1, "{answer}");
    let process = peer_span(&answer, &format!("process {URN}"));
    assert_eq!(process["kind"], "CONSUMER");
    assert_eq!(
        process["trace_id"],
        trace.to_string(),
        "Python runs in our trace"
    );
    assert_eq!(
        process["parent_span_id"],
        publish.span_context.span_id().to_string(),
        "the child of our publish span"
    );
    assert_eq!(process["parent_is_remote"], true);
    assert_eq!(
        process["attributes"],
        json!({
            "messaging.system": "babelqueue",
            "messaging.operation": "process",
            "messaging.destination.name": bound.name(),
            "messaging.message.id": envelope.meta().unwrap().id().unwrap(),
            "messaging.message.conversation_id": envelope.trace_id().unwrap(),
            "messaging.babelqueue.attempts": 0,
        })
    );
    let headers = &answer["headers"][0];
    assert_eq!(
        headers["traceparent"],
        format!("00-{trace}-{}-01", publish.span_context.span_id())
    );
}

polyq_testkit::both_brokers!(
    on rabbitmq, redis;
    rust_publishes_in_a_span_and_python_processes_in_its_trace
);

/// The `trace_id` mapping and the synthetic parent span id agree with the Python SDK's on UUIDs
/// in several spellings, other strings, non-ASCII text and the nil UUID.
#[tokio::test]
async fn the_trace_id_mapping_matches_the_python_sdk() {
    let inputs = [
        "4bf92f35-77b3-4da6-a3ce-929d0e0e4736",
        "4BF92F3577B34DA6A3CE929D0E0E4736",
        "4bf9-2f35-77b3-4da6-a3ce-929d-0e0e-4736",
        "00000000-0000-0000-0000-000000000000",
        "4bf92f35-77b3-4da6-a3ce-929d0e0e473",
        "4bf92f35-77b3-4da6-a3ce-929d0e0e473g",
        "order-1042",
        "",
        "café ☕",
        "py-trace",
    ];
    let answer = peer("vectors", json!({"inputs": inputs})).await;
    let vectors = answer["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), inputs.len());
    for (input, vector) in inputs.iter().zip(vectors) {
        assert_eq!(vector["input"], *input);
        assert_eq!(
            trace_id_of(input).to_string(),
            vector["trace_id"].as_str().unwrap(),
            "trace id of {input:?}"
        );
        assert_eq!(
            parent_span_id_of(input).to_string(),
            vector["span_id"].as_str().unwrap(),
            "span id of {input:?}"
        );
        assert_eq!(
            uuid_of(trace_id_of(input)),
            vector["uuid"].as_str().unwrap(),
            "UUID of {input:?}"
        );
    }
}
