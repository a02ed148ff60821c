//! `polyq bench`: throughput of the polyq layers measured side by side with the raw client in
//! one run, so the figures are ratios that machine noise affects equally.

mod acemq;
mod babel;
mod dlq;
mod idempotency;
mod memory;
mod outbox;
mod phases;
mod raw;
mod through_polyq;

use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, Subcommand};

/// `polyq bench` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Confirmed publish and consume + ack through polyq-amqp against raw lapin (`amqp://`), or
    /// end to end on the embedded broker (`memory://`).
    Amqp(AmqpArgs),
    /// The acemq publisher and consumer against raw lapin (`amqp://`), or on their own
    /// (`memory://`), and acemq's publish-to-handler latency at a steady rate.
    Acemq(acemq::AcemqArgs),
    /// BabelQueue publish and end-to-end jobs/s on any broker, optionally beside the Python
    /// SDK and acemq in the same run.
    Babel(babel::BabelArgs),
    /// A dead-letter queue page of the console (and `dlq show` / `groups`) at each queue size:
    /// the read, the decode, the groups and the render, beside the read alone.
    Dlq(dlq::DlqArgs),
    /// The AceMQ outbox relay (rows committed, then published with confirms and marked) against
    /// a plain confirmed publish of the same messages, on PostgreSQL and any broker.
    Outbox(outbox::OutboxArgs),
    /// An idempotent acemq consumer or BabelQueue worker (its store on PostgreSQL or Redis)
    /// against the same consumer without a store.
    Idempotency(idempotency::IdempotencyArgs),
}

/// Arguments of `polyq bench amqp`.
#[derive(Debug, Args)]
pub(crate) struct AmqpArgs {
    /// Broker URL: `amqp://`, `amqps://` or `memory://`.
    #[arg(long, env = "POLYQ_AMQP_URL")]
    url: String,
    /// Messages per phase.
    #[arg(long, default_value_t = 100_000)]
    messages: u32,
    /// Body size in bytes.
    #[arg(long, default_value_t = 366)]
    size: usize,
    /// Publishes awaiting their confirm at most.
    #[arg(long, default_value_t = 500)]
    window: usize,
    /// Consumer prefetch.
    #[arg(long, default_value_t = 1000)]
    prefetch: u16,
    /// Messages per slice: raw and polyq take turns every this many messages (`amqp://`).
    #[arg(long, default_value_t = 2_000)]
    slice: u32,
    /// End-to-end rounds on `memory://`; the figure is their mean.
    #[arg(long, default_value_t = 4)]
    rounds: u32,
}

/// Runs one `polyq bench` command.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Amqp(args) => {
            anyhow::ensure!(args.messages > 0, "--messages must be at least 1");
            anyhow::ensure!(args.window > 0, "--window must be at least 1");
            anyhow::ensure!(args.prefetch > 0, "--prefetch must be at least 1");
            anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
            anyhow::ensure!(args.slice > 0, "--slice must be at least 1");
            let settings = phases::Settings {
                messages: args.messages,
                body: Bytes::from(vec![b'x'; args.size]),
                window: args.window,
                prefetch: args.prefetch,
                slice: args.slice,
                raw_properties: lapin::BasicProperties::default(),
            };
            println!(
                "polyq bench amqp: {} messages of {} bytes, window {}, prefetch {}, {}",
                args.messages,
                args.size,
                args.window,
                args.prefetch,
                polyq_amqp::redact_url(&args.url)
            );
            if args.url.to_ascii_lowercase().starts_with("memory://") {
                memory::run(&args.url, &settings, args.rounds).await?;
            } else {
                phases::compare(&args.url, &settings).await?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Acemq(args) => {
            acemq::run(args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Babel(args) => {
            babel::run(args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Dlq(args) => {
            dlq::run(args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Outbox(args) => {
            outbox::run(args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Idempotency(args) => {
            idempotency::run(args).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Messages per second.
fn rate(messages: u32, elapsed: Duration) -> f64 {
    f64::from(messages) / elapsed.as_secs_f64()
}
