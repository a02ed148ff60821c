//! The conformance suites: the vendored canonical suite (with its Redis section against the real
//! server, through polyq's Redis binding), the newer upstream sections, the runner's refusal to
//! skip what it does not know, lacks or cannot check, and the vendored copy's drift from
//! `shared/` (which CI must have).

use std::path::{Path, PathBuf};

use babelqueue::conformance::{self, CaseResult, Options, Summary};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(dir: &Path, options: &Options) -> (Summary, Vec<CaseResult>) {
    let mut cases = Vec::new();
    let summary = conformance::run(dir, options, &mut |case| cases.push(case.clone())).unwrap();
    (summary, cases)
}

fn failures(cases: &[CaseResult]) -> Vec<String> {
    cases
        .iter()
        .filter_map(|c| {
            c.outcome
                .as_ref()
                .err()
                .map(|why| format!("{}: {why}", c.name))
        })
        .collect()
}

/// The idempotency stores this build has, beside the in-memory seen-set every build runs: the SQL
/// ones come with the crate's `postgres` and `mysql` features, so that `cargo test -p babelqueue`
/// with the default features runs the suite over the stores it has instead of failing on the rest.
fn built_stores() -> Vec<&'static str> {
    let mut stores = vec!["memory-claiming", "redis", "redis-claiming"];
    if cfg!(feature = "postgres") {
        stores.extend(["postgres", "postgres-claiming"]);
    }
    if cfg!(feature = "mysql") {
        stores.push("mysql");
    }
    stores
}

#[test]
fn vendored_canonical_suite_passes_every_case() {
    let options = Options::default().redis_url(polyq_testkit::redis_url());
    #[cfg(feature = "postgres")]
    let options = options.postgres_url(polyq_testkit::postgres_url());
    #[cfg(feature = "mysql")]
    let options = options.mysql_url(polyq_testkit::mariadb_url());
    let (summary, cases) = run(&repo().join("fixtures/babelqueue/conformance"), &options);
    assert_eq!(failures(&cases), Vec::<String>::new());
    assert_eq!(summary.failed, 0);
    // 6 cases, 7 idempotency, 13 SQS, 7 ASB, 7 Pulsar, 6 Kafka, 7 Artemis, 1 Redis, 1 RabbitMQ,
    // 7 schema; then the 6 idempotency sequences again on each of the other stores built.
    let stores = built_stores();
    assert_eq!(summary.passed, 56 + 6 * stores.len());
    assert!(cases.iter().any(|c| c.name == "redis/payload_identity"));
    for store in stores {
        let name = format!("idempotency/{store}/duplicate-delivery-runs-once");
        assert!(cases.iter().any(|c| c.name == name), "{name}");
    }
}

#[test]
fn newer_upstream_sections_pass() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/suites/newer");
    let (summary, cases) = run(&dir, &Options::default());
    assert_eq!(failures(&cases), Vec::<String>::new());
    for section in [
        "roundtrip/",
        "data_shape/",
        "forbidden_keys/",
        "payload_schema_unicode/",
        "asb/schema_version_gate/",
        "artemis/schema_version_gate/",
    ] {
        assert!(
            cases.iter().any(|c| c.name.starts_with(section)),
            "{section}"
        );
    }
    // 4 string-gated brokers × 18 + ASB 24, roundtrip 4, data_shape 2, forbidden_keys 5, unicode 6.
    assert_eq!(summary.passed, 4 * 18 + 24 + 4 + 2 + 5 + 6);
}

fn scratch_suite(manifest: &serde_json::Value) -> PathBuf {
    let dir = std::env::temp_dir().join(polyq_testkit::unique_name("bq-suite"));
    std::fs::create_dir_all(dir.join("fixtures")).unwrap();
    std::fs::copy(
        repo().join("fixtures/babelqueue/conformance/fixtures/order-created.json"),
        dir.join("fixtures/order-created.json"),
    )
    .unwrap();
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    dir
}

#[test]
fn unknown_sections_and_wrong_expectations_fail() {
    let dir = scratch_suite(&serde_json::json!({
        "schema_version": 1,
        "message_ordering": {"cases": []},
        "kafka": {"exactly_once": {}},
        "cases": [{"name": "wrong-lang", "file": "fixtures/order-created.json", "valid": true,
                   "expect": {"urn": "urn:babel:orders:created", "lang": "go"}}],
        "pulsar": {"attempts_reconciliation": {"cases": [
            {"name": "off-by-one", "body_attempts": 0, "redelivery_count": 2, "expected_attempts": 1}]}},
        "redis": {"payload_identity": {"envelope_file": "fixtures/order-created.json"}}
    }));
    let (summary, cases) = run(&dir, &Options::default());
    std::fs::remove_dir_all(&dir).unwrap();
    let failed = failures(&cases);
    // The manifest has canonical sections, so the 13 canonical ones it lacks fail as well.
    let missing: Vec<&str> = failed
        .iter()
        .filter_map(|f| f.strip_suffix(MISSING))
        .collect();
    assert_eq!(
        missing,
        [
            "idempotency/dedup_key",
            "idempotency/sequences",
            "sqs/attribute_projection",
            "sqs/attempts_reconciliation",
            "asb/property_projection",
            "asb/attempts_reconciliation",
            "pulsar/property_projection",
            "kafka/property_projection",
            "kafka/attempts_reconciliation",
            "artemis/property_projection",
            "artemis/attempts_reconciliation",
            "rabbitmq/property_projection",
            "payload_schema",
        ]
    );
    assert_eq!(
        summary,
        Summary {
            passed: 0,
            failed: 5 + 13
        },
        "{failed:?}"
    );
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("message_ordering: unknown section"))
    );
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("kafka/exactly_once: unknown sub-section"))
    );
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("cases/wrong-lang: lang"))
    );
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("redis/payload_identity: no Redis URL"))
    );
}

/// How a missing mandatory section is reported, after its name.
const MISSING: &str = ": mandatory, and missing from the manifest: a suite with any section of \
                       its generation must have them all";

/// A copy of the newer suite in a scratch directory, its manifest changed by `edit`.
fn edited_newer_suite(
    edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
) -> PathBuf {
    let newer = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/suites/newer");
    let dir = std::env::temp_dir().join(polyq_testkit::unique_name("bq-suite"));
    std::fs::create_dir_all(dir.join("fixtures")).unwrap();
    for file in files_under(&newer.join("fixtures")) {
        std::fs::copy(
            newer.join("fixtures").join(&file),
            dir.join("fixtures").join(&file),
        )
        .unwrap();
    }
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(newer.join("manifest.json")).unwrap()).unwrap();
    edit(manifest.as_object_mut().unwrap());
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    dir
}

#[test]
fn a_missing_mandatory_section_fails() {
    let dir = edited_newer_suite(|manifest| {
        manifest.remove("forbidden_keys");
        manifest["kafka"]
            .as_object_mut()
            .unwrap()
            .remove("schema_version_gate");
    });
    let (summary, cases) = run(&dir, &Options::default());
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        failures(&cases),
        [
            format!("kafka/schema_version_gate{MISSING}"),
            format!("forbidden_keys{MISSING}"),
        ]
    );
    assert_eq!(summary.passed, 3 * 18 + 24 + 4 + 2 + 6);
}

#[test]
fn a_section_without_cases_fails() {
    let dir = edited_newer_suite(|manifest| {
        manifest["roundtrip"]["cases"] = serde_json::json!([]);
        manifest["asb"]["schema_version_gate"]["cases"] = serde_json::json!([]);
    });
    let (summary, cases) = run(&dir, &Options::default());
    std::fs::remove_dir_all(&dir).unwrap();
    let no_cases = ": the section has no cases: a suite section must check something";
    assert_eq!(
        failures(&cases),
        [
            format!("asb/schema_version_gate{no_cases}"),
            format!("roundtrip{no_cases}"),
        ]
    );
    assert_eq!(summary.passed, 4 * 18 + 2 + 5 + 6);
}

#[test]
fn a_missing_manifest_is_an_error_naming_the_file() {
    let missing = std::env::temp_dir().join(polyq_testkit::unique_name("bq-none"));
    let error = conformance::run(&missing, &Options::default(), &mut |_| {}).unwrap_err();
    assert!(error.to_string().contains("manifest.json"), "{error}");
}

fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn vendored_suite_has_not_drifted_from_shared() {
    // Skipped only where `../shared` is absent outside CI.
    polyq_testkit::assert_no_drift("babelqueue", &repo().join("fixtures/babelqueue"));
}
