//! On RabbitMQ, with the PostgreSQL, the MariaDB and the Redis store: an idempotent consumer process killed
//! with SIGKILL while its handler runs leaves its claim behind. The broker redelivers the
//! message to another consumer at once, which finds the claim's lease live and republishes the
//! message unchanged (never dead-lettering it) until the lease expires, and then handles it.
//!
//! The test runs this test binary again as the consumer process (the ignored test
//! `child_consumer`, selected by name), as `runtime_crash.rs` does.

mod common;
#[path = "common/stores.rs"]
mod stores;

use std::sync::Arc;
use std::time::Duration;

use acemq::idempotency::ClaimResult;
use acemq::{AceMq, Envelope, Message};
use common::LIMIT;
use polyq_amqp::QueueSpec;
use polyq_testkit::brokers::{Broker, TestBroker, run};
use stores::{Backing, Kind, Observed, with_backing};
use tokio::sync::mpsc;

const QUEUE_VAR: &str = "ACEMQ_IDEMPOTENCY_CRASH_QUEUE";
const STORE_VAR: &str = "ACEMQ_IDEMPOTENCY_CRASH_STORE";
const TABLE_VAR: &str = "ACEMQ_IDEMPOTENCY_CRASH_TABLE";
const STARTED: &str = "handler started: ";

/// The killed consumer's lease: long enough that the redelivery finds it live.
const CHILD_LEASE: Duration = Duration::from_secs(4);

async fn kill_9_mid_handler_leaves_a_claim_that_expires(broker: &'static TestBroker, kind: Kind) {
    with_backing(kind, |backing| async move {
        let mq = AceMq::connect(broker.url()).await.unwrap();
        let queue = broker.remember_queue(broker.name("acemq.rt.idem-crash"));
        broker.remember_queue(format!("{queue}.dlq"));
        broker.remember_queue(format!("{queue}.parked"));
        mq.client()
            .declare_queue(&QueueSpec::new(queue.clone()))
            .await
            .unwrap();
        // The table is made here (an instance migrates it), so the child only connects.
        let _migrated = backing.instance(CHILD_LEASE).await;
        let sent = mq
            .publisher::<u32>("", queue.as_str())
            .send_with(&5, Envelope::of("charge").id("crash-1").build().unwrap())
            .await
            .unwrap();

        let kind_name = format!("{kind:?}");
        let (mut child, started) = common::spawn_child_consumer(
            &[
                (QUEUE_VAR, queue.as_str()),
                (STORE_VAR, kind_name.as_str()),
                (TABLE_VAR, backing.table.as_str()),
            ],
            STARTED,
        )
        .await;
        assert_eq!(started, sent.id());
        polyq_testkit::child::kill_9(&mut child).await;

        let (claims, mut claimed) = mpsc::unbounded_channel();
        let store = Observed {
            inner: backing.instance(Duration::from_secs(60)).await,
            claims,
        };
        let (done, mut handled) = mpsc::unbounded_channel();
        let consumer = mq
            .consumer::<u32>(queue.as_str())
            .idempotent(store)
            .start(move |message: Message<u32>| {
                let done = done.clone();
                async move {
                    let envelope = message.envelope();
                    done.send((envelope.id().to_owned(), envelope.attempt()))
                        .ok();
                }
            })
            .await
            .unwrap();
        let first = tokio::time::timeout(LIMIT, claimed.recv()).await.unwrap();
        assert_eq!(
            first,
            Some(ClaimResult::InProgress),
            "the killed consumer's lease is live"
        );
        let ran = tokio::time::timeout(LIMIT, handled.recv())
            .await
            .expect("handled once the lease expired");
        assert_eq!(ran, Some((sent.id().to_owned(), 1)));
        assert!(consumer.drain(LIMIT).await.is_clean());
        assert!(handled.try_recv().is_err(), "handled once");
        let dead_letters = mq
            .client()
            .inspect_queue(&format!("{queue}.dlq"))
            .await
            .unwrap()
            .message_count;
        assert_eq!(dead_letters, 0, "never dead-lettered for the claim");
        mq.close().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_the_postgres_store() {
    run(Broker::RabbitMq, |broker| {
        kill_9_mid_handler_leaves_a_claim_that_expires(broker, Kind::Postgres)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_the_mysql_store() {
    run(Broker::RabbitMq, |broker| {
        kill_9_mid_handler_leaves_a_claim_that_expires(broker, Kind::MySql)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_the_redis_store() {
    run(Broker::RabbitMq, |broker| {
        kill_9_mid_handler_leaves_a_claim_that_expires(broker, Kind::Redis)
    })
    .await;
}

/// The consumer process: an idempotent consumer on the store the parent names, whose handler
/// reports that it started and then blocks until the process is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as the child process of the kill_9 tests"]
async fn child_consumer() {
    let queue = std::env::var(QUEUE_VAR).expect("started by a kill_9 test");
    let name = std::env::var(TABLE_VAR).expect("started by a kill_9 test");
    let kind = match std::env::var(STORE_VAR).as_deref() {
        Ok("Postgres") => Kind::Postgres,
        Ok("MySql") => Kind::MySql,
        Ok("Redis") => Kind::Redis,
        other => panic!("unknown store {other:?}"),
    };
    let backing = Arc::new(Backing::on(kind, &name).await);
    let store = backing.instance(CHILD_LEASE).await;
    let mq = AceMq::connect(&polyq_testkit::amqp_url()).await.unwrap();
    let _consumer = mq
        .consumer::<u32>(queue.as_str())
        .idempotent(store)
        .start(|message: Message<u32>| async move {
            println!("{STARTED}{}", message.envelope().id());
            std::future::pending::<()>().await;
        })
        .await
        .unwrap();
    std::future::pending::<()>().await;
}
