//! Property tests: make → encode → decode is the identity, decode never panics, a re-encode keeps
//! every unknown key with its exact value, the canonical encoding is a fixed point, and any
//! message whose handler fails ends in the dead-letter queue with its original bytes (the `data`
//! of an envelope, the whole body of poison), on `memory://`, within a bounded number of
//! deliveries.

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

const FAILING_URN: &str = "urn:babel:orders:created";

/// Text of 256 to 700 bytes: more than an AMQP short string holds.
fn long_text() -> impl Strategy<Value = String> {
    (256..700_usize).prop_map(|n| "l".repeat(n))
}

/// A JSON string literal of short or long text.
fn literal() -> impl Strategy<Value = String> {
    prop_oneof![json_string(), long_text()]
        .prop_map(|text| serde_json::to_string(&text).expect("a string writes"))
}

/// An envelope as any producer may write it, as text: the failing URN or another, short or long
/// values, `data` with repeated keys, any `attempts`.
fn envelope_text() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just(FAILING_URN.to_owned()), non_blank_urn(), long_text()],
        literal(),
        literal(),
        json_value(),
        any::<i64>(),
    )
        .prop_map(|(urn, trace, id, value, attempts)| {
            let urn = serde_json::to_string(&urn).expect("a string writes");
            format!(
                r#"{{"job":{urn},"trace_id":{trace},"data":{{"k":{value},"k":1,"n":2.50}},"meta":{{"id":{id},"lang":"go","schema_version":1}},"attempts":{attempts}}}"#
            )
        })
}

/// A body of any bytes: empty, not UTF-8, long text, JSON, or an envelope.
fn delivered_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => Just(Vec::new()),
        1 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => "\\PC{0,400}".prop_map(String::into_bytes),
        1 => json_value().prop_map(|value| serde_json::to_vec(&value).expect("JSON writes")),
        3 => envelope_text().prop_map(String::into_bytes),
    ]
}

/// A header value of every AMQP field type.
fn field_value() -> impl Strategy<Value = polyq_amqp::FieldValue> {
    use polyq_amqp::FieldValue;
    let scalar = prop_oneof![
        any::<bool>().prop_map(FieldValue::Bool),
        any::<i8>().prop_map(FieldValue::I8),
        any::<u8>().prop_map(FieldValue::U8),
        any::<i16>().prop_map(FieldValue::I16),
        any::<u16>().prop_map(FieldValue::U16),
        any::<i32>().prop_map(FieldValue::I32),
        any::<u32>().prop_map(FieldValue::U32),
        any::<i64>().prop_map(FieldValue::I64),
        any::<f32>().prop_map(FieldValue::F32),
        any::<f64>().prop_map(FieldValue::F64),
        (any::<u8>(), any::<u32>()).prop_map(|(scale, value)| FieldValue::Decimal { scale, value }),
        proptest::collection::vec(any::<u8>(), 0..12).prop_map(FieldValue::LongString),
        prop_oneof![json_string(), long_text()].prop_map(|text| FieldValue::from(text.as_str())),
        any::<u64>().prop_map(FieldValue::Timestamp),
        proptest::collection::vec(any::<u8>(), 0..12).prop_map(FieldValue::ByteArray),
        Just(FieldValue::Void),
    ];
    scalar.prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(FieldValue::Array),
            proptest::collection::btree_map("\\PC{0,6}", inner, 0..3).prop_map(FieldValue::Table),
        ]
    })
}

/// Headers as any producer may send them, the contract and out-of-band names included.
fn delivered_headers() -> impl Strategy<Value = polyq_amqp::FieldTable> {
    let name = prop_oneof![
        "\\PC{0,10}",
        proptest::sample::select(vec![
            "x-attempts",
            "x-schema-version",
            "x-source-lang",
            "traceparent",
            "bq-replay-bypass",
        ])
        .prop_map(str::to_owned),
    ];
    proptest::collection::btree_map(name, field_value(), 0..8)
}

/// Publishes one message to a worker whose handler always fails and answers the one message the
/// dead-letter queue then holds.
async fn fail_until_dead_lettered(headers: polyq_amqp::FieldTable, body: Vec<u8>) -> bytes::Bytes {
    use babelqueue::transport::Transport as _;
    use babelqueue::worker::Backoff;

    let patience = std::time::Duration::from_secs(10);
    let url = format!("memory://{}", polyq_testkit::unique_name("bq-prop"));
    let queue = babelqueue::BabelQueue::builder(&url)
        .queue("orders")
        .connect()
        .await
        .expect("memory:// connects");
    let client = polyq_amqp::Client::connect(&url).await.expect("connect");
    client
        .declare_queue(&polyq_amqp::QueueSpec::new("orders"))
        .await
        .expect("declare");
    let properties = polyq_amqp::Properties {
        headers,
        ..polyq_amqp::Properties::default()
    };
    client
        .publish(polyq_amqp::OutgoingMessage::new(
            "", "orders", properties, body,
        ))
        .await
        .expect("published")
        .await
        .expect("confirmed");
    // At most three deliveries (two retries) before the dead-letter queue: one more to spare.
    let report = queue
        .worker()
        .max_attempts(3)
        .backoff(Backoff::none())
        .handle(FAILING_URN, |_job| async { Err("always fails") })
        .consume(4, std::time::Duration::from_millis(300))
        .await
        .expect("the worker runs");
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    assert!(report.received <= 3, "{report:?}");
    let transport = queue.transport();
    let dlq = transport.dead_letter_queue("orders");
    let dead = transport
        .reserve(&dlq, patience)
        .await
        .expect("reserve")
        .expect("one message on the dead-letter queue");
    transport.ack(&dead.receipt).await.expect("ack");
    assert_eq!(transport.depth(&dlq).await.expect("depth"), 0);
    assert_eq!(transport.depth("orders").await.expect("depth"), 0);
    transport.unsubscribe(&dlq).await.expect("unsubscribe");
    client.close().await.expect("close");
    dead.body
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_failing_message_is_dead_lettered_with_its_bytes(
        headers in delivered_headers(),
        body in delivered_body(),
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let dead = runtime.block_on(fail_until_dead_lettered(headers, body.clone()));
        match babelqueue::classify(&body) {
            Verdict::Accepted(sent) => {
                let got = babelqueue::decode(&dead).expect("a dead letter decodes").envelope;
                prop_assert_eq!(got.data(), sent.envelope.data(), "data byte for byte");
                prop_assert_eq!(got.trace_id(), sent.envelope.trace_id());
                prop_assert!(got.dead_letter().is_some());
            }
            _ => {
                // The poison record keeps the body: spliced before its closing brace, as a
                // JSON string, or base64 for bytes that are not UTF-8.
                let record: Value = serde_json::from_slice(&dead).expect("a record is JSON");
                let kept = match std::str::from_utf8(&body) {
                    Err(_) => {
                        use base64::Engine as _;
                        let raw = record["raw"].as_str().expect("base64 raw");
                        base64::engine::general_purpose::STANDARD.decode(raw).expect("base64") == body
                    }
                    Ok(text) => {
                        let trimmed = text.trim_matches([' ', '\t', '\n', '\r']);
                        record["raw"].as_str() == Some(text)
                            || (trimmed.len() > 1
                                && dead.starts_with(&trimmed.as_bytes()[..trimmed.len() - 1]))
                    }
                };
                prop_assert!(kept, "poison record keeps the body: {}", String::from_utf8_lossy(&dead));
            }
        }
    }
}
