//! `polyq babel` commands.

pub(crate) mod progress;
pub(crate) mod registry;
mod schema;

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::connect::{ResendArgs, TlsArgs};
use crate::cli::payload::PayloadArg;
use anyhow::{Context as _, anyhow};
use babelqueue::inspect::Inspection;
use babelqueue::redrive::RedriveOptions;
use babelqueue::transport::redis::RedisOptions;
use babelqueue::transport::{AnyTransport, ConnectOptions, RedisLayout, Transport};
use babelqueue::{BabelQueue, MakeOptions, conformance};
use clap::{Subcommand, ValueEnum};
use registry::{Registry, RegistryArgs};
use serde_json::value::RawValue;
use tracing::Instrument as _;

/// `polyq babel` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Decode one body (a raw envelope, a Redis header frame, or a message in the `polyq` message
    /// JSON shape) and print the verdict as one JSON line: accepts, reason, urn, poison,
    /// warnings, envelope (the canonical re-encoding).
    Decode {
        /// The file to read; `-` or nothing reads standard input.
        file: Option<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
        /// Mask the job's `x-gdpr-sensitive` fields (needs --registry): a string keeps its first
        /// character and `***`, anything else becomes `***`.
        #[arg(long, requires = "registry")]
        mask: bool,
    },
    /// The payload schema registry: validate, compat, gdpr, export-asyncapi.
    #[command(subcommand)]
    Schema(schema::Command),
    /// Print a new canonical envelope.
    Make {
        /// The message URN, e.g. urn:babel:orders:created.
        #[arg(long)]
        urn: String,
        /// The logical queue written to meta.queue.
        #[arg(long, default_value = "default")]
        queue: String,
        /// The payload, a JSON object (key order and number spelling are kept).
        #[arg(long, default_value = "{}")]
        data: String,
        /// A trace id to continue (a new UUID v4 otherwise).
        #[arg(long)]
        trace_id: Option<String>,
        /// Producer meta extras, a JSON object, e.g. '{"ext":{"acme":{"tier":"gold"}}}'.
        #[arg(long)]
        meta: Option<String>,
    },
    /// Run a BabelQueue conformance suite: one line per case, then `N passed, N failed`.
    Conformance {
        /// The directory holding manifest.json.
        dir: PathBuf,
        /// Redis for the `redis` section.
        #[arg(
            long,
            env = "POLYQ_REDIS_URL",
            default_value = "redis://127.0.0.1:6379/0"
        )]
        redis_url: String,
    },
    /// Publish jobs (confirmed where the broker confirms) and print each body.
    Publish {
        #[command(flatten)]
        broker: Broker,
        /// The queue.
        #[arg(long)]
        queue: String,
        /// The message URN, e.g. urn:babel:orders:created.
        #[arg(long)]
        urn: String,
        #[command(flatten)]
        payload: PayloadArg,
        /// A trace id to continue (a new UUID v4 per job otherwise).
        #[arg(long)]
        trace_id: Option<String>,
        /// An out-of-band header, NAME=VALUE (traceparent, ...); repeatable.
        #[arg(long = "header", value_name = "NAME=VALUE")]
        headers: Vec<String>,
        /// How many jobs to publish.
        #[arg(long, default_value_t = 1)]
        count: u32,
        #[command(flatten)]
        resend: ResendArgs,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Take jobs off a queue, acknowledging them, and print each as `decode` does, one JSON
    /// line each. Stops after --limit jobs, or when none came for --timeout seconds.
    Consume {
        #[command(flatten)]
        broker: Broker,
        /// The queue.
        #[arg(long)]
        queue: String,
        /// Stop after this many jobs (default: only the timeout stops it).
        #[arg(long, alias = "max")]
        limit: Option<u64>,
        /// Stop when no job came for this many seconds.
        #[arg(long, default_value_t = 5.0)]
        timeout: f64,
        #[command(flatten)]
        registry: RegistryArgs,
        /// Mask the jobs' `x-gdpr-sensitive` fields (needs --registry).
        #[arg(long, requires = "registry")]
        mask: bool,
    },
    /// Move dead-lettered jobs back to their queue (attempts reset, the dead_letter block
    /// removed) and print the report as JSON; progress goes to standard error.
    Redrive {
        #[command(flatten)]
        broker: Broker,
        /// The dead-letter queue.
        #[arg(long)]
        dlq: String,
        /// Send every job here instead of its original queue.
        #[arg(long)]
        to: Option<String>,
        /// Take at most this many jobs (default: all the dead-letter queue holds when it starts).
        #[arg(long, alias = "max", default_value_t = 0)]
        limit: usize,
        /// Report the plan and put everything back.
        #[arg(long)]
        dry_run: bool,
        /// Stamp bq-replay-bypass: 1 so handlers can skip side effects. Refused on the Redis
        /// Laravel layout, which cannot carry it, unless --force-bypass.
        #[arg(long)]
        bypass: bool,
        /// With --bypass on a layout that cannot carry the stamp (Redis Laravel), redrive anyway,
        /// without it: handlers run their side effects again.
        #[arg(long, requires = "bypass")]
        force_bypass: bool,
        /// Jobs taken and published at once, before they are settled; also the AMQP prefetch
        /// window and how many one Redis reserve takes on the default layout (at most 1,000).
        #[arg(long, default_value_t = babelqueue::redrive::DEFAULT_WINDOW)]
        window: usize,
    },
}

/// Where the jobs are.
#[derive(Debug, clap::Args)]
pub(crate) struct Broker {
    /// The broker: memory://, amqp://, amqps://, redis://, rediss://, redis+sentinel://
    /// (host:port,host:port/service) or redis+cluster:// (host:port,host:port). The nodes
    /// of a RabbitMQ cluster are listed as `amqp://user:pass@host1:5672,host2:5672/vhost`, or
    /// with the flag given once per node.
    #[arg(long = "url", required = true)]
    urls: Vec<String>,
    /// The Redis key layout.
    #[arg(long, value_enum, default_value_t = Layout::Default)]
    layout: Layout,
    #[command(flatten)]
    tls: TlsArgs,
}

/// The Redis key layout, as a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Layout {
    /// `<queue>`, `<queue>:processing` (the SDKs' own layout).
    Default,
    /// Laravel's `queues:<queue>` layout.
    Laravel,
}

impl From<Layout> for RedisLayout {
    fn from(layout: Layout) -> Self {
        match layout {
            Layout::Default => RedisLayout::Default,
            Layout::Laravel => RedisLayout::Laravel,
        }
    }
}

impl Broker {
    /// Connects to the binding the URL names.
    pub(crate) async fn connect(&self) -> anyhow::Result<AnyTransport> {
        self.connect_with(ConnectOptions::default().redis_layout(self.layout.into()))
            .await
    }

    /// Connects with `options` and the TLS flags; errors name the URL with credentials
    /// redacted.
    async fn connect_with(&self, options: ConnectOptions) -> anyhow::Result<AnyTransport> {
        connect(
            &crate::cli::connect::joined_url(&self.urls)?,
            options.tls(self.tls.options()?),
        )
        .await
    }
}

/// Connects to the binding `url` names with `options`; errors name the URL with credentials
/// redacted.
pub(crate) async fn connect(url: &str, options: ConnectOptions) -> anyhow::Result<AnyTransport> {
    AnyTransport::connect(url, options)
        .await
        .with_context(|| format!("--url {}", polyq_amqp::redact_url(url)))
}

/// The most messages one Redis reserve takes ([`RedisOptions::prefetch`] refuses more).
const REDIS_MAX_PREFETCH: usize = 1000;

fn seconds(value: f64, flag: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow!("{flag}: expected a positive number of seconds, found {value}"))
}

/// Runs one `polyq babel` command.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Decode {
            file,
            registry,
            mask,
        } => {
            let registry = registry.open()?;
            let input = read_input(file.as_ref())?;
            let mut seen = Inspection::of_input(&input);
            let violation = read_through(registry.as_ref(), &mut seen, mask)?;
            println!("{}", printed(&seen, violation)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Schema(command) => schema::run(command),
        Command::Make {
            urn,
            queue,
            data,
            trace_id,
            meta,
        } => {
            let data: Box<serde_json::value::RawValue> =
                serde_json::from_str(&data).context("--data must be JSON")?;
            let mut options = MakeOptions::new().queue(queue);
            if let Some(trace_id) = trace_id {
                options = options.trace_id(trace_id);
            }
            if let Some(meta) = meta {
                options = options.meta_json(&meta)?;
            }
            let envelope = babelqueue::make(&urn, &data, options)?;
            println!("{}", envelope.encode()?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Conformance { dir, redis_url } => {
            let options = conformance::Options::default().redis_url(redis_url);
            let summary = tokio::task::spawn_blocking(move || {
                conformance::run(&dir, &options, &mut |case| match &case.outcome {
                    Ok(()) => println!("ok   {}", case.name),
                    Err(why) => println!("FAIL {}: {why}", case.name),
                })
            })
            .await??;
            println!("{} passed, {} failed", summary.passed, summary.failed);
            Ok(if summary.failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Publish {
            broker,
            queue,
            urn,
            payload,
            trace_id,
            headers,
            count,
            resend,
            registry,
        } => {
            let registry = registry.open()?;
            let data: Box<RawValue> = payload.parse()?;
            let headers = headers
                .iter()
                .map(|h| super::acemq::name_value(h, "--header"))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let transport = broker
                .connect_with(
                    ConnectOptions::default()
                        .redis_layout(broker.layout.into())
                        .resend_lost(resend.within()?),
                )
                .await?;
            if !headers.is_empty() && !transport.capabilities().headers {
                anyhow::bail!(
                    "--header: this binding carries no out-of-band headers (the Laravel layout drops them)"
                );
            }
            let mut jobs = BabelQueue::with_transport(transport, queue);
            if let Some(registry) = &registry {
                jobs = registry.producer(jobs);
            }
            for _ in 0..count {
                let mut options = MakeOptions::new();
                if let Some(trace_id) = &trace_id {
                    options = options.trace_id(trace_id.as_str());
                }
                let sent = jobs.publish_with(&urn, &data, options, &headers).await?;
                println!("{}", sent.encode()?);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Consume {
            broker,
            queue,
            limit,
            timeout,
            registry,
            mask,
        } => {
            let registry = registry.open()?;
            let idle = seconds(timeout, "--timeout")?;
            let transport = broker.connect().await?;
            let mut taken = 0u64;
            while limit.is_none_or(|n| taken < n) {
                let Some(reserved) = transport.reserve(&queue, idle).await? else {
                    break;
                };
                // A job that decodes is shown inside the span a worker would handle it in.
                let span = match babelqueue::decode(&reserved.body) {
                    Ok(decoded) => babelqueue::telemetry::process_span(
                        &decoded.envelope,
                        &queue,
                        decoded.envelope.attempts().unwrap_or(0),
                        &reserved.headers,
                    ),
                    Err(_) => tracing::Span::none(),
                };
                let mut seen = Inspection::of_body(&reserved.body, reserved.headers);
                // A job that does not read back is still printed (as it came) and acknowledged.
                let violation = match read_through(registry.as_ref(), &mut seen, mask) {
                    Ok(violation) => violation,
                    Err(error) => Some(format!("{error:#}")),
                };
                println!("{}", printed(&seen, violation)?);
                transport.ack(&reserved.receipt).instrument(span).await?;
                taken += 1;
            }
            transport.unsubscribe(&queue).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Redrive {
            broker,
            dlq,
            to,
            limit,
            dry_run,
            bypass,
            force_bypass,
            window,
        } => {
            let mut options = RedriveOptions::new()
                .limit(limit)
                .dry_run(dry_run)
                .bypass(bypass)
                .bypass_uncarried(force_bypass)
                .window(window);
            if let Some(to) = to {
                options = options.to_queue(to);
            }
            // A whole window comes in one prefetch: one AMQP flow window, one Redis round trip on
            // the default layout.
            let connect = ConnectOptions::default()
                .redis_layout(broker.layout.into())
                .prefetch(u16::try_from(window).unwrap_or(u16::MAX))
                .redis(RedisOptions::new().prefetch(window.clamp(1, REDIS_MAX_PREFETCH)));
            let transport =
                progress::Counted::new(broker.connect_with(connect).await?, &dlq, limit);
            let outcome = babelqueue::redrive::redrive(&transport, &dlq, &options).await;
            transport.finish();
            match outcome {
                Ok(report) => {
                    println!("{}", serde_json::to_string(&report)?);
                    Ok(ExitCode::SUCCESS)
                }
                Err(error) => {
                    // What was settled before the failure is still the report to act on.
                    if let babelqueue::Error::Redrive { report, .. } = &error {
                        println!("{}", serde_json::to_string(report)?);
                    }
                    Err(error.into())
                }
            }
        }
    }
}

/// Decrypts, checks and masks the job `seen` shows, by the registry when there is one; the
/// violation or failure, naming the URN, the path and the rule.
fn read_through(
    registry: Option<&Registry>,
    seen: &mut Inspection,
    mask: bool,
) -> anyhow::Result<Option<String>> {
    match (registry, seen.envelope_mut()) {
        (Some(registry), Some(envelope)) => registry.read(envelope, mask),
        _ => Ok(None),
    }
}

/// One job as `decode` and `consume` print it: the inspection, and with a registry a
/// `schema_violation` member (`null` when valid).
fn printed(seen: &Inspection, violation: Option<String>) -> anyhow::Result<String> {
    let mut value = serde_json::to_value(seen)?;
    if let Some(violation) = violation {
        value["schema_violation"] = serde_json::Value::String(violation);
    }
    Ok(serde_json::to_string(&value)?)
}

pub(crate) fn read_input(file: Option<&PathBuf>) -> anyhow::Result<Vec<u8>> {
    match file.filter(|path| path.as_os_str() != "-") {
        Some(path) => {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
        }
        None => {
            let mut input = Vec::new();
            std::io::stdin()
                .read_to_end(&mut input)
                .context("cannot read standard input")?;
            Ok(input)
        }
    }
}
