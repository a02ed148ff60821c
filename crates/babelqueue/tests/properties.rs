//! Property tests: make → encode → decode is the identity, decode never panics, a re-encode keeps
//! every unknown key with its exact value, and the canonical encoding is a fixed point.

use babelqueue::{MakeOptions, RawJson, Verdict};
use proptest::prelude::*;
use serde_json::{Map, Value};

fn json_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_]{0,8}",
        "\\PC{0,12}",
        proptest::collection::vec(any::<char>(), 0..8).prop_map(|c| c.into_iter().collect()),
        Just("\"\\/\u{0}\u{1f}\u{7f}\u{2028}é☕😀".to_owned()),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        json_string().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((json_string(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = Map<String, Value>> {
    proptest::collection::vec((json_string(), json_value()), 0..6)
        .prop_map(|pairs| pairs.into_iter().collect())
}

/// A key that is not a known, core, forbidden or alias key.
fn extension_key() -> impl Strategy<Value = String> {
    "[A-Za-z_][A-Za-z0-9_]{0,10}".prop_filter("not reserved", |k| {
        ![
            "job",
            "urn",
            "trace_id",
            "data",
            "meta",
            "attempts",
            "dead_letter",
            "timestamp",
            "id",
            "queue",
            "lang",
            "schema_version",
            "created_at",
            "max_retries",
            "source",
            "ts",
        ]
        .contains(&k.as_str())
    })
}

fn non_blank_urn() -> impl Strategy<Value = String> {
    "\\PC{1,24}".prop_filter("not blank", |u| !babelqueue::whitespace::is_blank(u))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn make_encode_decode_is_the_identity(
        urn in non_blank_urn(),
        data in json_object(),
        queue in json_string(),
        trace in proptest::option::of(non_blank_urn()),
        extras in proptest::collection::vec((extension_key(), json_value()), 0..4),
    ) {
        let mut options = MakeOptions::new().queue(queue);
        if let Some(trace) = trace {
            options = options.trace_id(trace);
        }
        let mut seen = std::collections::HashSet::new();
        for (key, value) in extras {
            if seen.insert(key.clone()) {
                options = options.meta(key, value);
            }
        }
        let envelope = babelqueue::make(&urn, &data, options).unwrap();
        let body = envelope.encode().unwrap();
        let decoded = babelqueue::decode(body.as_bytes()).unwrap();
        prop_assert!(decoded.warnings.is_empty());
        prop_assert_eq!(decoded.envelope.accepts(), Ok(()));
        prop_assert_eq!(&decoded.envelope, &envelope);
        prop_assert_eq!(decoded.envelope.encode().unwrap(), body.clone());
        // Compared as text: serde_json's default float parsing may be one ulp off the printed value.
        let data_text = Value::Object(data).to_string();
        let data_in_body = body.contains(&format!(r#","data":{data_text},"meta":"#));
        prop_assert!(data_in_body, "data {} not in {}", data_text, body);
    }

    #[test]
    fn decode_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = babelqueue::classify(&bytes);
    }

    #[test]
    fn decode_never_panics_on_json_and_reencodes_to_a_fixed_point(value in json_value(), job in proptest::option::of(json_value())) {
        let mut value = value;
        if let (Value::Object(map), Some(job)) = (&mut value, job) {
            map.insert("job".to_owned(), job);
        }
        let text = value.to_string();
        if let Verdict::Accepted(decoded) | Verdict::Rejected { decoded, .. } = babelqueue::classify(text.as_bytes()) {
            let once = decoded.envelope.encode().unwrap();
            let again = babelqueue::decode(once.as_bytes()).unwrap();
            prop_assert!(again.warnings.is_empty());
            prop_assert_eq!(again.envelope.encode().unwrap(), once);
        }
    }

    #[test]
    fn re_encode_keeps_unknown_keys_with_their_exact_values(
        top in proptest::collection::vec((extension_key(), json_value()), 1..5),
        meta in proptest::collection::vec((extension_key(), json_value()), 1..5),
        attempts in 0_i64..1000,
    ) {
        let raw = |v: &Value| v.to_string();
        let mut body = r#"{"job":"urn:babel:a:b","trace_id":"t","data":{"n":12345678901234567890,"f":1.0},"meta":{"schema_version":1"#.to_owned();
        for (key, value) in &meta {
            body.push_str(&format!(",\"{key}\":{}", raw(value)));
        }
        body.push_str(&format!("}},\"attempts\":{attempts}"));
        for (key, value) in &top {
            body.push_str(&format!(",\"{key}\":{}", raw(value)));
        }
        body.push('}');

        let mut envelope = babelqueue::decode(body.as_bytes()).unwrap().envelope;
        envelope.set_attempts(attempts + 1);
        let out: Value = serde_json::from_str(&envelope.encode().unwrap()).unwrap();
        let text = envelope.encode().unwrap();
        let kept_data = text.contains(r#""data":{"n":12345678901234567890,"f":1.0}"#);
        prop_assert!(kept_data, "data re-formatted: {}", text);
        prop_assert_eq!(&out["attempts"], &Value::from(attempts + 1));
        let last = |pairs: &[(String, Value)], key: &str| pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.to_string());
        let meta_extras = envelope.meta().unwrap().extras();
        for (key, _) in &top {
            let kept = envelope.extras().iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str().to_owned());
            prop_assert_eq!(kept, last(&top, key));
            prop_assert!(out.get(key.as_str()).is_some());
        }
        for (key, _) in &meta {
            let kept = meta_extras.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str().to_owned());
            prop_assert_eq!(kept, last(&meta, key));
            prop_assert!(out["meta"].get(key.as_str()).is_some());
        }
        let kept: Vec<&str> = envelope.extras().iter().map(|(k, _)| k.as_str()).collect();
        let mut first_seen: Vec<&str> = Vec::new();
        for (key, _) in &top {
            if !first_seen.contains(&key.as_str()) {
                first_seen.push(key);
            }
        }
        prop_assert_eq!(kept, first_seen);
    }
}

#[test]
fn raw_values_keep_number_spelling_and_escapes() {
    let raw = RawJson::from_json(r#"{"a":1.50,"b":1E2,"c":"\u00e9\/"}"#).unwrap();
    assert_eq!(raw.as_str(), r#"{"a":1.50,"b":1E2,"c":"\u00e9\/"}"#);
}
