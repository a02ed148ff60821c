//! W3C trace context (feature `otel`): the publish span's context travels in `traceparent`
//! and is the parent of the consumer's `<queue> process` span, named and tagged as the
//! reference says.

mod common;

use std::sync::OnceLock;

use acemq::Message;
use common::{Env, LIMIT};
use opentelemetry::trace::{SpanKind, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tokio::sync::mpsc;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// Spans finished so far; one global subscriber serves the handlers' runtime threads.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("acemq-test")));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        exporter
    })
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|kv| &kv.value)
}

async fn the_consumer_span_continues_the_publishers_trace(env: &'static Env) {
    let exporter = exporter();
    let queue = env.queue("trace").await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consume(queue.as_str(), move |message: Message<u32>| {
            let tx = tx.clone();
            async move {
                let context = tracing::Span::current().context();
                tx.send((
                    context.span().span_context().trace_id(),
                    message.envelope().clone(),
                ))
                .unwrap();
            }
        })
        .await
        .unwrap();

    let checkout = tracing::info_span!("checkout");
    let trace_id = checkout.context().span().span_context().trace_id();
    assert_ne!(trace_id, TraceId::INVALID);
    let sent = env
        .mq
        .publisher::<u32>("", queue.as_str())
        .send(&1)
        .instrument(checkout)
        .await
        .unwrap();
    let (handled_in, envelope) = tokio::time::timeout(LIMIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        handled_in, trace_id,
        "the handler runs in the publisher's trace"
    );
    let traceparent = envelope.headers()["traceparent"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        traceparent.starts_with(&format!("00-{trace_id}-")),
        "{traceparent}"
    );
    assert!(consumer.drain(LIMIT).await.is_clean());

    let spans = exporter.get_finished_spans().unwrap();
    let named = |name: String| {
        spans
            .iter()
            .find(|s| s.name == name && s.span_context.trace_id() == trace_id)
            .unwrap_or_else(|| panic!("no span {name}"))
            .clone()
    };
    let publish = named(format!("{queue} publish"));
    let process = named(format!("{queue} process"));
    assert_eq!(publish.span_kind, SpanKind::Producer);
    assert_eq!(process.span_kind, SpanKind::Consumer);
    assert_eq!(process.parent_span_id, publish.span_context.span_id());
    assert_eq!(
        attribute(&process, "messaging.message.id"),
        Some(&Value::from(sent.id().to_owned()))
    );
    assert_eq!(
        attribute(&process, "messaging.acemq.outcome"),
        Some(&Value::from("acked"))
    );
    assert_eq!(
        attribute(&publish, "messaging.acemq.outcome"),
        Some(&Value::from("confirmed"))
    );
    assert_eq!(
        attribute(&publish, "messaging.system"),
        Some(&Value::from("rabbitmq"))
    );
}
polyq_testkit::both_brokers!(the_consumer_span_continues_the_publishers_trace);
