//! Reading a queue without consuming it, and removing a selection from it.
//!
//! AMQP 0-9-1 has no "peek": a message is read by taking it. [`sweep`] takes messages off the
//! head of a queue with `basic.get` on a connection of its own, holds every one unacknowledged,
//! and acknowledges only those its `take` selects; closing the connection at the end gives all
//! the others back at once. The broker (RabbitMQ's classic queues, and the embedded broker)
//! returns requeued messages to their original positions, so the queue keeps its count and its
//! order; the messages given back are flagged `redelivered`, which is all a reader leaves
//! behind. Giving them back one `nack` at a time would instead race consumers and, on some
//! queue types, put each at the head in reverse. While a sweep runs, the messages it holds are
//! invisible to other consumers.
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
//!     let _ = client.publish(OutgoingMessage::new("", "jobs.dlq", Properties::default(), body)).await?.await?;
//! }
//! let seen = browse("memory://doc-browse", ClientOptions::default(), "jobs.dlq", None).await?;
//! assert_eq!(seen.len(), 3);
//! let swept = sweep("memory://doc-browse", ClientOptions::default(), "jobs.dlq", None, |m| &m.body[..] == b"b").await?;
//! assert_eq!(swept.iter().filter(|m| m.taken).count(), 1);
//! let left = browse("memory://doc-browse", ClientOptions::default(), "jobs.dlq", None).await?;
//! let bodies: Vec<&[u8]> = left.iter().map(|m| &m.message.body[..]).collect();
//! assert_eq!(bodies, [b"a", b"c"]);
//! # Ok(())
//! # }
//! ```

use crate::{Client, ClientOptions, Delivery, MessageJson, Result};

/// One message a sweep read.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Swept {
    /// The message as it sits in the queue, in the message JSON shape.
    pub message: MessageJson,
    /// Whether the broker had delivered it before this read.
    pub redelivered: bool,
    /// Whether the sweep removed it (its `take` selected it and the acknowledgement was sent).
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

/// Reads up to `limit` messages (all, with `None`) from the head of `queue` on a connection of
/// its own, removes those `take` returns `true` for, and gives every other one back in its
/// place when the connection closes (see the [module](self)). Returns what it read, in queue
/// order.
///
/// On an error the messages not yet acknowledged go back to the queue all the same.
pub async fn sweep(
    url: &str,
    options: ClientOptions,
    queue: &str,
    limit: Option<u64>,
    mut take: impl FnMut(&MessageJson) -> bool,
) -> Result<Vec<Swept>> {
    let client = Client::connect_with(url, options).await?;
    let mut held: Vec<Delivery> = Vec::new();
    let mut read = Vec::new();
    let outcome = async {
        while limit.is_none_or(|limit| (read.len() as u64) < limit) {
            let Some(delivery) = client.get(queue).await? else {
                break;
            };
            let message = MessageJson::of_delivery(&delivery);
            let taken = take(&message);
            if taken {
                delivery.ack().await?;
            }
            read.push(Swept {
                message,
                redelivered: delivery.redelivered,
                taken,
            });
            // Held until the connection closes, which gives it back in its place.
            held.push(delivery);
        }
        Ok::<_, crate::Error>(())
    }
    .await;
    let closed = client.close().await;
    drop(held);
    outcome?;
    closed?;
    Ok(read)
}
