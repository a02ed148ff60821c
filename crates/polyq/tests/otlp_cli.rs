//! Span export over OTLP: with `OTEL_EXPORTER_OTLP_ENDPOINT` set, `polyq babel publish` /
//! `consume` and `polyq acemq publish` / `consume` send their spans to the collector, over
//! http/protobuf, under `OTEL_SERVICE_NAME`; the consume span is the child of the publish span.
//! The collector is this test's own HTTP endpoint, which decodes each request with
//! `opentelemetry-proto`.

use std::collections::HashMap;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use polyq_amqp::{Client, QueueSpec};
use polyq_testkit::brokers::DeleteQueues;
use prost::Message as _;
use tokio::sync::mpsc;

const URN: &str = "urn:babel:orders:created";
const SERVICE: &str = "polyq-otlp-test";

/// A span as the collector received it, with the service it came from.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    span: Span,
}

impl Received {
    fn attribute(&self, key: &str) -> Option<any_value::Value> {
        self.span
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone()?.value)
    }

    fn text(&self, key: &str) -> Option<String> {
        match self.attribute(key)? {
            any_value::Value::StringValue(text) => Some(text),
            _ => None,
        }
    }
}

/// The test's collector: an OTLP/HTTP endpoint whose requests arrive on the receiver.
struct Collector {
    endpoint: String,
    requests: mpsc::UnboundedReceiver<ExportTraceServiceRequest>,
}

impl Collector {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let (tx, requests) = mpsc::unbounded_channel();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let request = ExportTraceServiceRequest::decode(body)
                    .expect("the body is an OTLP protobuf export request");
                tx.send(request).expect("the test is listening");
                async {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { endpoint, requests }
    }

    /// Runs polyq with the OTLP variables pointing here; its stdout lines. The process has
    /// flushed its spans before it exits, so they have all arrived when it returns.
    async fn polyq(&self, args: &[&str]) -> Vec<String> {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_polyq"))
            .args(args)
            .env("POLYQ_LOG", "off")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &self.endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            .env("OTEL_SERVICE_NAME", SERVICE)
            .output()
            .await
            .expect("polyq runs");
        assert!(
            output.status.success(),
            "polyq {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Every span received so far.
    fn received(&mut self) -> Vec<Received> {
        let mut all = Vec::new();
        while let Ok(request) = self.requests.try_recv() {
            for resource in request.resource_spans {
                let service = resource
                    .resource
                    .iter()
                    .flat_map(|resource| &resource.attributes)
                    .find(|kv| kv.key == "service.name")
                    .and_then(|kv| match kv.value.clone()?.value? {
                        any_value::Value::StringValue(name) => Some(name),
                        _ => None,
                    })
                    .unwrap_or_default();
                for scope in resource.scope_spans {
                    for span in scope.spans {
                        all.push(Received {
                            service: service.clone(),
                            span,
                        });
                    }
                }
            }
        }
        all
    }
}

fn named(spans: &[Received], name: &str) -> Received {
    let found: Vec<_> = spans.iter().filter(|s| s.span.name == name).collect();
    assert_eq!(found.len(), 1, "one span {name} in {spans:#?}");
    found[0].clone()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[tokio::test]
async fn babel_publish_and_consume_export_their_spans() {
    let url = polyq_testkit::amqp_url();
    let queue = polyq_testkit::unique_name("polyq.cli.otlp.babel");
    let _queues = DeleteQueues::new(&url, [queue.clone(), format!("{queue}.dlq")]);
    let mut collector = Collector::start().await;

    let bodies = collector
        .polyq(&[
            "babel",
            "publish",
            "--url",
            &url,
            "--queue",
            &queue,
            "--urn",
            URN,
            "--data",
            r#"{"order_id":1042}"#,
        ])
        .await;
    let envelope: serde_json::Value = serde_json::from_str(&bodies[0]).unwrap();
    let published = collector.received();
    let publish = named(&published, &format!("publish {URN}"));
    assert_eq!(publish.service, SERVICE);
    assert_eq!(publish.span.kind, SpanKind::Producer as i32);
    assert_eq!(
        envelope["trace_id"].as_str().unwrap().replace('-', ""),
        hex(&publish.span.trace_id),
        "the envelope's trace_id is the span's trace"
    );
    let expected: HashMap<&str, String> = HashMap::from([
        ("messaging.system", "babelqueue".to_owned()),
        ("messaging.operation", "publish".to_owned()),
        ("messaging.destination.name", URN.to_owned()),
        (
            "messaging.message.id",
            envelope["meta"]["id"].as_str().unwrap().to_owned(),
        ),
    ]);
    assert_eq!(publish.span.attributes.len(), expected.len());
    for (key, value) in &expected {
        assert_eq!(publish.text(key).as_ref(), Some(value), "{key}");
    }

    collector
        .polyq(&[
            "babel",
            "consume",
            "--url",
            &url,
            "--queue",
            &queue,
            "--max",
            "1",
            "--timeout",
            "5",
        ])
        .await;
    let consumed = collector.received();
    let process = named(&consumed, &format!("process {URN}"));
    assert_eq!(process.service, SERVICE);
    assert_eq!(process.span.kind, SpanKind::Consumer as i32);
    assert_eq!(process.span.trace_id, publish.span.trace_id);
    assert_eq!(
        process.span.parent_span_id, publish.span.span_id,
        "the consume span is the child of the publish span"
    );
    assert_eq!(
        process.attribute("messaging.babelqueue.attempts"),
        Some(any_value::Value::IntValue(0))
    );
}

#[tokio::test]
async fn acemq_publish_and_consume_export_their_spans() {
    let url = polyq_testkit::amqp_url();
    let queue = polyq_testkit::unique_name("polyq.cli.otlp.acemq");
    let _queues = DeleteQueues::new(&url, [&queue]);
    let client = Client::connect(&url).await.unwrap();
    client.declare_queue(&QueueSpec::new(&queue)).await.unwrap();
    let mut collector = Collector::start().await;

    collector
        .polyq(&[
            "acemq",
            "publish",
            "--url",
            &url,
            "--routing-key",
            &queue,
            "--type",
            "order.placed",
            "--json",
            r#"{"order":1042}"#,
        ])
        .await;
    let published = collector.received();
    let publish = named(&published, &format!("{queue} publish"));
    assert_eq!(publish.service, SERVICE);
    assert_eq!(publish.span.kind, SpanKind::Producer as i32);
    assert_eq!(
        publish.text("messaging.system").as_deref(),
        Some("rabbitmq")
    );
    assert_eq!(
        publish.text("messaging.acemq.outcome").as_deref(),
        Some("confirmed")
    );

    collector
        .polyq(&[
            "acemq",
            "consume",
            "--url",
            &url,
            "--queue",
            &queue,
            "--count",
            "1",
            "--timeout",
            "5",
        ])
        .await;
    let consumed = collector.received();
    let process = named(&consumed, &format!("{queue} process"));
    assert_eq!(process.span.kind, SpanKind::Consumer as i32);
    assert_eq!(process.span.trace_id, publish.span.trace_id);
    assert_eq!(process.span.parent_span_id, publish.span.span_id);
    assert_eq!(
        process.text("messaging.acemq.outcome").as_deref(),
        Some("acked")
    );
    client.close().await.ok();
}
