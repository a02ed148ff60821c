//! The transactional outbox of ADR-0029: the envelope is saved in the caller's own database
//! transaction, with the business change it announces, and a relay publishes it once that
//! transaction has committed. On PostgreSQL with the feature `postgres` ([`Outbox`],
//! [`PgOutboxStore`]), or in the process ([`MemoryOutboxStore`], the embedded default beside
//! `memory://`); one [`OutboxRelay`] publishes from any [`OutboxStore`].
//!
//! [`Outbox::write`] encodes with the frozen codec and saves `(bytes, queue)` (the queue is
//! `meta.queue`, else `default`) in the transaction it is given; it never begins, commits or
//! rolls back. [`OutboxRelay`] publishes the stored bytes verbatim through any binding.
//!
//! The table is created by [`PgOutboxStore::migrate`] from
//! `migrations/postgres/0001_outbox.sql`: the upstream PHP `babelqueue_outbox` layout with a
//! lease column added (see `docs/INTEROP.md`).
//!
// Without the feature its items are not built: their links lead to the feature's note instead.
#![cfg_attr(
    not(feature = "postgres"),
    doc = "[`Outbox`]: crate#feature-flags\n[`Outbox::write`]: crate#feature-flags\n\
           [`PgOutboxStore`]: crate#feature-flags\n[`PgOutboxStore::migrate`]: crate#feature-flags"
)]
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn run(db: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use babelqueue::outbox::{Outbox, OutboxRelay, PgOutboxStore};
//! use babelqueue::{BabelQueue, MakeOptions, make};
//!
//! let store = PgOutboxStore::new(db.clone());
//! store.migrate().await?;
//! let outbox = Outbox::new();
//!
//! let mut tx = db.begin().await?;
//! sqlx::query("INSERT INTO orders (id) VALUES (7)").execute(&mut *tx).await?;
//! let envelope = make(
//!     "urn:babel:orders:created",
//!     &serde_json::json!({"id": 7}),
//!     MakeOptions::default().queue("orders"),
//! )?;
//! outbox.write(&mut tx, &envelope).await?;
//! tx.commit().await?;
//!
//! let queue = BabelQueue::connect("memory://orders").await?;
//! OutboxRelay::new(store, queue.transport().clone()).drain(10).await?;
//! # Ok(())
//! # }
//! ```

mod error;
mod memory;
mod relay;
#[cfg(feature = "postgres")]
mod store;

use std::time::Duration;

use futures_util::future::BoxFuture;
#[cfg(feature = "postgres")]
use sqlx::PgConnection;

pub use error::OutboxError;
pub use memory::{MemoryOutboxStore, MemoryTransaction};
pub use polyq_runtime::outbox::OutboxStatus;
pub use relay::{DEFAULT_BATCH_SIZE, DEFAULT_WINDOW, FlushReport, OutboxRelay};
#[cfg(feature = "postgres")]
pub use store::{DEFAULT_TABLE, PgOutboxStore};

use crate::Envelope;

/// One pending row, claimed for a relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRecord {
    /// The row's id (the store's key, not `meta.id`).
    pub id: i64,
    /// The queue to publish to.
    pub queue: String,
    /// The encoded envelope, byte for byte as saved.
    pub body: String,
    /// Failed publishes so far.
    pub attempts: i32,
}

/// How a failed publish is marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The binding may take it later: count the attempt, offer it again after `backoff`.
    Retry {
        /// How long the row is held back.
        backoff: Duration,
    },
    /// The row can never be published as it is (a malformed body or queue): status `failed`.
    Permanent,
}

/// The store interface of ADR-0029 a relay drains: `PgOutboxStore` (feature `postgres`) or
/// [`MemoryOutboxStore`]. Writing is each store's own (in the caller's transaction).
pub trait OutboxStore: Send + Sync + std::fmt::Debug + 'static {
    /// The table name (or `memory`), for logs.
    fn name(&self) -> &str;

    /// Claims up to `limit` pending rows, oldest first, for this relay alone until they are
    /// marked or a lease runs out.
    fn fetch_unpublished(
        &self,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<OutboxRecord>, OutboxError>>;

    /// [`OutboxStore::fetch_unpublished`] that may look only at rows after the row `after`
    /// (the last of the batch before, in id order), as the relay asks within a streak of full
    /// batches (see `polyq_runtime::outbox::relay_streak`); rows before it are offered again
    /// once the relay fetches without it. The default looks at every row.
    fn fetch_unpublished_after(
        &self,
        limit: usize,
        after: Option<i64>,
    ) -> BoxFuture<'_, Result<Vec<OutboxRecord>, OutboxError>> {
        // Every row is looked at: `after` is a hint a store may take.
        let _ = after;
        self.fetch_unpublished(limit)
    }

    /// How long a fetch holds its rows. The relay renews the claim every third of it until
    /// it has marked them.
    fn lease(&self) -> Duration;

    /// Extends to a full lease from now the claim on the rows `ids`, fetched by this relay and
    /// not marked yet: a broker that blocks its publishers (out of memory or disk) holds their
    /// publishes back for as long as the alarm lasts.
    fn renew<'a>(&'a self, ids: &'a [i64]) -> BoxFuture<'a, Result<(), OutboxError>>;

    /// Marks rows the binding accepted as published.
    fn mark_published<'a>(&'a self, ids: &'a [i64]) -> BoxFuture<'a, Result<(), OutboxError>>;

    /// Records a failed publish: the attempt and the reason; a retry is held back for its
    /// backoff, a permanent failure is `failed`.
    fn mark_failed<'a>(
        &'a self,
        id: i64,
        reason: &'a str,
        failure: Failure,
    ) -> BoxFuture<'a, Result<(), OutboxError>>;

    /// Pending and failed counts and the age of the oldest pending row.
    fn status(&self) -> BoxFuture<'_, Result<OutboxStatus, OutboxError>>;
}

/// The queue an envelope with no `meta.queue` is saved for, as in every SDK.
pub const DEFAULT_QUEUE: &str = "default";

/// The writing half of the outbox on PostgreSQL: saves envelopes in the caller's transaction.
#[cfg(feature = "postgres")]
#[derive(Debug, Clone)]
pub struct Outbox {
    table: String,
}

#[cfg(feature = "postgres")]
impl Default for Outbox {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "postgres")]
impl Outbox {
    /// The outbox in the default table, `babelqueue_outbox`.
    pub fn new() -> Self {
        Self {
            table: DEFAULT_TABLE.to_owned(),
        }
    }

    /// The outbox in `table`.
    ///
    /// # Errors
    /// [`OutboxError::InvalidTable`] when `table` is not a plain SQL identifier.
    pub fn in_table(table: &str) -> Result<Self, OutboxError> {
        Ok(Self {
            table: store::checked_table(table)?,
        })
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Encodes `envelope` with the frozen codec and saves the bytes, with its `meta.queue`
    /// (else `default`), in the caller's transaction `tx` (pass `&mut tx` for a
    /// `sqlx::Transaction`). Returns the outbox row's id (not `meta.id`).
    ///
    /// # Errors
    /// [`OutboxError::Encode`] when the envelope cannot be encoded; nothing is written.
    /// [`OutboxError::Database`] when the insert failed; the transaction is the caller's to
    /// roll back.
    pub async fn write(
        &self,
        tx: &mut PgConnection,
        envelope: &Envelope,
    ) -> Result<i64, OutboxError> {
        let (encoded, queue) = encoded(envelope)?;
        store::save(tx, &self.table, &encoded, queue).await
    }
}

/// The frozen codec's bytes of `envelope` and the queue they are saved for: its `meta.queue`,
/// else [`DEFAULT_QUEUE`].
fn encoded(envelope: &Envelope) -> Result<(String, &str), OutboxError> {
    let encoded = envelope.encode().map_err(OutboxError::Encode)?;
    let queue = envelope
        .meta()
        .and_then(|meta| meta.queue())
        .unwrap_or(DEFAULT_QUEUE);
    Ok((encoded, queue))
}
