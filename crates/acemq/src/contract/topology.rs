//! Queue naming and the declared topology, as data.
//!
//! Per source queue `Q`: `Q.dlq` and `Q.parked` (classic, durable, bound to `acemq.dlx` on their
//! own names), one rung `Q.retry.<delay>` per broker-held delay (classic, durable, exactly
//! three arguments) and the binding `Q` ← `acemq.retry` on key `Q`. A source queue declared
//! with dead-lettering is quorum with `x-dead-letter-exchange = acemq.dlx` and
//! `x-dead-letter-routing-key = Q.dlq`. A consumer declares the dead-letter side and, when its
//! policy has broker waits, the retry side; it never declares the source queue.

use std::time::Duration;

use polyq_amqp::{Binding, ExchangeKind, ExchangeSpec, FieldTable, FieldValue, QueueSpec};

use crate::contract::retry::{RetryPolicy, render_duration};
use crate::error::{Error, Result};

/// Exchange the dead-letter and parking queues are bound to.
pub const DEAD_LETTER_EXCHANGE: &str = "acemq.dlx";
/// Exchange every rung dead-letters through on its way back to the source queue.
pub const RETRY_EXCHANGE: &str = "acemq.retry";
/// The queue argument naming the queue type; classic is expressed by leaving it out.
pub const QUEUE_TYPE_ARGUMENT: &str = "x-queue-type";

/// `Q.dlq`: failed work (attempts exhausted, too old, fatal, rejected).
///
/// ```
/// assert_eq!(acemq::topology::dead_letter_queue("orders.new"), "orders.new.dlq");
/// ```
pub fn dead_letter_queue(queue: &str) -> String {
    format!("{queue}.dlq")
}

/// `Q.parked`: unreadable messages (decode failures, handler parks).
///
/// ```
/// assert_eq!(acemq::topology::parked_queue("orders.new"), "orders.new.parked");
/// ```
pub fn parked_queue(queue: &str) -> String {
    format!("{queue}.parked")
}

/// Which of the two set-aside queues of a source queue a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetAside {
    /// `Q.dlq`: failed work.
    DeadLetter,
    /// `Q.parked`: unreadable messages.
    Parked,
}

/// The source queue and the kind of a set-aside queue name, `None` for any other name: the
/// inverse of [`dead_letter_queue`] and [`parked_queue`].
///
/// ```
/// use acemq::topology::{SetAside, set_aside_source};
///
/// assert_eq!(set_aside_source("orders.new.dlq"), Some(("orders.new", SetAside::DeadLetter)));
/// assert_eq!(set_aside_source("orders.new.parked"), Some(("orders.new", SetAside::Parked)));
/// assert_eq!(set_aside_source("orders.new"), None);
/// assert_eq!(set_aside_source(".dlq"), None);
/// ```
pub fn set_aside_source(queue: &str) -> Option<(&str, SetAside)> {
    let (source, kind) = match queue.strip_suffix(".dlq") {
        Some(source) => (source, SetAside::DeadLetter),
        None => (queue.strip_suffix(".parked")?, SetAside::Parked),
    };
    (!source.is_empty()).then_some((source, kind))
}

/// The source queue of a rung name `Q.retry.<delay>` (the delay as [`retry_queue`] writes
/// it), `None` for any other name.
///
/// ```
/// assert_eq!(acemq::topology::retry_source("orders.new.retry.5m"), Some("orders.new"));
/// assert_eq!(acemq::topology::retry_source("orders.new.retry.soon"), None);
/// assert_eq!(acemq::topology::retry_source("orders.new"), None);
/// ```
pub fn retry_source(queue: &str) -> Option<&str> {
    let (source, delay) = queue.rsplit_once(".retry.")?;
    let parsed = crate::contract::retry::parse_duration(delay).ok()?;
    (!source.is_empty() && render_duration(parsed) == delay).then_some(source)
}

/// `Q.retry.<delay>`, the rung holding waits of `delay`; see
/// [`render_duration`] for the suffix.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(
///     acemq::topology::retry_queue("orders.new", Duration::from_secs(300)),
///     "orders.new.retry.5m"
/// );
/// ```
pub fn retry_queue(queue: &str, delay: Duration) -> String {
    format!("{queue}.retry.{}", render_duration(delay))
}

/// The exact arguments of a rung queue: `x-message-ttl` (64-bit, milliseconds, as Java
/// writes it), `x-dead-letter-exchange = acemq.retry`, `x-dead-letter-routing-key = queue`.
/// Two services declaring one rung with different arguments get `PRECONDITION_FAILED`.
///
/// ```
/// use std::time::Duration;
/// use polyq_amqp::FieldValue;
///
/// let arguments = acemq::topology::rung_arguments("orders.new", Duration::from_secs(30));
/// assert_eq!(arguments["x-message-ttl"], FieldValue::I64(30_000));
/// assert_eq!(arguments["x-dead-letter-exchange"], FieldValue::from("acemq.retry"));
/// assert_eq!(arguments["x-dead-letter-routing-key"], FieldValue::from("orders.new"));
/// assert_eq!(arguments.len(), 3);
/// ```
pub fn rung_arguments(queue: &str, delay: Duration) -> FieldTable {
    let ttl = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    FieldTable::from([
        ("x-message-ttl".to_owned(), FieldValue::I64(ttl)),
        (
            "x-dead-letter-exchange".to_owned(),
            FieldValue::from(RETRY_EXCHANGE),
        ),
        (
            "x-dead-letter-routing-key".to_owned(),
            FieldValue::from(queue),
        ),
    ])
}

/// One rung queue a policy needs for a source queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rung {
    /// The delay it holds.
    pub delay: Duration,
    /// Its name, `Q.retry.<delay>`.
    pub queue: String,
}

/// The rung queues `policy` needs for `queue`, in schedule order: one per distinct broker-held
/// delay, and one per name (two delays rendering to one name would be one queue with two TTLs).
///
/// ```
/// use acemq::retry::RetryPolicy;
///
/// let policy: RetryPolicy = "exponential(6, 10s, 5m)".parse()?;
/// let names: Vec<_> = acemq::topology::rungs("orders.new", &policy)
///     .into_iter()
///     .map(|rung| rung.queue)
///     .collect();
/// assert_eq!(names, ["orders.new.retry.40s", "orders.new.retry.80s", "orders.new.retry.160s"]);
/// # Ok::<(), acemq::Error>(())
/// ```
pub fn rungs(queue: &str, policy: &RetryPolicy) -> Vec<Rung> {
    let mut rungs: Vec<Rung> = Vec::new();
    for delay in policy.broker_rungs() {
        let name = retry_queue(queue, delay);
        if rungs.iter().all(|rung| rung.queue != name) {
            rungs.push(Rung { delay, queue: name });
        }
    }
    rungs
}

/// Quorum or classic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueType {
    /// Replicated; the default for source queues.
    Quorum,
    /// The broker's default type; what `.dlq`, `.parked` and rungs are.
    Classic,
}

impl QueueType {
    /// `quorum` or `classic`.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueType::Quorum => "quorum",
            QueueType::Classic => "classic",
        }
    }

    /// The type a declaration asks for: quorum when `x-queue-type` says so, classic when the
    /// argument is absent (or names classic).
    pub fn of(spec: &QueueSpec) -> QueueType {
        match spec
            .arguments
            .get(QUEUE_TYPE_ARGUMENT)
            .and_then(FieldValue::as_str)
        {
            Some("quorum") => QueueType::Quorum,
            _ => QueueType::Classic,
        }
    }
}

/// Who declares a piece of topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclaredBy {
    /// The topology (whoever sets the service up).
    Topology,
    /// A consumer, before it subscribes.
    Consumer,
    /// Both; declaring the same thing twice with the same arguments is harmless.
    Both,
}

impl DeclaredBy {
    /// `topology`, `consumer` or `both`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeclaredBy::Topology => "topology",
            DeclaredBy::Consumer => "consumer",
            DeclaredBy::Both => "both",
        }
    }

    fn and(self, other: DeclaredBy) -> DeclaredBy {
        if self == other {
            self
        } else {
            DeclaredBy::Both
        }
    }
}

/// One declaration and who makes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared<T> {
    /// What is declared.
    pub item: T,
    /// Who declares it.
    pub declared_by: DeclaredBy,
}

/// Everything to declare, in order: exchanges, then queues, then bindings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopologyPlan {
    /// Exchanges.
    pub exchanges: Vec<Declared<ExchangeSpec>>,
    /// Queues; the type is in the `x-queue-type` argument ([`QueueType::of`]).
    pub queues: Vec<Declared<QueueSpec>>,
    /// Bindings.
    pub bindings: Vec<Declared<Binding>>,
}

impl TopologyPlan {
    /// What a consumer of `queue` with `policy` declares before subscribing: `acemq.dlx`,
    /// `Q.dlq`, `Q.parked` and their bindings, and, when the policy holds waits in the broker,
    /// `acemq.retry`, the rungs and the binding that brings expired messages home.
    ///
    /// ```
    /// use acemq::retry::RetryPolicy;
    /// use acemq::topology::TopologyPlan;
    ///
    /// let plan = TopologyPlan::for_consumer("orders.new", &RetryPolicy::none());
    /// let queues: Vec<_> = plan.queues.iter().map(|q| q.item.name.as_str()).collect();
    /// assert_eq!(queues, ["orders.new.dlq", "orders.new.parked"]);
    /// ```
    pub fn for_consumer(queue: &str, policy: &RetryPolicy) -> TopologyPlan {
        let mut plan = TopologyPlan::default();
        plan.add_dead_letter_side(queue, DeclaredBy::Consumer);
        let rungs = rungs(queue, policy);
        if !rungs.is_empty() {
            plan.add_exchange(
                ExchangeSpec::new(RETRY_EXCHANGE, ExchangeKind::Direct),
                DeclaredBy::Consumer,
            );
            for rung in rungs {
                let mut spec = QueueSpec::new(rung.queue);
                spec.arguments = rung_arguments(queue, rung.delay);
                plan.add_queue(spec, DeclaredBy::Consumer);
            }
            plan.add_binding(
                Binding::new(queue, RETRY_EXCHANGE, queue),
                DeclaredBy::Consumer,
            );
        }
        plan
    }

    /// Adds everything in `other`, keeping first-appearance order; an item both plans declare
    /// identically is declared by [`DeclaredBy::Both`].
    pub fn merge(mut self, other: TopologyPlan) -> TopologyPlan {
        for e in other.exchanges {
            self.add_exchange(e.item, e.declared_by);
        }
        for q in other.queues {
            self.add_queue(q.item, q.declared_by);
        }
        for b in other.bindings {
            self.add_binding(b.item, b.declared_by);
        }
        self
    }

    fn add_dead_letter_side(&mut self, queue: &str, by: DeclaredBy) {
        self.add_exchange(
            ExchangeSpec::new(DEAD_LETTER_EXCHANGE, ExchangeKind::Direct),
            by,
        );
        for name in [dead_letter_queue(queue), parked_queue(queue)] {
            self.add_queue(QueueSpec::new(name.clone()), by);
            self.add_binding(Binding::new(name.clone(), DEAD_LETTER_EXCHANGE, name), by);
        }
    }

    fn add_exchange(&mut self, spec: ExchangeSpec, by: DeclaredBy) {
        add(&mut self.exchanges, spec, by);
    }

    fn add_queue(&mut self, spec: QueueSpec, by: DeclaredBy) {
        add(&mut self.queues, spec, by);
    }

    fn add_binding(&mut self, binding: Binding, by: DeclaredBy) {
        add(&mut self.bindings, binding, by);
    }
}

fn add<T: PartialEq>(list: &mut Vec<Declared<T>>, item: T, by: DeclaredBy) {
    match list.iter_mut().find(|d| d.item == item) {
        Some(existing) => existing.declared_by = existing.declared_by.and(by),
        None => list.push(Declared {
            item,
            declared_by: by,
        }),
    }
}

/// A source queue as the topology declares it.
///
/// ```
/// use acemq::topology::SourceQueue;
///
/// let queue = SourceQueue::new("orders.new").with_dead_letter();
/// assert_eq!(queue.name(), "orders.new");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct SourceQueue {
    name: String,
    queue_type: QueueType,
    dead_letter: bool,
    arguments: FieldTable,
}

impl SourceQueue {
    /// A durable quorum queue with no arguments.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            queue_type: QueueType::Quorum,
            dead_letter: false,
            arguments: FieldTable::new(),
        }
    }

    /// Makes it classic instead of quorum.
    pub fn classic(mut self) -> Self {
        self.queue_type = QueueType::Classic;
        self
    }

    /// Adds the broker's own dead-letter route to `Q.dlq` through `acemq.dlx` (a backstop for
    /// TTL expiry, overflow and foreign rejects), and declares `acemq.dlx`, `Q.dlq` and
    /// `Q.parked` with it.
    pub fn with_dead_letter(mut self) -> Self {
        self.dead_letter = true;
        self
    }

    /// Adds a declaration argument (`x-max-length`, ...). `x-queue-type` is set by
    /// [`SourceQueue::classic`], and with dead-lettering the two dead-letter arguments are the
    /// topology's: setting any of those here makes [`Topology::plan`] fail.
    pub fn argument(mut self, name: impl Into<String>, value: FieldValue) -> Self {
        self.arguments.insert(name.into(), value);
        self
    }

    /// The queue name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn spec(&self) -> Result<QueueSpec> {
        let mut refused: Vec<&str> = vec![QUEUE_TYPE_ARGUMENT];
        if self.dead_letter {
            refused.extend(["x-dead-letter-exchange", "x-dead-letter-routing-key"]);
        }
        if let Some(name) = refused.iter().find(|a| self.arguments.contains_key(**a)) {
            return Err(Error::InvalidTopology {
                reason: format!(
                    "queue '{}' sets {name} itself, which the topology sets for it",
                    self.name
                ),
            });
        }
        let mut spec = QueueSpec::new(self.name.clone());
        spec.arguments = self.arguments.clone();
        if self.queue_type == QueueType::Quorum {
            spec.arguments
                .insert(QUEUE_TYPE_ARGUMENT.into(), FieldValue::from("quorum"));
        }
        if self.dead_letter {
            spec.arguments.insert(
                "x-dead-letter-exchange".into(),
                FieldValue::from(DEAD_LETTER_EXCHANGE),
            );
            spec.arguments.insert(
                "x-dead-letter-routing-key".into(),
                FieldValue::from(dead_letter_queue(&self.name)),
            );
        }
        Ok(spec)
    }
}

/// Exchanges, source queues, bindings and consumers, declared as data and planned without
/// touching a broker.
///
/// ```
/// use acemq::retry::RetryPolicy;
/// use acemq::topology::{DeclaredBy, QueueType, SourceQueue, Topology};
/// use polyq_amqp::ExchangeKind;
///
/// let plan = Topology::new()
///     .exchange("orders", ExchangeKind::Topic)
///     .queue(SourceQueue::new("orders.new").with_dead_letter())
///     .bind("orders.new", "orders", "order.*")
///     .consumer("orders.new", "exponential(6, 10s, 5m)".parse::<RetryPolicy>()?)
///     .plan()?;
/// assert_eq!(plan.queues.len(), 6);
/// assert_eq!(QueueType::of(&plan.queues[0].item), QueueType::Quorum);
/// assert_eq!(plan.queues[1].declared_by, DeclaredBy::Both);
/// # Ok::<(), acemq::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct Topology {
    exchanges: Vec<ExchangeSpec>,
    queues: Vec<SourceQueue>,
    bindings: Vec<Binding>,
    consumers: Vec<(String, RetryPolicy)>,
}

impl Topology {
    /// An empty topology.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a durable exchange.
    pub fn exchange(mut self, name: impl Into<String>, kind: ExchangeKind) -> Self {
        self.exchanges.push(ExchangeSpec::new(name, kind));
        self
    }

    /// Declares a source queue.
    pub fn queue(mut self, queue: SourceQueue) -> Self {
        self.queues.push(queue);
        self
    }

    /// Binds `queue` to `exchange` on `routing_key`.
    pub fn bind(
        mut self,
        queue: impl Into<String>,
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
    ) -> Self {
        self.bindings
            .push(Binding::new(queue, exchange, routing_key));
        self
    }

    /// Includes what a consumer of `queue` with `policy` declares
    /// ([`TopologyPlan::for_consumer`]).
    pub fn consumer(mut self, queue: impl Into<String>, policy: RetryPolicy) -> Self {
        self.consumers.push((queue.into(), policy));
        self
    }

    /// The plan: the topology's own declarations first, then the consumers', merged.
    pub fn plan(&self) -> Result<TopologyPlan> {
        let mut plan = TopologyPlan::default();
        for exchange in &self.exchanges {
            plan.add_exchange(exchange.clone(), DeclaredBy::Topology);
        }
        for queue in &self.queues {
            plan.add_queue(queue.spec()?, DeclaredBy::Topology);
            if queue.dead_letter {
                plan.add_dead_letter_side(&queue.name, DeclaredBy::Topology);
            }
        }
        for binding in &self.bindings {
            plan.add_binding(binding.clone(), DeclaredBy::Topology);
        }
        Ok(self.consumers.iter().fold(plan, |plan, (queue, policy)| {
            plan.merge(TopologyPlan::for_consumer(queue, policy))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_the_topology_owns_are_refused() {
        let with_dlx = Topology::new().queue(
            SourceQueue::new("q")
                .with_dead_letter()
                .argument("x-dead-letter-exchange", FieldValue::from("mine")),
        );
        let err = with_dlx.plan().unwrap_err().to_string();
        assert!(err.contains("x-dead-letter-exchange"), "{err}");
        let typed = Topology::new()
            .queue(SourceQueue::new("q").argument(QUEUE_TYPE_ARGUMENT, FieldValue::from("stream")));
        assert!(typed.plan().is_err());
        let plain = Topology::new().queue(
            SourceQueue::new("q").argument("x-dead-letter-exchange", FieldValue::from("mine")),
        );
        assert!(plain.plan().is_ok());
    }

    #[test]
    fn a_policy_without_broker_waits_declares_no_retry_side() {
        let policy: RetryPolicy = "exponential(5, 1s, 24h)".parse().unwrap();
        let plan = TopologyPlan::for_consumer("q", &policy);
        assert!(plan.exchanges.iter().all(|e| e.item.name != RETRY_EXCHANGE));
        assert_eq!(plan.bindings.len(), 2);
    }

    #[test]
    fn a_repeated_delay_makes_one_rung() {
        let policy = RetryPolicy::fixed(3, Duration::from_millis(1500))
            .unwrap()
            .wait_in_broker_from(Duration::from_millis(1));
        assert_eq!(rungs("q", &policy).len(), 1);
    }
}
