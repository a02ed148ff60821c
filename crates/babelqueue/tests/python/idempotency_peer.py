"""Drives the babelqueue PyPI package as a live peer for the shared idempotency store test.

usage: idempotency_peer.py COMMAND JSON-ARGS    (prints one JSON document)
  stores   {}                                         -> {"stores": [names in babelqueue.idempotency ending in "Store"]}
  consume  {"url", "queue", "urn", "prefix", "max"}   -> {"processed", "effects": [meta.id of each handler run]}

The SDK (1.24) ships no Redis idempotency store, only the protocol (seen / remember / forget) and
InMemoryStore. `consume` wraps its handler with the SDK's own `idempotency.wrap` over the smallest
store that keeps the Go SDK's Redis layout: key <prefix><meta.id>, value "1", SET NX.
"""
import json
import logging
import sys

import redis

from babelqueue import BabelQueue, idempotency
from babelqueue.redis_transport import RedisTransport

logging.basicConfig(level=logging.ERROR, stream=sys.stderr)


class GoLayoutRedisStore:
    def __init__(self, client, prefix):
        self._client = client
        self._prefix = prefix

    def seen(self, message_id):
        return self._client.exists(self._prefix + message_id) > 0

    def remember(self, message_id):
        self._client.set(self._prefix + message_id, "1", nx=True)

    def forget(self, message_id):
        self._client.delete(self._prefix + message_id)


def stores(_args):
    return {"stores": sorted(n for n in dir(idempotency) if n.endswith("Store"))}


def consume(args):
    app = BabelQueue(transport=RedisTransport(args["url"]), queue=args["queue"])
    store = GoLayoutRedisStore(redis.Redis.from_url(args["url"]), args["prefix"])
    effects = []

    def handle(data, meta):
        effects.append(meta["id"])

    app.register(args["urn"], idempotency.wrap(store, handle))
    processed = app.consume(max_messages=args["max"], timeout=1, handle_signals=False)
    return {"processed": processed, "effects": effects}


if __name__ == "__main__":
    command, raw = sys.argv[1], sys.argv[2]
    print(json.dumps({"stores": stores, "consume": consume}[command](json.loads(raw))))
