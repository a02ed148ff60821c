//! `polyq bench outbox`: the AceMQ outbox relay (rows committed, then leased, published with
//! confirms and marked) against a plain confirmed publish of the same messages, in one run.
//!
//! Each round, on one queue and one connection: the plain side sends N messages through an
//! acemq publisher in windows of the relay's batch size, each window awaiting its confirms; the
//! relay side commits N rows through `Outbox::record` (not timed: that is the application's
//! transaction), then times `OutboxRelay::drain` until all N are confirmed and marked. The sides
//! alternate in ABBA order; the figure is the median of the rounds' ratios.

use std::time::{Duration, Instant};

use acemq::AceMq;
use acemq::outbox::{Outbox, OutboxRelay};
use clap::Args;
use polyq_amqp::QueueSpec;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::rate;

/// Arguments of `polyq bench outbox`.
#[derive(Debug, Args)]
pub(crate) struct OutboxArgs {
    /// Broker URL: `amqp://`, `amqps://` or `memory://`.
    #[arg(long, env = "POLYQ_AMQP_URL")]
    url: String,
    /// The PostgreSQL database; a table of unique name is created and dropped.
    #[arg(long, env = "POLYQ_POSTGRES_URL")]
    db: String,
    /// Messages per side and round.
    #[arg(long, default_value_t = 20_000)]
    messages: u32,
    /// Rows the relay publishes per pass, and the plain side's window.
    #[arg(long, default_value_t = 100)]
    batch_size: usize,
    /// Rounds; each runs both sides.
    #[arg(long, default_value_t = 4)]
    rounds: u32,
}

/// Runs `polyq bench outbox`.
pub(crate) async fn run(args: OutboxArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.messages > 0, "--messages must be at least 1");
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    anyhow::ensure!(
        (1..=10_000).contains(&args.batch_size),
        "--batch-size must be between 1 and 10 000"
    );
    println!(
        "polyq bench outbox: {} messages per side, batch {}, {} rounds, {}",
        args.messages,
        args.batch_size,
        args.rounds,
        polyq_amqp::redact_url(&args.url)
    );
    let db = PgPool::connect(&args.db).await?;
    let mq = AceMq::connect(&args.url).await?;
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let outbox = Outbox::in_table(&format!("acemq_outbox_bench_{suffix}"))?;
    outbox.migrate(&db).await?;
    let queue = format!("polyq.bench.outbox.{suffix}");
    mq.client()
        .declare_queue(&QueueSpec::new(queue.clone()))
        .await?;
    let measured = rounds(&args, &db, &mq, &outbox, &queue).await;
    mq.client().delete_queue(&queue).await?;
    sqlx::query(&format!("DROP TABLE {}", outbox.table()))
        .execute(&db)
        .await?;
    mq.close().await?;
    let mut ratios = measured?;
    ratios.sort_by(f64::total_cmp);
    println!("ratio: {:.3}", ratios[ratios.len() / 2]);
    Ok(())
}

async fn rounds(
    args: &OutboxArgs,
    db: &PgPool,
    mq: &AceMq,
    outbox: &Outbox,
    queue: &str,
) -> anyhow::Result<Vec<f64>> {
    let publisher = mq.publisher::<Value>("", queue);
    let relay = OutboxRelay::builder(db.clone(), mq)
        .table(outbox.table())
        .batch_size(args.batch_size)
        .build()?;
    let mut ratios = Vec::new();
    for round in 0..args.rounds {
        let (mut plain, mut relayed) = (Duration::ZERO, Duration::ZERO);
        for relay_first in [round % 2 == 1, round % 2 == 0] {
            if relay_first {
                relayed = relay_side(args, db, outbox, &publisher, &relay).await?;
            } else {
                plain = plain_side(args, &publisher).await?;
            }
            mq.client().purge_queue(queue).await?;
        }
        let (plain_rate, relay_rate) = (rate(args.messages, plain), rate(args.messages, relayed));
        let ratio = relay_rate / plain_rate;
        println!(
            "round {}: plain publish {plain_rate:.0} msg/s, relay {relay_rate:.0} msg/s, ratio {ratio:.3}",
            round + 1
        );
        ratios.push(ratio);
    }
    Ok(ratios)
}

fn payloads(args: &OutboxArgs) -> impl Iterator<Item = Value> {
    (0..args.messages).map(|id| json!({"order_id": id, "amount": 99.9, "currency": "EUR"}))
}

async fn plain_side(
    args: &OutboxArgs,
    publisher: &acemq::Publisher<Value>,
) -> anyhow::Result<Duration> {
    let all: Vec<Value> = payloads(args).collect();
    let started = Instant::now();
    for window in all.chunks(args.batch_size) {
        publisher.send_all(window).await?;
    }
    Ok(started.elapsed())
}

async fn relay_side(
    args: &OutboxArgs,
    db: &PgPool,
    outbox: &Outbox,
    publisher: &acemq::Publisher<Value>,
    relay: &OutboxRelay,
) -> anyhow::Result<Duration> {
    let mut tx = db.begin().await?;
    for payload in payloads(args) {
        outbox.record(&mut tx, publisher, &payload).await?;
    }
    tx.commit().await?;
    let started = Instant::now();
    let pass = relay.drain(usize::MAX).await?;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        pass.published == args.messages as usize && pass.failed == 0,
        "the relay published {} and failed {} of {} rows",
        pass.published,
        pass.failed,
        args.messages
    );
    Ok(elapsed)
}
