//! The transactional outbox (ADR-0029) on the real PostgreSQL, relayed through every binding:
//! the envelope commits or rolls back with the business row, the relay publishes the stored
//! bytes verbatim, two relays never publish a row twice, a malformed row is failed without
//! stopping the relay, and a failed publish is retried after its backoff.

mod runtime_support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use babelqueue::outbox::{Outbox, OutboxRelay, PgOutboxStore};
use babelqueue::transport::{AnyTransport, ConnectOptions, Transport};
use babelqueue::{Envelope, MakeOptions, make};
use polyq_testkit::brokers::TestBroker;
use polyq_testkit::postgres::DropTables;
use runtime_support::{Bound, PATIENCE};
use serde_json::json;
use sqlx::{PgPool, Row};

/// A unique outbox table and business table, dropped with it, also when the test fails.
struct Tables {
    db: PgPool,
    store: PgOutboxStore,
    outbox: Outbox,
    business: String,
    _dropped: DropTables,
}

impl Tables {
    async fn new() -> Self {
        let db = PgPool::connect(&polyq_testkit::postgres_url())
            .await
            .expect("PostgreSQL is reachable (POLYQ_POSTGRES_URL)");
        let suffix = polyq_testkit::unique_name("t").replace(['-', '.'], "_");
        let table = format!("babelqueue_outbox_{suffix}");
        let business = format!("orders_{suffix}");
        let dropped = DropTables::new([&table, &business]);
        let store = PgOutboxStore::new(db.clone()).in_table(&table).unwrap();
        store.migrate().await.expect("migrate");
        // Twice: the migration is safe to run again.
        store.migrate().await.expect("migrate again");
        sqlx::query(&format!("CREATE TABLE {business} (id BIGINT PRIMARY KEY)"))
            .execute(&db)
            .await
            .unwrap();
        Self {
            db,
            store,
            outbox: Outbox::in_table(&table).unwrap(),
            business,
            _dropped: dropped,
        }
    }

    fn relay<T: Transport>(&self, transport: Arc<T>) -> OutboxRelay<T> {
        OutboxRelay::new(self.store.clone(), transport)
    }

    /// Places an order and writes its envelope in one transaction, committed or rolled back.
    async fn place(&self, queue: &str, id: i64, commit: bool) -> Envelope {
        let envelope = make(
            "urn:babel:orders:created",
            &json!({ "id": id, "note": "café / ünïcode" }),
            MakeOptions::default().queue(queue),
        )
        .unwrap();
        let mut tx = self.db.begin().await.unwrap();
        sqlx::query(&format!("INSERT INTO {} (id) VALUES ($1)", self.business))
            .bind(id)
            .execute(&mut *tx)
            .await
            .unwrap();
        self.outbox
            .write(&mut tx, &envelope)
            .await
            .expect("written");
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        envelope
    }

    async fn count(&self, table: &str) -> i64 {
        sqlx::query(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&self.db)
            .await
            .unwrap()
            .get(0)
    }
}

async fn commits_or_rolls_back_with_the_business_row(broker: &'static TestBroker) {
    let tables = Tables::new().await;
    let bound = Bound::new(broker).await;
    let queue = bound.name().to_owned();
    tables.place(&queue, 1, false).await;
    let committed = tables.place(&queue, 2, true).await;
    assert_eq!(tables.count(&tables.business).await, 1);
    assert_eq!(tables.count(tables.store.table()).await, 1);

    let relay = tables.relay(bound.transport().clone().into());
    let report = relay.drain(10).await.unwrap();
    assert_eq!((report.published, report.failed), (1, 0));
    assert_eq!(bound.depth(&queue).await, 1);
    let taken = bound.take_and_ack(&queue).await;
    // The bytes the codec wrote, unchanged.
    assert_eq!(&taken.body[..], committed.encode().unwrap().as_bytes());

    let status = relay.status().await.unwrap();
    assert_eq!((status.pending, status.failed), (0, 0));
    assert_eq!(status.oldest_pending_age, None);
}
polyq_testkit::both_brokers!(
    on memory, rabbitmq, redis;
    commits_or_rolls_back_with_the_business_row
);

async fn the_next_relay_publishes_what_a_stopped_one_left(broker: &'static TestBroker) {
    let tables = Tables::new().await;
    let bound = Bound::new(broker).await;
    let queue = bound.name().to_owned();
    let written = tables.place(&queue, 1, true).await;

    let stopped = polyq_runtime::Shutdown::new();
    stopped.stop();
    tables
        .relay(bound.transport().clone().into())
        .run(stopped)
        .await;
    assert_eq!(
        bound.depth(&queue).await,
        0,
        "a relay stopped before it ran publishes nothing"
    );
    assert_eq!(tables.store.status().await.unwrap().pending, 1);

    let next = polyq_runtime::Shutdown::new();
    let relay = tables.relay(Arc::new(bound.transport().clone()));
    let running = tokio::spawn({
        let next = next.clone();
        async move { relay.run(next).await }
    });
    let taken = bound.take_and_ack(&queue).await;
    assert_eq!(&taken.body[..], written.encode().unwrap().as_bytes());
    next.stop();
    tokio::time::timeout(PATIENCE, running)
        .await
        .expect("the relay stops when asked")
        .unwrap();
}
polyq_testkit::both_brokers!(
    on memory, rabbitmq, redis;
    the_next_relay_publishes_what_a_stopped_one_left
);

async fn two_relays_never_publish_a_row_twice(broker: &'static TestBroker) {
    let tables = Tables::new().await;
    let bound = Bound::new(broker).await;
    let queue = bound.name().to_owned();
    let rows = 120;
    let mut tx = tables.db.begin().await.unwrap();
    for id in 0..rows {
        let envelope = make(
            "urn:babel:orders:created",
            &json!({ "id": id }),
            MakeOptions::default().queue(&queue),
        )
        .unwrap();
        tables.outbox.write(&mut tx, &envelope).await.unwrap();
    }
    tx.commit().await.unwrap();

    let transport = Arc::new(bound.transport().clone());
    let one = tables.relay(transport.clone()).batch_size(7).unwrap();
    let two = tables.relay(transport).batch_size(7).unwrap();
    let (a, b) = tokio::join!(one.drain(1000), two.drain(1000));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.published + b.published, rows);
    assert_eq!(a.failed + b.failed, 0);
    assert_eq!(bound.depth(&queue).await, rows as u64);
    let mut ids = HashSet::new();
    for _ in 0..rows {
        let taken = bound.take_and_ack(&queue).await;
        let decoded = babelqueue::decode(&taken.body).unwrap();
        ids.insert(decoded.envelope.meta().unwrap().id().unwrap().to_owned());
    }
    assert_eq!(ids.len(), rows);
}
polyq_testkit::both_brokers!(on memory, rabbitmq, redis; two_relays_never_publish_a_row_twice);

async fn a_malformed_row_is_failed_and_the_rest_published(broker: &'static TestBroker) {
    let tables = Tables::new().await;
    let bound = Bound::new(broker).await;
    let queue = bound.name().to_owned();
    let bad: i64 = sqlx::query_scalar(&format!(
        "INSERT INTO {} (queue, body, created_at) VALUES ($1, 'not an envelope', now()) RETURNING id",
        tables.store.table()
    ))
    .bind(&queue)
    .fetch_one(&tables.db)
    .await
    .unwrap();
    let good = tables.place(&queue, 1, true).await;

    let relay = tables.relay(Arc::new(bound.transport().clone()));
    let report = relay.drain(10).await.unwrap();
    assert_eq!((report.published, report.failed), (1, 1));
    let taken = bound.take_and_ack(&queue).await;
    assert_eq!(&taken.body[..], good.encode().unwrap().as_bytes());
    let row = sqlx::query(&format!(
        "SELECT status, attempts, last_error FROM {} WHERE id = $1",
        tables.store.table()
    ))
    .bind(bad)
    .fetch_one(&tables.db)
    .await
    .unwrap();
    assert_eq!(row.get::<String, _>("status"), "failed");
    assert_eq!(row.get::<i32, _>("attempts"), 1);
    let reason: String = row.get("last_error");
    assert!(
        reason.starts_with("the body is not a BabelQueue envelope"),
        "{reason}"
    );
    let status = relay.status().await.unwrap();
    assert_eq!((status.pending, status.failed), (0, 1));
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

async fn a_failed_publish_backs_off_and_is_published_later(broker: &'static TestBroker) {
    let tables = Tables::new().await;
    let bound = Bound::new(broker).await;
    let queue = bound.name().to_owned();
    let written = tables.place(&queue, 1, true).await;
    // A connection that is gone: every publish through it fails.
    let gone = AnyTransport::connect(broker.url(), ConnectOptions::default())
        .await
        .unwrap();
    let AnyTransport::Amqp(amqp) = &gone else {
        unreachable!("memory:// and amqp:// are AMQP bindings")
    };
    amqp.client().close().await.unwrap();
    let backoff = (Duration::from_millis(100), Duration::from_secs(1));
    let failing = tables.relay(Arc::new(gone)).backoff(backoff.0, backoff.1);
    assert_eq!(failing.flush().await.unwrap().failed, 1);
    let row = sqlx::query(&format!(
        "SELECT status, attempts, last_error, locked_until > now() AS backing_off FROM {}",
        tables.store.table()
    ))
    .fetch_one(&tables.db)
    .await
    .unwrap();
    assert_eq!(row.get::<String, _>("status"), "pending");
    assert_eq!(row.get::<i32, _>("attempts"), 1);
    assert!(!row.get::<String, _>("last_error").is_empty());
    assert!(row.get::<bool, _>("backing_off"));

    let relay = tables
        .relay(Arc::new(bound.transport().clone()))
        .backoff(backoff.0, backoff.1);
    let published = tokio::time::timeout(PATIENCE, async {
        while relay.flush().await.unwrap().published == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(published.is_ok(), "published once the backoff passed");
    let taken = bound.take_and_ack(&queue).await;
    assert_eq!(&taken.body[..], written.encode().unwrap().as_bytes());
}
polyq_testkit::both_brokers!(
    on memory, rabbitmq;
    a_failed_publish_backs_off_and_is_published_later
);
