//! Encode then decode, per message, of the interop fixtures' order (`OrderPlaced`: an order id,
//! a total in cents, a tenant) through Protobuf, fixed-schema Avro and registered Avro, beside
//! JSON for the same payload in the same run.

use std::hint::black_box;

use acemq::codec::{Avro, Decode, Encode, Json, Protobuf, RegisteredAvro};
use acemq::schema_registry::SchemaRegistry;
use criterion::{Criterion, criterion_group, criterion_main};
use serde::{Deserialize, Serialize};

const SCHEMA: &str = r#"{"type":"record","name":"OrderPlaced","namespace":"org.acemq.test","fields":[{"name":"orderId","type":"string"},{"name":"totalCents","type":"long"},{"name":"tenant","type":"string"}]}"#;

#[derive(Clone, PartialEq, prost::Message)]
struct OrderPlacedProto {
    #[prost(string, tag = "1")]
    order_id: String,
    #[prost(int64, tag = "2")]
    total_cents: i64,
    #[prost(string, tag = "3")]
    tenant: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderPlaced {
    order_id: String,
    total_cents: i64,
    tenant: String,
}

fn round_trip<T, C: Encode<T> + Decode<T>>(codec: &C, payload: &T) -> T {
    let body = codec.encode(black_box(payload)).expect("encodes");
    codec.decode(black_box(&body)).expect("decodes")
}

fn registered() -> RegisteredAvro {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(SchemaRegistry::in_memory().codec(SCHEMA))
        .expect("registered")
}

fn codecs(c: &mut Criterion) {
    let order = OrderPlaced {
        order_id: "o-1".into(),
        total_cents: 4250,
        tenant: "acme".into(),
    };
    let proto = OrderPlacedProto {
        order_id: order.order_id.clone(),
        total_cents: order.total_cents,
        tenant: order.tenant.clone(),
    };
    let avro = Avro::new(SCHEMA).unwrap();
    let registered = registered();

    let mut group = c.benchmark_group("codec_round_trip");
    group.bench_function("json", |b| b.iter(|| round_trip(&Json, &order)));
    group.bench_function("protobuf", |b| b.iter(|| round_trip(&Protobuf, &proto)));
    group.bench_function("avro_fixed", |b| b.iter(|| round_trip(&avro, &order)));
    group.bench_function("avro_registered", |b| {
        b.iter(|| round_trip(&registered, &order));
    });
    group.finish();
}

criterion_group!(benches, codecs);
criterion_main!(benches);
