//! `polyq outbox` commands: the status of an outbox table, and a relay as a process.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use babelqueue::outbox::PgOutboxStore;
use babelqueue::transport::{AnyTransport, ConnectOptions};
use clap::{Args, Subcommand, ValueEnum};
use polyq_runtime::Shutdown;
use sqlx::PgPool;

/// `polyq outbox` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print one JSON line: pending and failed rows, the age of the oldest pending row and the
    /// relay's lag (the same figure, in seconds, as `acemq.outbox.lag`).
    Status {
        #[command(flatten)]
        table: Table,
    },
    /// Publish committed rows until SIGTERM or SIGINT; the pass under way is finished first.
    Relay {
        #[command(flatten)]
        table: Table,
        /// The broker: memory://, amqp://, amqps://, or for BabelQueue redis:// and rediss://.
        #[arg(long)]
        url: String,
        /// Rows published per pass.
        #[arg(long, default_value_t = 100)]
        batch_size: usize,
        /// Create the table first if it is not there.
        #[arg(long)]
        migrate: bool,
    },
    /// Delete the rows published longer ago than `--older-than` and print one JSON line with
    /// how many; pending and failed rows stay. The relay keeps published rows for audit, so
    /// without this on a schedule the table grows with every message.
    Purge {
        #[command(flatten)]
        table: Table,
        /// How long a published row is kept, e.g. `7d`, `12h`, `30m`.
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: Duration,
    },
}

/// Which outbox table, in which database.
#[derive(Debug, Args)]
pub(crate) struct Table {
    /// Whose outbox layout the table has.
    #[arg(long, value_enum)]
    family: Family,
    /// The PostgreSQL database, e.g. postgres://postgres@127.0.0.1:5432/test.
    #[arg(long, env = "POLYQ_POSTGRES_URL")]
    db: String,
    /// The table (default `acemq_outbox` or `babelqueue_outbox`).
    #[arg(long)]
    table: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Family {
    /// AceMQ (`acemq_outbox`).
    Acemq,
    /// BabelQueue (`babelqueue_outbox`).
    Babel,
}

impl Table {
    fn name(&self) -> &str {
        match (&self.table, self.family) {
            (Some(table), _) => table,
            (None, Family::Acemq) => acemq::outbox::DEFAULT_TABLE,
            (None, Family::Babel) => babelqueue::outbox::DEFAULT_TABLE,
        }
    }

    async fn pool(&self) -> anyhow::Result<PgPool> {
        PgPool::connect(&self.db)
            .await
            .with_context(|| format!("cannot connect to {}", polyq_amqp::redact_url(&self.db)))
    }

    fn babel_store(&self, db: PgPool) -> anyhow::Result<PgOutboxStore> {
        Ok(PgOutboxStore::new(db).in_table(self.name())?)
    }
}

/// Runs a `polyq outbox` subcommand.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Status { table } => status(&table).await,
        Command::Relay {
            table,
            url,
            batch_size,
            migrate,
        } => relay(&table, &url, batch_size, migrate).await,
        Command::Purge { table, older_than } => purge(&table, older_than).await,
    }
}

async fn purge(table: &Table, older_than: Duration) -> anyhow::Result<ExitCode> {
    let db = table.pool().await?;
    let purged = match table.family {
        Family::Acemq => {
            acemq::outbox::Outbox::in_table(table.name())?
                .purge_published(&db, older_than)
                .await?
        }
        Family::Babel => table.babel_store(db)?.purge_published(older_than).await?,
    };
    let line = serde_json::json!({
        "table": table.name(),
        "purged": purged,
        "older_than_seconds": older_than.as_secs_f64(),
    });
    println!("{line}");
    Ok(ExitCode::SUCCESS)
}

async fn status(table: &Table) -> anyhow::Result<ExitCode> {
    let db = table.pool().await?;
    let (pending, failed, oldest) = match table.family {
        Family::Acemq => {
            let status = acemq::outbox::Outbox::in_table(table.name())?
                .status(&db)
                .await?;
            (status.pending, status.failed, status.oldest_pending_age)
        }
        Family::Babel => {
            let status = table.babel_store(db)?.status().await?;
            (status.pending, status.failed, status.oldest_pending_age)
        }
    };
    let line = serde_json::json!({
        "table": table.name(),
        "pending": pending,
        "failed": failed,
        "oldest_pending_age_ms": oldest.map(|age| u64::try_from(age.as_millis()).unwrap_or(u64::MAX)),
        "lag_seconds": oldest.map_or(0.0, |age| age.as_secs_f64()),
    });
    println!("{line}");
    Ok(ExitCode::SUCCESS)
}

async fn relay(
    table: &Table,
    url: &str,
    batch_size: usize,
    migrate: bool,
) -> anyhow::Result<ExitCode> {
    let db = table.pool().await?;
    let shutdown = Shutdown::on_signals();
    let redacted = polyq_amqp::redact_url(url);
    match table.family {
        Family::Acemq => {
            if migrate {
                acemq::outbox::Outbox::in_table(table.name())?
                    .migrate(&db)
                    .await?;
            }
            let mq = acemq::AceMq::connect(url)
                .await
                .with_context(|| format!("cannot connect to {redacted}"))?;
            let relay = acemq::outbox::OutboxRelay::builder(db, &mq)
                .table(table.name())
                .batch_size(batch_size)
                .build()?;
            eprintln!("relaying `{}` to {redacted}", table.name());
            relay.run(shutdown).await;
            mq.close().await?;
        }
        Family::Babel => {
            let store = table.babel_store(db)?;
            if migrate {
                store.migrate().await?;
            }
            let transport = AnyTransport::connect(url, ConnectOptions::default())
                .await
                .with_context(|| format!("cannot connect to {redacted}"))?;
            let relay = babelqueue::outbox::OutboxRelay::new(store, transport.into())
                .batch_size(batch_size)?;
            eprintln!("relaying `{}` to {redacted}", table.name());
            relay.run(shutdown).await;
        }
    }
    Ok(ExitCode::SUCCESS)
}
