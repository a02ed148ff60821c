//! The cost of tracing per job: one job published and processed on `memory://` (the
//! `publish <urn>` and `process <urn>` spans, the `traceparent` header written and adopted, the
//! envelope's `trace_id` from the span), with an OpenTelemetry layer whose exporter discards
//! every span, beside the same job with no subscriber at all (the spans disabled). The embedded
//! broker keeps the transport's share small, so the difference is the tracing's.
//!
//! `cargo bench -p babelqueue --features otel --bench tracing`

// The worker's future, instrumented, nests deeper than the default limit allows.
#![recursion_limit = "256"]

use std::convert::Infallible;
use std::time::Duration;

use babelqueue::BabelQueue;
use babelqueue::worker::Job;
use criterion::{Criterion, criterion_group, criterion_main};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::layer::SubscriberExt as _;

const URN: &str = "urn:babel:orders:created";

/// Takes every span and keeps none, so the figure is the spans' making and ending.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

async fn one_job(queue: &BabelQueue) {
    queue
        .publish(URN, &serde_json::json!({"order_id": 1042}))
        .await
        .unwrap();
    let report = queue
        .worker()
        .handle(URN, |_job: Job| async { Ok::<_, Infallible>(()) })
        .consume(1, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1);
}

fn job(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let queue = runtime.block_on(async {
        BabelQueue::builder("memory://bench-tracing")
            .queue("orders")
            .connect()
            .await
            .unwrap()
    });
    let mut group = c.benchmark_group("job");
    group.bench_function("untraced", |b| {
        b.to_async(&runtime).iter(|| one_job(&queue));
    });
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(Discard)
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("bench"))
        .with_location(false)
        .with_target(false)
        .with_threads(false)
        .with_tracked_inactivity(false);
    let subscriber = tracing_subscriber::registry().with(layer);
    // The runtime runs every task on this thread, so the scoped subscriber sees them all.
    tracing::subscriber::with_default(subscriber, || {
        group.bench_function("traced", |b| {
            b.to_async(&runtime).iter(|| one_job(&queue));
        });
    });
    group.finish();
}

criterion_group!(benches, job);
criterion_main!(benches);
