//! `polyq bench outbox`: a family's outbox relay (rows committed, then leased, published with
//! confirms and marked) against a plain confirmed publish of the same messages, in one run.
//!
//! Each round, on one queue and one connection: the plain side sends N messages through the
//! family's own publish (an acemq publisher, or `BabelQueue::publish`) in windows of the
//! relay's batch size, as many windows awaiting their confirms at once as the relay has batches
//! in flight (`--window`), so both sides keep the same number of publishes outstanding; the
//! relay side commits N rows through the family's outbox writer (not timed: that is the
//! application's transaction), then times the relay's `drain` until all N are confirmed and
//! marked. The sides alternate in ABBA order; the figure is the median of the rounds' ratios.

use std::future::Future;
use std::time::{Duration, Instant};

use acemq::AceMq;
use acemq::outbox::{Outbox, OutboxRelay};
use babelqueue::BabelQueue;
use babelqueue::transport::AnyTransport;
use clap::{Args, ValueEnum};
use futures_util::{StreamExt as _, TryStreamExt as _};
use polyq_amqp::QueueSpec;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::rate;

/// Arguments of `polyq bench outbox`.
#[derive(Debug, Args)]
pub(crate) struct OutboxArgs {
    /// Broker URL: `amqp://`, `amqps://` or `memory://`, and for BabelQueue `redis://` too.
    #[arg(long, env = "POLYQ_AMQP_URL")]
    url: String,
    /// The PostgreSQL database; a table of unique name is created and dropped.
    #[arg(long, env = "POLYQ_POSTGRES_URL")]
    db: String,
    /// Whose outbox and relay.
    #[arg(long, value_enum, default_value_t = Family::Acemq)]
    family: Family,
    /// Messages per side and round.
    #[arg(long, default_value_t = 20_000)]
    messages: u32,
    /// Rows the relay publishes per pass, and the plain side's window.
    #[arg(long, default_value_t = 100)]
    batch_size: usize,
    /// Batches the relay has in flight at once, and the plain side's windows in flight
    /// (default: the relay's default).
    #[arg(long, default_value_t = acemq::outbox::DEFAULT_WINDOW)]
    window: usize,
    /// Rounds; each runs both sides.
    #[arg(long, default_value_t = 4)]
    rounds: u32,
}

/// Whose outbox `polyq bench outbox` measures.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Family {
    /// The AceMQ outbox (`acemq_outbox` layout) and its relay.
    Acemq,
    /// The BabelQueue outbox (`babelqueue_outbox` layout) and its relay.
    Babel,
}

/// Runs `polyq bench outbox`.
pub(crate) async fn run(args: OutboxArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.messages > 0, "--messages must be at least 1");
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    anyhow::ensure!(
        (1..=10_000).contains(&args.batch_size),
        "--batch-size must be between 1 and 10 000"
    );
    anyhow::ensure!(
        (1..=64).contains(&args.window),
        "--window must be between 1 and 64"
    );
    println!(
        "polyq bench outbox: {:?}, {} messages per side, batch {}, window {}, {} rounds, {}",
        args.family,
        args.messages,
        args.batch_size,
        args.window,
        args.rounds,
        polyq_amqp::redact_url(&args.url)
    );
    let db = PgPool::connect(&args.db).await?;
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let mut ratios = match args.family {
        Family::Acemq => acemq_rounds(&args, &db, &suffix).await?,
        Family::Babel => babel_rounds(&args, &db, &suffix).await?,
    };
    ratios.sort_by(f64::total_cmp);
    println!("ratio: {:.3}", ratios[ratios.len() / 2]);
    Ok(())
}

/// The rounds, each side timed by its own closure and followed by `empty`.
async fn rounds<Plain, Relayed, Empty, EmptyFut>(
    args: &OutboxArgs,
    plain_side: Plain,
    relay_side: Relayed,
    empty: Empty,
) -> anyhow::Result<Vec<f64>>
where
    Plain: AsyncFn() -> anyhow::Result<Duration>,
    Relayed: AsyncFn() -> anyhow::Result<Duration>,
    Empty: Fn() -> EmptyFut,
    EmptyFut: Future<Output = anyhow::Result<()>>,
{
    let mut ratios = Vec::new();
    for round in 0..args.rounds {
        let (mut plain, mut relayed) = (Duration::ZERO, Duration::ZERO);
        for relay_first in [round % 2 == 1, round % 2 == 0] {
            if relay_first {
                relayed = relay_side().await?;
            } else {
                plain = plain_side().await?;
            }
            empty().await?;
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

/// Sends every chunk of `batch_size` payloads with `send`, `window` chunks at once.
async fn in_windows<'a, F, Fut>(
    args: &OutboxArgs,
    all: &'a [Value],
    send: F,
) -> anyhow::Result<Duration>
where
    F: Fn(&'a [Value]) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let started = Instant::now();
    futures_util::stream::iter(all.chunks(args.batch_size))
        .map(send)
        .buffer_unordered(args.window)
        .try_for_each(|()| std::future::ready(Ok(())))
        .await?;
    Ok(started.elapsed())
}

/// Checks that the relay published every row and failed none.
fn all_published(args: &OutboxArgs, published: usize, failed: usize) -> anyhow::Result<()> {
    anyhow::ensure!(
        published == args.messages as usize && failed == 0,
        "the relay published {published} and failed {failed} of {} rows",
        args.messages
    );
    Ok(())
}

async fn acemq_rounds(args: &OutboxArgs, db: &PgPool, suffix: &str) -> anyhow::Result<Vec<f64>> {
    let mq = AceMq::connect(&args.url).await?;
    let outbox = Outbox::in_table(&format!("acemq_outbox_bench_{suffix}"))?;
    outbox.migrate(db).await?;
    let queue = format!("polyq.bench.outbox.{suffix}");
    mq.client()
        .declare_queue(&QueueSpec::new(queue.clone()))
        .await?;
    let publisher = mq.publisher::<Value>("", &queue);
    let measured = match OutboxRelay::builder(db.clone(), &mq)
        .table(outbox.table())
        .batch_size(args.batch_size)
        .window(args.window)
        .build()
    {
        Ok(relay) => {
            let all: Vec<Value> = payloads(args).collect();
            let publisher = &publisher;
            rounds(
                args,
                async || {
                    in_windows(args, &all, |window| async move {
                        publisher.send_all(window).await?;
                        Ok(())
                    })
                    .await
                },
                async || {
                    let mut tx = db.begin().await?;
                    for payload in &all {
                        outbox.record(&mut tx, publisher, payload).await?;
                    }
                    tx.commit().await?;
                    let started = Instant::now();
                    let pass = relay.drain(usize::MAX).await?;
                    let elapsed = started.elapsed();
                    all_published(args, pass.published, pass.failed)?;
                    Ok(elapsed)
                },
                || async { Ok(mq.client().purge_queue(&queue).await.map(drop)?) },
            )
            .await
        }
        Err(error) => Err(error.into()),
    };
    mq.client().delete_queue(&queue).await?;
    sqlx::query(&format!("DROP TABLE {}", outbox.table()))
        .execute(db)
        .await?;
    mq.close().await?;
    measured
}

async fn babel_rounds(args: &OutboxArgs, db: &PgPool, suffix: &str) -> anyhow::Result<Vec<f64>> {
    use babelqueue::outbox::{Outbox as BabelOutbox, OutboxRelay as BabelRelay, PgOutboxStore};

    const URN: &str = "urn:babel:orders:created";
    let table = format!("babelqueue_outbox_bench_{suffix}");
    let queue = BabelQueue::builder(&args.url)
        .queue(format!("polyq.bench.outbox.{suffix}"))
        .connect()
        .await?;
    let store = PgOutboxStore::new(db.clone()).in_table(&table)?;
    store.migrate().await?;
    let outbox = BabelOutbox::in_table(&table)?;
    let measured = match BabelRelay::new(store, queue.transport().clone())
        .batch_size(args.batch_size)
        .and_then(|relay| relay.window(args.window))
    {
        Ok(relay) => {
            let all: Vec<Value> = payloads(args).collect();
            let queue = &queue;
            rounds(
                args,
                async || {
                    in_windows(args, &all, |window| async move {
                        futures_util::future::try_join_all(
                            window.iter().map(|payload| queue.publish(URN, payload)),
                        )
                        .await?;
                        Ok(())
                    })
                    .await
                },
                async || {
                    let mut tx = db.begin().await?;
                    for payload in &all {
                        let envelope = babelqueue::make(
                            URN,
                            payload,
                            babelqueue::MakeOptions::new().queue(queue.queue()),
                        )?;
                        outbox.write(&mut tx, &envelope).await?;
                    }
                    tx.commit().await?;
                    let started = Instant::now();
                    let report = relay.drain(usize::MAX).await?;
                    let elapsed = started.elapsed();
                    all_published(args, report.published, report.failed)?;
                    Ok(elapsed)
                },
                || async {
                    match queue.transport().as_ref() {
                        AnyTransport::Amqp(amqp) => {
                            amqp.client().purge_queue(queue.queue()).await?;
                            Ok(())
                        }
                        _ => super::babel::remove(queue).await,
                    }
                },
            )
            .await
        }
        Err(error) => Err(error.into()),
    };
    super::babel::remove(&queue).await?;
    sqlx::query(&format!("DROP TABLE {table}"))
        .execute(db)
        .await?;
    measured
}
