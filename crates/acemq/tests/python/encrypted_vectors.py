"""Vectors of AceMQ's encrypted framing, made and checked with Python's `cryptography` (AESGCM).

The framing (Java's EncryptedCodec, the Python port's codecs.encrypted):
    0xAE | 0x01 | key id length (1 byte) | key id (UTF-8) | nonce (12) | ciphertext + tag (16)
with the whole header (0xAE through the key id) as GCM's associated data.

usage:
  encrypted_vectors.py make    prints {"cases": [...]}: each case has name, key_id, key (hex),
                               ring ([[id, key hex]...], the keys the reader holds), plaintext
                               (hex), body (hex) and expect: "ok", "not_encrypted",
                               "unknown_key" or "not_authentic"
  encrypted_vectors.py check   reads {"cases": [{name, key (hex), key_id, body (hex)}]} on stdin
                               (bodies written by polyq) and prints {"results": [{name,
                               plaintext (hex), key_id, header_is_aad}]}; fails on any body that
                               is not the framing or does not decrypt
"""
import json
import os
import sys

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = 0xAE
VERSION = 0x01
NONCE = 12


def header(key_id):
    encoded = key_id.encode("utf-8")
    assert 1 <= len(encoded) <= 255
    return bytes((MAGIC, VERSION, len(encoded))) + encoded


def seal(key, key_id, plaintext, nonce=None):
    aad = header(key_id)
    nonce = os.urandom(NONCE) if nonce is None else nonce
    return aad + nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def flip(body, at):
    changed = bytearray(body)
    changed[at] ^= 0x01
    return bytes(changed)


def case(name, key_id, key, plaintext, body, expect, ring=None):
    return {
        "name": name,
        "key_id": key_id,
        "key": key.hex(),
        "ring": [[i, k.hex()] for i, k in (ring or [(key_id, key)])],
        "plaintext": plaintext.hex(),
        "body": body.hex(),
        "expect": expect,
    }


def make():
    cases = []
    json_payload = '{"id":"o-1","amount":12.5,"name":"Zoë"}'.encode("utf-8")
    for size in (16, 24, 32):
        key = os.urandom(size)
        cases.append(case(f"aes-{size * 8} json", "orders-2026-09", key, json_payload,
                          seal(key, "orders-2026-09", json_payload), "ok"))
    key = os.urandom(32)
    cases.append(case("empty payload", "k1", key, b"", seal(key, "k1", b""), "ok"))
    long_id = "k" * 255
    cases.append(case("255-byte key id", long_id, key, b"x", seal(key, long_id, b"x"), "ok"))
    cases.append(case("non-ASCII key id", "clé-2026", key, json_payload,
                      seal(key, "clé-2026", json_payload), "ok"))
    big = os.urandom(4096)
    cases.append(case("4 KiB binary payload", "k1", key, big, seal(key, "k1", big), "ok"))
    old, new = os.urandom(32), os.urandom(32)
    cases.append(case("rotated ring reads the old key", "old", old, json_payload,
                      seal(old, "old", json_payload), "ok", ring=[("new", new), ("old", old)]))

    body = seal(key, "k1", json_payload)
    header_len = 3 + len("k1")
    # "k1" with one bit flipped is "k0": the reader holds "k0" with the very same key, so only
    # the header's being associated data can refuse it.
    cases.append(case("flipped bit in the key id (header is AAD)", "k1", key, json_payload,
                      flip(body, 4), "not_authentic", ring=[("k1", key), ("k0", key)]))
    cases.append(case("flipped bit in the key id, unknown id", "k1", key, json_payload,
                      flip(body, 4), "unknown_key"))
    cases.append(case("flipped bit in the magic", "k1", key, json_payload, flip(body, 0),
                      "not_encrypted"))
    cases.append(case("flipped bit in the version", "k1", key, json_payload, flip(body, 1),
                      "not_encrypted"))
    cases.append(case("flipped bit in the nonce", "k1", key, json_payload,
                      flip(body, header_len + 5), "not_authentic"))
    cases.append(case("flipped bit in the ciphertext", "k1", key, json_payload,
                      flip(body, header_len + NONCE + 1), "not_authentic"))
    cases.append(case("flipped bit in the tag", "k1", key, json_payload,
                      flip(body, len(body) - 1), "not_authentic"))
    cases.append(case("wrong key under the same id", "k1", key, json_payload, body,
                      "not_authentic", ring=[("k1", os.urandom(32))]))
    # Encrypted with an empty associated data instead of the header: not the framing's.
    nonce = os.urandom(NONCE)
    no_aad = header("k1") + nonce + AESGCM(key).encrypt(nonce, json_payload, None)
    cases.append(case("header not bound as AAD", "k1", key, json_payload, no_aad,
                      "not_authentic"))
    print(json.dumps({"cases": cases}))


def check():
    results = []
    for c in json.load(sys.stdin)["cases"]:
        body = bytes.fromhex(c["body"])
        key = bytes.fromhex(c["key"])
        if body[0] != MAGIC or body[1] != VERSION:
            sys.exit(f"{c['name']}: does not start with 0xAE 0x01")
        length = body[2]
        key_id = body[3:3 + length].decode("utf-8")
        aad = body[:3 + length]
        if aad != header(c["key_id"]):
            sys.exit(f"{c['name']}: header {aad.hex()} is not the framing of {c['key_id']!r}")
        nonce = body[3 + length:3 + length + NONCE]
        sealed = body[3 + length + NONCE:]
        plaintext = AESGCM(key).decrypt(nonce, sealed, aad)
        # The header must be the associated data: the same bytes refuse to open without it.
        try:
            AESGCM(key).decrypt(nonce, sealed, None)
            header_is_aad = False
        except InvalidTag:
            header_is_aad = True
        results.append({"name": c["name"], "plaintext": plaintext.hex(), "key_id": key_id,
                        "header_is_aad": header_is_aad})
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]]()
