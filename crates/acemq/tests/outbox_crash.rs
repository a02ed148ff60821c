//! On RabbitMQ and the real PostgreSQL and MariaDB: a process killed with SIGKILL right after it
//! committed a business row and its outbox message, before any relay ran, loses nothing: the
//! next relay publishes the message, once.
//!
//! The test runs this test binary again as the writing process (the ignored test
//! `child_writer`, selected by name), waits for it to report the commit, kills it, and relays.

mod common;
#[macro_use]
#[path = "common/outbox_db.rs"]
mod outbox_db;

use acemq::AceMq;
use common::LIMIT;
use futures_util::StreamExt as _;
use outbox_db::{Db, Tables};
use polyq_amqp::{ConsumeOptions, QueueSpec};
use polyq_testkit::brokers::DeleteQueues;

const QUEUE_VAR: &str = "ACEMQ_OUTBOX_CRASH_QUEUE";
const TABLE_VAR: &str = "ACEMQ_OUTBOX_CRASH_TABLE";
const DB_VAR: &str = "ACEMQ_OUTBOX_CRASH_DB";
const COMMITTED: &str = "committed: ";

async fn kill_9_after_the_commit_the_next_relay_publishes_it(db: Db) {
    let suffix = polyq_testkit::unique_name("crash").replace(['-', '.'], "_");
    // Made here, so the child only writes.
    let tables = Tables::named(db, &suffix).await;
    let url = polyq_testkit::amqp_url();
    let mq = AceMq::connect(&url).await.unwrap();
    let queue = polyq_testkit::unique_name("acemq.outbox.crash");
    let _deleted = DeleteQueues::new(&url, [&queue]);
    mq.client()
        .declare_queue(&QueueSpec::new(queue.clone()))
        .await
        .unwrap();

    let db_name = format!("{db:?}");
    let (mut child, id) = common::spawn_child(
        "child_writer",
        &[
            (QUEUE_VAR, queue.as_str()),
            (TABLE_VAR, suffix.as_str()),
            (DB_VAR, db_name.as_str()),
        ],
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
    assert_eq!(
        tables.count(&tables.business, "").await,
        1,
        "the business row committed"
    );

    let relay = tables.relay(&mq).build().unwrap();
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
    assert_eq!(&delivered.body[..], br#"{"id":7}"#);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_the_commit_on_postgres() {
    kill_9_after_the_commit_the_next_relay_publishes_it(Db::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_the_commit_on_mysql() {
    kill_9_after_the_commit_the_next_relay_publishes_it(Db::MySql).await;
}

/// The writing process of the kill tests: commits an order and its message in one transaction,
/// reports the message id, then blocks until killed (so its tables, the parent's, are never
/// dropped from here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as the child process of the kill_9 tests"]
async fn child_writer() {
    let queue = std::env::var(QUEUE_VAR).expect("started by a kill test");
    let suffix = std::env::var(TABLE_VAR).expect("started by a kill test");
    let db = match std::env::var(DB_VAR).as_deref() {
        Ok("Postgres") => Db::Postgres,
        Ok("MySql") => Db::MySql,
        other => panic!("unknown database {other:?}"),
    };
    let tables = Tables::named(db, &suffix).await;
    let mq = AceMq::connect(&polyq_testkit::amqp_url()).await.unwrap();
    let envelope = tables.place(&mq, &queue, 7, true).await;
    println!("{COMMITTED}{}", envelope.id());
    std::future::pending::<()>().await;
}
