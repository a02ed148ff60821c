//! `polyq acemq` commands.

mod replay;
pub(crate) mod topology;

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::connect::{AmqpBroker, ResendArgs};
use crate::cli::keys::{KeyFileArg, show_encrypted};
use crate::cli::payload::PayloadArg;
use acemq::inspect::{self, Inspection};
use acemq::time::OffsetDateTime;
use acemq::{Envelope, provenance, wire};
use anyhow::{Context as _, anyhow, bail};
use clap::Subcommand;
use futures_util::StreamExt as _;
use polyq_amqp::{ConsumeOptions, FieldValue, MessageJson};
use serde_json::Value;
use serde_json::value::RawValue;
use tracing::Instrument as _;

/// `polyq acemq` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print the envelope a handler would see in a message given as message JSON.
    ///
    /// Output keys: id, type, version, correlation_id, causation_id, attempt, first_seen (epoch
    /// ms), age_ms, origin, error, claim, route, itinerary, replayed_from, replayed_at (RFC
    /// 3339), replay_count, headers (the application headers), content_type and payload (the
    /// decoded body); absent values are null. An encrypted body (application/vnd.acemq.encrypted)
    /// adds `encrypted`: its key id, and with --key-file its plaintext decoded (or a note saying
    /// why not), beside the raw bytes in `payload`.
    Decode {
        /// Message JSON file, or `-` for standard input.
        #[arg(default_value = "-")]
        file: PathBuf,
        /// The time to measure age_ms at (and to default a missing first-seen to): RFC 3339 or
        /// epoch milliseconds. Default: now.
        #[arg(long)]
        now: Option<String>,
        #[command(flatten)]
        keys: KeyFileArg,
    },
    /// Print the wire message (message JSON) for envelope fields, routing key and payload.
    ///
    /// Input: a JSON object with any subset of the keys `decode` prints (age_ms is ignored),
    /// plus `routing_key`, `exchange` and `payload`. Build defaults are applied: a new id,
    /// correlation = id, version 1, attempt 1, first seen = now, type = routing key, origin
    /// stamped, content type application/json, persistent delivery. With `id` in the input and
    /// --origin and --now given, the output is the same on every run.
    Encode {
        /// Envelope JSON file, or `-` for standard input.
        #[arg(default_value = "-")]
        file: PathBuf,
        /// The origin stamped when the input sets none. Default: acemq@HOSTNAME.
        #[arg(long)]
        origin: Option<String>,
        /// "Now" for the first-seen default: RFC 3339 or epoch milliseconds. Default: now.
        #[arg(long)]
        now: Option<String>,
    },
    /// Publish through the library (confirmed, mandatory) and print the envelope of each
    /// message as `decode` does, one JSON line each.
    Publish {
        #[command(flatten)]
        broker: AmqpBroker,
        /// The exchange (the default exchange when empty).
        #[arg(long, default_value = "")]
        exchange: String,
        /// The routing key.
        #[arg(long)]
        routing_key: String,
        /// The message type. Default: derived from the routing key.
        #[arg(long = "type")]
        message_type: Option<String>,
        /// An application header, NAME=VALUE (a string); repeatable.
        #[arg(long = "header", value_name = "NAME=VALUE")]
        headers: Vec<String>,
        /// The correlation id. Default: the message id.
        #[arg(long)]
        correlation_id: Option<String>,
        /// A claim-check URI.
        #[arg(long)]
        claim: Option<String>,
        #[command(flatten)]
        payload: PayloadArg,
        /// How many messages to publish, each with its own id.
        #[arg(long, default_value_t = 1)]
        count: u32,
        #[command(flatten)]
        resend: ResendArgs,
    },
    /// Consume from a queue and acknowledge, printing each message as `decode` does, one JSON
    /// line each. Stops after --limit messages, or when none came for --timeout seconds.
    Consume {
        #[command(flatten)]
        broker: AmqpBroker,
        /// The queue.
        #[arg(long)]
        queue: String,
        /// Stop after this many messages (default: only the timeout stops it).
        #[arg(long, alias = "count")]
        limit: Option<u64>,
        /// Stop when no message came for this many seconds.
        #[arg(long, default_value_t = 5.0)]
        timeout: f64,
    },
    /// A consumer's topology: print the plan, apply it create-only, or validate it.
    Topology {
        #[command(subcommand)]
        command: topology::Command,
    },
    /// Move messages from Q.dlq (or Q.parked) back to Q through the default exchange: attempt
    /// reset to 1, replay stamps added, each publish confirmed before the copy is acknowledged.
    /// A progress bar on standard error; a summary on standard output.
    Replay {
        #[command(flatten)]
        broker: AmqpBroker,
        /// The source queue Q whose dead-letter (or parking) queue is replayed.
        #[arg(long)]
        queue: String,
        /// Replay Q.parked instead of Q.dlq.
        #[arg(long)]
        parked: bool,
        /// Move at most this many messages.
        #[arg(long)]
        limit: Option<u64>,
        /// Count what would move; move nothing (messages read are given back, marked
        /// redelivered).
        #[arg(long)]
        dry_run: bool,
    },
    /// Print messages of a queue without consuming them: one message JSON object per line with
    /// `redelivered` and the decoded `envelope` added. Messages are read, then given back
    /// (nack with requeue), which sets their `redelivered` flag.
    Peek {
        #[command(flatten)]
        broker: AmqpBroker,
        /// The queue to look into.
        #[arg(long)]
        queue: String,
        /// Print at most this many messages.
        #[arg(long, default_value_t = 10)]
        count: u64,
    },
}

/// Runs one `polyq acemq` command.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    let output = match command {
        Command::Decode { file, now, keys } => {
            let keys = keys.load()?;
            let message = MessageJson::parse(&read_input(&file)?)?;
            let mut decoded = serde_json::to_value(Inspection::of_message(
                &message,
                parse_now(now.as_deref())?,
            )?)?;
            show_encrypted(&mut decoded, &message, keys.as_ref());
            serde_json::to_string_pretty(&decoded)?
        }
        Command::Encode { file, origin, now } => {
            let input: Value = serde_json::from_str(&read_input(&file)?)
                .with_context(|| format!("{} is not JSON", file.display()))?;
            let origin = origin.unwrap_or_else(|| provenance::origin(""));
            inspect::encode(&input, &origin, parse_now(now.as_deref())?)?.to_json_pretty()
        }
        Command::Publish {
            broker,
            exchange,
            routing_key,
            message_type,
            headers,
            correlation_id,
            claim,
            payload,
            count,
            resend,
        } => {
            // Validated, then sent as given: key order, spacing and number spelling are the
            // payload's own, which anything hashing or signing bodies depends on.
            let payload: Box<RawValue> = payload.parse()?;
            let headers = headers
                .iter()
                .map(|h| name_value(h, "--header"))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let message_type =
                message_type.unwrap_or_else(|| wire::type_for(&routing_key).to_owned());
            let mq = broker
                .acemq_with(acemq::AceMq::builder().resend_lost(resend.within()?))
                .await?;
            let publisher = mq.publisher::<RawValue>(exchange, routing_key);
            let body = payload.get().as_bytes();
            for _ in 0..count {
                let mut builder = Envelope::of(message_type.as_str());
                for (name, value) in &headers {
                    builder = builder.header(name.as_str(), value.as_str());
                }
                if let Some(id) = &correlation_id {
                    builder = builder.correlation_id(id.as_str());
                }
                if let Some(uri) = &claim {
                    builder = builder.claim(uri.as_str());
                }
                let envelope = builder.build().map_err(|e| anyhow!("--header: {e}"))?;
                let sent = publisher.send_with(&payload, envelope).await?;
                let decoded = Inspection::of(
                    sent,
                    Some(acemq::codec::JSON_CONTENT_TYPE),
                    body,
                    OffsetDateTime::now_utc(),
                )?;
                println!("{}", serde_json::to_string(&decoded)?);
            }
            mq.close().await.ok();
            return Ok(ExitCode::SUCCESS);
        }
        Command::Consume {
            broker,
            queue,
            limit,
            timeout,
        } => {
            let idle = Duration::try_from_secs_f64(timeout)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    anyhow!("--timeout: expected a positive number of seconds, found {timeout}")
                })?;
            consume(&broker, &queue, limit, idle).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Replay {
            broker,
            queue,
            parked,
            limit,
            dry_run,
        } => {
            replay::replay(&broker, &queue, parked, limit, dry_run).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Peek {
            broker,
            queue,
            count,
        } => {
            replay::peek(&broker, &queue, count).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Topology { command } => {
            return Ok(if topology::run(command).await? {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
    };
    println!("{output}");
    Ok(ExitCode::SUCCESS)
}

/// Splits `NAME=VALUE`; errors name the flag.
pub(crate) fn name_value(text: &str, flag: &str) -> anyhow::Result<(String, String)> {
    match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.to_owned()))
        }
        _ => bail!("{flag}: expected NAME=VALUE, found \"{text}\""),
    }
}

/// Takes messages off `queue` as they come, printing and acknowledging each. The transport
/// client is used rather than an `acemq` consumer so that every message is shown as it is on
/// the wire (properties, content type, undecodable bodies), and nothing is declared.
async fn consume(
    broker: &AmqpBroker,
    queue: &str,
    count: Option<u64>,
    idle: Duration,
) -> anyhow::Result<()> {
    let client = broker.client().await?;
    let prefetch = count.map_or(50, |n| u16::try_from(n.min(50)).unwrap_or(50));
    let mut deliveries = client
        .consume(queue, &ConsumeOptions::default().prefetch(prefetch.max(1)))
        .await
        .with_context(|| format!("--queue {queue}"))?;
    let mut taken = 0u64;
    while count.is_none_or(|n| taken < n) {
        let Ok(next) = tokio::time::timeout(idle, deliveries.next()).await else {
            break;
        };
        let Some(delivery) = next else { break };
        let delivery = delivery?;
        let span = acemq::telemetry::consume_span(
            queue,
            &delivery.exchange,
            &delivery.routing_key,
            &delivery.properties.headers,
        );
        let message = MessageJson::of_delivery(&delivery);
        match Inspection::of_message(&message, OffsetDateTime::now_utc()) {
            Ok(decoded) => {
                println!("{}", serde_json::to_string(&decoded)?);
                delivery.ack().instrument(span.clone()).await?;
                acemq::telemetry::record_outcome(&span, "acked");
                taken += 1;
            }
            Err(error) => {
                // Left on the queue: this command must never lose a message it cannot show.
                delivery.nack(true).await.ok();
                acemq::telemetry::record_outcome(&span, "failed");
                let id = message.properties.message_id.as_deref();
                return Err(anyhow::Error::new(error).context(format!(
                    "message {} on {queue} left on the queue",
                    id.unwrap_or("(no message-id)")
                )));
            }
        }
    }
    deliveries.cancel().await.ok();
    client.close().await.ok();
    Ok(())
}

fn read_input(file: &PathBuf) -> anyhow::Result<String> {
    if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
        Ok(text)
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))
    }
}

fn parse_now(now: Option<&str>) -> anyhow::Result<OffsetDateTime> {
    match now {
        None => Ok(OffsetDateTime::now_utc()),
        Some(text) => wire::read_instant(&FieldValue::from(text)).ok_or_else(|| {
            anyhow!("--now: expected RFC 3339 (2026-02-03T04:05:06.789Z) or epoch milliseconds, found \"{text}\"")
        }),
    }
}
