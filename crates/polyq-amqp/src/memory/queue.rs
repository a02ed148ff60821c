//! One queue: ready messages in publish order, deliveries awaiting settlement, and consumers
//! with their prefetch windows. Everything about a queue sits behind one mutex, so publishers and
//! consumers of different queues never contend.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Map;
use super::args::{Overflow, QueueArgs};
use super::broker::{Broker, access_refused};
use super::dead_letter::Reason;
use crate::error::{Error, Result};
use crate::message::OutgoingMessage;
use crate::properties::Properties;
use crate::topology::{QueueInfo, QueueSpec};

/// A published message as the broker keeps it: shared, never copied, by every queue it was
/// routed to.
#[derive(Debug)]
pub(super) struct Message {
    pub(super) exchange: String,
    pub(super) routing_key: String,
    pub(super) properties: Properties,
    pub(super) body: Bytes,
}

impl From<OutgoingMessage> for Message {
    fn from(message: OutgoingMessage) -> Self {
        Self {
            exchange: message.exchange,
            routing_key: message.routing_key,
            properties: message.properties,
            body: message.body,
        }
    }
}

/// A message handed to a consumer or to `basic.get`, identified by its delivery tag.
#[derive(Debug)]
pub(super) struct Handout {
    pub(super) tag: u64,
    pub(super) message: Arc<Message>,
    pub(super) redelivered: bool,
}

/// How a delivery is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settlement {
    /// Forget it.
    Ack,
    /// Put it back at its original position, flagged redelivered.
    Requeue,
    /// Dead-letter it (or drop it when the queue has no dead-letter exchange).
    Reject,
}

/// What a consumer finds when it looks for deliveries.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Inbox {
    /// Deliveries were moved into the consumer's buffer.
    Filled,
    /// Nothing yet; the consumer is woken when something arrives.
    Empty,
    /// The consumer no longer exists: cancelled, or its connection closed.
    Gone,
    /// The queue was deleted under the consumer.
    Deleted,
}

/// Work that must happen after the queue's lock is released: waking consumers, routing dead
/// letters (possibly back into this queue), deleting the queue, rescheduling expiry.
#[derive(Debug, Default)]
#[must_use = "effects must be applied by the broker"]
pub(super) struct Effects {
    pub(super) wakers: Wakers,
    pub(super) dead: Vec<(Arc<Message>, Reason)>,
    pub(super) unused: bool,
    pub(super) wake_expiry: bool,
}

impl Effects {
    /// Whether waking consumers is all there is to do.
    pub(super) fn is_only_wakers(&self) -> bool {
        self.dead.is_empty() && !self.unused && !self.wake_expiry
    }
}

/// Consumers to wake. Usually one at most, kept inline: a publish that wakes its consumer
/// allocates nothing for it.
#[derive(Debug, Default)]
pub(super) struct Wakers {
    first: Option<Waker>,
    rest: Vec<Waker>,
}

impl Extend<Waker> for Wakers {
    fn extend<I: IntoIterator<Item = Waker>>(&mut self, wakers: I) {
        for waker in wakers {
            if self.first.is_none() {
                self.first = Some(waker);
            } else {
                self.rest.push(waker);
            }
        }
    }
}

impl Extend<Wakers> for Wakers {
    fn extend<I: IntoIterator<Item = Wakers>>(&mut self, more: I) {
        for wakers in more {
            self.extend(wakers.first.into_iter().chain(wakers.rest));
        }
    }
}

impl Wakers {
    pub(super) fn wake_all(self) {
        self.first
            .into_iter()
            .chain(self.rest)
            .for_each(Waker::wake);
    }
}

struct Entry {
    /// Publish order in this queue; requeued messages go back to their place by it.
    seq: u64,
    message: Arc<Message>,
    redelivered: bool,
    expires_at: Option<Instant>,
}

struct Unacked {
    entry: Entry,
    connection: u64,
    consumer: Option<u64>,
}

struct Slot {
    id: u64,
    connection: u64,
    /// Zero means no limit.
    prefetch: u32,
    in_flight: u32,
    exclusive: bool,
    inbox: VecDeque<Handout>,
    waker: Option<Waker>,
}

impl Slot {
    fn has_credit(&self) -> bool {
        self.prefetch == 0 || self.in_flight < self.prefetch
    }
}

#[derive(Default)]
struct State {
    ready: VecDeque<Entry>,
    unacked: Map<u64, Unacked>,
    consumers: Vec<Slot>,
    /// Round-robin cursor into `consumers`.
    next_consumer: usize,
    next_seq: u64,
    next_tag: u64,
    /// The deadline the expiry task is sleeping towards; `None` when it waits for a wake-up.
    expiry_deadline: Option<Instant>,
    deleted: bool,
}

/// A queue of one broker.
pub(super) struct Queue {
    pub(super) id: u64,
    pub(super) spec: QueueSpec,
    pub(super) args: QueueArgs,
    /// The connection an exclusive queue belongs to.
    pub(super) owner: Option<u64>,
    state: Mutex<State>,
    expiry: Mutex<Option<JoinHandle<()>>>,
    expiry_wakeup: Arc<Notify>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.spec.name)
            .finish()
    }
}

impl Queue {
    pub(super) fn new(id: u64, spec: QueueSpec, args: QueueArgs, owner: Option<u64>) -> Self {
        Self {
            id,
            spec,
            args,
            owner,
            state: Mutex::new(State::default()),
            expiry: Mutex::new(None),
            expiry_wakeup: Arc::new(Notify::new()),
        }
    }

    pub(super) fn name(&self) -> &str {
        &self.spec.name
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves the state consistent (every mutation
        // completes before any call that could panic), so the poison flag is not meaningful.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses access by another connection to an exclusive queue (RabbitMQ's 405
    /// RESOURCE_LOCKED).
    pub(super) fn check_access(&self, connection: u64, operation: &str) -> Result<()> {
        match self.owner {
            Some(owner) if owner != connection => Err(Error::Precondition {
                operation: format!("{operation} queue `{}`", self.name()),
                reason: format!(
                    "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{}': \
                     it is exclusive to another connection",
                    self.name()
                ),
            }),
            _ => Ok(()),
        }
    }

    pub(super) fn info(&self) -> QueueInfo {
        let state = self.lock();
        QueueInfo {
            name: self.spec.name.clone(),
            message_count: count(state.ready.len()),
            consumer_count: count(state.consumers.len()),
        }
    }

    /// Whether messages in this queue can expire, so that it needs an expiry task.
    pub(super) fn needs_expiry(&self, message_ttl: Option<Duration>) -> bool {
        self.args.message_ttl.is_some() || message_ttl.is_some()
    }

    /// Makes sure a task expires this queue's messages on time, spawning it on the current
    /// runtime when there is none or the runtime that ran it has shut down.
    pub(super) fn ensure_expiry(self: &Arc<Self>, broker: &Arc<Broker>) {
        let mut task = self.expiry.lock().unwrap_or_else(PoisonError::into_inner);
        if task.as_ref().is_some_and(|handle| !handle.is_finished()) {
            return;
        }
        *task = super::expiry::spawn(Arc::downgrade(self), Arc::downgrade(broker));
        self.lock().expiry_deadline = None;
    }

    pub(super) fn expiry_wakeup(&self) -> Arc<Notify> {
        Arc::clone(&self.expiry_wakeup)
    }

    /// Enqueues a message, handing it straight to a consumer with room when there is one.
    /// Returns `false` when the queue refused it (full, with `x-overflow` `reject-publish*`).
    pub(super) fn push(
        &self,
        message: Arc<Message>,
        message_ttl: Option<Duration>,
    ) -> (bool, Effects) {
        let mut fx = Effects::default();
        let mut state = self.lock();
        if state.deleted {
            return (true, fx);
        }
        let full = self
            .args
            .max_length
            .is_some_and(|max| state.ready.len() >= max);
        match self.args.overflow {
            Overflow::RejectPublish if full => return (false, fx),
            Overflow::RejectPublishDlx if full => {
                fx.dead.push((message, Reason::MaxLength));
                return (false, fx);
            }
            _ => {}
        }
        let expires_at = [self.args.message_ttl, message_ttl]
            .into_iter()
            .flatten()
            .min()
            .map(|ttl| Instant::now() + ttl);
        let seq = state.next_seq;
        state.next_seq += 1;
        state.ready.push_back(Entry {
            seq,
            message,
            redelivered: false,
            expires_at,
        });
        if let Some(max) = self.args.max_length {
            while state.ready.len() > max {
                if let Some(dropped) = state.ready.pop_front() {
                    fx.dead.push((dropped.message, Reason::MaxLength));
                }
            }
        }
        // A message that can go to a consumer at once is delivered even with a TTL of zero,
        // as RabbitMQ does.
        state.dispatch(Some(seq), &mut fx);
        state.watch_head(&mut fx);
        (true, fx)
    }

    /// `basic.get`: takes the oldest live message, if any.
    pub(super) fn get(&self, connection: u64) -> (Option<Handout>, Effects) {
        let mut fx = Effects::default();
        let mut state = self.lock();
        let handout = state.pop_live(None, &mut fx).map(|entry| {
            let tag = state.next_tag();
            let handout = Handout {
                tag,
                message: Arc::clone(&entry.message),
                redelivered: entry.redelivered,
            };
            state.unacked.insert(
                tag,
                Unacked {
                    entry,
                    connection,
                    consumer: None,
                },
            );
            handout
        });
        state.watch_head(&mut fx);
        (handout, fx)
    }

    /// Registers a consumer, unless the queue is gone or exclusivity forbids it.
    pub(super) fn add_consumer(
        &self,
        id: u64,
        connection: u64,
        prefetch: u16,
        exclusive: bool,
    ) -> Result<Effects> {
        let mut fx = Effects::default();
        let mut state = self.lock();
        let operation = || format!("consume from queue `{}`", self.name());
        if state.deleted {
            return Err(Error::NotFound {
                kind: "queue",
                name: self.name().to_owned(),
            });
        }
        if state.consumers.iter().any(|slot| slot.exclusive) {
            return Err(access_refused(
                operation(),
                format!("queue '{}' in exclusive use", self.name()),
            ));
        }
        if exclusive && !state.consumers.is_empty() {
            return Err(access_refused(
                operation(),
                format!(
                    "cannot obtain exclusive access to queue '{}': it has consumers",
                    self.name()
                ),
            ));
        }
        state.consumers.push(Slot {
            id,
            connection,
            prefetch: prefetch.into(),
            in_flight: 0,
            exclusive,
            inbox: VecDeque::new(),
            waker: None,
        });
        state.dispatch(None, &mut fx);
        state.watch_head(&mut fx);
        Ok(fx)
    }

    /// Moves a consumer's pending deliveries into `buffer` (which must be empty), or registers
    /// `waker` to be woken when some arrive.
    pub(super) fn take_inbox(
        &self,
        consumer: u64,
        buffer: &mut VecDeque<Handout>,
        waker: &Waker,
    ) -> Inbox {
        let mut state = self.lock();
        if state.deleted {
            return Inbox::Deleted;
        }
        let Some(slot) = state.consumers.iter_mut().find(|slot| slot.id == consumer) else {
            return Inbox::Gone;
        };
        if slot.inbox.is_empty() {
            if !slot.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
                slot.waker = Some(waker.clone());
            }
            Inbox::Empty
        } else {
            std::mem::swap(&mut slot.inbox, buffer);
            Inbox::Filled
        }
    }

    /// Settles one delivery. Returns `false` when the tag is unknown (already settled, or the
    /// queue was deleted or purged of it).
    pub(super) fn settle(&self, tag: u64, how: Settlement) -> (bool, Effects) {
        let mut fx = Effects::default();
        let mut state = self.lock();
        let Some(unacked) = state.unacked.remove(&tag) else {
            return (false, fx);
        };
        if let Some(slot) = unacked
            .consumer
            .and_then(|id| state.consumers.iter_mut().find(|slot| slot.id == id))
        {
            slot.in_flight = slot.in_flight.saturating_sub(1);
        }
        match how {
            Settlement::Ack => {}
            Settlement::Requeue => state.requeue(unacked.entry),
            Settlement::Reject => fx.dead.push((unacked.entry.message, Reason::Rejected)),
        }
        state.dispatch(None, &mut fx);
        state.watch_head(&mut fx);
        (true, fx)
    }

    /// Cancels a consumer. Deliveries it had not yet handed to the application (its inbox and
    /// `undelivered`) are requeued; the ones the application holds stay with the connection.
    pub(super) fn cancel_consumer(&self, consumer: u64, undelivered: VecDeque<Handout>) -> Effects {
        let mut fx = Effects::default();
        let mut state = self.lock();
        let Some(index) = state.consumers.iter().position(|slot| slot.id == consumer) else {
            return fx;
        };
        let slot = state.consumers.remove(index);
        if state.next_consumer > index {
            state.next_consumer -= 1;
        }
        for handout in slot.inbox.into_iter().chain(undelivered) {
            if let Some(unacked) = state.unacked.remove(&handout.tag) {
                state.requeue(unacked.entry);
            }
        }
        fx.unused = self.spec.auto_delete && state.consumers.is_empty();
        state.dispatch(None, &mut fx);
        state.watch_head(&mut fx);
        fx
    }

    /// A connection closed: its consumers end and every delivery it held is requeued.
    pub(super) fn connection_closed(&self, connection: u64) -> Effects {
        let mut fx = Effects::default();
        let mut state = self.lock();
        let before = state.consumers.len();
        let mut index = 0;
        while index < state.consumers.len() {
            if state.consumers[index].connection == connection {
                let slot = state.consumers.remove(index);
                fx.wakers.extend(slot.waker);
            } else {
                index += 1;
            }
        }
        if state.consumers.len() != before {
            state.next_consumer = 0;
            fx.unused = self.spec.auto_delete && state.consumers.is_empty();
        }
        let held: Vec<u64> = state
            .unacked
            .iter()
            .filter(|(_, unacked)| unacked.connection == connection)
            .map(|(tag, _)| *tag)
            .collect();
        for tag in held {
            if let Some(unacked) = state.unacked.remove(&tag) {
                state.requeue(unacked.entry);
            }
        }
        state.dispatch(None, &mut fx);
        state.watch_head(&mut fx);
        fx
    }

    /// Drops every ready message, returning how many.
    pub(super) fn purge(&self) -> u32 {
        let mut state = self.lock();
        let purged = count(state.ready.len());
        state.ready.clear();
        purged
    }

    /// Marks the queue deleted: its messages go, its consumers end. Returns how many ready
    /// messages it held.
    pub(super) fn delete(&self) -> (u32, Effects) {
        let mut fx = Effects::default();
        let mut state = self.lock();
        let held = count(state.ready.len());
        state.deleted = true;
        state.ready.clear();
        state.unacked.clear();
        fx.wakers
            .extend(state.consumers.drain(..).filter_map(|slot| slot.waker));
        fx.wake_expiry = true;
        (held, fx)
    }

    /// Expires the messages at the head whose time has come. Returns the next deadline to
    /// wake up for, or `None` with `true` when the queue is gone.
    pub(super) fn expire_due(&self, now: Instant) -> (Option<Instant>, bool, Effects) {
        let mut fx = Effects::default();
        let mut state = self.lock();
        if state.deleted {
            return (None, true, fx);
        }
        while state
            .ready
            .front()
            .is_some_and(|entry| entry.expires_at.is_some_and(|at| at <= now))
        {
            if let Some(entry) = state.ready.pop_front() {
                fx.dead.push((entry.message, Reason::Expired));
            }
        }
        let next = state.ready.front().and_then(|entry| entry.expires_at);
        state.expiry_deadline = next;
        (next, false, fx)
    }
}

impl State {
    fn next_tag(&mut self) -> u64 {
        self.next_tag += 1;
        self.next_tag
    }

    /// Takes the oldest message that has not expired, collecting expired ones as dead letters.
    /// The message numbered `fresh` is live whatever its TTL: it is being delivered on arrival.
    fn pop_live(&mut self, fresh: Option<u64>, fx: &mut Effects) -> Option<Entry> {
        while let Some(entry) = self.ready.pop_front() {
            // The clock is read only for messages that can expire: most never do.
            let expired =
                Some(entry.seq) != fresh && entry.expires_at.is_some_and(|at| at <= Instant::now());
            if !expired {
                return Some(entry);
            }
            fx.dead.push((entry.message, Reason::Expired));
        }
        None
    }

    /// Hands ready messages to consumers with room in their prefetch window, round robin.
    fn dispatch(&mut self, fresh: Option<u64>, fx: &mut Effects) {
        while !self.ready.is_empty() {
            let n = self.consumers.len();
            let Some(index) = (0..n)
                .map(|offset| (self.next_consumer + offset) % n)
                .find(|&index| self.consumers[index].has_credit())
            else {
                return;
            };
            let Some(entry) = self.pop_live(fresh, fx) else {
                return;
            };
            self.next_consumer = (index + 1) % n;
            let tag = self.next_tag();
            let slot = &mut self.consumers[index];
            slot.in_flight = slot.in_flight.saturating_add(1);
            slot.inbox.push_back(Handout {
                tag,
                message: Arc::clone(&entry.message),
                redelivered: entry.redelivered,
            });
            fx.wakers.extend(slot.waker.take());
            let (connection, consumer) = (slot.connection, slot.id);
            self.unacked.insert(
                tag,
                Unacked {
                    entry,
                    connection,
                    consumer: Some(consumer),
                },
            );
        }
    }

    /// Puts a message back at its original position, keeping its original expiry as RabbitMQ
    /// does.
    fn requeue(&mut self, mut entry: Entry) {
        entry.redelivered = true;
        let position = self.ready.partition_point(|queued| queued.seq < entry.seq);
        self.ready.insert(position, entry);
    }

    /// Wakes the expiry task when the head now expires earlier than it is sleeping for.
    fn watch_head(&mut self, fx: &mut Effects) {
        let Some(at) = self.ready.front().and_then(|entry| entry.expires_at) else {
            return;
        };
        if self.expiry_deadline.is_none_or(|deadline| at < deadline) {
            self.expiry_deadline = Some(at);
            fx.wake_expiry = true;
        }
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
