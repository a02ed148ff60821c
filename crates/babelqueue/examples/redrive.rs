//! A redrive on the embedded broker: a job arrives before its handler is deployed and is
//! dead-lettered as an unknown URN; a dry run shows the plan, the redrive sends it back to its
//! queue with `attempts` reset and the replay mark set, and the new handler takes it. Runs with no
//! service: `cargo run -p babelqueue --example redrive`.

use std::time::Duration;

use babelqueue::BabelQueue;
use babelqueue::redrive::{RedriveOptions, RedriveReport};
use babelqueue::worker::{Job, UnknownUrn};
use serde_json::json;

const SHIPPED: &str = "urn:babel:orders:shipped";
/// Bounds each wait for a message; only a run that goes wrong waits this long.
const WAIT: Duration = Duration::from_secs(5);

#[tokio::main(flavor = "current_thread")]
async fn main() -> babelqueue::Result<()> {
    let orders = BabelQueue::builder("memory://example-redrive")
        .queue("orders")
        .connect()
        .await?;

    orders.publish(SHIPPED, &json!({"order_id": 1042})).await?;
    println!("published {SHIPPED} before any worker handles it");
    let report = orders
        .worker()
        .unknown_urn(UnknownUrn::DeadLetter)
        .consume(1, WAIT)
        .await?;
    println!(
        "worker without a handler: {} dead-lettered to orders.dlq",
        report.dead_lettered
    );
    assert_eq!(report.dead_lettered, 1, "{report:?}");

    let plan = orders
        .redrive(&RedriveOptions::new().dry_run(true).wait(WAIT))
        .await?;
    show("dry run", &plan);
    assert_eq!((plan.redriven, plan.skipped), (0, 1), "{plan:?}");

    // Stamps `bq-replay-bypass`, so a handler can tell a deliberate replay from a first delivery.
    let done = orders
        .redrive(&RedriveOptions::new().bypass(true).wait(WAIT))
        .await?;
    show("redrive", &done);
    assert_eq!(done.redriven, 1, "{done:?}");

    println!("deployed a handler for {SHIPPED}");
    let report = orders
        .worker()
        .handle(SHIPPED, |job: Job| async move {
            println!(
                "{} attempts={} replay={}: handled",
                job.urn(),
                job.attempts(),
                job.is_replay()
            );
            Ok::<_, std::convert::Infallible>(())
        })
        .consume(1, WAIT)
        .await?;
    assert_eq!(report.succeeded, 1, "{report:?}");
    Ok(())
}

fn show(what: &str, report: &RedriveReport) {
    for item in &report.items {
        println!(
            "{what}: {} ({}) from {} to {}: {:?}",
            item.urn, item.reason, item.from, item.to, item.action
        );
    }
}
