//! Optional per-URN validation of `data` against a JSON Schema: the dependency-free draft-07
//! subset every BabelQueue SDK implements (`type`, `required`, `properties`,
//! `additionalProperties` (boolean), `items`, `enum`, `const`, `minLength` in Unicode code points,
//! `minimum`). Unknown keywords are ignored, so every SDK reaches the same verdict.
//!
//! The same schemas carry the `x-gdpr-sensitive` marks of ADR-0030: [`sensitive_paths`] is the
//! inventory of marked properties, [`protected_paths`] the ones field encryption acts on, and
//! [`mask`] the one-way masking an operator's view applies to them. Everything here is pure: no
//! I/O except [`RegistryProvider`] reading its directory.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::codec::envelope::pointer;
use crate::error::{Error, Result};

/// The first place where a value breaks its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// RFC 6901 pointer into `data` (`""` is the root).
    pub pointer: String,
    /// The reason code shared with the other SDKs (`missing_required`, `below_min_length`, …).
    pub reason: &'static str,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "<root>"
        } else {
            &self.pointer
        };
        write!(f, "{at}: {}", self.reason)
    }
}

/// The first violation of `value` against `schema`, or `None` when it is valid.
///
/// ```
/// use serde_json::json;
///
/// let schema = json!({
///     "type": "object",
///     "properties": {"name": {"type": "string", "minLength": 3}}
/// });
/// assert!(babelqueue::schema::validate_value(&schema, &json!({"name": "ğüş"})).is_none());
/// let violation = babelqueue::schema::validate_value(&schema, &json!({"name": "😀a"})).unwrap();
/// assert_eq!(violation.to_string(), "/name: below_min_length");
/// ```
pub fn validate_value(schema: &Value, value: &Value) -> Option<Violation> {
    let mut path = Vec::new();
    check(schema, value, &mut path)
}

fn violation(path: &[String], reason: &'static str) -> Option<Violation> {
    let segments: Vec<&str> = path.iter().map(String::as_str).collect();
    Some(Violation {
        pointer: pointer(&segments),
        reason,
    })
}

fn strict_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let integral = |n: &serde_json::Number| n.is_i64() || n.is_u64();
            integral(x) == integral(y) && a == b
        }
        _ => a == b,
    }
}

fn check(schema: &Value, value: &Value, path: &mut Vec<String>) -> Option<Violation> {
    let Value::Object(schema) = schema else {
        return None;
    };
    if let Some(expected) = schema.get("const")
        && !strict_equal(value, expected)
    {
        return violation(path, "wrong_const");
    }
    if let Some(Value::Array(options)) = schema.get("enum")
        && !options.iter().any(|option| strict_equal(value, option))
    {
        return violation(path, "not_in_enum");
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => check_object(schema, value, path),
        Some("array") => {
            let Value::Array(items) = value else {
                return violation(path, "not_an_array");
            };
            let item_schema = schema.get("items").filter(|s| s.is_object())?;
            for (i, item) in items.iter().enumerate() {
                path.push(i.to_string());
                let found = check(item_schema, item, path);
                path.pop();
                if found.is_some() {
                    return found;
                }
            }
            None
        }
        Some("string") => {
            let Value::String(text) = value else {
                return violation(path, "not_a_string");
            };
            let min = schema.get("minLength").and_then(Value::as_f64);
            if min.is_some_and(|min| (text.chars().count() as f64) < min.trunc()) {
                return violation(path, "below_min_length");
            }
            None
        }
        Some("integer") => match value {
            Value::Number(n)
                if n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) =>
            {
                check_minimum(schema, n, path)
            }
            _ => violation(path, "not_an_integer"),
        },
        Some("number") => match value {
            Value::Number(n) => check_minimum(schema, n, path),
            _ => violation(path, "not_a_number"),
        },
        Some("boolean") if !value.is_boolean() => violation(path, "not_a_boolean"),
        Some("null") if !value.is_null() => violation(path, "not_null"),
        _ => None,
    }
}

fn check_minimum(
    schema: &serde_json::Map<String, Value>,
    n: &serde_json::Number,
    path: &[String],
) -> Option<Violation> {
    let minimum = schema.get("minimum").and_then(Value::as_f64)?;
    if n.as_f64().is_some_and(|v| v < minimum) {
        return violation(path, "below_minimum");
    }
    None
}

fn check_object(
    schema: &serde_json::Map<String, Value>,
    value: &Value,
    path: &mut Vec<String>,
) -> Option<Violation> {
    let Value::Object(map) = value else {
        return violation(path, "not_an_object");
    };
    if let Some(Value::Array(required)) = schema.get("required") {
        for key in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(key) {
                path.push(key.to_owned());
                return violation(path, "missing_required");
            }
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional_allowed = schema.get("additionalProperties") != Some(&Value::Bool(false));
    for (key, item) in map {
        path.push(key.clone());
        let found = match properties
            .and_then(|p| p.get(key))
            .filter(|s| s.is_object())
        {
            Some(property) => check(property, item, path),
            None if !additional_allowed => violation(path, "additional_not_allowed"),
            None => None,
        };
        path.pop();
        if found.is_some() {
            return found;
        }
    }
    None
}

/// One step of a [`SensitivePath`]: a property of an object, or every item of an array.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    /// The property of that name (which may itself contain a dot).
    Key(String),
    /// Every item of an array.
    Items,
}

/// A property a schema marks `x-gdpr-sensitive`, located from the `data` root.
///
/// It is kept as steps rather than as text, so a property whose name contains a dot stays one
/// property; [`Display`](fmt::Display) writes the registry's notation (`email`,
/// `profile.full_name`, `addresses[].line`; `""` for the root).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SensitivePath {
    /// The steps from the `data` root (empty for a mark on the root schema).
    pub steps: Vec<Step>,
    /// The category of a `"x-gdpr-sensitive": "<category>"` mark, `None` for `true`.
    pub category: Option<String>,
}

impl fmt::Display for SensitivePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.steps.iter().enumerate() {
            match step {
                Step::Key(key) if i == 0 => f.write_str(key)?,
                Step::Key(key) => write!(f, ".{key}")?,
                Step::Items => f.write_str("[]")?,
            }
        }
        Ok(())
    }
}

/// The category of a node's `x-gdpr-sensitive` mark: `Some(None)` for `true`, `Some(Some(c))`
/// for a non-empty string, `None` when unmarked (`false`, `""`, any other value).
fn gdpr_mark(node: &serde_json::Map<String, Value>) -> Option<Option<String>> {
    match node.get("x-gdpr-sensitive") {
        Some(Value::Bool(true)) => Some(None),
        Some(Value::String(category)) if !category.is_empty() => Some(Some(category.clone())),
        _ => None,
    }
}

/// Every property `schema` marks `x-gdpr-sensitive`, through nested `properties` and `items`,
/// sorted by their written form; a mark on the root schema is listed with no steps. This is the
/// inventory `polyq babel schema gdpr` prints; [`protected_paths`] is what encryption acts on.
///
/// ```
/// use serde_json::json;
///
/// let schema = json!({"type": "object", "properties": {
///     "email": {"type": "string", "x-gdpr-sensitive": "contact"},
///     "addresses": {"type": "array", "items": {"properties": {
///         "line": {"type": "string", "x-gdpr-sensitive": true}}}},
/// }});
/// let paths = babelqueue::schema::sensitive_paths(&schema);
/// let written: Vec<String> = paths.iter().map(ToString::to_string).collect();
/// assert_eq!(written, ["addresses[].line", "email"]);
/// assert_eq!(paths[1].category.as_deref(), Some("contact"));
/// ```
pub fn sensitive_paths(schema: &Value) -> Vec<SensitivePath> {
    let mut found = Vec::new();
    collect_marks(schema, &mut Vec::new(), &mut found, false);
    found.sort_by_cached_key(ToString::to_string);
    found
}

/// The marked properties field encryption acts on: [`sensitive_paths`] without the root mark
/// (there is no field to replace: `data` stays an object) and without any mark under a marked
/// container, whose whole value is already encrypted as one (ADR-0030).
pub fn protected_paths(schema: &Value) -> Vec<SensitivePath> {
    let mut found = Vec::new();
    collect_marks(schema, &mut Vec::new(), &mut found, true);
    found
}

fn collect_marks(node: &Value, steps: &mut Vec<Step>, found: &mut Vec<SensitivePath>, outer: bool) {
    let Value::Object(node) = node else {
        return;
    };
    if let Some(category) = gdpr_mark(node) {
        let at_root = steps.is_empty();
        if !(outer && at_root) {
            found.push(SensitivePath {
                steps: steps.clone(),
                category,
            });
            if outer {
                return;
            }
        }
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            steps.push(Step::Key(name.clone()));
            collect_marks(property, steps, found, outer);
            steps.pop();
        }
    }
    if let Some(items) = node.get("items") {
        steps.push(Step::Items);
        collect_marks(items, steps, found, outer);
        steps.pop();
    }
}

/// Calls `apply` on every value of `data` at `path`, with its RFC 6901 pointer; an absent
/// property or a value of another shape than the path expects is skipped (a message need not
/// carry every optional field).
///
/// # Errors
/// The first error of `apply`, which stops the walk.
pub(crate) fn visit_path<E>(
    data: &mut Value,
    path: &[Step],
    apply: &mut impl FnMut(&mut Value, &str) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    fn walk<E>(
        node: &mut Value,
        rest: &[Step],
        at: &mut Vec<String>,
        apply: &mut impl FnMut(&mut Value, &str) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let Some((step, rest)) = rest.split_first() else {
            let segments: Vec<&str> = at.iter().map(String::as_str).collect();
            return apply(node, &pointer(&segments));
        };
        match (step, node) {
            (Step::Key(key), Value::Object(map)) => match map.get_mut(key) {
                Some(child) => {
                    at.push(key.clone());
                    let done = walk(child, rest, at, apply);
                    at.pop();
                    done
                }
                None => Ok(()),
            },
            (Step::Items, Value::Array(items)) => {
                for (i, item) in items.iter_mut().enumerate() {
                    at.push(i.to_string());
                    let done = walk(item, rest, at, apply);
                    at.pop();
                    done?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    if path.is_empty() {
        return Ok(());
    }
    walk(data, path, &mut Vec::new(), apply)
}

/// Masks, one way, every value of `data` at a [`protected_paths`] path of `schema`, as the
/// registry tool masks for safe display: a string keeps its first character followed by `***`,
/// any other value (a number, an object, an array, a boolean, `null`) becomes `"***"`.
///
/// ```
/// use serde_json::json;
///
/// let schema = json!({"properties": {
///     "email": {"x-gdpr-sensitive": true},
///     "profile": {"x-gdpr-sensitive": "identity"},
/// }});
/// let mut data = json!({"email": "alice@example.com", "profile": {"age": 41}, "id": 7});
/// babelqueue::schema::mask(&mut data, &schema);
/// assert_eq!(data, json!({"email": "a***", "profile": "***", "id": 7}));
/// ```
pub fn mask(data: &mut Value, schema: &Value) {
    for path in protected_paths(schema) {
        let masked = visit_path(data, &path.steps, &mut |value, _| {
            let first = value.as_str().and_then(|text| text.chars().next());
            *value = Value::String(first.map_or_else(|| "***".to_owned(), |c| format!("{c}***")));
            Ok::<(), std::convert::Infallible>(())
        });
        let Ok(()) = masked;
    }
}

/// A source of per-URN `data` schemas.
pub trait SchemaProvider {
    /// The schema registered for `urn`, or `None` (then the message is not validated).
    ///
    /// # Errors
    /// [`Error::Registry`] when a registered schema cannot be read.
    fn schema_for(&self, urn: &str) -> Result<Option<Arc<Value>>>;
}

/// Schemas held in memory, keyed by URN.
#[derive(Debug, Clone, Default)]
pub struct MapProvider {
    schemas: HashMap<String, Arc<Value>>,
}

impl MapProvider {
    /// An empty provider.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `schema` for `urn`.
    pub fn with(mut self, urn: impl Into<String>, schema: Value) -> Self {
        self.schemas.insert(urn.into(), Arc::new(schema));
        self
    }
}

impl SchemaProvider for MapProvider {
    fn schema_for(&self, urn: &str) -> Result<Option<Arc<Value>>> {
        Ok(self.schemas.get(urn).cloned())
    }
}

/// Schemas from a babelqueue-registry directory: `registry.json` (`{"schemas": [{"urn",
/// "schema"}]}`) maps each URN to a schema file, relative to the directory. Schema files are read
/// on first use and cached; a URN missing from the registry is not validated.
#[derive(Debug)]
pub struct RegistryProvider {
    dir: PathBuf,
    entries: Vec<RegistryEntry>,
    files: HashMap<String, String>,
    cache: Mutex<HashMap<String, Arc<Value>>>,
}

/// One URN of a registry manifest, in manifest order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryEntry {
    /// The message URN.
    pub urn: String,
    /// The schema file, relative to the registry directory.
    pub schema: String,
    /// The owning team, when the manifest names one.
    pub owner: Option<String>,
    /// The lifecycle status (`active`, `deprecated`, ...), when the manifest gives one.
    pub status: Option<String>,
}

impl RegistryProvider {
    /// Reads `<dir>/registry.json`.
    ///
    /// # Errors
    /// [`Error::Registry`] when the file cannot be read or is not a registry.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let path = dir.join("registry.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::Registry {
            path: path.clone(),
            message: e.to_string(),
        })?;
        Self::from_manifest(dir, &text).map_err(|message| Error::Registry { path, message })
    }

    fn from_manifest(dir: PathBuf, text: &str) -> std::result::Result<Self, String> {
        let manifest: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let Value::Object(manifest) = manifest else {
            return Err("the registry manifest is not a JSON object".to_owned());
        };
        let text_of = |entry: &Value, key: &str| {
            entry
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        // An entry the manifest cannot name a URN and a schema file for is refused, not skipped:
        // skipped, its URN would go unvalidated and its sensitive fields unmasked without a word.
        let entries = manifest
            .get("schemas")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(index, entry)| {
                let urn = text_of(entry, "urn").ok_or_else(|| {
                    format!("entry {index} of `schemas` has no `urn` string; give each entry one")
                })?;
                let schema = text_of(entry, "schema").ok_or_else(|| {
                    format!(
                        "entry {index} of `schemas` ({urn}) has no `schema` string; give the path \
                         of its schema file, relative to the registry directory"
                    )
                })?;
                Ok(RegistryEntry {
                    urn,
                    schema,
                    owner: text_of(entry, "owner"),
                    status: text_of(entry, "status"),
                })
            })
            .collect::<std::result::Result<Vec<_>, String>>()?;
        let files = entries
            .iter()
            .map(|entry| (entry.urn.clone(), entry.schema.clone()))
            .collect();
        Ok(Self {
            dir,
            entries,
            files,
            cache: Mutex::default(),
        })
    }

    /// The URNs of the manifest, in its order.
    pub fn entries(&self) -> &[RegistryEntry] {
        &self.entries
    }

    /// The directory the registry was read from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl SchemaProvider for RegistryProvider {
    fn schema_for(&self, urn: &str) -> Result<Option<Arc<Value>>> {
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(schema) = cache.get(urn) {
            return Ok(Some(schema.clone()));
        }
        let Some(file) = self.files.get(urn) else {
            return Ok(None);
        };
        let path = self.dir.join(file);
        let fail = |message: String| Error::Registry {
            path: path.clone(),
            message,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| fail(e.to_string()))?;
        let schema: Value = serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
        if !schema.is_object() {
            return Err(fail(format!("the schema for {urn} is not a JSON object")));
        }
        let schema = Arc::new(schema);
        cache.insert(urn.to_owned(), schema.clone());
        Ok(Some(schema))
    }
}

/// Validates `data` for `urn` when a schema is registered (producer side: call before publishing;
/// consumer side: before the handler, so invalid data is retried and eventually dead-lettered).
///
/// # Errors
/// [`Error::InvalidPayload`] with the first violation; the provider's error.
///
/// ```
/// use babelqueue::schema::{MapProvider, validate};
/// use serde_json::json;
///
/// let provider = MapProvider::new().with(
///     "urn:babel:orders:created",
///     json!({"required": ["order_id"], "type": "object"}),
/// );
/// assert!(validate(&provider, "urn:babel:orders:created", &json!({"order_id": 1})).is_ok());
/// assert!(validate(&provider, "urn:babel:orders:created", &json!({})).is_err());
/// assert!(validate(&provider, "urn:babel:other:thing", &json!({})).is_ok());
/// ```
pub fn validate(provider: &dyn SchemaProvider, urn: &str, data: &Value) -> Result<()> {
    match provider.schema_for(urn)? {
        Some(schema) => match validate_value(&schema, data) {
            Some(violation) => Err(Error::InvalidPayload {
                urn: urn.to_owned(),
                violation,
            }),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integer_accepts_integral_floats_and_equality_is_type_strict() {
        let schema = json!({"type": "integer", "minimum": 1});
        assert!(validate_value(&schema, &json!(1.0)).is_none());
        assert_eq!(
            validate_value(&schema, &json!(1.5)).unwrap().reason,
            "not_an_integer"
        );
        assert_eq!(
            validate_value(&schema, &json!(true)).unwrap().reason,
            "not_an_integer"
        );
        assert_eq!(
            validate_value(&schema, &json!(0)).unwrap().reason,
            "below_minimum"
        );
        assert_eq!(
            validate_value(&json!({"const": 1}), &json!(1.0))
                .unwrap()
                .reason,
            "wrong_const"
        );
        assert_eq!(
            validate_value(&json!({"enum": [true]}), &json!(1))
                .unwrap()
                .reason,
            "not_in_enum"
        );
    }

    #[test]
    fn nested_pointers_name_the_failing_value() {
        let schema = json!({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "required": ["sku"]}}}});
        let found = validate_value(&schema, &json!({"items": [{"sku": 1}, {}]})).unwrap();
        assert_eq!(found.pointer, "/items/1/sku");
        assert_eq!(found.reason, "missing_required");
        assert!(
            validate_value(&json!({"maxLength": 1, "type": "string"}), &json!("long")).is_none()
        );
    }

    #[test]
    fn a_registry_entry_without_a_schema_file_is_refused_naming_it() {
        let refused = |manifest: &str| {
            RegistryProvider::from_manifest(PathBuf::from("."), manifest).unwrap_err()
        };
        assert_eq!(
            refused(r#"{"schemas":[{"urn":"urn:babel:a:b","schema":{"type":"object"}}]}"#),
            "entry 0 of `schemas` (urn:babel:a:b) has no `schema` string; give the path of its \
             schema file, relative to the registry directory"
        );
        assert!(refused(r#"{"schemas":[{"schema":"a.json"}]}"#).contains("no `urn`"));
    }

    #[test]
    fn registry_directory_is_read_lazily() {
        let dir =
            std::env::temp_dir().join(format!("bq-registry-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(dir.join("schemas")).unwrap();
        std::fs::write(
            dir.join("registry.json"),
            r#"{"schemas":[{"urn":"urn:babel:a:b","schema":"schemas/a.json","owner":"team"},{"urn":"urn:babel:a:gone","schema":"schemas/missing.json"}]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("schemas/a.json"),
            r#"{"type":"object","required":["id"]}"#,
        )
        .unwrap();
        let provider = RegistryProvider::open(&dir).unwrap();
        assert_eq!(provider.entries()[0].owner.as_deref(), Some("team"));
        assert_eq!(provider.entries()[1].status, None);
        assert!(validate(&provider, "urn:babel:a:b", &json!({"id": 1})).is_ok());
        assert!(matches!(
            validate(&provider, "urn:babel:a:b", &json!({})),
            Err(Error::InvalidPayload { .. })
        ));
        assert!(validate(&provider, "urn:babel:x:y", &json!({})).is_ok());
        assert!(matches!(
            provider.schema_for("urn:babel:a:gone"),
            Err(Error::Registry { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(
            RegistryProvider::open(&dir),
            Err(Error::Registry { .. })
        ));
    }

    #[test]
    fn sensitive_paths_list_every_mark_and_protected_paths_the_outermost() {
        let schema = json!({"x-gdpr-sensitive": true, "properties": {
            "email": {"x-gdpr-sensitive": "contact"},
            "plain": {"x-gdpr-sensitive": false},
            "blank": {"x-gdpr-sensitive": ""},
            "number": {"x-gdpr-sensitive": 1},
            "a.b": {"x-gdpr-sensitive": true},
            "profile": {"x-gdpr-sensitive": true, "properties": {"full_name": {"x-gdpr-sensitive": true}}},
            "addresses": {"items": {"properties": {"line": {"x-gdpr-sensitive": true}}}},
            "matrix": {"items": {"items": {"x-gdpr-sensitive": "grid"}}},
        }});
        let written = |paths: Vec<SensitivePath>| {
            let mut out: Vec<String> = paths.iter().map(ToString::to_string).collect();
            out.sort();
            out
        };
        assert_eq!(
            written(sensitive_paths(&schema)),
            [
                "",
                "a.b",
                "addresses[].line",
                "email",
                "matrix[][]",
                "profile",
                "profile.full_name"
            ]
        );
        assert_eq!(
            written(protected_paths(&schema)),
            ["a.b", "addresses[].line", "email", "matrix[][]", "profile"]
        );
        let dotted = protected_paths(&schema)
            .into_iter()
            .find(|p| p.to_string() == "a.b")
            .unwrap();
        assert_eq!(dotted.steps, [Step::Key("a.b".to_owned())]);
        assert!(sensitive_paths(&json!({"properties": 1, "items": "x"})).is_empty());
    }

    #[test]
    fn masking_keeps_a_first_character_and_hides_everything_else() {
        let schema = json!({"properties": {
            "email": {"x-gdpr-sensitive": true},
            "name": {"x-gdpr-sensitive": true},
            "empty": {"x-gdpr-sensitive": true},
            "tags": {"items": {"x-gdpr-sensitive": true}},
            "age": {"x-gdpr-sensitive": true},
        }});
        let mut data = json!({"email": "élodie@example.com", "name": null, "empty": "",
            "tags": ["vip", 3], "age": 41, "id": "kept"});
        mask(&mut data, &schema);
        assert_eq!(
            data,
            json!({"email": "é***", "name": "***", "empty": "***", "tags": ["v***", "***"],
                "age": "***", "id": "kept"})
        );
    }
}
