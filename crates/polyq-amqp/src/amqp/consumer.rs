//! Consumers that survive reconnects: the stream the application holds stays the same while
//! the supervisor attaches a new lapin consumer under it after each recovery.

use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use futures_util::Stream;
use lapin::Channel;
use lapin::options::BasicCancelOptions;
use lapin::types::ShortString;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::AmqpClient;
use super::acker::Acker;
use super::convert::properties_from_amqp;
use super::errors::from_lapin;
use crate::client::{AckerInner, ConsumeOptions};
use crate::error::{Error, Result};
use crate::message::Delivery;

/// What the supervisor and the stream share about one consumer.
pub(super) struct ConsumerSlot {
    pub(super) queue_name: ShortString,
    /// The requested tag, or empty for one chosen by the broker.
    pub(super) tag: ShortString,
    pub(super) options: ConsumeOptions,
    /// Sequence number of the newest attachment, readable without the lock on the hot path.
    latest: AtomicU64,
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    /// An attachment the stream has not picked up yet.
    pending: Option<Attached>,
    seq: u64,
    waker: Option<Waker>,
    ended: bool,
    failure: Option<Error>,
}

/// One lapin consumer on its own channel.
struct Attached {
    consumer: lapin::Consumer,
    channel: Arc<Channel>,
    /// The session's [`Session::lost`](super::session::Session::lost).
    connection_lost: CancellationToken,
    seq: u64,
}

impl ConsumerSlot {
    pub(super) fn new(queue_name: ShortString, tag: ShortString, options: ConsumeOptions) -> Self {
        Self {
            queue_name,
            tag,
            options,
            latest: AtomicU64::new(0),
            state: Mutex::new(SlotState::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands a freshly started lapin consumer to the stream.
    pub(super) fn install(
        &self,
        consumer: lapin::Consumer,
        channel: Arc<Channel>,
        connection_lost: CancellationToken,
    ) {
        let mut state = self.state();
        if state.ended {
            // Dropping the consumer cancels it; dropping the channel closes it.
            return;
        }
        state.seq += 1;
        let seq = state.seq;
        state.pending = Some(Attached {
            consumer,
            channel,
            connection_lost,
            seq,
        });
        self.latest.store(seq, Ordering::Release);
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// Sequence number of the newest attachment.
    pub(super) fn latest(&self) -> u64 {
        self.latest.load(Ordering::Acquire)
    }

    pub(super) fn is_ended(&self) -> bool {
        self.state().ended
    }

    /// Ends the stream after what it already holds.
    pub(super) fn end(&self) {
        let mut state = self.state();
        state.ended = true;
        state.pending = None;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// Ends the stream with one last item: `error`.
    pub(super) fn fail(&self, error: Error) {
        self.state().failure = Some(error);
        self.end();
    }
}

/// The application's consumer stream.
pub(crate) struct Consumer {
    client: AmqpClient,
    slot: Arc<ConsumerSlot>,
    id: u64,
    current: Option<Attached>,
}

impl Consumer {
    pub(super) fn new(client: AmqpClient, slot: Arc<ConsumerSlot>, id: u64) -> Self {
        Self {
            client,
            slot,
            id,
            current: None,
        }
    }

    /// Ends the consumer. When no delivery it carried is left unsettled, its channel is closed,
    /// which ends the consumer too, and what it had prefetched is ready on a classic queue again
    /// by the time this returns (a quorum queue takes it back a while later). Otherwise it is
    /// cancelled with `basic.cancel` and the channel stays open until every such delivery is
    /// settled or dropped.
    pub(crate) async fn cancel(mut self) -> Result<()> {
        let Some(Attached {
            consumer, channel, ..
        }) = self.detach()
        else {
            return Ok(());
        };
        let operation = format!("cancel the consumer on queue `{}`", self.slot.queue_name);
        match Arc::try_unwrap(channel) {
            // No `basic.cancel` first: RabbitMQ returns a closing channel's unacknowledged
            // messages to the classic queues it still consumes from before it confirms the
            // close, but those of a queue it no longer consumes from only afterwards, so a depth
            // read right after would miss them. Closing here also keeps the channel from closing
            // concurrently with a connection close that follows, a race lapin reports as an
            // error. The lapin consumer outlives the close so that dropping it sends nothing.
            Ok(channel) => {
                channel
                    .close(200, "consumer cancelled".into())
                    .await
                    .map_err(|error| from_lapin(&operation, None, &error))?;
                drop(consumer);
            }
            Err(channel) => {
                channel
                    .basic_cancel(consumer.tag(), BasicCancelOptions::default())
                    .await
                    .map_err(|error| from_lapin(&operation, None, &error))?;
            }
        }
        Ok(())
    }

    /// Ends the consumer by closing its channel, whatever deliveries are still held: the broker
    /// takes back every unsettled one at once, in its order, and their ackers go stale. A classic
    /// queue has them back by the time this returns; a quorum queue applies their return through
    /// its Raft log once the channel process has ended, which may be later.
    pub(crate) async fn close_channel(mut self) -> Result<()> {
        let Some(Attached {
            consumer, channel, ..
        }) = self.detach()
        else {
            return Ok(());
        };
        channel
            .close(200, "consumer closed".into())
            .await
            .map_err(|error| {
                let operation = format!("close the consumer on queue `{}`", self.slot.queue_name);
                from_lapin(&operation, None, &error)
            })?;
        // Outlives the close, so that dropping it sends no `basic.cancel`.
        drop(consumer);
        Ok(())
    }

    /// Ends the stream and hands over its newest attachment, if its channel is still open.
    fn detach(&mut self) -> Option<Attached> {
        let attached = match self.current.take() {
            Some(attached) if attached.seq == self.slot.latest() => Some(attached),
            _ => self.slot.state().pending.take(),
        };
        self.slot.end();
        self.client.shared().unregister(self.id);
        attached.filter(|attached| attached.channel.status().connected())
    }

    /// Takes the newest attachment if the current one is outdated or gone. `Break` carries what
    /// the stream yields instead when there is nothing to consume from.
    fn refresh(&mut self, cx: &Context<'_>) -> ControlFlow<Poll<Option<Result<Delivery>>>> {
        let current_seq = self.current.as_ref().map(|c| c.seq);
        if current_seq == Some(self.slot.latest()) {
            return ControlFlow::Continue(());
        }
        let mut state = self.slot.state();
        if let Some(next) = state.pending.take() {
            self.current = Some(next);
            return ControlFlow::Continue(());
        }
        if self.current.is_some() {
            return ControlFlow::Continue(());
        }
        if let Some(error) = state.failure.take() {
            return ControlFlow::Break(Poll::Ready(Some(Err(error))));
        }
        if state.ended || self.client.shared().closed.is_cancelled() {
            return ControlFlow::Break(Poll::Ready(None));
        }
        state.waker = Some(cx.waker().clone());
        ControlFlow::Break(Poll::Pending)
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.slot.end();
        self.client.shared().unregister(self.id);
    }
}

impl Stream for Consumer {
    type Item = Result<Delivery>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let ControlFlow::Break(poll) = this.refresh(cx) {
                return poll;
            }
            let Some(current) = this.current.as_mut() else {
                continue;
            };
            match Pin::new(&mut current.consumer).poll_next(cx) {
                Poll::Ready(Some(Ok(delivery))) => {
                    return Poll::Ready(Some(Ok(to_delivery(
                        delivery,
                        &current.channel,
                        &current.connection_lost,
                    ))));
                }
                Poll::Ready(Some(Err(error))) => {
                    debug!(queue = %this.slot.queue_name, %error, "consumer channel failed");
                }
                Poll::Ready(None) => {
                    let seq = current.seq;
                    this.current = None;
                    if this.slot.is_ended() {
                        continue;
                    }
                    debug!(queue = %this.slot.queue_name, "consumer ended; starting it again");
                    this.client.shared().reattach(this.slot.clone(), seq);
                }
                Poll::Pending => {
                    // A newer attachment must wake this task even if the old consumer never
                    // reports its end.
                    let mut state = this.slot.state();
                    if state.pending.is_some() {
                        continue;
                    }
                    match &state.waker {
                        Some(waker) if waker.will_wake(cx.waker()) => {}
                        _ => state.waker = Some(cx.waker().clone()),
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

/// A lapin delivery as ours; its acker keeps the channel open until it is settled or dropped.
pub(super) fn to_delivery(
    delivery: lapin::message::Delivery,
    channel: &Arc<Channel>,
    connection_lost: &CancellationToken,
) -> Delivery {
    Delivery {
        properties: properties_from_amqp(&delivery.properties),
        exchange: delivery.exchange.into(),
        routing_key: delivery.routing_key.into(),
        redelivered: delivery.redelivered,
        body: Bytes::from(delivery.data),
        acker: AckerInner::Amqp(Acker::new(
            delivery.acker,
            channel.clone(),
            connection_lost.clone(),
        ))
        .into(),
    }
}
