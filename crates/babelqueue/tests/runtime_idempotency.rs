//! Idempotent consumers on every binding with every store, the Redis, PostgreSQL and MariaDB ones
//! on the real servers: a job delivered twice to two workers has one side effect; under a claiming
//! store, a duplicate delivered while the winner runs waits for it and is then skipped; a store
//! that cannot answer fails the delivery into the retry path and then the dead-letter queue,
//! never acknowledged, never dropped, as AceMQ does.

#![cfg(all(feature = "redis", feature = "postgres", feature = "mysql"))]

mod runtime_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use babelqueue::idempotency::{
    Idempotency, InMemoryClaimingStore, InMemoryStore, MySqlStore, PostgresClaimingStore,
    PostgresStore, RedisClaimingStore, RedisStore,
};
use babelqueue::transport::{ConnectOptions, Transport};
use babelqueue::worker::{BoxError, JobContext, JobInterceptor};
use babelqueue::{BabelQueue, Envelope, MakeOptions};
use polyq_testkit::brokers::{DeleteRedisKeys, TestBroker};
use polyq_testkit::postgres::DropTables;
use runtime_support::{Bound, PATIENCE};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;

const URN: &str = "urn:babel:payments:captured";
const IDLE: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Copy)]
enum Store {
    Memory,
    Redis,
    Postgres,
    MySql,
    MemoryClaiming,
    RedisClaiming,
    PostgresClaiming,
}

/// A store on a key prefix or table of its own, and what removes it when dropped.
struct Opened {
    option: Idempotency,
    _keys: Option<DeleteRedisKeys>,
    _table: Option<DropTables>,
    _mysql_table: Option<polyq_testkit::mysql::DropTables>,
}

impl Opened {
    async fn new(store: Store) -> Self {
        let scope = uuid::Uuid::new_v4().simple().to_string();
        let redis_prefix = format!("bq:idem-test:{scope}:");
        let table = format!("bq_idempotency_test_{scope}");
        let redis_url = polyq_testkit::redis_url();
        let pool = || async { sqlx::PgPool::connect(&polyq_testkit::postgres_url()).await };
        let mut opened = Self {
            option: Idempotency::seen_set(Arc::new(InMemoryStore::new())),
            _keys: None,
            _table: None,
            _mysql_table: None,
        };
        opened.option = match store {
            Store::Memory => opened.option,
            Store::MemoryClaiming => Idempotency::claiming(Arc::new(InMemoryClaimingStore::new())),
            Store::Redis => {
                opened._keys = Some(DeleteRedisKeys::new(&redis_url, [&redis_prefix]));
                let store = RedisStore::connect(&redis_url).await.unwrap();
                Idempotency::seen_set(Arc::new(store.prefix(redis_prefix).unwrap()))
            }
            Store::RedisClaiming => {
                opened._keys = Some(DeleteRedisKeys::new(&redis_url, [&redis_prefix]));
                let store = RedisClaimingStore::connect(&redis_url).await.unwrap();
                Idempotency::claiming(Arc::new(store.prefix(redis_prefix).unwrap()))
            }
            Store::Postgres => {
                opened._table = Some(DropTables::new([&table]));
                let store = PostgresStore::new(pool().await.unwrap())
                    .table(&table)
                    .unwrap();
                store.migrate().await.unwrap();
                Idempotency::seen_set(Arc::new(store))
            }
            Store::MySql => {
                opened._mysql_table = Some(polyq_testkit::mysql::DropTables::new([&table]));
                let pool = sqlx::MySqlPool::connect(&polyq_testkit::mariadb_url())
                    .await
                    .unwrap();
                let store = MySqlStore::new(pool).table(&table).unwrap();
                store.migrate().await.unwrap();
                Idempotency::seen_set(Arc::new(store))
            }
            Store::PostgresClaiming => {
                opened._table = Some(DropTables::new([&table]));
                let store = PostgresClaimingStore::new(pool().await.unwrap())
                    .table(&table)
                    .unwrap();
                store.migrate().await.unwrap();
                Idempotency::claiming(Arc::new(store))
            }
        };
        opened
    }
}

/// The same job (one `meta.id`) published twice.
async fn publish_twice(bound: &Bound) -> Envelope {
    let job = babelqueue::make(URN, &json!({"payment": 7}), MakeOptions::default()).unwrap();
    for _ in 0..2 {
        bound.queue.publish_envelope(&job, &[]).await.unwrap();
    }
    job
}

async fn two_workers_one_effect(broker: &'static TestBroker, store: Store) {
    let bound = Bound::with(broker, ConnectOptions::default().prefetch(1)).await;
    let opened = Opened::new(store).await;
    publish_twice(&bound).await;
    let effects = Arc::new(AtomicUsize::new(0));
    for worker in ["first", "second"] {
        let effects = effects.clone();
        let report = bound
            .queue
            .worker()
            .idempotent(opened.option.clone())
            .handle(URN, move |_job| {
                let effects = effects.clone();
                async move {
                    effects.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, babelqueue::Error>(())
                }
            })
            .consume(1, IDLE)
            .await
            .unwrap();
        assert_eq!(
            (report.received, report.succeeded),
            (1, 1),
            "{worker} worker: {report:?}"
        );
    }
    assert_eq!(effects.load(Ordering::SeqCst), 1, "{store:?}");
    assert_eq!(bound.depth(bound.name()).await, 0);
}

/// Counts the deliveries that reached a worker, before the idempotency guard.
struct Arrivals(Arc<tokio::sync::watch::Sender<usize>>);

impl JobInterceptor for Arrivals {
    fn before_handle(&self, _job: &JobContext<'_>) -> Result<(), BoxError> {
        self.0.send_modify(|arrived| *arrived += 1);
        Ok(())
    }
}

async fn concurrent_duplicates_wait_for_the_winner(broker: &'static TestBroker, store: Store) {
    let bound = Bound::with(broker, ConnectOptions::default().prefetch(1)).await;
    // The second worker on a connection of its own, as in a second process: two workers on one
    // RabbitMQ transport share its one consumer, whose prefetch of 1 would hold the duplicate
    // back until the winner settled.
    let other = bound
        .another_connection(broker, ConnectOptions::default().prefetch(1))
        .await;
    let opened = Opened::new(store).await;
    publish_twice(&bound).await;
    let effects = Arc::new(AtomicUsize::new(0));
    let (arrivals, arrived) = tokio::sync::watch::channel(0_usize);
    let arrivals = Arc::new(arrivals);
    let worker = |queue: &BabelQueue| {
        let (effects, arrived) = (effects.clone(), arrived.clone());
        queue
            .worker()
            .interceptor(Arrivals(arrivals.clone()))
            .idempotent(opened.option.clone())
            .handle(URN, move |_job| {
                let (effects, mut arrived) = (effects.clone(), arrived.clone());
                async move {
                    // The winner finishes only once the duplicate is in the other worker, so the
                    // duplicate is in flight while the claim is held.
                    tokio::time::timeout(PATIENCE, arrived.wait_for(|n| *n >= 2))
                        .await
                        .map_err(|_| "the duplicate never reached the other worker")?
                        .map_err(|_| "the arrivals channel closed")?;
                    effects.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, &str>(())
                }
            })
    };
    // Each worker stops at its one job; the idle bound only ends a worker that gets none, so it
    // is the patience, not IDLE: on a loaded machine a worker's consumer can take longer than
    // IDLE to start, and the winner, waiting for the duplicate to arrive, would then fail.
    let (first, second) = tokio::join!(
        worker(&bound.queue).consume(1, PATIENCE),
        worker(&other).consume(1, PATIENCE)
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(
        (first.succeeded, second.succeeded),
        (1, 1),
        "{first:?} {second:?}"
    );
    assert_eq!(*arrived.borrow(), 2);
    assert_eq!(effects.load(Ordering::SeqCst), 1, "{store:?}");
    assert_eq!(bound.depth(bound.name()).await, 0);
}

/// A PostgreSQL store on a port nothing listens on.
fn unreachable_postgres() -> Idempotency {
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy("postgres://postgres@127.0.0.1:1/test")
        .unwrap();
    Idempotency::seen_set(Arc::new(PostgresStore::new(pool)))
}

/// A MariaDB store on a port nothing listens on.
fn unreachable_mysql() -> Idempotency {
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy("mysql://root@127.0.0.1:1/test")
        .unwrap();
    Idempotency::seen_set(Arc::new(MySqlStore::new(pool)))
}

/// A Redis claiming store on a port nothing listens on.
fn unreachable_redis() -> Idempotency {
    let client = redis::Client::open("redis://127.0.0.1:1/0").unwrap();
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_number_of_retries(0);
    let connection = redis::aio::ConnectionManager::new_lazy_with_config(client, config).unwrap();
    Idempotency::claiming(Arc::new(RedisClaimingStore::new(connection)))
}

async fn an_unreachable_store_fails_into_the_retry_path(
    broker: &'static TestBroker,
    option: Idempotency,
) {
    let bound = Bound::new(broker).await;
    let sent = bound
        .queue
        .publish(URN, &json!({"payment": 8}))
        .await
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let report = bound
        .queue
        .worker()
        .idempotent_for(URN, option)
        .max_attempts(2)
        .redelivery_pause(Duration::ZERO)
        .handle(URN, move |_job| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<_, babelqueue::Error>(())
            }
        })
        .consume(2, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.received, report.retried, report.dead_lettered),
        (2, 1, 1),
        "{report:?}"
    );
    assert_eq!(
        (report.succeeded, report.released, report.deleted),
        (0, 0, 0),
        "never acknowledged as handled, never dropped: {report:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler must not run");
    let dead_letters = bound.transport().dead_letter_queue(bound.name());
    let dead = bound.take_and_ack(&dead_letters).await;
    let body = String::from_utf8_lossy(&dead.body).into_owned();
    let decoded = babelqueue::decode(&dead.body).unwrap();
    assert_eq!(
        decoded.envelope.meta().and_then(|meta| meta.id()),
        sent.meta().and_then(|meta| meta.id()),
        "the same message, kept"
    );
    assert!(body.contains("idempotency store"), "{body}");
    assert_eq!(bound.depth(bound.name()).await, 0);
}

/// For each store, a scenario named after it that runs `$scenario` with that store, on every
/// binding: the tests `<store>::memory`, `<store>::rabbitmq` and `<store>::redis`.
macro_rules! with_each_store {
    ($scenario:ident; $($store:ident),*) => {
        $(
            async fn $store(broker: &'static TestBroker) {
                $scenario(broker, Store::$store).await;
            }
        )*
        polyq_testkit::both_brokers!(on memory, rabbitmq, redis; $($store),*);
    };
}

#[allow(non_snake_case)]
mod two_workers_one_effect {
    use super::*;
    with_each_store!(
        two_workers_one_effect;
        Memory, Redis, Postgres, MySql, MemoryClaiming, RedisClaiming, PostgresClaiming
    );
}

#[allow(non_snake_case)]
mod concurrent_duplicates_wait_for_the_winner {
    use super::*;
    with_each_store!(
        concurrent_duplicates_wait_for_the_winner;
        MemoryClaiming, RedisClaiming, PostgresClaiming
    );
}

mod an_unreachable_store_fails_into_the_retry_path {
    use polyq_testkit::brokers::{Broker, run};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_on_memory() {
        run(Broker::Memory, |broker| {
            an_unreachable_store_fails_into_the_retry_path(broker, unreachable_postgres())
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_on_rabbitmq() {
        run(Broker::RabbitMq, |broker| {
            an_unreachable_store_fails_into_the_retry_path(broker, unreachable_postgres())
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_on_redis() {
        run(Broker::Redis, |broker| {
            an_unreachable_store_fails_into_the_retry_path(broker, unreachable_postgres())
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_on_memory() {
        run(Broker::Memory, |broker| {
            an_unreachable_store_fails_into_the_retry_path(broker, unreachable_mysql())
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_claiming_on_memory() {
        run(Broker::Memory, |broker| {
            an_unreachable_store_fails_into_the_retry_path(broker, unreachable_redis())
        })
        .await;
    }
}
