//! `polyq idempotency purge` on the real PostgreSQL: for each family's layout it removes the
//! expired rows and keeps the live ones, and says how many went; on Redis it says why there is
//! nothing to do.

mod common;

use acemq::idempotency::IdempotencyStore as _;
use acemq::idempotency::postgres::PostgresIdempotencyStore;
use babelqueue::idempotency::{
    ClaimingStore as _, IdempotencyStore as _, PostgresClaimingStore, PostgresStore,
};
use common::{failure, polyq, success_lines};
use serde_json::Value;
use sqlx::PgPool;

fn unique_table(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        polyq_testkit::unique_name("purge").replace(['-', '.'], "_")
    )
}

fn purge(layout: &str, table: &str) -> Value {
    let db = polyq_testkit::postgres_url();
    let args = [
        "idempotency",
        "purge",
        "--db",
        &db,
        "--layout",
        layout,
        "--table",
        table,
    ];
    let lines = success_lines(polyq(&args), &args);
    assert_eq!(lines.len(), 1, "{lines:?}");
    serde_json::from_str(&lines[0]).unwrap()
}

async fn count(db: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(db)
        .await
        .unwrap()
}

async fn drop_table(db: &PgPool, table: &str) {
    sqlx::query(&format!("DROP TABLE {table}"))
        .execute(db)
        .await
        .unwrap();
}

#[tokio::test]
async fn acemq_expired_claims_go_and_live_ones_stay() {
    let db = PgPool::connect(&polyq_testkit::postgres_url())
        .await
        .unwrap();
    let table = unique_table("acemq_idem");
    let store = PostgresIdempotencyStore::new(db.clone())
        .table(&table)
        .unwrap();
    store.migrate().await.unwrap();
    store.claim("live-claim").await.unwrap();
    store.confirm("live-confirmed").await.unwrap();
    // A crashed handler's claim and a confirmation past its retention, as the database sees them.
    for (key, state) in [("dead-claim", "CLAIMED"), ("old-confirmed", "CONFIRMED")] {
        sqlx::query(&format!(
            "INSERT INTO {table} (message_id, state, claimed_by, recorded_at, expires_at) \
             VALUES ($1, $2, 'crashed', now() - interval '1 hour', now() - interval '1 minute')"
        ))
        .bind(key)
        .bind(state)
        .execute(&db)
        .await
        .unwrap();
    }
    let line = purge("acemq", &table);
    assert_eq!(line["removed"], 2, "{line}");
    assert_eq!(line["table"], table.as_str());
    assert_eq!(count(&db, &table).await, 2);
    assert_eq!(purge("acemq", &table)["removed"], 0);
    drop_table(&db, &table).await;
}

#[tokio::test]
async fn babel_seen_set_ids_past_their_ttl_go() {
    let db = PgPool::connect(&polyq_testkit::postgres_url())
        .await
        .unwrap();
    let table = unique_table("babel_seen");
    let store = PostgresStore::new(db.clone()).table(&table).unwrap();
    store.migrate().await.unwrap();
    store.remember("kept-for-ever").await.unwrap();
    sqlx::query(&format!(
        "INSERT INTO {table} (message_id, expires_at) VALUES ('expired', now() - interval '1 second')"
    ))
    .execute(&db)
    .await
    .unwrap();
    let line = purge("babel-seen-set", &table);
    assert_eq!(line["removed"], 1, "{line}");
    assert!(store.seen("kept-for-ever").await.unwrap());
    assert_eq!(count(&db, &table).await, 1);
    drop_table(&db, &table).await;
}

#[tokio::test]
async fn babel_claiming_expired_claims_go_and_commits_stay() {
    let db = PgPool::connect(&polyq_testkit::postgres_url())
        .await
        .unwrap();
    let table = unique_table("bq_idem");
    let store = PostgresClaimingStore::new(db.clone())
        .table(&table)
        .unwrap();
    store.migrate().await.unwrap();
    store.remember("committed").await.unwrap();
    assert!(
        store
            .claim("live", std::time::Duration::from_secs(600))
            .await
            .unwrap()
    );
    sqlx::query(&format!(
        "INSERT INTO {table} (message_id, state, expires_at) \
         VALUES ('dead', 'claimed', extract(epoch from now())::bigint - 60)"
    ))
    .execute(&db)
    .await
    .unwrap();
    let line = purge("babel-claiming", &table);
    assert_eq!(line["removed"], 1, "{line}");
    assert_eq!(count(&db, &table).await, 2);
    drop_table(&db, &table).await;
}

#[test]
fn redis_has_nothing_to_purge_and_says_why() {
    let url = polyq_testkit::redis_url();
    let args = ["idempotency", "purge", "--db", &url];
    let lines = success_lines(polyq(&args), &args);
    let line: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(line["store"], "redis");
    assert_eq!(line["removed"], 0);
    assert!(line["why"].as_str().unwrap().contains("TTL"), "{line}");
}

#[test]
fn a_missing_table_or_a_foreign_url_is_a_clear_error() {
    let db = polyq_testkit::postgres_url();
    let table = unique_table("absent");
    let stderr = failure(&[
        "idempotency",
        "purge",
        "--db",
        &db,
        "--layout",
        "acemq",
        "--table",
        &table,
    ]);
    assert!(
        stderr.contains(&format!("there is no table `{table}`")),
        "{stderr}"
    );
    let stderr = failure(&["idempotency", "purge", "--db", "amqp://127.0.0.1"]);
    assert!(
        stderr.contains("not a postgres:// or redis:// URL"),
        "{stderr}"
    );
}
