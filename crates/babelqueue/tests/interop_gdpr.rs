//! GDPR field encryption (ADR-0030) and payload schemas (ADR-0024) against the Python SDK
//! (`babelqueue` 1.24.0 with its `gdpr` extra) and the `cryptography` package as live peers:
//! the reference cipher's values both ways, protected jobs both ways on RabbitMQ and Redis, the
//! retry and dead-letter path of a job that does not decrypt or does not validate, and the
//! places where the Python SDK departs from the reference text.
//!
//! The interpreter is `POLYQ_PYTHON`, which `scripts/test` sets up (`scripts/python-peer`).

mod runtime_support;

use std::sync::Arc;

use babelqueue::gdpr::{AesGcmCipher, Cipher};
use babelqueue::schema::MapProvider;
use babelqueue::transport::Transport;
use babelqueue::{DeadLetterReason, SharedProvider};
use polyq_testkit::brokers::TestBroker;
use runtime_support::{Bound, IDLE, recorder};
use serde_json::{Value, json};

const URN: &str = "urn:babel:customers:registered";
const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const OTHER_KEY: &str = "1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100";

async fn peer(command: &str, args: Value) -> Value {
    runtime_support::python_peer("gdpr_peer.py", command, args).await
}

fn key(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn cipher(hex: &str) -> Arc<AesGcmCipher> {
    Arc::new(AesGcmCipher::new(&key(hex)).unwrap())
}

/// A schema with every shape of mark: a leaf, a leaf in an object, a leaf in array items, and
/// constraints the cleartext must meet (validated after decryption).
fn schema() -> Value {
    json!({"type": "object", "required": ["customer_id", "email"], "properties": {
        "customer_id": {"type": "integer", "minimum": 1},
        "email": {"type": "string", "minLength": 3, "x-gdpr-sensitive": "contact"},
        "profile": {"type": "object", "properties": {
            "full_name": {"type": "string", "x-gdpr-sensitive": true},
            "age": {"type": "integer", "x-gdpr-sensitive": true},
            "plan": {"type": "string"},
        }},
        "addresses": {"type": "array", "items": {"type": "object", "properties": {
            "line": {"type": "string", "x-gdpr-sensitive": true},
            "city": {"type": "string"},
        }}},
        "score": {"type": "number", "x-gdpr-sensitive": true},
    }})
}

/// Cleartext the two SDKs encode differently (`\u00e9` and `é`, `1.0`), compared as values.
fn cleartext() -> Value {
    json!({
        "customer_id": 1042,
        "email": "élodie@example.com",
        "profile": {"full_name": "Élodie Ünal ☕", "age": 41, "plan": "gold"},
        "addresses": [{"line": "1 Rue de la Paix", "city": "Paris"}, {"city": "Lyon"}],
        "score": 1.0,
    })
}

fn provider() -> SharedProvider {
    Arc::new(MapProvider::new().with(URN, schema()))
}

// ---------------------------------------------------------------------------------------------
// The reference cipher, value by value

#[tokio::test]
async fn values_sealed_by_python_cryptography_open_in_polyq_and_the_reverse() {
    let values = vec![
        json!("alice@example.com"),
        json!("é ☕ \u{1F600}"),
        json!(1.0),
        json!(12345678901234_i64),
        json!(null),
        json!({"z": [1, 2.5, {"b": true, "a": null}], "a": "x"}),
    ];
    for hex in [&KEY[..32], &KEY[..48], KEY] {
        let ours = AesGcmCipher::new(&key(hex)).unwrap();
        let sealed = peer("encrypt", json!({"key": hex, "values": values})).await;
        for (text, value) in sealed["ciphertexts"]
            .as_array()
            .unwrap()
            .iter()
            .zip(&values)
        {
            let plaintext = ours.decrypt(text.as_str().unwrap()).unwrap();
            let opened: Value = serde_json::from_slice(&plaintext).unwrap();
            assert_eq!(&opened, value, "{}-bit key", hex.len() * 4);
        }
        let ciphertexts: Vec<String> = values
            .iter()
            .map(|value| ours.encrypt(value.to_string().as_bytes()).unwrap())
            .collect();
        let opened = peer("decrypt", json!({"key": hex, "ciphertexts": ciphertexts})).await;
        assert_eq!(opened["values"], Value::Array(values.clone()));
    }
}

#[tokio::test]
async fn data_protected_by_each_side_is_unprotected_by_the_other() {
    let python = peer(
        "protect",
        json!({"key": KEY, "schema": schema(), "data": cleartext()}),
    )
    .await;
    let mut data = python["data"].clone();
    assert!(data["email"].is_string() && data["email"] != cleartext()["email"]);
    assert!(data["profile"]["age"].is_string());
    assert_eq!(data["profile"]["plan"], "gold");
    babelqueue::gdpr::unprotect(&mut data, &schema(), cipher(KEY).as_ref()).unwrap();
    assert_eq!(data, cleartext());

    let mut ours = cleartext();
    babelqueue::gdpr::protect(&mut ours, &schema(), cipher(KEY).as_ref()).unwrap();
    let back = peer(
        "unprotect",
        json!({"key": KEY, "schema": schema(), "data": ours}),
    )
    .await;
    assert_eq!(back["data"], cleartext(), "{back}");
}

#[tokio::test]
async fn the_inventory_of_sensitive_paths_matches_pythons() {
    let schema = json!({"x-gdpr-sensitive": "root", "properties": {
        "email": {"x-gdpr-sensitive": "contact"},
        "off": {"x-gdpr-sensitive": false},
        "blank": {"x-gdpr-sensitive": ""},
        "profile": {"x-gdpr-sensitive": true, "properties": {"full_name": {"x-gdpr-sensitive": true}}},
        "addresses": {"items": {"properties": {"line": {"x-gdpr-sensitive": "address"}}}},
    }});
    let python = peer("paths", json!({"schema": schema})).await;
    let ours: Vec<Value> = babelqueue::schema::sensitive_paths(&schema)
        .iter()
        .map(|path| json!([path.to_string(), path.category.clone().unwrap_or_default()]))
        .collect();
    assert_eq!(python["paths"], Value::Array(ours));
}

// ---------------------------------------------------------------------------------------------
// Where the Python SDK departs from the reference text (docs/INTEROP.md)

/// A marked field inside a marked container: the container is encrypted whole, so the inner mark
/// adds nothing. Python's `protect` does that, but its `unprotect` then tries to decrypt the
/// inner cleartext too and fails on its own output; polyq reads it back.
#[tokio::test]
async fn departure_python_cannot_unprotect_a_marked_field_inside_a_marked_container() {
    let schema = json!({"properties": {"profile": {"x-gdpr-sensitive": true, "properties": {
        "full_name": {"x-gdpr-sensitive": true}}}}});
    let data = json!({"profile": {"full_name": "Bob", "plan": "gold"}});
    let python = peer(
        "protect",
        json!({"key": KEY, "schema": schema, "data": data}),
    )
    .await;
    assert!(python["data"]["profile"].is_string());
    let again = peer(
        "unprotect",
        json!({"key": KEY, "schema": schema, "data": python["data"]}),
    )
    .await;
    assert_eq!(again["type"], "DecryptError", "{again}");

    let mut ours = python["data"].clone();
    babelqueue::gdpr::unprotect(&mut ours, &schema, cipher(KEY).as_ref()).unwrap();
    assert_eq!(ours, data);
    // And polyq's output is the same shape: one ciphertext for the container.
    let mut protected = data.clone();
    let count = babelqueue::gdpr::protect(&mut protected, &schema, cipher(KEY).as_ref()).unwrap();
    assert_eq!(count, 1);
}

/// A property whose name contains a dot is one property: polyq encrypts it, Python splits its
/// path at the dot and leaves the field in clear.
#[tokio::test]
async fn departure_python_leaves_a_dotted_property_name_in_clear() {
    let schema = json!({"properties": {"contact.email": {"x-gdpr-sensitive": true}}});
    let data = json!({"contact.email": "bob@example.com"});
    let python = peer(
        "protect",
        json!({"key": KEY, "schema": schema, "data": data}),
    )
    .await;
    assert_eq!(python["data"], data, "Python leaves it in clear");

    let mut ours = data.clone();
    babelqueue::gdpr::protect(&mut ours, &schema, cipher(KEY).as_ref()).unwrap();
    assert_ne!(ours["contact.email"], data["contact.email"]);
    babelqueue::gdpr::unprotect(&mut ours, &schema, cipher(KEY).as_ref()).unwrap();
    assert_eq!(ours, data);
}

/// Marks under an array of arrays: polyq encrypts every inner item, Python none.
#[tokio::test]
async fn departure_python_encrypts_nothing_under_an_array_of_arrays() {
    let schema = json!({"properties": {"matrix": {"type": "array", "items": {"type": "array",
        "items": {"type": "string", "x-gdpr-sensitive": true}}}}});
    let data = json!({"matrix": [["a", "b"], ["c"]]});
    let python = peer(
        "protect",
        json!({"key": KEY, "schema": schema, "data": data}),
    )
    .await;
    assert_eq!(python["data"], data, "Python encrypts nothing");

    let mut ours = data.clone();
    let count = babelqueue::gdpr::protect(&mut ours, &schema, cipher(KEY).as_ref()).unwrap();
    assert_eq!(count, 3);
    let sealed = peer(
        "decrypt",
        json!({"key": KEY, "ciphertexts": [ours["matrix"][0][0], ours["matrix"][0][1], ours["matrix"][1][0]]}),
    )
    .await;
    assert_eq!(sealed["values"], json!(["a", "b", "c"]));
}

// ---------------------------------------------------------------------------------------------
// Protected jobs on the brokers

async fn python_protects_a_polyq_worker_unprotects(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    let sent = peer(
        "publish",
        json!({"url": broker.url(), "queue": bound.name(), "urn": URN, "schema": schema(),
               "key": KEY, "data": cleartext()}),
    )
    .await;
    assert!(sent["data"]["email"].is_string() && sent["data"]["email"] != cleartext()["email"]);
    let (handler, mut jobs) = recorder();
    let report = bound
        .queue
        .worker()
        .unprotect_payloads(provider(), cipher(KEY))
        .validate_payloads(provider())
        .handle(URN, handler)
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1, "{report:?}");
    let job = jobs.recv().await.unwrap();
    assert_eq!(job.data_as::<Value>().unwrap(), cleartext());
    assert_eq!(job.meta().unwrap().lang(), Some("python"));
}

async fn polyq_protects_a_python_worker_unprotects(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    let queue = bound
        .queue
        .clone()
        .validate_payloads(provider())
        .protect_payloads(provider(), cipher(KEY));
    let sent = queue.publish(URN, &cleartext()).await.unwrap();
    let on_wire: Value = sent.data_as().unwrap();
    assert_ne!(on_wire["email"], cleartext()["email"]);
    assert_eq!(on_wire["customer_id"], 1042);
    let answer = peer(
        "consume",
        json!({"url": broker.url(), "queue": bound.name(), "urn": URN, "schema": schema(),
               "key": KEY, "max": 1}),
    )
    .await;
    assert_eq!(answer["processed"], 1, "{answer}");
    let job = &answer["jobs"][0];
    assert_eq!(job["data"], cleartext());
    assert_eq!(
        job["received"], on_wire,
        "Python received the protected data"
    );
    assert_eq!(job["envelope"]["trace_id"], sent.trace_id().unwrap());
    assert_eq!(job["envelope"]["meta"]["schema_version"], 1);
}

/// A job sealed under a key the worker does not hold is retried, then dead-lettered with the
/// field and the reason, its body still sealed; the handler never runs.
async fn a_job_that_does_not_decrypt_is_retried_then_dead_lettered(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    let sent = peer(
        "publish",
        json!({"url": broker.url(), "queue": bound.name(), "urn": URN, "schema": schema(),
               "key": OTHER_KEY, "data": cleartext()}),
    )
    .await;
    let (handler, mut jobs) = recorder();
    let report = bound
        .queue
        .worker()
        .unprotect_payloads(provider(), cipher(KEY))
        .max_attempts(2)
        .handle(URN, handler)
        .consume(2, IDLE)
        .await
        .unwrap();
    assert_eq!((report.retried, report.dead_lettered), (1, 1), "{report:?}");
    assert!(jobs.try_recv().is_err(), "the handler never ran");
    let dlq = bound.transport().dead_letter_queue(bound.name());
    let dead = bound.take_and_ack(&dlq).await;
    let envelope = babelqueue::decode(&dead.body).unwrap().envelope;
    let block = envelope.dead_letter().unwrap();
    assert_eq!(
        block.reason.as_deref(),
        Some(DeadLetterReason::Failed.as_str())
    );
    assert_eq!(block.exception.as_deref(), Some("DecryptError"));
    let error = block.error.unwrap();
    assert!(
        error.contains(URN)
            && error.contains("cannot decrypt the protected field /addresses/0/line")
            && error.contains("no key opens it"),
        "{error}"
    );
    assert!(!error.contains("example.com"));
    assert_eq!(
        envelope.data_as::<Value>().unwrap(),
        sent["data"],
        "still sealed"
    );
}

/// A payload that breaks its URN's schema is retried, then dead-lettered with the violation.
async fn an_invalid_payload_is_retried_then_dead_lettered(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    peer(
        "publish",
        json!({"url": broker.url(), "queue": bound.name(), "urn": URN, "schema": {},
               "key": KEY, "data": {"customer_id": 0, "email": "x@y"}}),
    )
    .await;
    let (handler, mut jobs) = recorder();
    let report = bound
        .queue
        .worker()
        .validate_payloads(provider())
        .max_attempts(2)
        .handle(URN, handler)
        .consume(2, IDLE)
        .await
        .unwrap();
    assert_eq!((report.retried, report.dead_lettered), (1, 1), "{report:?}");
    assert!(jobs.try_recv().is_err(), "the handler never ran");
    let dlq = bound.transport().dead_letter_queue(bound.name());
    let dead = bound.take_and_ack(&dlq).await;
    let envelope = babelqueue::decode(&dead.body).unwrap().envelope;
    let block = envelope.dead_letter().unwrap();
    assert_eq!(block.exception.as_deref(), Some("InvalidPayloadError"));
    let error = block.error.unwrap();
    assert!(
        error.contains(URN) && error.contains("/customer_id: below_minimum"),
        "{error}"
    );
}

/// The producer's check refuses an invalid payload before the broker sees it.
async fn an_invalid_payload_is_refused_on_publish(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    let queue = bound.queue.clone().validate_payloads(provider());
    let error = queue
        .publish(URN, &json!({"customer_id": 7}))
        .await
        .unwrap_err();
    assert!(error.is_invalid_payload());
    let text = error.to_string();
    assert!(
        text.contains(URN) && text.contains("/email: missing_required"),
        "{text}"
    );
    assert_eq!(bound.depth(bound.name()).await, 0);
    queue.publish(URN, &cleartext()).await.unwrap();
    assert_eq!(bound.depth(bound.name()).await, 1);
}

polyq_testkit::both_brokers!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    on rabbitmq, redis;
    python_protects_a_polyq_worker_unprotects,
    polyq_protects_a_python_worker_unprotects,
    a_job_that_does_not_decrypt_is_retried_then_dead_lettered,
    an_invalid_payload_is_retried_then_dead_lettered,
    an_invalid_payload_is_refused_on_publish,
);
