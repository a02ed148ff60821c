"""Drives the babelqueue PyPI package's OpenTelemetry module (babelqueue.otel, extra [otel]) as a
live peer for the Rust tracing interop test, with the OpenTelemetry SDK's in-memory exporter.

usage: tracing_peer.py COMMAND JSON-ARGS    (prints one JSON document)
  publish  {"url", "queue", "urn", "data"}  -> {"id", "trace_id", "spans": [span]}
           publishes with otel.publish inside a "checkout" span
  consume  {"url", "queue", "urn", "max"}   -> {"processed", "headers": [{...}], "spans": [span]}
           consumes with a handler wrapped by otel.wrap_handler
  vectors  {"inputs": [str]}                -> {"vectors": [{"input", "trace_id", "span_id", "uuid"}]}
span: {"name", "kind", "trace_id", "span_id", "parent_span_id", "parent_is_remote", "status",
       "attributes", "events"}, ids as lowercase hex.
"""
import json
import logging
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from babelqueue import BabelQueue, otel
from babelqueue.headers import headers_from_context

logging.basicConfig(level=logging.ERROR, stream=sys.stderr)

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
tracer = provider.get_tracer("python-peer")


def span_json(span):
    context = span.get_span_context()
    parent = span.parent
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
        "parent_span_id": format(parent.span_id, "016x") if parent else None,
        "parent_is_remote": bool(parent and parent.is_remote),
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes),
        "events": [event.name for event in span.events],
    }


def finished():
    return [span_json(span) for span in exporter.get_finished_spans()]


def publish(args):
    app = BabelQueue(args["url"], queue=args["queue"])
    with tracer.start_as_current_span("checkout") as checkout:
        message_id = otel.publish(tracer, app, args["urn"], args["data"])
        trace_id = checkout.get_span_context().trace_id
    return {"id": message_id, "trace_id": format(trace_id, "032x"), "spans": finished()}


def consume(args):
    app = BabelQueue(args["url"], queue=args["queue"], dead_letter=True)
    headers = []

    def handle(data, meta):
        headers.append(dict(headers_from_context()))

    app.register(args["urn"], otel.wrap_handler(tracer, handle))
    processed = app.consume(max_messages=args["max"], timeout=5, handle_signals=False)
    return {"processed": processed, "headers": headers, "spans": finished()}


def vectors(args):
    return {"vectors": [
        {
            "input": text,
            "trace_id": format(otel.trace_id_of(text), "032x"),
            "span_id": format(otel._span_id_of(text), "016x"),
            "uuid": otel.uuid_of(otel.trace_id_of(text)),
        }
        for text in args["inputs"]
    ]}


if __name__ == "__main__":
    command, raw = sys.argv[1], sys.argv[2]
    commands = {"publish": publish, "consume": consume, "vectors": vectors}
    print(json.dumps(commands[command](json.loads(raw)), ensure_ascii=False))
