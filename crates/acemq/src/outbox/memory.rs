//! The outbox in the process: the embedded default beside the `memory://` broker, and the test
//! of the relay's semantics without a database.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use polyq_runtime::outbox::OutboxStatus;
use uuid::Uuid;

use crate::contract::codec::Encode;
use crate::outbox::backend::{Backend, Failure, truncate};
use crate::outbox::error::OutboxError;
use crate::outbox::row::StoredMessage;
use crate::outbox::{DEFAULT_MAX_ATTEMPTS, stored};
use crate::{Envelope, Publisher};

/// Messages recorded in this process, published by an
/// [`OutboxRelay::in_memory`](crate::outbox::OutboxRelay::in_memory) relay. A
/// [`MemoryTransaction`] stands for the application's transaction: what it records reaches the
/// outbox all at once on [`MemoryTransaction::commit`], and nothing of it when it is dropped or
/// rolled back. Rows are leased, marked and backed off exactly as in the PostgreSQL table; they
/// do not outlive the process. Clones share the rows.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use acemq::AceMq;
/// use acemq::outbox::{MemoryOutbox, OutboxRelay};
/// use polyq_amqp::QueueSpec;
///
/// let mq = AceMq::connect("memory://doc-outbox").await?;
/// mq.client().declare_queue(&QueueSpec::new("orders.new")).await?;
/// let outbox = MemoryOutbox::new();
/// let orders = mq.publisher::<serde_json::Value>("", "orders.new");
///
/// let mut tx = outbox.begin();
/// tx.record(&orders, &serde_json::json!({"id": 7}))?;
/// tx.commit();
///
/// let relayed = OutboxRelay::in_memory(&outbox, &mq).build()?.drain(10).await?;
/// assert_eq!(relayed.published, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryOutbox {
    rows: Arc<Mutex<Rows>>,
}

#[derive(Debug, Default)]
struct Rows {
    /// By insertion order, the order a relay offers them in.
    by_seq: BTreeMap<u64, Row>,
    next_seq: u64,
}

#[derive(Debug)]
struct Row {
    message: StoredMessage,
    created: Instant,
    attempts: i32,
    last_error: Option<String>,
    /// When the broker confirmed it, once it did.
    published: Option<Instant>,
    locked_by: Option<String>,
    locked_until: Option<Instant>,
}

/// Records messages for a [`MemoryOutbox`], all of them or none.
#[derive(Debug)]
#[must_use = "nothing reaches the outbox until commit"]
pub struct MemoryTransaction {
    outbox: MemoryOutbox,
    staged: Vec<StoredMessage>,
}

impl MemoryOutbox {
    /// An empty outbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// A transaction to record messages in.
    pub fn begin(&self) -> MemoryTransaction {
        MemoryTransaction {
            outbox: self.clone(),
            staged: Vec::new(),
        }
    }

    /// Pending and failed rows and the lag, counting a row as failed once it used up
    /// [`DEFAULT_MAX_ATTEMPTS`].
    pub fn status(&self) -> OutboxStatus {
        self.lock()
            .status(i32::try_from(DEFAULT_MAX_ATTEMPTS).unwrap_or(i32::MAX))
    }

    /// The reason the last publish of message `id` failed, if it failed.
    pub fn last_error(&self, id: &str) -> Option<String> {
        self.lock()
            .by_seq
            .values()
            .find(|row| row.message.id == id)
            .and_then(|row| row.last_error.clone())
    }

    /// Removes the messages published more than `older_than` ago, and returns how many: a
    /// long-running process keeps no more than its retention.
    pub fn purge_published(&self, older_than: Duration) -> u64 {
        let mut rows = self.lock();
        let before = rows.by_seq.len();
        rows.by_seq
            .retain(|_, row| row.published.is_none_or(|at| at.elapsed() < older_than));
        (before - rows.by_seq.len()) as u64
    }

    fn lock(&self) -> MutexGuard<'_, Rows> {
        // A panic while holding the lock leaves the rows consistent: every change is one step.
        self.rows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl MemoryTransaction {
    /// Records the message a send of `payload` through `publisher` would put on the wire, as
    /// [`Outbox::record`](crate::outbox::Outbox::record) does in a database transaction.
    ///
    /// # Errors
    /// [`OutboxError::Message`] when the publisher would refuse the message; nothing is staged.
    pub fn record<T: ?Sized, E: Encode<T>>(
        &mut self,
        publisher: &Publisher<T, E>,
        payload: &T,
    ) -> Result<Envelope, OutboxError> {
        let (row, envelope) = stored(publisher, payload, None)?;
        self.staged.push(row);
        Ok(envelope)
    }

    /// [`MemoryTransaction::record`] with the envelope given.
    ///
    /// # Errors
    /// As [`MemoryTransaction::record`].
    pub fn record_with<T: ?Sized, E: Encode<T>>(
        &mut self,
        publisher: &Publisher<T, E>,
        payload: &T,
        envelope: Envelope,
    ) -> Result<Envelope, OutboxError> {
        let (row, envelope) = stored(publisher, payload, Some(envelope))?;
        self.staged.push(row);
        Ok(envelope)
    }

    /// Adds every recorded message to the outbox at once.
    pub fn commit(self) {
        let now = Instant::now();
        let mut rows = self.outbox.lock();
        for message in self.staged {
            let seq = rows.next_seq;
            rows.next_seq += 1;
            rows.by_seq.insert(
                seq,
                Row {
                    message,
                    created: now,
                    attempts: 0,
                    last_error: None,
                    published: None,
                    locked_by: None,
                    locked_until: None,
                },
            );
        }
    }

    /// Drops every recorded message (as dropping the transaction does).
    pub fn rollback(self) {}
}

impl Rows {
    fn pending(&self, max_attempts: i32) -> impl Iterator<Item = &Row> {
        self.by_seq
            .values()
            .filter(move |row| row.published.is_none() && row.attempts < max_attempts)
    }

    fn status(&self, max_attempts: i32) -> OutboxStatus {
        let unpublished = self.by_seq.values().filter(|row| row.published.is_none());
        let failed = unpublished
            .filter(|row| row.attempts >= max_attempts)
            .count();
        OutboxStatus {
            pending: self.pending(max_attempts).count() as u64,
            failed: failed as u64,
            oldest_pending_age: self.lag(max_attempts),
        }
    }

    fn lag(&self, max_attempts: i32) -> Option<Duration> {
        self.pending(max_attempts)
            .map(|row| row.created.elapsed())
            .max()
    }

    fn leased_to<'a>(&'a mut self, token: &'a str) -> impl Iterator<Item = &'a mut Row> {
        self.by_seq
            .values_mut()
            .filter(move |row| row.locked_by.as_deref() == Some(token))
    }
}

impl Backend for MemoryOutbox {
    fn name(&self) -> &str {
        "memory"
    }

    fn claim<'a>(
        &'a self,
        token: Uuid,
        lease: Duration,
        max_attempts: i32,
        limit: i64,
        _synchronous_commit: bool,
        _after: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<(StoredMessage, i32)>, OutboxError>> {
        let now = Instant::now();
        let mut rows = self.lock();
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let claimed = rows
            .by_seq
            .values_mut()
            .filter(|row| {
                row.published.is_none()
                    && row.attempts < max_attempts
                    && row.locked_until.is_none_or(|until| until < now)
            })
            .take(limit)
            .map(|row| {
                row.locked_by = Some(token.to_string());
                row.locked_until = Some(now + lease);
                (row.message.clone(), row.attempts)
            })
            .collect();
        Box::pin(std::future::ready(Ok(claimed)))
    }

    fn mark_published<'a>(
        &'a self,
        token: &'a str,
        ids: &'a [String],
        _synchronous_commit: bool,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        let now = Instant::now();
        for row in self.lock().leased_to(token) {
            if ids.contains(&row.message.id) {
                row.published = Some(now);
                row.locked_by = None;
                row.locked_until = None;
            }
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn lag(&self, max_attempts: i32) -> BoxFuture<'_, Result<Option<Duration>, OutboxError>> {
        Box::pin(std::future::ready(Ok(self.lock().lag(max_attempts))))
    }

    fn renew<'a>(
        &'a self,
        token: &'a str,
        _ids: &'a [String],
        lease: Duration,
        _synchronous_commit: bool,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        let until = Instant::now() + lease;
        for row in self.lock().leased_to(token) {
            row.locked_until = Some(until);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn mark_failed<'a>(
        &'a self,
        token: &'a str,
        id: &'a str,
        reason: &'a str,
        failure: Failure,
        _synchronous_commit: bool,
    ) -> BoxFuture<'a, Result<(), OutboxError>> {
        let (backoff, exhaust) = failure.hold();
        let mut rows = self.lock();
        if let Some(row) = rows.leased_to(token).find(|row| row.message.id == id) {
            row.attempts = (row.attempts + 1).max(exhaust);
            row.last_error = Some(truncate(reason).to_owned());
            row.locked_by = None;
            row.locked_until = Some(Instant::now() + backoff);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn status(&self, max_attempts: i32) -> BoxFuture<'_, Result<OutboxStatus, OutboxError>> {
        Box::pin(std::future::ready(Ok(self.lock().status(max_attempts))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AceMq;

    /// An outbox holding three committed messages, recorded through a publisher of `broker`.
    async fn three_recorded(broker: &str) -> MemoryOutbox {
        let mq = AceMq::connect(broker).await.unwrap();
        let publisher = mq.publisher::<serde_json::Value>("", "orders");
        let outbox = MemoryOutbox::new();
        let mut tx = outbox.begin();
        for id in 0..3 {
            tx.record(&publisher, &serde_json::json!({ "id": id }))
                .unwrap();
        }
        tx.commit();
        outbox
    }

    #[tokio::test]
    async fn a_renewal_holds_the_rows_of_its_token_only() {
        let outbox = three_recorded("memory://outbox-renewals").await;
        crate::outbox::backend::renewals_hold_the_rows_of_their_token_only(&outbox).await;
    }

    #[tokio::test]
    async fn a_purge_removes_the_published_rows_older_than_the_retention_only() {
        let outbox = three_recorded("memory://outbox-purge").await;
        let token = Uuid::new_v4();
        let claimed = outbox
            .claim(token, Duration::from_secs(60), 10, 2, false, None)
            .await
            .unwrap();
        let ids: Vec<String> = claimed.into_iter().map(|(row, _)| row.id).collect();
        outbox
            .mark_published(&token.to_string(), &ids, false)
            .await
            .unwrap();
        assert_eq!(outbox.purge_published(Duration::from_secs(3600)), 0);
        assert_eq!(outbox.purge_published(Duration::ZERO), 2);
        assert_eq!(outbox.status().pending, 1, "the pending row stays");
        assert_eq!(outbox.purge_published(Duration::ZERO), 0);
    }
}
