//! Settling deliveries on the channel they came from, and only there.

use std::sync::Arc;

use futures_util::FutureExt as _;
use lapin::Channel;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions};
use tokio_util::sync::CancellationToken;

use super::errors::{Failure, classify};
use crate::error::{Error, Result};

/// Settles one delivery. It holds its channel open: a channel closes when its consumer is gone
/// and every delivery it carried is settled or dropped.
#[derive(Debug)]
pub(crate) struct Acker {
    acker: lapin::Acker,
    channel: Arc<Channel>,
    /// Cancelled once the supervisor has seen the delivery's connection end.
    connection_lost: CancellationToken,
}

impl Acker {
    pub(super) fn new(
        acker: lapin::Acker,
        channel: Arc<Channel>,
        connection_lost: CancellationToken,
    ) -> Self {
        Self {
            acker,
            channel,
            connection_lost,
        }
    }

    pub(crate) async fn ack(&self) -> Result<()> {
        self.settle("ack", self.acker.ack(BasicAckOptions::default()))
            .await
    }

    pub(crate) async fn nack(&self, requeue: bool) -> Result<()> {
        let nack = self.acker.nack(BasicNackOptions {
            requeue,
            multiple: false,
        });
        self.settle("nack", nack).await
    }

    pub(crate) async fn reject(&self, requeue: bool) -> Result<()> {
        self.settle("reject", self.acker.reject(BasicRejectOptions { requeue }))
            .await
    }

    /// Waits for `settlement`, or until the delivery's connection is known to be lost.
    ///
    /// lapin hands a settlement to its connection's command task, and a settlement handed over
    /// just as the connection ends lands behind that task's stop: it is neither sent nor
    /// failed, and its promise never completes. Under load the window is wide enough to be hit
    /// when a broker node is killed, and a consumer whose handler waits on such an ack stops
    /// for good. Once the connection is lost the broker has taken the delivery back, as with
    /// any stale delivery.
    async fn settle(
        &self,
        operation: &str,
        settlement: impl Future<Output = lapin::Result<bool>>,
    ) -> Result<()> {
        match self.connection_lost.run_until_cancelled(settlement).await {
            Some(outcome) => self.settled(operation, outcome),
            None => Err(Error::StaleDelivery),
        }
    }

    /// Requeues the delivery without waiting for the broker: the `basic.nack` is queued on the
    /// connection behind everything sent before it, so it goes out ahead of the channel close
    /// that dropping the last reference to the channel may trigger.
    fn requeue_now(&self) {
        if !self.acker.usable() {
            // Settled already, or its channel closed and the broker requeued it.
            return;
        }
        // lapin queues the command on the first poll and only then waits for the broker's
        // answer, which nobody is left to read; one poll therefore sends it, with no runtime.
        let nack = self.acker.nack(BasicNackOptions {
            requeue: true,
            multiple: false,
        });
        let _ = nack.now_or_never();
    }

    /// lapin answers `Ok(false)` both for a second settlement and for a delivery whose channel
    /// has closed (a "poisoned" acker); the broker redelivers the latter, so it must be told
    /// apart. A settlement that fails because its channel or connection went (a write into a
    /// broken connection fails before lapin poisons the acker) is stale as well; only a
    /// refusal by the broker is reported as it is.
    fn settled(&self, operation: &str, outcome: lapin::Result<bool>) -> Result<()> {
        match outcome {
            Ok(true) => Ok(()),
            Ok(false) if self.acker.poisoned() => Err(Error::StaleDelivery),
            Ok(false) => Err(Error::AlreadySettled),
            Err(_) if self.acker.poisoned() || !self.channel.status().connected() => {
                Err(Error::StaleDelivery)
            }
            Err(error) => match classify(operation, None, &error, true) {
                Failure::Fatal(error) => Err(error),
                Failure::ChannelGone | Failure::ConnectionGone => Err(Error::StaleDelivery),
            },
        }
    }
}

/// A delivery dropped unsettled is requeued at once (flagged redelivered), rather than holding
/// its place in the prefetch window until its channel closes.
impl Drop for Acker {
    fn drop(&mut self) {
        self.requeue_now();
    }
}
