//! On RabbitMQ and the real PostgreSQL: a process killed with SIGKILL right after it committed
//! a business row and its outbox message, before any relay ran, loses nothing: the next relay
//! publishes the message, once.
//!
//! The test runs this test binary again as the writing process (the ignored test
//! `child_writer`, selected by name), waits for it to report the commit, kills it, and relays.

mod common;

use acemq::AceMq;
use acemq::outbox::{Outbox, OutboxRelay};
use common::LIMIT;
use futures_util::StreamExt as _;
use polyq_amqp::{ConsumeOptions, QueueSpec};
use polyq_testkit::brokers::DeleteQueues;
use polyq_testkit::postgres::DropTables;
use serde_json::{Value, json};
use sqlx::PgPool;

const QUEUE_VAR: &str = "ACEMQ_OUTBOX_CRASH_QUEUE";
const TABLE_VAR: &str = "ACEMQ_OUTBOX_CRASH_TABLE";
const COMMITTED: &str = "committed: ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_the_commit_the_next_relay_publishes_it() {
    let db = PgPool::connect(&polyq_testkit::postgres_url())
        .await
        .expect("PostgreSQL is reachable (POLYQ_POSTGRES_URL)");
    let suffix = polyq_testkit::unique_name("crash").replace(['-', '.'], "_");
    let outbox = Outbox::in_table(&format!("acemq_outbox_{suffix}")).unwrap();
    let business = format!("orders_{suffix}");
    let _dropped = DropTables::new([outbox.table(), business.as_str()]);
    outbox.migrate(&db).await.unwrap();
    sqlx::query(&format!("CREATE TABLE {business} (id BIGINT PRIMARY KEY)"))
        .execute(&db)
        .await
        .unwrap();
    let url = polyq_testkit::amqp_url();
    let mq = AceMq::connect(&url).await.unwrap();
    let queue = polyq_testkit::unique_name("acemq.outbox.crash");
    let _deleted = DeleteQueues::new(&url, [&queue]);
    mq.client()
        .declare_queue(&QueueSpec::new(queue.clone()))
        .await
        .unwrap();

    let (mut child, id) = common::spawn_child(
        "child_writer",
        &[(QUEUE_VAR, queue.as_str()), (TABLE_VAR, suffix.as_str())],
        COMMITTED,
    )
    .await;
    polyq_testkit::child::kill_9(&mut child).await;
    assert_eq!(
        mq.client()
            .inspect_queue(&queue)
            .await
            .unwrap()
            .message_count,
        0,
        "nothing was published before the kill"
    );
    let orders: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {business}"))
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(orders, 1, "the business row committed");

    let relay = OutboxRelay::builder(db.clone(), &mq)
        .table(outbox.table())
        .build()
        .unwrap();
    let pass = relay.drain(10).await.unwrap();
    assert_eq!((pass.published, pass.failed), (1, 0));
    let mut consumer = mq
        .client()
        .consume(&queue, &ConsumeOptions::default())
        .await
        .unwrap();
    let delivered = tokio::time::timeout(LIMIT, consumer.next())
        .await
        .expect("published in time")
        .unwrap()
        .unwrap();
    assert_eq!(
        delivered.properties.message_id.as_deref(),
        Some(id.as_str())
    );
    assert_eq!(&delivered.body[..], br#"{"order":7}"#);
    delivered.ack().await.unwrap();
    consumer.cancel().await.unwrap();
    assert_eq!(
        relay.drain(10).await.unwrap().published,
        0,
        "published once"
    );
    assert_eq!(
        mq.client()
            .inspect_queue(&queue)
            .await
            .unwrap()
            .message_count,
        0
    );

    mq.close().await.unwrap();
}

/// The writing process of the kill test: commits an order and its message in one transaction,
/// reports the message id, then blocks until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as the child process of kill_9_after_the_commit_the_next_relay_publishes_it"]
async fn child_writer() {
    let queue = std::env::var(QUEUE_VAR).expect("started by the kill test");
    let suffix = std::env::var(TABLE_VAR).expect("started by the kill test");
    let db = PgPool::connect(&polyq_testkit::postgres_url())
        .await
        .unwrap();
    let mq = AceMq::connect(&polyq_testkit::amqp_url()).await.unwrap();
    let outbox = Outbox::in_table(&format!("acemq_outbox_{suffix}")).unwrap();
    let publisher = mq.publisher::<Value>("", queue.as_str());
    let mut tx = db.begin().await.unwrap();
    sqlx::query(&format!("INSERT INTO orders_{suffix} (id) VALUES (7)"))
        .execute(&mut *tx)
        .await
        .unwrap();
    let envelope = outbox
        .record(&mut tx, &publisher, &json!({"order": 7}))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    println!("{COMMITTED}{}", envelope.id());
    std::future::pending::<()>().await;
}
