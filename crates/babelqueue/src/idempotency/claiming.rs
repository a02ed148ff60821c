//! The claiming contract (PHP's `ClaimingStore` and `ClaimingDispatch`): claim before running,
//! commit after success, release after failure, so that of concurrent deliveries of one id
//! exactly one runs.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Effect, IdempotencyStore, Refusal, StoreFuture, usable};
use crate::error::Error;

/// What a claim found ([`ClaimingStore::try_claim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This caller holds the claim: the handler runs.
    Won,
    /// The id was committed: a duplicate, skipped without running the handler.
    Committed,
    /// Another consumer holds a live claim and has not committed yet (or the row changed while
    /// it was looked at): the next try decides.
    Held,
}

/// A seen-set with an atomic in-flight claim.
///
/// Per id: [`claim`](Self::claim) answers `true` to exactly one caller while no live claim and
/// no commit exist; [`IdempotencyStore::remember`] commits (permanent until
/// [`IdempotencyStore::forget`]); [`IdempotencyStore::seen`] is true only for a commit, never for
/// a claim in flight; [`release`](Self::release) drops an uncommitted claim and leaves a commit
/// alone.
pub trait ClaimingStore: IdempotencyStore {
    /// Claims `id` for `ttl` (after which an uncommitted claim may be taken again: the backstop
    /// for a consumer that died holding it). Whether this caller won it.
    ///
    /// # Errors
    /// When the store cannot answer.
    fn claim<'a>(&'a self, id: &'a str, ttl: Duration) -> StoreFuture<'a, bool>;
    /// Claims `id` as [`claim`](Self::claim) does and, when the claim is lost, tells a commit
    /// from a claim in flight: the one store call [`run_claimed`] makes before the handler, where
    /// a lookup then a claim would be two. The default claims, then looks up only an id whose
    /// claim it lost; a store that can tell both at once overrides it.
    ///
    /// # Errors
    /// When the store cannot answer.
    fn try_claim<'a>(&'a self, id: &'a str, ttl: Duration) -> StoreFuture<'a, Claim> {
        Box::pin(async move {
            if self.claim(id, ttl).await? {
                Ok(Claim::Won)
            } else if self.seen(id).await? {
                Ok(Claim::Committed)
            } else {
                Ok(Claim::Held)
            }
        })
    }
    /// Drops an uncommitted claim on `id`, so a redelivery runs at once instead of after the
    /// claim's TTL. A commit stays.
    ///
    /// # Errors
    /// When the store cannot answer.
    fn release<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()>;
}

/// Runs `handler` for `meta_id` unless it was committed, after winning the claim on it.
///
/// The claim comes first ([`ClaimingStore::try_claim`]): it both takes a free id and tells a
/// committed one (skipped) from one held by another consumer. A duplicate that finds the claim
/// held waits, trying again with a growing pause (up to half a second), until the winner commits
/// (then it is skipped), releases (then it claims and runs), or `max_wait` passes (then it is
/// refused with [`Refusal::InProgress`], to be delivered again). No usable id runs unguarded.
/// After success the id is committed (best effort, as [`super::record_success`]); after a
/// failure the claim is released (best effort: the claim's TTL is the backstop).
///
/// # Errors
/// [`Refusal::Store`] when the store cannot answer, [`Refusal::InProgress`] when the claim stayed
/// with another consumer;
/// [`Refusal::Handler`] with the handler's error.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use babelqueue::idempotency::{Effect, InMemoryClaimingStore, run_claimed};
///
/// let store = InMemoryClaimingStore::new();
/// let ttl = Duration::from_secs(60);
/// let wait = Duration::from_secs(1);
/// let first = run_claimed(&store, Some("id-A"), ttl, wait, async { Ok::<_, String>(1) }).await;
/// let second = run_claimed(&store, Some("id-A"), ttl, wait, async { Ok::<_, String>(2) }).await;
/// assert_eq!((first.unwrap(), second.unwrap()), (Effect::Ran(1), Effect::Skipped));
/// # }
/// ```
pub async fn run_claimed<T, E>(
    store: &dyn ClaimingStore,
    meta_id: Option<&str>,
    claim_ttl: Duration,
    max_wait: Duration,
    handler: impl Future<Output = std::result::Result<T, E>>,
) -> std::result::Result<Effect<T>, Refusal<E>> {
    claimed(store, None, meta_id, claim_ttl, max_wait, handler).await
}

/// Releases a won claim when the handler's future is dropped before it finished (a stop that
/// could not wait for it), so the redelivery does not wait out the claim's TTL.
struct Abandoned {
    store: Arc<dyn ClaimingStore>,
    id: String,
    armed: bool,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, id) = (self.store.clone(), std::mem::take(&mut self.id));
        runtime.spawn(async move {
            if let Err(error) = store.release(&id).await {
                tracing::warn!(meta_id = %id, error = %polyq_amqp::error_chain(&error), "could not release the claim of an interrupted handler; a redelivery waits until the claim expires");
            }
        });
    }
}

/// [`run_claimed`], and with `owned` (the same store) the claim is also released when the
/// future is dropped while the handler runs.
pub(super) async fn claimed<T, E>(
    store: &dyn ClaimingStore,
    owned: Option<&Arc<dyn ClaimingStore>>,
    meta_id: Option<&str>,
    claim_ttl: Duration,
    max_wait: Duration,
    handler: impl Future<Output = std::result::Result<T, E>>,
) -> std::result::Result<Effect<T>, Refusal<E>> {
    let Some(id) = usable(meta_id) else {
        return handler.await.map(Effect::Ran).map_err(Refusal::Handler);
    };
    let deadline = Instant::now() + max_wait;
    let mut pause = Duration::from_millis(10);
    loop {
        match store
            .try_claim(id, claim_ttl)
            .await
            .map_err(Refusal::Store)?
        {
            Claim::Won => break,
            Claim::Committed => return Ok(Effect::Skipped),
            Claim::Held => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Refusal::InProgress(Error::Store(format!(
                "another consumer holds the claim on this message id and did not finish within {max_wait:?}; the message is delivered again later"
            ))));
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
    let mut abandoned = owned.map(|store| Abandoned {
        store: store.clone(),
        id: id.to_owned(),
        armed: true,
    });
    let handled = handler.await;
    if let Some(abandoned) = abandoned.as_mut() {
        abandoned.armed = false;
    }
    match handled {
        Ok(value) => {
            super::record_success(store, Some(id)).await;
            Ok(Effect::Ran(value))
        }
        Err(error) => {
            if let Err(release) = store.release(id).await {
                tracing::warn!(meta_id = id, error = %polyq_amqp::error_chain(&release), "could not release the claim of a failed handler; a redelivery waits until the claim expires");
            }
            Err(Refusal::Handler(error))
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum State {
    Claimed { until: Instant },
    Committed,
}

/// A process-local [`ClaimingStore`]: concurrent workers of one process share it.
#[derive(Debug, Default)]
pub struct InMemoryClaimingStore {
    ids: Mutex<HashMap<String, State>>,
}

impl InMemoryClaimingStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashMap<String, State>> {
        self.ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(Ok(value)))
}

impl IdempotencyStore for InMemoryClaimingStore {
    fn seen<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        ready(matches!(self.ids().get(id), Some(State::Committed)))
    }

    fn remember<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        self.ids().insert(id.to_owned(), State::Committed);
        ready(())
    }

    fn forget<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        self.ids().remove(id);
        ready(())
    }
}

impl ClaimingStore for InMemoryClaimingStore {
    fn claim<'a>(&'a self, id: &'a str, ttl: Duration) -> StoreFuture<'a, bool> {
        let now = Instant::now();
        let mut ids = self.ids();
        let won = match ids.get(id) {
            Some(State::Committed) => false,
            Some(State::Claimed { until }) if *until > now => false,
            _ => {
                ids.insert(id.to_owned(), State::Claimed { until: now + ttl });
                true
            }
        };
        ready(won)
    }

    fn release<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        let mut ids = self.ids();
        if matches!(ids.get(id), Some(State::Claimed { .. })) {
            ids.remove(id);
        }
        ready(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    const TTL: Duration = Duration::from_secs(60);
    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn a_duplicate_waits_for_the_winner_and_is_then_skipped() {
        let store = Arc::new(InMemoryClaimingStore::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let (started, running) = tokio::sync::oneshot::channel();
        let (finish, finished) = tokio::sync::oneshot::channel::<()>();
        let winner = {
            let (store, runs) = (store.clone(), runs.clone());
            tokio::spawn(async move {
                run_claimed(store.as_ref(), Some("a"), TTL, WAIT, async {
                    runs.fetch_add(1, Ordering::SeqCst);
                    started.send(()).unwrap();
                    finished.await.unwrap();
                    Ok::<_, String>(())
                })
                .await
                .unwrap()
            })
        };
        running.await.unwrap();
        let duplicate = {
            let (store, runs) = (store.clone(), runs.clone());
            tokio::spawn(async move {
                run_claimed(store.as_ref(), Some("a"), TTL, WAIT, async {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(())
                })
                .await
                .unwrap()
            })
        };
        assert!(!store.seen("a").await.unwrap(), "a claim is not a commit");
        finish.send(()).unwrap();
        assert_eq!(winner.await.unwrap(), Effect::Ran(()));
        assert_eq!(duplicate.await.unwrap(), Effect::Skipped);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_failure_releases_the_claim_and_a_held_claim_refuses_after_the_wait() {
        let store = InMemoryClaimingStore::new();
        let failed = run_claimed(&store, Some("a"), TTL, WAIT, async { Err::<(), _>("no") }).await;
        assert!(matches!(failed, Err(Refusal::Handler("no"))));
        assert!(
            store.claim("a", TTL).await.unwrap(),
            "released after the failure"
        );
        let refused = run_claimed(&store, Some("a"), TTL, Duration::ZERO, async {
            Ok::<_, String>(())
        })
        .await;
        assert!(matches!(refused, Err(Refusal::InProgress(Error::Store(_)))));
        store.release("a").await.unwrap();
        store.remember("a").await.unwrap();
        store.release("a").await.unwrap();
        assert!(
            store.seen("a").await.unwrap(),
            "release leaves a commit alone"
        );
        assert!(!store.claim("a", TTL).await.unwrap());
    }

    /// Counts the calls a run makes, answering from an in-memory store.
    #[derive(Default)]
    struct Counted {
        inner: InMemoryClaimingStore,
        seen: AtomicUsize,
        claim: AtomicUsize,
        remember: AtomicUsize,
    }

    impl IdempotencyStore for Counted {
        fn seen<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
            self.seen.fetch_add(1, Ordering::SeqCst);
            self.inner.seen(id)
        }
        fn remember<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
            self.remember.fetch_add(1, Ordering::SeqCst);
            self.inner.remember(id)
        }
        fn forget<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
            self.inner.forget(id)
        }
    }

    impl ClaimingStore for Counted {
        fn claim<'a>(&'a self, id: &'a str, ttl: Duration) -> StoreFuture<'a, bool> {
            self.claim.fetch_add(1, Ordering::SeqCst);
            self.inner.claim(id, ttl)
        }
        fn release<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
            self.inner.release(id)
        }
    }

    #[tokio::test]
    async fn a_new_id_costs_a_claim_and_a_commit_and_a_duplicate_a_lookup_more() {
        let store = Counted::default();
        let calls = |store: &Counted| {
            [&store.claim, &store.seen, &store.remember].map(|n| n.load(Ordering::SeqCst))
        };
        let ran = run_claimed(&store, Some("a"), TTL, WAIT, async { Ok::<_, String>(()) }).await;
        assert_eq!(ran.unwrap(), Effect::Ran(()));
        assert_eq!(calls(&store), [1, 0, 1], "claim, lookup, commit");
        let skipped =
            run_claimed(&store, Some("a"), TTL, WAIT, async { Ok::<_, String>(()) }).await;
        assert_eq!(skipped.unwrap(), Effect::Skipped);
        assert_eq!(calls(&store), [2, 1, 1], "claim, lookup, commit");
    }

    #[tokio::test]
    async fn try_claim_tells_a_commit_from_a_claim_in_flight() {
        let store = InMemoryClaimingStore::new();
        assert_eq!(store.try_claim("a", TTL).await.unwrap(), Claim::Won);
        assert_eq!(store.try_claim("a", TTL).await.unwrap(), Claim::Held);
        store.remember("a").await.unwrap();
        assert_eq!(store.try_claim("a", TTL).await.unwrap(), Claim::Committed);
        store.forget("a").await.unwrap();
        assert_eq!(store.try_claim("a", TTL).await.unwrap(), Claim::Won);
    }

    #[tokio::test]
    async fn an_expired_claim_can_be_taken_over() {
        let store = InMemoryClaimingStore::new();
        assert!(store.claim("a", Duration::ZERO).await.unwrap());
        assert!(store.claim("a", TTL).await.unwrap());
        assert!(!store.claim("a", TTL).await.unwrap());
    }

    #[tokio::test]
    async fn a_handler_dropped_mid_run_releases_its_claim() {
        let store: Arc<dyn ClaimingStore> = Arc::new(InMemoryClaimingStore::new());
        let (started, running) = tokio::sync::oneshot::channel();
        let task = {
            let store = store.clone();
            tokio::spawn(async move {
                claimed(store.as_ref(), Some(&store), Some("a"), TTL, WAIT, async {
                    started.send(()).unwrap();
                    std::future::pending::<Result<(), String>>().await
                })
                .await
            })
        };
        running.await.unwrap();
        assert!(!store.claim("a", TTL).await.unwrap(), "held while it runs");
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        // The release runs on a task of its own; it is done by the time that task yields back.
        let mut released = false;
        for _ in 0..100 {
            if store.claim("a", TTL).await.unwrap() {
                released = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(released, "the interrupted handler's claim was released");
    }
}
