//! Encode and decode of one message per format: the codec interop fixtures' order (the value
//! the Java and Go samples carry) through JSON, YAML, TOML and XML, into and out of a typed
//! struct, as a publisher and a consumer do per message.

use std::hint::black_box;

use acemq::codec::{Decode, Encode, Json, Toml, Xml, Yaml};
use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use serde::{Deserialize, Serialize};
use serde_json::Value;

const FIXTURES: &str = include_str!("../../../fixtures/acemq/codec-interop-fixtures.json");

/// The fixtures' message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderPlaced {
    order_id: String,
    customer: String,
    total_cents: i64,
    currency: String,
    items: Vec<String>,
}

/// The order of the fixtures' YAML samples (the XML ones carry the same, numbers as text).
fn order() -> OrderPlaced {
    let fixtures: Value = serde_json::from_str(FIXTURES).unwrap();
    let sample = fixtures["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["format"] == "yaml")
        .unwrap();
    serde_json::from_value(sample["expected"].clone()).unwrap()
}

fn round_trip<C>(c: &mut Criterion, name: &str, codec: C)
where
    C: Encode<OrderPlaced> + Decode<OrderPlaced>,
{
    let order = order();
    let body: Bytes = codec.encode(&order).unwrap();
    assert_eq!(codec.decode(&body).unwrap(), order, "{name} reads back");
    let mut group = c.benchmark_group(format!("codec/{name}"));
    group.bench_function("encode", |b| {
        b.iter(|| codec.encode(black_box(&order)).unwrap());
    });
    group.bench_function("decode", |b| {
        b.iter(|| -> OrderPlaced { codec.decode(black_box(&body)).unwrap() });
    });
    group.finish();
}

fn codecs(c: &mut Criterion) {
    round_trip(c, "json", Json);
    round_trip(c, "yaml", Yaml);
    round_trip(c, "toml", Toml);
    round_trip(c, "xml", Xml::default());
}

criterion_group!(benches, codecs);
criterion_main!(benches);
