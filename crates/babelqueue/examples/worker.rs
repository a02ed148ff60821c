//! A worker on the embedded broker: two orders are published, the handler fails the first
//! attempt of one (a dependency is down), the worker retries it with `attempts` raised, and both
//! end up handled. Runs with no service: `cargo run -p babelqueue --example worker`.

use std::time::Duration;

use babelqueue::BabelQueue;
use babelqueue::worker::Job;
use serde_json::json;

const CREATED: &str = "urn:babel:orders:created";

#[derive(serde::Deserialize)]
struct Order {
    order_id: u64,
}

/// What the handler can fail with; its type name is what a dead-letter block records.
#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("the inventory service is unavailable")]
    InventoryUnavailable,
    #[error(transparent)]
    Payload(#[from] babelqueue::Error),
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> babelqueue::Result<()> {
    // `redis://…` or `amqp://…` instead run the same code against a broker.
    let orders = BabelQueue::builder("memory://example-worker")
        .queue("orders")
        .connect()
        .await?;

    for order_id in [1042, 1043] {
        let sent = orders
            .publish(CREATED, &json!({"order_id": order_id, "amount": 99.9}))
            .await?;
        println!(
            "published {CREATED} order {order_id} (meta.id {})",
            sent.meta().and_then(|meta| meta.id()).unwrap_or_default()
        );
    }

    let report = orders
        .worker()
        .max_attempts(3)
        .handle(CREATED, |job: Job| async move {
            let order: Order = job.data_as()?;
            if order.order_id == 1043 && job.attempts() == 0 {
                println!(
                    "order {} attempts={}: {}, to be retried",
                    order.order_id,
                    job.attempts(),
                    OrderError::InventoryUnavailable
                );
                return Err(OrderError::InventoryUnavailable);
            }
            println!(
                "order {} attempts={}: handled",
                order.order_id,
                job.attempts()
            );
            Ok::<_, OrderError>(())
        })
        // Two orders and one retry; the idle timeout only bounds a run that goes wrong.
        .consume(3, Duration::from_secs(5))
        .await?;

    println!(
        "worker report: {} received, {} succeeded, {} retried, {} dead-lettered",
        report.received, report.succeeded, report.retried, report.dead_lettered
    );
    assert_eq!((report.succeeded, report.retried), (2, 1), "{report:?}");
    Ok(())
}
