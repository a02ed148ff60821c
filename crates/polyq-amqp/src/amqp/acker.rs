//! Settling deliveries on the channel they came from, and only there.

use std::sync::Arc;

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
