//! `polyq dlq`: one set of verbs for the dead-letter and parked queues of both families, on
//! RabbitMQ, the embedded broker and Redis (both layouts).
//!
//! Reads never consume (`polyq_amqp::browse`, Redis `LRANGE`); moves publish, wait for the
//! confirm, then acknowledge (`acemq::patterns::replay`, `babelqueue::redrive`), so a verb
//! killed midway leaves every message in one of the two queues. What a message shows is the
//! family's inspection view; the failure groups are `polyq_runtime::Fingerprint`s.

pub(crate) mod edit;
pub(crate) mod render;
pub(crate) mod row;
pub(crate) mod store;

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use acemq::patterns::replay::Replay;
use acemq::time::OffsetDateTime;
use anyhow::Context as _;
use babelqueue::redrive::RedriveOptions;
use babelqueue::transport::{AnyTransport, ConnectOptions};
use clap::{Subcommand, ValueEnum};
use polyq_amqp::MessageJson;
use serde_json::Value;

use crate::cli::babel::progress::Counted;
use crate::cli::babel::registry::Registry;
use crate::cli::estate::{self, ManagementArgs};
use crate::cli::keys::KeyFileArg;
use render::{Output, Progress};
pub(crate) use row::Family;
use row::{Row, Selection};
use store::{BrokerArgs, Store};

/// The `dlq` verbs.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Every dead-letter and parked queue: depth, oldest and newest age, the most frequent
    /// errors. On RabbitMQ they are found through the management API when it answers, else
    /// named with --queue or --topology; on Redis by SCAN.
    List {
        #[command(flatten)]
        broker: BrokerArgs,
        #[command(flatten)]
        management: ManagementArgs,
        /// Only the queues whose names start with this.
        #[arg(long, value_name = "PREFIX")]
        prefix: Option<String>,
        /// A queue to list (repeatable). On RabbitMQ the named queues (and a topology's) are
        /// the ones listed, without asking the management API; on Redis they are listed
        /// beside the ones found.
        #[arg(long = "queue", value_name = "QUEUE")]
        queues: Vec<String>,
        /// A topology plan (`polyq acemq topology plan` output): its `.dlq` and `.parked`
        /// queues are listed.
        #[arg(long, value_name = "FILE")]
        topology: Option<PathBuf>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// The messages of a dead-letter queue, decoded beside the wire message, none consumed.
    Show {
        #[command(flatten)]
        target: QueueArgs,
        /// Show at most this many of the selected messages.
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        selection: Selection,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        keys: KeyFileArg,
        /// A babelqueue-registry directory: the fields its schemas mark `x-gdpr-sensitive` are
        /// masked in what is shown (a string keeps its first character and `***`).
        #[arg(long, value_name = "DIR")]
        registry: Option<PathBuf>,
    },
    /// The failures of a dead-letter queue grouped by error fingerprint.
    Groups {
        #[command(flatten)]
        target: QueueArgs,
        #[command(flatten)]
        selection: Selection,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Moves the selected messages back to the queue they failed on (AceMQ replay, BabelQueue
    /// redrive), each published and confirmed before it leaves the dead-letter queue.
    #[command(visible_alias = "redrive")]
    Replay {
        #[command(flatten)]
        target: QueueArgs,
        #[command(flatten)]
        selection: Selection,
    },
    /// Removes the selected messages (at least one filter is required; `purge` removes all).
    Delete {
        #[command(flatten)]
        target: QueueArgs,
        #[command(flatten)]
        selection: Selection,
    },
    /// Removes every message of the queue, after asking (or with --yes).
    Purge {
        #[command(flatten)]
        target: QueueArgs,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Writes the selected messages to a file, one message JSON object per line, none consumed.
    Export {
        #[command(flatten)]
        target: QueueArgs,
        /// The file to write.
        #[arg(long)]
        to: PathBuf,
        #[command(flatten)]
        selection: Selection,
    },
    /// Puts the messages of an export on the tail of a queue, bytes and headers as they were.
    Import {
        #[command(flatten)]
        broker: BrokerArgs,
        /// The queue to put them on.
        #[arg(long)]
        queue: String,
        /// The file `export` wrote.
        #[arg(long)]
        from: PathBuf,
    },
}

/// A dead-letter or parked queue and its broker.
#[derive(Debug, clap::Args)]
pub(crate) struct QueueArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// The dead-letter (or parked) queue.
    #[arg(long)]
    queue: String,
}

/// How results are written.
#[derive(Debug, clap::Args)]
pub(crate) struct OutputArgs {
    /// A table, or one JSON object per line (the default when standard output is not a
    /// terminal).
    #[arg(long, value_enum)]
    output: Option<Format>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
}

impl OutputArgs {
    fn output(&self) -> Output {
        match self.output {
            Some(Format::Json) => Output::Json,
            Some(Format::Table) => Output::Table,
            None if std::io::stdout().is_terminal() => Output::Table,
            None => Output::Json,
        }
    }
}

/// Runs one verb.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::List {
            broker,
            management,
            prefix,
            mut queues,
            topology,
            output,
        } => {
            if let Some(path) = topology {
                queues.extend(set_aside_queues(&path)?);
            }
            let store = Store::open(&broker).await?;
            if store.is_redis() {
                queues.extend(store.dead_letter_queues().await?);
            } else if queues.is_empty() {
                queues = discovered(&broker, &management).await?;
            }
            if let Some(prefix) = &prefix {
                queues.retain(|queue| queue.starts_with(prefix.as_str()));
            }
            list(&store, queues, output.output()).await
        }
        Command::Show {
            target: QueueArgs { broker, queue },
            limit,
            selection,
            output,
            keys,
            registry,
        } => {
            let keys = keys.load()?;
            let registry = registry
                .map(|dir| crate::cli::babel::registry::open_registry(&dir).map(Registry::masking))
                .transpose()?;
            // Without a filter the first `limit` messages are the page: only they are read.
            let read = limit
                .filter(|_| selection.is_everything())
                .map(|limit| u64::try_from(limit).unwrap_or(u64::MAX));
            let store = Store::open(&broker).await?;
            let rows = selected_of(&store, &queue, &selection, read).await?;
            let mut shown: Vec<Row> = rows
                .into_iter()
                .take(limit.unwrap_or(usize::MAX))
                .map(|row| row.with_keys(keys.as_ref()))
                .collect();
            if let Some(registry) = &registry {
                for row in &mut shown {
                    row.mask(registry)?;
                }
            }
            output.output().rows(shown.iter())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Groups {
            target: QueueArgs { broker, queue },
            selection,
            output,
        } => {
            let rows = selected(&Store::open(&broker).await?, &queue, &selection).await?;
            output.output().groups(&render::groups(&rows))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Replay {
            target: QueueArgs { broker, queue },
            selection,
        } => {
            let store = Store::open(&broker).await?;
            let rows = selected(&store, &queue, &selection).await?;
            let progress = Progress::new(rows.len() as u64, &format!("replay {queue}"));
            let moved = replay(&broker, &queue, &rows, selection.is_everything(), |moved| {
                progress.set(moved);
            })
            .await;
            progress.finish();
            println!("{}", serde_json::json!({"queue": queue, "moved": moved?}));
            Ok(ExitCode::SUCCESS)
        }
        Command::Delete {
            target: QueueArgs { broker, queue },
            selection,
        } => {
            let store = Store::open(&broker).await?;
            let removed = delete(&store, &queue, &selection).await?;
            println!(
                "{}",
                serde_json::json!({"queue": queue, "deleted": removed})
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Purge {
            target: QueueArgs { broker, queue },
            yes,
        } => {
            if !yes && !confirmed(&format!("remove every message of {queue}?"))? {
                anyhow::bail!("not purged: answer `y` or pass --yes");
            }
            let purged = Store::open(&broker).await?.purge(&queue).await?;
            println!("{}", serde_json::json!({"queue": queue, "purged": purged}));
            Ok(ExitCode::SUCCESS)
        }
        Command::Export {
            target: QueueArgs { broker, queue },
            to,
            selection,
        } => {
            let rows = selected(&Store::open(&broker).await?, &queue, &selection).await?;
            let file =
                std::fs::File::create(&to).with_context(|| format!("--to {}", to.display()))?;
            let mut writer = std::io::BufWriter::new(file);
            for row in &rows {
                serde_json::to_writer(&mut writer, &row.message)?;
                writer.write_all(b"\n")?;
            }
            writer
                .flush()
                .with_context(|| format!("--to {}", to.display()))?;
            println!(
                "{}",
                serde_json::json!({"queue": queue, "exported": rows.len(), "to": to})
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Import {
            broker,
            queue,
            from,
        } => {
            let messages = read_export(&from)?;
            let store = Store::open(&broker).await?;
            let progress = Progress::new(messages.len() as u64, &format!("import to {queue}"));
            let outcome = store.push(&queue, &messages, || progress.advance()).await;
            progress.finish();
            outcome?;
            println!(
                "{}",
                serde_json::json!({"queue": queue, "imported": messages.len()})
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The messages of `queue` that `selection` picks, in queue order.
pub(crate) async fn selected(
    store: &Store,
    queue: &str,
    selection: &Selection,
) -> anyhow::Result<Vec<Row>> {
    selected_of(store, queue, selection, None).await
}

/// The messages among the first `read` of `queue` (all with `None`) that `selection` picks.
pub(crate) async fn selected_of(
    store: &Store,
    queue: &str,
    selection: &Selection,
    read: Option<u64>,
) -> anyhow::Result<Vec<Row>> {
    let now = OffsetDateTime::now_utc();
    let redis = store.is_redis();
    Ok(store
        .read(queue, read)
        .await?
        .into_iter()
        .enumerate()
        .map(|(position, stored)| Row::read(position, stored, redis, now))
        .filter(|row| selection.matches(row))
        .collect())
}

/// Summarises `queues`: depth, ages and most frequent errors of each, read without consuming.
async fn list(store: &Store, mut queues: Vec<String>, output: Output) -> anyhow::Result<ExitCode> {
    queues.sort();
    queues.dedup();
    let mut summaries = Vec::with_capacity(queues.len());
    for queue in queues {
        let rows = selected(store, &queue, &Selection::default()).await?;
        summaries.push(render::QueueSummary::of(&queue, &rows));
    }
    output.queues(&summaries)?;
    Ok(ExitCode::SUCCESS)
}

/// The dead-letter and parked queues RabbitMQ's management API lists.
async fn discovered(
    broker: &BrokerArgs,
    management: &ManagementArgs,
) -> anyhow::Result<Vec<String>> {
    anyhow::ensure!(
        !broker.url.starts_with("memory://"),
        "name the dead-letter queues of memory:// with --queue"
    );
    let estate = estate::survey(&broker.url, management, &broker.tls_options()?)
        .await
        .context(
            "cannot find the dead-letter queues: enable RabbitMQ's management API (or pass \
             --management-url), or name the queues with --queue or --topology",
        )?;
    Ok(estate.set_aside_queues())
}

/// Removes the messages of `queue` that `selection` picks (a selection is required: `purge`
/// removes everything); answers how many went.
pub(crate) async fn delete(
    store: &Store,
    queue: &str,
    selection: &Selection,
) -> anyhow::Result<u64> {
    anyhow::ensure!(
        !selection.is_everything(),
        "delete needs a selection (--id, --group, --type, --error, --older-than or \
         --grep); `polyq dlq purge` removes everything"
    );
    let redis = store.is_redis();
    let now = OffsetDateTime::now_utc();
    let mut position = 0;
    store
        .remove(queue, |message| {
            position += 1;
            let stored = store::Stored {
                message: message.clone(),
                redelivered: false,
            };
            selection.matches(&Row::read(position - 1, stored, redis, now))
        })
        .await
}

/// Messages moved back by a replay, per family (`acemq`, `babelqueue`).
pub(crate) type Moved = BTreeMap<&'static str, u64>;

/// Replays (AceMQ) or redrives (BabelQueue) `rows`, the messages of `queue` a selection read.
/// With `everything`, every message of a family goes; otherwise the ids of `rows` are the
/// filter. `progress` hears how many AceMQ messages have moved so far.
pub(crate) async fn replay(
    broker: &BrokerArgs,
    queue: &str,
    rows: &[Row],
    everything: bool,
    mut progress: impl FnMut(u64),
) -> anyhow::Result<Moved> {
    let ids = |family: Family| -> HashSet<String> {
        rows.iter()
            .filter(|row| row.summary.family == family)
            .filter_map(|row| row.summary.id.clone())
            .collect()
    };
    let (acemq_ids, babel_ids) = (ids(Family::Acemq), ids(Family::Babelqueue));
    let count = |family: Family| {
        rows.iter()
            .filter(|row| row.summary.family == family)
            .count()
    };
    let mut moved = BTreeMap::new();
    if count(Family::Acemq) > 0 {
        let mq = broker.acemq().await?;
        let mut replay = Replay::from_queue(&mq, queue)
            .with_context(|| format!("--queue {queue}: not a .dlq or .parked queue"))?;
        // AceMQ reads any AMQP message, so beside BabelQueue jobs only the AceMQ ones read
        // first are replayed.
        if !everything || count(Family::Babelqueue) > 0 {
            replay = replay.filter(move |envelope| acemq_ids.contains(envelope.id()));
        }
        let outcome = replay
            .run_with_progress(|report| progress(report.moved))
            .await;
        mq.close().await.ok();
        moved.insert("acemq", outcome?.moved);
    }
    if count(Family::Babelqueue) > 0 {
        let transport = AnyTransport::connect(
            &broker.url,
            ConnectOptions::default().redis_layout(broker.layout().into()),
        )
        .await
        .with_context(|| format!("--url {}", polyq_amqp::redact_url(&broker.url)))?;
        let mut options = RedriveOptions::new();
        if !everything {
            options = options.filter(move |envelope| {
                envelope
                    .meta()
                    .and_then(babelqueue::Meta::id)
                    .is_some_and(|id| babel_ids.contains(id))
            });
        }
        let transport = Counted::new(transport, queue, 0);
        let outcome = babelqueue::redrive::redrive(&transport, queue, &options).await;
        transport.finish();
        moved.insert("babelqueue", outcome?.redriven as u64);
    }
    Ok(moved)
}

/// The `.dlq` and `.parked` queues of a topology plan.
pub(crate) fn set_aside_queues(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let named = || format!("--topology {}", path.display());
    let text = std::fs::read_to_string(path).with_context(named)?;
    let plan: Value = serde_json::from_str(&text).with_context(named)?;
    let queues = plan["queues"]
        .as_array()
        .with_context(|| format!("{}: expected a plan with a `queues` array", named()))?;
    Ok(queues
        .iter()
        .filter_map(|queue| queue["name"].as_str())
        .filter(|name| acemq::topology::set_aside_source(name).is_some())
        .map(str::to_owned)
        .collect())
}

fn confirmed(question: &str) -> anyhow::Result<bool> {
    eprint!("{question} [y/N] ");
    std::io::stderr().flush().ok();
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

fn read_export(path: &PathBuf) -> anyhow::Result<Vec<MessageJson>> {
    let named = || format!("--from {}", path.display());
    let file = std::fs::File::open(path).with_context(named)?;
    let mut messages = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(named)?;
        if line.trim().is_empty() {
            continue;
        }
        let message = MessageJson::parse(&line)
            .with_context(|| format!("--from {} line {}", path.display(), n + 1))?;
        messages.push(message);
    }
    Ok(messages)
}
