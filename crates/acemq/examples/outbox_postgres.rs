//! The transactional outbox on PostgreSQL: the message announcing an order is written in the
//! same transaction as the order, so both commit or neither does, and a relay publishes the
//! committed messages afterwards, now or after a restart.
//!
//! Needs PostgreSQL (`POLYQ_POSTGRES_URL`, default `postgres://postgres@127.0.0.1:5432/test`);
//! publishes to the embedded broker. Its tables are this run's own and dropped at the end:
//!
//! ```sh
//! cargo run -p acemq --features postgres --example outbox_postgres
//! ```

use acemq::outbox::{Outbox, OutboxRelay};
use acemq::{AceMq, Envelope};
use anyhow::{Context, ensure};
use polyq_amqp::QueueSpec;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

const QUEUE: &str = "orders.placed";

#[derive(Debug, Serialize, Deserialize)]
struct OrderPlaced {
    id: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("POLYQ_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let db = PgPool::connect(&url)
        .await
        .context("cannot reach PostgreSQL; set POLYQ_POSTGRES_URL")?;
    let mq = AceMq::connect("memory://example-outbox").await?;
    let (orders, outbox) = (
        format!("example_orders_{}", std::process::id()),
        format!("example_outbox_{}", std::process::id()),
    );
    let result = run(&db, &mq, &orders, &outbox).await;
    for table in [orders, outbox] {
        sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
            .execute(&db)
            .await?;
    }
    mq.close().await?;
    result
}

async fn run(db: &PgPool, mq: &AceMq, orders: &str, table: &str) -> anyhow::Result<()> {
    sqlx::query(&format!("CREATE TABLE {orders} (id BIGINT PRIMARY KEY)"))
        .execute(db)
        .await?;
    // The outbox table; `acemq::outbox::migrate` creates the default one, `acemq_outbox`.
    let outbox = Outbox::in_table(table)?;
    outbox.migrate(db).await?;
    mq.client().declare_queue(&QueueSpec::new(QUEUE)).await?;
    let placed = mq.publisher::<OrderPlaced>("", QUEUE);

    // Order 1 and its message commit together.
    let mut tx = db.begin().await?;
    let insert = format!("INSERT INTO {orders} (id) VALUES ($1)");
    sqlx::query(&insert).bind(1_i64).execute(&mut *tx).await?;
    let recorded = outbox
        .record(&mut tx, &placed, &OrderPlaced { id: 1 })
        .await?;
    tx.commit().await?;
    println!("order 1 committed with message {}", recorded.id());
    // Order 2 is rolled back: its message goes with it.
    let mut tx = db.begin().await?;
    sqlx::query(&insert).bind(2_i64).execute(&mut *tx).await?;
    outbox
        .record(&mut tx, &placed, &OrderPlaced { id: 2 })
        .await?;
    tx.rollback().await?;
    println!("order 2 rolled back");

    let status = outbox.status(db).await?;
    println!("{table}: {} message(s) pending", status.pending);
    ensure!(
        status.pending == 1,
        "expected only order 1's message pending"
    );

    // The relay publishes what committed, each row marked published once the broker confirmed.
    let relay = OutboxRelay::builder(db.clone(), mq).table(table).build()?;
    let pass = relay.drain(10).await?;
    println!(
        "relay: {} published, {} failed",
        pass.published, pass.failed
    );
    ensure!(
        pass.published == 1 && pass.failed == 0,
        "expected one message published"
    );
    ensure!(
        relay.status().await?.pending == 0,
        "{table} should have nothing pending"
    );

    // What a consumer of `orders.placed` receives: order 1's message, as recorded; nothing else.
    let delivery = mq
        .client()
        .get(QUEUE)
        .await?
        .context("order 1's message is not in the queue")?;
    delivery.ack().await?;
    let received = Envelope::from_properties(&delivery.properties, &delivery.routing_key);
    let order: OrderPlaced = serde_json::from_slice(&delivery.body)?;
    println!("{QUEUE}: order {} as message {}", order.id, received.id());
    ensure!(
        order.id == 1 && received.id() == recorded.id(),
        "expected order 1's message"
    );
    ensure!(
        mq.client().get(QUEUE).await?.is_none(),
        "order 2's message was published"
    );
    Ok(())
}
