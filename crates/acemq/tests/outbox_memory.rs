//! The in-memory outbox, relayed to the embedded broker and to RabbitMQ, with the semantics of
//! the PostgreSQL one: a committed transaction's messages are published with the bytes the
//! publisher would send, a rolled-back one leaves none, two relays never publish a message twice,
//! and a refused publish is retried after its backoff with its reason kept.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use acemq::outbox::{MemoryOutbox, OutboxRelay};
use common::{Env, LIMIT};
use polyq_amqp::QueueSpec;
use serde_json::{Value, json};

async fn commits_or_rolls_back(env: &'static Env) {
    let queue = env.queue("outbox-mem-tx").await;
    let outbox = MemoryOutbox::new();
    let publisher = env.mq.publisher::<Value>("", queue.as_str());
    let mut rolled_back = outbox.begin();
    rolled_back.record(&publisher, &json!({"id": 1})).unwrap();
    rolled_back.rollback();
    let mut dropped = outbox.begin();
    dropped.record(&publisher, &json!({"id": 2})).unwrap();
    drop(dropped);
    assert_eq!(outbox.status().pending, 0, "nothing before a commit");

    let mut tx = outbox.begin();
    let committed = tx.record(&publisher, &json!({"id": 3})).unwrap();
    tx.commit();
    let status = outbox.status();
    assert_eq!((status.pending, status.failed), (1, 0));
    assert!(status.oldest_pending_age.is_some());

    let relay = OutboxRelay::in_memory(&outbox, &env.mq).build().unwrap();
    let pass = relay.drain(10).await.unwrap();
    assert_eq!((pass.published, pass.failed), (1, 0));
    publisher
        .send_with(&json!({"id": 3}), committed.clone())
        .await
        .unwrap();
    let [relayed, sent] = <[_; 2]>::try_from(env.take(&queue, 2).await).unwrap();
    assert_eq!(relayed.body, sent.body);
    assert_eq!(relayed.properties, sent.properties);
    assert_eq!(
        relayed.properties.message_id.as_deref(),
        Some(committed.id())
    );
    assert_eq!(relay.status().await.unwrap().pending, 0);
    assert_eq!(
        relay.drain(10).await.unwrap().published,
        0,
        "published once"
    );
}
polyq_testkit::both_brokers!(commits_or_rolls_back);

async fn two_relays_never_publish_a_message_twice(env: &'static Env) {
    let queue = env.queue("outbox-mem-two").await;
    let outbox = MemoryOutbox::new();
    let publisher = env.mq.publisher::<Value>("", queue.as_str());
    let rows = 120;
    let mut tx = outbox.begin();
    for id in 0..rows {
        tx.record(&publisher, &json!({ "id": id })).unwrap();
    }
    tx.commit();
    let one = OutboxRelay::in_memory(&outbox, &env.mq)
        .batch_size(7)
        .build()
        .unwrap();
    let two = OutboxRelay::in_memory(&outbox, &env.mq)
        .batch_size(7)
        .build()
        .unwrap();
    let (a, b) = tokio::join!(one.drain(1000), two.drain(1000));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.published + b.published, rows);
    assert_eq!(env.count(&queue).await, rows as u32);
    let ids: HashSet<_> = env
        .take(&queue, rows)
        .await
        .into_iter()
        .map(|d| d.properties.message_id.unwrap())
        .collect();
    assert_eq!(ids.len(), rows);
}
polyq_testkit::both_brokers!(two_relays_never_publish_a_message_twice);

async fn a_refused_publish_backs_off_and_is_published_later(env: &'static Env) {
    // Not declared yet: the mandatory publish comes back unroutable.
    let queue = polyq_testkit::unique_name("acemq.rt.outbox-mem-later");
    let outbox = MemoryOutbox::new();
    let mut tx = outbox.begin();
    let recorded = tx
        .record(
            &env.mq.publisher::<Value>("", queue.as_str()),
            &json!({"id": 1}),
        )
        .unwrap();
    tx.commit();
    // Long enough that the second pass below surely falls inside it, even on a loaded machine.
    let relay = OutboxRelay::in_memory(&outbox, &env.mq)
        .backoff(Duration::from_secs(2), Duration::from_secs(2))
        .build()
        .unwrap();
    let pass = relay.flush().await.unwrap();
    assert_eq!((pass.published, pass.failed), (0, 1));
    let reason = outbox
        .last_error(recorded.id())
        .expect("the reason is kept");
    assert!(reason.contains("unroutable"), "{reason}");
    assert_eq!(
        relay.flush().await.unwrap().claimed,
        0,
        "held back for its backoff"
    );
    assert_eq!(relay.status().await.unwrap().pending, 1);

    env.declare(QueueSpec::new(queue.clone())).await;
    let published = tokio::time::timeout(LIMIT, async {
        loop {
            if relay.flush().await.unwrap().published == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(published.is_ok(), "published once the backoff passed");
    assert_eq!(&env.next_in(&queue).await.body[..], br#"{"id":1}"#);
}
polyq_testkit::both_brokers!(a_refused_publish_backs_off_and_is_published_later);

/// A lease that a leased batch could outlive (its wait for a place in the window, then its own
/// confirms) is refused before the relay runs, so another relay never takes rows still in flight.
#[tokio::test]
async fn a_lease_shorter_than_two_confirm_timeouts_is_refused() {
    let mq = acemq::AceMq::connect("memory://outbox-lease")
        .await
        .unwrap();
    let outbox = MemoryOutbox::new();
    let refused = OutboxRelay::in_memory(&outbox, &mq)
        .lease(Duration::from_secs(60))
        .confirm_timeout(Duration::from_secs(30))
        .build()
        .map(drop);
    assert!(
        matches!(
            &refused,
            Err(acemq::outbox::OutboxError::InvalidOption {
                option: "confirm_timeout",
                ..
            })
        ),
        "{refused:?}"
    );
    let accepted = OutboxRelay::in_memory(&outbox, &mq)
        .lease(Duration::from_secs(61))
        .confirm_timeout(Duration::from_secs(30))
        .build();
    assert!(accepted.is_ok(), "{:?}", accepted.err());
    assert!(
        OutboxRelay::in_memory(&outbox, &mq).build().is_ok(),
        "the defaults"
    );
}
