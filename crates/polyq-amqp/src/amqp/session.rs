//! One live connection and the channels this client keeps on it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lapin::options::ConfirmSelectOptions;
use lapin::{Channel, Connection};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::confirm_ledger::{self, LedgerHandle};
use super::publisher::{LapinConfirm, MAX_UNWRITTEN};

/// A channel opened on first use and opened again after it closes; operations on it run one at
/// a time, so a channel error is reported to the operation that caused it.
pub(super) type SerialChannel = tokio::sync::Mutex<Option<Arc<Channel>>>;

/// How old a publishing channel must be before a nack replaces it: a queue that refuses every
/// publish (over its length limit with `reject-publish`) then costs a new channel at most once
/// a second, not one per publish.
const REPLACE_NACKED_AFTER: Duration = Duration::from_secs(1);
/// How long opening a channel may take before it counts as failed. lapin hands the open to its
/// connection's command task, and an open handed over just as the connection ends is never
/// answered (as with settlements, see `Acker::settle`); the bound makes it a failure that is
/// retried on the next connection instead of a wait without end.
const CHANNEL_OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection generation. The supervisor replaces the whole session when the connection
/// dies, so nothing here is ever reused across connections.
pub(super) struct Session {
    /// Increases with each reconnect.
    pub(super) generation: u64,
    pub(super) connection: Connection,
    /// The publishing channel, in confirm mode. Publishes share it without a lock held across
    /// the send, so many can be in flight.
    publisher: Mutex<Arc<PublishingChannel>>,
    reopen_publisher: tokio::sync::Mutex<()>,
    /// Declarations, deletions, purges and passive declares.
    pub(super) ops: SerialChannel,
    /// `basic.get`, kept apart from `ops` so that a failed declaration cannot invalidate
    /// fetched messages awaiting their ack.
    pub(super) getter: SerialChannel,
    /// Cancelled by the supervisor once it has seen this connection end (or the client
    /// close it): the deliveries it carried stop waiting for their settlements.
    pub(super) lost: CancellationToken,
}

/// A confirm-mode channel and the ledger that attributes its confirms and returns. Dropping
/// the last reference lets the ledger's tracker finish once every publish is answered.
pub(super) struct PublishingChannel {
    pub(super) channel: Channel,
    pub(super) ledger: LedgerHandle<LapinConfirm>,
    /// Places among the publishes whose frames lapin holds unwritten.
    pub(super) unwritten: Arc<tokio::sync::Semaphore>,
    opened: Instant,
}

impl Session {
    /// Opens the publishing channel on a fresh connection.
    pub(super) async fn open(generation: u64, connection: Connection) -> lapin::Result<Self> {
        let publisher = confirming_channel(&connection).await?;
        Ok(Self {
            generation,
            connection,
            publisher: Mutex::new(Arc::new(publisher)),
            reopen_publisher: tokio::sync::Mutex::new(()),
            ops: SerialChannel::default(),
            getter: SerialChannel::default(),
            lost: CancellationToken::new(),
        })
    }

    /// Opens a channel on the connection, within [`CHANNEL_OPEN_TIMEOUT`].
    pub(super) async fn open_channel(&self) -> lapin::Result<Channel> {
        open_channel(&self.connection).await
    }

    /// Whether the connection is still usable.
    pub(super) fn is_up(&self) -> bool {
        self.connection.status().connected()
    }

    /// The publishing channel, reopened (in confirm mode) if a channel error closed it.
    pub(super) async fn publisher(&self) -> lapin::Result<Arc<PublishingChannel>> {
        let current = self.current_publisher();
        if current.channel.status().connected() {
            return Ok(current);
        }
        let _reopening = self.reopen_publisher.lock().await;
        let current = self.current_publisher();
        if current.channel.status().connected() {
            return Ok(current);
        }
        let fresh = Arc::new(confirming_channel(&self.connection).await?);
        *self
            .publisher
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = fresh.clone();
        Ok(fresh)
    }

    /// Replaces the publishing channel after the broker nacked a publish on it, when `nacked`
    /// still is that channel and has been for [`REPLACE_NACKED_AFTER`]. Publishes already on it
    /// keep their confirms; it is closed once the last one is answered.
    ///
    /// A nack may be the channel's own doing: RabbitMQ 3.x (seen on 3.10) looks up a quorum
    /// queue's leader once per channel, on the channel's first publish to it, and when that node
    /// is down (killed, its successor not yet recorded) the channel refuses every later publish
    /// to the queue for as long as it lives, while channels opened since publish normally.
    pub(super) async fn replace_nacked(&self, nacked: &Arc<PublishingChannel>) {
        if nacked.opened.elapsed() < REPLACE_NACKED_AFTER {
            return;
        }
        let _reopening = self.reopen_publisher.lock().await;
        if !Arc::ptr_eq(&self.current_publisher(), nacked) || !self.is_up() {
            return;
        }
        match confirming_channel(&self.connection).await {
            Ok(fresh) => {
                *self
                    .publisher
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
            }
            // The next publish opens one again, or waits for the next connection.
            Err(error) => tracing::debug!(%error, "could not replace a nacked publishing channel"),
        }
    }

    /// Closes the publishing channel once lapin has written every publish queued on it. A
    /// publish returns once queued, so closing must not drop it; and RabbitMQ takes a channel's
    /// close after the publishes before it, where closing the connection can stop the channel
    /// with publishes still unrouted.
    pub(super) async fn close_publishing(&self) {
        let publishing = self.current_publisher();
        let every_place = u32::try_from(MAX_UNWRITTEN).unwrap_or(u32::MAX);
        // The semaphore is never closed; each unwritten publish holds one place.
        let _ = publishing.unwritten.acquire_many(every_place).await;
        if publishing.channel.status().connected() {
            let _ = publishing
                .channel
                .close(200, "closed by the application".into())
                .await;
        }
    }

    fn current_publisher(&self) -> Arc<PublishingChannel> {
        self.publisher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

async fn open_channel(connection: &Connection) -> lapin::Result<Channel> {
    match tokio::time::timeout(CHANNEL_OPEN_TIMEOUT, connection.create_channel()).await {
        Ok(opened) => opened,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no channel opened within {} s",
                CHANNEL_OPEN_TIMEOUT.as_secs()
            ),
        )
        .into()),
    }
}

async fn confirming_channel(connection: &Connection) -> lapin::Result<PublishingChannel> {
    let channel = open_channel(connection).await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let (ledger, tracker) = confirm_ledger::ledger();
    let replaced = channel.clone();
    tokio::spawn(async move {
        // The tracker ends once the channel is no longer used and every publish on it is
        // answered. A channel that failed, or that the client closed, is closed already; one
        // replaced after a nack is closed here.
        tracker.await;
        if replaced.status().connected() {
            let _ = replaced
                .close(200, "replaced by a new publishing channel".into())
                .await;
        }
    });
    Ok(PublishingChannel {
        channel,
        ledger,
        unwritten: Arc::new(tokio::sync::Semaphore::new(MAX_UNWRITTEN)),
        opened: Instant::now(),
    })
}
