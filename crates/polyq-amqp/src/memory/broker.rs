//! One embedded broker: its exchanges, queues and bindings, routing, and dead-lettering.
//! Brokers live in a process-wide registry keyed by the name in the `memory://` URL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rand::RngCore as _;

use super::Map;
use super::args::{QueueArgs, exchange_mismatch, queue_mismatch};
use super::dead_letter::{Death, Reason, is_cycle, record_death};
use super::queue::{Effects, Message, Queue, Wakers};
use super::routing::{headers_match, topic_matches};
use crate::error::{Error, Result};
use crate::message::{OutgoingMessage, PublishOutcome, ReturnedMessage};
use crate::topology::{Binding, ExchangeKind, ExchangeSpec, QueueSpec};
use crate::value::FieldTable;

static REGISTRY: LazyLock<Mutex<HashMap<String, Arc<Broker>>>> = LazyLock::new(Default::default);

/// The broker named `name`, created on first use. It lives as long as the process, like a
/// broker outlives its connections.
pub(super) fn named(name: &str) -> Arc<Broker> {
    let mut registry = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(
        registry
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Broker::new())),
    )
}

/// Exchanges every RabbitMQ virtual host has.
const SYSTEM_EXCHANGES: &[(&str, ExchangeKind)] = &[
    ("amq.direct", ExchangeKind::Direct),
    ("amq.fanout", ExchangeKind::Fanout),
    ("amq.topic", ExchangeKind::Topic),
    ("amq.headers", ExchangeKind::Headers),
    ("amq.match", ExchangeKind::Headers),
];

/// An embedded broker.
pub(super) struct Broker {
    topology: RwLock<Topology>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Topology {
    exchanges: Map<String, Exchange>,
    queues: Map<String, Arc<Queue>>,
}

struct Exchange {
    spec: ExchangeSpec,
    bindings: Vec<Bound>,
}

struct Bound {
    queue: Arc<Queue>,
    routing_key: String,
    arguments: FieldTable,
}

impl Topology {
    /// The queues a message goes to; `None` when the exchange does not exist.
    fn route(
        &self,
        exchange: &str,
        routing_key: &str,
        headers: &FieldTable,
    ) -> Option<Targets<'_>> {
        let mut targets = Targets::default();
        if exchange.is_empty() {
            if let Some(queue) = self.queues.get(routing_key) {
                targets.push(queue);
            }
            return Some(targets);
        }
        let exchange = self.exchanges.get(exchange)?;
        for bound in &exchange.bindings {
            let matched = match exchange.spec.kind {
                ExchangeKind::Direct => bound.routing_key == routing_key,
                ExchangeKind::Topic => topic_matches(&bound.routing_key, routing_key),
                ExchangeKind::Fanout => true,
                ExchangeKind::Headers => headers_match(&bound.arguments, headers),
            };
            // A queue bound several ways still gets one copy.
            if matched && !targets.contains(&bound.queue) {
                targets.push(&bound.queue);
            }
        }
        Some(targets)
    }
}

/// The queues one message is routed to, borrowed from the topology. Most messages go to exactly
/// one queue, which needs no allocation.
#[derive(Default)]
enum Targets<'a> {
    #[default]
    None,
    One(&'a Arc<Queue>),
    Many(Vec<&'a Arc<Queue>>),
}

impl<'a> Targets<'a> {
    fn push(&mut self, queue: &'a Arc<Queue>) {
        *self = match std::mem::take(self) {
            Targets::None => Targets::One(queue),
            Targets::One(first) => Targets::Many(vec![first, queue]),
            Targets::Many(mut queues) => {
                queues.push(queue);
                Targets::Many(queues)
            }
        };
    }

    fn contains(&self, queue: &Arc<Queue>) -> bool {
        match self {
            Targets::None => false,
            Targets::One(first) => Arc::ptr_eq(first, queue),
            Targets::Many(queues) => queues.iter().any(|q| Arc::ptr_eq(q, queue)),
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Targets::None)
    }

    fn queues(&self) -> impl Iterator<Item = &'a Arc<Queue>> + '_ {
        let (one, many) = match self {
            Targets::None => (None, &[][..]),
            Targets::One(queue) => (Some(*queue), &[][..]),
            Targets::Many(queues) => (None, &queues[..]),
        };
        one.into_iter().chain(many.iter().copied())
    }
}

/// Effects of enqueueing under the topology lock, carried out once it is released. Waking
/// consumers needs no reference to the queue; everything else keeps one. Publishing thus never
/// touches a queue's reference count, which the consuming thread updates for every delivery.
#[derive(Default)]
struct Deferred {
    wakers: Wakers,
    effects: Vec<(Arc<Queue>, Effects)>,
}

impl Deferred {
    fn add(&mut self, queue: &Arc<Queue>, effects: Effects) {
        if effects.is_only_wakers() {
            self.wakers.extend([effects.wakers]);
        } else {
            self.effects.push((Arc::clone(queue), effects));
        }
    }

    fn run(self, broker: &Arc<Broker>) {
        self.wakers.wake_all();
        for (queue, effects) in self.effects {
            broker.apply(&queue, effects);
        }
    }
}

impl Broker {
    fn new() -> Self {
        let exchanges = SYSTEM_EXCHANGES
            .iter()
            .map(|(name, kind)| {
                let exchange = Exchange {
                    spec: ExchangeSpec::new(*name, *kind),
                    bindings: Vec::new(),
                };
                ((*name).to_owned(), exchange)
            })
            .collect();
        Self {
            topology: RwLock::new(Topology {
                exchanges,
                queues: Map::default(),
            }),
            next_id: AtomicU64::new(1),
        }
    }

    /// A number unique within this broker, for connections, queues and consumers.
    pub(super) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn read(&self) -> RwLockReadGuard<'_, Topology> {
        self.topology.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Topology> {
        self.topology
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn declare_exchange(&self, spec: &ExchangeSpec) -> Result<()> {
        let operation = || format!("declare exchange `{}`", spec.name);
        refuse_default_exchange(&spec.name, operation)?;
        let mut topology = self.write();
        if let Some(existing) = topology.exchanges.get(&spec.name) {
            return match exchange_mismatch(&existing.spec, spec) {
                None => Ok(()),
                Some(reason) => Err(precondition(operation(), reason)),
            };
        }
        refuse_reserved_name("exchange", &spec.name, operation)?;
        topology.exchanges.insert(
            spec.name.clone(),
            Exchange {
                spec: spec.clone(),
                bindings: Vec::new(),
            },
        );
        Ok(())
    }

    /// Succeeds when the exchange exists, as a passive declare does; like RabbitMQ it says
    /// nothing about the exchange's type or flags.
    pub(super) fn inspect_exchange(&self, name: &str) -> Result<()> {
        refuse_default_exchange(name, || format!("inspect exchange `{name}`"))?;
        if self.read().exchanges.contains_key(name) {
            Ok(())
        } else {
            Err(Error::NotFound {
                kind: "exchange",
                name: name.to_owned(),
            })
        }
    }

    /// Deletes an exchange and its bindings; deleting one that does not exist succeeds, as on
    /// RabbitMQ.
    pub(super) fn delete_exchange(&self, name: &str) -> Result<()> {
        let operation = || format!("delete exchange `{name}`");
        refuse_default_exchange(name, operation)?;
        if SYSTEM_EXCHANGES.iter().any(|(system, _)| *system == name) {
            return Err(access_refused(
                operation(),
                format!("deletion of system exchange '{name}' not allowed"),
            ));
        }
        self.write().exchanges.remove(name);
        Ok(())
    }

    /// Declares a queue, or checks an existing one against the declaration. Returns the queue
    /// and whether it was created.
    pub(super) fn declare_queue(
        &self,
        connection: u64,
        spec: &QueueSpec,
    ) -> Result<(Arc<Queue>, bool)> {
        let operation = || format!("declare queue `{}`", spec.name);
        let args = QueueArgs::parse(&spec.arguments)
            .map_err(|reason| precondition(operation(), reason))?;
        let mut topology = self.write();
        if let Some(existing) = topology.queues.get(&spec.name) {
            existing.check_access(connection, "declare")?;
            return match queue_mismatch(&existing.spec, spec) {
                None => Ok((Arc::clone(existing), false)),
                Some(reason) => Err(precondition(operation(), reason)),
            };
        }
        let mut spec = spec.clone();
        if spec.name.is_empty() {
            spec.name = server_name();
        } else {
            refuse_reserved_name("queue", &spec.name, operation)?;
        }
        let owner = spec.exclusive.then_some(connection);
        let queue = Arc::new(Queue::new(self.next_id(), spec, args, owner));
        topology
            .queues
            .insert(queue.name().to_owned(), Arc::clone(&queue));
        Ok((queue, true))
    }

    /// The queue named `name`, if this connection may use it.
    pub(super) fn queue(
        self: &Arc<Self>,
        connection: u64,
        name: &str,
        operation: &str,
    ) -> Result<Arc<Queue>> {
        let queue = self
            .read()
            .queues
            .get(name)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                kind: "queue",
                name: name.to_owned(),
            })?;
        queue.check_access(connection, operation)?;
        // The runtime that ran the expiry task may have shut down since (each test has its own);
        // whoever uses the queue next restarts it.
        if queue.needs_expiry(None) {
            queue.ensure_expiry(self);
        }
        Ok(queue)
    }

    /// Deletes a queue by name; a queue that does not exist counts as deleted with no messages,
    /// as on RabbitMQ.
    pub(super) fn delete_queue(self: &Arc<Self>, connection: u64, name: &str) -> Result<u32> {
        let Some(queue) = self.read().queues.get(name).cloned() else {
            return Ok(0);
        };
        queue.check_access(connection, "delete")?;
        Ok(self.remove_queue(&queue))
    }

    /// Removes `queue` and its bindings from the topology (if it is still there) and deletes it.
    pub(super) fn remove_queue(self: &Arc<Self>, queue: &Arc<Queue>) -> u32 {
        {
            let mut topology = self.write();
            if topology
                .queues
                .get(queue.name())
                .is_some_and(|current| Arc::ptr_eq(current, queue))
            {
                topology.queues.remove(queue.name());
            }
            topology.exchanges.retain(|_, exchange| {
                let before = exchange.bindings.len();
                exchange
                    .bindings
                    .retain(|bound| !Arc::ptr_eq(&bound.queue, queue));
                let lost_last = before > 0 && exchange.bindings.is_empty();
                !(lost_last && exchange.spec.auto_delete)
            });
        }
        let (held, effects) = queue.delete();
        self.apply(queue, effects);
        held
    }

    pub(super) fn bind(&self, connection: u64, binding: &Binding) -> Result<()> {
        let operation = || {
            format!(
                "bind queue `{}` to exchange `{}`",
                binding.queue, binding.exchange
            )
        };
        refuse_default_exchange(&binding.exchange, operation)?;
        let mut topology = self.write();
        let queue = topology
            .queues
            .get(&binding.queue)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                kind: "queue",
                name: binding.queue.clone(),
            })?;
        queue.check_access(connection, "bind")?;
        let exchange = topology
            .exchanges
            .get_mut(&binding.exchange)
            .ok_or_else(|| Error::NotFound {
                kind: "exchange",
                name: binding.exchange.clone(),
            })?;
        let exists = exchange.bindings.iter().any(|bound| {
            Arc::ptr_eq(&bound.queue, &queue)
                && bound.routing_key == binding.routing_key
                && bound.arguments == binding.arguments
        });
        if !exists {
            exchange.bindings.push(Bound {
                queue,
                routing_key: binding.routing_key.clone(),
                arguments: binding.arguments.clone(),
            });
        }
        Ok(())
    }

    /// Removes a binding; removing one that does not exist succeeds, as on RabbitMQ.
    pub(super) fn unbind(&self, connection: u64, binding: &Binding) -> Result<()> {
        let operation = || {
            format!(
                "unbind queue `{}` from exchange `{}`",
                binding.queue, binding.exchange
            )
        };
        refuse_default_exchange(&binding.exchange, operation)?;
        let mut topology = self.write();
        if let Some(queue) = topology.queues.get(&binding.queue) {
            queue.check_access(connection, "unbind")?;
        }
        let Some(exchange) = topology.exchanges.get_mut(&binding.exchange) else {
            return Ok(());
        };
        let before = exchange.bindings.len();
        exchange.bindings.retain(|bound| {
            !(bound.queue.name() == binding.queue
                && bound.routing_key == binding.routing_key
                && bound.arguments == binding.arguments)
        });
        if before > 0 && exchange.bindings.is_empty() && exchange.spec.auto_delete {
            topology.exchanges.remove(&binding.exchange);
        }
        Ok(())
    }

    /// Routes and enqueues a message. Every publish is confirmed at once: the message is in its
    /// queues by the time this returns.
    pub(super) fn publish(self: &Arc<Self>, message: OutgoingMessage) -> Result<PublishOutcome> {
        let message_ttl = message
            .properties
            .expiration_ttl(format_args!("publish to exchange `{}`", message.exchange))?;
        let topology = self.read();
        let targets = topology
            .route(
                &message.exchange,
                &message.routing_key,
                &message.properties.headers,
            )
            .ok_or_else(|| Error::NotFound {
                kind: "exchange",
                name: message.exchange.clone(),
            })?;
        if targets.is_empty() {
            return Ok(if message.mandatory {
                PublishOutcome::Returned(ReturnedMessage {
                    reply_code: 312,
                    reply_text: "NO_ROUTE".to_owned(),
                    exchange: message.exchange,
                    routing_key: message.routing_key,
                    properties: message.properties,
                    body: message.body,
                })
            } else {
                PublishOutcome::Acked
            });
        }
        let message = Arc::new(Message::from(message));
        let mut deferred = Deferred::default();
        let mut refused = false;
        for queue in targets.queues() {
            refused |= !self.enqueue(queue, &message, message_ttl, &mut deferred);
        }
        drop(targets);
        drop(topology);
        deferred.run(self);
        // As on RabbitMQ, one refusing queue makes the confirm a nack; the others keep their copy.
        Ok(if refused {
            PublishOutcome::Nacked
        } else {
            PublishOutcome::Acked
        })
    }

    /// Enqueues under the topology's read lock; returns whether the queue accepted the message.
    fn enqueue(
        self: &Arc<Self>,
        queue: &Arc<Queue>,
        message: &Arc<Message>,
        message_ttl: Option<Duration>,
        deferred: &mut Deferred,
    ) -> bool {
        if queue.needs_expiry(message_ttl) {
            queue.ensure_expiry(self);
        }
        let (accepted, effects) = queue.push(Arc::clone(message), message_ttl);
        deferred.add(queue, effects);
        accepted
    }

    /// Carries out what a queue operation left to do once the queue's lock is released.
    pub(super) fn apply(self: &Arc<Self>, queue: &Arc<Queue>, effects: Effects) {
        let Effects {
            wakers,
            dead,
            unused,
            wake_expiry,
        } = effects;
        wakers.wake_all();
        if wake_expiry {
            queue.expiry_wakeup().notify_one();
        }
        if !dead.is_empty() {
            self.dead_letter(queue, dead);
        }
        if unused {
            self.remove_queue(queue);
        }
    }

    /// Republishes dead messages to the queue's dead-letter exchange with their `x-death`
    /// history; without one they are dropped. Messages to a missing exchange are dropped, and a
    /// queue that would see the message come round again without any rejection is skipped, as
    /// RabbitMQ does.
    fn dead_letter(self: &Arc<Self>, queue: &Queue, dead: Vec<(Arc<Message>, Reason)>) {
        let Some(exchange) = &queue.args.dead_letter_exchange else {
            return;
        };
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs());
        for (message, reason) in dead {
            let routing_key = queue
                .args
                .dead_letter_routing_key
                .clone()
                .unwrap_or_else(|| message.routing_key.clone());
            let properties = record_death(
                &message.properties,
                &Death {
                    queue: queue.name(),
                    reason,
                    exchange: &message.exchange,
                    routing_key: &message.routing_key,
                    time,
                },
            );
            let copy = Arc::new(Message {
                exchange: exchange.clone(),
                routing_key,
                properties,
                body: message.body.clone(),
            });
            let mut deferred = Deferred::default();
            {
                let topology = self.read();
                // Dead letters to a missing exchange are dropped, as RabbitMQ does.
                let Some(targets) =
                    topology.route(exchange, &copy.routing_key, &copy.properties.headers)
                else {
                    continue;
                };
                for target in targets.queues() {
                    if !is_cycle(&copy.properties.headers, target.name()) {
                        // A full queue refusing a dead letter drops it, as RabbitMQ does.
                        self.enqueue(target, &copy, None, &mut deferred);
                    }
                }
            }
            deferred.run(self);
        }
    }
}

/// RabbitMQ's 406 PRECONDITION_FAILED, worded as the `amqp://` client reports it.
fn precondition(operation: String, reason: impl std::fmt::Display) -> Error {
    Error::Precondition {
        operation,
        reason: format!("PRECONDITION_FAILED - {reason}"),
    }
}

/// RabbitMQ's 403 ACCESS_REFUSED, with the broker's text as the `amqp://` client reports it.
pub(super) fn access_refused(operation: String, reason: impl std::fmt::Display) -> Error {
    Error::AccessRefused {
        operation,
        reason: format!("ACCESS_REFUSED - {reason}"),
    }
}

fn refuse_default_exchange(name: &str, operation: impl Fn() -> String) -> Result<()> {
    if name.is_empty() {
        Err(access_refused(
            operation(),
            "operation not permitted on the default exchange",
        ))
    } else {
        Ok(())
    }
}

fn refuse_reserved_name(kind: &str, name: &str, operation: impl Fn() -> String) -> Result<()> {
    if name.starts_with("amq.") {
        Err(access_refused(
            operation(),
            format!("{kind} name '{name}' contains reserved prefix 'amq.*'"),
        ))
    } else {
        Ok(())
    }
}

/// A server-chosen queue name in RabbitMQ's shape, `amq.gen-` and 22 URL-safe characters.
fn server_name() -> String {
    let mut bytes = [0_u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    format!(
        "amq.gen-{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_look_like_rabbitmq_ones() {
        let name = server_name();
        assert!(name.starts_with("amq.gen-"), "{name}");
        assert_eq!(name.len(), "amq.gen-".len() + 22, "{name}");
        assert_ne!(name, server_name());
    }
}
