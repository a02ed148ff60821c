//! `polyq acemq topology`: a consumer's declared topology as data, applied create-only, or
//! checked against the broker.
//!
//! The plan is the crate's (`acemq::topology`), and so are applying and validating it
//! (`acemq::topology_apply`); this module reads the flags and prints the reports as JSON.

use crate::cli::connect::AmqpBroker;
use acemq::retry::RetryPolicy;
use acemq::topology::{Declared, QueueType, SourceQueue, Topology, TopologyPlan};
use acemq::topology_apply;
use anyhow::anyhow;
use clap::{Args, Subcommand};
use polyq_amqp::message_json::headers_to_json;
use polyq_amqp::{Binding, ExchangeSpec, QueueSpec};
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
    /// conflicts with an existing object, or that the broker refuses, is reported (exit status
    /// 1), never forced.
    Apply {
        #[command(flatten)]
        broker: AmqpBroker,
        #[command(flatten)]
        consumer: ConsumerArgs,
    },
    /// Compare the plan with the broker without creating anything; exit status 1 on drift
    /// (an exchange or queue missing, or declared otherwise). Bindings are listed unchecked:
    /// AMQP 0-9-1 cannot list them.
    Validate {
        #[command(flatten)]
        broker: AmqpBroker,
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
        Command::Apply { broker, consumer } => {
            let plan = consumer.plan()?;
            let client = broker.client().await?;
            let report = topology_apply::apply(&client, &plan).await;
            client.close().await.ok();
            let report = report?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(report.is_clean())
        }
        Command::Validate { broker, consumer } => {
            let plan = consumer.plan()?;
            let client = broker.client().await?;
            let report = topology_apply::validate(&client, &plan).await;
            client.close().await.ok();
            let report = report?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(report.is_clean())
        }
    }
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
