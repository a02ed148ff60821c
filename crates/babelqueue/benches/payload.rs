//! What payload schemas and GDPR field encryption cost a job, beside the same job without them:
//! the producer's `make` + `encode` with and without validation and protection (two sensitive
//! fields, AES-256-GCM), and the consumer's `decode` with and without decryption and validation,
//! each as the worker and the client run them (the `data` read into a value, checked, written
//! back).
//!
//! `cargo bench -p babelqueue --features gdpr --bench payload`.

use std::hint::black_box;

use babelqueue::gdpr::AesGcmCipher;
use babelqueue::{Envelope, MakeOptions};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

const URN: &str = "urn:babel:customers:registered";

fn data() -> Value {
    json!({"customer_id": 1042, "email": "alice@example.com", "plan": "gold",
           "profile": {"full_name": "Alice Ünal", "age": 41}, "amount": 99.9})
}

fn schema() -> Value {
    json!({"type": "object", "required": ["customer_id", "email"], "properties": {
        "customer_id": {"type": "integer", "minimum": 1},
        "email": {"type": "string", "minLength": 3, "x-gdpr-sensitive": "contact"},
        "plan": {"enum": ["gold", "silver"]},
        "profile": {"type": "object", "x-gdpr-sensitive": true},
        "amount": {"type": "number", "minimum": 0},
    }})
}

fn make(data: &Value) -> Envelope {
    babelqueue::make(URN, data, MakeOptions::new().queue("customers")).expect("an object")
}

fn data_of(envelope: &Envelope) -> Value {
    envelope.data_as().expect("data is JSON")
}

fn bench(c: &mut Criterion) {
    let schema = schema();
    let cipher = AesGcmCipher::new(&[7u8; 32]).expect("a 32-byte key");
    let plain_body = make(&data()).encode().expect("encodes");
    let mut protected = data();
    babelqueue::gdpr::protect(&mut protected, &schema, &cipher).expect("protects");
    let protected_body = make(&protected).encode().expect("encodes");

    let mut group = c.benchmark_group("payload");
    group.bench_function("produce_plain", |b| {
        b.iter(|| make(black_box(&data())).encode().expect("encodes"))
    });
    group.bench_function("produce_validated", |b| {
        b.iter(|| {
            let envelope = make(black_box(&data()));
            let value = data_of(&envelope);
            assert!(babelqueue::schema::validate_value(&schema, &value).is_none());
            envelope.encode().expect("encodes")
        })
    });
    group.bench_function("produce_validated_protected", |b| {
        b.iter(|| {
            let mut envelope = make(black_box(&data()));
            let mut value = data_of(&envelope);
            assert!(babelqueue::schema::validate_value(&schema, &value).is_none());
            babelqueue::gdpr::protect(&mut value, &schema, &cipher).expect("protects");
            envelope.set_data(&value).expect("an object");
            envelope.encode().expect("encodes")
        })
    });
    group.bench_function("consume_plain", |b| {
        b.iter(|| babelqueue::decode(black_box(plain_body.as_bytes())).expect("decodes"))
    });
    group.bench_function("consume_validated", |b| {
        b.iter(|| {
            let decoded = babelqueue::decode(black_box(plain_body.as_bytes())).expect("decodes");
            let value = data_of(&decoded.envelope);
            assert!(babelqueue::schema::validate_value(&schema, &value).is_none());
            decoded
        })
    });
    group.bench_function("consume_unprotected_validated", |b| {
        b.iter(|| {
            let mut decoded =
                babelqueue::decode(black_box(protected_body.as_bytes())).expect("decodes");
            let mut value = data_of(&decoded.envelope);
            babelqueue::gdpr::unprotect(&mut value, &schema, &cipher).expect("unprotects");
            assert!(babelqueue::schema::validate_value(&schema, &value).is_none());
            decoded.envelope.set_data(&value).expect("an object");
            decoded
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
