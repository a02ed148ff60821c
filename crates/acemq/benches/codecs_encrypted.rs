//! Encode then decode of one message through the encrypted codec (`Encrypted<Json>`, AES-256-GCM
//! in the reference framing, a fresh nonce per message) beside plain JSON in the same run, for a
//! small payload and a 4 KiB one.

use std::hint::black_box;

use acemq::codec::encrypted::Encrypted;
use acemq::codec::keyring::KeyRing;
use acemq::codec::{Decode, Encode, Json};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};

fn payloads() -> [(&'static str, Value); 2] {
    let small = json!({"order": "o-1", "amount": 12.5, "currency": "EUR"});
    // About 4 KiB of JSON: 64 lines of an order.
    let lines: Vec<Value> = (0..64)
        .map(|n| json!({"sku": format!("sku-{n:05}"), "quantity": n, "note": "gift wrap, no invoice"}))
        .collect();
    let large = json!({"order": "o-2", "lines": lines});
    [("small", small), ("4 KiB", large)]
}

fn round_trip<C: Encode<Value> + Decode<Value>>(codec: &C, payload: &Value) -> Value {
    let body = codec.encode(payload).expect("encodes");
    codec.decode(&body).expect("decodes")
}

fn bench(c: &mut Criterion) {
    let encrypted = Encrypted::new(Json, KeyRing::new("bench-2026-12", &[7; 32]).unwrap());
    let mut group = c.benchmark_group("codec encode+decode");
    for (name, payload) in payloads() {
        let size = Encode::<Value>::encode(&Json, &payload).unwrap().len();
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::new("json", name), &payload, |b, payload| {
            b.iter(|| round_trip(&Json, black_box(payload)));
        });
        group.bench_with_input(
            BenchmarkId::new("encrypted json", name),
            &payload,
            |b, payload| {
                b.iter(|| round_trip(&encrypted, black_box(payload)));
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
