//! `polyq bench idempotency`: an idempotent consumer against the same consumer without a store,
//! in one run, on PostgreSQL or Redis: acemq's (a claim before each handler call, a confirm after
//! it) or BabelQueue's worker (the claiming contract: a claim that also tells a committed id, the
//! handler, a commit; or the seen-set: a lookup, the handler, a remember).
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
use babelqueue::BabelQueue;
use babelqueue::idempotency::{
    Idempotency, PostgresClaimingStore, PostgresStore, RedisClaimingStore, RedisStore,
};
use babelqueue::transport::ConnectOptions;
use babelqueue::transport::redis::RedisOptions;
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

/// Publishes awaiting their confirm at once while a side's messages are published.
const FILL_WINDOW: usize = 500;

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
    /// Broker URL: `amqp://`, `amqps://` or `memory://` (and `redis://`, `rediss://` for
    /// `--family babelqueue`).
    #[arg(long, env = "POLYQ_AMQP_URL")]
    url: String,
    /// Whose consumer and store.
    #[arg(long, value_enum, default_value_t = Family::Acemq)]
    family: Family,
    /// BabelQueue's contract (`--family babelqueue`).
    #[arg(long, value_enum, default_value_t = Contract::Claiming)]
    contract: Contract,
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
    /// acemq's `PostgresIdempotencyStore` (the Java port's layout), BabelQueue's
    /// `PostgresClaimingStore` (PHP's) or `PostgresStore` (Go's).
    Postgres,
    /// acemq's `RedisIdempotencyStore`, BabelQueue's `RedisClaimingStore` or `RedisStore`.
    Redis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Family {
    /// The acemq consumer, `ConsumerBuilder::idempotent`.
    Acemq,
    /// The BabelQueue worker, `Worker::idempotent`.
    Babelqueue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Contract {
    /// Of concurrent deliveries of one id exactly one runs (`Idempotency::claiming`).
    Claiming,
    /// Post-success dedupe (`Idempotency::seen_set`).
    SeenSet,
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
    let consumer = match args.family {
        Family::Acemq => "acemq consumer".to_owned(),
        Family::Babelqueue => format!("babelqueue worker, {:?} contract", args.contract),
    };
    println!(
        "polyq bench idempotency: {consumer}, {kind} store, {} messages per side, concurrency {}, prefetch {}, {} rounds, {}",
        args.messages,
        args.concurrency,
        args.prefetch,
        args.rounds,
        polyq_amqp::redact_url(&args.url)
    );
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let backing = Backing::open(args.store, &db, &suffix, args.family).await?;
    let measured = match args.family {
        Family::Acemq => acemq_rounds(&args, &backing, &suffix).await,
        Family::Babelqueue => babel_rounds(&args, &backing).await,
    };
    backing.remove().await?;
    let mut ratios = measured?;
    ratios.sort_by(f64::total_cmp);
    println!("ratio: {:.3}", ratios[ratios.len() / 2]);
    Ok(())
}

/// The acemq consumer's rounds, on a queue of its own.
async fn acemq_rounds(
    args: &IdempotencyArgs,
    backing: &Backing,
    suffix: &str,
) -> anyhow::Result<Vec<f64>> {
    let store = backing.acemq_store().await?;
    let mq = AceMq::connect(&args.url).await?;
    let queue = format!("polyq.bench.idempotency.{suffix}");
    mq.client()
        .declare_queue(&QueueSpec::new(queue.clone()))
        .await?;
    let measured = rounds(args, async |with_store| {
        fill(&mq, &queue, args.messages).await?;
        consume(args, &mq, &queue, with_store.then(|| store.clone())).await
    })
    .await;
    mq.client().delete_queue(&queue).await?;
    for dead_letters in [format!("{queue}.dlq"), format!("{queue}.parked")] {
        mq.client().delete_queue(&dead_letters).await?;
    }
    mq.close().await?;
    measured
}

/// The BabelQueue worker's rounds, on a queue of its own.
async fn babel_rounds(args: &IdempotencyArgs, backing: &Backing) -> anyhow::Result<Vec<f64>> {
    let option = backing.babel_option(args.contract).await?;
    let options = ConnectOptions::default()
        .prefetch(args.prefetch)
        .redis(RedisOptions::new().prefetch(usize::from(args.prefetch)));
    let queue = BabelQueue::builder(&args.url)
        .queue(super::babel::unique_queue())
        .options(options)
        .connect()
        .await?;
    let measured = rounds(args, async |with_store| {
        super::babel::publish(&queue, args.messages, FILL_WINDOW).await?;
        let started = Instant::now();
        let idempotency = with_store.then(|| option.clone());
        super::babel::consume(&queue, args.messages, args.concurrency, idempotency).await?;
        Ok(started.elapsed())
    })
    .await;
    super::babel::remove(&queue).await?;
    measured
}

/// Where the store under test keeps its keys, removed after the run.
enum Backing {
    Postgres(PgPool, String),
    Redis(redis::aio::ConnectionManager, String),
}

impl Backing {
    async fn open(
        kind: StoreKind,
        url: &str,
        suffix: &str,
        family: Family,
    ) -> anyhow::Result<Self> {
        let redacted = polyq_amqp::redact_url(url);
        Ok(match kind {
            StoreKind::Postgres => {
                let pool = PgPool::connect(url)
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot connect to {redacted}: {e}"))?;
                let table = match family {
                    Family::Acemq => "acemq_idempotency",
                    Family::Babelqueue => "bq_idempotency",
                };
                Backing::Postgres(pool, format!("{table}_bench_{suffix}"))
            }
            StoreKind::Redis => {
                let client = redis::Client::open(url)?;
                let connection = redis::aio::ConnectionManager::new(client)
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot connect to {redacted}: {e}"))?;
                Backing::Redis(connection, format!("polyq:bench:idempotency:{suffix}:"))
            }
        })
    }

    /// acemq's store here, its table created.
    async fn acemq_store(&self) -> anyhow::Result<Arc<dyn IdempotencyStore>> {
        Ok(match self {
            Backing::Postgres(pool, table) => {
                let store = PostgresIdempotencyStore::new(pool.clone()).table(table)?;
                store.migrate().await?;
                Arc::new(store)
            }
            // Short enough that a run killed before its clean-up leaves nothing for long.
            Backing::Redis(connection, prefix) => Arc::new(
                RedisIdempotencyStore::new(connection.clone())
                    .prefix(prefix)?
                    .retention(Duration::from_secs(600)),
            ),
        })
    }

    /// BabelQueue's store here under `contract`, its table created.
    async fn babel_option(&self, contract: Contract) -> anyhow::Result<Idempotency> {
        Ok(match (self, contract) {
            (Backing::Postgres(pool, table), Contract::Claiming) => {
                let store = PostgresClaimingStore::new(pool.clone()).table(table)?;
                store.migrate().await?;
                Idempotency::claiming(Arc::new(store))
            }
            (Backing::Postgres(pool, table), Contract::SeenSet) => {
                let store = PostgresStore::new(pool.clone()).table(table)?;
                store.migrate().await?;
                Idempotency::seen_set(Arc::new(store))
            }
            (Backing::Redis(connection, prefix), Contract::Claiming) => Idempotency::claiming(
                Arc::new(RedisClaimingStore::new(connection.clone()).prefix(prefix)?),
            ),
            (Backing::Redis(connection, prefix), Contract::SeenSet) => {
                Idempotency::seen_set(Arc::new(
                    RedisStore::new(connection.clone())
                        .prefix(prefix)?
                        .ttl(Duration::from_secs(600)),
                ))
            }
        })
    }

    async fn remove(self) -> anyhow::Result<()> {
        match self {
            Backing::Postgres(pool, table) => {
                sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
                    .execute(&pool)
                    .await?;
            }
            Backing::Redis(mut connection, prefix) => {
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

/// Runs `--rounds` rounds of both sides, ABBA; `side(with_store)` fills a queue and returns the
/// time its consumer took. Each round's ratio, idempotent rate over plain rate.
async fn rounds(
    args: &IdempotencyArgs,
    mut side: impl AsyncFnMut(bool) -> anyhow::Result<Duration>,
) -> anyhow::Result<Vec<f64>> {
    let mut ratios = Vec::new();
    for round in 0..args.rounds {
        let (mut plain, mut idempotent) = (Duration::ZERO, Duration::ZERO);
        for with_store in [round % 2 == 1, round % 2 == 0] {
            let elapsed = side(with_store).await?;
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
        if in_flight.len() >= FILL_WINDOW
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
