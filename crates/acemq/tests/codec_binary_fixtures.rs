//! `codec-interop-fixtures.json` (the Protobuf and Avro samples, written by the Go and Java
//! ports) and `avro-resolution-fixtures.json` (written by the Java port's registered codec):
//! every body decodes to its expected value, polyq writes the expected value to the same
//! bytes, and a registered body resolves as the file's `resolved` column says with a reader
//! schema and as its `writerShape` column says without one.

use std::path::PathBuf;

use acemq::codec::{Avro, CodecError, Decode, Encode, Protobuf, RegisteredAvro};
use acemq::schema_registry::{InMemorySchemaStore, SchemaRegistry};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

fn fixtures(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/acemq")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).expect("vendored fixtures"))
        .expect("fixtures are JSON")
}

fn body(base64: &Value) -> Bytes {
    Bytes::from(
        STANDARD
            .decode(base64.as_str().expect("base64 text"))
            .expect("base64"),
    )
}

/// The Protobuf message the fixture's notes describe: `message OrderPlaced { string order_id
/// = 1; int64 total_cents = 2; string tenant = 3; }` in package `acemq.test`.
#[derive(Clone, PartialEq, prost::Message, Serialize)]
struct OrderPlacedProto {
    #[prost(string, tag = "1")]
    order_id: String,
    #[prost(int64, tag = "2")]
    total_cents: i64,
    #[prost(string, tag = "3")]
    tenant: String,
}

/// The record of the fixture's `avro_schema`.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderPlaced {
    order_id: String,
    total_cents: i64,
    tenant: String,
}

/// Decodes as a consumer does: what the codec needs fetched first, then the body.
async fn consume<T>(codec: &RegisteredAvro, body: &Bytes) -> Result<T, CodecError>
where
    RegisteredAvro: Decode<T>,
{
    if let Some(fetch) = Decode::<T>::prepare(codec, body) {
        fetch.await?;
    }
    codec.decode(body)
}

fn samples<'a>(fixtures: &'a Value, format: &str) -> Vec<&'a Value> {
    fixtures["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .filter(|s| s["format"] == format)
        .collect()
}

#[test]
fn protobuf_samples_decode_and_encode_to_the_same_bytes() {
    let f = fixtures("codec-interop-fixtures.json");
    let samples = samples(&f, "protobuf");
    assert_eq!(samples.len(), 1, "the Go sample");
    for sample in samples {
        let content_type = sample["content_type"].as_str();
        assert!(Decode::<OrderPlacedProto>::accepts(&Protobuf, content_type));
        let bytes = body(&sample["body_base64"]);
        let order: OrderPlacedProto = Protobuf.decode(&bytes).expect("decodes");
        assert_eq!(serde_json::to_value(&order).unwrap(), sample["expected"]);
        assert_eq!(
            Protobuf.encode(&order).unwrap(),
            bytes,
            "{}",
            sample["producer"]
        );
        assert_eq!(
            Some(Encode::<OrderPlacedProto>::content_type(&Protobuf)),
            content_type
        );
    }
}

#[test]
fn fixed_schema_avro_samples_decode_and_encode_byte_identical() {
    let f = fixtures("codec-interop-fixtures.json");
    let avro = Avro::new(f["avro_schema"].as_str().expect("schema text")).expect("schema");
    let samples = samples(&f, "avro");
    assert_eq!(samples.len(), 2, "Java and Go");
    for sample in samples {
        let producer = &sample["producer"];
        let content_type = sample["content_type"].as_str();
        assert!(Decode::<Value>::accepts(&avro, content_type));
        let bytes = body(&sample["body_base64"]);
        let as_value: Value = avro.decode(&bytes).expect("decodes");
        assert_eq!(as_value, sample["expected"], "{producer}");
        let order: OrderPlaced = avro.decode(&bytes).expect("decodes typed");
        let expected: OrderPlaced = serde_json::from_value(sample["expected"].clone()).unwrap();
        assert_eq!(order, expected, "{producer}");
        assert_eq!(avro.encode(&expected).unwrap(), bytes, "{producer}");
        assert_eq!(
            Some(Encode::<OrderPlaced>::content_type(&avro)),
            content_type
        );
    }
}

#[tokio::test]
async fn registered_avro_samples_decode_and_encode_byte_identical() {
    let f = fixtures("codec-interop-fixtures.json");
    let schema = f["avro_schema"].as_str().expect("schema text");
    let store = InMemorySchemaStore::new();
    store.insert(7, schema).expect("the fixtures' id");
    let codec = SchemaRegistry::new(store)
        .codec(schema)
        .await
        .expect("registered");
    assert_eq!(codec.schema_id(), 7, "the same text keeps its id");
    let samples = samples(&f, "avro-registered");
    assert_eq!(samples.len(), 2, "Java and Go");
    for sample in samples {
        let producer = &sample["producer"];
        let content_type = sample["content_type"].as_str();
        assert!(Decode::<Value>::accepts(&codec, content_type));
        let bytes = body(&sample["body_base64"]);
        let as_value: Value = consume(&codec, &bytes).await.expect("decodes");
        assert_eq!(as_value, sample["expected"], "{producer}");
        let expected: OrderPlaced = serde_json::from_value(sample["expected"].clone()).unwrap();
        assert_eq!(
            consume::<OrderPlaced>(&codec, &bytes).await.unwrap(),
            expected
        );
        assert_eq!(codec.encode(&expected).unwrap(), bytes, "{producer}");
        assert_eq!(
            Some(Encode::<OrderPlaced>::content_type(&codec)),
            content_type
        );
    }
}

#[tokio::test]
async fn a_registered_body_resolves_onto_a_reader_schema_and_reads_as_written_without() {
    let f = fixtures("avro-resolution-fixtures.json");
    let cases = f["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 2);
    for case in cases {
        let name = &case["case"];
        let id = u32::try_from(case["schemaId"].as_u64().unwrap()).unwrap();
        let writer = case["writerSchema"].as_str().unwrap();
        let reader = case["readerSchema"].as_str().unwrap();
        let bytes = body(&case["bodyBase64"]);
        assert_eq!(acemq::codec::frame(&bytes).unwrap().0, id, "{name}");

        // A fresh registry per reading, so each one fetches the writer's schema by id.
        let registry = || {
            let store = InMemorySchemaStore::new();
            store.insert(id, writer).expect("the case's id");
            SchemaRegistry::new(store)
        };
        let resolving = registry().codec(reader).await.unwrap();
        let resolved: Value = consume(&resolving, &bytes).await.expect("resolves");
        assert_eq!(resolved, case["resolved"], "{name}");

        let plain = resolving.without_reader_schema();
        let as_written: Value = consume(&plain, &bytes).await.expect("reads");
        assert_eq!(as_written, case["writerShape"], "{name}");

        // The writer's own schema as the reader's: resolving onto itself changes nothing.
        let onto_itself = registry().codec(writer).await.unwrap();
        assert_eq!(onto_itself.schema_id(), id, "{name}");
        let same: Value = consume(&onto_itself, &bytes).await.expect("reads");
        assert_eq!(same, case["writerShape"], "{name}");
    }
}

#[tokio::test]
async fn a_body_whose_schema_id_is_not_registered_is_refused_naming_the_id() {
    let f = fixtures("codec-interop-fixtures.json");
    let codec = SchemaRegistry::in_memory()
        .codec(f["avro_schema"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(codec.schema_id(), 1);
    let bytes = body(&samples(&f, "avro-registered")[0]["body_base64"]);
    let error = consume::<Value>(&codec, &bytes).await.unwrap_err();
    assert!(
        error
            .0
            .starts_with("schema id 7 is not in the schema registry"),
        "{error}"
    );
}
