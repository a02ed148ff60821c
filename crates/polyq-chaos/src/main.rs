//! `polyq-chaos`: runs the fault campaign's scenarios and prints one line each; also the
//! worker process that the kill loops start and kill.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use polyq_chaos::{
    Binding, Campaign, FaultReport, Ledger, Load, Outcome, Ports, Scenario, Settings,
};

#[derive(Parser)]
#[command(about = "The polyq fault campaign, on real brokers")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the scenarios named (all of them when none is) and prints one line each; exits 1
    /// when one lost a confirmed message, exceeded its duplicate bound or could not run.
    Run {
        /// Scenario names, as `list` prints them.
        scenarios: Vec<String>,
        /// Messages of each kill loop.
        #[arg(long, default_value_t = 50_000)]
        messages: u64,
        /// Kills of each kill loop.
        #[arg(long, default_value_t = 20)]
        kills: u32,
        /// How long an alarm is held, in seconds.
        #[arg(long, default_value_t = 30)]
        alarm_seconds: u64,
        /// Start the campaign's own RabbitMQ node, Redis server and proxies on free ports
        /// instead of its fixed ones (5720, 7300, 7400 and up), to run beside another campaign.
        #[arg(long)]
        free_ports: bool,
        /// After each line, the messages confirmed and processed in every second of the
        /// traffic, the fault's seconds marked.
        #[arg(long)]
        timeline: bool,
    },
    /// Prints every scenario's name.
    List,
    /// Steady traffic on BINDING at URL while COMMAND (run by `sh -c`, with the queue's name
    /// in POLYQ_CHAOS_QUEUE) injects a fault, for faults driven from outside such as a
    /// cluster node killed; prints one line.
    Load {
        /// The scenario's name in the report.
        #[arg(long)]
        name: String,
        #[arg(long)]
        binding: Binding,
        /// The broker (a list of nodes where the binding takes one).
        #[arg(long)]
        url: String,
        /// The fault; it has ended when the command returns.
        #[arg(long)]
        fault: String,
        /// Seconds of traffic before the fault.
        #[arg(long, default_value_t = 5)]
        lead_seconds: u64,
        /// Messages in all.
        #[arg(long, default_value_t = 10_000)]
        messages: u64,
        /// Messages per second.
        #[arg(long, default_value_t = 500)]
        rate: u64,
        /// After the line, the messages confirmed and processed in every second.
        #[arg(long)]
        timeline: bool,
    },
    /// A worker recording each processed message in LEDGER before settling it; runs until
    /// killed. Started by the kill loops.
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        binding: Binding,
        #[arg(long)]
        url: String,
        #[arg(long)]
        queue: String,
        #[arg(long)]
        ledger: PathBuf,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    // The libraries' warnings (a reserve that failed and is retried, a reconnect) explain a
    // scenario's figures; RUST_LOG selects more.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,lapin=off")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse().command).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("polyq-chaos: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::List => {
            for scenario in Scenario::all() {
                println!("{scenario}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Worker {
            binding,
            url,
            queue,
            ledger,
        } => {
            let shutdown = babelqueue::worker::Shutdown::on_signals();
            binding
                .work(&url, &queue, Ledger::to_file(&ledger)?, &shutdown)
                .await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            scenarios,
            messages,
            kills,
            alarm_seconds,
            free_ports,
            timeline,
        } => {
            let scenarios = if scenarios.is_empty() {
                Scenario::all()
            } else {
                scenarios
                    .iter()
                    .map(|name| name.parse())
                    .collect::<Result<_, _>>()
                    .map_err(anyhow::Error::msg)?
            };
            let mut settings = Settings::campaign(std::env::current_exe()?);
            settings.kill_messages = messages;
            settings.kills = kills;
            settings.alarm = Duration::from_secs(alarm_seconds);
            if free_ports {
                settings.ports = Ports::default();
            }
            let mut campaign = Campaign::new(settings);
            let mut passed = true;
            for scenario in scenarios {
                match campaign.run(scenario).await {
                    Ok(outcome) => {
                        passed &= outcome.passed();
                        report(&outcome, timeline);
                    }
                    Err(error) => {
                        passed = false;
                        println!("{scenario:<28} FAIL could not run: {error:#}");
                    }
                }
            }
            Ok(if passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Load {
            name,
            binding,
            url,
            fault,
            lead_seconds,
            messages,
            rate,
            timeline,
        } => {
            let load = Load {
                binding,
                url: url.clone(),
                admin_url: url,
                rate,
                messages,
            };
            let outcome = load
                .run(&name, |progress| async move {
                    progress.until_confirmed(rate * lead_seconds).await;
                    let began = Instant::now();
                    let status = tokio::process::Command::new("sh")
                        .args(["-c", &fault])
                        .env("POLYQ_CHAOS_QUEUE", progress.queue())
                        .status()
                        .await?;
                    let ended = Instant::now();
                    Ok(FaultReport {
                        began,
                        ended,
                        details: vec![format!("fault `{fault}`")],
                        failure: (!status.success())
                            .then(|| format!("the fault command failed: {status}")),
                    })
                })
                .await?;
            report(&outcome, timeline);
            Ok(if outcome.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

/// Prints the outcome's line and, when asked for, its timeline below it.
fn report(outcome: &Outcome, timeline: bool) {
    println!("{outcome}");
    if let Some(seconds) = outcome.timeline.as_ref().filter(|_| timeline) {
        print!("{seconds}");
    }
}
