//! `polyq babel schema` and the `--registry`, `--gdpr-key-file` and `--mask` flags of `babel
//! publish`, `consume`, `decode` and `dlq show`, run as the binary, the jobs on RabbitMQ and Redis.

use std::path::PathBuf;

use polyq_testkit::brokers::DeleteQueues;
use serde_json::{Value, json};

mod common;
use common::{command, failure, polyq, success_lines, with_input};

const URN: &str = "urn:babel:customers:registered";
const KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
/// The same key as [`KEY_HEX`], in base64.
const KEY_BASE64: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A registry directory with one URN, removed when dropped.
struct Registry(PathBuf);

impl Registry {
    fn new(schemas: &[(&str, Value)]) -> Self {
        let dir = std::env::temp_dir().join(polyq_testkit::unique_name("bq-registry"));
        std::fs::create_dir_all(dir.join("schemas")).unwrap();
        let mut entries = Vec::new();
        for (i, (urn, schema)) in schemas.iter().enumerate() {
            let file = format!("schemas/{i}.json");
            std::fs::write(dir.join(&file), schema.to_string()).unwrap();
            entries.push(json!({"urn": urn, "schema": file, "owner": "crm"}));
        }
        std::fs::write(
            dir.join("registry.json"),
            json!({"schemas": entries}).to_string(),
        )
        .unwrap();
        Self(dir)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn schema() -> Value {
    json!({"type": "object", "required": ["customer_id", "email"], "properties": {
        "customer_id": {"type": "integer", "minimum": 1},
        "email": {"type": "string", "minLength": 3, "x-gdpr-sensitive": "contact"},
        "profile": {"type": "object", "x-gdpr-sensitive": true, "properties": {
            "full_name": {"type": "string"}}},
        "phone": {"type": "string"},
    }})
}

fn run(args: &[&str]) -> Vec<String> {
    success_lines(polyq(args), args)
}

fn run_with(args: &[&str], stdin: &str) -> std::process::Output {
    with_input(command(args), stdin.as_bytes())
}

#[test]
fn schema_validate_names_the_urn_the_path_and_the_rule() {
    let registry = Registry::new(&[(URN, schema())]);
    let dir = registry.path();
    let valid = r#"{"customer_id": 7, "email": "a@b.c"}"#;
    let args = [
        "babel",
        "schema",
        "validate",
        "--registry",
        dir,
        "--urn",
        URN,
        "-",
    ];
    let output = run_with(&args, valid);
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("valid {URN}")
    );

    let output = run_with(&args, r#"{"customer_id": 7, "email": "ab"}"#);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("{URN} /email: below_min_length")
    );

    // A whole envelope carries its URN.
    let envelope = run(&[
        "babel",
        "make",
        "--urn",
        URN,
        "--data",
        r#"{"email": "a@b.c"}"#,
    ]);
    let output = run_with(
        &["babel", "schema", "validate", "--registry", dir],
        &envelope[0],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stdout).contains("/customer_id: missing_required"));

    let error = String::from_utf8(
        run_with(
            &["babel", "schema", "validate", "--registry", dir, "-"],
            valid,
        )
        .stderr,
    )
    .unwrap();
    assert!(error.contains("--urn"), "{error}");
    let error = String::from_utf8(
        run_with(
            &[
                "babel",
                "schema",
                "validate",
                "--registry",
                dir,
                "--urn",
                "urn:babel:x:y",
            ],
            valid,
        )
        .stderr,
    )
    .unwrap();
    assert!(
        error.contains("urn:babel:x:y: not in the registry"),
        "{error}"
    );
}

#[test]
fn schema_compat_gdpr_and_the_asyncapi_export() {
    let old = Registry::new(&[(URN, schema())]);
    let mut narrowed = schema();
    narrowed["required"] = json!(["customer_id", "email", "phone"]);
    narrowed["properties"]["customer_id"]["type"] = json!("string");
    let new = Registry::new(&[(URN, narrowed)]);
    let args = [
        "babel",
        "schema",
        "compat",
        "--registry",
        new.path(),
        "--against",
        old.path(),
    ];
    let output = polyq(&args);
    assert_eq!(output.status.code(), Some(1));
    let reasons = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        reasons.lines().collect::<Vec<_>>(),
        [
            format!("{URN} phone: required_added"),
            format!("{URN} customer_id: type_narrowed (integer -> string)"),
        ]
    );
    run(&[
        "babel",
        "schema",
        "compat",
        "--registry",
        old.path(),
        "--against",
        old.path(),
    ]);

    let inventory = run(&["babel", "schema", "gdpr", "--registry", old.path()]);
    assert_eq!(
        inventory,
        [format!("{URN} email contact"), format!("{URN} profile")]
    );
    let args = [
        "babel",
        "schema",
        "gdpr",
        "--registry",
        old.path(),
        "--require",
    ];
    let error = failure(&args);
    assert!(
        error.contains(&format!("{URN} phone: personal_data_unmarked")),
        "{error}"
    );

    let exported = run(&[
        "babel",
        "schema",
        "export-asyncapi",
        "--registry",
        old.path(),
    ]);
    let document: Value = serde_json::from_str(&exported.join("\n")).unwrap();
    assert_eq!(document["asyncapi"], "3.0.0");
    let channel = &document["channels"]["urn_babel_customers_registered"];
    assert_eq!(channel["address"], URN);
    let reference = channel["messages"]["urn_babel_customers_registered"]["$ref"]
        .as_str()
        .unwrap();
    let message = document.pointer(reference.trim_start_matches('#')).unwrap();
    assert_eq!(message["payload"]["properties"]["data"], schema());
    assert_eq!(message["x-owner"], "crm");
}

fn data_of(line: &str) -> Value {
    let printed: Value = serde_json::from_str(line).unwrap();
    let envelope: Value = serde_json::from_str(printed["envelope"].as_str().unwrap()).unwrap();
    envelope["data"].clone()
}

fn protected_jobs_round_trip(url: &str) {
    let registry = Registry::new(&[(URN, schema())]);
    let dir = registry.path();
    let hex_key = registry.file("current.key", &format!("{KEY_HEX}\n"));
    let base64_key = registry.file("same.key", KEY_BASE64);
    let retired = registry.file("retired.key", &"ab".repeat(16));
    let queue = polyq_testkit::unique_name("polyq.cli.gdpr");
    let dlq = format!("{queue}.dlq");
    let _queues = DeleteQueues::new(url, [queue.clone(), dlq.clone()]);
    let cleartext = json!({"customer_id": 1042, "email": "élodie@example.com",
        "profile": {"full_name": "Élodie Ünal"}, "phone": "n/a"});

    // An invalid payload never reaches the broker; the error names the URN, path and rule.
    let error = failure(&[
        "babel",
        "publish",
        "--url",
        url,
        "--queue",
        &queue,
        "--urn",
        URN,
        "--data",
        r#"{"customer_id": 0, "email": "a@b.c"}"#,
        "--registry",
        dir,
    ]);
    assert!(
        error.contains(URN) && error.contains("/customer_id: below_minimum"),
        "{error}"
    );

    let sent = run(&[
        "babel",
        "publish",
        "--url",
        url,
        "--queue",
        &queue,
        "--urn",
        URN,
        "--data",
        &cleartext.to_string(),
        "--registry",
        dir,
        "--gdpr-key-file",
        &hex_key,
        "--count",
        "3",
    ]);
    let on_wire: Value = serde_json::from_str(&sent[0]).unwrap();
    assert!(on_wire["data"]["email"].is_string() && on_wire["data"]["email"] != cleartext["email"]);
    assert!(on_wire["data"]["profile"].is_string());
    assert_eq!(on_wire["data"]["customer_id"], 1042);

    // Read back with the key in base64 beside a retired one.
    let consumed = run(&[
        "babel",
        "consume",
        "--url",
        url,
        "--queue",
        &queue,
        "--limit",
        "1",
        "--timeout",
        "5",
        "--registry",
        dir,
        "--gdpr-key-file",
        &retired,
        "--gdpr-key-file",
        &base64_key,
    ]);
    assert_eq!(data_of(&consumed[0]), cleartext);

    // Masked: decrypted, then each sensitive string cut to its first character.
    let masked = run(&[
        "babel",
        "consume",
        "--url",
        url,
        "--queue",
        &queue,
        "--limit",
        "1",
        "--timeout",
        "5",
        "--registry",
        dir,
        "--gdpr-key-file",
        &hex_key,
        "--mask",
    ]);
    let data = data_of(&masked[0]);
    assert_eq!(data["email"], "é***");
    assert_eq!(data["profile"], "***");
    assert_eq!(data["phone"], "n/a");

    // Without the key: the job still shows, sealed, with the reason it could not be read.
    let sealed = run(&[
        "babel",
        "consume",
        "--url",
        url,
        "--queue",
        &queue,
        "--limit",
        "1",
        "--timeout",
        "5",
        "--registry",
        dir,
        "--gdpr-key-file",
        &retired,
    ]);
    let printed: Value = serde_json::from_str(&sealed[0]).unwrap();
    let why = printed["schema_violation"].as_str().unwrap();
    assert!(
        why.contains(URN) && why.contains("cannot decrypt the protected field"),
        "{why}"
    );
    let third: Value = serde_json::from_str(&sent[2]).unwrap();
    assert_eq!(
        data_of(&sealed[0])["email"],
        third["data"]["email"],
        "shown as it came"
    );

    // decode takes the same flags.
    let output = run_with(
        &[
            "babel",
            "decode",
            "--registry",
            dir,
            "--gdpr-key-file",
            &hex_key,
            "--mask",
            "-",
        ],
        &sent[1],
    );
    let line = String::from_utf8(output.stdout).unwrap();
    assert_eq!(data_of(line.trim())["email"], "é***");

    // dlq show masks by default once it has the registry: both the decoded view and the body.
    let clear_body = run(&[
        "babel",
        "make",
        "--urn",
        URN,
        "--queue",
        &queue,
        "--data",
        &cleartext.to_string(),
    ]);
    run(&[
        "babel",
        "publish",
        "--url",
        url,
        "--queue",
        &dlq,
        "--urn",
        URN,
        "--data",
        &cleartext.to_string(),
    ]);
    assert!(clear_body[0].contains("élodie@example.com"));
    let shown = run(&[
        "dlq",
        "show",
        "--url",
        url,
        "--queue",
        &dlq,
        "--output",
        "json",
        "--registry",
        dir,
    ]);
    assert_eq!(shown.len(), 1);
    assert!(
        !shown[0].contains("élodie@example.com") && !shown[0].contains("Ünal"),
        "{}",
        shown[0]
    );
    assert!(shown[0].contains("é***"), "{}", shown[0]);
    let plain = run(&[
        "dlq", "show", "--url", url, "--queue", &dlq, "--output", "json",
    ]);
    assert!(plain[0].contains("élodie@example.com"));
}

#[test]
fn protected_jobs_on_rabbitmq() {
    protected_jobs_round_trip(&polyq_testkit::amqp_url());
}

#[test]
fn protected_jobs_on_redis() {
    protected_jobs_round_trip(&polyq_testkit::redis_url());
}
