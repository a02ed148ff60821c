//! A generic runner for the cross-SDK conformance suite (`manifest.json` + fixtures).
//!
//! Every section the manifest has is run, including the sections newer upstream suites add
//! (`roundtrip`, `data_shape`, `forbidden_keys`, `payload_schema_unicode`, the brokers'
//! `schema_version_gate`). A section or sub-section this runner does not know is reported as a
//! failed case, never skipped. So is a mandatory one the suite lacks, or one without cases: as
//! upstream runners do, a suite with any section of a generation (the canonical sections, or
//! the behaviour sections newer suites add) must have all of that generation's, each with at
//! least one case. The `redis` section goes through polyq's Redis binding to a real server.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::idempotency::{Effect, Idempotency, InMemoryClaimingStore, InMemoryStore, Refusal};
use crate::projection::{self, AsbValue, SchemaGate};
use crate::{DeadLetterInfo, Envelope, MakeOptions, Verdict};

/// Where the runner finds what it needs beyond the suite. Start from [`Options::default`]
/// (fields may be added, so the struct cannot be written out).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Options {
    /// Redis URL for the `redis` section (a case fails when it is missing or unreachable), and
    /// for running the `idempotency` sequences against the Redis stores too. Default: none.
    pub redis_url: Option<String>,
    /// PostgreSQL URL for running the `idempotency` sequences against the PostgreSQL stores too
    /// (each case on a table of its own, dropped afterwards). Default: none.
    pub postgres_url: Option<String>,
    /// MariaDB (or MySQL) URL for running the `idempotency` sequences against the MariaDB
    /// seen-set too (each case on a table of its own, dropped afterwards). Default: none.
    pub mysql_url: Option<String>,
}

impl Options {
    /// Sets the Redis URL of the `redis` section.
    pub fn redis_url(mut self, url: impl Into<String>) -> Self {
        self.redis_url = Some(url.into());
        self
    }

    /// Sets the PostgreSQL URL of the `idempotency` stores.
    pub fn postgres_url(mut self, url: impl Into<String>) -> Self {
        self.postgres_url = Some(url.into());
        self
    }

    /// Sets the MariaDB (or MySQL) URL of the `idempotency` stores.
    pub fn mysql_url(mut self, url: impl Into<String>) -> Self {
        self.mysql_url = Some(url.into());
        self
    }
}

/// The outcome of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseResult {
    /// `section/sub-section/case`.
    pub name: String,
    /// `Err` with what was wrong.
    pub outcome: std::result::Result<(), String>,
}

/// Totals of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed.
    pub failed: usize,
}

/// Runs the suite in `dir` (the directory holding `manifest.json`), calling `report` after each
/// case.
///
/// # Errors
/// [`Error::Suite`] when the manifest cannot be read or is not a JSON object.
///
/// ```
/// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/babelqueue/conformance");
/// let summary =
///     babelqueue::conformance::run(dir.as_ref(), &Default::default(), &mut |_| {}).unwrap();
/// assert!(summary.passed > 0);
/// ```
pub fn run(dir: &Path, options: &Options, report: &mut dyn FnMut(&CaseResult)) -> Result<Summary> {
    let manifest_path = dir.join("manifest.json");
    let manifest = read_json(&manifest_path)?;
    let Value::Object(manifest) = manifest else {
        return Err(suite_error(
            &manifest_path,
            "the manifest is not a JSON object",
        ));
    };
    let mut runner = Runner {
        dir: dir.to_path_buf(),
        options,
        report,
        summary: Summary::default(),
    };
    for missing in missing_mandatory(&manifest) {
        runner.record(
            missing,
            Err("mandatory, and missing from the manifest: \
                 a suite with any section of its generation must have them all"
                .to_owned()),
        );
    }
    for (section, body) in &manifest {
        match section.as_str() {
            "schema_version" | "description" | "$schema" => {}
            "cases" => runner.cases(body),
            "idempotency" => runner.idempotency(body),
            "sqs" | "asb" | "pulsar" | "kafka" | "artemis" | "rabbitmq" | "redis" => {
                runner.broker(section, body)
            }
            "payload_schema" | "payload_schema_unicode" => runner.payload_schema(section, body),
            "roundtrip" => runner.roundtrip(body),
            "data_shape" => runner.data_shape(body),
            "forbidden_keys" => runner.forbidden_keys(body),
            other => runner.record(
                other,
                Err("unknown section: this runner does not implement it".to_owned()),
            ),
        }
    }
    Ok(runner.summary)
}

/// The sections and sub-sections of the canonical suite (reference §5.3).
const CANONICAL_SECTIONS: &[&str] = &[
    "cases",
    "idempotency/dedup_key",
    "idempotency/sequences",
    "sqs/attribute_projection",
    "sqs/attempts_reconciliation",
    "asb/property_projection",
    "asb/attempts_reconciliation",
    "pulsar/property_projection",
    "pulsar/attempts_reconciliation",
    "kafka/property_projection",
    "kafka/attempts_reconciliation",
    "artemis/property_projection",
    "artemis/attempts_reconciliation",
    "redis/payload_identity",
    "rabbitmq/property_projection",
    "payload_schema",
];

/// The sections and sub-sections newer upstream suites add (reference §5.4).
const BEHAVIOUR_SECTIONS: &[&str] = &[
    "sqs/schema_version_gate",
    "asb/schema_version_gate",
    "pulsar/schema_version_gate",
    "kafka/schema_version_gate",
    "artemis/schema_version_gate",
    "roundtrip",
    "data_shape",
    "forbidden_keys",
    "payload_schema_unicode",
];

/// The mandatory sections (`section` or `section/sub-section`) the manifest lacks: all of a
/// generation's, once the manifest has any of them.
fn missing_mandatory(manifest: &Map<String, Value>) -> Vec<&'static str> {
    let has = |path: &str| match path.split_once('/') {
        Some((section, sub)) => manifest
            .get(section)
            .and_then(Value::as_object)
            .is_some_and(|subsections| subsections.contains_key(sub)),
        None => manifest.contains_key(path),
    };
    [CANONICAL_SECTIONS, BEHAVIOUR_SECTIONS]
        .into_iter()
        .filter(|generation| generation.iter().any(|path| has(path)))
        .flat_map(|generation| generation.iter().copied().filter(|path| !has(path)))
        .collect()
}

fn suite_error(path: &Path, message: impl Into<String>) -> Error {
    Error::Suite {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| suite_error(path, e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| suite_error(path, e.to_string()))
}

type Check = std::result::Result<(), String>;

/// Why a section with an empty case list fails: it would pass without checking anything.
const NO_CASES: &str = "the section has no cases: a suite section must check something";

fn ensure(condition: bool, message: impl FnOnce() -> String) -> Check {
    if condition { Ok(()) } else { Err(message()) }
}

fn field<'a>(value: &'a Value, key: &str) -> std::result::Result<&'a Value, String> {
    value
        .get(key)
        .ok_or_else(|| format!("the manifest entry has no {key:?}"))
}

fn str_field<'a>(value: &'a Value, key: &str) -> std::result::Result<&'a str, String> {
    field(value, key)?
        .as_str()
        .ok_or_else(|| format!("{key:?} is not a string"))
}

fn int_field(value: &Value, key: &str) -> std::result::Result<i64, String> {
    field(value, key)?
        .as_i64()
        .ok_or_else(|| format!("{key:?} is not an integer"))
}

fn case_list(body: &Value) -> std::result::Result<&Vec<Value>, String> {
    body.get("cases")
        .and_then(Value::as_array)
        .ok_or_else(|| "no \"cases\" array".to_owned())
}

fn case_name(case: &Value, index: usize) -> String {
    match case.get("name").and_then(Value::as_str) {
        Some(name) => name.to_owned(),
        None => match case.get("value") {
            Some(value) => format!("#{} {value}", index + 1),
            None if case.get("absent") == Some(&Value::Bool(true)) => {
                format!("#{} absent", index + 1)
            }
            None => format!("#{}", index + 1),
        },
    }
}

fn parse_raw(raw: &crate::RawJson) -> std::result::Result<Value, String> {
    serde_json::from_str(raw.as_str()).map_err(|e| e.to_string())
}

struct Runner<'a> {
    dir: PathBuf,
    options: &'a Options,
    report: &'a mut dyn FnMut(&CaseResult),
    summary: Summary,
}

impl Runner<'_> {
    fn record(&mut self, name: &str, outcome: Check) {
        match outcome {
            Ok(()) => self.summary.passed += 1,
            Err(_) => self.summary.failed += 1,
        }
        (self.report)(&CaseResult {
            name: name.to_owned(),
            outcome,
        });
    }

    fn each(
        &mut self,
        prefix: &str,
        body: &Value,
        mut check: impl FnMut(&mut Self, &Value) -> Check,
    ) {
        match case_list(body) {
            Ok(cases) if cases.is_empty() => self.record(prefix, Err(NO_CASES.to_owned())),
            Ok(cases) => {
                for (index, case) in cases.iter().enumerate() {
                    let outcome = check(self, case);
                    self.record(&format!("{prefix}/{}", case_name(case, index)), outcome);
                }
            }
            Err(message) => self.record(prefix, Err(message)),
        }
    }

    fn read_body(&self, file: &str) -> std::result::Result<Vec<u8>, String> {
        std::fs::read(self.dir.join(file)).map_err(|e| format!("cannot read {file}: {e}"))
    }

    fn fixture(&self, entry: &Value, key: &str) -> std::result::Result<Envelope, String> {
        let file = str_field(entry, key)?;
        match crate::classify(&self.read_body(file)?) {
            Verdict::Accepted(decoded) => Ok(decoded.envelope),
            Verdict::Rejected { reason, .. } => Err(format!("{file} is rejected ({reason})")),
            Verdict::Poison(cause) => Err(format!("{file} is poison ({cause})")),
        }
    }

    fn cases(&mut self, body: &Value) {
        let Some(cases) = body.as_array() else {
            return self.record("cases", Err("\"cases\" is not an array".to_owned()));
        };
        if cases.is_empty() {
            return self.record("cases", Err(NO_CASES.to_owned()));
        }
        for (index, case) in cases.iter().enumerate() {
            let outcome = self.envelope_case(case);
            self.record(&format!("cases/{}", case_name(case, index)), outcome);
        }
    }

    fn envelope_case(&self, case: &Value) -> Check {
        let file = str_field(case, "file")?;
        let verdict = crate::classify(&self.read_body(file)?);
        let valid = field(case, "valid")?
            .as_bool()
            .ok_or("\"valid\" is not a boolean")?;
        if !valid {
            return match verdict {
                Verdict::Accepted(_) => Err(format!("{file} was accepted; it must be rejected")),
                _ => Ok(()),
            };
        }
        let envelope = match verdict {
            Verdict::Accepted(decoded) => decoded.envelope,
            Verdict::Rejected { reason, .. } => return Err(format!("rejected: {reason}")),
            Verdict::Poison(cause) => return Err(format!("poison: {cause}")),
        };
        let expect = field(case, "expect")?;
        let meta = envelope.meta();
        for (key, expected) in expect.as_object().ok_or("\"expect\" is not an object")? {
            let actual = match key.as_str() {
                "urn" => envelope.urn().map(Value::from),
                "data" => envelope.data().map(parse_raw).transpose()?,
                "attempts" => envelope.attempts().map(Value::from),
                "lang" => meta.and_then(|m| m.lang()).map(Value::from),
                "schema_version" => meta.and_then(|m| m.schema_version()).map(Value::from),
                "dead_letter" => {
                    let block = envelope.dead_letter().unwrap_or_default();
                    return check_dead_letter(&block, expected);
                }
                other => return Err(format!("unknown expectation {other:?}")),
            };
            ensure(actual.as_ref() == Some(expected), || {
                format!("{key}: expected {expected}, got {actual:?}")
            })?;
        }
        Ok(())
    }

    fn idempotency(&mut self, body: &Value) {
        if let Some(key) = body.get("dedup_key") {
            let outcome = self.dedup_key(key);
            self.record("idempotency/dedup_key", outcome);
        }
        match body.get("sequences") {
            Some(sequences) => {
                for store in SequenceStore::each(self.options) {
                    let prefix = match store {
                        SequenceStore::Memory => "idempotency/sequences".to_owned(),
                        other => format!("idempotency/{}", other.label()),
                    };
                    let options = self.options;
                    self.each(&prefix, sequences, |_, case| {
                        idempotency_sequence(store, options, case)
                    });
                }
            }
            None => self.record("idempotency/sequences", Err("no \"sequences\"".to_owned())),
        }
        for key in body.as_object().into_iter().flat_map(Map::keys) {
            if !matches!(key.as_str(), "description" | "dedup_key" | "sequences") {
                self.record(
                    &format!("idempotency/{key}"),
                    Err("unknown sub-section".to_owned()),
                );
            }
        }
    }

    fn dedup_key(&self, key: &Value) -> Check {
        let envelope = self.fixture(key, "envelope_file")?;
        ensure(str_field(key, "key_field")? == "meta.id", || {
            "the dedupe key must be meta.id".to_owned()
        })?;
        let expected = str_field(key, "expected_key")?;
        let actual = envelope.meta().and_then(|m| m.id());
        ensure(actual == Some(expected), || {
            format!("expected {expected}, got {actual:?}")
        })
    }

    fn broker(&mut self, section: &str, body: &Value) {
        let Some(subsections) = body.as_object() else {
            return self.record(section, Err("the section is not an object".to_owned()));
        };
        for (sub, value) in subsections {
            let prefix = format!("{section}/{sub}");
            match sub.as_str() {
                "description" => {}
                "property_projection" | "attribute_projection" => {
                    let outcome = self.projection(section, value);
                    self.record(&prefix, outcome);
                }
                "attempts_reconciliation" => {
                    let section = section.to_owned();
                    self.each(&prefix, value, |_, case| reconciliation(&section, case));
                }
                "schema_version_gate" => {
                    let section = section.to_owned();
                    self.each(&prefix, value, |_, case| gate(&section, case));
                }
                "payload_identity" if section == "redis" => {
                    let outcome = self.redis_identity(value);
                    self.record(&prefix, outcome);
                }
                _ => self.record(
                    &prefix,
                    Err("unknown sub-section: this runner does not implement it".to_owned()),
                ),
            }
        }
    }

    fn projection(&self, section: &str, spec: &Value) -> Check {
        let envelope = self.fixture(spec, "envelope_file")?;
        match section {
            "sqs" => {
                let actual: Map<String, Value> = projection::sqs_attributes(&envelope)
                    .into_iter()
                    .map(|a| (a.name.to_owned(), serde_json::json!({"DataType": a.data_type, "StringValue": a.string_value})))
                    .collect();
                same_map(&actual, field(spec, "message_attributes")?)
            }
            "asb" => {
                let p = projection::asb_projection(&envelope);
                let message: Map<String, Value> = [
                    ("subject", p.subject.map(Value::from)),
                    ("correlation_id", p.correlation_id.map(Value::from)),
                    ("message_id", p.message_id.map(Value::from)),
                    ("content_type", Some(Value::from(p.content_type))),
                ]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
                .collect();
                same_map(&message, field(spec, "message")?)?;
                let properties: Map<String, Value> = p
                    .application_properties
                    .into_iter()
                    .map(|(name, value)| (name.to_owned(), asb_to_json(&value)))
                    .collect();
                same_map(&properties, field(spec, "application_properties")?)
            }
            "pulsar" => same_map(
                &string_map(projection::pulsar_properties(&envelope)),
                field(spec, "properties")?,
            ),
            "kafka" => {
                let headers = projection::kafka_headers(&envelope)
                    .into_iter()
                    .map(|(name, bytes)| (name, String::from_utf8_lossy(&bytes).into_owned()))
                    .collect();
                same_map(&string_map(headers), field(spec, "headers")?)
            }
            "artemis" => {
                let p = projection::artemis_projection(&envelope);
                let annotation = str_field(spec, "jms_type_annotation")?;
                ensure(p.jms_type_annotation == annotation, || {
                    format!("annotation {} ≠ {annotation}", p.jms_type_annotation)
                })?;
                let jms_type = str_field(spec, "jms_type")?;
                ensure(p.jms_type.as_deref() == Some(jms_type), || {
                    format!("jms_type {:?} ≠ {jms_type}", p.jms_type)
                })?;
                let correlation = str_field(spec, "correlation_id")?;
                ensure(p.correlation_id.as_deref() == Some(correlation), || {
                    format!("correlation-id {:?} ≠ {correlation}", p.correlation_id)
                })?;
                same_map(&string_map(p.properties), field(spec, "properties")?)
            }
            "rabbitmq" => rabbitmq_projection(&envelope, spec),
            other => Err(format!("no projection is defined for {other}")),
        }
    }

    fn redis_identity(&self, spec: &Value) -> Check {
        let file = str_field(spec, "envelope_file")?;
        let body = self.read_body(file)?;
        let url = self
            .options
            .redis_url
            .as_deref()
            .ok_or("no Redis URL was given (set POLYQ_REDIS_URL or --redis-url)")?;
        redis_round_trip(url, &body)
    }

    fn payload_schema(&mut self, section: &str, body: &Value) {
        let schema = body.get("schema").cloned().unwrap_or(Value::Null);
        self.each(section, body, |_, case| {
            let expected = field(case, "valid")?
                .as_bool()
                .ok_or("\"valid\" is not a boolean")?;
            let violation = crate::schema::validate_value(&schema, field(case, "data")?);
            ensure(violation.is_none() == expected, || match &violation {
                Some(v) => format!("expected valid, got {v}"),
                None => "expected a violation, got none".to_owned(),
            })
        });
    }

    fn roundtrip(&mut self, body: &Value) {
        self.each("roundtrip", body, |runner, case| {
            let mut envelope = runner.fixture(case, "file")?;
            envelope.set_attempts(envelope.attempts().unwrap_or(0) + 1);
            let out: Value = reencode(&envelope)?;
            let expected = int_field(case, "expect_attempts")?;
            ensure(out.get("attempts") == Some(&Value::from(expected)), || {
                format!("attempts {:?} ≠ {expected}", out.get("attempts"))
            })?;
            for (pointer, expected) in field(case, "expect_preserved")?
                .as_object()
                .ok_or("\"expect_preserved\" is not an object")?
            {
                let actual = out.pointer(pointer);
                ensure(actual == Some(expected), || {
                    format!("{pointer}: expected {expected}, got {actual:?}")
                })?;
            }
            Ok(())
        });
    }

    fn data_shape(&mut self, body: &Value) {
        self.each("data_shape", body, |runner, case| {
            match str_field(case, "mode")? {
                "encode" => {
                    let options = match case.get("queue").and_then(Value::as_str) {
                        Some(queue) => MakeOptions::new().queue(queue),
                        None => MakeOptions::new(),
                    };
                    let envelope =
                        crate::make(str_field(case, "urn")?, field(case, "data")?, options)
                            .map_err(|e| e.to_string())?;
                    envelope.encode().map_err(|e| e.to_string())?;
                    let emitted = envelope
                        .data()
                        .map(crate::RawJson::as_str)
                        .unwrap_or_default();
                    let expected =
                        crate::RawJson::from_json(str_field(case, "expect_encoded_data_json")?)
                            .map_err(|e| e.to_string())?;
                    ensure(emitted == expected.as_str(), || {
                        format!("data encoded as {emitted}, expected {expected}")
                    })
                }
                "decode" => {
                    let file = str_field(case, "file")?;
                    let accepted = matches!(
                        crate::classify(&runner.read_body(file)?),
                        Verdict::Accepted(_)
                    );
                    let valid = field(case, "valid")?
                        .as_bool()
                        .ok_or("\"valid\" is not a boolean")?;
                    ensure(accepted == valid, || {
                        format!("accepted = {accepted}, expected {valid}")
                    })
                }
                other => Err(format!("unknown mode {other:?}")),
            }
        });
    }

    fn forbidden_keys(&mut self, body: &Value) {
        self.each("forbidden_keys", body, |runner, case| {
            let file = str_field(case, "file")?;
            ensure(str_field(case, "expect")? == "warn", || {
                "only expect: warn is defined".to_owned()
            })?;
            let decoded = match crate::classify(&runner.read_body(file)?) {
                Verdict::Accepted(decoded) => decoded,
                other => return Err(format!("decode must succeed and accept: {other:?}")),
            };
            let key = str_field(case, "forbidden_key")?;
            ensure(decoded.warnings.iter().any(|w| w.pointer == key), || {
                format!("no warning names {key}: {:?}", decoded.warnings)
            })?;
            let out = reencode(&decoded.envelope)?;
            for pointer in field(case, "expect_absent_after_reencode")?
                .as_array()
                .ok_or("\"expect_absent_after_reencode\" is not an array")?
            {
                let pointer = pointer.as_str().ok_or("a pointer is not a string")?;
                ensure(out.pointer(pointer).is_none(), || {
                    format!("{pointer} is still present after re-encode")
                })?;
            }
            Ok(())
        });
    }
}

fn reencode(envelope: &Envelope) -> std::result::Result<Value, String> {
    let text = envelope.encode().map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("re-encoded body does not parse: {e}"))
}

fn check_dead_letter(block: &DeadLetterInfo, expected: &Value) -> Check {
    for (key, want) in expected
        .as_object()
        .ok_or("\"dead_letter\" is not an object")?
    {
        let actual = match key.as_str() {
            "reason" => block.reason.clone().map(Value::from),
            "original_queue" => block.original_queue.clone().map(Value::from),
            "error" => block.error.clone().map(Value::from),
            "exception" => block.exception.clone().map(Value::from),
            "lang" => block.lang.clone().map(Value::from),
            "attempts" => block.attempts.map(Value::from),
            "failed_at" => block.failed_at.map(Value::from),
            other => return Err(format!("unknown dead_letter expectation {other:?}")),
        };
        ensure(actual.as_ref() == Some(want), || {
            format!("dead_letter.{key}: expected {want}, got {actual:?}")
        })?;
    }
    Ok(())
}

/// A store the `idempotency` sequences run against: the in-memory ones always, the Redis,
/// PostgreSQL and MariaDB ones when the options name a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SequenceStore {
    Memory,
    MemoryClaiming,
    Redis,
    RedisClaiming,
    Postgres,
    PostgresClaiming,
    MySql,
}

impl SequenceStore {
    fn each(options: &Options) -> Vec<Self> {
        let mut stores = vec![Self::Memory, Self::MemoryClaiming];
        if options.redis_url.is_some() {
            stores.extend([Self::Redis, Self::RedisClaiming]);
        }
        if options.postgres_url.is_some() {
            stores.extend([Self::Postgres, Self::PostgresClaiming]);
        }
        if options.mysql_url.is_some() {
            stores.push(Self::MySql);
        }
        stores
    }

    fn label(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::MemoryClaiming => "memory-claiming",
            Self::Redis => "redis",
            Self::RedisClaiming => "redis-claiming",
            Self::Postgres => "postgres",
            Self::PostgresClaiming => "postgres-claiming",
            Self::MySql => "mysql",
        }
    }
}

/// Runs `future` to completion on a runtime of its own, on a thread of its own, so the
/// synchronous runner works inside and outside an async caller alike.
fn blocking<F: std::future::Future<Output = Check> + Send>(future: F) -> Check {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start a runtime: {e}"))?
                    .block_on(future)
            })
            .join()
            .unwrap_or_else(|_| Err("the sequence panicked".to_owned()))
    })
}

fn idempotency_sequence(store: SequenceStore, options: &Options, case: &Value) -> Check {
    let deliveries = field(case, "deliveries")?
        .as_array()
        .ok_or("\"deliveries\" is not an array")?;
    let expected = int_field(case, "expected_effects")?;
    blocking(async move {
        // A fresh namespace per case: the fixtures' ids are shared by every case and every run.
        let scope = uuid::Uuid::new_v4().simple().to_string();
        let opened = open_sequence_store(store, options, &scope).await?;
        let replayed = replay_sequence(&opened, deliveries, expected).await;
        let closed = opened.close(deliveries).await;
        replayed.and(closed)
    })
}

async fn replay_sequence(guard: &Opened, deliveries: &[Value], expected: i64) -> Check {
    let mut effects = 0_i64;
    for (step, delivery) in deliveries.iter().enumerate() {
        let id = str_field(delivery, "meta_id")?;
        if delivery.get("forget_before") == Some(&Value::Bool(true)) {
            guard.forget(id).await.map_err(|e| e.to_string())?;
        }
        let fails = delivery.get("outcome").and_then(Value::as_str) == Some("throw");
        let result = guard
            .option
            .run(Some(id), async {
                if fails { Err("handler threw") } else { Ok(()) }
            })
            .await;
        // A run is an effect whether the handler then succeeds or throws.
        let effect = match result {
            Ok(Effect::Ran(())) | Err(Refusal::Handler(_)) => "run",
            Ok(Effect::Skipped) => "skip",
            Err(Refusal::Store(e) | Refusal::InProgress(e)) => return Err(e.to_string()),
        };
        if effect == "run" {
            effects += 1;
        }
        let want = str_field(delivery, "expect_effect")?;
        ensure(effect == want, || {
            format!("delivery {}: {effect}, expected {want}", step + 1)
        })?;
    }
    ensure(effects == expected, || {
        format!("{effects} effects, expected {expected}")
    })
}

/// One opened store: the worker option over it, a way to forget an id, and what to clean up.
struct Opened {
    option: Idempotency,
    forget: std::sync::Arc<dyn crate::idempotency::IdempotencyStore>,
    /// Drops the case's table, for the stores that made one.
    drop_table: Option<DropTable>,
}

impl Opened {
    fn claiming<S: crate::idempotency::ClaimingStore + 'static>(store: S) -> Self {
        let store = std::sync::Arc::new(store);
        Self {
            option: Idempotency::claiming(store.clone()),
            forget: store,
            drop_table: None,
        }
    }

    fn seen_set<S: crate::idempotency::IdempotencyStore + 'static>(store: S) -> Self {
        let store = std::sync::Arc::new(store);
        Self {
            option: Idempotency::seen_set(store.clone()),
            forget: store,
            drop_table: None,
        }
    }

    async fn forget(&self, id: &str) -> Result<()> {
        self.forget.forget(id).await
    }

    /// Removes what the case left: its ids, or its table.
    async fn close(self, deliveries: &[Value]) -> Check {
        if let Some(drop_table) = self.drop_table {
            return drop_table().await;
        }
        for id in deliveries.iter().filter_map(|d| d.get("meta_id")?.as_str()) {
            self.forget(id).await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

async fn open_sequence_store(
    store: SequenceStore,
    options: &Options,
    scope: &str,
) -> std::result::Result<Opened, String> {
    Ok(match store {
        SequenceStore::Memory => Opened::seen_set(InMemoryStore::new()),
        SequenceStore::MemoryClaiming => Opened::claiming(InMemoryClaimingStore::new()),
        SequenceStore::Redis | SequenceStore::RedisClaiming => {
            open_redis(
                store,
                options.redis_url.as_deref().unwrap_or_default(),
                scope,
            )
            .await?
        }
        SequenceStore::Postgres | SequenceStore::PostgresClaiming => {
            open_postgres(
                store,
                options.postgres_url.as_deref().unwrap_or_default(),
                scope,
            )
            .await?
        }
        SequenceStore::MySql => {
            open_mysql(options.mysql_url.as_deref().unwrap_or_default(), scope).await?
        }
    })
}

/// Drops a case's table when called and awaited.
type DropTable = Box<dyn FnOnce() -> futures_util::future::BoxFuture<'static, Check> + Send + Sync>;

/// Drops `table` through `$pool` (of either database), as a [`DropTable`].
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! drop_table {
    ($pool:expr, $table:expr) => {{
        let (pool, table) = ($pool, $table);
        let drop_table: DropTable = Box::new(move || {
            Box::pin(async move {
                sqlx::raw_sql(&format!("DROP TABLE IF EXISTS {table}"))
                    .execute(&pool)
                    .await
                    .map(drop)
                    .map_err(|e| format!("cannot drop {table}: {e}"))
            })
        });
        drop_table
    }};
}

#[cfg(feature = "redis")]
async fn open_redis(
    store: SequenceStore,
    url: &str,
    scope: &str,
) -> std::result::Result<Opened, String> {
    use crate::idempotency::{RedisClaimingStore, RedisStore};
    let shown = polyq_amqp::redact_url(url);
    let fail = |e: Error| format!("Redis at {shown}: {}", polyq_amqp::error_chain(&e));
    Ok(if store == SequenceStore::Redis {
        let prefix = format!("{}conformance:{scope}:", RedisStore::DEFAULT_PREFIX);
        Opened::seen_set(
            RedisStore::connect(url)
                .await
                .map_err(fail)?
                .prefix(prefix)
                .map_err(fail)?,
        )
    } else {
        let prefix = format!("{}conformance:{scope}:", RedisClaimingStore::DEFAULT_PREFIX);
        let store = RedisClaimingStore::connect(url).await.map_err(fail)?;
        Opened::claiming(store.prefix(prefix).map_err(fail)?)
    })
}

#[cfg(not(feature = "redis"))]
async fn open_redis(_: SequenceStore, _: &str, _: &str) -> std::result::Result<Opened, String> {
    Err("this build has no Redis stores (feature `redis`)".to_owned())
}

#[cfg(feature = "postgres")]
async fn open_postgres(
    store: SequenceStore,
    url: &str,
    scope: &str,
) -> std::result::Result<Opened, String> {
    use crate::idempotency::{PostgresClaimingStore, PostgresStore};
    let shown = polyq_amqp::redact_url(url);
    let fail = |e: Error| format!("PostgreSQL at {shown}: {}", polyq_amqp::error_chain(&e));
    let pool = sqlx::PgPool::connect(url)
        .await
        .map_err(|e| format!("PostgreSQL at {shown}: {e}"))?;
    let table = format!("bq_idempotency_conformance_{scope}");
    let mut opened = if store == SequenceStore::Postgres {
        let store = PostgresStore::new(pool.clone())
            .table(&table)
            .map_err(fail)?;
        store.migrate().await.map_err(fail)?;
        Opened::seen_set(store)
    } else {
        let store = PostgresClaimingStore::new(pool.clone())
            .table(&table)
            .map_err(fail)?;
        store.migrate().await.map_err(fail)?;
        Opened::claiming(store)
    };
    opened.drop_table = Some(drop_table!(pool, table));
    Ok(opened)
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(_: SequenceStore, _: &str, _: &str) -> std::result::Result<Opened, String> {
    Err("this build has no PostgreSQL stores (feature `postgres`)".to_owned())
}

#[cfg(feature = "mysql")]
async fn open_mysql(url: &str, scope: &str) -> std::result::Result<Opened, String> {
    use crate::idempotency::MySqlStore;
    let shown = polyq_amqp::redact_url(url);
    let fail = |e: Error| format!("MariaDB at {shown}: {}", polyq_amqp::error_chain(&e));
    let pool = sqlx::MySqlPool::connect(url)
        .await
        .map_err(|e| format!("MariaDB at {shown}: {e}"))?;
    let table = format!("bq_idempotency_conformance_{scope}");
    let store = MySqlStore::new(pool.clone()).table(&table).map_err(fail)?;
    store.migrate().await.map_err(fail)?;
    let mut opened = Opened::seen_set(store);
    opened.drop_table = Some(drop_table!(pool, table));
    Ok(opened)
}

#[cfg(not(feature = "mysql"))]
async fn open_mysql(_: &str, _: &str) -> std::result::Result<Opened, String> {
    Err("this build has no MariaDB store (feature `mysql`)".to_owned())
}

fn optional_int(case: &Value, key: &str) -> std::result::Result<Option<i64>, String> {
    match case.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("{key:?} is not an integer")),
    }
}

fn reconciliation(section: &str, case: &Value) -> Check {
    let body = int_field(case, "body_attempts")?;
    let actual = match section {
        "sqs" => {
            let count = match case.get("approximate_receive_count") {
                None | Some(Value::Null) => None,
                Some(Value::String(text)) => Some(text.clone()),
                Some(other) => Some(other.to_string()),
            };
            projection::sqs_attempts(body, count.as_deref())
        }
        "asb" => projection::asb_attempts(body, optional_int(case, "delivery_count")?),
        "pulsar" => projection::pulsar_attempts(
            body,
            case.get("bq_attempts").and_then(Value::as_str),
            optional_int(case, "redelivery_count")?,
        ),
        "kafka" => {
            let header = match case.get("header_attempts") {
                None | Some(Value::Null) => None,
                Some(Value::String(text)) => Some(text.clone()),
                Some(other) => Some(other.to_string()),
            };
            projection::kafka_attempts(body, header.as_deref().map(str::as_bytes))
        }
        "artemis" => projection::artemis_attempts(body, optional_int(case, "delivery_count")?),
        other => return Err(format!("no attempts reconciliation is defined for {other}")),
    };
    let expected = int_field(case, "expected_attempts")?;
    ensure(actual == expected, || {
        format!("attempts {actual}, expected {expected}")
    })
}

fn gate(section: &str, case: &Value) -> Check {
    let expected = match str_field(case, "expect")? {
        "decode" => SchemaGate::Decode,
        "reject" => SchemaGate::Reject,
        other => return Err(format!("unknown verdict {other:?}")),
    };
    let absent = case.get("absent") == Some(&Value::Bool(true));
    let value = if absent {
        None
    } else {
        Some(field(case, "value")?)
    };
    let verdicts: Vec<(String, SchemaGate)> = if section == "asb" {
        asb_inputs(value, case.get("value_type").and_then(Value::as_str))?
            .into_iter()
            .map(|input| {
                (
                    format!("{input:?}"),
                    projection::asb_schema_version_gate(input.as_ref()),
                )
            })
            .collect()
    } else {
        let text = match value {
            None => None,
            Some(Value::String(text)) => Some(text.as_str()),
            Some(other) => {
                return Err(format!(
                    "{section} properties are strings; {other} cannot be sent"
                ));
            }
        };
        vec![(format!("{text:?}"), projection::schema_version_gate(text))]
    };
    for (input, verdict) in verdicts {
        ensure(verdict == expected, || {
            format!("{input}: {verdict:?}, expected {expected:?}")
        })?;
    }
    Ok(())
}

/// Every native value a JSON case stands for: integers at each AMQP width that holds them, a
/// `value_type: float` case as both float and double.
fn asb_inputs(
    value: Option<&Value>,
    value_type: Option<&str>,
) -> std::result::Result<Vec<Option<AsbValue>>, String> {
    let Some(value) = value else {
        return Ok(vec![None]);
    };
    Ok(match value {
        Value::Null => vec![Some(AsbValue::Null)],
        Value::String(text) => vec![Some(AsbValue::String(text.clone()))],
        Value::Number(n) if value_type == Some("float") => {
            let f = n.as_f64().ok_or("not a number")?;
            vec![Some(AsbValue::Float(f as f32)), Some(AsbValue::Double(f))]
        }
        Value::Number(n) => match n.as_i64() {
            Some(i) => {
                let mut inputs = vec![Some(AsbValue::Long(i))];
                if let Ok(v) = i32::try_from(i) {
                    inputs.push(Some(AsbValue::Int(v)));
                }
                if let Ok(v) = i16::try_from(i) {
                    inputs.push(Some(AsbValue::Short(v)));
                }
                if let Ok(v) = i8::try_from(i) {
                    inputs.push(Some(AsbValue::Byte(v)));
                }
                if let Ok(v) = u8::try_from(i) {
                    inputs.extend([
                        Some(AsbValue::UByte(v)),
                        Some(AsbValue::UShort(v.into())),
                        Some(AsbValue::UInt(v.into())),
                        Some(AsbValue::ULong(v.into())),
                    ]);
                }
                inputs
            }
            None => vec![Some(AsbValue::Double(n.as_f64().ok_or("not a number")?))],
        },
        Value::Bool(_) | Value::Array(_) | Value::Object(_) => vec![Some(AsbValue::Other)],
    })
}

fn asb_to_json(value: &AsbValue) -> Value {
    match value {
        AsbValue::Null => Value::Null,
        AsbValue::String(text) => Value::from(text.as_str()),
        AsbValue::Float(f) => Value::from(f64::from(*f)),
        AsbValue::Double(f) => Value::from(*f),
        other => match other.as_integer().and_then(|i| i64::try_from(i).ok()) {
            Some(i) => Value::from(i),
            None => Value::from(format!("{other:?}")),
        },
    }
}

fn string_map(pairs: Vec<(&'static str, String)>) -> Map<String, Value> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::from(v)))
        .collect()
}

fn same_map(actual: &Map<String, Value>, expected: &Value) -> Check {
    let expected = expected
        .as_object()
        .ok_or("the expected projection is not an object")?;
    for (key, want) in expected {
        let got = actual.get(key);
        ensure(got == Some(want), || {
            format!("{key}: expected {want}, got {got:?}")
        })?;
    }
    for key in actual.keys() {
        ensure(expected.contains_key(key), || {
            format!("unexpected extra {key}")
        })?;
    }
    Ok(())
}

fn rabbitmq_projection(envelope: &Envelope, spec: &Value) -> Check {
    let props = projection::rabbitmq_properties(envelope, &[]);
    for (key, want) in field(spec, "properties")?
        .as_object()
        .ok_or("\"properties\" is not an object")?
    {
        let got = match key.as_str() {
            "type" => props.kind.as_deref(),
            "correlation_id" => props.correlation_id.as_deref(),
            "message_id" => props.message_id.as_deref(),
            "app_id" => props.app_id.as_deref(),
            "content_type" => props.content_type.as_deref(),
            "content_encoding" => props.content_encoding.as_deref(),
            "reply_to" => props.reply_to.as_deref(),
            other => return Err(format!("unknown AMQP property {other:?}")),
        };
        ensure(got.map(Value::from).as_ref() == Some(want), || {
            format!("{key}: expected {want}, got {got:?}")
        })?;
    }
    let headers = field(spec, "headers")?
        .as_object()
        .ok_or("\"headers\" is not an object")?;
    for (name, want) in headers {
        let got = props.headers.get(name);
        let matches = match (want, got) {
            (Value::Number(n), Some(value)) => n.as_i64().is_some() && value.as_i64() == n.as_i64(),
            (Value::String(text), Some(value)) => value.as_str() == Some(text.as_str()),
            _ => false,
        };
        ensure(matches, || {
            format!("header {name}: expected {want} (native type), got {got:?}")
        })?;
    }
    for name in props.headers.keys() {
        ensure(headers.contains_key(name), || {
            format!("unexpected extra header {name}")
        })?;
    }
    Ok(())
}

/// Publishes `body` through polyq's Redis binding (default layout, no headers: the bare bytes
/// are `RPUSH`ed), reserves it back and acknowledges it: what is stored and what is reserved
/// must be the pushed bytes exactly.
#[cfg(feature = "redis")]
fn redis_round_trip(url: &str, body: &[u8]) -> Check {
    use std::time::Duration;

    use crate::transport::Transport as _;
    use crate::transport::redis::{RedisOptions, RedisTransport};

    const PATIENCE: Duration = Duration::from_secs(10);
    let shown = polyq_amqp::redact_url(url);
    let fail = |e: crate::Error| format!("Redis at {shown}: {e}");
    let queue = format!("polyq.conformance.{}", uuid::Uuid::new_v4().simple());
    let body = bytes::Bytes::copy_from_slice(body);
    let round_trip = async {
        let redis = RedisTransport::connect(url, RedisOptions::new())
            .await
            .map_err(fail)?;
        redis
            .publish(&queue, body.clone(), &[])
            .await
            .map_err(fail)?;
        let reserved = redis
            .reserve(&queue, PATIENCE)
            .await
            .map_err(fail)?
            .ok_or("the reserve returned nothing")?;
        let stored_as_pushed = reserved.receipt.stored() == &body;
        let reserved_as_pushed = reserved.body == body;
        // Acknowledged whatever came back, so that the case leaves nothing behind.
        redis.ack(&reserved.receipt).await.map_err(fail)?;
        ensure(stored_as_pushed, || {
            "the stored element differs from the pushed bytes".to_owned()
        })?;
        ensure(reserved_as_pushed, || {
            "the reserved element differs from the pushed bytes".to_owned()
        })?;
        let left = redis.depth(&queue).await.map_err(fail)?;
        ensure(left == 0, || {
            format!("{left} element(s) left in the queue after the ack")
        })
    };
    // The runner is synchronous and the binding async: a runtime of its own, on a thread of its
    // own, so that a caller already inside a runtime can run the suite too.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start a runtime for the Redis case: {e}"))?;
                runtime.block_on(async {
                    tokio::time::timeout(PATIENCE, round_trip)
                        .await
                        .unwrap_or_else(|_| {
                            Err(format!(
                                "Redis at {shown} did not answer within {PATIENCE:?}"
                            ))
                        })
                })
            })
            .join()
            .unwrap_or_else(|_| Err("the Redis case panicked".to_owned()))
    })
}

#[cfg(not(feature = "redis"))]
fn redis_round_trip(_url: &str, _body: &[u8]) -> Check {
    Err("this build has no Redis support (enable the babelqueue `redis` feature)".to_owned())
}
