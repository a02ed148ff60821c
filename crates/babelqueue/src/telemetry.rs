//! The runtime's `tracing` spans, with the names and attributes every BabelQueue SDK gives them
//! (reference §4.9): PRODUCER `publish <urn>` around a publish, CONSUMER `process <urn>` around a
//! handler. The span name is the `otel.name` field, which OpenTelemetry layers use. With the
//! `otel` feature they carry the trace across hops (module `otel`).
//!
//! [`process_span`] is public for consumers of their own (an inspection tool that takes jobs
//! off a queue to show them), so their spans are the worker's.
//!
//! ```
//! let envelope = babelqueue::make(
//!     "urn:babel:orders:created",
//!     &serde_json::json!({}),
//!     babelqueue::MakeOptions::new().queue("orders"),
//! )?;
//! let span = babelqueue::telemetry::process_span(&envelope, "orders", 0, &[]);
//! let _entered = span.enter();
//! # Ok::<(), babelqueue::Error>(())
//! ```

use tracing::Span;
use tracing::field::Empty;

use crate::envelope::Envelope;

/// The `messaging.system` of every span.
const SYSTEM: &str = "babelqueue";

/// The `publish <urn>` span; the message id is recorded once the envelope is made.
pub(crate) fn publish_span(urn: &str) -> Span {
    let span = tracing::info_span!(
        "publish",
        otel.name = Empty,
        otel.kind = "producer",
        otel.status_code = Empty,
        otel.status_description = Empty,
        messaging.system = SYSTEM,
        messaging.operation = "publish",
        messaging.destination.name = urn,
        messaging.message.id = Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("publish {urn}"));
    }
    span
}

/// Records the id of the published envelope.
pub(crate) fn record_published(span: &Span, envelope: &Envelope) {
    if let Some(id) = envelope.meta().and_then(|meta| meta.id()) {
        span.record("messaging.message.id", id);
    }
}

/// The `process <urn>` span of a job taken from `queue` whose attempt count (reconciled with the
/// broker's) is `attempts`, child of the producer's span (feature `otel`): of the `traceparent`
/// among `headers`, else of the synthetic parent of its `trace_id`.
/// `messaging.destination.name` is the job's `meta.queue`, or `queue` when the envelope names
/// none.
pub fn process_span(
    envelope: &Envelope,
    queue: &str,
    attempts: i64,
    headers: &[(String, String)],
) -> Span {
    let meta = envelope.meta();
    let trace_id = envelope.trace_id().unwrap_or_default();
    let span = tracing::info_span!(
        "process",
        otel.name = Empty,
        otel.kind = "consumer",
        otel.status_code = Empty,
        otel.status_description = Empty,
        messaging.system = SYSTEM,
        messaging.operation = "process",
        messaging.destination.name = meta.and_then(|meta| meta.queue()).unwrap_or(queue),
        messaging.message.id = meta.and_then(|meta| meta.id()).unwrap_or_default(),
        messaging.message.conversation_id = trace_id,
        messaging.babelqueue.attempts = attempts,
    );
    if span.is_disabled() {
        return span;
    }
    let urn = envelope.urn().unwrap_or_default();
    span.record("otel.name", format!("process {urn}"));
    #[cfg(feature = "otel")]
    crate::otel::adopt_parent(&span, headers, trace_id);
    #[cfg(not(feature = "otel"))]
    let _ = headers;
    span
}

/// Records an error on a span as OpenTelemetry records an exception: an `exception` event with
/// its type and message, and the status ERROR.
pub(crate) fn record_exception(span: &Span, exception: &str, message: &str) {
    if span.is_disabled() {
        return;
    }
    tracing::info!(
        parent: span,
        exception.type = exception,
        exception.message = message,
        "exception"
    );
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", message);
}
