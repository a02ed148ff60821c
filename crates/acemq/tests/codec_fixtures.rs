//! The codec interop fixtures (`fixtures/acemq/codec-interop-fixtures.json`): message bodies as
//! the Java and Go ports write them. Every YAML, TOML and XML sample decodes to its `expected`
//! value, and polyq's encoding of that value is what the ports read: byte for byte the XML both
//! write, the YAML Java writes and the TOML Go writes, and, decoded by a strict parser of
//! another language (Python's `tomllib`), the same value.
//!
//! Each format is a row of [`FORMATS`]; a sample of a format that has no row, and is not one of
//! [`CHECKED_ELSEWHERE`], fails the test rather than being passed over.

use acemq::codec::{Decode, Encode, Toml, Xml, Yaml};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

const FIXTURES: &str = include_str!("../../../fixtures/acemq/codec-interop-fixtures.json");

/// The fixtures' message, `totalCents` a number (YAML, TOML) or, in XML, text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OrderPlaced<N> {
    order_id: String,
    customer: String,
    total_cents: N,
    currency: String,
    items: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Sample {
    format: String,
    producer: String,
    content_type: String,
    body_base64: String,
    expected: Value,
}

impl Sample {
    fn body(&self) -> Bytes {
        Bytes::from(STANDARD.decode(&self.body_base64).expect("base64 body"))
    }

    fn name(&self) -> String {
        format!("{} from {}", self.format, self.producer)
    }
}

/// How one format is checked: `decode` reads a sample's body into the fixture's JSON value;
/// `encode` is polyq's body for an expected value; `identical_to` names the producers whose
/// bytes polyq's must equal.
struct FormatCheck {
    format: &'static str,
    content_type: &'static str,
    decode: fn(&Bytes) -> Value,
    encode: fn(&Value) -> Bytes,
    identical_to: &'static [&'static str],
}

/// The formats this crate writes and reads.
const FORMATS: &[FormatCheck] = &[
    FormatCheck {
        format: "yaml",
        content_type: "application/yaml",
        decode: |body| {
            // Typed (strict: every field, no other) and untyped readings agree.
            let typed: OrderPlaced<i64> = Yaml.decode(body).expect("YAML");
            let untyped: Value = Yaml.decode(body).expect("YAML");
            assert_eq!(serde_json::to_value(typed).unwrap(), untyped);
            untyped
        },
        encode: |expected| Yaml.encode(&order::<i64>(expected)).expect("YAML encodes"),
        // Jackson writes block sequences unindented, as libyaml does; Go indents them by four.
        identical_to: &["java"],
    },
    FormatCheck {
        format: "toml",
        content_type: "application/toml",
        decode: |body| {
            let typed: OrderPlaced<i64> = Toml.decode(body).expect("TOML");
            let untyped: Value = Toml.decode(body).expect("TOML");
            assert_eq!(serde_json::to_value(typed).unwrap(), untyped);
            untyped
        },
        encode: |expected| Toml.encode(&order::<i64>(expected)).expect("TOML encodes"),
        // Go writes basic ("...") strings, as toml-rs does; Jackson literal ('...') ones.
        identical_to: &["go"],
    },
    FormatCheck {
        format: "xml",
        content_type: "application/xml",
        decode: |body| {
            // XML has no numbers: text decodes into a number field as well as into a string.
            let text: OrderPlaced<String> = Xml::default().decode(body).expect("XML");
            let number: OrderPlaced<i64> = Xml::default().decode(body).expect("XML");
            assert_eq!(number.total_cents.to_string(), text.total_cents);
            serde_json::to_value(text).unwrap()
        },
        encode: |expected| {
            Xml::default()
                .encode(&order::<String>(expected))
                .expect("XML encodes")
        },
        identical_to: &["java", "go"],
    },
];

/// Formats of the fixtures whose codecs live elsewhere and are checked by their own tests.
const CHECKED_ELSEWHERE: &[&str] = &["protobuf", "avro", "avro-registered"];

fn order<N: serde::de::DeserializeOwned>(expected: &Value) -> OrderPlaced<N> {
    serde_json::from_value(expected.clone()).expect("the expected value is an OrderPlaced")
}

fn samples() -> Vec<Sample> {
    let fixtures: Value = serde_json::from_str(FIXTURES).expect("fixture JSON");
    serde_json::from_value(fixtures["samples"].clone()).expect("samples")
}

fn check_of(sample: &Sample) -> Option<&'static FormatCheck> {
    let check = FORMATS.iter().find(|c| c.format == sample.format);
    assert!(
        check.is_some() || CHECKED_ELSEWHERE.contains(&sample.format.as_str()),
        "sample {}: format `{}` has no check here; add a row to FORMATS",
        sample.name(),
        sample.format
    );
    check
}

#[test]
fn every_sample_decodes_to_its_expected_value() {
    let mut checked = 0;
    for sample in samples() {
        let Some(check) = check_of(&sample) else {
            continue;
        };
        assert_eq!(sample.content_type, check.content_type, "{}", sample.name());
        assert_eq!(
            (check.decode)(&sample.body()),
            sample.expected,
            "{}",
            sample.name()
        );
        checked += 1;
    }
    // Java and Go, for each format.
    assert_eq!(checked, 2 * FORMATS.len());
}

#[test]
fn polyq_writes_what_the_ports_read() {
    for sample in samples() {
        let Some(check) = check_of(&sample) else {
            continue;
        };
        let ours = (check.encode)(&sample.expected);
        assert_eq!(
            (check.decode)(&ours),
            sample.expected,
            "polyq's {} reads back",
            sample.format
        );
        if check.identical_to.contains(&sample.producer.as_str()) {
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&sample.body()),
                "polyq's {} is byte for byte what {} writes",
                sample.format,
                sample.producer
            );
        } else {
            assert_ne!(
                ours,
                sample.body(),
                "{}: the layout differences the fixtures describe",
                sample.name()
            );
        }
    }
}

#[test]
fn a_sample_of_an_unknown_format_fails_the_test() {
    let sample = Sample {
        format: "cbor".into(),
        producer: "java".into(),
        content_type: "application/cbor".into(),
        body_base64: String::new(),
        expected: Value::Null,
    };
    let refused = std::panic::catch_unwind(|| check_of(&sample).map(|c| c.format));
    let message = refused.expect_err("an unknown format is not passed over");
    let message = message.downcast_ref::<String>().expect("a message");
    assert!(
        message.contains("format `cbor` has no check here"),
        "{message}"
    );
}

fn python() -> String {
    std::env::var("POLYQ_PYTHON").unwrap_or_else(|_| {
        panic!(
            "POLYQ_PYTHON is not set: run scripts/test (which sets it), or scripts/python-peer and \
             export POLYQ_PYTHON=$PWD/.venv/bin/python"
        )
    })
}

/// polyq's TOML read by Python's `tomllib`, a strict TOML 1.0 parser of another language: the
/// same value as the fixtures expect.
#[test]
fn a_strict_parser_of_another_language_reads_polyqs_toml() {
    let toml = FORMATS.iter().find(|c| c.format == "toml").unwrap();
    let sample = samples()
        .into_iter()
        .find(|s| s.format == "toml")
        .expect("a TOML sample");
    let ours = (toml.encode)(&sample.expected);
    let output = std::process::Command::new(python())
        .args([
            "-c",
            "import json, sys, tomllib; print(json.dumps(tomllib.loads(sys.stdin.read())))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().expect("stdin").write_all(&ours)?;
            child.wait_with_output()
        })
        .expect("run python");
    assert!(
        output.status.success(),
        "tomllib refused polyq's TOML: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read: Value = serde_json::from_slice(&output.stdout).expect("JSON from python");
    assert_eq!(read, sample.expected);
}
