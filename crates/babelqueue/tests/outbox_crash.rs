//! On the real PostgreSQL, relayed to RabbitMQ and to Redis: a process killed with SIGKILL
//! right after it committed a business row and its outbox envelope, before any relay ran, loses
//! nothing: the next relay publishes the envelope, once.
//!
//! The test runs this test binary again as the writing process (the ignored test
//! `child_writer`, selected by name), waits for it to report the commit, kills it, and relays.

mod runtime_support;

use std::sync::Arc;
use std::time::Duration;

use babelqueue::outbox::{Outbox, OutboxRelay, PgOutboxStore};
use babelqueue::{MakeOptions, make};
use polyq_testkit::brokers::TestBroker;
use polyq_testkit::postgres::DropTables;
use runtime_support::Bound;
use serde_json::json;
use sqlx::PgPool;

const QUEUE_VAR: &str = "BABELQUEUE_OUTBOX_CRASH_QUEUE";
const SUFFIX_VAR: &str = "BABELQUEUE_OUTBOX_CRASH_SUFFIX";
const COMMITTED: &str = "committed: ";
/// How long the child may take to start, connect and commit: a second process of a test binary
/// on a loaded machine.
const CHILD_READY: Duration = Duration::from_secs(30);

fn outbox_table(suffix: &str) -> String {
    format!("babelqueue_outbox_{suffix}")
}

fn business_table(suffix: &str) -> String {
    format!("orders_{suffix}")
}

async fn count(db: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(db)
        .await
        .unwrap()
}

async fn kill_9_after_the_commit_the_next_relay_publishes_it(broker: &'static TestBroker) {
    let db = PgPool::connect(&polyq_testkit::postgres_url())
        .await
        .expect("PostgreSQL is reachable (POLYQ_POSTGRES_URL)");
    let suffix = polyq_testkit::unique_name("crash").replace(['-', '.'], "_");
    let business = business_table(&suffix);
    let _dropped = DropTables::new([outbox_table(&suffix), business.clone()]);
    let store = PgOutboxStore::new(db.clone())
        .in_table(&outbox_table(&suffix))
        .unwrap();
    store.migrate().await.unwrap();
    sqlx::query(&format!("CREATE TABLE {business} (id BIGINT PRIMARY KEY)"))
        .execute(&db)
        .await
        .unwrap();
    let bound = Bound::new(broker).await;
    let queue = bound.name().to_owned();

    let (mut child, id) = polyq_testkit::child::spawn(
        "child_writer",
        &[(QUEUE_VAR, queue.as_str()), (SUFFIX_VAR, suffix.as_str())],
        COMMITTED,
        CHILD_READY,
    )
    .await;
    polyq_testkit::child::kill_9(&mut child).await;
    assert_eq!(
        bound.depth(&queue).await,
        0,
        "nothing was published before the kill"
    );
    assert_eq!(count(&db, &business).await, 1, "the business row committed");
    assert_eq!(store.status().await.unwrap().pending, 1, "and its envelope");

    let relay = OutboxRelay::new(store.clone(), Arc::new(bound.transport().clone()));
    let pass = relay.drain(10).await.unwrap();
    assert_eq!((pass.published, pass.failed), (1, 0));
    assert_eq!(bound.depth(&queue).await, 1, "published once");
    let taken = bound.take_and_ack(&queue).await;
    let decoded = babelqueue::decode(&taken.body).unwrap();
    assert_eq!(decoded.envelope.meta().unwrap().id(), Some(id.as_str()));
    assert_eq!(
        decoded.envelope.data_as::<serde_json::Value>().unwrap(),
        json!({ "order": 7 })
    );
    assert_eq!(relay.drain(10).await.unwrap().published, 0, "not again");
    assert_eq!(bound.depth(&queue).await, 0);
    let status = relay.status().await.unwrap();
    assert_eq!((status.pending, status.failed), (0, 0));

    db.close().await;
}
polyq_testkit::both_brokers!(
    on rabbitmq, redis;
    kill_9_after_the_commit_the_next_relay_publishes_it
);

/// The writing process of the kill test: commits an order and its envelope in one transaction,
/// reports the envelope's `meta.id`, then blocks until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as the child process of kill_9_after_the_commit_the_next_relay_publishes_it"]
async fn child_writer() {
    let queue = std::env::var(QUEUE_VAR).expect("started by the kill test");
    let suffix = std::env::var(SUFFIX_VAR).expect("started by the kill test");
    let db = PgPool::connect(&polyq_testkit::postgres_url())
        .await
        .unwrap();
    let outbox = Outbox::in_table(&outbox_table(&suffix)).unwrap();
    let envelope = make(
        "urn:babel:orders:created",
        &json!({ "order": 7 }),
        MakeOptions::default().queue(&queue),
    )
    .unwrap();
    let mut tx = db.begin().await.unwrap();
    sqlx::query(&format!(
        "INSERT INTO {} (id) VALUES (7)",
        business_table(&suffix)
    ))
    .execute(&mut *tx)
    .await
    .unwrap();
    outbox.write(&mut tx, &envelope).await.unwrap();
    tx.commit().await.unwrap();
    println!("{COMMITTED}{}", envelope.meta().unwrap().id().unwrap());
    std::future::pending::<()>().await;
}
