//! One client connection to an embedded broker: what it must undo when it closes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::Map;
use super::broker::Broker;
use super::queue::Queue;

/// A connection. Closing it (explicitly, or by dropping the last handle) ends its consumers,
/// requeues every delivery it has not settled (flagged redelivered) and deletes its exclusive
/// queues, as a RabbitMQ connection does.
pub(super) struct Connection {
    pub(super) id: u64,
    pub(super) broker: Arc<Broker>,
    pub(super) url: String,
    closed: AtomicBool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Queues this connection consumed from or fetched from, by queue id.
    used: Map<u64, Weak<Queue>>,
    exclusive: Vec<Weak<Queue>>,
}

impl Connection {
    pub(super) fn open(broker: Arc<Broker>, url: String) -> Self {
        Self {
            id: broker.next_id(),
            broker,
            url,
            closed: AtomicBool::new(false),
            state: Mutex::new(State::default()),
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Remembers a queue whose deliveries this connection may hold.
    pub(super) fn uses(&self, queue: &Arc<Queue>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .used
            .entry(queue.id)
            .or_insert_with(|| Arc::downgrade(queue));
    }

    /// Remembers an exclusive queue to delete on close.
    pub(super) fn owns(&self, queue: &Arc<Queue>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.exclusive.push(Arc::downgrade(queue));
    }

    pub(super) fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let state = std::mem::take(&mut *self.state.lock().unwrap_or_else(PoisonError::into_inner));
        for queue in state.used.values().filter_map(Weak::upgrade) {
            let effects = queue.connection_closed(self.id);
            self.broker.apply(&queue, effects);
        }
        for queue in state.exclusive.iter().filter_map(Weak::upgrade) {
            self.broker.remove_queue(&queue);
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close();
    }
}
