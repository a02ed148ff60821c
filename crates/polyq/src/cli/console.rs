//! `polyq console`: the web console. An axum server (127.0.0.1 by default) whose pages are
//! rendered on the server with maud, which escapes every value it writes; the overview updates
//! itself over server-sent events. Everything it shows and does is `polyq dlq`'s own code:
//! the same reads, rows, groups, replays, deletes and purges.

mod actions;
mod audit;
mod auth;
mod discovery;
pub(crate) mod pages;
mod routes;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;

use crate::cli::babel::Layout;
use crate::cli::connect::TlsArgs;
use crate::cli::dlq::store::{BrokerArgs, Store};
use crate::cli::estate::{ManagementArgs, is_rabbitmq_url};
use crate::cli::keys::KeyFileArg;

/// The `console` command.
#[derive(Debug, clap::Args)]
pub(crate) struct Console {
    /// A broker to show (repeatable): amqp://, amqps://, redis:// or rediss://.
    #[arg(long = "url", value_name = "URL", required = true)]
    urls: Vec<String>,
    /// A queue to show on RabbitMQ (repeatable): a source queue, or its `.dlq` or `.parked`.
    /// Redis queues are found by SCAN.
    #[arg(long = "queue", value_name = "QUEUE")]
    queues: Vec<String>,
    /// A topology plan (`polyq acemq topology plan` output) whose set-aside queues are shown.
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// The Redis key layout.
    #[arg(long, value_enum, default_value_t = Layout::Default)]
    layout: Layout,
    // With one RabbitMQ --url: where its management API answers, for the overview's survey.
    #[command(flatten)]
    management: ManagementArgs,
    #[command(flatten)]
    tls: TlsArgs,
    /// Where to listen. Beyond loopback every page needs the token, not only the actions.
    #[arg(long, default_value = "127.0.0.1:8025")]
    bind: SocketAddr,
    /// The token the actions need; generated at start and printed once when not given.
    #[arg(long, env = "POLYQ_CONSOLE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Shows everything and refuses every action.
    #[arg(long)]
    read_only: bool,
    #[command(flatten)]
    keys: KeyFileArg,
    /// A babelqueue-registry directory: the fields its schemas mark `x-gdpr-sensitive` are
    /// masked on every message page (a string keeps its first character and `***`).
    #[arg(long, value_name = "DIR")]
    registry: Option<PathBuf>,
    /// The audit log: one JSON object per action, appended.
    #[arg(long, value_name = "FILE", default_value = "polyq-console-audit.jsonl")]
    audit_log: PathBuf,
}

/// One broker the console shows.
pub(crate) struct Broker {
    /// The URL with its credentials redacted.
    pub(crate) label: String,
    pub(crate) args: BrokerArgs,
    pub(crate) store: Store,
    /// Where its management API answers (RabbitMQ).
    pub(crate) management: ManagementArgs,
}

/// What every request handler shares.
pub(crate) struct App {
    pub(crate) brokers: Vec<Broker>,
    /// The RabbitMQ queues named with `--queue` or `--topology`.
    pub(crate) named: Vec<String>,
    pub(crate) auth: auth::Auth,
    pub(crate) read_only: bool,
    pub(crate) audit: audit::Audit,
    pub(crate) metrics: acemq::telemetry::prometheus::PrometheusHandle,
    /// The key ring of `--key-file`: encrypted AceMQ bodies are shown in plaintext.
    pub(crate) keys: Option<acemq::codec::keyring::KeyRing>,
    /// The registry whose sensitive fields message pages mask.
    pub(crate) registry: Option<crate::cli::babel::registry::Registry>,
}

impl App {
    /// The broker with index `index`, or an error naming the ones there are.
    pub(crate) fn broker(&self, index: usize) -> anyhow::Result<&Broker> {
        self.brokers.get(index).with_context(|| {
            format!(
                "no broker {index}: the console shows {} (0 to {})",
                self.brokers.len(),
                self.brokers.len().saturating_sub(1)
            )
        })
    }
}

/// Starts the console and serves until interrupted.
pub(crate) async fn run(console: Console) -> anyhow::Result<ExitCode> {
    let keys = console.keys.load()?;
    let registry = console
        .registry
        .as_deref()
        .map(|dir| {
            crate::cli::babel::registry::open_registry(dir)
                .map(crate::cli::babel::registry::Registry::masking)
        })
        .transpose()?;
    let mut named = console.queues;
    if let Some(path) = &console.topology {
        named.extend(crate::cli::dlq::set_aside_queues(path)?);
    }
    let rabbitmqs = console
        .urls
        .iter()
        .filter(|url| is_rabbitmq_url(url))
        .count();
    anyhow::ensure!(
        console.management.url.is_none() || rabbitmqs == 1,
        "--management-url is the management API of one RabbitMQ --url (amqp://, amqps://), and \
         {rabbitmqs} are given: show several RabbitMQ brokers with their default APIs, or one \
         with --management-url"
    );
    let mut brokers = Vec::with_capacity(console.urls.len());
    for url in console.urls {
        let args = BrokerArgs::new(url.clone(), console.layout, console.tls.clone());
        let store = Store::open(&args).await?;
        let management = if is_rabbitmq_url(&url) {
            console.management.clone()
        } else {
            ManagementArgs::default()
        };
        brokers.push(Broker {
            label: polyq_amqp::redact_url(&url),
            args,
            store,
            management,
        });
    }
    let metrics = acemq::telemetry::prometheus::install()
        .context("cannot install the Prometheus recorder")?;
    let listener = tokio::net::TcpListener::bind(console.bind)
        .await
        .with_context(|| format!("--bind {}: cannot listen there", console.bind))?;
    let address = listener.local_addr()?;
    let (auth, generated) = auth::Auth::new(console.token, !address.ip().is_loopback())?;
    let app = Arc::new(App {
        brokers,
        named,
        auth,
        read_only: console.read_only,
        audit: audit::Audit::open(console.audit_log)?,
        metrics,
        keys,
        registry,
    });
    eprintln!("polyq console: listening on http://{address}/");
    if let Some(token) = generated {
        eprintln!(
            "polyq console: token {token} (shown once: log in at http://{address}/login, or send \
             `Authorization: Bearer <token>`)"
        );
    }
    let shutdown = async {
        tokio::signal::ctrl_c().await.ok();
    };
    axum::serve(
        listener,
        routes::router(app).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
    .context("the console stopped")?;
    Ok(ExitCode::SUCCESS)
}
