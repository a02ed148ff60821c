//! `polyq acemq` commands.

mod replay;
pub(crate) mod topology;

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::connect::AmqpBroker;
use acemq::time::OffsetDateTime;
use acemq::{Envelope, Itinerary, RoutingSlip, Stop, provenance, wire};
use anyhow::{Context as _, anyhow, bail};
use clap::Subcommand;
use futures_util::StreamExt as _;
use polyq_amqp::message_json::{body_from_json, body_to_json, headers_from_json, headers_to_json};
use polyq_amqp::{ConsumeOptions, FieldValue, MessageJson, Properties};
use serde::Serialize;
use serde_json::{Map, Value};

/// `polyq acemq` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print the envelope a handler would see in a message given as message JSON.
    ///
    /// Output keys: id, type, version, correlation_id, causation_id, attempt, first_seen (epoch
    /// ms), age_ms, origin, error, claim, route, itinerary, replayed_from, replayed_at (RFC
    /// 3339), replay_count, headers (the application headers), content_type and payload (the
    /// decoded body); absent values are null.
    Decode {
        /// Message JSON file, or `-` for standard input.
        #[arg(default_value = "-")]
        file: PathBuf,
        /// The time to measure age_ms at (and to default a missing first-seen to): RFC 3339 or
        /// epoch milliseconds. Default: now.
        #[arg(long)]
        now: Option<String>,
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
        /// The origin stamped when the input sets none. Default: acemq@<hostname>.
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
        /// The payload, JSON.
        #[arg(long)]
        json: String,
        /// How many messages to publish, each with its own id.
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Consume from a queue and acknowledge, printing each message as `decode` does, one JSON
    /// line each. Stops after --count messages, or when none came for --timeout seconds.
    Consume {
        #[command(flatten)]
        broker: AmqpBroker,
        /// The queue.
        #[arg(long)]
        queue: String,
        /// Stop after this many messages (default: only the timeout stops it).
        #[arg(long)]
        count: Option<u64>,
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
        Command::Decode { file, now } => {
            let message = MessageJson::parse(&read_input(&file)?)?;
            serde_json::to_string_pretty(&decode(&message, parse_now(now.as_deref())?)?)?
        }
        Command::Encode { file, origin, now } => {
            let input: Value = serde_json::from_str(&read_input(&file)?)
                .with_context(|| format!("{} is not JSON", file.display()))?;
            let origin = origin.unwrap_or_else(|| provenance::origin(""));
            encode(&input, &origin, parse_now(now.as_deref())?)?.to_json_pretty()
        }
        Command::Publish {
            broker,
            exchange,
            routing_key,
            message_type,
            headers,
            correlation_id,
            claim,
            json,
            count,
        } => {
            let payload: Value =
                serde_json::from_str(&json).map_err(|e| anyhow!("--json: not JSON: {e}"))?;
            let headers = headers
                .iter()
                .map(|h| name_value(h, "--header"))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let message_type =
                message_type.unwrap_or_else(|| wire::type_for(&routing_key).to_owned());
            let mq = broker.acemq().await?;
            let publisher = mq.publisher::<Value>(exchange, routing_key);
            let body = serde_json::to_vec(&payload)?;
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
                let decoded = describe(
                    &sent,
                    Some(acemq::codec::JSON_CONTENT_TYPE),
                    &body,
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
            count,
            timeout,
        } => {
            let idle = Duration::try_from_secs_f64(timeout)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    anyhow!("--timeout: expected a positive number of seconds, found {timeout}")
                })?;
            consume(&broker, &queue, count, idle).await?;
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
            replay::peek(&broker, &queue, count, |message| {
                decode(message, OffsetDateTime::now_utc())
            })
            .await?;
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
        let message = MessageJson::new(
            delivery.exchange.clone(),
            delivery.routing_key.clone(),
            delivery.properties.clone(),
            delivery.body.clone(),
        );
        match decode(&message, OffsetDateTime::now_utc()) {
            Ok(decoded) => {
                println!("{}", serde_json::to_string(&decoded)?);
                delivery.ack().await?;
                taken += 1;
            }
            Err(error) => {
                // Left on the queue: this command must never lose a message it cannot show.
                delivery.nack(true).await.ok();
                bail!(
                    "message {} on {queue} left on the queue: {error}",
                    message
                        .properties
                        .message_id
                        .as_deref()
                        .unwrap_or("(no message-id)")
                );
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

/// The envelope as `decode` prints it; the field order is the output order.
#[derive(Serialize)]
struct Decoded {
    id: String,
    #[serde(rename = "type")]
    message_type: String,
    version: u32,
    correlation_id: String,
    causation_id: Option<String>,
    attempt: u32,
    first_seen: i64,
    age_ms: u128,
    origin: Option<String>,
    error: Option<String>,
    claim: Option<String>,
    route: Option<Value>,
    itinerary: Option<Value>,
    replayed_from: Option<String>,
    replayed_at: Option<String>,
    replay_count: u32,
    headers: Value,
    content_type: Option<String>,
    payload: Value,
}

fn decode(message: &MessageJson, now: OffsetDateTime) -> anyhow::Result<Decoded> {
    let properties = &message.properties;
    let envelope = Envelope::from_headers_at(
        &properties.headers,
        &message.routing_key,
        properties.message_id.as_deref(),
        now,
    );
    describe(
        &envelope,
        properties.content_type.as_deref(),
        &message.body,
        now,
    )
}

/// The envelope and body as `decode` prints them.
fn describe(
    envelope: &Envelope,
    content_type: Option<&str>,
    body: &[u8],
    now: OffsetDateTime,
) -> anyhow::Result<Decoded> {
    let itinerary = envelope
        .itinerary()
        .map_err(|e| anyhow!("headers.acemq-routing-slip: {e}"))?;
    let owned = |s: Option<&str>| s.map(str::to_owned);
    Ok(Decoded {
        id: envelope.id().to_owned(),
        message_type: envelope.message_type().to_owned(),
        version: envelope.version(),
        correlation_id: envelope.correlation_id().to_owned(),
        causation_id: owned(envelope.causation_id()),
        attempt: envelope.attempt(),
        first_seen: wire::epoch_millis(envelope.first_seen()),
        age_ms: envelope.age_at(now).as_millis(),
        origin: owned(envelope.origin()),
        error: owned(envelope.error()),
        claim: owned(envelope.claim()),
        route: envelope.route().map(|route| {
            serde_json::json!({
                "steps": route.steps(),
                "position": route.position(),
                "run_id": route.run_id(),
            })
        }),
        itinerary: itinerary.map(|itinerary| {
            let stops = |stops: &[Stop]| serde_json::to_value(stops).unwrap_or_default();
            serde_json::json!({"steps": stops(itinerary.steps()), "done": stops(itinerary.done())})
        }),
        replayed_from: owned(envelope.replayed_from()),
        replayed_at: envelope.replayed_at().map(wire::format_instant),
        replay_count: envelope.replay_count(),
        headers: headers_to_json(envelope.headers()),
        content_type: content_type.map(str::to_owned),
        payload: decode_payload(content_type, body)?,
    })
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence == "text/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The body as a handler would get it: parsed JSON for a JSON content type (and for none, when
/// it parses), else text, else `{"base64": ...}`.
fn decode_payload(content_type: Option<&str>, body: &[u8]) -> anyhow::Result<Value> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    match content_type {
        Some(ct) if is_json(ct) => serde_json::from_slice(body)
            .map_err(|e| anyhow!("body: not valid JSON for content type {ct}: {e}")),
        None => Ok(serde_json::from_slice(body).unwrap_or_else(|_| body_to_json(body))),
        Some(_) => Ok(body_to_json(body)),
    }
}

const ENCODE_KEYS: &[&str] = &[
    "id",
    "type",
    "version",
    "correlation_id",
    "causation_id",
    "attempt",
    "first_seen",
    "age_ms",
    "origin",
    "error",
    "claim",
    "route",
    "itinerary",
    "replayed_from",
    "replayed_at",
    "replay_count",
    "headers",
    "content_type",
    "payload",
    "routing_key",
    "exchange",
];

fn encode(input: &Value, origin: &str, now: OffsetDateTime) -> anyhow::Result<MessageJson> {
    let fields = input
        .as_object()
        .ok_or_else(|| anyhow!("expected a JSON object of envelope fields"))?;
    if let Some(unknown) = fields.keys().find(|k| !ENCODE_KEYS.contains(&k.as_str())) {
        bail!(
            "field `{unknown}`: not an envelope field (expected any of {})",
            ENCODE_KEYS.join(", ")
        );
    }
    let get = |key: &str| fields.get(key).filter(|v| !v.is_null());
    let routing_key = text(get("routing_key"), "routing_key")?.unwrap_or_default();
    let exchange = text(get("exchange"), "exchange")?.unwrap_or_default();
    let message_type =
        text(get("type"), "type")?.unwrap_or_else(|| wire::type_for(&routing_key).to_owned());

    let mut builder = Envelope::of(message_type);
    for (key, set) in [
        ("id", acemq::EnvelopeBuilder::id as fn(_, String) -> _),
        ("correlation_id", acemq::EnvelopeBuilder::correlation_id),
        ("causation_id", acemq::EnvelopeBuilder::causation_id),
        ("origin", acemq::EnvelopeBuilder::origin),
        ("error", acemq::EnvelopeBuilder::error),
        ("claim", acemq::EnvelopeBuilder::claim),
        ("replayed_from", acemq::EnvelopeBuilder::replayed_from),
    ] {
        if let Some(value) = text(get(key), key)? {
            builder = set(builder, value);
        }
    }
    if let Some(version) = counter(get("version"), "version", 1)? {
        builder = builder.version(version);
    }
    if let Some(attempt) = counter(get("attempt"), "attempt", 1)? {
        builder = builder.attempt(attempt);
    }
    if let Some(count) = counter(get("replay_count"), "replay_count", 0)? {
        builder = builder.replay_count(count);
    }
    if let Some(at) = instant(get("first_seen"), "first_seen")? {
        builder = builder.first_seen(at);
    }
    if let Some(at) = instant(get("replayed_at"), "replayed_at")? {
        builder = builder.replayed_at(at);
    }
    if let Some(route) = get("route") {
        builder = builder.route(route_from(route)?);
    }
    if let Some(headers) = get("headers") {
        let table = headers_from_json(headers).map_err(|e| anyhow!("field `headers`: {e}"))?;
        for (name, value) in table {
            builder = builder.header(name, value);
        }
    }
    if let Some(itinerary) = get("itinerary") {
        let slip = Itinerary::parse(&itinerary.to_string())
            .map_err(|e| anyhow!("field `itinerary`: {e}"))?;
        builder = builder.header(acemq::headers::ROUTING_SLIP, slip.to_json());
    }
    let envelope = builder.build_at(now).map_err(|e| match e {
        acemq::Error::ReservedHeader { .. } => anyhow!("field `headers`: {e}"),
        other => anyhow!("{other}"),
    })?;
    let envelope = provenance::stamp(envelope, origin);

    let content_type =
        text(get("content_type"), "content_type")?.unwrap_or_else(|| "application/json".to_owned());
    let body = match get("payload") {
        None => Vec::new(),
        Some(payload) if is_json(&content_type) => serde_json::to_vec(payload)?,
        Some(payload) => body_from_json(payload).map_err(|e| {
            anyhow!("field `payload`: for content type {content_type} give text or {{\"base64\": \"...\"}} ({e})")
        })?,
    };
    let mut properties = Properties::default()
        .with_content_type(content_type)
        .persistent();
    envelope.write_properties(&mut properties);
    Ok(MessageJson::new(exchange, routing_key, properties, body))
}

fn text(value: Option<&Value>, field: &str) -> anyhow::Result<Option<String>> {
    match value {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => bail!("field `{field}`: expected a string, found {other}"),
    }
}

fn counter(value: Option<&Value>, field: &str, min: u32) -> anyhow::Result<Option<u32>> {
    let Some(value) = value else {
        return Ok(None);
    };
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n >= min && *n <= i32::MAX as u32)
        .map(Some)
        .ok_or_else(|| {
            anyhow!("field `{field}`: expected an integer from {min} to 2147483647, found {value}")
        })
}

fn instant(value: Option<&Value>, field: &str) -> anyhow::Result<Option<OffsetDateTime>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let parsed = match value {
        Value::Number(n) => n.as_i64().and_then(wire::from_epoch_millis),
        Value::String(s) => wire::read_instant(&FieldValue::from(s.as_str())),
        _ => None,
    };
    parsed.map(Some).ok_or_else(|| {
        anyhow!("field `{field}`: expected epoch milliseconds or RFC 3339, found {value}")
    })
}

fn route_from(value: &Value) -> anyhow::Result<RoutingSlip> {
    let object: &Map<String, Value> = value.as_object().ok_or_else(|| {
        anyhow!(
            "field `route`: expected {{\"steps\": [...], \"position\": n, \"run_id\": \"...\"}}"
        )
    })?;
    let steps: Vec<String> = object
        .get("steps")
        .and_then(Value::as_array)
        .and_then(|steps| {
            steps
                .iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .ok_or_else(|| anyhow!("field `route.steps`: expected an array of step names"))?;
    let position = counter(
        object.get("position").filter(|v| !v.is_null()),
        "route.position",
        0,
    )?
    .unwrap_or(0);
    let run_id = match text(
        object.get("run_id").filter(|v| !v.is_null()),
        "route.run_id",
    )? {
        Some(id) => id,
        None => RoutingSlip::start_of(steps.clone())
            .map_err(|e| anyhow!("field `route`: {e}"))?
            .run_id()
            .to_owned(),
    };
    RoutingSlip::new(steps, position, run_id).map_err(|e| anyhow!("field `route`: {e}"))
}
