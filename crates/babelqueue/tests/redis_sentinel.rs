//! Both Redis layouts behind Redis Sentinel (`redis+sentinel://`), on a master, a replica and
//! three Sentinels of the tests' own (`scripts/redis-sentinel`): a worker and a publisher carry
//! on after the master is killed mid-load, and `wait_replicas` makes a write wait for a replica.

#![cfg(feature = "redis")]
// A spawned worker's future is a deep type.
#![recursion_limit = "256"]

mod failover_support;
mod redis_support;

use std::time::{Duration, Instant};

use babelqueue::BabelQueue;
use babelqueue::transport::redis::{RedisErrorKind, RedisOptions};
use babelqueue::transport::{ConnectOptions, RedisLayout, Transport};
use failover_support::{URN, publish_and_consume_through};
use polyq_testkit::brokers::DeleteRedisKeys;
use polyq_testkit::redis_nodes::RedisNodes;
use serde_json::json;

/// Pushes and settles wait for the replica, so that every push acknowledged before the kill is
/// on the replica that is promoted.
const DURABLE: &str = "wait_replicas=1&wait_timeout_ms=1000";

/// The master before and after a switch, as `scripts/redis-sentinel failover` and `kill-master`
/// print it once every Sentinel names the new one.
fn switch(printed: &str) -> (String, String) {
    let (from, to) = printed
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("not a switch of masters: {printed:?}"));
    (from.to_owned(), to.to_owned())
}

async fn master_killed_mid_load(layout: RedisLayout) {
    let nodes = RedisNodes::sentinel();
    let url = format!("{}?{DURABLE}", nodes.url());
    let before = nodes.run(&["master"]).trim().to_owned();
    let name = polyq_testkit::unique_name("bq-sentinel");
    let mut switched = String::new();
    let report = publish_and_consume_through(&url, layout, &name, || {
        tokio::task::block_in_place(|| {
            switched = nodes.run(&["kill-master"]);
            // The killed node comes back as a replica of the new master, so that writes can be
            // acknowledged by a replica again.
            nodes.run(&["start"]);
        });
    })
    .await;
    let (killed, promoted) = switch(&switched);
    assert_eq!(
        killed, before,
        "the master killed is the one the load began on"
    );
    assert_ne!(promoted, killed, "the Sentinels promoted the replica");
    assert_eq!(
        nodes.run(&["master"]).trim(),
        promoted,
        "every Sentinel still names the promoted replica"
    );
    report.assert_nothing_lost();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_layout_carries_on_after_the_master_is_killed() {
    master_killed_mid_load(RedisLayout::Default).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn laravel_layout_carries_on_after_the_master_is_killed() {
    master_killed_mid_load(RedisLayout::Laravel).await;
}

async fn connect(url: &str, layout: RedisLayout, queue: &str) -> babelqueue::Result<BabelQueue> {
    BabelQueue::builder(url)
        .queue(queue)
        .options(ConnectOptions::default().redis_layout(layout))
        .connect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_replica_pushes_and_settles_are_acknowledged() {
    let nodes = RedisNodes::sentinel();
    let url = format!("{}?{DURABLE}", nodes.url());
    for layout in [RedisLayout::Default, RedisLayout::Laravel] {
        let name = polyq_testkit::unique_name("bq-sentinel-wait");
        let queue = connect(&url, layout, &name).await.unwrap();
        queue.publish(URN, &json!({"n": 1})).await.unwrap();
        let transport = queue.transport();
        let reserved = transport
            .reserve(&name, Duration::from_secs(5))
            .await
            .unwrap()
            .expect("the message just published");
        transport.ack(&reserved.receipt).await.unwrap();
        assert_eq!(transport.depth(&name).await.unwrap(), 0, "{layout:?}");
    }
}

#[tokio::test]
async fn without_a_replica_a_push_fails_after_the_timeout_and_stays_done() {
    let base = polyq_testkit::redis_url();
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{separator}wait_replicas=1&wait_timeout_ms=300");
    for layout in [RedisLayout::Default, RedisLayout::Laravel] {
        let name = polyq_testkit::unique_name("bq-wait-no-replica");
        let _keys = DeleteRedisKeys::new(&base, [&name]);
        let queue = connect(&url, layout, &name).await.unwrap();
        let started = Instant::now();
        let error = queue.publish(URN, &json!({"n": 1})).await.unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(300), "{error}");
        match &error {
            babelqueue::Error::Redis { kind, message, .. } => {
                assert_eq!(*kind, RedisErrorKind::Unreplicated);
                assert!(message.contains("only 0 of the 1 replicas"), "{message}");
            }
            other => panic!("expected an unreplicated write, got {other:?}"),
        }
        assert!(error.may_have_been_published() && !error.is_transient());
        // Done on the master all the same: WAIT does not undo.
        let plain = connect(&base, layout, &name).await.unwrap();
        assert_eq!(plain.transport().depth(&name).await.unwrap(), 1);
    }
}

#[tokio::test]
async fn replica_acknowledgements_need_a_timeout_below_the_response_timeout() {
    let options = ConnectOptions::default().redis(
        RedisOptions::new()
            .response_timeout(Duration::from_secs(1))
            .wait_for_replicas(1, Duration::from_secs(2)),
    );
    let error = BabelQueue::builder(polyq_testkit::redis_url())
        .queue("unused")
        .options(options)
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            babelqueue::Error::InvalidOption {
                option: "wait_for_replicas",
                ..
            }
        ),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_service_fails_to_connect_naming_it() {
    let nodes = RedisNodes::sentinel();
    let url = nodes.url().replace("/polyq", "/no-such-service");
    let error = connect(&url, RedisLayout::Default, "unused")
        .await
        .unwrap_err();
    assert!(
        matches!(error, babelqueue::Error::Redis { .. }) && error.to_string().contains("connect"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_the_sentinels_run_is_followed_to_the_new_master() {
    let nodes = RedisNodes::sentinel();
    let url = format!("{}?{DURABLE}", nodes.url());
    let name = polyq_testkit::unique_name("bq-sentinel-failover");
    let queue = connect(&url, RedisLayout::Default, &name).await.unwrap();
    queue.publish(URN, &json!({"n": 1})).await.unwrap();
    let before = nodes.run(&["master"]).trim().to_owned();
    let (from, to) = switch(&tokio::task::block_in_place(|| nodes.run(&["failover"])));
    assert_eq!(from, before);
    assert_ne!(to, from, "the Sentinels promoted the replica");
    // The old master answers READONLY now: the first write after the switch may fail
    // transiently, the next ones go to the new master.
    let started = Instant::now();
    loop {
        match queue.publish(URN, &json!({"n": 2})).await {
            Ok(_) => break,
            Err(error) if error.is_transient() && started.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("publishing after the failover: {error}"),
        }
    }
    let transport = queue.transport();
    for _ in 0..2 {
        let reserved = transport
            .reserve(&name, Duration::from_secs(5))
            .await
            .unwrap()
            .expect("both messages, the one from before the failover too");
        transport.ack(&reserved.receipt).await.unwrap();
    }
    assert_eq!(transport.depth(&name).await.unwrap(), 0);
}
