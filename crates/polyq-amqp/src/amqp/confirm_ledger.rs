//! Attributes the broker's answers to the publishes of one confirm-mode channel.
//!
//! # Why a ledger
//!
//! AMQP 0-9-1 `basic.return` carries no delivery tag, so lapin cannot know which publish a
//! return belongs to: it queues every return FIFO and hands the head of that queue to whichever
//! confirm it completes next (and completes the tags of a `multiple` ack in hash order). With
//! several publishes awaiting confirms, a confirm may therefore carry another publish's return,
//! and a publish's own return may ride on a later completion. Trusting what a confirm carries
//! reports unroutable messages as acked and routable ones as returned.
//!
//! # How answers are attributed
//!
//! A returned message carries its exchange, routing key, properties and body, so every return
//! that surfaces in any completion goes to a pool and is matched by content to the
//! lowest-sequence outstanding mandatory publish that has no return yet (identical messages are
//! indistinguishable, so any of them is a correct owner). A publish is only decided when no
//! return still hidden inside lapin can be its own.
//!
//! # Why the decisions are safe
//!
//! Facts relied on: frames of a channel are processed in order; the broker sends the return of a
//! message before that message's ack; lapin resolves a confirm (pops its return queue and stores
//! the answer) synchronously in its io loop before it handles the next frame, and only then
//! wakes the waiter; a publish's confirm cannot complete before its publish started.
//!
//! Every publish takes a sequence number from `started` *before* `basic_publish`, and registers
//! its confirm after (or a tombstone, when it never got one). A round (a) reads `N = started`,
//! (b) drains registrations, (c) drains every ready confirm, (d) matches the pool and (e)
//! decides. The round *covers* the moment (a) when every sequence below `N` is registered after
//! (b): a confirm that completed before (a) belongs to a publish that started before (a), so it
//! is registered and, being complete, is observed in (c).
//!
//! - A failure (the channel closed) or a nack is final as soon as it is observed; a publish
//!   whose own confirm completed and that has a matched return is returned.
//! - An ack that carried *no* return found lapin's queue empty when it completed, so its own
//!   return (sent before its ack) had already been handed to an earlier completion. That
//!   earlier completion happened before any round starting after the ack was observed, so a
//!   covering round that starts later has pooled it: the ack is decided there.
//! - An ack that carried *another* publish's return may still have its own return queued in
//!   lapin. It is decided once a publish Z that started after it was observed (sequence at
//!   least the `N` of the next round) completed carrying no return, and a covering round ran
//!   after Z was observed: Z found the queue empty after our return was queued, so our return
//!   was popped by an earlier completion, observed by that round. It is also decided at a
//!   quiescent round (every started publish registered and completed): lapin's queue never
//!   holds more returns than returned publishes still awaiting their ack, so it is then empty
//!   and every return is in the pool.
//! - Identical messages can take each other's returns. A publish answered as returned with a
//!   return its own ack did not follow (the ack carried another's) may hold an identical
//!   publish's return while its own is still inside lapin: that return is *owed*, and an
//!   identical publish holding none is not decided acked until the owed return has surfaced,
//!   by the argument of the previous rule, or at a quiescent round.
//! - Once the channel failed, lapin fails the pending confirms without popping its queue, so
//!   the quiescent argument no longer holds: acks still undecided when everything has completed
//!   are reported unconfirmed (the caller publishes again: a duplicate, never a loss).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use futures_util::task::AtomicWaker;
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::message::{OutgoingMessage, PublishOutcome, ReturnedMessage};

#[cfg(test)]
mod model;

/// Rounds run back to back before the tracker yields to the runtime.
const ROUNDS_PER_POLL: usize = 4;

/// What one confirm completed with, as lapin reported it (a carried return may be another
/// publish's).
#[derive(Debug)]
pub(super) enum Answer {
    /// The broker acked, possibly handing over a return.
    Ack(Option<ReturnedMessage>),
    /// The broker nacked, possibly handing over a return.
    Nack(Option<ReturnedMessage>),
    /// No answer will come.
    Failed(Failure),
}

/// Why a confirm failed. The client library's error is kept to become the source of ours; one
/// failure may answer several publishes, hence `Clone`.
#[derive(Debug, Clone)]
pub(super) enum Failure {
    /// The broker closed the channel or connection with this reply.
    Refused {
        code: u16,
        text: String,
        error: lapin::Error,
    },
    /// The channel or connection was lost.
    Lost(lapin::Error),
    /// The channel was not in confirm mode.
    NotConfirming,
    /// The channel or connection went down before the publish's frames were all written: the
    /// broker discards such a message, so it can be sent again.
    Unwritten(lapin::Error),
}

impl Failure {
    /// Whether the publish was lost with its channel or connection rather than refused for its
    /// own sake: the broker went away (or was shutting down, 320 CONNECTION_FORCED), so the
    /// same message may be sent again on the next connection.
    fn is_loss(&self) -> bool {
        match self {
            Failure::Lost(_) | Failure::Unwritten(_) => true,
            Failure::Refused { code, .. } => *code == CONNECTION_FORCED || *code == INTERNAL_ERROR,
            Failure::NotConfirming => false,
        }
    }

    /// Publishing to a missing exchange closes the channel with 404; other publishes pending
    /// on that channel see the same error but were not at fault.
    fn into_error(self, exchange: &str) -> Error {
        match self {
            Failure::Refused {
                code: 404, text, ..
            } if text.contains(&format!("no exchange '{exchange}'")) => Error::NotFound {
                kind: "exchange",
                name: exchange.to_owned(),
            },
            Failure::Refused { error, .. } => {
                unconfirmed(exchange, "the broker closed the channel", error)
            }
            Failure::Lost(error) => {
                unconfirmed(exchange, "the channel or connection was lost", error)
            }
            Failure::Unwritten(error) => unwritten(exchange, error),
            Failure::NotConfirming => Error::Protocol {
                operation: "publish".to_owned(),
                reason: "the publishing channel is not in confirm mode (a polyq-amqp bug)"
                    .to_owned(),
            },
        }
    }
}

fn unconfirmed(exchange: &str, reason: &str, error: lapin::Error) -> Error {
    Error::Unconfirmed {
        exchange: exchange.to_owned(),
        reason: reason.to_owned(),
        source: Some(Box::new(error)),
    }
}

/// The error of a publish whose frames never all reached the broker.
pub(super) fn unwritten(exchange: &str, error: lapin::Error) -> Error {
    unconfirmed(
        exchange,
        "the channel or connection went down before the message was written",
        error,
    )
}

/// AMQP reply codes of a connection the broker closes while going away: the publishes it did
/// not confirm were not refused, only lost.
const CONNECTION_FORCED: u16 = 320;
const INTERNAL_ERROR: u16 = 541;

/// What a publish's caller is told.
#[derive(Debug)]
pub(super) enum Settled {
    Outcome(Result<PublishOutcome>),
    /// The broker's answer was lost with the channel or connection (`error` says how); here is
    /// the message back, for a publisher that sends such messages again.
    Lost {
        message: OutgoingMessage,
        error: Error,
    },
    /// Its frames were never all written ([`Failure::Unwritten`]); here is the message back.
    Unwritten {
        message: OutgoingMessage,
        error: lapin::Error,
    },
}

/// Where a caller's outcome is delivered.
pub(super) type Answered = oneshot::Receiver<Settled>;

struct Registration<F> {
    seq: u64,
    /// `None` when the publish never got a confirm (it failed or was cancelled).
    sent: Option<Sent<F>>,
}

struct Sent<F> {
    confirm: F,
    message: OutgoingMessage,
    answer: oneshot::Sender<Settled>,
}

/// The publishing side of a channel's ledger. Once it is dropped, the tracker knows that
/// nothing more will register.
pub(super) struct LedgerHandle<F> {
    inbox: Arc<Inbox<F>>,
    tracker: SharedTracker<F>,
}

/// The tracker's state, driven by its task and, when the task would only be woken to run a
/// round, by the publish that registers.
type SharedTracker<F> = Arc<Mutex<Option<Tracker<F>>>>;

/// Where publishes register with the tracker. A registration wakes the tracker only when it
/// said that nothing else would (while confirms are pending, their completions wake it and it
/// drains the registrations then), so a busy channel costs no wake per publish.
struct Inbox<F> {
    started: AtomicU64,
    /// `None` once the tracker is gone.
    registrations: Mutex<Option<Vec<Registration<F>>>>,
    idle: AtomicBool,
    closed: AtomicBool,
    waker: AtomicWaker,
}

impl<F> Inbox<F> {
    /// Queues `registration`; `true` when the tracker waits for it to run a round.
    fn register(&self, registration: Registration<F>) -> bool {
        let refused = {
            let mut registrations = self
                .registrations
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match registrations.as_mut() {
                Some(queue) => {
                    queue.push(registration);
                    None
                }
                None => Some(registration),
            }
        };
        match refused {
            Some(Registration {
                sent: Some(sent), ..
            }) => {
                let _ = sent.answer.send(unattributed(sent.message));
                false
            }
            Some(_) => false,
            None => self.idle.swap(false, Ordering::SeqCst),
        }
    }

    fn take(&self) -> Vec<Registration<F>> {
        self.registrations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn is_empty(&self) -> bool {
        self.registrations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_none_or(Vec::is_empty)
    }
}

impl<F> Drop for LedgerHandle<F> {
    fn drop(&mut self) {
        self.inbox.closed.store(true, Ordering::SeqCst);
        self.inbox.waker.wake();
    }
}

impl<F> LedgerHandle<F>
where
    F: Future<Output = Answer> + Unpin,
{
    /// Takes the next sequence number; call it before the publish is sent.
    pub(super) fn begin(&self) -> Publishing<'_, F> {
        Publishing {
            handle: self,
            seq: self.inbox.started.fetch_add(1, Ordering::SeqCst),
            registered: false,
        }
    }

    fn register(&self, registration: Registration<F>) {
        if self.inbox.register(registration) {
            self.drive_or_wake();
        }
    }

    /// Runs the tracker's rounds here when nothing else is running them. The tracker waits for
    /// a registration when its last round could not cover (a publish was between taking its
    /// sequence and registering); a task publishing in a pipeline is almost always in that gap
    /// when the tracker runs, so waking the tracker instead would cost a task switch per
    /// publish, and its round would find the next publish in the gap again.
    fn drive_or_wake(&self) {
        if let Ok(mut tracker) = self.tracker.try_lock()
            && let Some(tracker) = tracker.as_mut()
            && let Some(waker) = tracker.task_waker.clone()
        {
            // Cannot finish while this handle exists; the confirms keep waking the task.
            let _ = tracker.drive(&mut Context::from_waker(&waker));
            return;
        }
        self.inbox.waker.wake();
    }
}

/// A publish between taking its sequence number and registering its confirm. Dropped without
/// [`Publishing::sent`], it registers a tombstone so that later rounds can still cover.
pub(super) struct Publishing<'a, F>
where
    F: Future<Output = Answer> + Unpin,
{
    handle: &'a LedgerHandle<F>,
    seq: u64,
    registered: bool,
}

impl<F> Publishing<'_, F>
where
    F: Future<Output = Answer> + Unpin,
{
    /// Hands the confirm of the sent `message` to the tracker.
    pub(super) fn sent(mut self, confirm: F, message: OutgoingMessage) -> Answered {
        self.registered = true;
        let (answer, answered) = oneshot::channel();
        self.handle.register(Registration {
            seq: self.seq,
            sent: Some(Sent {
                confirm,
                message,
                answer,
            }),
        });
        answered
    }
}

impl<F> Drop for Publishing<'_, F>
where
    F: Future<Output = Answer> + Unpin,
{
    fn drop(&mut self) {
        if !self.registered {
            self.handle.register(Registration {
                seq: self.seq,
                sent: None,
            });
        }
    }
}

/// The answer of a publish whose confirm or return could not be told apart before the channel
/// closed: it may have been routed, so sending it again can only duplicate it.
fn unattributed(message: OutgoingMessage) -> Settled {
    Settled::Lost {
        error: Error::Unconfirmed {
            exchange: message.exchange.clone(),
            reason: "the broker's answer could not be attributed before the channel closed"
                .to_owned(),
            source: None,
        },
        message,
    }
}

/// A ledger and the tracker task that drives it; spawn the task once per channel. It ends when
/// the handle is gone and every registered publish has been answered.
pub(super) fn ledger<F>() -> (LedgerHandle<F>, TrackerTask<F>)
where
    F: Future<Output = Answer> + Unpin,
{
    let inbox = Arc::new(Inbox {
        started: AtomicU64::new(0),
        registrations: Mutex::new(Some(Vec::new())),
        idle: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        waker: AtomicWaker::new(),
    });
    let tracker = Arc::new(Mutex::new(Some(Tracker {
        inbox: inbox.clone(),
        task_waker: None,
        closed: false,
        last_covering: false,
        confirms: FuturesUnordered::new(),
        entries: BTreeMap::new(),
        watermark: 0,
        registered_early: BinaryHeap::new(),
        completed: BTreeSet::new(),
        refused: Vec::new(),
        returned_ready: Vec::new(),
        unstamped: Vec::new(),
        pool: Vec::new(),
        owed: Vec::new(),
        holding: BTreeSet::new(),
        round: 0,
        clean_max: None,
        failed: false,
        detector: None,
    })));
    (
        LedgerHandle {
            inbox,
            tracker: tracker.clone(),
        },
        TrackerTask { tracker },
    )
}

/// Drives the tracker; dropped before it finished (the runtime shutting down), it answers
/// every publish still waiting as not attributable.
pub(super) struct TrackerTask<F> {
    tracker: SharedTracker<F>,
}

impl<F> Future for TrackerTask<F>
where
    F: Future<Output = Answer> + Unpin,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut shared = self.tracker.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tracker) = shared.as_mut() else {
            return Poll::Ready(());
        };
        if !tracker
            .task_waker
            .as_ref()
            .is_some_and(|waker| waker.will_wake(cx.waker()))
        {
            tracker.task_waker = Some(cx.waker().clone());
        }
        let polled = tracker.drive(cx);
        if polled.is_ready() {
            *shared = None;
        }
        polled
    }
}

impl<F> Drop for TrackerTask<F> {
    fn drop(&mut self) {
        let tracker = self
            .tracker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(tracker);
    }
}

struct Entry {
    message: OutgoingMessage,
    answer: oneshot::Sender<Settled>,
    returned: Option<ReturnedMessage>,
    done: Option<Done>,
}

struct Done {
    round: u64,
    kind: DoneKind,
    /// `N` of the first round that started after this completion was observed.
    next_started: Option<u64>,
}

enum DoneKind {
    /// Acked, and lapin's return queue was empty at completion.
    CleanAck,
    /// Acked, with a return lapin handed over (perhaps another publish's).
    CarryingAck,
    Nack,
    Failed(Failure),
}

/// Owns every confirm of one channel and answers each publish once its outcome is certain.
pub(super) struct Tracker<F> {
    inbox: Arc<Inbox<F>>,
    /// The task's waker: rounds run by a registering publish leave it with the confirms.
    task_waker: Option<Waker>,
    /// Every handle is gone: nothing new will register.
    closed: bool,
    /// Whether the last round covered its start.
    last_covering: bool,
    confirms: FuturesUnordered<Tagged<F>>,
    /// Boxed: entries are large, and a B-tree shifts its values on every insert and removal.
    entries: BTreeMap<u64, Box<Entry>>,
    /// Every sequence below it is registered.
    watermark: u64,
    registered_early: BinaryHeap<Reverse<u64>>,
    /// Completed, not yet answered.
    completed: BTreeSet<u64>,
    /// Completed nacks and failures, answered in the round that observes them.
    refused: Vec<u64>,
    /// Completed and holding a matched return: answerable without a covering round.
    returned_ready: Vec<u64>,
    /// Observed in the previous round; their `next_started` is the next round's `N`.
    unstamped: Vec<u64>,
    /// Returns not yet matched to a publish.
    pool: Vec<ReturnedMessage>,
    /// Returns still to come for publishes answered as returned with a return that may have been
    /// an identical publish's: until it has surfaced, an identical publish holding no return may
    /// be the one it belongs to.
    owed: Vec<Owed>,
    /// Publishes holding a matched return whose own confirm has not completed yet.
    holding: BTreeSet<u64>,
    round: u64,
    /// Highest sequence that completed carrying no return, observed in an earlier round.
    clean_max: Option<u64>,
    /// A confirm failed: the channel is gone and lapin's queue may keep returns forever.
    failed: bool,
    /// Reused while the task's waker stays the same.
    detector: Option<(Arc<WakeDetector>, Waker)>,
}

impl<F> Tracker<F>
where
    F: Future<Output = Answer> + Unpin,
{
    /// Runs rounds until nothing is left to decide without a wake.
    fn drive(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.inbox.waker.register(cx.waker());
        for _ in 0..ROUNDS_PER_POLL {
            match self.run_round(cx) {
                After::Finished => return Poll::Ready(()),
                After::Wait if self.needs_registration_wake() => {
                    // Said before looking again, so that a registration pushed in between
                    // either is seen here or wakes the task.
                    self.inbox.idle.store(true, Ordering::SeqCst);
                    if self.inbox.is_empty() && !self.inbox.closed.load(Ordering::SeqCst) {
                        return Poll::Pending;
                    }
                    self.inbox.idle.store(false, Ordering::SeqCst);
                }
                After::Wait => return Poll::Pending,
                After::Again => {}
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

enum After {
    Finished,
    Wait,
    /// Completions observed in this round become decidable at the next covering round.
    Again,
}

impl<F> Tracker<F>
where
    F: Future<Output = Answer> + Unpin,
{
    /// No pending confirm will wake the tracker, or an answer waits for a round that covers,
    /// which only a registration can bring.
    fn needs_registration_wake(&self) -> bool {
        !self.closed
            && (self.confirms.is_empty() || (!self.last_covering && !self.completed.is_empty()))
    }

    fn run_round(&mut self, cx: &mut Context<'_>) -> After {
        self.round += 1;
        let started = self.inbox.started.load(Ordering::SeqCst);
        for seq in self.unstamped.drain(..) {
            if let Some(done) = self.entries.get_mut(&seq).and_then(|e| e.done.as_mut()) {
                done.next_started = Some(started);
            }
        }
        for owed in &mut self.owed {
            owed.next_started.get_or_insert(started);
        }
        self.drain_registrations();
        let covering = self.watermark >= started;
        self.last_covering = covering;
        let (observed, clean_max) = self.drain_confirms(cx);
        self.match_pool();
        self.decide_refusals();
        let quiescent = covering
            && self.confirms.is_empty()
            && self.watermark == self.inbox.started.load(Ordering::SeqCst);
        self.decide_acks(covering, quiescent);
        if quiescent && !self.failed {
            // Lapin's queue is empty and every started publish had its chance to match: what is
            // left belongs to publishes abandoned after sending, and must not match later ones.
            self.pool.clear();
            self.owed.clear();
        }
        self.clean_max = self.clean_max.max(clean_max);
        if self.closed && self.entries.is_empty() && self.confirms.is_empty() {
            After::Finished
        } else if observed && !self.completed.is_empty() {
            After::Again
        } else {
            After::Wait
        }
    }

    fn drain_registrations(&mut self) {
        // Read before draining: a registration that preceded the handle's drop is then taken.
        let closed = self.inbox.closed.load(Ordering::SeqCst);
        for registration in self.inbox.take() {
            self.register(registration);
        }
        self.closed = closed;
    }

    fn register(&mut self, Registration { seq, sent }: Registration<F>) {
        if let Some(Sent {
            confirm,
            message,
            answer,
        }) = sent
        {
            self.confirms.push(Tagged { seq, confirm });
            self.entries.insert(
                seq,
                Box::new(Entry {
                    message,
                    answer,
                    returned: None,
                    done: None,
                }),
            );
        }
        if seq == self.watermark {
            self.watermark += 1;
            while self.registered_early.peek() == Some(&Reverse(self.watermark)) {
                self.registered_early.pop();
                self.watermark += 1;
            }
        } else {
            self.registered_early.push(Reverse(seq));
        }
    }

    /// Observes every confirm that is ready. `FuturesUnordered` yields (returns `Pending` after
    /// waking the task) while futures may still be ready; that self-wake is detected and the
    /// draining goes on, so that the round really has seen every completed confirm.
    fn drain_confirms(&mut self, cx: &mut Context<'_>) -> (bool, Option<u64>) {
        let (detector, waker) = match self.detector.take() {
            Some((detector, waker)) if detector.inner.will_wake(cx.waker()) => (detector, waker),
            _ => {
                let detector = Arc::new(WakeDetector {
                    woken: AtomicBool::new(false),
                    inner: cx.waker().clone(),
                });
                let waker = Waker::from(detector.clone());
                (detector, waker)
            }
        };
        let mut detecting = Context::from_waker(&waker);
        let (mut observed, mut clean_max) = (false, None);
        loop {
            match self.confirms.poll_next_unpin(&mut detecting) {
                Poll::Ready(Some((seq, answer))) => {
                    observed = true;
                    if self.observe(seq, answer) {
                        clean_max = clean_max.max(Some(seq));
                    }
                }
                Poll::Ready(None) => break,
                Poll::Pending if detector.woken.swap(false, Ordering::SeqCst) => {}
                Poll::Pending => break,
            }
        }
        self.detector = Some((detector, waker));
        (observed, clean_max)
    }

    /// Records a completion; `true` when it carried no return and popped lapin's queue.
    fn observe(&mut self, seq: u64, answer: Answer) -> bool {
        let (kind, carried) = match answer {
            Answer::Ack(None) => (DoneKind::CleanAck, None),
            Answer::Ack(Some(returned)) => (DoneKind::CarryingAck, Some(returned)),
            Answer::Nack(returned) => (DoneKind::Nack, returned),
            Answer::Failed(failure) => {
                self.failed = true;
                (DoneKind::Failed(failure), None)
            }
        };
        let clean = carried.is_none() && !matches!(kind, DoneKind::Failed(_));
        self.pool.extend(carried);
        if let Some(entry) = self.entries.get_mut(&seq) {
            if matches!(kind, DoneKind::Nack | DoneKind::Failed(_)) {
                self.refused.push(seq);
            } else if entry.returned.is_some() {
                self.returned_ready.push(seq);
            }
            entry.done = Some(Done {
                round: self.round,
                kind,
                next_started: None,
            });
            self.completed.insert(seq);
            self.unstamped.push(seq);
            self.holding.remove(&seq);
        }
        clean
    }

    fn match_pool(&mut self) {
        for returned in std::mem::take(&mut self.pool) {
            match self.owner_of(&returned) {
                Some(seq) => {
                    if let Some(entry) = self.entries.get_mut(&seq) {
                        entry.returned = Some(returned);
                        if entry.done.is_none() {
                            self.holding.insert(seq);
                        } else {
                            self.returned_ready.push(seq);
                        }
                    }
                }
                None => self.pool.push(returned),
            }
        }
    }

    /// The lowest-sequence candidate sent with the same content, preferring one whose
    /// properties also survived the round trip unchanged.
    fn owner_of(&self, returned: &ReturnedMessage) -> Option<u64> {
        let mut same_content = None;
        for (seq, entry) in &self.entries {
            if entry.returned.is_some() || !entry.could_be(returned) {
                continue;
            }
            if entry.message.properties == returned.properties {
                return Some(*seq);
            }
            same_content.get_or_insert(*seq);
        }
        same_content
    }

    /// Nacks and failures are final. A return matched to one goes back to the pool: only an
    /// ack consumes a return, so an identical publish still waiting for its own can have it.
    fn decide_refusals(&mut self) {
        if self.refused.is_empty() {
            return;
        }
        for seq in std::mem::take(&mut self.refused) {
            self.completed.remove(&seq);
            self.holding.remove(&seq);
            if let Some(mut entry) = self.entries.remove(&seq) {
                self.pool.extend(entry.returned.take());
                entry.answer(true);
            }
        }
        self.match_pool();
    }

    /// Between covering rounds only acks holding their return can be answered, so only those
    /// are looked at: the others wait without costing anything per round.
    fn decide_acks(&mut self, covering: bool, quiescent: bool) {
        if !covering {
            for seq in std::mem::take(&mut self.returned_ready) {
                let holds_return = self
                    .entries
                    .get(&seq)
                    .is_some_and(|entry| entry.done.is_some() && entry.returned.is_some());
                if holds_return {
                    self.completed.remove(&seq);
                    self.settle(seq, true);
                }
            }
            return;
        }
        self.returned_ready.clear();
        let clean_max = self.clean_max;
        self.owed
            .retain(|owed| match (owed.next_started, clean_max) {
                (Some(next), Some(clean)) => clean < next,
                _ => true,
            });
        // Publishes holding a return go first: settling one can leave a return owed to an
        // identical publish, which must hold back that publish's ack in this same round.
        let (holding_return, others): (Vec<u64>, Vec<u64>) = std::mem::take(&mut self.completed)
            .into_iter()
            .partition(|seq| {
                self.entries
                    .get(seq)
                    .is_some_and(|entry| entry.returned.is_some())
            });
        for seq in holding_return.into_iter().chain(others) {
            let attributed = match self.entries.get(&seq) {
                Some(entry) => self.ack_attribution(entry, covering, quiescent),
                None => continue,
            };
            let Some(attributed) = attributed else {
                self.completed.insert(seq);
                continue;
            };
            self.take_identical_return(seq);
            self.settle(seq, attributed);
        }
    }

    /// Answers `seq`. A publish returned on the strength of a return its own ack did not precede
    /// (it carried another's) may hold an identical publish's return while its own is still
    /// inside lapin: that one is owed to whichever identical publish holds none.
    fn settle(&mut self, seq: u64, attributed: bool) {
        let Some(entry) = self.entries.remove(&seq) else {
            return;
        };
        if let (
            Some(returned),
            Some(Done {
                kind: DoneKind::CarryingAck,
                ..
            }),
        ) = (&entry.returned, &entry.done)
        {
            self.owed.push(Owed {
                content: returned.clone(),
                next_started: entry.done.as_ref().and_then(|done| done.next_started),
            });
        }
        entry.answer(attributed);
    }

    /// Whether an identical publish was returned with a return that may be this one's.
    fn owes(&self, entry: &Entry) -> bool {
        self.owed.iter().any(|owed| entry.could_be(&owed.content))
    }

    /// Identical messages share one fate, so a return matched to an identical publish that has
    /// not completed yet is as much this one's: it moves here, and the other publish's own
    /// return is still to come. Without this, that other publish would keep the only pooled
    /// return while this one is acked.
    fn take_identical_return(&mut self, seq: u64) {
        let Some(acked) = self.entries.get(&seq) else {
            return;
        };
        if acked.returned.is_some() {
            return;
        }
        let donor = self.holding.iter().copied().find(|other| {
            self.entries.get(other).is_some_and(|entry| {
                entry
                    .returned
                    .as_ref()
                    .is_some_and(|returned| acked.could_be(returned))
            })
        });
        let Some(donor) = donor else { return };
        self.holding.remove(&donor);
        let returned = self.entries.get_mut(&donor).and_then(|e| e.returned.take());
        if let Some(entry) = self.entries.get_mut(&seq) {
            entry.returned = returned;
        }
    }

    /// `None` while a return hidden inside lapin could still be this acked publish's; then
    /// whether the outcome is known (`false`: the channel failed before it could be).
    fn ack_attribution(&self, entry: &Entry, covering: bool, quiescent: bool) -> Option<bool> {
        let done = entry.done.as_ref()?;
        if entry.returned.is_some() {
            return Some(true);
        }
        match done.kind {
            DoneKind::CleanAck => {
                let owes = self.owes(entry);
                if covering && done.round < self.round && !owes {
                    Some(true)
                } else {
                    // Quiescent, every return has surfaced unless the channel failed: then one
                    // owed to an identical publish may stay inside lapin for good.
                    quiescent.then_some(!(self.failed && owes))
                }
            }
            DoneKind::CarryingAck => {
                let later_clean = match (done.next_started, self.clean_max) {
                    (Some(next), Some(clean)) => clean >= next,
                    _ => false,
                };
                if covering && later_clean && !self.owes(entry) {
                    Some(true)
                } else {
                    quiescent.then_some(!self.failed)
                }
            }
            DoneKind::Nack | DoneKind::Failed(_) => Some(true),
        }
    }
}

/// A return still to come for a publish answered as returned with a return that may not be its
/// own. It has surfaced once a publish observed later completed carrying no return (lapin's
/// queue was empty then), exactly as for an ack that carried another's return.
struct Owed {
    content: ReturnedMessage,
    /// `N` of the first round that started after the publish's completion was observed.
    next_started: Option<u64>,
}

impl Entry {
    /// Whether `returned` has this publish's content (properties aside: the broker may encode
    /// them differently on the way back).
    fn could_be(&self, returned: &ReturnedMessage) -> bool {
        let sent = &self.message;
        sent.mandatory
            && sent.body == returned.body
            && sent.routing_key == returned.routing_key
            && sent.exchange == returned.exchange
    }

    /// Answers the caller. An ack is `attributed` unless the channel failed before it was
    /// certain that no return hidden inside lapin is its own.
    fn answer(self, attributed: bool) {
        let Entry {
            message,
            answer,
            returned,
            done,
        } = self;
        let settled = match (done.map(|done| done.kind), returned) {
            (Some(DoneKind::Failed(Failure::Unwritten(error))), _) => {
                Settled::Unwritten { message, error }
            }
            (Some(DoneKind::Failed(failure)), _) if failure.is_loss() => Settled::Lost {
                error: failure.into_error(&message.exchange),
                message,
            },
            (Some(DoneKind::Failed(failure)), _) => {
                Settled::Outcome(Err(failure.into_error(&message.exchange)))
            }
            (Some(DoneKind::Nack), _) => Settled::Outcome(Ok(PublishOutcome::Nacked)),
            (Some(_), Some(returned)) => Settled::Outcome(Ok(PublishOutcome::Returned(returned))),
            (Some(_), None) if attributed => Settled::Outcome(Ok(PublishOutcome::Acked)),
            _ => unattributed(message),
        };
        let _ = answer.send(settled);
    }
}

impl<F> Drop for Tracker<F> {
    fn drop(&mut self) {
        let late = self
            .inbox
            .registrations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        for sent in late.into_iter().flatten().filter_map(|r| r.sent) {
            let _ = sent.answer.send(unattributed(sent.message));
        }
        for entry in std::mem::take(&mut self.entries).into_values() {
            let _ = entry.answer.send(unattributed(entry.message));
        }
    }
}

struct Tagged<F> {
    seq: u64,
    confirm: F,
}

impl<F> Future for Tagged<F>
where
    F: Future<Output = Answer> + Unpin,
{
    type Output = (u64, Answer);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let seq = self.seq;
        Pin::new(&mut self.confirm)
            .poll(cx)
            .map(|answer| (seq, answer))
    }
}

/// Forwards wakes to the task and remembers that one happened.
struct WakeDetector {
    woken: AtomicBool,
    inner: Waker,
}

impl Wake for WakeDetector {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        self.inner.wake_by_ref();
    }
}
