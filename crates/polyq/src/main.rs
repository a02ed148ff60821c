//! `polyq`: the operator and developer tool for AceMQ and BabelQueue estates.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

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

/// The log filter: `POLYQ_LOG` when it is set and valid, `default` otherwise. lapin's line for a
/// returned message, which prints its body and header values, stays off unless `POLYQ_LOG`
/// names its target itself.
fn log_filter(polyq_log: Option<&str>, default: &str) -> EnvFilter {
    let given =
        polyq_log.and_then(|directives| Some((EnvFilter::try_new(directives).ok()?, directives)));
    let (filter, directives) = given.unwrap_or_else(|| (EnvFilter::new(default), default));
    let off = polyq_amqp::LAPIN_RETURN_LOG_OFF;
    let target = off.split_once('=').map_or(off, |(target, _)| target);
    if directives.contains(target) {
        filter
    } else {
        filter.add_directive(off.parse().expect("the directive is valid"))
    }
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
        .with_env_filter(log_filter(
            std::env::var("POLYQ_LOG").ok().as_deref(),
            default_filter,
        ))
        // Colour codes are noise in a file or a log collector.
        .with_ansi(std::io::stderr().is_terminal())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lapins_return_line_stays_off_unless_polyq_log_names_it() {
        let off = polyq_amqp::LAPIN_RETURN_LOG_OFF;
        for given in [None, Some("debug"), Some("not a [valid filter")] {
            let filter = log_filter(given, "warn").to_string();
            assert!(filter.contains(off), "{given:?}: {filter}");
        }
        let named = log_filter(Some("lapin::returned_messages=warn"), "warn").to_string();
        assert!(!named.contains(off), "{named}");
    }
}
