//! The outbox relay while RabbitMQ blocks its connection (a memory alarm) for longer than the
//! relay's lease. The publishes the block catches are answered once it clears, so the relay
//! keeps its batch meanwhile, renewing the lease, and counts the wait for confirms only over
//! the time it was not blocked: a second relay running beside it takes none of those rows, and
//! every row reaches the queue once.
//!
//! A memory alarm blocks every publisher of its node, so this test raises it on a RabbitMQ node
//! of its own (started on free ports, removed at the end), never on the shared broker.

#[macro_use]
#[path = "common/outbox_db.rs"]
mod outbox_db;

use std::collections::HashSet;
use std::time::Duration;

use acemq::AceMq;
use outbox_db::{Db, Store, Tables};
use polyq_amqp::QueueSpec;
use polyq_testkit::rabbitmq_node::{MemoryAlarm, OwnNode};
use serde_json::{Value, json};
use tokio::time::timeout;

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(60);
/// Renewed every third of it: a renewal late by two thirds of it would still hold the batch.
const LEASE: Duration = Duration::from_secs(4);
/// How long the alarm is held once the relay is blocked: two leases.
const ALARM: Duration = Duration::from_secs(8);
const ROWS: usize = 30;

async fn connect(node: &OwnNode) -> AceMq {
    AceMq::builder()
        .url(node.url())
        .blocked_timeout(Duration::from_millis(300))
        .connect()
        .await
        .expect("connect to the node of this test")
}

fn relay(tables: &Tables, mq: &AceMq) -> acemq::outbox::OutboxRelay {
    tables
        .relay(mq)
        .batch_size(ROWS)
        .window(1)
        .lease(LEASE)
        .confirm_timeout(Duration::from_millis(1500))
        .backoff(Duration::from_millis(10), Duration::from_millis(10))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_relay_blocked_for_longer_than_its_lease_keeps_its_batch_and_publishes_each_row_once() {
    let node = tokio::task::spawn_blocking(|| OwnNode::start("polyq-outbox-blocked"))
        .await
        .expect("the node started");
    let tables = Tables::new(Db::Postgres).await;
    let (mq, other) = (connect(&node).await, connect(&node).await);
    let queue = "polyq.outbox.blocked";
    mq.client()
        .declare_queue(&QueueSpec::new(queue))
        .await
        .expect("declare the queue");
    let publisher = mq.publisher::<Value>("", queue);
    in_transaction!(tables, true, |tx, outbox, _placeholder| {
        for id in 0..ROWS {
            outbox
                .record(&mut tx, &publisher, &json!({ "id": id }))
                .await
                .unwrap();
        }
    });

    let mut health = mq.client().health_watch();
    let alarm = tokio::task::block_in_place(|| MemoryAlarm::raise(&node));
    // The first publishes go out and are held by the block; once the client knows of it, the
    // rest of the batch is not sent.
    let blocked = tokio::spawn({
        let relay = relay(&tables, &mq);
        async move { relay.flush().await }
    });
    timeout(LIMIT, health.wait_for(|h| h.blocked().is_some()))
        .await
        .expect("the broker blocks the relay's connection")
        .expect("the client is open");

    // A rival pass that leased rows of the blocked batch would be blocked in its turn.
    let rival = relay(&tables, &other);
    alarm
        .hold_checking(ALARM, LEASE / 4, LIMIT, async || {
            let pass = rival.flush().await.expect("the rival's pass");
            assert_eq!(
                pass.claimed, 0,
                "a row of the blocked relay's batch was leased again while the block lasted"
            );
            assert!(
                !blocked.is_finished(),
                "the blocked relay gave up its batch"
            );
        })
        .await;

    let first = timeout(LIMIT, blocked)
        .await
        .expect("the blocked relay ends its pass once the alarm clears")
        .expect("the relay task ran")
        .expect("the pass");
    assert_eq!(first.claimed, ROWS);
    assert!(first.published >= 1, "no publish was caught by the block");
    assert_eq!(first.published + first.failed, ROWS, "{first:?}");
    // The rows the block kept from being sent come back after their backoff.
    let again = relay(&tables, &mq);
    let (again, rest) = tokio::join!(again.drain(100), rival.drain(100));
    let (again, rest) = (again.unwrap(), rest.unwrap());
    assert_eq!(first.published + again.published + rest.published, ROWS);
    assert_eq!(again.failed + rest.failed, 0);

    // Every row on the queue once: all were confirmed, so all are there.
    let mut ids = HashSet::new();
    while let Some(delivery) = mq.client().get(queue).await.expect("get") {
        let id = delivery
            .properties
            .message_id
            .clone()
            .expect("a message id");
        assert!(ids.insert(id), "a row was published twice");
        delivery.ack().await.expect("ack");
    }
    assert_eq!(ids.len(), ROWS);
    assert_eq!(
        tables
            .count(&tables.outbox, "WHERE published_at IS NULL")
            .await,
        0
    );
    drop((mq, other));
}
