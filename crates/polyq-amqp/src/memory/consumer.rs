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

/// Turns a handed-out message into the application's [`Delivery`].
pub(super) fn delivery(
    connection: &Arc<Connection>,
    queue: &Arc<Queue>,
    handout: Handout,
) -> Delivery {
    let message = &handout.message;
    Delivery {
        exchange: message.exchange.clone(),
        routing_key: message.routing_key.clone(),
        redelivered: handout.redelivered,
        properties: message.properties.clone(),
        body: message.body.clone(),
        acker: AckerInner::Memory(Acker {
            connection: Arc::clone(connection),
            queue: Arc::clone(queue),
            tag: handout.tag,
            settled: AtomicBool::new(false),
        })
        .into(),
    }
}

/// Settles one delivery of the embedded broker.
pub(crate) struct Acker {
    connection: Arc<Connection>,
    queue: Arc<Queue>,
    tag: u64,
    settled: AtomicBool,
}

impl std::fmt::Debug for Acker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acker")
            .field("queue", &self.queue.name())
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
        if self.connection.is_closed() {
            return Err(Error::StaleDelivery);
        }
        // An unknown tag means the queue was deleted meanwhile; RabbitMQ accepts the
        // settlement then too.
        let (_, effects) = self.queue.settle(self.tag, how);
        self.connection.broker.apply(&self.queue, effects);
        Ok(())
    }
}

/// A consumer of the embedded broker: a stream of deliveries within the prefetch window.
/// Dropping it cancels it.
pub(crate) struct Consumer {
    connection: Arc<Connection>,
    queue: Arc<Queue>,
    id: u64,
    /// Deliveries taken from the queue in one batch, not yet yielded.
    buffer: VecDeque<Handout>,
    finished: bool,
}

impl Consumer {
    pub(super) fn new(connection: Arc<Connection>, queue: Arc<Queue>, id: u64) -> Self {
        Self {
            connection,
            queue,
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
        let effects = self.queue.cancel_consumer(self.id, undelivered);
        self.connection.broker.apply(&self.queue, effects);
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
            match this.queue.take_inbox(this.id, &mut this.buffer, cx.waker()) {
                Inbox::Filled => {}
                Inbox::Empty => return Poll::Pending,
                Inbox::Gone => this.finished = true,
            }
        }
        Poll::Ready(
            this.buffer
                .pop_front()
                .map(|handout| Ok(delivery(&this.connection, &this.queue, handout))),
        )
    }
}
