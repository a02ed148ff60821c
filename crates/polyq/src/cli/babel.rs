//! `polyq babel` commands.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use babelqueue::{MakeOptions, Verdict, conformance, projection};
use clap::Subcommand;
use polyq_amqp::MessageJson;
use serde_json::Value;

/// `polyq babel` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Decode one body (a raw envelope, a Redis header frame, or a message in the `polyq` message
    /// JSON shape) and print the verdict as one JSON line: accepts, reason, urn, poison,
    /// warnings, envelope (the canonical re-encoding).
    Decode {
        /// The file to read; `-` or nothing reads standard input.
        file: Option<PathBuf>,
    },
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
}

/// Runs one `polyq babel` command.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Decode { file } => {
            let input = read_input(file.as_ref())?;
            println!("{}", inspect(&input));
            Ok(ExitCode::SUCCESS)
        }
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
            let options = conformance::Options {
                redis_url: Some(redis_url),
            };
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
    }
}

fn read_input(file: Option<&PathBuf>) -> anyhow::Result<Vec<u8>> {
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

/// The body inside `input`: the `body` of a message in the `polyq` message JSON shape, else
/// `input` itself.
fn message_body(input: &[u8]) -> Vec<u8> {
    let shaped = serde_json::from_slice::<Value>(input).ok().filter(|value| {
        value.get("body").is_some()
            && value.get("job").is_none()
            && value.get("urn").is_none()
            && value.get(projection::FRAME_KEY).is_none()
            && ["exchange", "routing_key", "properties", "headers"]
                .iter()
                .any(|k| value.get(k).is_some())
    });
    match shaped.and_then(|value| MessageJson::from_json(&value).ok()) {
        Some(message) => message.body.to_vec(),
        None => input.to_vec(),
    }
}

fn inspect(input: &[u8]) -> String {
    let body = message_body(input);
    let (body, headers) = match std::str::from_utf8(&body) {
        Ok(text) => {
            let (inner, headers) = projection::unframe(text);
            (inner.into_owned().into_bytes(), headers)
        }
        Err(_) => (body, Vec::new()),
    };
    let (decoded, reason, poison) = match babelqueue::classify(&body) {
        Verdict::Accepted(decoded) => (Some(decoded), None, None),
        Verdict::Rejected { decoded, reason } => (Some(decoded), Some(reason.as_str()), None),
        Verdict::Poison(cause) => {
            let decoded = babelqueue::decode(&body).ok();
            (decoded, None, Some(cause.to_string()))
        }
    };
    let envelope = decoded.as_ref().and_then(|d| d.envelope.encode().ok());
    let report = Report {
        accepts: decoded.is_some() && reason.is_none() && poison.is_none(),
        reason,
        urn: decoded.as_ref().and_then(|d| d.envelope.urn()),
        poison: poison.is_some(),
        poison_cause: poison.as_deref(),
        warnings: decoded.as_ref().map_or(&[][..], |d| &d.warnings[..]),
        envelope: envelope.as_deref(),
        headers: headers.into_iter().collect(),
    };
    serde_json::to_string(&report).unwrap_or_default()
}

/// The output of `polyq babel decode`, in this key order.
#[derive(serde::Serialize)]
struct Report<'a> {
    accepts: bool,
    reason: Option<&'a str>,
    urn: Option<&'a str>,
    poison: bool,
    poison_cause: Option<&'a str>,
    warnings: &'a [babelqueue::Warning],
    envelope: Option<&'a str>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    headers: std::collections::BTreeMap<String, String>,
}
