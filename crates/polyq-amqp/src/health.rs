//! The state of a client's connection, for health endpoints and for code that waits for it.

use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

/// Where a client's connection stands; see [`Client::health`](crate::Client::health) and
/// [`Client::health_watch`](crate::Client::health_watch).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Health {
    /// Connected: operations go straight to the broker.
    Up {
        /// When this connection was established.
        since: SystemTime,
        /// Which connection this is: 0 for the first, one more after each recovery.
        generation: u64,
        /// The broker's reason while it blocks publishing on this connection
        /// (`connection.blocked`, for instance on a memory or disk alarm); `None` otherwise.
        /// Publishes not sent yet wait while it is blocked, up to
        /// [`ClientOptions::blocked_timeout`](crate::ClientOptions::blocked_timeout); confirms
        /// of those already sent wait for the block to lift; consuming carries on.
        blocked: Option<String>,
    },
    /// The connection was lost and is being re-established; operations wait for it (up to
    /// [`ClientOptions::recovery_wait`](crate::ClientOptions::recovery_wait)).
    Recovering {
        /// When the connection was lost.
        since: SystemTime,
        /// Reconnect attempts that failed so far.
        attempts: u32,
        /// The latest failure (the loss itself, then each failed attempt), credentials
        /// redacted; `None` when the connection went without saying why.
        last_error: Option<String>,
    },
    /// Closed by the application; it stays closed.
    Closed,
}

impl Health {
    /// Whether the connection is up (blocked or not).
    pub fn is_up(&self) -> bool {
        matches!(self, Health::Up { .. })
    }

    /// The broker's reason while it blocks publishing on the connection.
    pub fn blocked(&self) -> Option<&str> {
        match self {
            Health::Up { blocked, .. } => blocked.as_deref(),
            _ => None,
        }
    }
}

/// Keeps a client's [`Health`] and tells its watchers about every change. Once closed it stays
/// closed, whatever a late recovery step reports.
#[derive(Debug)]
pub(crate) struct HealthTracker {
    sender: watch::Sender<Health>,
}

// The embedded broker is only ever up or closed; the other transitions belong to `amqp://`.
#[cfg_attr(not(feature = "amqp"), allow(dead_code))]
impl HealthTracker {
    /// A tracker of a connection just established.
    pub(crate) fn up(generation: u64) -> Self {
        Self {
            sender: watch::Sender::new(Health::Up {
                since: SystemTime::now(),
                generation,
                blocked: None,
            }),
        }
    }

    pub(crate) fn current(&self) -> Health {
        self.sender.borrow().clone()
    }

    pub(crate) fn watch(&self) -> watch::Receiver<Health> {
        self.sender.subscribe()
    }

    /// A connection is up: the first, or a new one after a loss.
    pub(crate) fn connected(&self, generation: u64) {
        self.update(|_| {
            Some(Health::Up {
                since: SystemTime::now(),
                generation,
                blocked: None,
            })
        });
    }

    /// The connection was lost, for `error` when known.
    pub(crate) fn lost(&self, error: Option<String>) {
        self.update(|_| {
            Some(Health::Recovering {
                since: SystemTime::now(),
                attempts: 0,
                last_error: error,
            })
        });
    }

    /// One reconnect attempt failed with `error`.
    pub(crate) fn attempt_failed(&self, error: String) {
        self.update(|health| match health {
            Health::Recovering {
                since, attempts, ..
            } => Some(Health::Recovering {
                since: *since,
                attempts: attempts.saturating_add(1),
                last_error: Some(error),
            }),
            _ => None,
        });
    }

    /// The broker blocked (`Some(reason)`) or unblocked (`None`) the connection.
    pub(crate) fn blocked(&self, reason: Option<String>) {
        self.update(|health| match health {
            Health::Up {
                since, generation, ..
            } => Some(Health::Up {
                since: *since,
                generation: *generation,
                blocked: reason,
            }),
            _ => None,
        });
    }

    pub(crate) fn closed(&self) {
        self.update(|_| Some(Health::Closed));
    }

    /// Replaces the health with what `next` makes of it, unless it is `None` or the client
    /// was closed.
    fn update(&self, next: impl FnOnce(&Health) -> Option<Health>) {
        self.sender.send_if_modified(|health| {
            if *health == Health::Closed {
                return false;
            }
            match next(health) {
                Some(new) if new != *health => {
                    *health = new;
                    true
                }
                _ => false,
            }
        });
    }
}

/// A time limit that stands still while the broker blocks the connection: `limit` counted
/// only over time the connection was not blocked. A block is the broker holding publishes
/// back until it has memory or disk again, not a loss: what it holds is answered once the
/// alarm clears, so a bound on waiting for that answer must not run out meanwhile, or the
/// caller sends again what the broker will still enqueue.
pub(crate) struct UnblockedDeadline {
    health: watch::Receiver<Health>,
    /// When the limit passes if no further block comes.
    at: Instant,
    /// Since when the connection has been blocked, while it is.
    blocked_since: Option<Instant>,
}

// Publishes on `amqp://` track blocks; the embedded broker never blocks.
#[cfg_attr(not(feature = "amqp"), allow(dead_code))]
impl UnblockedDeadline {
    /// `limit` from now, on the connection `health` watches.
    pub(crate) fn new(mut health: watch::Receiver<Health>, limit: Duration) -> Self {
        let now = Instant::now();
        let blocked_since = health
            .borrow_and_update()
            .blocked()
            .is_some()
            .then_some(now);
        Self {
            health,
            at: now + limit,
            blocked_since,
        }
    }

    /// Takes note of a block that began or ended since the last look.
    fn observe(&mut self) {
        let blocked = self.health.borrow_and_update().blocked().is_some();
        match (self.blocked_since, blocked) {
            (None, true) => self.blocked_since = Some(Instant::now()),
            (Some(since), false) => {
                self.at += since.elapsed();
                self.blocked_since = None;
            }
            _ => {}
        }
    }

    /// When the limit passes as things stand: later by every block so far, and by the one
    /// under way.
    pub(crate) fn at(&mut self) -> Instant {
        self.observe();
        match self.blocked_since {
            Some(since) => self.at + since.elapsed(),
            None => self.at,
        }
    }

    /// Keeps note of every block; never resolves. Poll it beside the wait it bounds, so that
    /// a block that begins and ends meanwhile is counted.
    pub(crate) async fn track(&mut self) -> Infallible {
        loop {
            self.changed().await;
            self.observe();
        }
    }

    /// Resolves once the limit has passed.
    pub(crate) async fn passed(&mut self) {
        loop {
            self.observe();
            if self.blocked_since.is_some() {
                self.changed().await;
                continue;
            }
            if Instant::now() >= self.at {
                return;
            }
            let at = self.at;
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = self.changed() => {}
            }
        }
    }

    /// The next change of the health. The tracker lives as long as the client, so one that
    /// is gone (a client dropped) never changes again.
    async fn changed(&mut self) {
        if self.health.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// `future`, unless `limit` of time during which the connection `health` watches was not
/// blocked passes first (`None`).
pub(crate) async fn unblocked_timeout<F: Future>(
    health: watch::Receiver<Health>,
    limit: Duration,
    future: F,
) -> Option<F::Output> {
    let mut deadline = UnblockedDeadline::new(health, limit);
    tokio::select! {
        biased;
        output = future => Some(output),
        () = deadline.passed() => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generation(health: &Health) -> Option<u64> {
        match health {
            Health::Up { generation, .. } => Some(*generation),
            _ => None,
        }
    }

    #[test]
    fn recovery_counts_attempts_from_the_loss_and_ends_up_again() {
        let tracker = HealthTracker::up(0);
        tracker.lost(Some("connection reset".to_owned()));
        let Health::Recovering { since: lost_at, .. } = tracker.current() else {
            panic!("expected recovering, got {:?}", tracker.current());
        };
        tracker.attempt_failed("refused".to_owned());
        tracker.attempt_failed("refused again".to_owned());
        match tracker.current() {
            Health::Recovering {
                since,
                attempts,
                last_error,
            } => {
                assert_eq!(since, lost_at);
                assert_eq!(attempts, 2);
                assert_eq!(last_error.as_deref(), Some("refused again"));
            }
            other => panic!("expected recovering, got {other:?}"),
        }
        tracker.connected(1);
        assert_eq!(generation(&tracker.current()), Some(1));
    }

    #[test]
    fn blocking_is_part_of_the_up_state_only() {
        let tracker = HealthTracker::up(3);
        tracker.blocked(Some("low on memory".to_owned()));
        assert_eq!(tracker.current().blocked(), Some("low on memory"));
        assert_eq!(generation(&tracker.current()), Some(3));
        tracker.blocked(None);
        assert_eq!(tracker.current().blocked(), None);

        tracker.blocked(Some("low on disk".to_owned()));
        tracker.lost(None);
        tracker.blocked(Some("low on disk".to_owned()));
        assert_eq!(tracker.current().blocked(), None, "{:?}", tracker.current());
        tracker.connected(4);
        assert_eq!(
            tracker.current().blocked(),
            None,
            "a new connection starts unblocked"
        );
    }

    #[test]
    fn closed_stays_closed() {
        let tracker = HealthTracker::up(0);
        let mut watcher = tracker.watch();
        tracker.closed();
        assert!(watcher.has_changed().unwrap());
        assert_eq!(*watcher.borrow_and_update(), Health::Closed);
        tracker.connected(1);
        tracker.lost(None);
        assert_eq!(tracker.current(), Health::Closed);
        assert!(!watcher.has_changed().unwrap(), "no change after close");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unblocked_deadline_stands_still_while_the_connection_is_blocked() {
        let tracker = HealthTracker::up(0);
        let started = Instant::now();
        let mut deadline = UnblockedDeadline::new(tracker.watch(), Duration::from_secs(30));
        let blocking = async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            tracker.blocked(Some("low on memory".to_owned()));
            tokio::time::sleep(Duration::from_secs(45)).await;
            tracker.blocked(None);
            tokio::time::sleep(Duration::from_secs(5)).await;
            tracker.blocked(Some("low on disk".to_owned()));
            tokio::time::sleep(Duration::from_secs(5)).await;
            tracker.lost(None);
            std::future::pending::<()>().await;
        };
        tokio::select! {
            () = deadline.passed() => {}
            () = blocking => unreachable!("the blocking side never ends"),
        }
        // 30 s unblocked: 10 before the first block, 5 between, 15 after the loss ended the
        // second; 50 s blocked.
        assert_eq!(started.elapsed(), Duration::from_secs(80));
        assert_eq!(deadline.at(), started + Duration::from_secs(80));
    }

    #[tokio::test(start_paused = true)]
    async fn a_tracked_deadline_counts_a_block_that_ended_before_it_was_asked() {
        let tracker = HealthTracker::up(0);
        let started = Instant::now();
        let mut deadline = UnblockedDeadline::new(tracker.watch(), Duration::from_secs(30));
        let blocking = async {
            tracker.blocked(Some("low on memory".to_owned()));
            tokio::time::sleep(Duration::from_secs(40)).await;
            tracker.blocked(None);
        };
        tokio::select! {
            never = deadline.track() => match never {},
            () = blocking => {}
        }
        assert_eq!(deadline.at(), started + Duration::from_secs(70));
        let timed_out = unblocked_timeout(
            tracker.watch(),
            Duration::from_secs(1),
            std::future::pending::<()>(),
        )
        .await;
        assert_eq!(timed_out, None);
        assert_eq!(started.elapsed(), Duration::from_secs(41));
    }
}
