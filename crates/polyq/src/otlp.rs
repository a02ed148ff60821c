//! Span export over OTLP, configured by the standard OpenTelemetry variables: on when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, off otherwise.
//!
//! Spans of the `acemq` and `babelqueue` crates go to the collector over http/protobuf (the
//! protocol variables may name only that one; gRPC would need a gRPC stack), with the resource's
//! `service.name` from `OTEL_SERVICE_NAME` (default `polyq`). Location, target, thread and timing
//! attributes are off, so a span carries exactly the attributes the libraries give it.

use anyhow::bail;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Level;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";

/// The export pipeline: a layer for the subscriber, and the provider to flush at exit.
pub struct Export {
    provider: SdkTracerProvider,
}

impl Export {
    /// The pipeline the environment asks for, `None` when no endpoint is set.
    ///
    /// # Errors
    /// A protocol other than http/protobuf, or an exporter that cannot be built.
    pub fn from_env() -> anyhow::Result<Option<Self>> {
        Self::from_vars(|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<Self>> {
        if var(ENDPOINT).is_none() && var(TRACES_ENDPOINT).is_none() {
            return Ok(None);
        }
        for name in [PROTOCOL, TRACES_PROTOCOL] {
            if let Some(protocol) = var(name)
                && protocol != "http/protobuf"
            {
                bail!(
                    "{name}={protocol}: polyq exports spans over http/protobuf only; set \
                     {name}=http/protobuf (or unset it) and point {ENDPOINT} at the collector's \
                     OTLP/HTTP port (4318 by default)"
                );
            }
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()?;
        let service = var(SERVICE_NAME).unwrap_or_else(|| "polyq".to_owned());
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(service).build())
            .build();
        Ok(Some(Self { provider }))
    }

    /// The layer that bridges the libraries' `tracing` spans to the exporter.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        let libraries = Targets::new()
            .with_target("acemq", Level::INFO)
            .with_target("babelqueue", Level::INFO);
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("polyq"))
            .with_location(false)
            .with_target(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(libraries)
    }

    /// Sends what is still buffered and stops the exporter; a failure is reported, not fatal:
    /// the command's own work is done.
    pub fn finish(self) {
        if let Err(error) = self.provider.shutdown() {
            eprintln!("polyq: the OTLP span export did not complete: {error}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Export;

    #[test]
    fn nothing_is_exported_without_an_endpoint() {
        let export =
            Export::from_vars(|name| (name == "OTEL_SERVICE_NAME").then(|| "billing".to_owned()))
                .unwrap();
        assert!(export.is_none());
    }

    #[test]
    fn a_protocol_other_than_http_protobuf_is_named() {
        let error = Export::from_vars(|name| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://127.0.0.1:4317".to_owned()),
            "OTEL_EXPORTER_OTLP_PROTOCOL" => Some("grpc".to_owned()),
            _ => None,
        })
        .err()
        .expect("grpc is refused");
        let text = error.to_string();
        assert!(text.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc"), "{text}");
        assert!(text.contains("http/protobuf"), "{text}");
    }
}
