//! The outbox relay while RabbitMQ blocks its connection (a memory alarm) for longer than the
//! store's lease. The publishes the block catches are confirmed once it clears, so the relay
//! keeps its claim meanwhile, renewing it: a second relay running beside it takes none of
//! those rows, and every row reaches the queue once.
//!
//! A memory alarm blocks every publisher of its node, so this test raises it on a RabbitMQ node
//! of its own (started on free ports, removed at the end), never on the shared broker.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use babelqueue::outbox::{Outbox, OutboxRelay, PgOutboxStore};
use babelqueue::transport::{AmqpOptions, AmqpTransport};
use babelqueue::{MakeOptions, make};
use polyq_amqp::{Client, ClientOptions};
use polyq_testkit::postgres::DropTables;
use polyq_testkit::rabbitmq_node::{MemoryAlarm, OwnNode};
use serde_json::json;
use sqlx::PgPool;
use tokio::time::timeout;

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(60);
/// Renewed every third of it: a renewal late by two thirds of it would still hold the batch.
const LEASE: Duration = Duration::from_secs(4);
/// How long the alarm is held once the relay is blocked: two leases.
const ALARM: Duration = Duration::from_secs(8);
const ROWS: usize = 30;

async fn connect(node: &OwnNode) -> Client {
    let options = ClientOptions::default().blocked_timeout(Duration::from_millis(300));
    Client::connect_with(&node.url(), options)
        .await
        .expect("connect to the node of this test")
}

fn relay(store: &PgOutboxStore, client: &Client) -> OutboxRelay<AmqpTransport> {
    let transport = AmqpTransport::with_client(client.clone(), AmqpOptions::default());
    OutboxRelay::new(store.clone(), Arc::new(transport))
        .batch_size(ROWS)
        .unwrap()
        .window(1)
        .unwrap()
        .backoff(Duration::from_millis(10), Duration::from_millis(10))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_relay_blocked_for_longer_than_the_lease_keeps_its_claim_and_publishes_each_row_once() {
    let node = tokio::task::spawn_blocking(|| OwnNode::start("polyq-bq-outbox-blocked"))
        .await
        .expect("the node started");
    let db = PgPool::connect(&polyq_testkit::postgres_url())
        .await
        .expect("PostgreSQL is reachable (POLYQ_POSTGRES_URL)");
    let table = format!(
        "babelqueue_outbox_{}",
        polyq_testkit::unique_name("t").replace(['-', '.'], "_")
    );
    let _dropped = DropTables::new([&table]);
    let store = PgOutboxStore::new(db.clone())
        .in_table(&table)
        .unwrap()
        .lease(LEASE);
    store.migrate().await.expect("migrate");
    let queue = "polyq.bq.outbox.blocked";
    let mut tx = db.begin().await.unwrap();
    for id in 0..ROWS {
        let envelope = make(
            "urn:babel:orders:created",
            &json!({ "id": id }),
            MakeOptions::default().queue(queue),
        )
        .unwrap();
        Outbox::in_table(&table)
            .unwrap()
            .write(&mut tx, &envelope)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    let (client, other) = (connect(&node).await, connect(&node).await);
    let mut health = client.health_watch();
    let alarm = tokio::task::block_in_place(|| MemoryAlarm::raise(&node));
    // The first publishes go out and are held by the block; the rest give up unsent.
    let blocked = tokio::spawn({
        let relay = relay(&store, &client);
        async move { relay.flush().await }
    });
    timeout(LIMIT, health.wait_for(|h| h.blocked().is_some()))
        .await
        .expect("the broker blocks the relay's connection")
        .expect("the client is open");

    // A rival pass that claimed rows of the blocked batch would be blocked in its turn.
    let rival = relay(&store, &other);
    alarm
        .hold_checking(ALARM, LEASE / 4, LIMIT, async || {
            let pass = rival.flush().await.expect("the rival's pass");
            assert_eq!(
                (pass.published, pass.failed),
                (0, 0),
                "a row of the blocked relay's batch was claimed again while the block lasted"
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
    assert!(first.published >= 1, "no publish was caught by the block");
    assert_eq!(first.published + first.failed, ROWS, "{first:?}");
    // The rows the block kept from being sent come back after their backoff.
    let again = relay(&store, &client);
    let (again, rest) = tokio::join!(again.drain(100), rival.drain(100));
    let (again, rest) = (again.unwrap(), rest.unwrap());
    assert_eq!(first.published + again.published + rest.published, ROWS);
    assert_eq!(again.failed + rest.failed, 0);

    // Every row on the queue once: all were confirmed, so all are there.
    let mut ids = HashSet::new();
    while let Some(delivery) = client.get(queue).await.expect("get") {
        let decoded = babelqueue::decode(&delivery.body).expect("an envelope");
        let id = decoded.envelope.meta().unwrap().id().unwrap().to_owned();
        assert!(ids.insert(id), "a row was published twice");
        delivery.ack().await.expect("ack");
    }
    assert_eq!(ids.len(), ROWS);
    let status = store.status().await.unwrap();
    assert_eq!((status.pending, status.failed), (0, 0));
}
