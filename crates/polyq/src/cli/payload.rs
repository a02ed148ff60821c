//! The payload flag both `publish` commands take.

use anyhow::anyhow;
use serde::de::DeserializeOwned;

/// `--data JSON`, the payload of a published message or job.
///
/// `--json`, AceMQ's former spelling, is still read but hidden; it is a flag of its own rather
/// than an alias so that an error names the flag the command line used.
#[derive(Debug, clap::Args)]
pub(crate) struct PayloadArg {
    /// The payload, JSON: checked, then sent as given (key order, spacing inside it and number
    /// spelling kept; spaces around it are not part of it).
    #[arg(
        long,
        value_name = "JSON",
        required_unless_present = "json",
        conflicts_with = "json"
    )]
    data: Option<String>,
    #[arg(long, hide = true)]
    json: Option<String>,
}

impl PayloadArg {
    /// The payload, parsed; an error names the flag it came in.
    pub(crate) fn parse<T: DeserializeOwned>(&self) -> anyhow::Result<T> {
        let (flag, text) = match (&self.data, &self.json) {
            (Some(text), _) => ("--data", text),
            (None, Some(text)) => ("--json", text),
            (None, None) => return Err(anyhow!("--data: the payload is required")),
        };
        serde_json::from_str(text).map_err(|e| anyhow!("{flag}: not JSON: {e}"))
    }
}
