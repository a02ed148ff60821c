//! The transactional outbox on the real PostgreSQL and MariaDB, relayed to the embedded broker
//! and to RabbitMQ: the message commits or rolls back with the business row, the relay publishes
//! what the publisher would have sent, two relays never publish a row twice, a malformed row is
//! failed without stopping the relay, and a refused publish is retried after its backoff.

mod common;
#[macro_use]
#[path = "common/outbox_db.rs"]
mod outbox_db;

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::{Env, LIMIT};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use outbox_db::{Db, Store, Tables};
use polyq_amqp::QueueSpec;
use serde_json::{Value, json};
use sqlx::Row;

/// `acemq.outbox.total` by table and outcome, and `acemq.outbox.lag` by table.
#[derive(Default)]
struct Seen {
    totals: HashMap<(String, String), u64>,
    lags: HashMap<String, f64>,
}

/// The recorder of this test binary, and what its snapshots showed so far: a snapshot resets
/// counters, so every test reads through this one accumulator.
struct Meters {
    snapshotter: Snapshotter,
    seen: Mutex<Seen>,
}

fn meters() -> &'static Meters {
    static METERS: OnceLock<Meters> = OnceLock::new();
    METERS.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        Meters {
            snapshotter,
            seen: Mutex::new(Default::default()),
        }
    })
}

/// `acemq.outbox.total` by outcome, and the last `acemq.outbox.lag`, for `table`.
fn outbox_meters(table: &str) -> (u64, u64, Option<f64>) {
    let meters = meters();
    let mut seen = meters.seen.lock().unwrap();
    let Seen { totals, lags } = &mut *seen;
    for (key, _, _, value) in meters.snapshotter.snapshot().into_vec() {
        let key = key.key();
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
        };
        let Some(of) = label("table") else { continue };
        match (key.name(), value, label("outcome")) {
            ("acemq.outbox.total", DebugValue::Counter(n), Some(outcome)) => {
                *totals.entry((of, outcome)).or_default() += n;
            }
            ("acemq.outbox.lag", DebugValue::Gauge(value), None) => {
                lags.insert(of, value.into_inner());
            }
            _ => {}
        }
    }
    let total = |outcome: &str| {
        totals
            .get(&(table.to_owned(), outcome.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    (
        total("published"),
        total("failed"),
        lags.get(table).copied(),
    )
}

/// `each_db!(name)` runs `async fn name(env, db)` on both brokers with each database: the tests
/// `name::postgres::memory`, `name::postgres::rabbitmq`, `name::mysql::memory` and
/// `name::mysql::rabbitmq`.
macro_rules! each_db {
    ($name:ident) => {
        mod $name {
            use super::{Db, Env};

            async fn postgres(env: &'static Env) {
                super::$name(env, Db::Postgres).await;
            }

            async fn mysql(env: &'static Env) {
                super::$name(env, Db::MySql).await;
            }

            polyq_testkit::both_brokers!(postgres, mysql);
        }
    };
}

async fn commits_or_rolls_back_with_the_business_row(env: &'static Env, db: Db) {
    let tables = Tables::new(db).await;
    let queue = env.queue("outbox-tx").await;
    tables.place(&env.mq, &queue, 1, false).await;
    let committed = tables.place(&env.mq, &queue, 2, true).await;
    assert_eq!(tables.count(&tables.business, "").await, 1);
    assert_eq!(tables.count(&tables.outbox, "").await, 1);

    let relay = tables.relay(&env.mq).build().unwrap();
    let pass = relay.drain(10).await.unwrap();
    assert_eq!((pass.published, pass.failed), (1, 0));
    assert_eq!(env.count(&queue).await, 1);

    // What the relay sent is what the publisher sends for the same envelope.
    let direct = env.mq.publisher::<Value>("", queue.as_str());
    direct
        .send_with(&json!({ "id": 2 }), committed.clone())
        .await
        .unwrap();
    let [relayed, sent] = <[_; 2]>::try_from(env.take(&queue, 2).await).unwrap();
    assert_eq!(relayed.body, sent.body);
    assert_eq!(relayed.properties, sent.properties);
    assert_eq!(
        relayed.properties.message_id.as_deref(),
        Some(committed.id())
    );
    assert_eq!(relayed.routing_key, queue);

    let status = relay.status().await.unwrap();
    assert_eq!((status.pending, status.failed), (0, 0));
    assert_eq!(status.oldest_pending_age, None);
    assert_eq!(
        tables
            .count(&tables.outbox, "WHERE published_at IS NOT NULL")
            .await,
        1
    );
}
each_db!(commits_or_rolls_back_with_the_business_row);

async fn the_next_relay_publishes_what_a_stopped_one_left(env: &'static Env, db: Db) {
    let tables = Tables::new(db).await;
    let queue = env.queue("outbox-next").await;
    tables.place(&env.mq, &queue, 1, true).await;

    let stopped = polyq_runtime::Shutdown::new();
    stopped.stop();
    tables.relay(&env.mq).build().unwrap().run(stopped).await;
    assert_eq!(
        env.count(&queue).await,
        0,
        "a relay stopped before it ran publishes nothing"
    );
    let status = tables
        .relay(&env.mq)
        .build()
        .unwrap()
        .status()
        .await
        .unwrap();
    assert_eq!(status.pending, 1);
    assert!(status.oldest_pending_age.is_some());

    let next = polyq_runtime::Shutdown::new();
    let relay = tables.relay(&env.mq).build().unwrap();
    let running = tokio::spawn({
        let next = next.clone();
        async move { relay.run(next).await }
    });
    let delivered = env.next_in(&queue).await;
    assert_eq!(&delivered.body[..], br#"{"id":1}"#);
    next.stop();
    tokio::time::timeout(LIMIT, running)
        .await
        .expect("the relay stops when asked")
        .unwrap();
}
each_db!(the_next_relay_publishes_what_a_stopped_one_left);

async fn two_relays_never_publish_a_row_twice(env: &'static Env, db: Db) {
    let tables = Tables::new(db).await;
    let queue = env.queue("outbox-two").await;
    let rows = 120;
    let publisher = env.mq.publisher::<Value>("", queue.as_str());
    in_transaction!(tables, true, |tx, outbox, _placeholder| {
        for id in 0..rows {
            outbox
                .record(&mut tx, &publisher, &json!({ "id": id }))
                .await
                .unwrap();
        }
    });

    let one = tables.relay(&env.mq).batch_size(7).build().unwrap();
    let two = tables.relay(&env.mq).batch_size(7).build().unwrap();
    let (a, b) = tokio::join!(one.drain(1000), two.drain(1000));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.published + b.published, rows);
    assert_eq!(a.failed + b.failed, 0);
    assert_eq!(env.count(&queue).await, rows as u32);
    let ids: HashSet<_> = env
        .take(&queue, rows)
        .await
        .into_iter()
        .map(|d| d.properties.message_id.unwrap())
        .collect();
    assert_eq!(ids.len(), rows);
}
each_db!(two_relays_never_publish_a_row_twice);

async fn a_malformed_row_is_failed_and_the_rest_published(env: &'static Env, db: Db) {
    meters();
    let tables = Tables::new(db).await;
    let queue = env.queue("outbox-bad").await;
    // A minute old, as another writer left it.
    let old = match db {
        Db::Postgres => "now() - interval '1 minute'",
        Db::MySql => "UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE",
    };
    let insert = format!(
        "INSERT INTO {} (id, exchange, routing_key, body, content_type, headers, created_at) \
         VALUES ('bad-1', '', ?, ?, 'application/json', 'not json', {old})",
        tables.outbox
    );
    on_db!(tables, insert, [&queue, &b"{}"[..]], execute, |_done| ());
    tables.place(&env.mq, &queue, 1, true).await;

    let relay = tables.relay(&env.mq).build().unwrap();
    let pass = relay.drain(10).await.unwrap();
    assert_eq!((pass.published, pass.failed), (1, 1));
    assert_eq!(&env.next_in(&queue).await.body[..], br#"{"id":1}"#);
    let select = format!(
        "SELECT attempts, last_error FROM {} WHERE id = 'bad-1'",
        tables.outbox
    );
    let (attempts, reason): (i32, String) = on_db!(tables, select, [], fetch_one, |row| (
        row.get("attempts"),
        row.get("last_error")
    ));
    assert_eq!(attempts, 10);
    assert!(
        reason.starts_with("the headers column is not JSON"),
        "{reason}"
    );
    let status = relay.status().await.unwrap();
    assert_eq!((status.pending, status.failed), (0, 1));
    // Not offered again.
    assert_eq!(relay.flush().await.unwrap().claimed, 0);
    let (published, failed, lag) = outbox_meters(&tables.outbox);
    assert_eq!((published, failed), (1, 1));
    assert_eq!(
        lag,
        Some(0.0),
        "nothing is pending: the failed row is not lag"
    );
}
each_db!(a_malformed_row_is_failed_and_the_rest_published);

async fn a_refused_publish_backs_off_and_is_published_later(env: &'static Env, db: Db) {
    let tables = Tables::new(db).await;
    // Not declared yet: the mandatory publish comes back unroutable.
    let queue = polyq_testkit::unique_name("acemq.rt.outbox-later");
    tables.place(&env.mq, &queue, 1, true).await;
    let relay = tables
        .relay(&env.mq)
        .backoff(Duration::from_millis(100), Duration::from_secs(1))
        .build()
        .unwrap();
    let pass = relay.flush().await.unwrap();
    assert_eq!((pass.published, pass.failed), (0, 1));
    let now = match db {
        Db::Postgres => "now()",
        Db::MySql => "UTC_TIMESTAMP(6)",
    };
    let select = format!(
        "SELECT attempts, last_error, locked_until > {now} AS backing_off FROM {}",
        tables.outbox
    );
    let (attempts, reason, backing_off): (i32, String, bool) =
        on_db!(tables, select, [], fetch_one, |row| (
            row.get("attempts"),
            row.get("last_error"),
            row.get("backing_off")
        ));
    assert_eq!(attempts, 1);
    assert!(reason.contains("unroutable"), "{reason}");
    assert!(backing_off);
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
each_db!(a_refused_publish_backs_off_and_is_published_later);
