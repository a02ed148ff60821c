//! Both Redis layouts on a Redis Cluster (`redis+cluster://`) of three masters with a replica
//! each, of the tests' own (`scripts/redis-cluster`): a queue named with a hash tag keeps all
//! its keys in one slot and survives its master being killed mid-load; a queue whose keys would
//! span slots is refused before anything is sent.

#![cfg(feature = "redis")]
// A spawned worker's future is a deep type.
#![recursion_limit = "256"]

mod failover_support;

use std::time::Duration;

use babelqueue::BabelQueue;
use babelqueue::transport::redis::RedisErrorKind;
use babelqueue::transport::{ConnectOptions, RedisLayout, Transport};
use failover_support::{URN, publish_and_consume_through};
use polyq_testkit::redis_nodes::RedisNodes;
use serde_json::json;

/// A queue name with a hash tag: every key either layout derives from it is in one slot.
fn tagged(prefix: &str) -> String {
    format!("{{{}}}", polyq_testkit::unique_name(prefix))
}

async fn master_killed_mid_load(layout: RedisLayout) {
    let nodes = RedisNodes::cluster();
    let url = format!("{}?wait_replicas=1&wait_timeout_ms=1000", nodes.url());
    let name = tagged("bq-cluster");
    let before = nodes.run(&["master", &name]);
    let report = publish_and_consume_through(&url, layout, &name, || {
        tokio::task::block_in_place(|| {
            nodes.run(&["kill-master", &name]);
            // Back as a replica of the promoted one, so that writes are acknowledged again.
            nodes.run(&["start"]);
        });
    })
    .await;
    let after = nodes.run(&["master", &name]);
    assert_ne!(before, after, "a replica took over the queue's slot");
    report.assert_nothing_lost();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_layout_carries_on_after_its_master_is_killed() {
    master_killed_mid_load(RedisLayout::Default).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn laravel_layout_carries_on_after_its_master_is_killed() {
    master_killed_mid_load(RedisLayout::Laravel).await;
}

async fn connect(url: &str, layout: RedisLayout, queue: &str) -> BabelQueue {
    BabelQueue::builder(url)
        .queue(queue)
        .options(ConnectOptions::default().redis_layout(layout))
        .connect()
        .await
        .unwrap()
}

fn assert_cross_slot(error: &babelqueue::Error, advice: &str) {
    match error {
        babelqueue::Error::Redis { kind, message, .. } => {
            assert_eq!(*kind, RedisErrorKind::CrossSlot, "{error}");
            assert!(message.contains(advice), "{message}");
            assert!(message.contains("nothing was sent"), "{message}");
        }
        other => panic!("expected a cross-slot refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_whose_keys_span_slots_is_refused_before_anything_is_sent() {
    let nodes = RedisNodes::cluster();
    let url = nodes.url();
    for layout in [RedisLayout::Default, RedisLayout::Laravel] {
        let name = polyq_testkit::unique_name("bq-untagged");
        let queue = connect(&url, layout, &name).await;
        let transport = queue.transport();
        let advice = format!("\"{{{name}}}\" instead of \"{name}\"");
        let error = queue.publish(URN, &json!({"n": 1})).await.unwrap_err();
        assert_cross_slot(&error, &advice);
        let error = transport.reserve(&name, Duration::ZERO).await.unwrap_err();
        assert_cross_slot(&error, &advice);
        assert!(!error.is_transient());
        assert_eq!(
            transport.depth(&name).await.unwrap(),
            0,
            "nothing was written"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_onto_a_queue_of_another_slot_is_refused_and_the_reservation_kept() {
    let nodes = RedisNodes::cluster();
    let url = nodes.url();
    for layout in [RedisLayout::Default, RedisLayout::Laravel] {
        let name = tagged("bq-retry-from");
        let elsewhere = tagged("bq-retry-to");
        let queue = connect(&url, layout, &name).await;
        let transport = queue.transport();
        queue.publish(URN, &json!({"n": 1})).await.unwrap();
        let reserved = transport
            .reserve(&name, Duration::from_secs(5))
            .await
            .unwrap()
            .expect("the message just published");
        let error = transport
            .retry(
                &reserved.receipt,
                &elsewhere,
                reserved.body.clone(),
                &[],
                Duration::ZERO,
            )
            .await
            .unwrap_err();
        assert_cross_slot(&error, "same tag");
        transport.ack(&reserved.receipt).await.unwrap();
        assert_eq!(transport.depth(&elsewhere).await.unwrap(), 0);
    }
}
