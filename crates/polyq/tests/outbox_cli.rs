//! `polyq outbox status`, `relay` and `purge` on the real PostgreSQL, for both families: the
//! status counts what is pending, the relay publishes it and stops gracefully on SIGTERM, and
//! the purge deletes the published rows older than its retention.

mod common;

use std::time::Duration;

use babelqueue::outbox::{Outbox, PgOutboxStore};
use babelqueue::transport::{AnyTransport, ConnectOptions, Transport};
use babelqueue::{MakeOptions, make};
use common::{polyq, success_lines};
use polyq_testkit::brokers::DeleteQueues;
use polyq_testkit::postgres::DropTables;
use serde_json::{Value, json};
use sqlx::PgPool;

const PATIENCE: Duration = Duration::from_secs(20);

fn unique_table(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        polyq_testkit::unique_name("cli").replace(['-', '.'], "_")
    )
}

/// The one JSON line `polyq outbox <command> --family F --db D --table T <rest>` prints.
fn outbox_line(command: &str, family: &str, table: &str, rest: &[&str]) -> Value {
    let db = polyq_testkit::postgres_url();
    let mut args = vec![
        "outbox", command, "--family", family, "--db", &db, "--table", table,
    ];
    args.extend_from_slice(rest);
    let lines = success_lines(polyq(&args), &args);
    assert_eq!(lines.len(), 1, "{lines:?}");
    serde_json::from_str(&lines[0]).unwrap()
}

fn status(family: &str, table: &str) -> Value {
    outbox_line("status", family, table, &[])
}

fn purge(family: &str, table: &str, older_than: &str) -> Value {
    outbox_line("purge", family, table, &["--older-than", older_than])
}

/// Purges `table` of `family` twice: the `rows` published just now are kept by a retention of
/// an hour, and deleted by it once their `published_at` is moved back two hours.
async fn purge_keeps_the_retention(db: &PgPool, family: &str, table: &str, rows: u64) {
    let kept = purge(family, table, "1h");
    assert_eq!(kept["purged"], 0, "{kept}");
    assert_eq!(kept["older_than_seconds"], 3600.0);
    sqlx::query(&format!(
        "UPDATE {table} SET published_at = published_at - interval '2 hours'"
    ))
    .execute(db)
    .await
    .unwrap();
    assert_eq!(purge(family, table, "1h")["purged"], rows);
    let left: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(db)
        .await
        .unwrap();
    assert_eq!(left, 0);

    let db_url = polyq_testkit::postgres_url();
    let args = [
        "outbox",
        "purge",
        "--family",
        family,
        "--db",
        &db_url,
        "--table",
        table,
        "--older-than",
        "a week",
    ];
    let refused = polyq(&args);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--older-than"), "{stderr}");
}

/// Runs the relay until `published` says it is done, then stops it with SIGTERM and asserts
/// that it exited cleanly.
async fn relay_until<F, Fut>(family: &str, table: &str, url: &str, published: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let db = polyq_testkit::postgres_url();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_polyq"))
        .args([
            "outbox", "relay", "--family", family, "--db", &db, "--table", table, "--url", url,
        ])
        .env("POLYQ_LOG", "off")
        .kill_on_drop(true)
        .spawn()
        .expect("polyq runs");
    tokio::time::timeout(PATIENCE, async {
        while !published().await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the relay published in time");
    let pid = child.id().expect("running").to_string();
    let killed = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    let exit = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("the relay stops on SIGTERM")
        .unwrap();
    assert!(exit.success(), "graceful stop exits 0, got {exit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn babel_status_and_relay_to_redis() {
    let db = PgPool::connect(&polyq_testkit::postgres_url())
        .await
        .unwrap();
    let table = unique_table("babelqueue_outbox");
    let _table = DropTables::new([&table]);
    let store = PgOutboxStore::new(db.clone()).in_table(&table).unwrap();
    store.migrate().await.unwrap();
    let queue = polyq_testkit::unique_name("polyq.outbox");
    let _queues = DeleteQueues::new(&polyq_testkit::redis_url(), [&queue]);
    let mut tx = db.begin().await.unwrap();
    for id in 0..2 {
        let envelope = make(
            "urn:babel:orders:created",
            &json!({ "id": id }),
            MakeOptions::default().queue(&queue),
        )
        .unwrap();
        Outbox::in_table(&table)
            .unwrap()
            .write(&mut tx, &envelope)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    let before = status("babel", &table);
    assert_eq!(before["pending"], 2);
    assert_eq!(before["failed"], 0);
    assert!(before["oldest_pending_age_ms"].is_u64());

    let url = polyq_testkit::redis_url();
    let redis = AnyTransport::connect(&url, ConnectOptions::default())
        .await
        .unwrap();
    relay_until("babel", &table, &url, || async {
        redis.depth(&queue).await.unwrap() == 2
    })
    .await;
    let after = status("babel", &table);
    assert_eq!(after["pending"], 0);
    assert_eq!(after["oldest_pending_age_ms"], Value::Null);
    purge_keeps_the_retention(&db, "babel", &table, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acemq_status_and_relay_to_rabbitmq() {
    let db = PgPool::connect(&polyq_testkit::postgres_url())
        .await
        .unwrap();
    let table = unique_table("acemq_outbox");
    let _table = DropTables::new([&table]);
    let outbox = acemq::outbox::Outbox::in_table(&table).unwrap();
    outbox.migrate(&db).await.unwrap();
    let url = polyq_testkit::amqp_url();
    let queue = polyq_testkit::unique_name("polyq.outbox");
    let _queues = DeleteQueues::new(&url, [&queue]);
    let mq = acemq::AceMq::connect(&url).await.unwrap();
    mq.client()
        .declare_queue(&polyq_amqp::QueueSpec::new(queue.clone()))
        .await
        .unwrap();
    let publisher = mq.publisher::<Value>("", queue.as_str());
    let mut tx = db.begin().await.unwrap();
    outbox
        .record(&mut tx, &publisher, &json!({ "id": 1 }))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    assert_eq!(status("acemq", &table)["pending"], 1);
    relay_until("acemq", &table, &url, || async {
        mq.client()
            .inspect_queue(&queue)
            .await
            .unwrap()
            .message_count
            == 1
    })
    .await;
    let after = status("acemq", &table);
    assert_eq!(
        (after["pending"].clone(), after["failed"].clone()),
        (json!(0), json!(0))
    );
    purge_keeps_the_retention(&db, "acemq", &table, 1).await;

    mq.close().await.unwrap();
}
