#!/usr/bin/env python3
"""Publishes N jobs of the reference payload through the BabelQueue Python SDK, then consumes
them with the SDK's own worker loop and a no-op handler. Prints one JSON line of jobs per second:
publish, consume, and publish_then_consume (N over both phases' time). `polyq bench babel
--python PATH` runs it on the same broker and compares; to run it alone:

    scripts/python-peer
    .venv/bin/python scripts/bench-python-sdk.py --url redis://127.0.0.1:6379/0 \\
        --queue bench.python --messages 2000

The queue is left empty but not deleted; `polyq bench babel` deletes it afterwards.
"""
import argparse
import json
import time

from babelqueue import BabelQueue

URN = "urn:babel:orders:created"
PAYLOAD = {"order_id": 1042, "amount": 99.9, "currency": "EUR", "note": "café ☕"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="broker URL")
    parser.add_argument("--laravel", action="store_true", help="Redis in Laravel's key layout")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--messages", type=int, default=2000)
    args = parser.parse_args()

    if args.laravel:
        from babelqueue.redis_transport import RedisTransport

        app = BabelQueue(transport=RedisTransport(args.url, laravel_compat=True), queue=args.queue)
    else:
        app = BabelQueue(args.url, queue=args.queue)
    handled = 0

    def handler(data, meta):
        nonlocal handled
        handled += 1

    app.register(URN, handler)

    started = time.perf_counter()
    for _ in range(args.messages):
        app.publish(URN, PAYLOAD)
    publish_seconds = time.perf_counter() - started

    started = time.perf_counter()
    processed = app.consume(max_messages=args.messages, timeout=30.0, handle_signals=False)
    consume_seconds = time.perf_counter() - started
    if processed != args.messages or handled != args.messages:
        raise SystemExit(f"consumed {processed} (handled {handled}) of {args.messages} jobs")

    print(json.dumps({
        "messages": args.messages,
        "publish": args.messages / publish_seconds,
        "consume": args.messages / consume_seconds,
        "publish_then_consume": args.messages / (publish_seconds + consume_seconds),
    }))


if __name__ == "__main__":
    main()
