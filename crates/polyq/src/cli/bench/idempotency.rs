//! `polyq bench idempotency`: an idempotent acemq consumer (a claim before each handler call, a
//! confirm after it, on PostgreSQL or Redis) against the same consumer without a store, in one
//! run.
//!
//! Each round, for each side in ABBA order: `--messages` messages are published to a queue of
//! their own (not timed), then a consumer with the given concurrency and prefetch and a no-op
//! handler takes them; the time runs from starting the consumer to the last handler call. The
//! figure is the median of the rounds' ratios (idempotent rate over plain rate).

use std::sync::Arc;
use std::time::{Duration, Instant};

use acemq::AceMq;
use acemq::codec::Raw as RawCodec;
use acemq::idempotency::IdempotencyStore;
use acemq::idempotency::postgres::PostgresIdempotencyStore;
use acemq::idempotency::redis::RedisIdempotencyStore;
use bytes::Bytes;
use clap::{Args, ValueEnum};
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use polyq_amqp::QueueSpec;
use sqlx::PgPool;

use super::acemq::Countdown;
use super::rate;

/// How long a side may take to consume its messages before the run fails.
const SIDE_DEADLINE: Duration = Duration::from_secs(300);

/// Arguments of `polyq bench idempotency`.
#[derive(Debug, Args)]
pub(crate) struct IdempotencyArgs {
    /// The idempotency store.
    #[arg(long, value_enum)]
    store: StoreKind,
    /// The store's URL (default `POLYQ_POSTGRES_URL` or `POLYQ_REDIS_URL`). A PostgreSQL table
    /// or a Redis key prefix of unique name is used and removed.
    #[arg(long)]
    db: Option<String>,
    /// Broker URL: `amqp://`, `amqps://` or `memory://`.
    #[arg(long, env = "POLYQ_AMQP_URL")]
    url: String,
    /// Messages per side and round.
    #[arg(long, default_value_t = 20_000)]
    messages: u32,
    /// Handlers running at once, on both sides.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Consumer prefetch, on both sides.
    #[arg(long, default_value_t = 500)]
    prefetch: u16,
    /// Rounds; each runs both sides.
    #[arg(long, default_value_t = 4)]
    rounds: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StoreKind {
    /// `PostgresIdempotencyStore` (the Java port's layout).
    Postgres,
    /// `RedisIdempotencyStore`.
    Redis,
}

/// Runs `polyq bench idempotency`.
pub(crate) async fn run(args: IdempotencyArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.messages > 0, "--messages must be at least 1");
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    anyhow::ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    anyhow::ensure!(
        usize::from(args.prefetch) >= args.concurrency,
        "--prefetch must be at least --concurrency"
    );
    let (variable, kind) = match args.store {
        StoreKind::Postgres => ("POLYQ_POSTGRES_URL", "postgres"),
        StoreKind::Redis => ("POLYQ_REDIS_URL", "redis"),
    };
    let db = match &args.db {
        Some(db) => db.clone(),
        None => std::env::var(variable)
            .map_err(|_| anyhow::anyhow!("give the {kind} store's URL with --db or {variable}"))?,
    };
    println!(
        "polyq bench idempotency: {kind} store, {} messages per side, concurrency {}, prefetch {}, {} rounds, {}",
        args.messages,
        args.concurrency,
        args.prefetch,
        args.rounds,
        polyq_amqp::redact_url(&args.url)
    );
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let store = Store::open(args.store, &db, &suffix).await?;
    let mq = AceMq::connect(&args.url).await?;
    let queue = format!("polyq.bench.idempotency.{suffix}");
    mq.client()
        .declare_queue(&QueueSpec::new(queue.clone()))
        .await?;
    let measured = rounds(&args, &mq, &store, &queue).await;
    mq.client().delete_queue(&queue).await?;
    for dead_letters in [format!("{queue}.dlq"), format!("{queue}.parked")] {
        mq.client().delete_queue(&dead_letters).await?;
    }
    mq.close().await?;
    store.remove().await?;
    let mut ratios = measured?;
    ratios.sort_by(f64::total_cmp);
    println!("ratio: {:.3}", ratios[ratios.len() / 2]);
    Ok(())
}

/// The store under test and what to remove afterwards.
enum Store {
    Postgres(PgPool, PostgresIdempotencyStore),
    Redis(redis::aio::ConnectionManager, String, RedisIdempotencyStore),
}

impl Store {
    async fn open(kind: StoreKind, url: &str, suffix: &str) -> anyhow::Result<Self> {
        let redacted = polyq_amqp::redact_url(url);
        Ok(match kind {
            StoreKind::Postgres => {
                let pool = PgPool::connect(url)
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot connect to {redacted}: {e}"))?;
                let store = PostgresIdempotencyStore::new(pool.clone())
                    .table(&format!("acemq_idempotency_bench_{suffix}"))?;
                store.migrate().await?;
                Store::Postgres(pool, store)
            }
            StoreKind::Redis => {
                let client = redis::Client::open(url)?;
                let connection = redis::aio::ConnectionManager::new(client)
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot connect to {redacted}: {e}"))?;
                let prefix = format!("polyq:bench:idempotency:{suffix}:");
                // Short enough that a run killed before its clean-up leaves nothing for long.
                let store = RedisIdempotencyStore::new(connection.clone())
                    .prefix(&prefix)?
                    .retention(Duration::from_secs(600));
                Store::Redis(connection, prefix, store)
            }
        })
    }

    fn store(&self) -> Arc<dyn IdempotencyStore> {
        match self {
            Store::Postgres(_, store) => Arc::new(store.clone()),
            Store::Redis(_, _, store) => Arc::new(store.clone()),
        }
    }

    async fn remove(self) -> anyhow::Result<()> {
        match self {
            Store::Postgres(pool, store) => {
                sqlx::query(&format!("DROP TABLE {}", store.table_name()))
                    .execute(&pool)
                    .await?;
            }
            Store::Redis(mut connection, prefix, _) => {
                let keys: Vec<String> = {
                    let mut scan = redis::AsyncCommands::scan_match::<_, String>(
                        &mut connection,
                        format!("{prefix}*"),
                    )
                    .await?;
                    let mut keys = Vec::new();
                    while let Some(key) = scan.next().await {
                        keys.push(key?);
                    }
                    keys
                };
                for chunk in keys.chunks(1000) {
                    let _: i64 = redis::AsyncCommands::del(&mut connection, chunk).await?;
                }
            }
        }
        Ok(())
    }
}

async fn rounds(
    args: &IdempotencyArgs,
    mq: &AceMq,
    store: &Store,
    queue: &str,
) -> anyhow::Result<Vec<f64>> {
    let mut ratios = Vec::new();
    for round in 0..args.rounds {
        let (mut plain, mut idempotent) = (Duration::ZERO, Duration::ZERO);
        for with_store in [round % 2 == 1, round % 2 == 0] {
            fill(mq, queue, args.messages).await?;
            let elapsed = consume(args, mq, queue, with_store.then(|| store.store())).await?;
            if with_store {
                idempotent = elapsed;
            } else {
                plain = elapsed;
            }
        }
        let (plain_rate, idempotent_rate) =
            (rate(args.messages, plain), rate(args.messages, idempotent));
        let ratio = idempotent_rate / plain_rate;
        println!(
            "round {}: plain consume {plain_rate:.0} msg/s, idempotent {idempotent_rate:.0} msg/s, ratio {ratio:.3}",
            round + 1
        );
        ratios.push(ratio);
    }
    Ok(ratios)
}

/// Publishes `count` transient messages (each with an envelope id of its own) and waits for
/// their confirms.
async fn fill(mq: &AceMq, queue: &str, count: u32) -> anyhow::Result<()> {
    let publisher = mq
        .publisher_with::<[u8], _>("", queue, RawCodec)
        .transient();
    let body = [b'x'; 366];
    let mut in_flight = FuturesUnordered::new();
    for _ in 0..count {
        if in_flight.len() >= 500
            && let Some(confirm) = in_flight.next().await
        {
            confirm?;
        }
        in_flight.push(publisher.send_async(&body[..]).await?);
    }
    while let Some(confirm) = in_flight.next().await {
        confirm?;
    }
    Ok(())
}

/// Consumes `count` messages with a no-op handler, idempotently when `store` is given; the
/// time from starting the consumer to the last handler call.
async fn consume(
    args: &IdempotencyArgs,
    mq: &AceMq,
    queue: &str,
    store: Option<Arc<dyn IdempotencyStore>>,
) -> anyhow::Result<Duration> {
    let count = args.messages;
    let countdown = Countdown::new(count);
    let mut builder = mq
        .consumer_with::<Bytes>(queue, RawCodec)
        .prefetch(args.prefetch)
        .concurrency(args.concurrency);
    if let Some(store) = store {
        builder = builder.idempotent(store);
    }
    let started = Instant::now();
    let consumer = builder.start(countdown.handler()).await?;
    let finished = countdown.finished(SIDE_DEADLINE).await;
    let elapsed = started.elapsed();
    let report = consumer.drain(Duration::from_secs(30)).await;
    finished.map_err(|handled| {
        anyhow::anyhow!("the consumer handled {handled} of {count} messages in {SIDE_DEADLINE:?}")
    })?;
    anyhow::ensure!(report.is_clean(), "consumer drain: {report:?}");
    Ok(elapsed)
}
