//! `polyq idempotency` commands: removing the claims and records nobody is bound by any more.

use std::process::ExitCode;

use acemq::idempotency::IdempotencyStore as _;
use acemq::idempotency::postgres::PostgresIdempotencyStore;
use anyhow::Context as _;
use babelqueue::idempotency::{PostgresClaimingStore, PostgresStore};
use clap::{Subcommand, ValueEnum};
use serde_json::json;
use sqlx::PgPool;

/// `polyq idempotency` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Delete expired claims (and records past their retention) from the PostgreSQL stores of
    /// both families; one JSON line per table with how many rows went. A `redis://` URL
    /// deletes nothing: Redis expires the stores' keys by their TTL.
    Purge {
        /// The store: postgres://… (or redis://… to be told why there is nothing to do).
        #[arg(long, env = "POLYQ_POSTGRES_URL")]
        db: String,
        /// Only this store's layout (default: every layout, each in its default table).
        #[arg(long, value_enum)]
        layout: Option<Layout>,
        /// The table, when it is not the layout's default (needs --layout).
        #[arg(long, requires = "layout")]
        table: Option<String>,
    },
}

/// The PostgreSQL idempotency layouts polyq ships.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Layout {
    /// AceMQ (the Java port's `acemq_idempotency`): expired claims and confirmations past
    /// their retention.
    Acemq,
    /// BabelQueue seen-set (the Go SDK's `babelqueue_idempotency`): ids past their TTL.
    BabelSeenSet,
    /// BabelQueue claiming store (the PHP SDK's `bq_idempotency`): expired claims.
    BabelClaiming,
}

impl Layout {
    const ALL: [Layout; 3] = [Layout::Acemq, Layout::BabelSeenSet, Layout::BabelClaiming];

    fn default_table(self) -> &'static str {
        match self {
            Layout::Acemq => acemq::idempotency::postgres::DEFAULT_TABLE,
            Layout::BabelSeenSet => babelqueue::idempotency::SEEN_SET_TABLE,
            Layout::BabelClaiming => babelqueue::idempotency::CLAIMING_TABLE,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Layout::Acemq => "acemq",
            Layout::BabelSeenSet => "babel-seen-set",
            Layout::BabelClaiming => "babel-claiming",
        }
    }

    /// Runs the layout's own purge on `table`: the expiry rules are the stores', not the CLI's.
    async fn purge(self, db: &PgPool, table: &str) -> anyhow::Result<u64> {
        Ok(match self {
            Layout::Acemq => {
                PostgresIdempotencyStore::new(db.clone())
                    .table(table)?
                    .purge_expired()
                    .await?
            }
            Layout::BabelSeenSet => {
                PostgresStore::new(db.clone())
                    .table(table)?
                    .purge_expired()
                    .await?
            }
            Layout::BabelClaiming => {
                PostgresClaimingStore::new(db.clone())
                    .table(table)?
                    .purge_expired()
                    .await?
            }
        })
    }
}

/// Runs a `polyq idempotency` subcommand.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Purge { db, layout, table } => purge(&db, layout, table.as_deref()).await,
    }
}

async fn purge(url: &str, layout: Option<Layout>, table: Option<&str>) -> anyhow::Result<ExitCode> {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    if matches!(scheme, "redis" | "rediss") {
        let line = json!({
            "store": "redis",
            "removed": 0,
            "why": "Redis expires every claim and record by the TTL it was written with; \
                    nothing is left to purge",
        });
        println!("{line}");
        return Ok(ExitCode::SUCCESS);
    }
    anyhow::ensure!(
        matches!(scheme, "postgres" | "postgresql"),
        "--db {} is not a postgres:// or redis:// URL",
        polyq_amqp::redact_url(url)
    );
    let db = PgPool::connect(url)
        .await
        .with_context(|| format!("cannot connect to {}", polyq_amqp::redact_url(url)))?;
    let layouts = layout.map_or(Layout::ALL.to_vec(), |layout| vec![layout]);
    for layout in layouts {
        let name = table.unwrap_or(layout.default_table());
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(name)
            .fetch_one(&db)
            .await
            .with_context(|| format!("cannot look for the table `{name}`"))?;
        if !exists {
            anyhow::ensure!(
                table.is_none(),
                "there is no table `{name}`: check --table, or create it with the store's migrate()"
            );
            println!(
                "{}",
                json!({"layout": layout.name(), "table": name, "absent": true, "removed": 0})
            );
            continue;
        }
        let removed = layout
            .purge(&db, name)
            .await
            .with_context(|| format!("cannot purge `{name}`"))?;
        println!(
            "{}",
            json!({"layout": layout.name(), "table": name, "removed": removed})
        );
    }
    Ok(ExitCode::SUCCESS)
}
