//! Settling deliveries on the channel they came from, and only there.

use std::sync::Arc;

use futures_util::FutureExt as _;
use lapin::Channel;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions};

use super::errors::from_lapin;
use crate::error::{Error, Result};

/// Settles one delivery. It holds its channel open: a channel closes when its consumer is gone
/// and every delivery it carried is settled or dropped.
#[derive(Debug)]
pub(crate) struct Acker {
    acker: lapin::Acker,
    channel: Arc<Channel>,
}

impl Acker {
    pub(super) fn new(acker: lapin::Acker, channel: Arc<Channel>) -> Self {
        Self { acker, channel }
    }

    pub(crate) async fn ack(&self) -> Result<()> {
        let outcome = self.acker.ack(BasicAckOptions::default()).await;
        self.settled("ack", outcome)
    }

    pub(crate) async fn nack(&self, requeue: bool) -> Result<()> {
        let outcome = self
            .acker
            .nack(BasicNackOptions {
                requeue,
                multiple: false,
            })
            .await;
        self.settled("nack", outcome)
    }

    pub(crate) async fn reject(&self, requeue: bool) -> Result<()> {
        let outcome = self.acker.reject(BasicRejectOptions { requeue }).await;
        self.settled("reject", outcome)
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
    /// apart.
    fn settled(&self, operation: &str, outcome: lapin::Result<bool>) -> Result<()> {
        match outcome {
            Ok(true) => Ok(()),
            Ok(false) if self.acker.poisoned() => Err(Error::StaleDelivery),
            Ok(false) => Err(Error::AlreadySettled),
            Err(_) if self.acker.poisoned() || !self.channel.status().connected() => {
                Err(Error::StaleDelivery)
            }
            Err(error) => Err(from_lapin(operation, None, &error)),
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
