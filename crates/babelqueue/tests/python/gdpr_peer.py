"""The Python side of the GDPR field encryption and payload schema interop tests.

The cipher is the reference one of ADR-0030, written here over the `cryptography` package as the
Python SDK's documentation shows: AES-GCM, a fresh 12-byte nonce, the standard padded base64 of
nonce || ciphertext || tag. Field protection is the SDK's own `babelqueue.gdpr`, validation its
`babelqueue.schema`.

usage: gdpr_peer.py COMMAND JSON-ARGS    (prints one JSON document)
  encrypt     {"key", "values"}                              -> {"ciphertexts"}  (canonical JSON of each value)
  decrypt     {"key", "ciphertexts"}                         -> {"values"}
  protect     {"key", "schema", "data"}                      -> {"data"}
  unprotect   {"key", "schema", "data"}                      -> {"data"} or {"error", "type"}
  publish     {"url", "queue", "urn", "schema", "key", "data"} -> {"id", "data"}  (protected, then published)
  consume     {"url", "queue", "urn", "schema", "key", "max"}  -> {"processed", "jobs": [{"data", "envelope"}]}
  validate    {"cases": [{"schema", "value"}]}               -> {"verdicts": [null | "path: reason"]}
  paths       {"schema"}                                     -> {"paths": [[path, category]]}
"""
import base64
import binascii
import copy
import json
import logging
import os
import sys

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from babelqueue import BabelQueue
from babelqueue.exceptions import DecryptError
from babelqueue.gdpr import protect, unprotect
from babelqueue.schema import sensitive_paths, validate_schema

logging.basicConfig(level=logging.ERROR, stream=sys.stderr)


class ReferenceCipher:
    def __init__(self, key_hex):
        self._aead = AESGCM(binascii.unhexlify(key_hex))

    def encrypt(self, plaintext):
        nonce = os.urandom(12)
        return base64.b64encode(nonce + self._aead.encrypt(nonce, plaintext, None)).decode("ascii")

    def decrypt(self, ciphertext):
        raw = base64.b64decode(ciphertext, validate=True)
        return self._aead.decrypt(raw[:12], raw[12:], None)


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def encrypt(args):
    cipher = ReferenceCipher(args["key"])
    return {"ciphertexts": [cipher.encrypt(canonical(value)) for value in args["values"]]}


def decrypt(args):
    cipher = ReferenceCipher(args["key"])
    return {"values": [json.loads(cipher.decrypt(text)) for text in args["ciphertexts"]]}


def protect_command(args):
    data = copy.deepcopy(args["data"])
    protect(data, args["schema"], ReferenceCipher(args["key"]))
    return {"data": data}


def unprotect_command(args):
    data = copy.deepcopy(args["data"])
    try:
        unprotect(data, args["schema"], ReferenceCipher(args["key"]))
    except DecryptError as error:
        return {"error": str(error), "type": type(error).__name__}
    return {"data": data}


def publish(args):
    app = BabelQueue(args["url"], queue=args["queue"])
    data = copy.deepcopy(args["data"])
    protect(data, args["schema"], ReferenceCipher(args["key"]))
    return {"id": app.publish(args["urn"], data), "data": data}


def consume(args):
    app = BabelQueue(args["url"], queue=args["queue"], dead_letter=True)
    cipher = ReferenceCipher(args["key"])
    jobs = []

    def handle(data, meta, envelope):
        received = copy.deepcopy(data)
        unprotect(data, args["schema"], cipher)
        jobs.append({"data": data, "received": received, "envelope": envelope})

    app.register(args["urn"], handle)
    processed = app.consume(max_messages=args["max"], timeout=1, handle_signals=False)
    return {"processed": processed, "jobs": jobs}


def validate(args):
    return {"verdicts": [validate_schema(case["schema"], case["value"]) for case in args["cases"]]}


def paths(args):
    return {"paths": [[p.path, p.category] for p in sensitive_paths(args["schema"])]}


COMMANDS = {
    "encrypt": encrypt,
    "decrypt": decrypt,
    "protect": protect_command,
    "unprotect": unprotect_command,
    "publish": publish,
    "consume": consume,
    "validate": validate,
    "paths": paths,
}

if __name__ == "__main__":
    print(json.dumps(COMMANDS[sys.argv[1]](json.loads(sys.argv[2]))))
