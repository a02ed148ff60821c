"""Drives the babelqueue PyPI package as a live RabbitMQ peer for the Rust runtime interop test.

usage: runtime_peer.py COMMAND JSON-ARGS    (prints one JSON document)
  publish  {"url", "queue", "urn", "data", "trace_id", "headers"}  -> {"id"}
  consume  {"url", "queue", "urns", "max"}                         -> {"processed", "jobs": [{"data", "meta", "envelope", "headers", "replay"}]}
  fail     {"url", "queue", "urn"}                                 -> {"processed"}  (dead-letters on the first failure)
  redrive  {"url", "dlq", "bypass"}                                -> {"redriven", "skipped", "items"}
"""
import json
import logging
import sys

from babelqueue import BabelQueue
from babelqueue.headers import headers_from_context
from babelqueue.pika_transport import PikaTransport
from babelqueue.redrive import redrive
from babelqueue.replay import is_replay

logging.basicConfig(level=logging.ERROR, stream=sys.stderr)


def publish(args):
    app = BabelQueue(args["url"], queue=args["queue"])
    headers = args.get("headers") or {}
    if headers:
        mid = app.publish_with_headers(args["urn"], args["data"], headers, trace_id=args.get("trace_id"))
    else:
        mid = app.publish(args["urn"], args["data"], trace_id=args.get("trace_id"))
    return {"id": mid}


def consume(args):
    app = BabelQueue(args["url"], queue=args["queue"], dead_letter=True)
    jobs = []

    def handle(data, meta, envelope):
        jobs.append({
            "data": data,
            "meta": meta,
            "envelope": envelope,
            "headers": dict(headers_from_context()),
            "replay": is_replay(),
        })

    for urn in args["urns"]:
        app.register(urn, handle)
    processed = app.consume(max_messages=args["max"], timeout=1, handle_signals=False)
    return {"processed": processed, "jobs": jobs}


def fail(args):
    app = BabelQueue(args["url"], queue=args["queue"], dead_letter=True, max_attempts=1)

    def handle(data, meta):
        raise RuntimeError("python handler refused it")

    app.register(args["urn"], handle)
    return {"processed": app.consume(max_messages=1, timeout=1, handle_signals=False)}


def redrive_dlq(args):
    result = redrive(PikaTransport(args["url"]), args["dlq"], bypass=args.get("bypass", False), timeout=1.0)
    return {
        "redriven": result.redriven,
        "skipped": result.skipped,
        "items": [item.__dict__ for item in result.items],
    }


COMMANDS = {"publish": publish, "consume": consume, "fail": fail, "redrive": redrive_dlq}

if __name__ == "__main__":
    print(json.dumps(COMMANDS[sys.argv[1]](json.loads(sys.argv[2]))))
