//! `polyq babel schema`: the payload schema registry on the command line (after the registry's
//! own `bqschema` tool): validate a payload or an envelope, lint a registry change for breaking
//! changes, inventory the `x-gdpr-sensitive` marks, and export an AsyncAPI 3.0 catalogue.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use babelqueue::schema::{RegistryProvider, SchemaProvider as _, Step, protected_paths};
use clap::Subcommand;
use serde_json::{Map, Value, json};

use super::registry::open_registry;

/// `polyq babel schema` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Validate a payload (`data`) or a whole envelope against its URN's schema. Prints `valid`
    /// or each violation as `URN PATH: RULE`; exits 1 when invalid.
    Validate {
        /// The registry directory.
        #[arg(long, value_name = "DIR")]
        registry: PathBuf,
        /// The URN (an envelope's own URN otherwise; required for a bare payload).
        #[arg(long)]
        urn: Option<String>,
        /// The file to read; `-` or nothing reads standard input.
        file: Option<PathBuf>,
    },
    /// The breaking-change linter: exits 1 when a URN's schema in --registry would reject
    /// payloads its schema in --against accepted, or a URN was removed, printing each reason
    /// as `URN PATH: RULE`. Mint a new URN for a breaking change.
    Compat {
        /// The registry as changed.
        #[arg(long, value_name = "DIR")]
        registry: PathBuf,
        /// The registry as it was.
        #[arg(long, value_name = "OLD_DIR")]
        against: PathBuf,
    },
    /// The inventory of `x-gdpr-sensitive` paths per URN, one `URN PATH [CATEGORY]` line each.
    Gdpr {
        /// The registry directory.
        #[arg(long, value_name = "DIR")]
        registry: PathBuf,
        /// Exit 1 when a property whose name looks personal (email, phone, name, address,
        /// birth date, national id, IBAN, IP address, ...) is not marked, listing each.
        #[arg(long)]
        require: bool,
    },
    /// An AsyncAPI 3.0 document (JSON) of the registry's URNs: one channel, message and
    /// receive operation per URN, the message payload the envelope with its `data` schema.
    ExportAsyncapi {
        /// The registry directory.
        #[arg(long, value_name = "DIR")]
        registry: PathBuf,
    },
}

/// Runs one `polyq babel schema` command.
pub(crate) fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Validate {
            registry,
            urn,
            file,
        } => {
            let provider = open_registry(&registry)?;
            let input = super::read_input(file.as_ref())?;
            let (urn, data) = payload_of(&input, urn)?;
            let Some(schema) = provider.schema_for(&urn)? else {
                bail!(
                    "{urn}: not in the registry {} (add it to registry.json, or check --urn)",
                    registry.display()
                );
            };
            Ok(match babelqueue::schema::validate_value(&schema, &data) {
                None => {
                    println!("valid {urn}");
                    ExitCode::SUCCESS
                }
                Some(violation) => {
                    println!("{urn} {violation}");
                    ExitCode::FAILURE
                }
            })
        }
        Command::Compat { registry, against } => {
            let new = open_registry(&registry)?;
            let old = open_registry(&against)?;
            let reasons = compat(&old, &new)?;
            for reason in &reasons {
                println!("{reason}");
            }
            Ok(if reasons.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Gdpr { registry, require } => {
            let provider = open_registry(&registry)?;
            let mut unmarked = Vec::new();
            for entry in provider.entries() {
                let schema = schema_of(&provider, &entry.urn)?;
                for path in babelqueue::schema::sensitive_paths(&schema) {
                    match &path.category {
                        Some(category) => println!("{} {path} {category}", entry.urn),
                        None => println!("{} {path}", entry.urn),
                    }
                }
                if require {
                    unmarked.extend(
                        personal_unmarked(&schema)
                            .into_iter()
                            .map(|path| format!("{} {path}: personal_data_unmarked", entry.urn)),
                    );
                }
            }
            for line in &unmarked {
                eprintln!("{line}");
            }
            Ok(if unmarked.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::ExportAsyncapi { registry } => {
            let provider = open_registry(&registry)?;
            println!("{}", serde_json::to_string_pretty(&asyncapi(&provider)?)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The URN and `data` of `input`: an envelope (a `job` or `urn` member) gives both, `--urn`
/// overriding its URN; anything else is a bare payload and needs `--urn`.
fn payload_of(input: &[u8], urn: Option<String>) -> anyhow::Result<(String, Value)> {
    let value: Value = serde_json::from_slice(input).context("the input is not JSON")?;
    if value.get("job").is_some() || value.get("urn").is_some() {
        let decoded = babelqueue::decode(input).context("the input is not a readable envelope")?;
        let envelope = decoded.envelope;
        let urn = match urn {
            Some(urn) => urn,
            None => envelope
                .urn()
                .context("the envelope names no URN; give --urn")?
                .to_owned(),
        };
        return Ok((urn, envelope.data_as()?));
    }
    let urn = urn.context("a bare payload needs --urn (or give the whole envelope)")?;
    Ok((urn, value))
}

fn schema_of(provider: &RegistryProvider, urn: &str) -> anyhow::Result<Value> {
    let schema = provider.schema_for(urn)?;
    Ok(schema.map(|s| s.as_ref().clone()).unwrap_or(Value::Null))
}

/// Every reason `new` is not backward compatible with `old`, URN by URN.
fn compat(old: &RegistryProvider, new: &RegistryProvider) -> anyhow::Result<Vec<String>> {
    let mut reasons = Vec::new();
    let current: BTreeSet<&str> = new.entries().iter().map(|e| e.urn.as_str()).collect();
    for entry in old.entries() {
        if !current.contains(entry.urn.as_str()) {
            reasons.push(format!("{} <root>: urn_removed", entry.urn));
            continue;
        }
        let mut found = Vec::new();
        breaking(
            &schema_of(old, &entry.urn)?,
            &schema_of(new, &entry.urn)?,
            "",
            &mut found,
        );
        reasons.extend(
            found
                .into_iter()
                .map(|reason| format!("{} {reason}", entry.urn)),
        );
    }
    Ok(reasons)
}

fn at(path: &str) -> &str {
    if path.is_empty() { "<root>" } else { path }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn number(schema: &Map<String, Value>, key: &str) -> Option<f64> {
    schema.get(key).and_then(Value::as_f64)
}

/// The ways `new` rejects what `old` accepted, under the validator's subset of draft-07.
fn breaking(old: &Value, new: &Value, path: &str, out: &mut Vec<String>) {
    let empty = Map::new();
    let old = old.as_object().unwrap_or(&empty);
    let new = new.as_object().unwrap_or(&empty);
    let here = at(path);
    let (old_type, new_type) = (
        old.get("type").and_then(Value::as_str),
        new.get("type").and_then(Value::as_str),
    );
    if let Some(new_type) = new_type
        && old_type != Some(new_type)
        && !(old_type == Some("integer") && new_type == "number")
    {
        out.push(format!(
            "{here}: type_narrowed ({} -> {new_type})",
            old_type.unwrap_or("any")
        ));
    }
    if let Some(expected) = new.get("const")
        && old.get("const") != Some(expected)
    {
        out.push(format!("{here}: const_changed (now {expected})"));
    }
    if let Some(Value::Array(now)) = new.get("enum") {
        match old.get("enum") {
            Some(Value::Array(was)) => {
                for value in was.iter().filter(|v| !now.contains(v)) {
                    out.push(format!("{here}: enum_value_removed ({value})"));
                }
            }
            _ => out.push(format!("{here}: enum_added")),
        }
    }
    if let Some(min) = number(new, "minLength")
        && min.trunc() > number(old, "minLength").unwrap_or(0.0).trunc()
    {
        out.push(format!("{here}: min_length_raised (to {min})"));
    }
    if let Some(min) = number(new, "minimum")
        && number(old, "minimum").is_none_or(|was| min > was)
    {
        out.push(format!("{here}: minimum_raised (to {min})"));
    }
    let required = |schema: &Map<String, Value>| -> BTreeSet<String> {
        schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|k| k.as_str().map(str::to_owned))
            .collect()
    };
    let was_required = required(old);
    for key in required(new).difference(&was_required) {
        out.push(format!("{}: required_added", join(path, key)));
    }
    let closed = |schema: &Map<String, Value>| {
        schema.get("additionalProperties") == Some(&Value::Bool(false))
    };
    if closed(new) && !closed(old) {
        out.push(format!("{here}: additional_properties_closed"));
    }
    let old_properties = old.get("properties").and_then(Value::as_object);
    let new_properties = new.get("properties").and_then(Value::as_object);
    for (key, was) in old_properties.into_iter().flatten() {
        match new_properties.and_then(|p| p.get(key)) {
            Some(now) => breaking(was, now, &join(path, key), out),
            None if closed(new) => out.push(format!("{}: property_removed", join(path, key))),
            None => {}
        }
    }
    if let Some(now) = new.get("items").filter(|items| items.is_object()) {
        let was = old.get("items").cloned().unwrap_or(Value::Null);
        breaking(&was, now, &format!("{path}[]"), out);
    }
}

/// Property names that hold personal data when they are not marked: compared lower-cased with
/// `_`, `-` and spaces removed.
const PERSONAL: &[&str] = &[
    "email",
    "emailaddress",
    "phone",
    "phonenumber",
    "mobile",
    "name",
    "firstname",
    "lastname",
    "fullname",
    "surname",
    "givenname",
    "familyname",
    "address",
    "street",
    "addressline",
    "line",
    "postcode",
    "zipcode",
    "birthdate",
    "dateofbirth",
    "dob",
    "ssn",
    "nationalid",
    "taxid",
    "passport",
    "iban",
    "ip",
    "ipaddress",
];

/// The properties of `schema` whose names look personal and that no mark covers (neither their
/// own nor a marked container's).
fn personal_unmarked(schema: &Value) -> Vec<String> {
    let covered: Vec<Vec<Step>> = protected_paths(schema)
        .into_iter()
        .map(|p| p.steps)
        .collect();
    let mut found = Vec::new();
    walk_properties(schema, &mut Vec::new(), &mut |steps| {
        let Some(Step::Key(name)) = steps.last() else {
            return;
        };
        let normalised: String = name
            .chars()
            .filter(|c| !matches!(c, '_' | '-' | ' '))
            .flat_map(char::to_lowercase)
            .collect();
        let personal = PERSONAL.contains(&normalised.as_str())
            || normalised.contains("email")
            || normalised.contains("phone");
        if personal && !covered.iter().any(|c| steps.starts_with(c)) {
            let path = babelqueue::schema::SensitivePath {
                steps: steps.to_vec(),
                category: None,
            };
            found.push(path.to_string());
        }
    });
    found
}

fn walk_properties(schema: &Value, steps: &mut Vec<Step>, visit: &mut impl FnMut(&[Step])) {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            steps.push(Step::Key(name.clone()));
            visit(steps);
            walk_properties(property, steps, visit);
            steps.pop();
        }
    }
    if let Some(items) = schema.get("items") {
        steps.push(Step::Items);
        walk_properties(items, steps, visit);
        steps.pop();
    }
}

/// An identifier for a URN in AsyncAPI's maps: its letters and digits, `_` for the rest.
fn id_of(urn: &str) -> String {
    urn.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The AsyncAPI 3.0 document of the registry.
fn asyncapi(provider: &RegistryProvider) -> anyhow::Result<Value> {
    let mut channels = Map::new();
    let mut operations = Map::new();
    let mut messages = Map::new();
    for entry in provider.entries() {
        let id = id_of(&entry.urn);
        let data = schema_of(provider, &entry.urn)?;
        let mut message = json!({
            "name": entry.urn,
            "title": entry.urn,
            "contentType": "application/json",
            "payload": {
                "type": "object",
                "required": ["job", "trace_id", "data", "meta", "attempts"],
                "properties": {
                    "job": {"type": "string", "const": entry.urn},
                    "trace_id": {"type": "string"},
                    "data": data,
                    "meta": {"type": "object", "properties": {"schema_version": {"const": 1}}},
                    "attempts": {"type": "integer", "minimum": 0},
                },
            },
        });
        if let Some(owner) = &entry.owner {
            message["x-owner"] = json!(owner);
        }
        if let Some(status) = &entry.status {
            message["x-status"] = json!(status);
        }
        messages.insert(id.clone(), message);
        channels.insert(
            id.clone(),
            json!({
                "address": entry.urn,
                "messages": {id.clone(): {"$ref": format!("#/components/messages/{id}")}},
            }),
        );
        operations.insert(
            format!("receive_{id}"),
            json!({
                "action": "receive",
                "channel": {"$ref": format!("#/channels/{id}")},
                "messages": [{"$ref": format!("#/channels/{id}/messages/{id}")}],
            }),
        );
    }
    Ok(json!({
        "asyncapi": "3.0.0",
        "info": {
            "title": "BabelQueue registry",
            "version": "1.0.0",
            "description": format!("The URNs of {} and the schemas of their data.", provider.dir().display()),
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(schemas: &[(&str, Value)]) -> (tempdir::Dir, RegistryProvider) {
        let dir = tempdir::Dir::new();
        let mut entries = Vec::new();
        for (i, (urn, schema)) in schemas.iter().enumerate() {
            let file = format!("s{i}.json");
            std::fs::write(dir.path().join(&file), schema.to_string()).unwrap();
            entries
                .push(json!({"urn": urn, "schema": file, "owner": "team-a", "status": "active"}));
        }
        std::fs::write(
            dir.path().join("registry.json"),
            json!({"schemas": entries}).to_string(),
        )
        .unwrap();
        let provider = RegistryProvider::open(dir.path()).unwrap();
        (dir, provider)
    }

    mod tempdir {
        pub(super) struct Dir(std::path::PathBuf);
        impl Dir {
            pub(super) fn new() -> Self {
                let path = std::env::temp_dir()
                    .join(format!("polyq-schema-{}", uuid::Uuid::new_v4().simple()));
                std::fs::create_dir_all(&path).unwrap();
                Self(path)
            }
            pub(super) fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn compat_names_each_breaking_change_and_passes_the_compatible_ones() {
        let urn = "urn:babel:orders:created";
        let old = json!({"type": "object", "required": ["id"], "properties": {
            "id": {"type": "integer", "minimum": 1},
            "note": {"type": "string"},
            "state": {"enum": ["new", "paid"]},
            "lines": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
        }});
        let compatible = json!({"type": "object", "required": ["id"], "properties": {
            "id": {"type": "number", "minimum": 0, "x-gdpr-sensitive": true},
            "state": {"enum": ["new", "paid", "void"]},
            "lines": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
            "extra": {"type": "string"},
        }});
        let breaking_schema = json!({"type": "object", "required": ["id", "email"],
            "additionalProperties": false, "properties": {
            "id": {"type": "string"},
            "state": {"enum": ["new"]},
            "lines": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string", "minLength": 3}}}},
        }});
        let (_a, was) = registry(&[(urn, old), ("urn:babel:orders:gone", json!({}))]);
        let (_b, fine) = registry(&[(urn, compatible), ("urn:babel:orders:gone", json!({}))]);
        let (_c, broken) = registry(&[(urn, breaking_schema)]);
        assert_eq!(compat(&was, &fine).unwrap(), Vec::<String>::new());
        let reasons = compat(&was, &broken).unwrap();
        assert_eq!(
            reasons,
            [
                format!("{urn} email: required_added"),
                format!("{urn} <root>: additional_properties_closed"),
                format!("{urn} id: type_narrowed (integer -> string)"),
                format!("{urn} lines[].sku: min_length_raised (to 3)"),
                format!("{urn} note: property_removed"),
                format!("{urn} state: enum_value_removed (\"paid\")"),
                "urn:babel:orders:gone <root>: urn_removed".to_owned(),
            ]
        );
    }

    #[test]
    fn personal_looking_fields_must_be_marked_or_inside_a_marked_container() {
        let schema = json!({"properties": {
            "customer_email": {"type": "string"},
            "phone": {"type": "string", "x-gdpr-sensitive": true},
            "profile": {"x-gdpr-sensitive": true, "properties": {"firstName": {"type": "string"}}},
            "addresses": {"items": {"properties": {"Street": {}, "city": {}}}},
            "order_id": {"type": "integer"},
        }});
        assert_eq!(
            personal_unmarked(&schema),
            ["addresses[].Street", "customer_email"]
        );
    }

    #[test]
    fn the_asyncapi_export_parses_back_with_every_reference_resolved() {
        let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}}});
        let (_dir, provider) = registry(&[
            ("urn:babel:orders:created", schema.clone()),
            ("urn:babel:billing:invoice-sent", json!({"type": "object"})),
        ]);
        let text = serde_json::to_string_pretty(&asyncapi(&provider).unwrap()).unwrap();
        let document: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(document["asyncapi"], "3.0.0");
        let resolve = |reference: &Value| -> Value {
            let pointer = reference["$ref"].as_str().unwrap().trim_start_matches('#');
            document.pointer(pointer).cloned().unwrap_or(Value::Null)
        };
        let operations = document["operations"].as_object().unwrap();
        assert_eq!(operations.len(), 2);
        let mut addresses = Vec::new();
        for operation in operations.values() {
            assert_eq!(operation["action"], "receive");
            let channel = resolve(&operation["channel"]);
            addresses.push(channel["address"].as_str().unwrap().to_owned());
            let via_channel = resolve(&operation["messages"][0]);
            let message = resolve(&via_channel);
            assert_eq!(message["name"], channel["address"]);
            assert_eq!(message["x-owner"], "team-a");
            assert_eq!(
                message["payload"]["properties"]["job"]["const"],
                channel["address"]
            );
        }
        addresses.sort();
        assert_eq!(
            addresses,
            ["urn:babel:billing:invoice-sent", "urn:babel:orders:created"]
        );
        assert_eq!(
            document["components"]["messages"]["urn_babel_orders_created"]["payload"]["properties"]
                ["data"],
            schema
        );
    }
}
