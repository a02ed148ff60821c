//! Consumer idempotency: post-success dedupe keyed on `meta.id`, under at-least-once delivery.
//!
//! Not exactly-once delivery and not an in-flight lock: two concurrent deliveries of one id may
//! both run; a redelivery after a success is skipped.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::error::{Error, Result};

/// A record of message ids already processed.
pub trait IdempotencyStore {
    /// Whether `id` was processed (remembered).
    ///
    /// # Errors
    /// [`Error::Store`] when the store cannot answer; the message should then be retried.
    fn seen(&self, id: &str) -> Result<bool>;
    /// Records `id` as processed.
    ///
    /// # Errors
    /// [`Error::Store`] when the store cannot record it.
    fn remember(&self, id: &str) -> Result<()>;
    /// Drops `id` (manual replay, expiry).
    ///
    /// # Errors
    /// [`Error::Store`] when the store cannot drop it.
    fn forget(&self, id: &str) -> Result<()>;
}

/// A process-local, thread-safe store for tests and single-process consumers.
#[derive(Debug, Default)]
pub struct InMemoryStore {
    ids: Mutex<HashSet<String>>,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl IdempotencyStore for InMemoryStore {
    fn seen(&self, id: &str) -> Result<bool> {
        Ok(self.ids().contains(id))
    }

    fn remember(&self, id: &str) -> Result<()> {
        self.ids().insert(id.to_owned());
        Ok(())
    }

    fn forget(&self, id: &str) -> Result<()> {
        self.ids().remove(id);
        Ok(())
    }
}

/// What the guard decided for one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect<T> {
    /// The handler ran and succeeded.
    Ran(T),
    /// The id was already processed: the handler did not run; ack the delivery.
    Skipped,
}

/// The first half of the guard, for runtimes whose handler runs elsewhere (async): whether to run
/// the handler for `meta_id`. No usable id (`None` or empty) always runs (fail open).
///
/// # Errors
/// The store's error: retry the message.
pub fn should_run(store: &dyn IdempotencyStore, meta_id: Option<&str>) -> Result<bool> {
    match meta_id.filter(|id| !id.is_empty()) {
        None => Ok(true),
        Some(id) => Ok(!store.seen(id)?),
    }
}

/// The second half of the guard, after the handler succeeded: remember `meta_id`. Best effort: a
/// failed remember is logged, not returned (it is the documented at-least-once window).
pub fn record_success(store: &dyn IdempotencyStore, meta_id: Option<&str>) {
    if let Some(id) = meta_id.filter(|id| !id.is_empty())
        && let Err(error) = store.remember(id)
    {
        tracing::warn!(meta_id = id, error = %polyq_amqp::error_chain(&error), "could not remember a processed message id; a redelivery would run it again");
    }
}

/// Runs `handler` unless `meta_id` was already processed; remembers the id only on success.
///
/// # Errors
/// The store's lookup error (retry), or the handler's own error (the id stays unmarked, so
/// retries and dead-lettering still apply).
///
/// ```
/// use babelqueue::idempotency::{Effect, InMemoryStore, run_once};
///
/// let store = InMemoryStore::new();
/// let first = run_once(&store, Some("id-A"), || Ok::<_, babelqueue::Error>(1)).unwrap();
/// let second = run_once(&store, Some("id-A"), || Ok::<_, babelqueue::Error>(2)).unwrap();
/// assert_eq!((first, second), (Effect::Ran(1), Effect::Skipped));
/// ```
pub fn run_once<T, E: From<Error>>(
    store: &dyn IdempotencyStore,
    meta_id: Option<&str>,
    handler: impl FnOnce() -> std::result::Result<T, E>,
) -> std::result::Result<Effect<T>, E> {
    if !should_run(store, meta_id)? {
        return Ok(Effect::Skipped);
    }
    let value = handler()?;
    record_success(store, meta_id);
    Ok(Effect::Ran(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Broken;
    impl IdempotencyStore for Broken {
        fn seen(&self, _: &str) -> Result<bool> {
            Err(Error::Store("down".into()))
        }
        fn remember(&self, _: &str) -> Result<()> {
            Err(Error::Store("down".into()))
        }
        fn forget(&self, _: &str) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn failure_leaves_the_id_unmarked() {
        let store = InMemoryStore::new();
        let failed = run_once(&store, Some("a"), || {
            Err::<(), _>(Error::Store("handler".into()))
        });
        assert!(failed.is_err());
        assert_eq!(
            run_once(&store, Some("a"), || Ok::<_, Error>(())).unwrap(),
            Effect::Ran(())
        );
        assert_eq!(
            run_once(&store, Some("a"), || Ok::<_, Error>(())).unwrap(),
            Effect::Skipped
        );
        store.forget("a").unwrap();
        assert_eq!(
            run_once(&store, Some("a"), || Ok::<_, Error>(())).unwrap(),
            Effect::Ran(())
        );
    }

    #[test]
    fn missing_id_fails_open_and_lookup_errors_surface() {
        let store = InMemoryStore::new();
        for _ in 0..2 {
            assert_eq!(
                run_once(&store, Some(""), || Ok::<_, Error>(())).unwrap(),
                Effect::Ran(())
            );
            assert_eq!(
                run_once(&store, None, || Ok::<_, Error>(())).unwrap(),
                Effect::Ran(())
            );
        }
        assert!(matches!(
            run_once(&Broken, Some("a"), || Ok::<_, Error>(())),
            Err(Error::Store(_))
        ));
    }
}
