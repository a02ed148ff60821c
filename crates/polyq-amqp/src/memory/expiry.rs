//! The per-queue task that expires messages when their TTL runs out, whether or not anyone
//! consumes: the retry rungs rely on a message leaving its queue on time.

use std::sync::Weak;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::broker::Broker;
use super::queue::Queue;

/// Spawns the expiry task of `queue` on the current runtime; `None` outside a runtime.
///
/// The task sleeps until the head message's deadline, or until the queue signals that its head
/// now expires sooner. It holds the queue weakly and ends when the queue is deleted.
pub(super) fn spawn(queue: Weak<Queue>, broker: Weak<Broker>) -> Option<JoinHandle<()>> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let wakeup = queue.upgrade()?.expiry_wakeup();
    Some(runtime.spawn(async move {
        loop {
            let next = {
                let (Some(queue), Some(broker)) = (queue.upgrade(), broker.upgrade()) else {
                    return;
                };
                let (next, gone, effects) = queue.expire_due(Instant::now());
                broker.apply(&queue, effects);
                if gone {
                    return;
                }
                next
            };
            match next {
                Some(deadline) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        () = wakeup.notified() => {}
                    }
                }
                None => wakeup.notified().await,
            }
        }
    }))
}
