//! Write then read of the `populated` fixture envelope, beside building and parsing the same
//! header table by hand with no envelope logic (no defaults, no leniency, no reserved-header
//! filtering by prefix beyond what the hand version needs).

use std::hint::black_box;
use std::path::PathBuf;

use acemq::Envelope;
use acemq::time::OffsetDateTime;
use criterion::{Criterion, criterion_group, criterion_main};
use polyq_amqp::{FieldTable, FieldValue};
use serde_json::Value;

const ROUTING_KEY: &str = "fx.rich";

fn populated() -> (FieldTable, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/acemq/envelope-fixtures.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let case = file["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["case"] == "populated")
        .unwrap();
    let table = case["headers"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let value = match v {
                Value::String(s) => FieldValue::from(s.as_str()),
                other => FieldValue::I64(other.as_i64().unwrap()),
            };
            (k.clone(), value)
        })
        .collect();
    (table, case["messageId"].as_str().unwrap().to_owned())
}

/// The same fields as plain data, for the hand-written baseline.
struct Fields {
    id: String,
    message_type: String,
    version: i32,
    correlation: String,
    causation: String,
    attempt: i32,
    first_seen: i64,
    origin: String,
    tenant: String,
}

fn by_hand_write(f: &Fields) -> FieldTable {
    let mut t = FieldTable::new();
    t.insert("x-acemq-id".into(), FieldValue::from(f.id.as_str()));
    t.insert(
        "x-acemq-type".into(),
        FieldValue::from(f.message_type.as_str()),
    );
    t.insert("x-acemq-version".into(), FieldValue::I32(f.version));
    t.insert(
        "x-acemq-correlation".into(),
        FieldValue::from(f.correlation.as_str()),
    );
    t.insert(
        "x-acemq-causation".into(),
        FieldValue::from(f.causation.as_str()),
    );
    t.insert("x-acemq-attempt".into(), FieldValue::I32(f.attempt));
    t.insert("x-acemq-first-seen".into(), FieldValue::I64(f.first_seen));
    t.insert("x-acemq-origin".into(), FieldValue::from(f.origin.as_str()));
    t.insert("x-tenant".into(), FieldValue::from(f.tenant.as_str()));
    t
}

fn by_hand_read(t: &FieldTable) -> Fields {
    let text = |k: &str| {
        t.get(k)
            .and_then(FieldValue::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let int = |k: &str| t.get(k).and_then(FieldValue::as_i64).unwrap_or(0);
    Fields {
        id: text("x-acemq-id"),
        message_type: text("x-acemq-type"),
        version: int("x-acemq-version") as i32,
        correlation: text("x-acemq-correlation"),
        causation: text("x-acemq-causation"),
        attempt: int("x-acemq-attempt") as i32,
        first_seen: int("x-acemq-first-seen"),
        origin: text("x-acemq-origin"),
        tenant: text("x-tenant"),
    }
}

fn bench(c: &mut Criterion) {
    let (table, message_id) = populated();
    let now = OffsetDateTime::now_utc();
    let envelope = Envelope::from_headers_at(&table, ROUTING_KEY, Some(&message_id), now);
    let fields = by_hand_read(&table);

    let mut group = c.benchmark_group("populated envelope write+read");
    group.bench_function("acemq", |b| {
        b.iter(|| {
            let headers = black_box(&envelope).to_headers();
            black_box(Envelope::from_headers_at(
                &headers,
                ROUTING_KEY,
                Some(&message_id),
                now,
            ))
        })
    });
    group.bench_function("by hand", |b| {
        b.iter(|| {
            let headers = by_hand_write(black_box(&fields));
            black_box(by_hand_read(&headers))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
