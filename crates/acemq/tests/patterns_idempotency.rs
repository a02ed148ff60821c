//! The idempotent consumer on every store (in memory, PostgreSQL, MariaDB, Redis) and both brokers: a
//! message delivered twice does its work once; a failed attempt releases its claim and a
//! successful one confirms it; a message another instance holds a live claim
//! on is republished unchanged until the lease expires and then handled; a store that cannot be
//! reached fails the delivery into the retry path, never acknowledging it. And the PostgreSQL
//! and MariaDB tables in the Java port's layout, read and written as the Java store does; and a
//! pipeline step with the same option.

mod common;
#[path = "common/stores.rs"]
mod stores;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use acemq::idempotency::mysql::MySqlIdempotencyStore;
use acemq::idempotency::postgres::PostgresIdempotencyStore;
use acemq::idempotency::{ClaimResult, IdempotencyStore, InMemoryIdempotencyStore};
use acemq::patterns::pipeline::Pipeline;
use acemq::retry::RetryPolicy;
use acemq::{Envelope, Message};
use common::{Env, LIMIT};
use polyq_amqp::{FieldValue, QueueSpec};
use polyq_testkit::brokers::Fixture as _;
use serde_json::{Value, json};
use stores::{Kind, Observed, with_backing};
use tokio::sync::mpsc;

async fn next<T>(receiver: &mut mpsc::UnboundedReceiver<T>, what: &str) -> T {
    tokio::time::timeout(LIMIT, receiver.recv())
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen in time"))
        .expect("sender open")
}

/// `each_store!(name)` runs `async fn name(env, kind)` on both brokers with every store.
macro_rules! each_store {
    ($name:ident) => {
        mod $name {
            use crate::stores::Kind;
            use polyq_testkit::brokers::Broker;

            each_store!(@tests $name;
                memory_broker_in_memory_store: Memory, InMemory;
                memory_broker_postgres_store: Memory, Postgres;
                memory_broker_mysql_store: Memory, MySql;
                memory_broker_redis_store: Memory, Redis;
                rabbitmq_in_memory_store: RabbitMq, InMemory;
                rabbitmq_postgres_store: RabbitMq, Postgres;
                rabbitmq_mysql_store: RabbitMq, MySql;
                rabbitmq_redis_store: RabbitMq, Redis;
            );
        }
    };
    (@tests $name:ident; $($test:ident: $broker:ident, $kind:ident;)+) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            polyq_testkit::brokers::run(Broker::$broker, |env: &'static crate::common::Env| {
                super::$name(env, Kind::$kind)
            })
            .await;
        }
    )+};
}

async fn two_consumers_do_the_work_of_a_duplicate_once(env: &'static Env, kind: Kind) {
    with_backing(kind, |backing| async move {
        let queue = env.queue("idem-twice").await;
        let effects = Arc::new(AtomicUsize::new(0));
        let (claims, mut claimed) = mpsc::unbounded_channel();
        let (done, mut handled) = mpsc::unbounded_channel();
        let mut consumers = Vec::new();
        for _ in 0..2 {
            let store = Observed {
                inner: backing.instance(Duration::from_secs(60)).await,
                claims: claims.clone(),
            };
            let effects = Arc::clone(&effects);
            let done = done.clone();
            let consumer = env
                .mq
                .consumer::<u32>(queue.as_str())
                .idempotent(store)
                .start(move |message: Message<u32>| {
                    let effects = Arc::clone(&effects);
                    let done = done.clone();
                    async move {
                        effects.fetch_add(1, Ordering::SeqCst);
                        done.send(message.envelope().id().to_owned()).ok();
                    }
                })
                .await
                .unwrap();
            consumers.push(consumer);
        }
        let publisher = env.mq.publisher::<u32>("", queue.as_str());
        let envelope = || Envelope::of("charge").id("charge-1").build().unwrap();
        publisher.send_with(&7, envelope()).await.unwrap();
        publisher.send_with(&7, envelope()).await.unwrap();

        assert_eq!(next(&mut handled, "the first delivery").await, "charge-1");
        // The second copy ends as a duplicate, possibly after being found in progress.
        let mut found = Vec::new();
        while !found.contains(&ClaimResult::AlreadyConfirmed) {
            found.push(next(&mut claimed, "the claim of the second copy").await);
        }
        for consumer in consumers {
            assert!(consumer.drain(LIMIT).await.is_clean());
        }
        assert_eq!(
            effects.load(Ordering::SeqCst),
            1,
            "the side effect happened once"
        );
        while let Ok(more) = claimed.try_recv() {
            found.push(more);
        }
        assert_eq!(
            found.iter().filter(|f| **f == ClaimResult::Claimed).count(),
            1,
            "claims: {found:?}"
        );
        assert_eq!(env.count(&queue).await, 0);
        assert_eq!(env.count(&format!("{queue}.dlq")).await, 0);
    })
    .await;
}
each_store!(two_consumers_do_the_work_of_a_duplicate_once);

async fn a_failure_releases_the_claim_and_a_success_confirms_it(env: &'static Env, kind: Kind) {
    with_backing(kind, |backing| async move {
        let queue = env.queue("idem-retry").await;
        let (claims, mut claimed) = mpsc::unbounded_channel();
        let store = Observed {
            inner: backing.instance(Duration::from_secs(60)).await,
            claims,
        };
        let (done, mut attempts) = mpsc::unbounded_channel();
        let consumer = env
            .mq
            .consumer::<u32>(queue.as_str())
            .retry(RetryPolicy::fixed(3, Duration::from_millis(10)).unwrap())
            .idempotent(store)
            .start(move |message: Message<u32>| {
                let done = done.clone();
                async move {
                    let attempt = message.envelope().attempt();
                    done.send(attempt).ok();
                    if attempt == 1 {
                        return Err("not yet");
                    }
                    Ok(())
                }
            })
            .await
            .unwrap();
        let publisher = env.mq.publisher::<u32>("", queue.as_str());
        let envelope = || Envelope::of("retried").id("retried-1").build().unwrap();
        publisher.send_with(&1, envelope()).await.unwrap();
        assert_eq!(next(&mut attempts, "the first attempt").await, 1);
        assert_eq!(
            next(&mut claimed, "the first claim").await,
            ClaimResult::Claimed
        );
        assert_eq!(next(&mut attempts, "the retry").await, 2);
        assert_eq!(
            next(&mut claimed, "the retry's claim").await,
            ClaimResult::Claimed,
            "the failed attempt released its claim"
        );
        publisher.send_with(&1, envelope()).await.unwrap();
        assert_eq!(
            next(&mut claimed, "the later copy's claim").await,
            ClaimResult::AlreadyConfirmed,
            "the successful attempt confirmed it"
        );
        assert!(consumer.drain(LIMIT).await.is_clean());
        assert!(
            attempts.try_recv().is_err(),
            "the later copy was not handled"
        );
        assert_eq!(env.count(&queue).await, 0);
        assert_eq!(env.count(&format!("{queue}.dlq")).await, 0);
    })
    .await;
}
each_store!(a_failure_releases_the_claim_and_a_success_confirms_it);

async fn a_live_claim_elsewhere_republishes_until_its_lease_expires(env: &'static Env, kind: Kind) {
    with_backing(kind, |backing| async move {
        let queue = env.queue("idem-held").await;
        // Another instance claimed the message and then stopped (crashed): nothing confirms
        // or releases its claim, which holds for its lease.
        let crashed = backing.instance(Duration::from_secs(4)).await;
        assert_eq!(crashed.claim("held-1").await.unwrap(), ClaimResult::Claimed);

        let (claims, mut claimed) = mpsc::unbounded_channel();
        let store = Observed {
            inner: backing.instance(Duration::from_secs(60)).await,
            claims,
        };
        let (done, mut handled) = mpsc::unbounded_channel();
        let consumer = env
            .mq
            .consumer::<u32>(queue.as_str())
            .retry(RetryPolicy::fixed(3, Duration::from_millis(10)).unwrap())
            .idempotent(store)
            .start(move |message: Message<u32>| {
                let done = done.clone();
                async move {
                    let envelope = message.envelope();
                    done.send((
                        envelope.id().to_owned(),
                        envelope.attempt(),
                        message.redelivered(),
                        *message.payload(),
                    ))
                    .ok();
                }
            })
            .await
            .unwrap();
        let sent = env
            .mq
            .publisher::<u32>("", queue.as_str())
            .send_with(&9, Envelope::of("held").id("held-1").build().unwrap())
            .await
            .unwrap();

        assert_eq!(
            next(&mut claimed, "the first claim").await,
            ClaimResult::InProgress,
            "the crashed instance's lease is live"
        );
        let (id, attempt, redelivered, payload) = next(&mut handled, "the handler").await;
        assert_eq!((id.as_str(), payload), (sent.id(), 9));
        assert_eq!(attempt, 1, "waiting for a lease consumes no attempt");
        assert!(!redelivered, "republished, never requeued");
        let mut found = Vec::new();
        while let Ok(more) = claimed.try_recv() {
            found.push(more);
        }
        assert_eq!(
            found.last(),
            Some(&ClaimResult::Claimed),
            "claims: {found:?}"
        );
        assert!(consumer.drain(LIMIT).await.is_clean());
        assert_eq!(env.count(&queue).await, 0);
        assert_eq!(
            env.count(&format!("{queue}.dlq")).await,
            0,
            "never dead-lettered for it"
        );
        assert!(handled.try_recv().is_err(), "handled once");
    })
    .await;
}
each_store!(a_live_claim_elsewhere_republishes_until_its_lease_expires);

/// A store on a database where nothing listens (port 1): every claim fails to connect.
fn unreachable_store(kind: Kind) -> Arc<dyn IdempotencyStore> {
    match kind {
        Kind::Postgres => Arc::new(PostgresIdempotencyStore::new(
            sqlx::postgres::PgPoolOptions::new()
                .acquire_timeout(Duration::from_millis(500))
                .connect_lazy("postgres://postgres@127.0.0.1:1/test")
                .unwrap(),
        )),
        Kind::MySql => Arc::new(MySqlIdempotencyStore::new(
            sqlx::mysql::MySqlPoolOptions::new()
                .acquire_timeout(Duration::from_millis(500))
                .connect_lazy("mysql://root@127.0.0.1:1/test")
                .unwrap(),
        )),
        kind => panic!("{kind:?} is not a database"),
    }
}

async fn an_unreachable_store_fails_the_delivery_into_the_retry_path(
    env: &'static Env,
    kind: Kind,
    store_name: &str,
) {
    let queue = env.queue("idem-down").await;
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    let consumer = env
        .mq
        .consumer::<u32>(queue.as_str())
        .retry(RetryPolicy::fixed(2, Duration::from_millis(10)).unwrap())
        .idempotent(unreachable_store(kind))
        .start(move |_: Message<u32>| {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        })
        .await
        .unwrap();
    let sent = env
        .mq
        .publisher::<u32>("", queue.as_str())
        .send(&3)
        .await
        .unwrap();

    let dead = env.next_in(&format!("{queue}.dlq")).await;
    let envelope = Envelope::from_properties(&dead.properties, &dead.routing_key);
    assert_eq!((envelope.id(), envelope.attempt()), (sent.id(), 2));
    let error = envelope.error().expect("x-acemq-error");
    let expected = format!(
        "exhausted 2 attempts: StoreError: the {store_name} idempotency store could not claim key"
    );
    assert!(error.starts_with(&expected), "{error}");
    assert!(consumer.drain(LIMIT).await.is_clean());
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "the handler never ran without a claim"
    );
    assert_eq!(env.count(&queue).await, 0);
}

async fn an_unreachable_postgres_store_fails_the_delivery(env: &'static Env) {
    an_unreachable_store_fails_the_delivery_into_the_retry_path(env, Kind::Postgres, "postgres")
        .await;
}
polyq_testkit::both_brokers!(an_unreachable_postgres_store_fails_the_delivery);

async fn an_unreachable_mysql_store_fails_the_delivery(env: &'static Env) {
    an_unreachable_store_fails_the_delivery_into_the_retry_path(env, Kind::MySql, "mysql").await;
}
polyq_testkit::both_brokers!(an_unreachable_mysql_store_fails_the_delivery);

/// Rows written the way the Java port's JdbcIdempotencyStore writes them are read as it means
/// them, and what this store writes reads back as the Java store's queries expect.
async fn the_table_is_shared_with_the_java_layout(kind: Kind) {
    with_backing(kind, |backing| async move {
        let store = backing.instance(Duration::from_secs(60)).await;

        // A row as the Java port confirms it.
        backing
            .write_java_row("java-done", "CONFIRMED", None, 3600)
            .await;
        assert_eq!(
            store.claim("java-done").await.unwrap(),
            ClaimResult::AlreadyConfirmed
        );

        // A live Java claim, and one whose lease ran out (its holder crashed).
        for (id, expires_in) in [("java-live", 3600), ("java-crashed", -1)] {
            backing
                .write_java_row(id, "CLAIMED", Some("a-java-node"), expires_in)
                .await;
        }
        assert_eq!(
            store.claim("java-live").await.unwrap(),
            ClaimResult::InProgress
        );
        store.release("java-live").await.unwrap();
        assert_eq!(
            store.claim("java-live").await.unwrap(),
            ClaimResult::InProgress,
            "a release never gives up another instance's claim"
        );
        assert_eq!(
            store.claim("java-crashed").await.unwrap(),
            ClaimResult::Claimed
        );

        // What this store writes, as the Java store reads it.
        store.confirm("java-crashed").await.unwrap();
        let confirmed = backing.java_row("java-crashed").await;
        assert_eq!(
            (
                confirmed.state.as_str(),
                confirmed.claimed_by,
                confirmed.live
            ),
            ("CONFIRMED", None, true)
        );

        assert_eq!(store.claim("rust-1").await.unwrap(), ClaimResult::Claimed);
        let claimed = backing.java_row("rust-1").await;
        assert_eq!((claimed.state.as_str(), claimed.live), ("CLAIMED", true));
        assert!(claimed.claimed_by.is_some_and(|h| h.len() <= 64));
        store.release("rust-1").await.unwrap();
        assert_eq!(store.claim("rust-1").await.unwrap(), ClaimResult::Claimed);

        // Keys are compared exactly: one differing only in case is another key.
        assert_eq!(store.claim("RUST-1").await.unwrap(), ClaimResult::Claimed);

        // purge_expired removes only rows past their deadline.
        backing.expire_row("java-done").await;
        assert_eq!(store.purge_expired().await.unwrap(), 1);
        assert_eq!(
            store.claim("java-done").await.unwrap(),
            ClaimResult::Claimed
        );
    })
    .await;
}

/// Instances claiming the same keys at once each win a key exactly once, whether the key is new
/// or its previous claim expired (its holder crashed); the others find it in progress, and once
/// confirmed everyone finds it confirmed.
async fn concurrent_claims_win_each_key_once(kind: Kind) {
    with_backing(kind, |backing| async move {
        let mut instances = Vec::new();
        for _ in 0..4 {
            instances.push(backing.instance(Duration::from_secs(60)).await);
        }
        let keys: Vec<String> = (0..25).map(|n| format!("k-{n}")).collect();
        let claim_all = || {
            futures_util::future::join_all(
                instances
                    .iter()
                    .flat_map(|store| keys.iter().map(move |key| store.claim(key))),
            )
        };
        let winners = |found: Vec<Result<ClaimResult, _>>| {
            let mut won = std::collections::HashMap::<&str, usize>::new();
            for (key, found) in keys.iter().cycle().zip(found) {
                match found.unwrap() {
                    ClaimResult::Claimed => *won.entry(key.as_str()).or_default() += 1,
                    other => assert_eq!(other, ClaimResult::InProgress, "{key}"),
                }
            }
            won
        };
        let won = winners(claim_all().await);
        assert!(
            won.len() == keys.len() && won.values().all(|&n| n == 1),
            "new keys: {won:?}"
        );

        for key in &keys {
            backing.expire_row(key).await;
        }
        let won = winners(claim_all().await);
        assert!(
            won.len() == keys.len() && won.values().all(|&n| n == 1),
            "expired claims: {won:?}"
        );

        for key in &keys {
            instances[0].confirm(key).await.unwrap();
        }
        for found in claim_all().await {
            assert_eq!(found.unwrap(), ClaimResult::AlreadyConfirmed);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_postgres_claims_win_each_key_once() {
    concurrent_claims_win_each_key_once(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_mysql_claims_win_each_key_once() {
    concurrent_claims_win_each_key_once(Kind::MySql).await;
}

#[tokio::test]
async fn the_postgres_table_is_shared_with_the_java_layout() {
    the_table_is_shared_with_the_java_layout(Kind::Postgres).await;
}

#[tokio::test]
async fn the_mysql_table_is_shared_with_the_java_layout() {
    the_table_is_shared_with_the_java_layout(Kind::MySql).await;
}

#[tokio::test]
async fn a_redis_claim_expires_with_its_lease() {
    with_backing(Kind::Redis, |backing| async move {
        let first = backing.instance(Duration::from_millis(200)).await;
        let second = backing.instance(Duration::from_secs(60)).await;
        assert_eq!(first.claim("r-1").await.unwrap(), ClaimResult::Claimed);
        assert_eq!(second.claim("r-1").await.unwrap(), ClaimResult::InProgress);
        second.release("r-1").await.unwrap();
        assert_eq!(
            second.claim("r-1").await.unwrap(),
            ClaimResult::InProgress,
            "a release never gives up another instance's claim"
        );
        // The lease is Redis's own expiry; waiting it out is the behaviour under test.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(second.claim("r-1").await.unwrap(), ClaimResult::Claimed);
        second.confirm("r-1").await.unwrap();
        first.release("r-1").await.unwrap();
        assert_eq!(
            first.claim("r-1").await.unwrap(),
            ClaimResult::AlreadyConfirmed
        );
        assert_eq!(
            first.purge_expired().await.unwrap(),
            0,
            "Redis expires keys itself"
        );
    })
    .await;
}

async fn a_pipeline_step_is_idempotent_too(env: &'static Env) {
    let name = env
        .broker()
        .remember_exchange(env.broker().name("acemq.pl.idem"));
    let pipeline = Pipeline::new(&env.mq, &name, ["charge"]).unwrap();
    env.declare(
        QueueSpec::new(pipeline.queue_of("charge"))
            .argument("x-queue-type", FieldValue::from("quorum")),
    )
    .await;
    pipeline.declare().await.unwrap();
    let (claims, mut claimed) = mpsc::unbounded_channel();
    let store = Observed {
        inner: Arc::new(InMemoryIdempotencyStore::new()),
        claims,
    };
    let charges = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&charges);
    let step = pipeline
        .step(
            "charge",
            |c| c.idempotent(store),
            move |_: Message<Value>| {
                let counted = Arc::clone(&counted);
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::convert::Infallible>(Some(json!("charged")))
                }
            },
        )
        .await
        .unwrap();
    let sent = pipeline.start(&json!(12)).await.unwrap();
    assert_eq!(
        next(&mut claimed, "the run's claim").await,
        ClaimResult::Claimed
    );
    // The same hop again, as a producer's retry would publish it.
    env.mq
        .publisher::<Value>("", pipeline.queue_of("charge").as_str())
        .send_with(&json!(12), sent)
        .await
        .unwrap();
    assert_eq!(
        next(&mut claimed, "the duplicate's claim").await,
        ClaimResult::AlreadyConfirmed
    );
    assert!(step.drain(LIMIT).await.is_clean());
    assert_eq!(charges.load(Ordering::SeqCst), 1);
    assert_eq!(pipeline.completed(), 1, "the duplicate is no second run");
}
polyq_testkit::both_brokers!(a_pipeline_step_is_idempotent_too);
