//! `memory://`: the embedded broker, an in-process AMQP 0-9-1 subset with RabbitMQ's semantics.
//!
//! Each URL name is one broker shared by every client of the process that connects to it
//! (`memory://` and `memory://other` are two brokers). A client is one connection: closing it
//! requeues its unsettled deliveries and deletes its exclusive queues.

mod args;
mod broker;
mod connection;
mod consumer;
mod dead_letter;
mod expiry;
mod limits;
mod queue;
mod routing;

/// The broker's maps: queues and exchanges by name, unsettled deliveries by tag, a connection's
/// queues by id. SipHash, the standard map's hasher, is keyed to stop someone who picks many
/// keys from piling them into one bucket; here the names come from the code of this process
/// (the embedded broker has no listener) and tags and ids are numbers the broker counts up
/// itself, so nobody outside can aim keys at a bucket, and foldhash (still seeded per process)
/// hashes them for a fraction of the cost on every publish and settlement.
type Map<K, V> = foldhash::HashMap<K, V>;

use std::sync::Arc;

use consumer::Source;
pub(crate) use consumer::{Acker, Consumer};

use crate::Confirm;
use crate::client::{ClientOptions, ConsumeOptions, ConsumerInner};
use crate::error::{Error, Result};
use crate::health::{Health, HealthTracker};
use crate::message::{Delivery, OutgoingMessage};
use crate::topology::{Binding, ExchangeSpec, QueueInfo, QueueSpec};
use connection::Connection;

/// A client of an embedded broker. Clones share the connection.
#[derive(Clone)]
pub(crate) struct MemoryClient {
    connection: Arc<Connection>,
    health: Arc<HealthTracker>,
}

impl MemoryClient {
    /// Connects to the broker named by `url` (`memory://` or `memory://<name>`), creating it on
    /// first use.
    pub(crate) fn connect(url: &str, _options: &ClientOptions) -> Result<Self> {
        let name = broker_name(url)?;
        let broker = broker::named(name);
        Ok(Self {
            connection: Arc::new(Connection::open(broker, format!("memory://{name}"))),
            health: Arc::new(HealthTracker::up(0)),
        })
    }

    pub(crate) fn url(&self) -> String {
        self.connection.url.clone()
    }

    pub(crate) fn health(&self) -> Health {
        self.health.current()
    }

    pub(crate) fn health_watch(&self) -> tokio::sync::watch::Receiver<Health> {
        self.health.watch()
    }

    fn open(&self) -> Result<&Connection> {
        if self.connection.is_closed() {
            Err(Error::Closed)
        } else {
            Ok(&self.connection)
        }
    }

    pub(crate) async fn declare_exchange(&self, spec: &ExchangeSpec) -> Result<()> {
        let operation = format!("declare exchange `{}`", spec.name);
        limits::short(&operation, "exchange name", &spec.name)?;
        limits::table(&operation, &spec.arguments)?;
        self.open()?.broker.declare_exchange(spec)
    }

    pub(crate) async fn inspect_exchange(&self, name: &str) -> Result<()> {
        limits::short(&format!("inspect exchange `{name}`"), "exchange name", name)?;
        self.open()?.broker.inspect_exchange(name)
    }

    pub(crate) async fn delete_exchange(&self, name: &str) -> Result<()> {
        limits::short(&format!("delete exchange `{name}`"), "exchange name", name)?;
        self.open()?.broker.delete_exchange(name)
    }

    pub(crate) async fn declare_queue(&self, spec: &QueueSpec) -> Result<QueueInfo> {
        let operation = format!("declare queue `{}`", spec.name);
        limits::short(&operation, "queue name", &spec.name)?;
        limits::table(&operation, &spec.arguments)?;
        let connection = self.open()?;
        let (queue, created) = connection.broker.declare_queue(connection.id, spec)?;
        if created {
            if queue.spec.exclusive {
                connection.owns(&queue);
            }
            if queue.needs_expiry(None) {
                queue.ensure_expiry(&connection.broker);
            }
        }
        Ok(queue.info())
    }

    pub(crate) async fn inspect_queue(&self, name: &str) -> Result<QueueInfo> {
        limits::short(&format!("inspect queue `{name}`"), "queue name", name)?;
        let connection = self.open()?;
        Ok(connection
            .broker
            .queue(connection.id, name, "inspect")?
            .info())
    }

    pub(crate) async fn delete_queue(&self, name: &str) -> Result<u32> {
        limits::short(&format!("delete queue `{name}`"), "queue name", name)?;
        let connection = self.open()?;
        connection.broker.delete_queue(connection.id, name)
    }

    pub(crate) async fn purge_queue(&self, name: &str) -> Result<u32> {
        limits::short(&format!("purge queue `{name}`"), "queue name", name)?;
        let connection = self.open()?;
        Ok(connection
            .broker
            .queue(connection.id, name, "purge")?
            .purge())
    }

    pub(crate) async fn bind_queue(&self, binding: &Binding) -> Result<()> {
        check_binding("bind", binding)?;
        let connection = self.open()?;
        connection.broker.bind(connection.id, binding)
    }

    pub(crate) async fn unbind_queue(&self, binding: &Binding) -> Result<()> {
        check_binding("unbind", binding)?;
        let connection = self.open()?;
        connection.broker.unbind(connection.id, binding)
    }

    /// Not `async`: the broker confirms on publish, so there is nothing to wait for.
    pub(crate) fn publish(&self, message: OutgoingMessage) -> Result<Confirm> {
        const OPERATION: &str = "publish";
        limits::short(OPERATION, "exchange name", &message.exchange)?;
        limits::short(OPERATION, "routing key", &message.routing_key)?;
        limits::properties(OPERATION, &message.properties)?;
        let outcome = self.open()?.broker.publish(message)?;
        Ok(Confirm::settled(outcome))
    }

    pub(crate) async fn get(&self, queue: &str) -> Result<Option<Delivery>> {
        limits::short(&format!("get from queue `{queue}`"), "queue name", queue)?;
        let connection = self.open()?;
        let queue = connection.broker.queue(connection.id, queue, "get from")?;
        connection.uses(&queue);
        let (handout, effects) = queue.get(connection.id);
        connection.broker.apply(&queue, effects);
        Ok(handout.map(|handout| {
            let source = Source::new(Arc::clone(&self.connection), queue);
            consumer::delivery(&source, handout)
        }))
    }

    pub(crate) async fn consume(
        &self,
        queue: &str,
        options: &ConsumeOptions,
    ) -> Result<crate::Consumer> {
        let operation = format!("consume from queue `{queue}`");
        limits::short(&operation, "queue name", queue)?;
        if let Some(tag) = &options.tag {
            limits::short(&operation, "consumer tag", tag)?;
        }
        let connection = self.open()?;
        let queue = connection
            .broker
            .queue(connection.id, queue, "consume from")?;
        let id = connection.broker.next_id();
        let effects = queue.add_consumer(id, connection.id, options.prefetch, options.exclusive)?;
        connection.uses(&queue);
        connection.broker.apply(&queue, effects);
        let consumer = Consumer::new(Source::new(Arc::clone(&self.connection), queue), id);
        Ok(ConsumerInner::Memory(consumer).into())
    }

    pub(crate) async fn close(&self) -> Result<()> {
        self.connection.close();
        self.health.closed();
        Ok(())
    }
}

fn check_binding(verb: &str, binding: &Binding) -> Result<()> {
    let operation = format!(
        "{verb} queue `{}` and exchange `{}`",
        binding.queue, binding.exchange
    );
    limits::short(&operation, "queue name", &binding.queue)?;
    limits::short(&operation, "exchange name", &binding.exchange)?;
    limits::short(&operation, "binding key", &binding.routing_key)?;
    limits::table(&operation, &binding.arguments)
}

/// The broker name of a `memory://` URL: everything after the scheme, without a trailing `/`.
fn broker_name(url: &str) -> Result<&str> {
    let invalid = |reason: &str| Error::InvalidUrl {
        url: crate::redact_url(url),
        reason: reason.to_owned(),
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| invalid("expected memory://[name]"))?;
    if !scheme.eq_ignore_ascii_case("memory") {
        return Err(invalid("expected memory://[name]"));
    }
    let name = rest.strip_suffix('/').unwrap_or(rest);
    if name.contains(['/', '?', '#', '@']) {
        return Err(invalid(
            "a memory:// broker name is one word without '/', '?', '#' or '@'",
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests;
