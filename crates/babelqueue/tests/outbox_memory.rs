//! The in-memory outbox store (ADR-0029) relayed through every binding, with the semantics of
//! the PostgreSQL one: a committed transaction's envelopes are published byte for byte, a
//! rolled-back one leaves none, two relays never publish a row twice, and a malformed row is
//! failed with its reason without stopping the relay.

mod runtime_support;

use std::collections::HashSet;
use std::sync::Arc;

use babelqueue::outbox::{MemoryOutboxStore, OutboxRelay};
use babelqueue::{Envelope, MakeOptions, make};
use polyq_testkit::brokers::TestBroker;
use runtime_support::Bound;
use serde_json::json;

fn order(queue: &str, id: i64) -> Envelope {
    make(
        "urn:babel:orders:created",
        &json!({ "id": id, "note": "café / ünïcode" }),
        MakeOptions::default().queue(queue),
    )
    .unwrap()
}

async fn commits_or_rolls_back(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    let queue = bound.name().to_owned();
    let store = MemoryOutboxStore::new();
    let mut rolled_back = store.begin();
    rolled_back.write(&order(&queue, 1)).unwrap();
    rolled_back.rollback();
    let mut dropped = store.begin();
    dropped.write(&order(&queue, 2)).unwrap();
    drop(dropped);
    let committed = order(&queue, 3);
    let mut tx = store.begin();
    tx.write(&committed).unwrap();
    tx.commit();

    let relay = OutboxRelay::new(store, Arc::new(bound.transport().clone()));
    let status = relay.status().await.unwrap();
    assert_eq!((status.pending, status.failed), (1, 0));
    let report = relay.drain(10).await.unwrap();
    assert_eq!((report.published, report.failed), (1, 0));
    let taken = bound.take_and_ack(&queue).await;
    assert_eq!(&taken.body[..], committed.encode().unwrap().as_bytes());
    assert_eq!(bound.depth(&queue).await, 0, "only the committed envelope");
    assert_eq!(
        relay.drain(10).await.unwrap().published,
        0,
        "published once"
    );
}
polyq_testkit::both_brokers!(on memory, rabbitmq, redis; commits_or_rolls_back);

async fn two_relays_never_publish_a_row_twice(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    let queue = bound.name().to_owned();
    let store = MemoryOutboxStore::new();
    let rows = 120;
    let mut tx = store.begin();
    for id in 0..rows {
        tx.write(&order(&queue, id)).unwrap();
    }
    tx.commit();
    let transport = Arc::new(bound.transport().clone());
    let one = OutboxRelay::new(store.clone(), transport.clone())
        .batch_size(7)
        .unwrap();
    let two = OutboxRelay::new(store, transport).batch_size(7).unwrap();
    let (a, b) = tokio::join!(one.drain(1000), two.drain(1000));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.published + b.published, rows as usize);
    assert_eq!(bound.depth(&queue).await, rows as u64);
    let mut ids = HashSet::new();
    for _ in 0..rows {
        let taken = bound.take_and_ack(&queue).await;
        let decoded = babelqueue::decode(&taken.body).unwrap();
        ids.insert(decoded.envelope.meta().unwrap().id().unwrap().to_owned());
    }
    assert_eq!(ids.len(), rows as usize);
}
polyq_testkit::both_brokers!(on memory, rabbitmq, redis; two_relays_never_publish_a_row_twice);

async fn a_malformed_row_is_failed_and_the_rest_published(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    let queue = bound.name().to_owned();
    let store = MemoryOutboxStore::new();
    let bad = store.save_raw("not an envelope", &queue);
    let blank = store.save_raw("{}", " ");
    let good = order(&queue, 1);
    let mut tx = store.begin();
    tx.write(&good).unwrap();
    tx.commit();

    let relay = OutboxRelay::new(store.clone(), Arc::new(bound.transport().clone()));
    let report = relay.drain(10).await.unwrap();
    assert_eq!((report.published, report.failed), (1, 2));
    let taken = bound.take_and_ack(&queue).await;
    assert_eq!(&taken.body[..], good.encode().unwrap().as_bytes());
    let reason = store.last_error(bad).expect("the reason is kept");
    assert!(
        reason.starts_with("the body is not a BabelQueue envelope"),
        "{reason}"
    );
    assert_eq!(
        store.last_error(blank).as_deref(),
        Some("the queue column is blank")
    );
    let status = relay.status().await.unwrap();
    assert_eq!((status.pending, status.failed), (0, 2));
    assert_eq!(
        relay.flush().await.unwrap(),
        Default::default(),
        "not offered again"
    );
}
polyq_testkit::both_brokers!(
    on memory, rabbitmq, redis;
    a_malformed_row_is_failed_and_the_rest_published
);
