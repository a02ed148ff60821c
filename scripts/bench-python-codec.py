#!/usr/bin/env python3
"""Times the BabelQueue Python SDK's codec on the reference payload: make + encode + decode (and
reading data back), against json.dumps + json.loads of the payload alone. Prints one JSON line
with microseconds per operation. Run it with the peer virtualenv's interpreter:

    scripts/python-peer && .venv/bin/python scripts/bench-python-codec.py [ITERATIONS]
"""
import json
import sys
import time

from babelqueue import EnvelopeCodec

PAYLOAD = {"order_id": 1042, "amount": 99.9, "currency": "EUR", "note": "café ☕"}


def envelope_round_trip():
    envelope = EnvelopeCodec.make("urn:babel:orders:created", PAYLOAD, queue="orders")
    body = EnvelopeCodec.encode(envelope)
    return EnvelopeCodec.decode(body)["data"]


def plain_round_trip():
    return json.loads(json.dumps(PAYLOAD, ensure_ascii=False, separators=(",", ":")))


def per_op_us(fn, iterations):
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        best = min(best, (time.perf_counter() - start) / iterations * 1e6)
    return best


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    assert envelope_round_trip() == PAYLOAD
    for fn in (envelope_round_trip, plain_round_trip):
        per_op_us(fn, iterations // 10)
    envelope = per_op_us(envelope_round_trip, iterations)
    plain = per_op_us(plain_round_trip, iterations)
    print(json.dumps({"envelope_us": envelope, "plain_us": plain, "ratio": envelope / plain}))


main()
