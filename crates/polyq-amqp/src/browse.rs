//! Reading a queue without consuming it, and removing a selection from it.
//!
//! AMQP 0-9-1 has no "peek": a message is read by taking it. [`sweep`] reads the depth of the
//! queue first (its ready messages), then takes that many (or its limit) off the head with
//! `basic.consume` on a connection of its own, holding every delivery unacknowledged, and
//! acknowledges only those its `take` selects; closing the connection at the end gives all the
//! others back at once. The broker pushes the deliveries within the consumer's prefetch window
//! without waiting to be asked for each, so a read costs about one round trip, not one per
//! message as `basic.get` would. The window is the number still to be read: since nothing is
//! acknowledged, the broker never hands the consumer more, so a message published behind the
//! depth read at the start is never taken. A prefetch count is 16 bits, so a read of more
//! than 65,535 messages opens a further consumer once the first is full, and so on.
//!
//! A read that was promised more messages than come (another consumer took some, or they
//! expired) stops when two pauses pass without a delivery and without the queue handing out a
//! message; it never waits for messages that will not come. A queue that holds messages back
//! from the consumer (another consumer is its single active one) is read on with `basic.get`.
//!
//! Closing the connection returns a consumer's unacknowledged messages in their order: a
//! classic queue (RabbitMQ and the embedded broker) puts each back at its original position, a
//! quorum queue returns a consumer's messages in delivery order ahead of the rest. Either way
//! the queue keeps its count and its order; the messages given back are flagged
//! `redelivered`, which is all a reader leaves behind (a quorum queue also counts the delivery
//! against its `x-delivery-limit`, as any requeue does). Giving them back one `reject` at a
//! time would instead race other consumers, each message back at the head while the next is
//! still held. While a read runs, the messages it holds are invisible to other consumers. A
//! quorum queue read of more than one window returns each consumer's messages as a block, in
//! the order RabbitMQ processes the closing of their channels. A quorum queue takes a closed
//! channel's messages back through its Raft log, a while after it confirmed the close on a busy
//! node, so a read returns (and closes its next channel) only once the queue counts them ready
//! again, as a read that follows expects.
//!
//! A sweep that dies midway (the process killed) loses nothing either: the broker requeues what
//! the dead connection held. Only the messages `take` selected and that were acknowledged are
//! gone, which is what a removal means.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), polyq_amqp::Error> {
//! use polyq_amqp::browse::{browse, sweep};
//! use polyq_amqp::{Client, ClientOptions, OutgoingMessage, Properties, QueueSpec};
//!
//! let client = Client::connect("memory://doc-browse").await?;
//! client.declare_queue(&QueueSpec::new("jobs.dlq")).await?;
//! for body in ["a", "b", "c"] {
//!     let message = OutgoingMessage::new("", "jobs.dlq", Properties::default(), body);
//!     let _ = client.publish(message).await?.await?;
//! }
//! let seen = browse("memory://doc-browse", ClientOptions::default(), "jobs.dlq", None).await?;
//! assert_eq!(seen.len(), 3);
//! let swept = sweep("memory://doc-browse", ClientOptions::default(), "jobs.dlq", None, |m| {
//!     &m.body[..] == b"b"
//! })
//! .await?;
//! assert_eq!(swept.iter().filter(|m| m.taken).count(), 1);
//! let left = browse("memory://doc-browse", ClientOptions::default(), "jobs.dlq", None).await?;
//! let bodies: Vec<&[u8]> = left.iter().map(|m| &m.message.body[..]).collect();
//! assert_eq!(bodies, [b"a", b"c"]);
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use futures_util::StreamExt as _;

use crate::{Client, ClientOptions, ConsumeOptions, Consumer, Delivery, MessageJson, Result};

/// The most deliveries one consumer is handed unacknowledged: the largest prefetch count.
const WINDOW: u64 = u16::MAX as u64;

/// How long a read waits for a delivery before asking the broker whether one can still come.
const PAUSE: Duration = Duration::from_secs(1);

/// How long a read waits, at most, for the queue to show what it gave back ready again.
const PATIENCE: Duration = Duration::from_secs(30);

/// The pause between two looks at the queue while waiting for that: each look is a round trip
/// to the broker, the only place that can tell.
const LOOK_AGAIN: Duration = Duration::from_millis(10);

/// One message a sweep read.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Swept {
    /// The message as it sits in the queue, in the message JSON shape.
    pub message: MessageJson,
    /// Whether the broker had delivered it before this read.
    pub redelivered: bool,
    /// Whether the sweep removed it (its `take` selected it and the acknowledgement was sent,
    /// once the whole read was done).
    pub taken: bool,
}

/// Reads up to `limit` messages (all, with `None`) from the head of `queue` without consuming
/// any: a [`sweep`] that takes nothing.
pub async fn browse(
    url: &str,
    options: ClientOptions,
    queue: &str,
    limit: Option<u64>,
) -> Result<Vec<Swept>> {
    sweep(url, options, queue, limit, |_| false).await
}

/// Reads up to `limit` messages (all it holds when the read begins, with `None`) from the head
/// of `queue` on a connection of its own, removes those `take` returns `true` for, and gives
/// every other one back in its place when the connection closes (see the [module](self)).
/// Returns what it read, in queue order.
///
/// On an error the messages not yet acknowledged go back to the queue all the same.
pub async fn sweep(
    url: &str,
    options: ClientOptions,
    queue: &str,
    limit: Option<u64>,
    take: impl FnMut(&MessageJson) -> bool,
) -> Result<Vec<Swept>> {
    let client = Client::connect_with(url, options.clone()).await?;
    let mut reading = Reading {
        take,
        read: Vec::new(),
        held: Vec::new(),
        consumers: Vec::new(),
    };
    let mut outcome = reading.run(&client, queue, limit).await;
    let Reading {
        read,
        held,
        consumers,
        ..
    } = reading;
    let ready_before = if read.iter().all(|swept| swept.taken) {
        None
    } else {
        ready_count(&client, queue, consumers.len()).await
    };
    // One channel after the other, in the order they were read, each one's messages back before
    // the next channel closes: a quorum queue puts each channel's messages back ahead of what it
    // holds when it takes them back.
    let mut given_back = 0;
    for (consumer, untaken) in consumers {
        let waits = consumer.gives_back_when_closed();
        let closed = consumer.close_channel().await;
        if let (true, Ok(()), Some(ready_before)) = (waits, &closed, ready_before) {
            given_back += untaken;
            outcome = outcome.and(ready_again(&client, queue, ready_before + given_back).await);
        }
        outcome = outcome.and(closed);
    }
    let closed = client.close().await;
    drop(held);
    outcome?;
    closed?;
    // The rest (what `basic.get` read, and on the embedded broker everything) goes back with
    // the client.
    let untaken = read.iter().filter(|swept| !swept.taken).count() as u64;
    if let Some(ready_before) = ready_before.filter(|_| untaken > given_back) {
        let client = Client::connect_with(url, options).await?;
        let back = ready_again(&client, queue, ready_before + untaken).await;
        let closed = client.close().await;
        back?;
        closed?;
    }
    Ok(read)
}

/// The queue's count of ready messages, as RabbitMQ reports it once it answers for real: a
/// quorum queue whose Raft leader does not answer its local query within 250 ms (a busy node)
/// is reported with no messages and no consumers at all, which is never the truth while this
/// read's own consumers (`ours`) are on it. 0 if no real answer came within [`PATIENCE`]: the
/// wait that follows then still waits for the messages given back themselves. `None` when the
/// queue has consumers besides this read's: they take what comes back, so there is nothing to
/// wait for.
async fn ready_count(client: &Client, queue: &str, ours: usize) -> Option<u64> {
    let looking = async {
        loop {
            match client.inspect_queue(queue).await {
                Ok(info) if info.consumer_count as usize > ours => return None,
                Ok(info) if info.message_count > 0 || info.consumer_count > 0 => {
                    return Some(u64::from(info.message_count));
                }
                Ok(_) => {}
                Err(error) if error.is_transient() => {}
                Err(_) => return Some(0),
            }
            tokio::time::sleep(LOOK_AGAIN).await;
        }
    };
    tokio::time::timeout(PATIENCE, looking)
        .await
        .unwrap_or(Some(0))
}

/// Waits until `queue` holds at least `ready` messages ready, the messages this read gave back
/// among them, or [`PATIENCE`] is over (another consumer took some meanwhile).
///
/// The close of a channel (or connection) holding them is not the moment they are back: RabbitMQ
/// gives a closing channel's unacknowledged messages back to a classic queue it consumes from
/// before it confirms the close, but a quorum queue takes them back only once the channel
/// process has ended, through an entry in its Raft log that it applies a while later on a busy
/// node; a read of the queue right after the close would miss them. (Giving them back with
/// `basic.nack` instead would not keep their order: RabbitMQ 3.x requeues a nacked message at
/// the tail of a quorum queue, while a closing channel's messages go back to its head.)
async fn ready_again(client: &Client, queue: &str, ready: u64) -> Result<()> {
    let waiting = async {
        while u64::from(client.inspect_queue(queue).await?.message_count) < ready {
            tokio::time::sleep(LOOK_AGAIN).await;
        }
        Ok(())
    };
    tokio::time::timeout(PATIENCE, waiting)
        .await
        .unwrap_or(Ok(()))
}

/// One sweep under way. Its deliveries and consumers are held until their channels close,
/// which gives the deliveries back in their places; a consumer cancelled earlier could see a
/// delivery already on its way requeued alone, ahead of the others.
struct Reading<F> {
    take: F,
    read: Vec<Swept>,
    held: Vec<Delivery>,
    /// Each consumer with the number of its deliveries `take` did not select.
    consumers: Vec<(Consumer, u64)>,
}

impl<F: FnMut(&MessageJson) -> bool> Reading<F> {
    async fn run(&mut self, client: &Client, queue: &str, limit: Option<u64>) -> Result<()> {
        let depth = u64::from(client.inspect_queue(queue).await?.message_count);
        let wanted = limit.map_or(depth, |limit| limit.min(depth));
        while self.count() < wanted {
            let window = (wanted - self.count()).min(WINDOW);
            let prefetch = u16::try_from(window).unwrap_or(u16::MAX);
            let mut consumer = client
                .consume(queue, &ConsumeOptions::default().prefetch(prefetch))
                .await?;
            let start = self.read.len();
            let filled = self.fill(client, queue, &mut consumer, window).await;
            let untaken = self.read[start..]
                .iter()
                .filter(|swept| !swept.taken)
                .count();
            self.consumers.push((consumer, untaken as u64));
            if !filled? {
                // The consumer stalled with messages ready (another consumer is the queue's
                // single active one) or the queue ran dry: the rest, if any, one `basic.get`
                // at a time, which no consumer holds back.
                while self.count() < wanted {
                    let Some(delivery) = client.get(queue).await? else {
                        break;
                    };
                    self.hold(delivery);
                }
                break;
            }
        }
        // Acknowledged only now: an acknowledgement frees a place in the window, which the
        // broker would fill with a message past the ones this read wants.
        for (swept, delivery) in self.read.iter().zip(&self.held) {
            if swept.taken {
                delivery.ack().await?;
            }
        }
        Ok(())
    }

    fn count(&self) -> u64 {
        self.read.len() as u64
    }

    /// Reads `window` deliveries of `consumer`. Answers `false` when the queue stopped handing
    /// it messages before the window was full.
    async fn fill(
        &mut self,
        client: &Client,
        queue: &str,
        consumer: &mut Consumer,
        window: u64,
    ) -> Result<bool> {
        let mut ready_at_pause = None;
        for _ in 0..window {
            let delivery = loop {
                match tokio::time::timeout(PAUSE, consumer.next()).await {
                    Ok(Some(delivery)) => break delivery?,
                    Ok(None) => return Err(crate::Error::Closed),
                    Err(_paused) => {
                        let ready = client.inspect_queue(queue).await?.message_count;
                        // Two pauses in a row without a delivery, the queue's ready count the
                        // same at both (nothing handed out: none left, or none for this
                        // consumer). A single pause with nothing ready is not enough: a
                        // quorum queue counts a message as handed out before its delivery
                        // leaves the broker, which may be a while behind on a busy node.
                        if ready_at_pause == Some(ready) {
                            return Ok(false);
                        }
                        ready_at_pause = Some(ready);
                    }
                }
            };
            ready_at_pause = None;
            self.hold(delivery);
        }
        Ok(true)
    }

    /// Records a delivery as read, marked taken if `take` selects it, and holds it.
    fn hold(&mut self, delivery: Delivery) {
        let message = MessageJson::of_delivery(&delivery);
        self.read.push(Swept {
            taken: (self.take)(&message),
            message,
            redelivered: delivery.redelivered,
        });
        self.held.push(delivery);
    }
}
