//! The payload validator (ADR-0024) against the Python SDK's `babelqueue.schema` on a corpus
//! this test generates: valid and invalid payloads for every keyword of the draft-07 subset,
//! `minLength` counted in code points, integral floats for `integer`, unknown keywords ignored.
//! Each case must get the same verdict, the same place and the same rule from both.
//!
//! The interpreter is `POLYQ_PYTHON`, which `scripts/test` sets up (`scripts/python-peer`).

mod runtime_support;

use babelqueue::schema::validate_value;
use serde_json::{Value, json};

/// What the Python validator prints for a violation: `<root>`, or `a.b[1]`, then the rule.
fn python_form(schema: &Value, value: &Value) -> Value {
    let Some(violation) = validate_value(schema, value) else {
        return Value::Null;
    };
    let mut path = String::new();
    for segment in violation.pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if segment.bytes().all(|b| b.is_ascii_digit()) && !segment.is_empty() {
            path.push_str(&format!("[{segment}]"));
        } else if path.is_empty() {
            path.push_str(&segment);
        } else {
            path.push_str(&format!(".{segment}"));
        }
    }
    if path.is_empty() {
        path.push_str("<root>");
    }
    json!(format!("{path}: {}", violation.reason))
}

fn samples() -> Vec<Value> {
    vec![
        json!(null),
        json!(true),
        json!(false),
        json!(0),
        json!(1),
        json!(1.0),
        json!(1.5),
        json!(-3),
        json!(-0.0),
        json!(1e3),
        json!(12345678901234567_u64),
        json!(""),
        json!("x"),
        json!("1"),
        json!([]),
        json!([1]),
        json!({}),
        json!({"a": 1}),
    ]
}

/// The corpus: (schema, value) pairs covering each keyword on both sides of its rule.
fn corpus() -> Vec<(Value, Value)> {
    let mut cases = Vec::new();
    let types = [
        "object", "string", "integer", "number", "boolean", "array", "null",
    ];
    for ty in types {
        for value in samples() {
            cases.push((json!({"type": ty}), value));
        }
    }
    // Unknown or unsupported forms are ignored: a list of types, maxLength, pattern, format.
    for schema in [
        json!({"type": ["string", "null"]}),
        json!({"type": "string", "maxLength": 1, "pattern": "^z$", "format": "email"}),
        json!({"type": "bogus"}),
        json!({}),
    ] {
        for value in samples() {
            cases.push((schema.clone(), value));
        }
    }
    let strings = [
        "",
        "a",
        "ab",
        "abc",
        "é",
        "ğüş",
        "😀",
        "😀a",
        "e\u{301}",
        "日本語",
    ];
    for min in [
        json!(0),
        json!(1),
        json!(2),
        json!(3),
        json!(2.5),
        json!(-1),
    ] {
        for text in strings {
            cases.push((json!({"type": "string", "minLength": min}), json!(text)));
        }
    }
    for ty in ["integer", "number"] {
        for min in [json!(0), json!(1), json!(1.5), json!(-1), json!(-0.5)] {
            for value in [0.0, 1.0, 1.5, 2.0, -1.0, -1.5, 1e3] {
                cases.push((json!({"type": ty, "minimum": min}), json!(value)));
            }
            for value in [json!(0), json!(1), json!(2), json!(-1), json!(-2)] {
                cases.push((json!({"type": ty, "minimum": min}), value));
            }
        }
    }
    // Top-level equality is type-strict in both: 1 is not 1.0, true is not 1.
    let scalars = [
        json!(1),
        json!(1.0),
        json!(true),
        json!("1"),
        json!(null),
        json!(0),
        json!(false),
        json!([1, "a"]),
        json!({"a": [1]}),
    ];
    for expected in &scalars {
        for value in &scalars {
            cases.push((json!({"const": expected}), value.clone()));
            cases.push((json!({"enum": [expected, "other"]}), value.clone()));
        }
    }
    cases.push((json!({"enum": []}), json!(1)));
    cases.push((json!({"enum": "not a list"}), json!(1)));
    cases.push((json!({"const": 1, "enum": [2], "type": "string"}), json!(1)));
    let object = json!({"type": "object", "required": ["id", "name"], "properties": {
        "id": {"type": "integer", "minimum": 1},
        "name": {"type": "string", "minLength": 2},
        "tags": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "address": {"type": "object", "required": ["city"], "additionalProperties": false,
                    "properties": {"city": {"type": "string"}, "zip": {"type": "string"}}},
    }});
    for value in [
        json!({"id": 1, "name": "ab"}),
        json!({"name": "ab"}),
        json!({"id": 1}),
        json!({"id": 0, "name": "ab"}),
        json!({"id": 1.0, "name": "ab"}),
        json!({"id": 1, "name": "é"}),
        json!({"id": 1, "name": "ab", "extra": [null]}),
        json!({"id": 1, "name": "ab", "tags": []}),
        json!({"id": 1, "name": "ab", "tags": ["x", ""]}),
        json!({"id": 1, "name": "ab", "tags": "x"}),
        json!({"id": 1, "name": "ab", "address": {"city": "Paris"}}),
        json!({"id": 1, "name": "ab", "address": {"zip": "75001"}}),
        json!({"id": 1, "name": "ab", "address": {"city": "Paris", "country": "FR"}}),
        json!({"id": 1, "name": "ab", "address": {"city": 7}}),
        json!({"id": 1, "name": "ab", "address": []}),
        json!([]),
        json!("object"),
    ] {
        cases.push((object.clone(), value));
    }
    for additional in [json!(true), json!(false), json!({}), json!("no")] {
        for value in [json!({}), json!({"known": 1}), json!({"unknown": 1})] {
            cases.push((
                json!({"type": "object", "properties": {"known": {"type": "integer"}},
                       "additionalProperties": additional}),
                value,
            ));
        }
    }
    for items in [
        json!({"type": "integer"}),
        json!([{"type": "integer"}]),
        json!(true),
    ] {
        for value in [
            json!([]),
            json!([1, 2]),
            json!([1, "x"]),
            json!([1.0, 2.0]),
            json!([[1]]),
        ] {
            cases.push((json!({"type": "array", "items": items}), value));
        }
    }
    let nested = json!({"type": "array", "items": {"type": "array", "items": {"type": "object",
        "properties": {"n": {"type": "integer"}}}}});
    for value in [
        json!([[{"n": 1}], []]),
        json!([[{"n": 1}, {"n": "x"}]]),
        json!([[1]]),
    ] {
        cases.push((nested.clone(), value));
    }
    cases
}

#[tokio::test]
async fn the_validator_agrees_with_pythons_on_the_generated_corpus() {
    let cases = corpus();
    assert!(cases.len() > 400, "{} cases", cases.len());
    let python = runtime_support::python_peer(
        "gdpr_peer.py",
        "validate",
        json!({"cases": cases.iter().map(|(schema, value)| json!({"schema": schema, "value": value})).collect::<Vec<_>>()}),
    )
    .await;
    let verdicts = python["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), cases.len());
    let mut disagreements = Vec::new();
    let mut invalid = 0;
    for ((schema, value), theirs) in cases.iter().zip(verdicts) {
        let ours = python_form(schema, value);
        invalid += usize::from(!ours.is_null());
        if &ours != theirs {
            disagreements.push(format!("{schema} on {value}: ours {ours}, Python {theirs}"));
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
    assert!(
        invalid > 100 && invalid < cases.len() - 100,
        "{invalid} invalid"
    );
}

/// Deep equality: the reference text asks for type-strict equality at every depth; Python's
/// `==` on lists and objects compares `1` and `1.0`, and `true` and `1`, as equal inside them.
#[tokio::test]
async fn departure_python_equality_is_type_strict_only_at_the_top() {
    let cases = [
        (json!({"const": [1]}), json!([1.0])),
        (json!({"enum": [{"a": true}]}), json!({"a": 1})),
    ];
    let python = runtime_support::python_peer(
        "gdpr_peer.py",
        "validate",
        json!({"cases": cases.iter().map(|(schema, value)| json!({"schema": schema, "value": value})).collect::<Vec<_>>()}),
    )
    .await;
    assert_eq!(
        python["verdicts"],
        json!([null, null]),
        "Python accepts both"
    );
    assert_eq!(python_form(&cases[0].0, &cases[0].1), "<root>: wrong_const");
    assert_eq!(python_form(&cases[1].0, &cases[1].1), "<root>: not_in_enum");
}
