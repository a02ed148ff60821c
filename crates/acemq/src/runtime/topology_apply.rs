//! A [`TopologyPlan`] against a broker: [`apply`] creates what is missing and changes nothing
//! else, [`validate`] reports how the broker differs from the plan. The plan is data
//! ([`crate::topology`]); this module is the part that talks to the broker.
//!
//! What AMQP 0-9-1 can tell decides what is checked. A passive declare proves that an exchange
//! or a queue exists; an identical redeclaration of an existing one changes nothing, and one
//! that differs (type, durability, arguments) is refused with `PRECONDITION_FAILED`, whose words
//! the reports carry. Bindings cannot be listed, so [`apply`] declares them (idempotent) and
//! [`validate`] reports them [`Checked::Unchecked`] rather than valid.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use acemq::AceMq;
//! use acemq::topology::{SourceQueue, Topology};
//! use acemq::topology_apply::{self, Applied, Checked};
//!
//! let mq = AceMq::connect("memory://doc-topology-apply").await?;
//! let plan = Topology::new()
//!     .queue(SourceQueue::new("orders.new").with_dead_letter())
//!     .plan()?;
//!
//! // acemq.dlx, orders.new, orders.new.dlq and orders.new.parked are missing.
//! let before = topology_apply::validate(mq.client(), &plan).await?;
//! assert_eq!(before.drift, 4);
//!
//! let applied = topology_apply::apply(mq.client(), &plan).await?;
//! assert!(applied.is_clean());
//! assert!(applied.items.iter().all(|i| matches!(i.state, Applied::Created | Applied::Declared)));
//!
//! let after = topology_apply::validate(mq.client(), &plan).await?;
//! assert!(after.is_clean());
//! let bindings = after.items.iter().filter(|i| i.state == Checked::Unchecked).count();
//! assert_eq!(bindings, 2);
//! # Ok(())
//! # }
//! ```

use polyq_amqp::{Binding, Client, Error as AmqpError, ExchangeSpec, QueueSpec};
use serde::Serialize;

use crate::contract::topology::TopologyPlan;
use crate::error::RuntimeError;

/// What kind of object an [`Item`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectKind {
    /// An exchange.
    Exchange,
    /// A queue.
    Queue,
    /// A binding of a queue to an exchange.
    Binding,
}

/// What [`apply`] did with one declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Applied {
    /// It did not exist and was declared.
    Created,
    /// It existed as declared and was left as it was.
    Exists,
    /// A binding, declared; AMQP cannot tell whether it existed.
    Declared,
    /// It exists with another declaration and was left as it was; the reason is the broker's.
    Conflict,
    /// The broker refused it otherwise (a binding to a missing queue, a reserved name, ...).
    Refused,
}

/// What [`validate`] found for one declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Checked {
    /// It exists as declared.
    Ok,
    /// It does not exist.
    Missing,
    /// It exists with another declaration, or the broker refused to compare; the reason is the
    /// broker's.
    Differs,
    /// AMQP 0-9-1 offers no way to check it (bindings).
    Unchecked,
}

/// One declaration of the plan and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item<S> {
    /// Exchange, queue or binding.
    pub kind: ObjectKind,
    /// The exchange or queue name; a binding reads `queue <- exchange (routing key)`.
    pub name: String,
    /// What happened or was found.
    pub state: S,
    /// The broker's words for a conflict, refusal or difference; why a binding is unchecked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The result of [`apply`], in plan order: exchanges, queues, bindings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApplyReport {
    /// Declarations that differ from what exists ([`Applied::Conflict`]).
    pub conflicts: usize,
    /// Declarations the broker refused otherwise ([`Applied::Refused`]).
    pub refused: usize,
    /// Every declaration.
    pub items: Vec<Item<Applied>>,
}

impl ApplyReport {
    /// Whether everything in the plan now exists as declared.
    pub fn is_clean(&self) -> bool {
        self.conflicts == 0 && self.refused == 0
    }

    fn new(items: Vec<Item<Applied>>) -> Self {
        let count = |state| items.iter().filter(|i| i.state == state).count();
        Self {
            conflicts: count(Applied::Conflict),
            refused: count(Applied::Refused),
            items,
        }
    }
}

/// The result of [`validate`], in plan order: exchanges, queues, bindings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftReport {
    /// Exchanges and queues missing or declared otherwise.
    pub drift: usize,
    /// Every declaration.
    pub items: Vec<Item<Checked>>,
}

impl DriftReport {
    /// Whether every checkable declaration matches the broker.
    pub fn is_clean(&self) -> bool {
        self.drift == 0
    }

    fn new(items: Vec<Item<Checked>>) -> Self {
        Self {
            drift: items
                .iter()
                .filter(|i| matches!(i.state, Checked::Missing | Checked::Differs))
                .count(),
            items,
        }
    }
}

/// Declares `plan` on the broker, create-only: what is missing is created, what exists as
/// declared is left alone, and a declaration that differs from what exists is reported as a
/// [`Applied::Conflict`] with the broker's words, never forced (nothing is deleted or changed).
///
/// Refusals are in the report; an `Err` means the broker could not be asked (connection lost
/// beyond the client's recovery wait, client closed).
pub async fn apply(client: &Client, plan: &TopologyPlan) -> Result<ApplyReport, RuntimeError> {
    let mut items = Vec::new();
    for exchange in &plan.exchanges {
        items.push(apply_object(client, Object::Exchange(&exchange.item)).await?);
    }
    for queue in &plan.queues {
        items.push(apply_object(client, Object::Queue(&queue.item)).await?);
    }
    for binding in &plan.bindings {
        let (state, reason) = match client.bind_queue(&binding.item).await {
            Ok(()) => (Applied::Declared, None),
            Err(error) => refused(error)?,
        };
        items.push(Item {
            kind: ObjectKind::Binding,
            name: binding_name(&binding.item),
            state,
            reason,
        });
    }
    Ok(ApplyReport::new(items))
}

/// Compares `plan` with the broker without creating anything: exchanges and queues are checked
/// for existence (passive declare), then for their declaration (an identical redeclaration is a
/// no-op, one that differs is refused by the broker). Bindings are reported
/// [`Checked::Unchecked`].
///
/// An object deleted between the two steps would be created by the redeclaration; the report
/// then says [`Checked::Ok`] for it.
pub async fn validate(client: &Client, plan: &TopologyPlan) -> Result<DriftReport, RuntimeError> {
    let mut items = Vec::new();
    for exchange in &plan.exchanges {
        items.push(check_object(client, Object::Exchange(&exchange.item)).await?);
    }
    for queue in &plan.queues {
        items.push(check_object(client, Object::Queue(&queue.item)).await?);
    }
    for binding in &plan.bindings {
        items.push(Item {
            kind: ObjectKind::Binding,
            name: binding_name(&binding.item),
            state: Checked::Unchecked,
            reason: Some("AMQP 0-9-1 cannot list bindings, so it is not checkable".to_owned()),
        });
    }
    Ok(DriftReport::new(items))
}

/// An exchange or a queue of the plan: the objects a passive declare can find.
#[derive(Clone, Copy)]
enum Object<'a> {
    Exchange(&'a ExchangeSpec),
    Queue(&'a QueueSpec),
}

impl Object<'_> {
    fn item<S>(self, state: S, reason: Option<String>) -> Item<S> {
        let (kind, name) = match self {
            Object::Exchange(spec) => (ObjectKind::Exchange, &spec.name),
            Object::Queue(spec) => (ObjectKind::Queue, &spec.name),
        };
        Item {
            kind,
            name: name.clone(),
            state,
            reason,
        }
    }

    /// Whether it exists: `Ok(false)` on 404, the broker's other answers as errors.
    async fn exists(self, client: &Client) -> Result<bool, AmqpError> {
        let found = match self {
            Object::Exchange(spec) => client.inspect_exchange(&spec.name).await,
            Object::Queue(spec) => client.inspect_queue(&spec.name).await.map(drop),
        };
        match found {
            Ok(()) => Ok(true),
            Err(AmqpError::NotFound { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    async fn declare(self, client: &Client) -> Result<(), AmqpError> {
        match self {
            Object::Exchange(spec) => client.declare_exchange(spec).await,
            Object::Queue(spec) => client.declare_queue(spec).await.map(drop),
        }
    }
}

async fn apply_object(client: &Client, object: Object<'_>) -> Result<Item<Applied>, RuntimeError> {
    let outcome = match object.exists(client).await {
        Ok(existed) => object.declare(client).await.map(|()| existed),
        Err(error) => Err(error),
    };
    let (state, reason) = match outcome {
        Ok(true) => (Applied::Exists, None),
        Ok(false) => (Applied::Created, None),
        Err(error) => refused(error)?,
    };
    Ok(object.item(state, reason))
}

async fn check_object(client: &Client, object: Object<'_>) -> Result<Item<Checked>, RuntimeError> {
    let outcome = match object.exists(client).await {
        Ok(true) => object.declare(client).await.map(|()| true),
        other => other,
    };
    let (state, reason) = match outcome {
        Ok(true) => (Checked::Ok, None),
        Ok(false) => (Checked::Missing, None),
        Err(error) => (Checked::Differs, refused(error)?.1),
    };
    Ok(object.item(state, reason))
}

/// A broker's refusal of one declaration as a report entry: a conflict with what exists, or
/// another refusal. Anything else means the broker could not be asked, and ends the run.
fn refused(error: AmqpError) -> Result<(Applied, Option<String>), RuntimeError> {
    let state = match &error {
        AmqpError::Precondition { .. } => Applied::Conflict,
        AmqpError::NotFound { .. }
        | AmqpError::AccessRefused { .. }
        | AmqpError::Protocol { .. }
        | AmqpError::Client { .. }
        | AmqpError::Invalid { .. } => Applied::Refused,
        _ => return Err(error.into()),
    };
    Ok((state, Some(polyq_amqp::error_chain(&error))))
}

fn binding_name(binding: &Binding) -> String {
    format!(
        "{} <- {} ({})",
        binding.queue, binding.exchange, binding.routing_key
    )
}
