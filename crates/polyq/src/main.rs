//! `polyq`: the operator and developer tool for AceMQ and BabelQueue estates.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

mod cli;
mod otlp;

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
    /// The transactional outbox of either family on PostgreSQL: its status, or a relay.
    Outbox {
        #[command(subcommand)]
        command: cli::outbox::Command,
    },
    /// The idempotency stores of either family: purge what expired.
    Idempotency {
        #[command(subcommand)]
        command: cli::idempotency::Command,
    },
    /// Dead-letter and parked queues of both families: list, show, groups, replay, delete,
    /// purge, export and import.
    Dlq {
        #[command(subcommand)]
        command: cli::dlq::Command,
    },
    /// The web console: queues of both families on each broker, dead-letter queues, messages,
    /// and the `dlq` actions, on http://127.0.0.1:8025/ by default.
    Console(cli::console::Console),
    /// Lints queues against both contracts without consuming them; exit status 1 on an error.
    Doctor(cli::doctor::Doctor),
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
    let export = match otlp::Export::from_env() {
        Ok(export) => export,
        Err(error) => {
            eprintln!("polyq: {}", report(&error));
            return ExitCode::FAILURE;
        }
    };
    let log = tracing_subscriber::fmt::layer()
        // Colour codes are noise in a file or a log collector.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_filter(log_filter(
            std::env::var("POLYQ_LOG").ok().as_deref(),
            default_filter,
        ));
    tracing_subscriber::registry()
        .with(log)
        .with(export.as_ref().map(otlp::Export::layer))
        .init();
    let outcome = match command {
        Command::Acemq { command } => cli::acemq::run(command).await,
        Command::Babel { command } => cli::babel::run(command).await,
        Command::Bench { command } => cli::bench::run(command).await,
        Command::Outbox { command } => cli::outbox::run(command).await,
        Command::Idempotency { command } => cli::idempotency::run(command).await,
        Command::Demo(demo) => cli::demo::run(demo).await,
        Command::Dlq { command } => cli::dlq::run(command).await,
        Command::Doctor(doctor) => cli::doctor::run(doctor).await,
        Command::Console(console) => cli::console::run(console).await,
    };
    if let Some(export) = export {
        export.finish();
    }
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("polyq: {}", report(&error));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes in one line, each cause once.
fn report(error: &anyhow::Error) -> String {
    polyq_amqp::error_chain(error.as_ref())
}

#[cfg(test)]
mod tests {
    use super::{log_filter, report};

    /// Every cause's own text appears exactly once in the line.
    fn assert_each_once(line: &str, causes: &[&str]) {
        for cause in causes {
            assert_eq!(line.matches(cause).count(), 1, "`{cause}` in {line}");
        }
    }

    fn lapin_io(text: &str) -> lapin::Error {
        std::io::Error::new(std::io::ErrorKind::ConnectionReset, text.to_owned()).into()
    }

    #[test]
    fn an_unconfirmed_publish_under_babelqueue_shows_each_cause_once() {
        let error = anyhow::Error::from(babelqueue::Error::Amqp(polyq_amqp::Error::Unconfirmed {
            exchange: String::new(),
            reason: "the channel or connection was lost".to_owned(),
            source: Some(Box::new(lapin_io("connection reset by peer"))),
        }))
        .context("cannot publish to queue `jobs`");
        let line = report(&error);
        assert_eq!(
            line,
            "cannot publish to queue `jobs`: publish to exchange `` unconfirmed: the channel or \
             connection was lost; publish it again: IO error: connection reset by peer"
        );
        assert_each_once(
            &line,
            &[
                "unconfirmed",
                "publish it again",
                "connection reset by peer",
            ],
        );
    }

    #[test]
    fn a_replay_stopped_by_the_broker_shows_each_cause_once() {
        let cause = acemq::RuntimeError::Transport(polyq_amqp::Error::Unavailable {
            url: "amqp://broker".to_owned(),
            operation: "publish".to_owned(),
            waited_ms: 30_000,
        });
        let error = anyhow::Error::from(acemq::patterns::PatternError::ReplayPublish {
            source_queue: "orders.dlq".to_owned(),
            destination: "orders".to_owned(),
            cause: Box::new(cause),
        });
        let line = report(&error);
        assert_each_once(&line, &["stopped", "unavailable for 30000 ms"]);
    }

    #[test]
    fn a_stopped_redrive_shows_what_stopped_it_once() {
        let redis = redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        ));
        let stopped = babelqueue::Error::Redis {
            url: "redis://127.0.0.1:6379/0".to_owned(),
            operation: "reserve from \"jobs.dlq\"".to_owned(),
            kind: babelqueue::transport::redis::RedisErrorKind::Connection,
            message: "the server could not be reached".to_owned(),
            source: Some(Box::new(redis)),
        };
        let error = anyhow::Error::from(babelqueue::Error::Redrive {
            dlq: "jobs.dlq".to_owned(),
            report: Box::default(),
            source: Box::new(stopped),
        });
        let line = report(&error);
        assert_each_once(
            &line,
            &[
                "stopped after",
                "could not be reached",
                "connection refused",
            ],
        );
    }

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
