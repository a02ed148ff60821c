//! The PostgreSQL schema store on the real database: one id for one schema registered by many
//! instances at once, ids that outlive the instances, the counter never reusing an id, and a
//! registered codec reading a body framed by another instance.

use std::sync::Arc;

use acemq::codec::{Decode, Encode, WriterSchemas};
use acemq::schema_registry::postgres::PostgresSchemaStore;
use acemq::schema_registry::{SchemaRegistry, SchemaRegistryError, SchemaStore};
use polyq_testkit::postgres::DropTables;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio::sync::Barrier;

const ORDER: &str = r#"{"type":"record","name":"Order","fields":[{"name":"total","type":"int"}]}"#;
const REFUND: &str =
    r#"{"type":"record","name":"Refund","fields":[{"name":"total","type":"int"}]}"#;

/// A unique table and its counter, dropped at the end of the test.
fn unique_table() -> (String, DropTables) {
    let table = polyq_testkit::unique_name("acemq_sr").replace('.', "_");
    let guard = DropTables::new([table.clone(), format!("{table}_seq")]);
    (table, guard)
}

async fn pool() -> PgPool {
    PgPool::connect(&polyq_testkit::postgres_url())
        .await
        .expect("connect to PostgreSQL")
}

async fn store(pool: PgPool, table: &str) -> PostgresSchemaStore {
    let store = PostgresSchemaStore::new(pool)
        .table(table)
        .expect("a plain name");
    store.migrate().await.expect("migrate");
    store
}

#[tokio::test]
async fn instances_registering_one_schema_at_once_get_one_id() {
    let (table, _drop) = unique_table();
    let pool = pool().await;
    store(pool.clone(), &table)
        .await
        .migrate()
        .await
        .expect("migrating twice is harmless");
    let instances = 8;
    let barrier = Arc::new(Barrier::new(instances));
    let mut tasks = Vec::new();
    for _ in 0..instances {
        // Each its own registry, so no cache answers for the database.
        let registry = SchemaRegistry::new(store(pool.clone(), &table).await);
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            registry.register(ORDER).await
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap().expect("registered"));
    }
    ids.dedup();
    assert_eq!(ids, [1], "one id for one schema");
    let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn ids_outlive_the_instance_that_gave_them() {
    let (table, _drop) = unique_table();
    let (order, refund) = {
        let registry = SchemaRegistry::new(store(pool().await, &table).await);
        let order = registry.register(ORDER).await.unwrap();
        let refund = registry.register(REFUND).await.unwrap();
        assert_eq!(registry.register(ORDER).await.unwrap(), order);
        (order, refund)
    };
    assert_ne!(order, refund);

    // A new pool, store and registry: nothing cached.
    let fresh = store(pool().await, &table).await;
    assert_eq!(fresh.schema(refund).await.unwrap().as_deref(), Some(REFUND));
    assert_eq!(fresh.schema(refund + 100).await.unwrap(), None);
    let registry = SchemaRegistry::new(fresh);
    assert!(registry.cached(order).is_none());
    assert_eq!(registry.register(REFUND).await.unwrap(), refund);
    assert_eq!(registry.register(ORDER).await.unwrap(), order);
    let spaced = ORDER.replace(':', ": ");
    assert_eq!(
        registry.register(&spaced).await.unwrap(),
        refund + 1,
        "another text is another schema, under an id never given before"
    );
    assert!(matches!(
        registry.schema(refund + 100).await,
        Err(SchemaRegistryError::Unknown(id)) if id == refund + 100
    ));
}

#[tokio::test]
async fn a_codec_reads_what_another_instance_framed() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Order {
        total: i32,
    }
    let (table, _drop) = unique_table();
    let producer = SchemaRegistry::new(store(pool().await, &table).await)
        .codec(ORDER)
        .await
        .unwrap();
    let body = producer.encode(&Order { total: 1250 }).unwrap();

    let consumer = SchemaRegistry::new(store(pool().await, &table).await)
        .codec(REFUND)
        .await
        .unwrap()
        .without_reader_schema();
    assert!(
        Decode::<Order>::decode(&consumer, &body).is_err(),
        "not fetched yet"
    );
    Decode::<Order>::prepare(&consumer, &body)
        .expect("the writer's schema is fetched first")
        .await
        .unwrap();
    assert_eq!(
        Decode::<Order>::decode(&consumer, &body).unwrap(),
        Order { total: 1250 }
    );
}

#[tokio::test]
async fn only_plain_identifiers_name_the_table() {
    let pool = pool().await;
    let store = || PostgresSchemaStore::new(pool.clone());
    for bad in ["", "1st", "schemas; DROP TABLE x", &"s".repeat(57)] {
        assert!(
            matches!(
                store().table(bad),
                Err(SchemaRegistryError::InvalidName { .. })
            ),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn the_table_is_shared_with_the_java_layout() {
    let (table, _drop) = unique_table();
    let pool = pool().await;
    let store = store(pool.clone(), &table).await;
    // A row as the Java port's JdbcSchemaRegistry writes it: its own fingerprint, its counter
    // advanced by `UPDATE ... SET last_id = last_id + 1`.
    let java = r#"{"type":"record","name":"Shipped","namespace":"org.acemq.test","fields":[{"name":"at","type":"long"}]}"#;
    sqlx::raw_sql(&format!(
        "UPDATE {table}_seq SET last_id = last_id + 1 WHERE only_row = 1; \
         INSERT INTO {table} (id, fingerprint, format, subject, definition, registered_at) \
         VALUES (1, 'java-fingerprint', 'avro', 'org.acemq.test.Shipped', '{java}', now()); \
         UPDATE {table}_seq SET last_id = last_id + 1 WHERE only_row = 1; \
         INSERT INTO {table} (id, fingerprint, format, subject, definition, registered_at) \
         VALUES (2, 'java-proto', 'protobuf', 'acemq.test.OrderPlaced', 'syntax', now())"
    ))
    .execute(&pool)
    .await
    .unwrap();

    let registry = SchemaRegistry::new(store);
    assert_eq!(
        registry
            .schema(1)
            .await
            .unwrap()
            .name()
            .unwrap()
            .to_string(),
        "org.acemq.test.Shipped"
    );
    assert!(matches!(
        registry.schema(2).await,
        Err(SchemaRegistryError::OtherFormat { id: 2, ref format }) if format == "protobuf"
    ));
    let id = registry.register(ORDER).await.unwrap();
    assert_eq!(id, 3, "after the ids the Java rows took");

    // What polyq wrote, read as the Java registry reads it.
    let (format, subject, definition): (String, String, String) = sqlx::query_as(&format!(
        "SELECT format, subject, definition FROM {table} WHERE id = $1"
    ))
    .bind(3_i32)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (format.as_str(), subject.as_str(), definition.as_str()),
        ("avro", "Order", ORDER)
    );
    let last: i32 = sqlx::query_scalar(&format!(
        "SELECT last_id FROM {table}_seq WHERE only_row = 1"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(last, 3, "the Java registry's next id follows");
}
