//! The transactional outbox of ADR-0029 on PostgreSQL (feature `postgres`): the envelope is
//! saved in the caller's own database transaction, with the business change it announces, and
//! a relay publishes it once that transaction has committed.
//!
//! [`Outbox::write`] encodes with the frozen codec and saves `(bytes, queue)` (the queue is
//! `meta.queue`, else `default`) in the transaction it is given; it never begins, commits or
//! rolls back. [`OutboxRelay`] publishes the stored bytes verbatim through any binding.
//!
//! The table is created by [`PgOutboxStore::migrate`] from
//! `migrations/postgres/0001_outbox.sql`: the upstream PHP `babelqueue_outbox` layout with a
//! lease column added (see `docs/INTEROP.md`).
//!
//! ```no_run
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
mod relay;
mod store;

use sqlx::PgConnection;

pub use error::OutboxError;
pub use polyq_runtime::outbox::OutboxStatus;
pub use relay::{DEFAULT_BATCH_SIZE, FlushReport, OutboxRelay};
pub use store::{DEFAULT_TABLE, Failure, OutboxRecord, PgOutboxStore};

use crate::Envelope;

/// The queue an envelope with no `meta.queue` is saved for, as in every SDK.
pub const DEFAULT_QUEUE: &str = "default";

/// The writing half of the outbox: saves envelopes in the caller's transaction.
#[derive(Debug, Clone)]
pub struct Outbox {
    table: String,
}

impl Default for Outbox {
    fn default() -> Self {
        Self::new()
    }
}

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
        let encoded = envelope.encode().map_err(OutboxError::Encode)?;
        let queue = envelope
            .meta()
            .and_then(|meta| meta.queue())
            .unwrap_or(DEFAULT_QUEUE);
        store::save(tx, &self.table, &encoded, queue).await
    }
}
