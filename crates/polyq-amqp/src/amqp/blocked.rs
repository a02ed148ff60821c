//! Publishing while the broker blocks the connection (`connection.blocked`, on a memory or disk
//! alarm). RabbitMQ stops reading a blocked connection's socket until the alarm clears. A
//! publish not sent yet waits up to `ClientOptions::blocked_timeout` for the block to lift,
//! then fails with `Error::Blocked`, unsent, so sending it again duplicates nothing. One already
//! sent waits for the broker's answer, which comes once the alarm clears (see
//! `health::UnblockedDeadline`).

use std::time::Duration;

use tokio::sync::watch;

use crate::health::Health;

/// Waits until the connection is not blocked, up to `timeout`; the broker's reason when the
/// block lasted all of it. A lost or closed connection is not blocked: recovery deals with it.
pub(super) async fn unblocked_within(
    health: &mut watch::Receiver<Health>,
    timeout: Duration,
) -> Result<(), String> {
    let Some(reason) = health.borrow_and_update().blocked().map(str::to_owned) else {
        return Ok(());
    };
    let lifted = tokio::time::timeout(timeout, async {
        drop(health.wait_for(|h| h.blocked().is_none()).await);
    })
    .await;
    match lifted {
        Ok(()) => Ok(()),
        Err(_) => Err(health.borrow().blocked().map_or(reason, str::to_owned)),
    }
}

/// The error of a publish the block outlasted.
pub(super) fn error(exchange: String, reason: String, timeout: Duration) -> crate::Error {
    crate::Error::Blocked {
        exchange,
        reason,
        waited_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthTracker;

    #[tokio::test(start_paused = true)]
    async fn a_publish_waits_for_the_block_to_lift() {
        let tracker = HealthTracker::up(0);
        let mut health = tracker.watch();
        assert_eq!(
            unblocked_within(&mut health, Duration::from_secs(1)).await,
            Ok(())
        );
        tracker.blocked(Some("low on memory".to_owned()));
        let waiting = unblocked_within(&mut health, Duration::from_secs(30));
        let lifting = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            tracker.blocked(None);
        };
        let (waited, ()) = tokio::join!(waiting, lifting);
        assert_eq!(waited, Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_block_that_outlasts_the_timeout_names_the_latest_reason() {
        let tracker = HealthTracker::up(0);
        tracker.blocked(Some("low on memory".to_owned()));
        let mut health = tracker.watch();
        let waiting = unblocked_within(&mut health, Duration::from_secs(30));
        let changing = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            tracker.blocked(Some("low on disk".to_owned()));
        };
        let (waited, ()) = tokio::join!(waiting, changing);
        assert_eq!(waited, Err("low on disk".to_owned()));
    }
}
