//! `polyq`: the operator and developer tool for AceMQ and BabelQueue estates.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// Tools for polyglot queues: AceMQ and BabelQueue on RabbitMQ, Redis and the embedded broker.
#[derive(Debug, Parser)]
#[command(name = "polyq", version, about)]
struct Polyq {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// AceMQ: inspect, encode, publish, consume and replay messages.
    Acemq {
        #[command(subcommand)]
        command: cli::acemq::Command,
    },
    /// BabelQueue: decode, make, conformance, publish, consume and redrive jobs.
    Babel {
        #[command(subcommand)]
        command: cli::babel::Command,
    },
    /// A timeline of AceMQ and BabelQueue at work: retries, dead-letters, parking, poison and a
    /// redrive, on the embedded broker unless --url names another.
    Demo(cli::demo::Demo),
    /// Benchmarks measured side by side against the raw client in one run.
    Bench {
        #[command(subcommand)]
        command: cli::bench::Command,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let command = Polyq::parse().command;
    // The demo provokes failures on purpose: its timeline reports them, so only errors are
    // logged. lapin logs every channel a broker closes, which passive declares do when a queue
    // is missing; the outcome reaches the caller as an error anyway.
    let default_filter = match command {
        Command::Demo(_) => "error,lapin::channel=off",
        _ => "warn,lapin::channel=off",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("POLYQ_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .init();
    let outcome = match command {
        Command::Acemq { command } => cli::acemq::run(command).await,
        Command::Babel { command } => cli::babel::run(command).await,
        Command::Bench { command } => cli::bench::run(command).await,
        Command::Demo(demo) => cli::demo::run(demo).await,
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("polyq: {error:#}");
            ExitCode::FAILURE
        }
    }
}
