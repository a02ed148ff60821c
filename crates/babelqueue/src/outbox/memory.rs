//! The outbox in the process: the embedded default beside `memory://`, and the test of the
//! relay's semantics without a database.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use polyq_runtime::outbox::OutboxStatus;

use crate::Envelope;
use crate::outbox::{Failure, OutboxError, OutboxRecord, OutboxStore, encoded};

/// Encoded envelopes saved in this process, drained by an [`OutboxRelay`](super::OutboxRelay).
/// A [`MemoryTransaction`] stands for the application's transaction: what it writes reaches
/// the store all at once on [`MemoryTransaction::commit`], and nothing of it when it is dropped
/// or rolled back. Rows are claimed under a lease, marked published or failed, and backed off
/// exactly as in `PgOutboxStore`; they do not outlive the process.
/// Clones share the rows.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use babelqueue::outbox::{MemoryOutboxStore, OutboxRelay};
/// use babelqueue::{BabelQueue, MakeOptions, make};
///
/// let store = MemoryOutboxStore::new();
/// let mut tx = store.begin();
/// let job = make(
///     "urn:babel:orders:created",
///     &serde_json::json!({"id": 7}),
///     MakeOptions::default().queue("orders"),
/// )?;
/// tx.write(&job)?;
/// tx.commit();
///
/// let queue = BabelQueue::connect("memory://doc-outbox").await?;
/// let relayed = OutboxRelay::new(store, queue.transport().clone()).drain(10).await?;
/// assert_eq!(relayed.published, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MemoryOutboxStore {
    rows: Arc<Mutex<Rows>>,
    lease: Duration,
}

impl Default for MemoryOutboxStore {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, Default)]
struct Rows {
    by_id: BTreeMap<i64, Row>,
    next_id: i64,
}

#[derive(Debug)]
struct Row {
    queue: String,
    body: String,
    created: Instant,
    status: Status,
    attempts: i32,
    last_error: Option<String>,
    locked_until: Option<Instant>,
    /// When the binding accepted it, once it did.
    published_at: Option<Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pending,
    Published,
    Failed,
}

/// Saves envelopes for a [`MemoryOutboxStore`], all of them or none.
#[derive(Debug)]
#[must_use = "nothing reaches the outbox until commit"]
pub struct MemoryTransaction {
    store: MemoryOutboxStore,
    staged: Vec<(String, String)>,
}

impl MemoryOutboxStore {
    /// An empty store whose claims hold for 60 s, as `PgOutboxStore`'s.
    pub fn new() -> Self {
        Self {
            rows: Arc::default(),
            lease: Duration::from_secs(60),
        }
    }

    /// How long a claimed batch is held before another relay may claim it (default 60 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// A transaction to save envelopes in.
    pub fn begin(&self) -> MemoryTransaction {
        MemoryTransaction {
            store: self.clone(),
            staged: Vec::new(),
        }
    }

    /// Saves bytes as they are, for `queue`, in a transaction of their own: what another writer
    /// (another SDK, a migration) might have left in the table, malformed or not.
    pub fn save_raw(&self, body: &str, queue: &str) -> i64 {
        self.lock().insert(queue.to_owned(), body.to_owned())
    }

    /// The reason the last publish of row `id` failed, if it failed.
    pub fn last_error(&self, id: i64) -> Option<String> {
        self.lock()
            .by_id
            .get(&id)
            .and_then(|row| row.last_error.clone())
    }

    /// Removes the rows published more than `older_than` ago, and returns how many: a
    /// long-running process keeps no more than its retention.
    pub fn purge_published(&self, older_than: Duration) -> u64 {
        let mut rows = self.lock();
        let before = rows.by_id.len();
        rows.by_id
            .retain(|_, row| row.published_at.is_none_or(|at| at.elapsed() < older_than));
        (before - rows.by_id.len()) as u64
    }

    fn lock(&self) -> MutexGuard<'_, Rows> {
        // Every change under the lock is one step: a panic elsewhere leaves the rows whole.
        self.rows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Rows {
    fn insert(&mut self, queue: String, body: String) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.by_id.insert(
            id,
            Row {
                queue,
                body,
                created: Instant::now(),
                status: Status::Pending,
                attempts: 0,
                last_error: None,
                locked_until: None,
                published_at: None,
            },
        );
        id
    }
}

impl MemoryTransaction {
    /// Encodes `envelope` with the frozen codec and stages the bytes for its `meta.queue` (else
    /// `default`), as `Outbox::write` does in a database transaction.
    ///
    /// # Errors
    /// [`OutboxError::Encode`] when the envelope cannot be encoded; nothing is staged.
    pub fn write(&mut self, envelope: &Envelope) -> Result<(), OutboxError> {
        let (body, queue) = encoded(envelope)?;
        self.staged.push((queue.to_owned(), body));
        Ok(())
    }

    /// Adds every staged envelope to the store at once.
    pub fn commit(self) {
        let mut rows = self.store.lock();
        for (queue, body) in self.staged {
            rows.insert(queue, body);
        }
    }

    /// Drops every staged envelope (as dropping the transaction does).
    pub fn rollback(self) {}
}

impl OutboxStore for MemoryOutboxStore {
    fn name(&self) -> &str {
        "memory"
    }

    fn fetch_unpublished(
        &self,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<OutboxRecord>, OutboxError>> {
        let now = Instant::now();
        let claimed = self
            .lock()
            .by_id
            .iter_mut()
            .filter(|(_, row)| {
                row.status == Status::Pending && row.locked_until.is_none_or(|until| until < now)
            })
            .take(limit)
            .map(|(id, row)| {
                row.locked_until = Some(now + self.lease);
                OutboxRecord {
                    id: *id,
                    queue: row.queue.clone(),
                    body: row.body.clone(),
                    attempts: row.attempts,
                }
            })
            .collect();
        Box::pin(std::future::ready(Ok(claimed)))
    }

    fn lease(&self) -> Duration {
        self.lease
    }

    fn renew<'a>(&'a self, ids: &'a [i64]) -> BoxFuture<'a, Result<(), OutboxError>> {
        let until = Instant::now() + self.lease;
        let mut rows = self.lock();
        for id in ids {
            if let Some(row) = rows.by_id.get_mut(id)
                && row.status == Status::Pending
            {
                row.locked_until = Some(until);
            }
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn mark_published<'a>(&'a self, ids: &'a [i64]) -> BoxFuture<'a, Result<(), OutboxError>> {
        let now = Instant::now();
        let mut rows = self.lock();
        for id in ids {
            if let Some(row) = rows.by_id.get_mut(id) {
                row.status = Status::Published;
                row.locked_until = None;
                row.published_at = Some(now);
            }
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn mark_failed<'a>(
        &'a self,
        id: i64,
        reason: &'a str,
        failure: Failure,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        let (status, backoff) = match failure {
            Failure::Retry { backoff } => (Status::Pending, backoff),
            Failure::Permanent => (Status::Failed, Duration::ZERO),
        };
        if let Some(row) = self.lock().by_id.get_mut(&id) {
            row.status = status;
            row.attempts += 1;
            // The PostgreSQL column's size, so both stores keep the same text.
            row.last_error = Some(reason.chars().take(500).collect());
            row.locked_until = Some(Instant::now() + backoff);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn status(&self) -> BoxFuture<'_, Result<OutboxStatus, OutboxError>> {
        let rows = self.lock();
        let count = |status| {
            rows.by_id
                .values()
                .filter(|row| row.status == status)
                .count()
        };
        let status = OutboxStatus {
            pending: count(Status::Pending) as u64,
            failed: count(Status::Failed) as u64,
            oldest_pending_age: rows
                .by_id
                .values()
                .filter(|row| row.status == Status::Pending)
                .map(|row| row.created.elapsed())
                .max(),
        };
        Box::pin(std::future::ready(Ok(status)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_purge_removes_the_published_rows_older_than_the_retention_only() {
        let store = MemoryOutboxStore::new();
        let ids: Vec<i64> = (0..3).map(|_| store.save_raw("{}", "q")).collect();
        store.mark_published(&ids[..2]).await.unwrap();
        assert_eq!(store.purge_published(Duration::from_secs(3600)), 0);
        assert_eq!(store.purge_published(Duration::ZERO), 2);
        assert_eq!(
            store.status().await.unwrap().pending,
            1,
            "the pending row stays"
        );
        assert_eq!(store.purge_published(Duration::ZERO), 0);
    }
}
