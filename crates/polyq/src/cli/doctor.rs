//! `polyq doctor`: reads queues without consuming them and reports what the libraries' contract
//! rules find. Reading the broker is here; judging is in `acemq::doctor` and
//! `babelqueue::doctor`.

use std::collections::BTreeSet;
use std::process::ExitCode;

use acemq::doctor::{self as ace, Estate, Finding};
use acemq::retry::RetryPolicy;
use acemq::topology::QueueType;
use anyhow::Context as _;
use babelqueue::doctor::{self as babel, QueueState};
use babelqueue::projection::unframe;
use babelqueue::transport::redis::{RedisOptions, RedisTransport};
use clap::ValueEnum;
use polyq_amqp::management::Management;
use polyq_amqp::{Client, Error as AmqpError, MessageJson};

use super::connect::TlsArgs;
use super::estate::{self, ManagementArgs};

/// `polyq doctor` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Doctor {
    /// The broker: amqp://, amqps:// (RabbitMQ) or redis:// (BabelQueue, both key layouts).
    #[arg(long)]
    url: String,
    /// A queue to examine; repeat for more. Without it: on RabbitMQ the family's source queues
    /// the management API lists (AceMQ's by their topology, BabelQueue's by their `.dlq`); on
    /// Redis every queue of either layout.
    #[arg(long = "queue", value_name = "QUEUE")]
    queues: Vec<String>,
    /// Without --queue, only the queues found whose names start with this.
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<String>,
    #[command(flatten)]
    management: ManagementArgs,
    /// On RabbitMQ, whose contract the queues follow. Redis queues are BabelQueue's.
    #[arg(long, value_enum, default_value_t = Family::Acemq)]
    family: Family,
    /// AceMQ: the retry policy the queues' consumer runs, e.g. 'exponential(6, 10s, 5m)'; its
    /// rung queues are checked. Without it rungs are not judged.
    #[arg(long)]
    policy: Option<String>,
    /// The most messages read from each queue.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// `text`: one line per finding; `json`: one JSON object per finding and line.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
    #[command(flatten)]
    tls: TlsArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Family {
    Acemq,
    Babel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

/// Runs `polyq doctor`: exit status 1 when a finding is an error.
pub(crate) async fn run(doctor: Doctor) -> anyhow::Result<ExitCode> {
    let policy = doctor
        .policy
        .as_deref()
        .map(str::parse::<RetryPolicy>)
        .transpose()
        .context("--policy")?;
    let findings = if babelqueue::transport::redis::is_redis_url(&doctor.url) {
        redis_findings(&doctor).await?
    } else {
        amqp_findings(&doctor, policy.as_ref()).await?
    };
    for finding in &findings {
        match doctor.output {
            Output::Json => println!("{}", serde_json::to_string(finding)?),
            Output::Text => println!(
                "{:<7} {} {}: {} (fix: {})",
                finding.severity, finding.rule, finding.subject, finding.message, finding.fix
            ),
        }
    }
    if doctor.output == Output::Text && findings.is_empty() {
        eprintln!("no findings");
    }
    Ok(if findings.iter().any(Finding::is_error) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn message_subject(queue: &str, position: usize) -> String {
    format!("queue {queue}, message {position}")
}

async fn amqp_findings(
    doctor: &Doctor,
    policy: Option<&RetryPolicy>,
) -> anyhow::Result<Vec<Finding>> {
    let queues = if doctor.queues.is_empty() {
        surveyed(doctor).await?
    } else {
        doctor.queues.clone()
    };
    let client = connect(doctor).await?;
    // The bindings of the rungs' route: only RabbitMQ's management API can tell them.
    let api = if estate::is_rabbitmq_url(&doctor.url) {
        let tls = doctor.tls.options()?;
        Some(estate::management_api(
            &doctor.url,
            &doctor.management,
            &tls,
        )?)
    } else {
        None
    };
    let found = amqp_queues(&client, api.as_ref(), doctor, &queues, policy).await;
    client.close().await.ok();
    found
}

/// The source queues of the doctor's family that RabbitMQ's management API lists (the survey of
/// `polyq dlq list`): AceMQ's where the broker shows its topology (a parked queue, a rung,
/// `acemq.dlx`), BabelQueue's the others with a dead-letter queue.
async fn surveyed(doctor: &Doctor) -> anyhow::Result<Vec<String>> {
    let estate = estate::survey(&doctor.url, &doctor.management, &doctor.tls.options()?)
        .await
        .context(
            "cannot find the queues: enable RabbitMQ's management API (or pass \
             --management-url), or name the queues with --queue",
        )?;
    Ok(estate
        .queues
        .into_iter()
        .filter(|queue| match doctor.family {
            Family::Acemq => queue.family == Some(crate::cli::dlq::Family::Acemq),
            Family::Babel => queue.family.is_none() && queue.dead_letter.is_some(),
        })
        .map(|queue| queue.name)
        .filter(|name| doctor.selects(name))
        .collect())
}

impl Doctor {
    /// Whether a queue found (not named) is examined: `--prefix`.
    fn selects(&self, queue: &str) -> bool {
        self.prefix
            .as_deref()
            .is_none_or(|prefix| queue.starts_with(prefix))
    }
}

async fn amqp_queues(
    client: &Client,
    api: Option<&Management>,
    doctor: &Doctor,
    queues: &[String],
    policy: Option<&RetryPolicy>,
) -> anyhow::Result<Vec<Finding>> {
    let mut findings = Vec::new();
    for queue in queues {
        match doctor.family {
            Family::Acemq => {
                let estate = acemq_estate(client, api, queue, policy).await?;
                findings.extend(ace::check_queue(queue, policy, &estate));
                if !estate.queues.contains(queue) {
                    continue;
                }
            }
            Family::Babel => {
                let dlq = babelqueue::transport::default_dead_letter_queue(queue);
                let state = QueueState {
                    queue: Some(exists(client.inspect_queue(queue).await.map(drop))?),
                    dead_letter_queue: Some(exists(client.inspect_queue(&dlq).await.map(drop))?),
                    ..QueueState::default()
                };
                findings.extend(babel::check_queue(queue, &dlq, &state));
                if state.queue == Some(false) {
                    continue;
                }
            }
        }
        for (position, message) in peek(doctor, queue).await?.iter().enumerate() {
            let subject = message_subject(queue, position + 1);
            findings.extend(match doctor.family {
                Family::Acemq => ace::check_headers(&subject, &message.properties.headers),
                Family::Babel => babel::check_body(&subject, &message.body),
            });
        }
    }
    Ok(findings)
}

async fn connect(doctor: &Doctor) -> anyhow::Result<Client> {
    let options = polyq_amqp::ClientOptions::default().tls(doctor.tls.options()?);
    Client::connect_with(&doctor.url, options)
        .await
        .with_context(|| format!("--url {}", polyq_amqp::redact_url(&doctor.url)))
}

/// Up to `--limit` messages of `queue`, none consumed (`polyq_amqp::browse`: the queue keeps
/// its order and its count).
async fn peek(doctor: &Doctor, queue: &str) -> anyhow::Result<Vec<MessageJson>> {
    let options = polyq_amqp::ClientOptions::default().tls(doctor.tls.options()?);
    let limit = u64::try_from(doctor.limit).unwrap_or(u64::MAX);
    let read = polyq_amqp::browse::browse(&doctor.url, options, queue, Some(limit))
        .await
        .with_context(|| format!("--queue {queue}"))?;
    Ok(read.into_iter().map(|swept| swept.message).collect())
}

/// Whether the broker has the object: `false` on 404, its other refusals as errors.
fn exists(found: Result<(), AmqpError>) -> anyhow::Result<bool> {
    match found {
        Ok(()) => Ok(true),
        Err(AmqpError::NotFound { .. }) => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// What the broker has of the objects `acemq::doctor::probes` names, the source queue's type
/// and dead-letter exchange as far as a redeclaration can tell them, and the bindings the probes
/// name as RabbitMQ's management API lists them (left unknown where there is none, and with a
/// note when it does not answer).
async fn acemq_estate(
    client: &Client,
    api: Option<&Management>,
    queue: &str,
    policy: Option<&RetryPolicy>,
) -> anyhow::Result<Estate> {
    let probes = ace::probes(queue, policy);
    let mut estate = Estate::default();
    for name in probes.queues {
        if exists(client.inspect_queue(&name).await.map(drop))? {
            estate.queues.insert(name);
        }
    }
    for name in probes.exchanges {
        if exists(client.inspect_exchange(&name).await)? {
            estate.exchanges.insert(name);
        }
    }
    for (exchange, bound) in probes.bindings {
        let Some(api) = api else { break };
        if !(estate.exchanges.contains(&exchange) && estate.queues.contains(&bound)) {
            continue;
        }
        match api.binding_keys(&exchange, &bound).await {
            Ok(keys) => {
                estate
                    .bindings
                    .insert((exchange, bound), keys.into_iter().collect());
            }
            Err(error) => eprintln!(
                "note: the bindings from {exchange} to {bound} were not read, so its rungs' route                  was not judged: {error}"
            ),
        }
    }
    if estate.queues.contains(queue)
        && let Some((queue_type, dead_letter)) = declared_as(client, queue).await?
    {
        estate.queue_types.insert(queue.to_owned(), queue_type);
        estate
            .dead_letter_exchanges
            .insert(queue.to_owned(), dead_letter);
    }
    Ok(estate)
}

/// The type and dead-letter exchange of existing queue `queue`: the first of
/// `acemq::doctor::source_declarations` the broker accepts again, or `None`.
async fn declared_as(
    client: &Client,
    queue: &str,
) -> anyhow::Result<Option<(QueueType, Option<String>)>> {
    for declaration in ace::source_declarations(queue) {
        match client.declare_queue(&declaration.spec).await {
            Ok(_) => {
                return Ok(Some((
                    declaration.queue_type,
                    declaration.dead_letter_exchange,
                )));
            }
            Err(AmqpError::Precondition { .. }) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(None)
}

async fn redis_findings(doctor: &Doctor) -> anyhow::Result<Vec<Finding>> {
    let options = RedisOptions::default().tls(doctor.tls.options()?);
    let redis = RedisTransport::connect(&doctor.url, options)
        .await
        .with_context(|| format!("--url {}", polyq_amqp::redact_url(&doctor.url)))?;
    let options = redis.options();
    let queues = if doctor.queues.is_empty() {
        let keys = redis.scan_queue_keys().await?;
        let names: BTreeSet<&str> = keys.iter().map(|key| options.queue_of_key(key)).collect();
        names
            .into_iter()
            .filter(|name| doctor.selects(name))
            .map(str::to_owned)
            .collect()
    } else {
        doctor.queues.clone()
    };
    let mut findings = Vec::new();
    for queue in &queues {
        let state = QueueState {
            queue: None,
            dead_letter_queue: None,
            default_layout_keys: redis
                .any_exists(&options.default_layout_keys(queue))
                .await?,
            laravel_layout_keys: redis
                .any_exists(&options.laravel_layout_keys(queue))
                .await?,
        };
        findings.extend(babel::check_queue(
            queue,
            &options.dead_letter_queue(queue),
            &state,
        ));
        let mut position = 0;
        for ready in [queue.clone(), options.laravel_key(queue)] {
            for stored in redis.read_list(&ready, doctor.limit).await? {
                position += 1;
                let subject = message_subject(queue, position);
                findings.extend(match std::str::from_utf8(&stored) {
                    Ok(text) => babel::check_body(&subject, unframe(text).0.as_bytes()),
                    Err(_) => babel::check_body(&subject, &stored),
                });
            }
        }
    }
    Ok(findings)
}
