//! W3C trace context through OpenTelemetry (feature `otel`): what both families write on a
//! publish and adopt on a consume, over whatever header channel their transport has.
//!
//! The families' spans are `tracing` spans, bridged to OpenTelemetry by a
//! `tracing_opentelemetry` layer the application installs; without one a span carries no
//! OpenTelemetry context, nothing is written and nothing is adopted.
//!
//! ```
//! use std::collections::HashMap;
//!
//! // No layer is installed here, so the span has no context to write.
//! let span = tracing::info_span!("publish");
//! let mut headers = HashMap::new();
//! polyq_runtime::otel::inject(&span, &mut headers);
//! assert!(headers.is_empty());
//!
//! headers.insert(
//!     "traceparent".to_owned(),
//!     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
//! );
//! let parent = polyq_runtime::otel::extract(&headers).expect("a valid traceparent");
//! use opentelemetry::trace::TraceContextExt as _;
//! assert_eq!(
//!     parent.span().span_context().trace_id().to_string(),
//!     "0af7651916cd43dd8448eb211c80319c"
//! );
//! ```

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C header that carries the parent span.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C header that carries vendor trace state beside [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";

/// Writes `traceparent` (and `tracestate` when there is one) for `span` into `carrier`; nothing
/// when the span has no valid OpenTelemetry context.
pub fn inject(span: &Span, carrier: &mut dyn Injector) {
    if span.is_disabled() {
        return;
    }
    TraceContextPropagator::new().inject_context(&span.context(), carrier);
}

/// The remote parent a carrier's `traceparent` names, or `None` when it has none or it is not
/// valid W3C trace context (a malformed header is ignored, as every W3C peer ignores it).
pub fn extract(carrier: &dyn Extractor) -> Option<Context> {
    carrier.get(TRACEPARENT)?;
    let context = TraceContextPropagator::new().extract(carrier);
    context.span().span_context().is_valid().then_some(context)
}

/// Makes `parent` the parent of `span`.
pub fn adopt(span: &Span, parent: Context) {
    if span.is_disabled() {
        return;
    }
    // Fails only when the span is not bridged to OpenTelemetry; then there is nothing to link.
    let _ = span.set_parent(parent);
}
