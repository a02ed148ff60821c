//! W3C trace context in AMQP headers through OpenTelemetry (feature `otel`): the header table as
//! a carrier for the propagation both families share (`polyq_runtime::otel`).
//!
//! The `tracing` spans of this crate are bridged to OpenTelemetry by a
//! `tracing_opentelemetry` layer the application installs; without one, spans carry no
//! OpenTelemetry context and nothing is written.

use opentelemetry::propagation::{Extractor, Injector};
use polyq_amqp::{FieldTable, FieldValue};
use tracing::Span;

struct Writer<'a>(&'a mut FieldTable);

impl Injector for Writer<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0
            .insert(key.to_owned(), FieldValue::from(value.as_str()));
    }
}

struct Reader<'a>(&'a FieldTable);

impl Extractor for Reader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(FieldValue::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Writes `traceparent` (and `tracestate` when there is one) for `span`.
pub(crate) fn inject(span: &Span, table: &mut FieldTable) {
    polyq_runtime::otel::inject(span, &mut Writer(table));
}

/// Makes the trace context in `table`, when it holds a valid one, the parent of `span`.
pub(crate) fn extract(span: &Span, table: &FieldTable) {
    if span.is_disabled() {
        return;
    }
    if let Some(parent) = polyq_runtime::otel::extract(&Reader(table)) {
        polyq_runtime::otel::adopt(span, parent);
    }
}
