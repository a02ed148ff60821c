//! Consumers and settlement of embedded-broker deliveries.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use futures_util::Stream;

use super::connection::Connection;
use super::queue::{Handout, Inbox, Queue, Settlement};
use crate::client::AckerInner;
use crate::error::{Error, Result};
use crate::message::Delivery;

/// Where deliveries come from: a connection and a queue. Shared by a consumer's deliveries so
/// that each delivery updates one reference count that only the consuming thread touches, not
/// the connection's and queue's, which publishers read.
pub(super) struct Source {
    connection: Arc<Connection>,
    queue: Arc<Queue>,
}

impl Source {
    pub(super) fn new(connection: Arc<Connection>, queue: Arc<Queue>) -> Arc<Self> {
        Arc::new(Self { connection, queue })
    }
}

/// Turns a handed-out message into the application's [`Delivery`].
pub(super) fn delivery(source: &Arc<Source>, handout: Handout) -> Delivery {
    let message = &handout.message;
    Delivery {
        exchange: message.exchange.clone(),
        routing_key: message.routing_key.clone(),
        redelivered: handout.redelivered,
        properties: message.properties.clone(),
        body: message.body.clone(),
        acker: AckerInner::Memory(Acker {
            source: Arc::clone(source),
            tag: handout.tag,
            settled: AtomicBool::new(false),
        })
        .into(),
    }
}

/// Settles one delivery of the embedded broker.
pub(crate) struct Acker {
    source: Arc<Source>,
    tag: u64,
    settled: AtomicBool,
}

impl std::fmt::Debug for Acker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acker")
            .field("queue", &self.source.queue.name())
            .field("tag", &self.tag)
            .finish()
    }
}

impl Acker {
    pub(crate) async fn ack(&self) -> Result<()> {
        self.settle(Settlement::Ack)
    }

    pub(crate) async fn nack(&self, requeue: bool) -> Result<()> {
        self.settle(if requeue {
            Settlement::Requeue
        } else {
            Settlement::Reject
        })
    }

    pub(crate) async fn reject(&self, requeue: bool) -> Result<()> {
        // basic.reject and basic.nack differ only in nack's `multiple`, which a single
        // delivery's settlement does not use.
        self.nack(requeue).await
    }

    fn settle(&self, how: Settlement) -> Result<()> {
        if self.settled.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadySettled);
        }
        let Source { connection, queue } = &*self.source;
        if connection.is_closed() {
            return Err(Error::StaleDelivery);
        }
        // An unknown tag means the queue was deleted meanwhile; RabbitMQ accepts the
        // settlement then too.
        let (_, effects) = queue.settle(self.tag, how);
        connection.broker.apply(queue, effects);
        Ok(())
    }
}

/// A delivery dropped unsettled goes back to its queue at once (flagged redelivered), rather
/// than holding its place in the prefetch window until the connection closes.
impl Drop for Acker {
    fn drop(&mut self) {
        // Settled, or stale (closing the connection already requeued it): nothing to give back.
        let _ = self.settle(Settlement::Requeue);
    }
}

/// A consumer of the embedded broker: a stream of deliveries within the prefetch window.
/// Dropping it cancels it.
pub(crate) struct Consumer {
    source: Arc<Source>,
    id: u64,
    /// Deliveries taken from the queue in one batch, not yet yielded.
    buffer: VecDeque<Handout>,
    finished: bool,
}

impl Consumer {
    pub(super) fn new(source: Arc<Source>, id: u64) -> Self {
        Self {
            source,
            id,
            buffer: VecDeque::new(),
            finished: false,
        }
    }

    pub(crate) async fn cancel(mut self) -> Result<()> {
        self.stop();
        Ok(())
    }

    fn stop(&mut self) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let undelivered = std::mem::take(&mut self.buffer);
        let Source { connection, queue } = &*self.source;
        let effects = queue.cancel_consumer(self.id, undelivered);
        connection.broker.apply(queue, effects);
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Stream for Consumer {
    type Item = Result<Delivery>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.buffer.is_empty() && !this.finished {
            let queue = &this.source.queue;
            match queue.take_inbox(this.id, &mut this.buffer, cx.waker()) {
                Inbox::Filled => {}
                Inbox::Empty => return Poll::Pending,
                Inbox::Gone => this.finished = true,
                Inbox::Deleted => {
                    // Said once, as RabbitMQ's cancel notification is; then the stream ends.
                    this.finished = true;
                    return Poll::Ready(Some(Err(Error::NotFound {
                        kind: "queue",
                        name: queue.name().to_owned(),
                    })));
                }
            }
        }
        Poll::Ready(
            this.buffer
                .pop_front()
                .map(|handout| Ok(delivery(&this.source, handout))),
        )
    }
}
