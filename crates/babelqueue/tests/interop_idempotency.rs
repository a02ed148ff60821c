//! One Redis idempotency store shared by a Rust worker and a Python worker (`babelqueue` 1.24.0
//! from PyPI) of one queue. The Python SDK ships no Redis store, only the store protocol and its
//! in-memory store (established below); its `idempotency.wrap` over a three-method store in the Go
//! SDK's Redis layout, the layout `RedisStore` keeps, dedupes with the Rust worker both ways.
//!
//! The interpreter is `POLYQ_PYTHON`, which `scripts/test` sets up (`scripts/python-peer`).

#![cfg(feature = "redis")]

mod runtime_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use babelqueue::idempotency::{Idempotency, RedisStore};
use babelqueue::{BabelQueue, MakeOptions};
use redis::AsyncCommands;
use serde_json::{Value, json};

const URN: &str = "urn:babel:payments:captured";
const IDLE: Duration = Duration::from_millis(500);

/// Runs one command of tests/python/idempotency_peer.py and returns its JSON answer.
async fn peer(command: &str, args: Value) -> Value {
    runtime_support::python_peer("idempotency_peer.py", command, args).await
}

#[tokio::test]
async fn the_python_sdk_ships_no_redis_idempotency_store() {
    let answer = peer("stores", json!({})).await;
    assert_eq!(
        answer["stores"],
        json!(["IdempotencyStore", "InMemoryStore"]),
        "babelqueue.idempotency has a new store: check whether it can share RedisStore's layout"
    );
}

/// Runs a Rust worker for `max` messages; the meta.id of each handler run.
async fn rust_worker(queue: &BabelQueue, store: &RedisStore, max: u64) -> Vec<String> {
    let effects = Arc::new(Mutex::new(Vec::new()));
    let recorded = effects.clone();
    let report = queue
        .worker()
        .idempotent(Idempotency::seen_set(Arc::new(store.clone())))
        .handle(URN, move |job| {
            let id = job.meta().and_then(|meta| meta.id()).unwrap_or_default();
            recorded.lock().unwrap().push(id.to_owned());
            async { Ok::<_, babelqueue::Error>(()) }
        })
        .consume(max, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, max, "{report:?}");
    effects.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_worker_and_a_python_worker_share_one_redis_store() {
    let url = polyq_testkit::redis_url();
    let name = polyq_testkit::unique_name("bq-idem-py");
    let prefix = format!("{}{name}:", RedisStore::DEFAULT_PREFIX);
    // The store's keys hold the queue's name too.
    let _keys = polyq_testkit::brokers::DeleteQueues::new(&url, [&name]);
    let queue = BabelQueue::builder(&url)
        .queue(&name)
        .connect()
        .await
        .unwrap();
    let store = RedisStore::connect(&url)
        .await
        .unwrap()
        .prefix(&prefix)
        .unwrap();
    let first = babelqueue::make(URN, &json!({"payment": 1}), MakeOptions::default()).unwrap();
    let second = babelqueue::make(URN, &json!({"payment": 2}), MakeOptions::default()).unwrap();
    let id = |envelope: &babelqueue::Envelope| envelope.meta().unwrap().id().unwrap().to_owned();
    for envelope in [&first, &first, &second] {
        queue.publish_envelope(envelope, &[]).await.unwrap();
    }

    // Rust runs the first job; Python gets its duplicate, skips it, and runs the second.
    assert_eq!(rust_worker(&queue, &store, 1).await, vec![id(&first)]);
    let python = peer(
        "consume",
        json!({"url": url, "queue": name, "urn": URN, "prefix": prefix, "max": 2}),
    )
    .await;
    assert_eq!(python["processed"], 2, "{python}");
    assert_eq!(python["effects"], json!([id(&second)]));

    // A redelivery of what Python ran reaches Rust, which skips it.
    queue.publish_envelope(&second, &[]).await.unwrap();
    assert_eq!(rust_worker(&queue, &store, 1).await, Vec::<String>::new());

    let client = redis::Client::open(url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    for envelope in [&first, &second] {
        let value: Option<String> = connection
            .get(format!("{prefix}{}", id(envelope)))
            .await
            .unwrap();
        assert_eq!(value.as_deref(), Some("1"), "the Go layout's value");
    }
}
