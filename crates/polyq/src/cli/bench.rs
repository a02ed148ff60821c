//! `polyq bench` commands.

use std::process::ExitCode;

use clap::Subcommand;

/// `polyq bench` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Placeholder until the first command lands.
    Version,
}

/// Runs one `polyq bench` command.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Version => {
            println!("{}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
    }
}
