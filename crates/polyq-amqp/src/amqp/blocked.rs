//! Publishing while the broker blocks the connection (`connection.blocked`, on a memory or disk
//! alarm). RabbitMQ stops reading a blocked connection's socket, so without a bound a publish
//! would wait for its confirm as long as the alarm lasts. Publishes wait up to
//! `ClientOptions::blocked_timeout` for the block to lift instead, then fail with
//! `Error::Blocked`, as the Java library does.

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

/// Resolves to the broker's reason once one block of the connection has lasted `timeout`;
/// pending as long as no block does.
pub(super) async fn blocked_for(mut health: watch::Receiver<Health>, timeout: Duration) -> String {
    loop {
        // The tracker lives as long as the client that owns this publish, so an error (its
        // sender gone) only comes with a closed client, whose confirms fail on their own.
        if health.wait_for(|h| h.blocked().is_some()).await.is_err() {
            return std::future::pending().await;
        }
        if let Err(reason) = unblocked_within(&mut health, timeout).await {
            return reason;
        }
    }
}

/// The error of a publish the block outlasted.
pub(super) fn error(
    exchange: String,
    reason: String,
    timeout: Duration,
    may_have_been_published: bool,
) -> crate::Error {
    crate::Error::Blocked {
        exchange,
        reason,
        waited_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        may_have_been_published,
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

    #[tokio::test(start_paused = true)]
    async fn only_a_block_as_long_as_the_timeout_fails_a_pending_confirm() {
        let tracker = HealthTracker::up(0);
        let outlasted = blocked_for(tracker.watch(), Duration::from_secs(30));
        let blocking = async {
            tracker.blocked(Some("low on memory".to_owned()));
            tokio::time::sleep(Duration::from_secs(20)).await;
            tracker.blocked(None);
            tokio::time::sleep(Duration::from_secs(60)).await;
            tracker.blocked(Some("low on disk".to_owned()));
            std::future::pending::<()>().await;
        };
        let started = tokio::time::Instant::now();
        let reason = tokio::select! {
            reason = outlasted => reason,
            () = blocking => unreachable!("the blocking side never ends"),
        };
        assert_eq!(reason, "low on disk");
        assert_eq!(started.elapsed(), Duration::from_secs(110));
    }
}
