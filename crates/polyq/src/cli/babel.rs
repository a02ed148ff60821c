//! `polyq babel` commands.

use std::process::ExitCode;

use clap::Subcommand;

/// `polyq babel` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Placeholder until the first command lands.
    Version,
}

/// Runs one `polyq babel` command.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Version => {
            println!("{}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
    }
}
