//! What the tracing tests share: one global subscriber bridging `tracing` to an in-memory
//! OpenTelemetry exporter, and readers of the spans it holds.

#![allow(dead_code)]

use std::sync::OnceLock;

use opentelemetry::trace::{TraceContextExt as _, TraceId, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// Spans finished so far; one global subscriber serves the workers' runtime threads. Location,
/// target, thread and timing attributes are off, so a span has exactly the attributes the runtime gives.
pub fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("babelqueue-test"))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_target(false);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        exporter
    })
}

/// The finished spans of one trace named `name`, in the order they ended.
pub fn spans(trace: TraceId, name: &str) -> Vec<SpanData> {
    exporter()
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|span| span.span_context.trace_id() == trace && span.name == name)
        .collect()
}

/// The one finished span of one trace named `name`.
pub fn span(trace: TraceId, name: &str) -> SpanData {
    let mut found = spans(trace, name);
    assert_eq!(found.len(), 1, "one span {name} in trace {trace}");
    found.remove(0)
}

/// A span's attributes, sorted by key.
pub fn attributes(span: &SpanData) -> Vec<(String, Value)> {
    let mut all: Vec<_> = span
        .attributes
        .iter()
        .map(|KeyValue { key, value, .. }| (key.to_string(), value.clone()))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// The trace of the span the caller runs in.
pub fn current_trace() -> TraceId {
    tracing::Span::current()
        .context()
        .span()
        .span_context()
        .trace_id()
}

/// Publishes one job inside a `checkout` span; returns the checkout's trace and the envelope.
pub async fn publish_in_a_span(
    bound: &crate::runtime_support::Bound,
    urn: &str,
) -> (TraceId, babelqueue::Envelope) {
    exporter();
    let checkout = tracing::info_span!("checkout");
    let trace = checkout.context().span().span_context().trace_id();
    assert_ne!(trace, TraceId::INVALID);
    let envelope = bound
        .queue
        .publish(urn, &serde_json::json!({"order_id": 1042}))
        .instrument(checkout)
        .await
        .unwrap();
    (trace, envelope)
}
