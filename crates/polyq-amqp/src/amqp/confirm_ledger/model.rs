//! The ledger driven by a model of lapin and the broker: lapin's FIFO return queue popped by
//! every completion, `multiple` acks completing their tags in arbitrary order, each return sent
//! before its own ack, and publishes, broker, io loop and tracker rounds interleaved at random.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::pin::Pin;
use std::task::{Context, Waker};

use futures_util::FutureExt;
use futures_util::future::Map;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::sync::oneshot;

use super::{Answer, Answered, Failure, LedgerHandle, Publishing, Settled, TrackerTask, ledger};
use crate::Properties;
use crate::error::Error;
use crate::message::{OutgoingMessage, PublishOutcome, ReturnedMessage};

type FakeConfirm = Map<
    oneshot::Receiver<Answer>,
    fn(std::result::Result<Answer, oneshot::error::RecvError>) -> Answer,
>;

fn lost(received: std::result::Result<Answer, oneshot::error::RecvError>) -> Answer {
    received
        .unwrap_or_else(|_| Answer::Failed(Failure::Lost(std::io::Error::other("dropped").into())))
}

/// Content decides routability, so identical messages share their truth.
fn message(id: u8) -> OutgoingMessage {
    let routing_key = if unroutable(id) { "nowhere" } else { "orders" };
    let properties = Properties {
        message_id: Some(id.to_string()),
        ..Properties::default()
    };
    OutgoingMessage::new("shop", routing_key, properties, format!("message {id}"))
}

fn unroutable(id: u8) -> bool {
    id % 2 == 1
}

fn returned(message: &OutgoingMessage) -> ReturnedMessage {
    ReturnedMessage {
        reply_code: 312,
        reply_text: "NO_ROUTE".to_owned(),
        exchange: message.exchange.clone(),
        routing_key: message.routing_key.clone(),
        properties: message.properties.clone(),
        body: message.body.clone(),
    }
}

enum Frame {
    /// The return of the message with this id.
    Return(u8),
    Ack {
        tag: u64,
        multiple: bool,
    },
    ChannelClosed,
}

enum Publisher<'a> {
    Begun(usize, Publishing<'a, FakeConfirm>),
    Sent(usize, Publishing<'a, FakeConfirm>, FakeConfirm),
}

struct Model<'a> {
    rng: StdRng,
    ids: Vec<u8>,
    handle: &'a LedgerHandle<FakeConfirm>,
    tracker: TrackerTask<FakeConfirm>,
    next: usize,
    publishers: Vec<Publisher<'a>>,
    answered: Vec<(usize, Answered)>,
    /// Published, not yet routed by the broker.
    inbox: VecDeque<(u64, usize)>,
    /// Routed, not yet acked.
    unacked: BTreeSet<u64>,
    frames: VecDeque<Frame>,
    next_tag: u64,
    pending: BTreeMap<u64, oneshot::Sender<Answer>>,
    returns: VecDeque<ReturnedMessage>,
    close_after: Option<usize>,
    steps: usize,
    closed: bool,
}

impl<'a> Model<'a> {
    fn publishing_done(&self) -> bool {
        self.next == self.ids.len() && self.publishers.is_empty()
    }

    fn broker_done(&self) -> bool {
        self.inbox.is_empty() && self.unacked.is_empty() && self.frames.is_empty()
    }

    fn step(&mut self) {
        self.steps += 1;
        if !self.closed && self.close_after == Some(self.steps) {
            self.frames.push_back(Frame::ChannelClosed);
        }
        match self.rng.random_range(0..7) {
            0 if self.next < self.ids.len() => {
                let pending = self.handle.begin();
                self.publishers.push(Publisher::Begun(self.next, pending));
                self.next += 1;
            }
            1 if !self.publishers.is_empty() => {
                let at = self.rng.random_range(0..self.publishers.len());
                let publisher = self.publishers.swap_remove(at);
                self.advance(publisher);
            }
            2 if !self.closed && !self.inbox.is_empty() => {
                let (tag, index) = self.inbox.pop_front().expect("not empty");
                if unroutable(self.ids[index]) {
                    self.frames.push_back(Frame::Return(self.ids[index]));
                }
                self.unacked.insert(tag);
            }
            3 | 4 if !self.closed && !self.unacked.is_empty() => {
                let tags: Vec<u64> = self.unacked.iter().copied().collect();
                let tag = tags[self.rng.random_range(0..tags.len())];
                // A cumulative ack only covers routed messages.
                let multiple = self.rng.random_bool(0.5)
                    && self.inbox.front().is_none_or(|(first, _)| *first > tag);
                if multiple {
                    self.unacked.retain(|t| *t > tag);
                } else {
                    self.unacked.remove(&tag);
                }
                self.frames.push_back(Frame::Ack { tag, multiple });
            }
            5 if !self.frames.is_empty() => {
                let frame = self.frames.pop_front().expect("not empty");
                self.io_loop(frame);
            }
            _ => self.round(),
        }
    }

    fn advance(&mut self, publisher: Publisher<'a>) {
        match publisher {
            Publisher::Begun(index, pending) => {
                // A publish on a closed channel fails: its sequence becomes a tombstone.
                if self.closed || self.rng.random_bool(0.05) {
                    return;
                }
                let tag = self.next_tag;
                self.next_tag += 1;
                let (resolve, confirm) = oneshot::channel();
                self.pending.insert(tag, resolve);
                self.inbox.push_back((tag, index));
                let confirm = confirm.map(lost as _);
                self.publishers
                    .push(Publisher::Sent(index, pending, confirm));
            }
            Publisher::Sent(index, pending, confirm) => {
                let answered = pending.sent(confirm, message(self.ids[index]));
                self.answered.push((index, answered));
            }
        }
    }

    /// What lapin does with each incoming frame.
    fn io_loop(&mut self, frame: Frame) {
        match frame {
            Frame::Return(id) => self.returns.push_back(returned(&message(id))),
            Frame::Ack { tag, multiple } => {
                let mut tags: Vec<u64> = if multiple {
                    self.pending.range(..=tag).map(|(t, _)| *t).collect()
                } else {
                    vec![tag]
                };
                tags.shuffle(&mut self.rng);
                for tag in tags {
                    if let Some(resolve) = self.pending.remove(&tag) {
                        let _ = resolve.send(Answer::Ack(self.returns.pop_front()));
                    }
                }
            }
            Frame::ChannelClosed => {
                self.closed = true;
                self.inbox.clear();
                self.unacked.clear();
                self.frames.clear();
                for (_, resolve) in std::mem::take(&mut self.pending) {
                    let _ = resolve.send(Answer::Failed(Failure::Lost(
                        std::io::Error::other("closed").into(),
                    )));
                }
            }
        }
    }

    fn round(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        let _ = Pin::new(&mut self.tracker).poll(&mut cx);
    }
}

fn run(ids: Vec<u8>, seed: u64, close_after: Option<usize>) {
    let (handle, tracker) = ledger::<FakeConfirm>();
    let mut model = Model {
        rng: StdRng::seed_from_u64(seed),
        ids,
        handle: &handle,
        tracker,
        next: 0,
        publishers: Vec::new(),
        answered: Vec::new(),
        inbox: VecDeque::new(),
        unacked: BTreeSet::new(),
        frames: VecDeque::new(),
        next_tag: 1,
        pending: BTreeMap::new(),
        returns: VecDeque::new(),
        close_after,
        steps: 0,
        closed: false,
    };
    while !(model.publishing_done() && model.broker_done()) {
        model.step();
    }
    for _ in 0..8 {
        model.round();
    }
    let closed = model.closed;
    for (index, answered) in &mut model.answered {
        let id = model.ids[*index];
        let outcome = answered
            .try_recv()
            .unwrap_or_else(|_| panic!("publish {index} (id {id}) was never answered"));
        let outcome = match outcome {
            Settled::Outcome(outcome) => outcome,
            Settled::Lost { error, .. } => Err(error),
            Settled::Unwritten { .. } => panic!(
                "publish {index} (id {id}) reported unwritten; the model writes every publish"
            ),
        };
        match outcome {
            Ok(PublishOutcome::Returned(returned)) => {
                assert!(
                    unroutable(id),
                    "publish {index} (id {id}) is routable but returned"
                );
                assert_eq!(returned.body, message(id).body, "publish {index}");
                assert_eq!(returned.routing_key, message(id).routing_key);
            }
            Ok(PublishOutcome::Acked) => {
                assert!(
                    !unroutable(id),
                    "publish {index} (id {id}) is unroutable but acked"
                );
            }
            Err(Error::Unconfirmed { .. }) if closed => {}
            other => panic!("publish {index} (id {id}): unexpected {other:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn every_publish_gets_its_own_outcome(
        ids in proptest::collection::vec(0u8..8, 1..40),
        seed in any::<u64>(),
    ) {
        run(ids, seed, None);
    }

    #[test]
    fn a_closing_channel_never_misreports(
        ids in proptest::collection::vec(0u8..8, 1..40),
        seed in any::<u64>(),
        close_after in 1usize..200,
    ) {
        run(ids, seed, Some(close_after));
    }
}

#[test]
fn identical_unroutable_messages_never_lend_a_return_another_still_needs() {
    // Identical publishes whose returns ride on each other's acks: answering one as returned
    // with the other's return once reported the other acked while its return was still queued.
    run(
        vec![0, 0, 7, 0, 6, 0, 5, 0, 2, 7, 0, 0, 0, 0],
        9678758714600053581,
        None,
    );
    run(vec![5, 5, 1, 0, 0, 5, 0, 0], 9359754567649715870, None);
    run(vec![5, 5, 1, 0, 0, 5, 0, 0], 9368868148320654124, Some(54));
}

#[test]
fn an_ack_waits_for_a_return_owed_by_an_identical_publish_settled_in_the_same_round() {
    // One cumulative ack completed the lower tag after the higher one had taken its return; the
    // identical publish that held that return was settled as returned in the same round, owing
    // its own return (still inside lapin), after the lower one had been decided acked.
    run(vec![0, 1, 0, 3, 1, 3, 6], 14703049656371074546, Some(59));
    run(
        vec![
            4, 2, 1, 1, 0, 2, 7, 2, 0, 3, 6, 7, 6, 6, 3, 3, 3, 6, 6, 5, 5, 2, 5, 2, 0, 5, 4, 0, 4,
            1, 3,
        ],
        2581064035675329904,
        None,
    );
}

#[test]
fn distinct_unroutable_messages_in_one_cumulative_ack_are_each_returned() {
    // Many publishes acked together are where lapin's hash order scrambles the returns.
    for seed in 0..200 {
        run((0..40).collect(), seed, None);
    }
}
