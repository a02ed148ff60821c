//! `polyq babel decode`, `make` and `conformance`, run as the binary.

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

mod common;
use common::{command, with_input};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn polyq(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut polyq = command(args);
    polyq
        .current_dir(repo())
        .env("POLYQ_REDIS_URL", polyq_testkit::redis_url());
    with_input(polyq, stdin.unwrap_or_default())
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn decode_json(args: &[&str], stdin: Option<&[u8]>) -> Value {
    let output = polyq(args, stdin);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 1, "one JSON line: {text}");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn conformance_runs_the_vendored_suite_and_ends_with_the_totals() {
    let output = polyq(
        &["babel", "conformance", "fixtures/babelqueue/conformance"],
        None,
    );
    let text = stdout(&output);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        *lines.last().unwrap(),
        format!("{} passed, 0 failed", lines.len() - 1)
    );
    assert!(lines.contains(&"ok   redis/payload_identity"), "{text}");
    assert!(lines.len() > 50);
}

#[test]
fn conformance_fails_on_an_unknown_section() {
    let dir = std::env::temp_dir().join(polyq_testkit::unique_name("bq-cli-suite"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("manifest.json"),
        r#"{"schema_version":1,"telepathy":{"cases":[]}}"#,
    )
    .unwrap();
    let output = polyq(&["babel", "conformance", dir.to_str().unwrap()], None);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!output.status.success());
    let text = stdout(&output);
    assert!(
        text.starts_with("FAIL telepathy: unknown section"),
        "{text}"
    );
    assert_eq!(text.lines().last(), Some("0 passed, 1 failed"));
}

#[test]
fn decode_reports_verdict_warnings_and_the_canonical_envelope() {
    let report = decode_json(
        &[
            "babel",
            "decode",
            "fixtures/babelqueue/conformance/fixtures/urn-alias.json",
        ],
        None,
    );
    assert_eq!(report["accepts"], true);
    assert_eq!(report["reason"], Value::Null);
    assert_eq!(report["urn"], "urn:babel:orders:created");
    assert_eq!(report["poison"], false);
    let envelope = report["envelope"].as_str().unwrap();
    assert!(
        envelope.starts_with(r#"{"job":"urn:babel:orders:created","trace_id":"#),
        "{envelope}"
    );
    assert!(!envelope.contains("\"urn\""));

    let body = br#"{"job":7,"urn":"urn:babel:a:b","meta":{"schema_version":2,"ts":1},"data":{},"trace_id":"t","attempts":0}"#;
    let report = decode_json(&["babel", "decode", "-"], Some(body));
    assert_eq!(report["accepts"], false);
    assert_eq!(report["reason"], "unsupported_schema_version");
    let pointers: Vec<&str> = report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(pointers, ["/meta/ts", "/job"]);
}

#[test]
fn decode_classifies_poison_and_reads_message_shapes_and_frames() {
    let report = decode_json(&["babel", "decode"], Some(b"{\"job\":\"u\",\"data\":[1]}"));
    assert_eq!(report["poison"], true);
    assert_eq!(report["accepts"], false);
    assert!(report["poison_cause"].as_str().unwrap().contains("/data"));

    let body = r#"{"job":"urn:babel:a:b","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}"#;
    let message = serde_json::json!({"exchange": "", "routing_key": "orders", "properties": {"content_type": "application/json"}, "headers": {}, "body": body});
    let report = decode_json(&["babel", "decode"], Some(message.to_string().as_bytes()));
    assert_eq!(report["accepts"], true);
    assert_eq!(report["envelope"], body);

    let frame = babelqueue::projection::frame(body, &[("traceparent", "00-abc")]).into_owned();
    let report = decode_json(&["babel", "decode"], Some(frame.as_bytes()));
    assert_eq!(report["accepts"], true);
    assert_eq!(report["headers"]["traceparent"], "00-abc");
}

#[test]
fn make_prints_a_canonical_body_and_refuses_a_blank_urn() {
    let output = polyq(
        &[
            "babel",
            "make",
            "--urn",
            " urn:babel:orders:created ",
            "--queue",
            "orders",
            "--data",
            r#"{"z":1.50,"a":"é/"}"#,
            "--trace-id",
            "trace-xyz",
            "--meta",
            r#"{"ext":{"acme":1}}"#,
        ],
        None,
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let body = stdout(&output);
    let body = body.trim_end();
    assert!(body.starts_with(r#"{"job":"urn:babel:orders:created","trace_id":"trace-xyz","data":{"z":1.50,"a":"é/"},"meta":{"id":""#), "{body}");
    assert!(body.contains(r#""queue":"orders","lang":"rust","schema_version":1,"created_at":"#));
    assert!(
        body.ends_with(r#","ext":{"acme":1}},"attempts":0}"#),
        "{body}"
    );
    let report = decode_json(&["babel", "decode"], Some(body.as_bytes()));
    assert_eq!(report["accepts"], true);
    assert_eq!(report["envelope"], body);

    let output = polyq(&["babel", "make", "--urn", " \t"], None);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("non-empty URN"));
    let output = polyq(
        &["babel", "make", "--urn", "u", "--meta", r#"{"ts":1}"#],
        None,
    );
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("/meta/ts"));
}
