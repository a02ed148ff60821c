//! `polyq acemq topology`: a consumer's declared topology as data, applied create-only, or
//! checked against the broker.
//!
//! The plan is the crate's (`acemq::topology`). Applying and validating are thin loops over
//! `polyq_amqp::Client` declarations because the crate has no apply or validate of its own yet.

use acemq::retry::RetryPolicy;
use acemq::topology::{Declared, QueueType, SourceQueue, Topology, TopologyPlan};
use anyhow::{Context as _, anyhow};
use clap::{Args, Subcommand};
use polyq_amqp::message_json::headers_to_json;
use polyq_amqp::{Binding, Client, ExchangeSpec, QueueSpec};
use serde::Serialize;
use serde_json::{Value, json};

/// `polyq acemq topology` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print the plan as JSON: exchanges, queues and bindings, each with who declares it.
    Plan {
        #[command(flatten)]
        consumer: ConsumerArgs,
    },
    /// Declare the plan, create-only: what exists is left as it is, and a declaration that
    /// conflicts with an existing object is reported (exit status 1), never forced.
    Apply {
        /// The broker: amqp://, amqps:// or memory://.
        #[arg(long)]
        url: String,
        #[command(flatten)]
        consumer: ConsumerArgs,
    },
    /// Compare the plan with the broker without creating anything; exit status 1 on drift
    /// (a queue missing, or declared with other arguments).
    Validate {
        /// The broker: amqp://, amqps:// or memory://.
        #[arg(long)]
        url: String,
        #[command(flatten)]
        consumer: ConsumerArgs,
    },
}

/// The consumer whose topology is planned.
#[derive(Debug, Args)]
pub(crate) struct ConsumerArgs {
    /// The source queue the consumer reads.
    #[arg(long)]
    queue: String,
    /// The retry policy in the AceMQ policy grammar, e.g. 'exponential(5, 1s, 1m).giveUpAfter(1h)'.
    #[arg(long, default_value = "none()")]
    policy: String,
    /// Waits this long or longer are held on broker rung queues (e.g. 30s, 500ms). Default:
    /// the policy's own threshold (30 s unless it says .waitInBrokerFrom(d)).
    #[arg(long)]
    broker_wait_from: Option<String>,
    /// Also declare the source queue itself: quorum, dead-lettering into `<queue>.dlq`.
    #[arg(long)]
    source_queue: bool,
}

impl ConsumerArgs {
    fn plan(&self) -> anyhow::Result<TopologyPlan> {
        let policy = policy(&self.policy, self.broker_wait_from.as_deref())?;
        let mut topology = Topology::new();
        if self.source_queue {
            topology = topology.queue(SourceQueue::new(self.queue.clone()).with_dead_letter());
        }
        Ok(topology.consumer(self.queue.clone(), policy).plan()?)
    }
}

/// Parses `--policy`, then applies `--broker-wait-from` through the policy grammar's own
/// `.waitInBrokerFrom(d)` modifier so that durations are read in one place.
pub(crate) fn policy(text: &str, broker_wait_from: Option<&str>) -> anyhow::Result<RetryPolicy> {
    let policy: RetryPolicy = text.parse().map_err(|e| anyhow!("--policy: {e}"))?;
    match broker_wait_from {
        None => Ok(policy),
        Some(wait) => format!("{text}.waitInBrokerFrom({wait})")
            .parse()
            .map_err(|e| anyhow!("--broker-wait-from: {e}")),
    }
}

/// Runs one `polyq acemq topology` command; `Ok(false)` means drift or a conflict.
pub(crate) async fn run(command: Command) -> anyhow::Result<bool> {
    match command {
        Command::Plan { consumer } => {
            println!(
                "{}",
                serde_json::to_string_pretty(&plan_json(&consumer.plan()?))?
            );
            Ok(true)
        }
        Command::Apply { url, consumer } => {
            let plan = consumer.plan()?;
            let client = connect(&url).await?;
            let report = apply(&client, &plan).await;
            client.close().await.ok();
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(report.conflicts == 0)
        }
        Command::Validate { url, consumer } => {
            let plan = consumer.plan()?;
            let client = connect(&url).await?;
            let report = validate(&client, &plan).await;
            client.close().await.ok();
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(report.drift == 0)
        }
    }
}

async fn connect(url: &str) -> anyhow::Result<Client> {
    Client::connect(url)
        .await
        .with_context(|| format!("--url {}", polyq_amqp::redact_url(url)))
}

/// The plan as JSON, in declaration order.
pub(crate) fn plan_json(plan: &TopologyPlan) -> Value {
    json!({
        "exchanges": plan.exchanges.iter().map(|e| declared(e, exchange_json(&e.item))).collect::<Vec<_>>(),
        "queues": plan.queues.iter().map(|q| declared(q, queue_json(&q.item))).collect::<Vec<_>>(),
        "bindings": plan.bindings.iter().map(|b| declared(b, binding_json(&b.item))).collect::<Vec<_>>(),
    })
}

fn declared<T>(declared: &Declared<T>, mut item: Value) -> Value {
    item["declared_by"] = Value::from(declared.declared_by.as_str());
    item
}

fn exchange_json(spec: &ExchangeSpec) -> Value {
    json!({
        "name": spec.name,
        "kind": spec.kind.as_str(),
        "durable": spec.durable,
        "auto_delete": spec.auto_delete,
        "arguments": headers_to_json(&spec.arguments),
    })
}

fn queue_json(spec: &QueueSpec) -> Value {
    json!({
        "name": spec.name,
        "type": QueueType::of(spec).as_str(),
        "durable": spec.durable,
        "exclusive": spec.exclusive,
        "auto_delete": spec.auto_delete,
        "arguments": headers_to_json(&spec.arguments),
    })
}

fn binding_json(binding: &Binding) -> Value {
    json!({
        "queue": binding.queue,
        "exchange": binding.exchange,
        "routing_key": binding.routing_key,
        "arguments": headers_to_json(&binding.arguments),
    })
}

/// What happened to one declaration.
#[derive(Debug, Serialize)]
pub(crate) struct Item {
    kind: &'static str,
    name: String,
    /// `created`, `exists`, `declared` (an exchange or binding: AMQP cannot tell whether it
    /// existed), `conflict`, `missing`, `differs` or `unchecked`.
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// The result of `apply`.
#[derive(Debug, Serialize)]
pub(crate) struct ApplyReport {
    /// Declarations refused because an object of that name exists with other settings.
    pub(crate) conflicts: usize,
    items: Vec<Item>,
}

/// Declares `plan` on `client`, create-only: queues that exist are only compared (a
/// redeclaration with other arguments is refused by the broker, never forced).
pub(crate) async fn apply(client: &Client, plan: &TopologyPlan) -> ApplyReport {
    let mut items = Vec::new();
    for exchange in &plan.exchanges {
        let result = client.declare_exchange(&exchange.item).await;
        items.push(settled("exchange", &exchange.item.name, "declared", result));
    }
    for queue in &plan.queues {
        let existed = client.inspect_queue(&queue.item.name).await.is_ok();
        let result = client.declare_queue(&queue.item).await.map(drop);
        let state = if existed { "exists" } else { "created" };
        items.push(settled("queue", &queue.item.name, state, result));
    }
    for binding in &plan.bindings {
        let result = client.bind_queue(&binding.item).await;
        items.push(settled(
            "binding",
            &binding_name(&binding.item),
            "declared",
            result,
        ));
    }
    ApplyReport {
        conflicts: items.iter().filter(|i| i.state == "conflict").count(),
        items,
    }
}

fn settled(
    kind: &'static str,
    name: &str,
    state: &'static str,
    result: polyq_amqp::Result<()>,
) -> Item {
    let (state, reason) = match result {
        Ok(()) => (state, None),
        Err(e) => ("conflict", Some(e.to_string())),
    };
    Item {
        kind,
        name: name.to_owned(),
        state,
        reason,
    }
}

fn binding_name(binding: &Binding) -> String {
    format!(
        "{} <- {} ({})",
        binding.queue, binding.exchange, binding.routing_key
    )
}

/// The result of `validate`.
#[derive(Debug, Serialize)]
pub(crate) struct ValidateReport {
    /// Queues missing or declared with other arguments.
    pub(crate) drift: usize,
    items: Vec<Item>,
}

/// Compares `plan` with the broker. Queues are checked for existence (a passive declare) and
/// for their arguments (an identical redeclaration of an existing queue changes nothing, an
/// inequivalent one is refused by the broker). AMQP 0-9-1 offers no way to check an exchange
/// without declaring it nor to list bindings, so those are reported `unchecked`.
pub(crate) async fn validate(client: &Client, plan: &TopologyPlan) -> ValidateReport {
    let mut items = Vec::new();
    for exchange in &plan.exchanges {
        items.push(Item {
            kind: "exchange",
            name: exchange.item.name.clone(),
            state: "unchecked",
            reason: None,
        });
    }
    for queue in &plan.queues {
        let name = queue.item.name.clone();
        let (state, reason) = match client.inspect_queue(&name).await {
            Err(polyq_amqp::Error::NotFound { .. }) => ("missing", None),
            Err(e) => ("differs", Some(e.to_string())),
            Ok(_) => match client.declare_queue(&queue.item).await {
                Ok(_) => ("ok", None),
                Err(e) => ("differs", Some(e.to_string())),
            },
        };
        items.push(Item {
            kind: "queue",
            name,
            state,
            reason,
        });
    }
    for binding in &plan.bindings {
        items.push(Item {
            kind: "binding",
            name: binding_name(&binding.item),
            state: "unchecked",
            reason: None,
        });
    }
    ValidateReport {
        drift: items
            .iter()
            .filter(|i| matches!(i.state, "missing" | "differs"))
            .count(),
        items,
    }
}
