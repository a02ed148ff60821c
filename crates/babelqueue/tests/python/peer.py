"""Runs the babelqueue PyPI package over a corpus for the Rust differential test.

usage: peer.py CORPUS.json OUT.json
CORPUS: {"bodies": [{"name", "base64"}], "makes": [{"urn", "data_json", "queue", "trace_id", "meta_json"}],
         "rust_bodies": [{"name", "body"}]}
OUT: the same keys with Python's answers; frames as base64.
"""
import base64
import json
import logging
import re
import sys

from babelqueue import EnvelopeCodec as C

records = []


class Capture(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())


codec_logger = logging.getLogger("babelqueue.codec")
codec_logger.addHandler(Capture())
codec_logger.propagate = False
POINTER = re.compile(r" (/[A-Za-z_]+(?:/[A-Za-z_]+)?)")


def verdict(raw):
    text = raw.decode("utf-8", "surrogateescape")
    poison = C.poison_cause(text)
    records.clear()
    envelope = C.decode_lenient(text) if poison is None else {}
    warnings = [POINTER.search(m).group(1) for m in records if POINTER.search(m)]
    accepted = poison is None and C.accepts(envelope)
    return {
        "poison": poison,
        "accepts": accepted,
        "urn": C.urn(envelope) if envelope else None,
        "warnings": warnings,
        # base64 of the exact bytes: a frame may hold a lone surrogate that UTF-8 cannot carry.
        "frame": base64.b64encode(C.encode(envelope).encode("utf-8", "surrogatepass")).decode()
        if accepted
        else None,
    }


def main():
    corpus = json.load(open(sys.argv[1], encoding="utf-8"))
    out = {"bodies": {}, "makes": [], "rust_bodies": {}}
    for case in corpus["bodies"]:
        out["bodies"][case["name"]] = verdict(base64.b64decode(case["base64"]))
    for case in corpus["makes"]:
        envelope = C.make(
            case["urn"],
            json.loads(case["data_json"]),
            queue=case["queue"],
            trace_id=case["trace_id"],
            meta=json.loads(case["meta_json"]) if case["meta_json"] else None,
        )
        out["makes"].append(C.encode(envelope))
    for case in corpus["rust_bodies"]:
        decoded = C.decode(case["body"])
        out["rust_bodies"][case["name"]] = {
            "accepts": C.accepts(decoded),
            "poison": C.poison_cause(case["body"]),
            "reencoded": C.encode(decoded),
            "lang": decoded["meta"]["lang"],
        }
    json.dump(out, open(sys.argv[2], "w", encoding="utf-8"))


main()
