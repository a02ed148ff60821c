//! Request/reply: a pricing service answers quotes on its queue, and a requester waits for each
//! answer on a reply queue of its own. A request the service cannot answer comes back as an
//! error to the caller, and the request itself is set aside in `<queue>.dlq`, never retried.
//!
//! Runs on the embedded broker, or on the broker given as the first argument:
//!
//! ```sh
//! cargo run -p acemq --example request_reply
//! cargo run -p acemq --example request_reply -- amqp://guest:guest@127.0.0.1:5672/%2f
//! ```

use std::time::Duration;

use acemq::patterns::PatternError;
use acemq::patterns::request_reply::{Requester, respond};
use acemq::topology::{SourceQueue, Topology, dead_letter_queue, parked_queue};
use acemq::{AceMq, Message};
use anyhow::{Context, bail, ensure};
use serde::{Deserialize, Serialize};

/// The upper bound on any one step; each takes well under a second.
const STEP: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize, Deserialize)]
struct Quote {
    sku: String,
    quantity: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct Price {
    total_cents: u64,
}

/// The service's answer; an error is sent back to the requester as its `acemq-error`.
async fn price(message: Message<Quote>) -> Result<Price, String> {
    let quote = message.payload();
    let unit_cents = match quote.sku.as_str() {
        "espresso" => 250,
        "croissant" => 180,
        other => return Err(format!("no price for `{other}`")),
    };
    Ok(Price {
        total_cents: unit_cents * u64::from(quote.quantity),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::args().nth(1);
    let mq = AceMq::connect(url.as_deref().unwrap_or("memory://example-request-reply")).await?;
    // The service's queue, of this run's own, removed at the end whatever happened.
    let queue = format!("example.pricing.{}", std::process::id());
    let result = run(&mq, &queue).await;
    for name in [dead_letter_queue(&queue), parked_queue(&queue), queue] {
        mq.client().delete_queue(&name).await?;
    }
    mq.close().await?;
    result
}

async fn run(mq: &AceMq, queue: &str) -> anyhow::Result<()> {
    // The service's queue dead-letters into `<queue>.dlq`: where a request that failed goes.
    let plan = Topology::new()
        .queue(SourceQueue::new(queue).with_dead_letter())
        .plan()?;
    let applied = acemq::topology_apply::apply(mq.client(), &plan).await?;
    ensure!(applied.is_clean(), "declaring the queues failed");
    let responder = respond(mq, mq.consumer::<Quote>(queue), price).await?;

    let requester = Requester::start(mq).await?.timeout(STEP);
    println!(
        "requests go to {queue}, replies come back to {}",
        requester.reply_queue()
    );
    let two_espressos = Quote {
        sku: "espresso".into(),
        quantity: 2,
    };
    let price: Price = requester.request("", queue, &two_espressos).await?;
    println!("2 espresso: {} cents", price.total_cents);
    ensure!(
        price.total_cents == 500,
        "expected 500 cents for two espressos"
    );

    let tea = Quote {
        sku: "tea".into(),
        quantity: 1,
    };
    let Err(PatternError::Responder { error, .. }) =
        requester.request::<_, Price>("", queue, &tea).await
    else {
        bail!("the request for tea should have come back with the service's error");
    };
    println!("1 tea: the service answered with an error: {error}");
    ensure!(
        error.contains("no price for `tea`"),
        "unexpected error: {error}"
    );
    requester.close().await?;
    ensure!(
        responder.answered() == 1 && responder.failed() == 1,
        "expected one of each"
    );
    ensure!(
        responder.drain(STEP).await.is_clean(),
        "the responder did not drain cleanly"
    );

    // The failed request waits in `<queue>.dlq` with its original body.
    let dlq = dead_letter_queue(queue);
    let (set_aside, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let inspector = mq
        .consumer::<Quote>(dlq.as_str())
        .declare(false)
        .start(move |message: Message<Quote>| {
            let set_aside = set_aside.clone();
            async move {
                set_aside.send(message.into_payload().sku).ok();
            }
        })
        .await?;
    let sku = tokio::time::timeout(STEP, seen.recv()).await.ok().flatten();
    let sku = sku.with_context(|| format!("the failed request did not arrive in {dlq}"))?;
    println!("in {dlq}: the request for {sku}");
    ensure!(sku == "tea", "expected the tea request in {dlq}, got {sku}");
    ensure!(
        inspector.drain(STEP).await.is_clean(),
        "the inspector did not drain cleanly"
    );
    Ok(())
}
