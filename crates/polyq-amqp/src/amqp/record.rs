//! What this client declared, in order, so the supervisor can declare it again on a new
//! connection.

use crate::topology::{Binding, ExchangeSpec, QueueSpec};

/// One declaration the broker accepted.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Declared {
    /// An exchange.
    Exchange(ExchangeSpec),
    /// A queue with a client-chosen name.
    Queue(QueueSpec),
    /// A queue the broker named, by that name. It cannot be declared again under it (RabbitMQ
    /// reserves the `amq.` prefix), only looked for: it outlives the connection unless it was
    /// exclusive or auto-delete.
    ServerNamedQueue(String),
    /// A binding.
    Binding(Binding),
}

/// The declarations to replay, oldest first. A redeclaration replaces the earlier entry in
/// place, so bindings stay after the objects they bind; a deletion forgets the object and the
/// bindings the broker removes with it.
#[derive(Debug, Default)]
pub(super) struct Record {
    items: Vec<Declared>,
}

impl Record {
    /// The declarations, in replay order.
    pub(super) fn items(&self) -> Vec<Declared> {
        self.items.clone()
    }

    pub(super) fn exchange_declared(&mut self, spec: &ExchangeSpec) {
        self.upsert(
            |d| matches!(d, Declared::Exchange(e) if e.name == spec.name),
            Declared::Exchange(spec.clone()),
        );
    }

    pub(super) fn exchange_deleted(&mut self, name: &str) {
        self.items.retain(|d| match d {
            Declared::Exchange(e) => e.name != name,
            Declared::Binding(b) => b.exchange != name,
            Declared::Queue(_) | Declared::ServerNamedQueue(_) => true,
        });
    }

    /// `name` is the queue's name as the broker reported it, which differs from the spec's
    /// empty name when the broker chose it.
    pub(super) fn queue_declared(&mut self, spec: &QueueSpec, name: &str) {
        if spec.name.is_empty() {
            self.upsert(
                |d| matches!(d, Declared::ServerNamedQueue(q) if q == name),
                Declared::ServerNamedQueue(name.to_owned()),
            );
            return;
        }
        self.upsert(
            |d| matches!(d, Declared::Queue(q) if q.name == spec.name),
            Declared::Queue(spec.clone()),
        );
    }

    pub(super) fn queue_deleted(&mut self, name: &str) {
        self.items.retain(|d| match d {
            Declared::Queue(q) => q.name != name,
            Declared::ServerNamedQueue(q) => q != name,
            Declared::Binding(b) => b.queue != name,
            Declared::Exchange(_) => true,
        });
    }

    pub(super) fn bound(&mut self, binding: &Binding) {
        self.upsert(
            |d| matches!(d, Declared::Binding(b) if same_binding(b, binding)),
            Declared::Binding(binding.clone()),
        );
    }

    pub(super) fn unbound(&mut self, binding: &Binding) {
        self.items
            .retain(|d| !matches!(d, Declared::Binding(b) if same_binding(b, binding)));
    }

    fn upsert(&mut self, same: impl Fn(&Declared) -> bool, item: Declared) {
        match self.items.iter_mut().find(|d| same(d)) {
            Some(existing) => *existing = item,
            None => self.items.push(item),
        }
    }
}

fn same_binding(a: &Binding, b: &Binding) -> bool {
    a.queue == b.queue
        && a.exchange == b.exchange
        && a.routing_key == b.routing_key
        && a.arguments == b.arguments
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::ExchangeKind;

    #[test]
    fn replays_in_declaration_order_and_forgets_deletions() {
        let mut record = Record::default();
        let exchange = ExchangeSpec::new("x", ExchangeKind::Topic);
        let queue = QueueSpec::new("q");
        let binding = Binding::new("q", "x", "a.#");
        record.exchange_declared(&exchange);
        record.queue_declared(&queue, "q");
        record.bound(&binding);
        record.bound(&binding);
        assert_eq!(
            record.items(),
            vec![
                Declared::Exchange(exchange.clone()),
                Declared::Queue(queue.clone()),
                Declared::Binding(binding.clone()),
            ]
        );

        let mut redeclared = exchange.clone();
        redeclared.durable = false;
        record.exchange_declared(&redeclared);
        assert_eq!(record.items()[0], Declared::Exchange(redeclared));

        record.unbound(&binding);
        assert_eq!(record.items().len(), 2);
        record.bound(&binding);
        record.queue_deleted("q");
        assert_eq!(record.items().len(), 1, "queue and its binding forgotten");
        record.queue_declared(&queue, "q");
        record.bound(&binding);
        record.exchange_deleted("x");
        assert_eq!(record.items(), vec![Declared::Queue(queue)]);
    }

    #[test]
    fn server_named_queues_are_kept_by_the_broker_name_with_their_bindings() {
        let mut record = Record::default();
        let server_named = QueueSpec::new("");
        let binding = Binding::new("amq.gen-1", "amq.fanout", "");
        record.queue_declared(&server_named, "amq.gen-1");
        record.bound(&binding);
        record.queue_declared(&server_named, "amq.gen-2");
        record.queue_declared(&server_named, "amq.gen-1");
        assert_eq!(
            record.items(),
            vec![
                Declared::ServerNamedQueue("amq.gen-1".to_owned()),
                Declared::Binding(binding),
                Declared::ServerNamedQueue("amq.gen-2".to_owned()),
            ]
        );
        record.queue_deleted("amq.gen-1");
        assert_eq!(
            record.items(),
            vec![Declared::ServerNamedQueue("amq.gen-2".to_owned())]
        );
    }
}
