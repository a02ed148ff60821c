//! `polyq acemq decode` and `polyq acemq encode`, run as the built binary.

use std::path::PathBuf;
use std::process::Output;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

mod common;
use common::{command, failure_stderr, with_input};

fn polyq(args: &[&str], stdin: &str) -> Output {
    with_input(command(args), stdin.as_bytes())
}

fn success(args: &[&str], stdin: &str) -> Value {
    let output = polyq(args, stdin);
    assert!(
        output.status.success(),
        "polyq {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON on stdout")
}

fn failure(args: &[&str], stdin: &str) -> String {
    failure_stderr(polyq(args, stdin), args)
}

/// A fixture case as the message JSON a `peek` would print.
fn fixture_message(case: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/acemq/envelope-fixtures.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let case = file["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["case"] == case)
        .unwrap();
    json!({
        "exchange": "",
        "routing_key": case["routingKey"],
        "properties": {"message_id": case["messageId"], "content_type": case["contentType"]},
        "headers": case["headers"],
        "body": case["body"],
    })
}

#[test]
fn decode_prints_the_envelope_a_handler_sees() {
    let decoded = success(
        &["acemq", "decode", "--now", "2026-01-02T03:05:05.678Z"],
        &fixture_message("populated").to_string(),
    );
    let expected_keys = [
        "id",
        "type",
        "version",
        "correlation_id",
        "causation_id",
        "attempt",
        "first_seen",
        "age_ms",
        "origin",
        "error",
        "claim",
        "route",
        "itinerary",
        "replayed_from",
        "replayed_at",
        "replay_count",
        "headers",
        "content_type",
        "payload",
        "payload_note",
    ];
    let mut keys: Vec<&str> = decoded
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    let mut expected = expected_keys.to_vec();
    expected.sort_unstable();
    assert_eq!(keys, expected);
    assert_eq!(decoded["id"], "11111111-2222-3333-4444-555555555555");
    assert_eq!(decoded["type"], "order.placed");
    assert_eq!(decoded["version"], 3);
    assert_eq!(decoded["correlation_id"], "corr-1");
    assert_eq!(decoded["causation_id"], "cause-1");
    assert_eq!(decoded["attempt"], 1);
    assert_eq!(decoded["first_seen"], 1_767_323_045_678_i64);
    assert_eq!(decoded["age_ms"], 60_000);
    assert_eq!(decoded["origin"], "orders@host-7");
    for absent in [
        "error",
        "claim",
        "route",
        "itinerary",
        "replayed_from",
        "replayed_at",
    ] {
        assert_eq!(decoded[absent], Value::Null, "{absent}");
    }
    assert_eq!(decoded["replay_count"], 0);
    assert_eq!(decoded["headers"], json!({"x-tenant": "acme"}));
    assert_eq!(decoded["content_type"], "application/json");
    // The fixture body is a JSON string literal holding JSON, as the Java generator sent it.
    assert_eq!(decoded["payload"], "{\"id\":\"o-2\"}");
}

#[test]
fn decode_reads_the_legacy_replay_stamp_from_a_file() {
    let dir = std::env::temp_dir().join(format!("polyq-acemq-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("replayed.json");
    std::fs::write(&file, fixture_message("replayed").to_string()).unwrap();
    let decoded = success(&["acemq", "decode", file.to_str().unwrap()], "");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(decoded["replayed_from"], "orders.new.dlq");
    assert_eq!(decoded["replayed_at"], "2026-02-03T04:05:06.789Z");
    assert_eq!(decoded["replay_count"], 2);
    assert_eq!(decoded["headers"]["acemq-replayed-from"], "orders.new.dlq");
}

#[test]
fn encode_applies_build_defaults_and_pinned_stamps() {
    let input = json!({"routing_key": "orders.new", "payload": {"id": "o-1"}}).to_string();
    let args = [
        "acemq",
        "encode",
        "--origin",
        "checkout@app-7",
        "--now",
        "1767323045678",
    ];
    let message = success(&args, &input);
    let headers = &message["headers"];
    let id = headers["x-acemq-id"].as_str().unwrap();
    assert_eq!(id.len(), 36);
    assert_eq!(message["properties"]["message_id"], id);
    assert_eq!(headers["x-acemq-correlation"], id);
    assert_eq!(headers["x-acemq-type"], "orders.new");
    assert_eq!(headers["x-acemq-version"], json!({"type": "I", "value": 1}));
    assert_eq!(headers["x-acemq-attempt"], json!({"type": "I", "value": 1}));
    assert_eq!(headers["x-acemq-first-seen"], 1_767_323_045_678_i64);
    assert_eq!(headers["x-acemq-origin"], "checkout@app-7");
    assert!(headers.get("x-acemq-causation").is_none());
    assert_eq!(message["properties"]["content_type"], "application/json");
    assert_eq!(message["properties"]["delivery_mode"], 2);
    assert_eq!(message["routing_key"], "orders.new");
    assert_eq!(message["body"], "{\"id\":\"o-1\"}");

    // With the id given too, the output is reproducible.
    let pinned = json!({"id": "m-1", "routing_key": "orders.new"}).to_string();
    assert_eq!(success(&args, &pinned), success(&args, &pinned));

    // An empty routing key (a fanout publish) types the message `message`.
    let fanout = success(&args, "{}");
    assert_eq!(fanout["headers"]["x-acemq-type"], "message");
}

#[test]
fn decode_of_encode_gives_back_the_fields() {
    let input = json!({
        "id": "m-1",
        "type": "order.placed",
        "version": 2,
        "correlation_id": "corr",
        "causation_id": "cause",
        "attempt": 3,
        "first_seen": "2026-01-02T03:04:05.678Z",
        "origin": "orders@host-7",
        "error": "exhausted 3 attempts: boom",
        "claim": "s3://payloads/o-1",
        "route": {"steps": ["validate", "charge"], "position": 1, "run_id": "run-1"},
        "itinerary": {"steps": [{"exchange": "billing", "routingKey": "invoice.send", "name": "send"}]},
        "replayed_from": "orders.new.dlq",
        "replayed_at": "2026-02-03T04:05:06.789+00:00",
        "replay_count": 1,
        "headers": {"x-tenant": "acme", "x-small": {"type": "b", "value": 1}},
        "content_type": "text/plain",
        "payload": "hello",
        "routing_key": "orders.new",
    });
    let message = success(&["acemq", "encode"], &input.to_string());
    assert_eq!(message["body"], "hello");
    let decoded = success(
        &["acemq", "decode", "--now", "2026-01-02T03:04:05.678Z"],
        &message.to_string(),
    );
    for key in [
        "id",
        "type",
        "version",
        "correlation_id",
        "causation_id",
        "attempt",
        "origin",
        "error",
        "claim",
        "route",
        "replayed_from",
        "replay_count",
        "content_type",
        "payload",
        "payload_note",
    ] {
        assert_eq!(decoded[key], input[key], "{key}");
    }
    assert_eq!(decoded["first_seen"], 1_767_323_045_678_i64);
    assert_eq!(decoded["age_ms"], 0);
    assert_eq!(decoded["replayed_at"], "2026-02-03T04:05:06.789Z");
    assert_eq!(decoded["itinerary"]["steps"], input["itinerary"]["steps"]);
    assert_eq!(decoded["itinerary"]["done"], json!([]));
    assert_eq!(
        decoded["headers"]["x-small"],
        json!({"type": "b", "value": 1})
    );
    assert_eq!(decoded["headers"]["x-tenant"], "acme");
}

#[test]
fn bad_input_names_the_field_and_fails() {
    for (args, input, fragment) in [
        (
            &["acemq", "encode"][..],
            r#"{"version": 0}"#,
            "field `version`",
        ),
        (
            &["acemq", "encode"],
            r#"{"attempt": "two"}"#,
            "field `attempt`",
        ),
        (
            &["acemq", "encode"],
            r#"{"colour": "red"}"#,
            "field `colour`",
        ),
        (
            &["acemq", "encode"],
            r#"{"headers": {"x-acemq-id": "mine"}}"#,
            "header 'x-acemq-id' is owned by AceMQ and is derived from the envelope, so it cannot be set directly",
        ),
        (
            &["acemq", "encode"],
            r#"{"first_seen": "yesterday"}"#,
            "field `first_seen`",
        ),
        (
            &["acemq", "encode"],
            r#"{"route": {"steps": ["a,b"]}}"#,
            "field `route`",
        ),
        (
            &["acemq", "encode"],
            r#"{"itinerary": {"steps": 3}}"#,
            "field `itinerary`",
        ),
        (
            &["acemq", "encode"],
            r#"{"content_type": "application/octet-stream", "payload": 3}"#,
            "field `payload`",
        ),
        (&["acemq", "encode"], "[", "not JSON"),
        (&["acemq", "encode", "--now", "soon"], "{}", "--now"),
        (
            &["acemq", "decode"],
            r#"{"properties": {"delivery_mode": "x"}}"#,
            "properties.delivery_mode",
        ),
        (
            &["acemq", "decode"],
            r#"{"properties": {"content_type": "application/json"}, "body": "{"}"#,
            "body: not valid JSON",
        ),
        (
            &["acemq", "decode"],
            r#"{"headers": {"acemq-routing-slip": "[]"}, "body": ""}"#,
            "headers.acemq-routing-slip",
        ),
    ] {
        let stderr = failure(args, input);
        assert!(stderr.contains(fragment), "{input}: {stderr}");
    }
}

/// The codec interop samples (Java and Go bodies of every format), as message JSON.
fn codec_samples() -> Vec<(String, Value)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/acemq/codec-interop-fixtures.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    file["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let message = json!({
                "routing_key": "orders",
                "properties": {"content_type": s["content_type"]},
                "body": {"base64": s["body_base64"]},
            });
            (s["format"].as_str().unwrap().to_owned(), message)
        })
        .collect()
}

#[test]
fn decode_shows_every_format_beside_what_reading_it_needs() {
    let decode = |message: &Value| {
        success(
            &["acemq", "decode", "--now", "2026-01-02T03:05:05.678Z"],
            &message.to_string(),
        )
    };
    let mut formats = Vec::new();
    for (format, message) in codec_samples() {
        let decoded = decode(&message);
        let raw = &message["body"]["base64"];
        let note = decoded["payload_note"].as_str().unwrap_or_default();
        match format.as_str() {
            "yaml" | "toml" | "xml" => {
                let text = decoded["payload"].as_str().expect("shown as text");
                assert!(text.contains("Ana Söderström"), "{format}: {text}");
                assert_eq!(decoded["payload_note"], Value::Null, "{format}");
            }
            "protobuf" => {
                assert_eq!(decoded["payload"]["base64"], *raw);
                assert!(note.contains("descriptor"), "{note}");
            }
            "avro" => {
                assert_eq!(decoded["payload"]["base64"], *raw);
                assert!(note.contains("writer's schema"), "{note}");
            }
            "avro-registered" => {
                assert_eq!(decoded["payload"]["base64"], *raw);
                assert!(note.starts_with("registered Avro, schema id 7:"), "{note}");
            }
            other => panic!("sample of format `{other}`: add how decode shows it"),
        }
        formats.push(format);
    }
    formats.sort();
    formats.dedup();
    assert_eq!(
        formats,
        ["avro", "avro-registered", "protobuf", "toml", "xml", "yaml"]
    );

    // An encrypted body: its key id, in clear in the framing, and the raw bytes.
    let mut sealed = vec![0xAE, 0x01, 8];
    sealed.extend_from_slice(b"orders-1");
    sealed.extend_from_slice(&[7; 12 + 16 + 5]);
    let encrypted = json!({
        "properties": {"content_type": "application/vnd.acemq.encrypted"},
        "body": {"base64": STANDARD.encode(&sealed)},
    });
    let decoded = decode(&encrypted);
    assert_eq!(decoded["payload"]["base64"], encrypted["body"]["base64"]);
    assert_eq!(
        decoded["payload_note"],
        "encrypted with key id `orders-1`: shown as raw bytes; reading it needs that key"
    );
}

/// The key file of the encrypted-body tests: `k-new` current, `k-old` kept for reading.
const KEY_FILE: &str = "# test keys\n\
    k-new = IiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiI=\n\
    k-old = hex:1111111111111111111111111111111111111111111111111111111111111111\n";

/// A message JSON whose body is `plaintext` encrypted with `k-old` of [`KEY_FILE`].
fn encrypted_message(plaintext: &[u8]) -> Value {
    let keys = acemq::codec::keyring::KeyRing::new("k-old", &[0x11; 32]).unwrap();
    let body = acemq::codec::encrypted::seal(&keys, plaintext).unwrap();
    let body = polyq_amqp::message_json::body_to_json(&body);
    json!({
        "exchange": "",
        "routing_key": "cards.stored",
        "properties": {"message_id": "m-9", "content_type": "application/vnd.acemq.encrypted"},
        "headers": {"x-acemq-id": "m-9"},
        "body": body,
    })
}

#[test]
fn decode_shows_an_encrypted_body_by_key_id_and_with_the_key_file_its_plaintext() {
    let dir = std::env::temp_dir().join(polyq_testkit::unique_name("polyq-acemq-cli-keys"));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("keys.txt");
    std::fs::write(&key_file, KEY_FILE).unwrap();
    let message = encrypted_message(br#"{"card":"4111"}"#).to_string();

    let without = success(&["acemq", "decode"], &message);
    assert_eq!(without["payload"], message_body(&message), "the raw bytes");
    assert_eq!(
        without["encrypted"],
        json!({"key_id": "k-old", "payload": null, "note": "no key ring given: the plaintext is not shown"})
    );
    let key_file = key_file.to_str().unwrap();
    let output = polyq(&["acemq", "decode", "--key-file", key_file], &message);
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    let with: Value = serde_json::from_str(&printed).expect("JSON on stdout");
    assert_eq!(
        with["encrypted"],
        json!({"key_id": "k-old", "payload": {"card": "4111"}, "note": null})
    );
    assert_eq!(
        with["payload"], without["payload"],
        "the raw bytes beside it"
    );
    for key in ["IiIiIiIi", "11111111", "\"\\u0011"] {
        assert!(!printed.contains(key), "a key was printed: {printed}");
    }

    // A key the file does not hold: the key id and why, never delivered as plaintext.
    std::fs::write(
        dir.join("other.txt"),
        "k-other = hex:".to_owned() + &"33".repeat(16),
    )
    .unwrap();
    let other = dir.join("other.txt");
    let unknown = success(
        &["acemq", "decode", "--key-file", other.to_str().unwrap()],
        &message,
    );
    assert_eq!(unknown["encrypted"]["payload"], Value::Null);
    assert!(
        unknown["encrypted"]["note"].as_str().unwrap().starts_with(
            "encrypted with key `k-old`, which is not in the key ring (it holds k-other)"
        ),
        "{unknown}"
    );

    // A key file that is not one is refused, naming the file and the entry, not the key.
    std::fs::write(dir.join("bad.txt"), "k-bad = c2VjcmV0\n").unwrap();
    let bad = dir.join("bad.txt");
    let error = failure(
        &["acemq", "decode", "--key-file", bad.to_str().unwrap()],
        &message,
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(error.contains("--key-file"), "{error}");
    assert!(error.contains("bad.txt, entry 1"), "{error}");
    assert!(
        error.contains("16, 24 or 32 bytes and this one is 6"),
        "{error}"
    );
    assert!(!error.contains("c2VjcmV0"), "{error}");
}

/// The `body` of a message JSON text.
fn message_body(message: &str) -> Value {
    serde_json::from_str::<Value>(message).unwrap()["body"].clone()
}
