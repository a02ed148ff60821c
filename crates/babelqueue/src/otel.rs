//! OpenTelemetry trace context for BabelQueue jobs (feature `otel`; ADR-0025 v0.1 and ADR-0028
//! v0.2, reference §4.9).
//!
//! The runtime's spans are `tracing` spans (`publish <urn>`, PRODUCER, and `process <urn>`,
//! CONSUMER), bridged to OpenTelemetry by a `tracing_opentelemetry` layer the application
//! installs. With this feature the spans of one job's hops join one trace, two ways:
//!
//! - v0.2: [`BabelQueue::publish`](crate::BabelQueue::publish) writes the publish span's context
//!   as W3C [`TRACEPARENT`] / [`TRACESTATE`] transport headers (RabbitMQ headers, the default
//!   Redis layout's frame, `memory://`), and the worker starts its `process` span as that
//!   span's child. Retries, dead-letter moves and redrives keep the headers.
//! - v0.1: the envelope's `trace_id` is the trace's id ([`trace_id_of`], [`uuid_of`]): the
//!   producer writes the publish span's TraceID as a UUID, and a job without a usable
//!   `traceparent` (the Laravel layout, an SDK that writes none) is processed under the
//!   synthetic remote parent [`remote_parent`] derives from its `trace_id`.
//!
//! Without a layer installed, spans carry no OpenTelemetry context: nothing is written and the
//! envelope's `trace_id` is a new UUID as always.
//!
//! ```
//! use opentelemetry::trace::{TraceContextExt as _, TraceId};
//!
//! let trace = "4bf92f35-77b3-4da6-a3ce-929d0e0e4736";
//! let id = babelqueue::otel::trace_id_of(trace);
//! assert_eq!(id, TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap());
//! assert_eq!(babelqueue::otel::uuid_of(id), trace);
//!
//! let parent = babelqueue::otel::remote_parent(trace);
//! let span = parent.span();
//! let context = span.span_context();
//! assert_eq!(context.trace_id(), id);
//! assert!(context.is_remote() && context.is_sampled());
//! ```

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use sha2::{Digest, Sha256};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use polyq_runtime::otel::{TRACEPARENT, TRACESTATE};

/// The prefix hashed with a `trace_id` into the synthetic parent's span id.
const SPAN_ID_SEED: &str = "babelqueue-span:";

/// The OpenTelemetry TraceID of an envelope `trace_id`: a UUID's 16 bytes (dashes anywhere,
/// either case), any other string's first 16 bytes of SHA-256; never the invalid all-zero id
/// (the nil UUID is hashed, a zero digest becomes 1).
///
/// ```
/// use opentelemetry::trace::TraceId;
///
/// let hashed = babelqueue::otel::trace_id_of("order-1042");
/// assert_ne!(hashed, TraceId::INVALID);
/// assert_eq!(hashed, babelqueue::otel::trace_id_of("order-1042"));
/// ```
pub fn trace_id_of(trace_id: &str) -> TraceId {
    if let Some(raw) = uuid_bytes(trace_id).filter(|raw| *raw != [0; 16]) {
        return TraceId::from_bytes(raw);
    }
    let mut raw = [0; 16];
    raw.copy_from_slice(&Sha256::digest(trace_id.as_bytes())[..16]);
    if raw == [0; 16] {
        raw[15] = 1;
    }
    TraceId::from_bytes(raw)
}

/// A TraceID as the lowercase hyphenated UUID a producer writes into `trace_id`; the inverse of
/// [`trace_id_of`] for UUIDs.
///
/// ```
/// use opentelemetry::trace::TraceId;
///
/// let id = TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap();
/// assert_eq!(babelqueue::otel::uuid_of(id), "0af76519-16cd-43dd-8448-eb211c80319c");
/// ```
pub fn uuid_of(trace_id: TraceId) -> String {
    uuid::Uuid::from_bytes(trace_id.to_bytes())
        .hyphenated()
        .to_string()
}

/// The span id of the synthetic parent of a job's `trace_id`: the first 8 bytes of
/// SHA-256(`"babelqueue-span:" + trace_id`), 1 when they are all zero.
///
/// ```
/// use opentelemetry::trace::SpanId;
///
/// assert_ne!(babelqueue::otel::parent_span_id_of("order-1042"), SpanId::INVALID);
/// ```
pub fn parent_span_id_of(trace_id: &str) -> SpanId {
    let mut hasher = Sha256::new();
    hasher.update(SPAN_ID_SEED.as_bytes());
    hasher.update(trace_id.as_bytes());
    let mut raw = [0; 8];
    raw.copy_from_slice(&hasher.finalize()[..8]);
    if raw == [0; 8] {
        raw[7] = 1;
    }
    SpanId::from_bytes(raw)
}

/// The v0.1 remote parent of a job whose transport carried no `traceparent`: TraceID
/// [`trace_id_of`], span id [`parent_span_id_of`], sampled.
pub fn remote_parent(trace_id: &str) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        trace_id_of(trace_id),
        parent_span_id_of(trace_id),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ))
}

/// The 16 bytes of a UUID written with dashes anywhere (none included), hex digits of either
/// case: the forms every SDK's mapping reads.
fn uuid_bytes(text: &str) -> Option<[u8; 16]> {
    let mut raw = [0u8; 16];
    let mut digits = text.bytes().filter(|&byte| byte != b'-');
    for byte in &mut raw {
        let high = hex_value(digits.next()?)?;
        let low = hex_value(digits.next()?)?;
        *byte = high << 4 | low;
    }
    digits.next().is_none().then_some(raw)
}

fn hex_value(digit: u8) -> Option<u8> {
    char::from(digit)
        .to_digit(16)
        .and_then(|value| u8::try_from(value).ok())
}

/// Out-of-band headers as a propagation carrier; names compare case-insensitively, as W3C
/// header names do.
struct HeaderPairs<'a>(&'a mut Vec<(String, String)>);

impl Injector for HeaderPairs<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_owned(), value));
    }
}

struct HeaderReader<'a>(&'a [(String, String)]);

impl Extractor for HeaderReader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(key))
            .map(|(_, value)| value.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(name, _)| name.as_str()).collect()
    }
}

/// Opens the producer's side of a publish span: the `trace_id` the envelope is to carry when the
/// caller continues none (the span's TraceID as a UUID), or, when the caller continues one and no
/// span is active around the publish, makes that trace's synthetic parent the span's parent so
/// the span and the envelope name one trace.
pub(crate) fn start_publish(span: &Span, continued: Option<&str>) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    if let Some(trace_id) = continued {
        let ambient = Span::current().context();
        if !ambient.span().span_context().is_valid() {
            polyq_runtime::otel::adopt(span, remote_parent(trace_id));
        }
        return None;
    }
    let trace = span.context().span().span_context().trace_id();
    (trace != TraceId::INVALID).then(|| uuid_of(trace))
}

/// `headers` with the publish span's `traceparent` / `tracestate` added, unless the caller
/// already gives a `traceparent`; `None` when there is nothing to add.
pub(crate) fn with_trace_headers(
    span: &Span,
    headers: &[(String, String)],
) -> Option<Vec<(String, String)>> {
    if span.is_disabled() || HeaderReader(headers).get(TRACEPARENT).is_some() {
        return None;
    }
    let mut written = headers.to_vec();
    polyq_runtime::otel::inject(span, &mut HeaderPairs(&mut written));
    (written.len() > headers.len()).then_some(written)
}

/// Makes the consumer's span the child of the `traceparent` in `headers`, else of the synthetic
/// parent of `trace_id` (v0.1).
pub(crate) fn adopt_parent(span: &Span, headers: &[(String, String)], trace_id: &str) {
    if span.is_disabled() {
        return;
    }
    let parent = polyq_runtime::otel::extract(&HeaderReader(headers))
        .or_else(|| (!trace_id.is_empty()).then(|| remote_parent(trace_id)));
    if let Some(parent) = parent {
        polyq_runtime::otel::adopt(span, parent);
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanId, TraceId};

    use super::{HeaderReader, parent_span_id_of, trace_id_of, uuid_bytes, uuid_of};
    use opentelemetry::propagation::Extractor as _;

    #[test]
    fn uuids_map_to_their_bytes_in_every_spelling() {
        let id = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
        for spelling in [
            "4bf92f35-77b3-4da6-a3ce-929d0e0e4736",
            "4BF92F35-77B3-4DA6-A3CE-929D0E0E4736",
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "4bf9-2f35-77b3-4da6-a3ce-929d-0e0e-4736",
            "-4bf92f3577b34da6a3ce929d0e0e4736-",
        ] {
            assert_eq!(trace_id_of(spelling), id, "{spelling}");
        }
        assert_eq!(uuid_of(id), "4bf92f35-77b3-4da6-a3ce-929d0e0e4736");
    }

    #[test]
    fn anything_else_is_hashed() {
        for text in [
            "",
            "order-1042",
            "4bf92f35-77b3-4da6-a3ce-929d0e0e473",
            "4bf92f35-77b3-4da6-a3ce-929d0e0e47361",
            "4bf92f35-77b3-4da6-a3ce-929d0e0e473g",
            "4bf92f35-77b3-4da6-a3ce-929d0e0e473\u{e9}",
            "00000000-0000-0000-0000-000000000000",
        ] {
            assert_eq!(
                uuid_bytes(text).filter(|raw| *raw != [0; 16]),
                None,
                "{text}"
            );
            let id = trace_id_of(text);
            assert_ne!(id, TraceId::INVALID);
            assert_eq!(id, trace_id_of(text));
        }
        assert_ne!(trace_id_of("a"), trace_id_of("b"));
        assert_ne!(parent_span_id_of("a"), parent_span_id_of("b"));
        assert_ne!(parent_span_id_of(""), SpanId::INVALID);
    }

    /// Printed by the Python SDK 1.24: `format(otel.trace_id_of(s), "032x")` and
    /// `format(otel._span_id_of(s), "016x")`.
    #[test]
    fn the_python_sdks_vectors() {
        for (text, trace, span) in [
            (
                "order-1042",
                "bff83cdfb94d8087b6fd49cb20c427dc",
                "af8fc63f9549a49d",
            ),
            ("", "e3b0c44298fc1c149afbf4c8996fb924", "e22ee649de3f1d55"),
            (
                "00000000-0000-0000-0000-000000000000",
                "12b9377cbe7e5c94e8a70d9d23929523",
                "e47eabb353476bde",
            ),
            (
                "4bf92f35-77b3-4da6-a3ce-929d0e0e4736",
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "e1591f445adb1338",
            ),
            (
                "caf\u{e9} \u{2615}",
                "a7e46d54289812af2aa5b08c2fbab5d2",
                "cf4598ff7e1fc9c4",
            ),
        ] {
            assert_eq!(trace_id_of(text).to_string(), trace, "{text}");
            assert_eq!(parent_span_id_of(text).to_string(), span, "{text}");
        }
    }

    #[test]
    fn header_names_are_read_in_any_case() {
        let headers = vec![("TraceParent".to_owned(), "x".to_owned())];
        assert_eq!(HeaderReader(&headers).get("traceparent"), Some("x"));
        assert_eq!(HeaderReader(&headers).get("tracestate"), None);
    }
}
