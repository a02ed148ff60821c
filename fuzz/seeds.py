#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target from the fixtures: fixtures/acemq (the AceMQ
ports' upstream fixtures) and fixtures/babelqueue/conformance (the BabelQueue conformance suite).

Usage: seeds.py REPO_ROOT OUT_DIR -- writes OUT_DIR/<target>/<name> for every target.
Standard library only."""

import base64
import json
import os
import sys

root, out = sys.argv[1], sys.argv[2]


def load(*path):
    with open(os.path.join(root, *path), encoding="utf-8") as f:
        return json.load(f)


def compact(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


seeds = {}


def seed(target, name, content):
    if isinstance(content, str):
        content = content.encode("utf-8")
    seeds.setdefault(target, {})[name] = content


# AceMQ: the envelope fixtures' deliveries, in the message JSON shape.
envelopes = load("fixtures", "acemq", "envelope-fixtures.json")["cases"]
itineraries = [
    {"steps": [{"exchange": "billing", "routingKey": "invoice.create", "name": "create"},
               {"exchange": "billing", "routingKey": "invoice.send", "name": "send"}]},
    {"steps": [{"exchange": "billing", "routingKey": "invoice.send", "name": "send"}],
     "done": [{"exchange": "billing", "routingKey": "invoice.create", "name": "create",
               "completedAt": "2026-01-02T03:04:05Z"}]},
    {"steps": None, "done": []},
]
for case in envelopes:
    message = {
        "exchange": "",
        "routing_key": case["routingKey"],
        "properties": {"message_id": case["messageId"], "content_type": case["contentType"],
                       "delivery_mode": 2},
        "headers": case["headers"],
        "body": json.loads(case["body"]),
    }
    for target in ("acemq_envelope", "acemq_route", "message_json"):
        seed(target, f"envelope-{case['case']}", json.dumps(message, indent=2))
    routed = dict(message, headers=dict(case["headers"]))
    routed["headers"].update({
        "x-acemq-route": "validate,enrich,dispatch",
        "x-acemq-route-position": {"type": "I", "value": 1},
        "x-acemq-route-id": "run-" + case["case"],
        "acemq-routing-slip": compact(itineraries[0]),
    })
    for target in ("acemq_envelope", "acemq_route", "message_json"):
        seed(target, f"routed-{case['case']}", json.dumps(routed, indent=2))
    body = json.loads(case["body"]).encode("utf-8")
    seed("acemq_claim_frame", f"bare-{case['case']}", body)
    seed("acemq_claim_frame", f"inline-{case['case']}", b"\xac\x01\x00" + body)
    seed("acemq_claim_frame", f"stored-{case['case']}", b"\xac\x01\x01" + case["messageId"].encode())
for i, itinerary in enumerate(itineraries):
    seed("acemq_itinerary", f"itinerary-{i}", compact(itinerary))
    seed("acemq_itinerary", f"itinerary-spaced-{i}", json.dumps(itinerary, indent=1))

# AceMQ: the codec interop bodies (YAML, TOML, XML, protobuf, Avro) as claim-check payloads.
for i, sample in enumerate(load("fixtures", "acemq", "codec-interop-fixtures.json")["samples"]):
    body = base64.b64decode(sample["body_base64"])
    name = f"{sample['format']}-{sample['producer']}-{i}"
    seed("acemq_claim_frame", f"inline-{name}", b"\xac\x01\x00" + body)
    seed("message_json", f"body-{name}", json.dumps(
        {"routing_key": "codec", "properties": {"content_type": sample["content_type"]},
         "body": {"base64": sample["body_base64"]}}))

# BabelQueue: every conformance body as written, compact (the canonical shape the fast reader
# takes), framed for Redis, and as the server's cjson re-encodes a Laravel job.
conformance = os.path.join(root, "fixtures", "babelqueue", "conformance")
for case in load("fixtures", "babelqueue", "conformance", "manifest.json")["cases"]:
    with open(os.path.join(conformance, case["file"]), "rb") as f:
        raw = f.read()
    name = case["name"]
    body = json.loads(raw)
    canonical = compact(body)
    cjson = json.dumps(body, separators=(",", ":"), sort_keys=True).replace("/", "\\/")
    frame = compact({"__bq_frame": 1,
                     "headers": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
                     "body": canonical})
    for target in ("babelqueue_body", "babelqueue_laravel_payload", "babelqueue_redis_frame"):
        seed(target, f"{name}-as-written", raw)
        seed(target, f"{name}-compact", canonical)
    seed("babelqueue_body", f"{name}-cjson", cjson)
    seed("babelqueue_laravel_payload", f"{name}-cjson", cjson)
    if isinstance(body, dict) and isinstance(body.get("meta"), dict):
        laravel = dict(body, meta=dict(body["meta"], queue="queues/orders"),
                       data={"callback": "https://shop.example/orders/1042"})
        seed("babelqueue_laravel_payload", f"{name}-slashes", compact(laravel))
    seed("babelqueue_redis_frame", f"{name}-frame", frame)
    seed("message_json", f"babelqueue-{name}", json.dumps(
        {"routing_key": "orders", "headers": {"traceparent": "00-a"}, "body": canonical}))

# AceMQ: the Java and Go bodies of the text codecs (codec-interop-fixtures.json).
for sample in load("fixtures", "acemq", "codec-interop-fixtures.json")["samples"]:
    if sample["format"] in ("yaml", "toml", "xml"):
        seed("acemq_text_codecs", f"{sample['format']}-{sample['producer']}",
             base64.b64decode(sample["body_base64"]))

for target, files in seeds.items():
    os.makedirs(os.path.join(out, target), exist_ok=True)
    for name, content in files.items():
        with open(os.path.join(out, target, name), "wb") as f:
            f.write(content)
