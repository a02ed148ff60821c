//! The encrypted codec against Python's `cryptography` (AESGCM): vectors a Python program of
//! this test suite makes with the reference framing (`tests/python/encrypted_vectors.py`) are
//! decrypted, or refused with the expected typed error, by polyq; bodies polyq encrypts are
//! decrypted by Python, which checks that the header is the associated data.
//!
//! The interpreter is `POLYQ_PYTHON` (with `cryptography` installed), which `scripts/test`
//! sets up (`scripts/python-peer`).

use std::io::Write as _;
use std::process::{Command, Stdio};

use acemq::codec::encrypted::Encrypted;
use acemq::codec::encrypted::{EncryptionError, key_id_of, open, seal};
use acemq::codec::keyring::KeyRing;
use acemq::codec::{Decode, Encode, Json};
use serde_json::{Value, json};

const PROGRAM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/python/encrypted_vectors.py"
);

fn python(command: &str, input: Option<&Value>) -> Value {
    let interpreter = std::env::var("POLYQ_PYTHON").unwrap_or_else(|_| {
        panic!(
            "POLYQ_PYTHON is not set: run scripts/test (which sets it), or scripts/python-peer and \
             export POLYQ_PYTHON=$PWD/.venv/bin/python"
        )
    });
    let mut child = Command::new(interpreter)
        .args([PROGRAM, command])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the Python program starts");
    let mut stdin = child.stdin.take().expect("stdin");
    if let Some(input) = input {
        stdin.write_all(input.to_string().as_bytes()).unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "encrypted_vectors.py {command} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON on standard output")
}

fn hex(value: &Value) -> Vec<u8> {
    hex::decode(value.as_str().expect("hex text")).expect("hex")
}

fn ring_of(pairs: &Value) -> KeyRing {
    let pairs = pairs.as_array().unwrap();
    let id = |pair: &Value| pair[0].as_str().unwrap().to_owned();
    let mut ring = KeyRing::new(&id(&pairs[0]), &hex(&pairs[0][1])).unwrap();
    for pair in &pairs[1..] {
        ring = ring.with_key(&id(pair), &hex(&pair[1])).unwrap();
    }
    ring
}

#[test]
fn polyq_opens_what_python_sealed_and_refuses_what_was_altered() {
    let vectors = python("make", None);
    let cases = vectors["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 17, "every case the program makes is checked");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let ring = ring_of(&case["ring"]);
        let body = hex(&case["body"]);
        let result = open(&ring, &body);
        match case["expect"].as_str().unwrap() {
            "ok" => {
                assert_eq!(
                    result.as_deref(),
                    Ok(&hex(&case["plaintext"])[..]),
                    "{name}"
                );
                assert_eq!(key_id_of(&body), case["key_id"].as_str(), "{name}");
            }
            "not_encrypted" => {
                assert_eq!(result, Err(EncryptionError::NotEncrypted), "{name}");
            }
            "unknown_key" => {
                let error = result.unwrap_err();
                assert!(error.is_unknown_key(), "{name}: {error}");
                assert_eq!(error.key_id(), Some("k0"), "{name}");
            }
            "not_authentic" => {
                let error = result.unwrap_err();
                assert!(error.is_not_authentic(), "{name}: {error}");
                assert!(error.key_id().is_some(), "{name}");
            }
            other => panic!("{name}: unknown expectation {other}"),
        }
    }
}

#[test]
fn python_opens_what_polyq_sealed_with_the_header_as_associated_data() {
    let long_id = "k".repeat(255);
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    let mut add = |name: &str, key_id: &str, key: Vec<u8>, body: Vec<u8>, plaintext: Vec<u8>| {
        cases.push(json!({
            "name": name, "key_id": key_id, "key": hex::encode(&key), "body": hex::encode(&body),
        }));
        expected.push((name.to_owned(), key_id.to_owned(), plaintext));
    };
    for length in [16, 24, 32] {
        let key: Vec<u8> = (0..length).map(|i| i as u8).collect();
        let ring = KeyRing::new("orders-2026-09", &key).unwrap();
        let codec = Encrypted::new(Json, ring);
        let body = Encode::<Value>::encode(&codec, &json!({"id": "o-1", "name": "Zoë"})).unwrap();
        let plaintext = r#"{"id":"o-1","name":"Zoë"}"#.as_bytes().to_vec();
        add(
            &format!("aes-{} json", length * 8),
            "orders-2026-09",
            key,
            body.to_vec(),
            plaintext,
        );
    }
    let key = vec![7; 32];
    let ring = KeyRing::new("k1", &key).unwrap();
    add(
        "empty payload",
        "k1",
        key.clone(),
        seal(&ring, b"").unwrap(),
        Vec::new(),
    );
    let long = KeyRing::new(&long_id, &key).unwrap();
    add(
        "255-byte key id",
        &long_id,
        key.clone(),
        seal(&long, b"x").unwrap(),
        b"x".to_vec(),
    );
    let rotated = KeyRing::new("old", &[1; 32])
        .unwrap()
        .with_key("new", &key)
        .unwrap()
        .use_key("new")
        .unwrap();
    add(
        "rotated ring writes with the new key",
        "new",
        key,
        seal(&rotated, b"{}").unwrap(),
        b"{}".to_vec(),
    );

    let checked = python("check", Some(&json!({"cases": cases})));
    let results = checked["results"].as_array().unwrap();
    assert_eq!(results.len(), expected.len());
    for (result, (name, key_id, plaintext)) in results.iter().zip(expected) {
        assert_eq!(result["name"], name.as_str());
        assert_eq!(hex(&result["plaintext"]), plaintext, "{name}");
        assert_eq!(result["key_id"], key_id.as_str(), "{name}");
        assert_eq!(result["header_is_aad"], true, "{name}");
    }
}

#[test]
fn a_256_byte_key_id_is_refused_before_anything_is_encrypted() {
    let error = KeyRing::new(&"k".repeat(256), &[7; 32]).unwrap_err();
    assert!(error.is_key_id(), "{error}");
    let ring = KeyRing::new("k", &[7; 32]).unwrap();
    let error = ring.with_key(&"é".repeat(128), &[7; 32]).unwrap_err();
    assert!(error.to_string().contains("at most 255 bytes"), "{error}");
}

#[test]
fn the_decoder_refuses_python_vectors_with_the_same_errors() {
    // Through the codec, as a consumer decodes: the error text is what x-acemq-error carries.
    let vectors = python("make", None);
    let tag = vectors["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "flipped bit in the tag")
        .unwrap();
    let codec = Encrypted::new(Json, ring_of(&tag["ring"]));
    let error = Decode::<Value>::decode(&codec, &hex(&tag["body"]).into()).unwrap_err();
    assert_eq!(
        error.0,
        "did not decrypt with key `k1`: either that is not the key it was written with, or the \
         message was altered after it was written"
    );
    let ok = &vectors["cases"][0];
    let codec = Encrypted::new(Json, ring_of(&ok["ring"]));
    let value: Value = codec.decode(&hex(&ok["body"]).into()).unwrap();
    assert_eq!(value, json!({"id": "o-1", "amount": 12.5, "name": "Zoë"}));
}
