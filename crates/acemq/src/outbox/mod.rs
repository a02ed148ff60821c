//! The transactional outbox: a message is written in the caller's own database transaction,
//! with the business change it announces, and a relay publishes it once that transaction has
//! committed. On PostgreSQL with the feature `postgres` ([`Outbox`]), on MariaDB or MySQL with
//! the feature `mysql` ([`MySqlOutbox`]), or in the process ([`MemoryOutbox`], the embedded
//! default beside `memory://`); one [`OutboxRelay`] publishes from any of them.
//!
//! [`Outbox::record`] builds the message exactly as the [`Publisher`] would send it (the
//! envelope stamped and intercepted, the body encoded, properties and envelope headers written)
//! and inserts it in the transaction it is given; it never begins, commits or rolls back. A
//! rolled-back transaction leaves no message; a committed one is published by an
//! [`OutboxRelay`], now or after a restart, with the stored bytes unchanged.
//!
//! The table is created by [`migrate`] from `migrations/postgres/0001_outbox.sql`, the Go port's
//! `acemq_outbox` layout with the relay's lease columns added (see `docs/INTEROP.md`); on
//! MariaDB by [`MySqlOutbox::migrate`] from `migrations/mysql/0001_outbox.sql`, the same
//! columns with MySQL's types.
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn run(db: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use acemq::AceMq;
//! use acemq::outbox::{self, Outbox, OutboxRelay};
//!
//! let mq = AceMq::connect("amqp://guest:guest@localhost:5672/%2f").await?;
//! outbox::migrate(&db).await?;
//! let outbox = Outbox::new();
//! let orders = mq.publisher::<serde_json::Value>("", "orders.new");
//!
//! let mut tx = db.begin().await?;
//! sqlx::query("INSERT INTO orders (id) VALUES (7)").execute(&mut *tx).await?;
//! outbox.record(&mut tx, &orders, &serde_json::json!({"id": 7})).await?;
//! tx.commit().await?;
//!
//! OutboxRelay::builder(db, &mq).build()?.drain(10).await?;
//! # Ok(())
//! # }
//! ```

mod backend;
mod error;
mod memory;
#[cfg(feature = "mysql")]
mod mysql;
mod relay;
mod row;
#[cfg(feature = "postgres")]
mod store;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod table;

#[cfg(feature = "postgres")]
use sqlx::{PgConnection, PgPool, Postgres};

pub use error::OutboxError;
pub use memory::{MemoryOutbox, MemoryTransaction};
pub use polyq_runtime::outbox::OutboxStatus;
pub use relay::{
    DEFAULT_BATCH_SIZE, DEFAULT_MAX_ATTEMPTS, DEFAULT_WINDOW, OutboxRelay, OutboxRelayBuilder,
    RelayPass,
};
#[cfg(feature = "postgres")]
pub use table::DEFAULT_TABLE;

use crate::contract::codec::Encode;
use crate::runtime::telemetry;
use crate::{Envelope, Publisher};
use row::StoredMessage;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use table::Table;

#[cfg(feature = "mysql")]
use sqlx::{MySql, MySqlConnection, MySqlPool};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use std::time::Duration;

/// Pages of the table one statement of a PostgreSQL purge reads (8 MiB at the default page).
#[cfg(feature = "postgres")]
const PURGE_PAGES: u32 = 1000;
/// Rows one statement of a MariaDB purge deletes at most.
#[cfg(feature = "mysql")]
const PURGE_ROWS: u32 = 10_000;

/// The row a send of `payload` through `publisher` would put on the wire, and the envelope
/// as it will be sent; its message id is the row's id.
fn stored<T: ?Sized, E: Encode<T>>(
    publisher: &Publisher<T, E>,
    payload: &T,
    envelope: Option<Envelope>,
) -> Result<(StoredMessage, Envelope), OutboxError> {
    let span = telemetry::publish_span(publisher.exchange(), publisher.routing_key());
    let (message, envelope) = publisher
        .message(payload, envelope, &span)
        .map_err(OutboxError::Message)?;
    Ok((
        StoredMessage::of(envelope.id().to_owned(), &message),
        envelope,
    ))
}

/// Creates the `acemq_outbox` table and its index if they are not there yet.
///
/// # Errors
/// [`OutboxError::Database`].
#[cfg(feature = "postgres")]
pub async fn migrate(db: &PgPool) -> Result<(), OutboxError> {
    Outbox::new().migrate(db).await
}

/// The writing half of the outbox on PostgreSQL: records messages in the caller's transaction.
#[cfg(feature = "postgres")]
#[derive(Debug, Clone)]
pub struct Outbox {
    table: Table<Postgres>,
}

#[cfg(feature = "postgres")]
impl Default for Outbox {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "postgres")]
impl Outbox {
    /// The outbox in the default table, `acemq_outbox`.
    pub fn new() -> Self {
        Self {
            table: Table::default_table(),
        }
    }

    /// The outbox in `table`.
    ///
    /// # Errors
    /// [`OutboxError::InvalidTable`] when `table` is not a plain SQL identifier.
    pub fn in_table(table: &str) -> Result<Self, OutboxError> {
        Ok(Self {
            table: Table::new(table)?,
        })
    }

    /// The table name.
    pub fn table(&self) -> &str {
        self.table.name()
    }

    /// Creates this outbox's table and index if they are not there yet.
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn migrate(&self, db: &PgPool) -> Result<(), OutboxError> {
        self.table.migrate(db).await
    }

    /// Pending and failed rows and the lag, counting a row as failed once it used up
    /// [`DEFAULT_MAX_ATTEMPTS`] (a relay's [`OutboxRelay::status`] uses its own limit).
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn status(&self, db: &PgPool) -> Result<OutboxStatus, OutboxError> {
        self.table
            .status(db, i32::try_from(DEFAULT_MAX_ATTEMPTS).unwrap_or(i32::MAX))
            .await
    }

    /// Deletes the rows published more than `older_than` ago and returns how many. The relay
    /// keeps published rows (`published_at`) for audit, so without a purge on a schedule the
    /// table grows with every message; pending and failed rows are never touched. The table
    /// is read once, a range of its pages per statement.
    ///
    /// ```no_run
    /// # async fn run(db: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    ///
    /// let week = Duration::from_secs(7 * 24 * 3600);
    /// let purged = acemq::outbox::Outbox::new().purge_published(&db, week).await?;
    /// println!("{purged} published rows older than a week deleted");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn purge_published(
        &self,
        db: &PgPool,
        older_than: Duration,
    ) -> Result<u64, OutboxError> {
        self.table
            .purge_published(db, older_than, PURGE_PAGES)
            .await
    }

    /// Writes the message a send of `payload` through `publisher` would put on the wire, in
    /// the caller's transaction `tx` (pass `&mut tx` for a `sqlx::Transaction`). Returns the
    /// envelope as it will be sent; its message id is the row's id.
    ///
    /// # Errors
    /// [`OutboxError::Message`] when the publisher would refuse the message; nothing is written.
    /// [`OutboxError::Database`] when the insert failed; the transaction is the caller's to
    /// roll back.
    pub async fn record<T: ?Sized, E: Encode<T>>(
        &self,
        tx: &mut PgConnection,
        publisher: &Publisher<T, E>,
        payload: &T,
    ) -> Result<Envelope, OutboxError> {
        self.write(tx, publisher, payload, None).await
    }

    /// [`Outbox::record`] with the envelope given, as [`Publisher::send_with`] takes it.
    ///
    /// # Errors
    /// As [`Outbox::record`].
    pub async fn record_with<T: ?Sized, E: Encode<T>>(
        &self,
        tx: &mut PgConnection,
        publisher: &Publisher<T, E>,
        payload: &T,
        envelope: Envelope,
    ) -> Result<Envelope, OutboxError> {
        self.write(tx, publisher, payload, Some(envelope)).await
    }

    async fn write<T: ?Sized, E: Encode<T>>(
        &self,
        tx: &mut PgConnection,
        publisher: &Publisher<T, E>,
        payload: &T,
        envelope: Option<Envelope>,
    ) -> Result<Envelope, OutboxError> {
        let (row, envelope) = stored(publisher, payload, envelope)?;
        self.table.insert(tx, &row).await?;
        Ok(envelope)
    }
}

/// The writing half of the outbox on MariaDB or MySQL: records messages in the caller's
/// transaction, as [`Outbox`] does on PostgreSQL, into the same columns.
///
/// ```no_run
/// # async fn run(db: sqlx::MySqlPool, mq: acemq::AceMq) -> Result<(), Box<dyn std::error::Error>> {
/// use acemq::outbox::{MySqlOutbox, OutboxRelay};
///
/// let outbox = MySqlOutbox::new();
/// outbox.migrate(&db).await?;
/// let orders = mq.publisher::<serde_json::Value>("", "orders.new");
/// let mut tx = db.begin().await?;
/// outbox.record(&mut tx, &orders, &serde_json::json!({"id": 7})).await?;
/// tx.commit().await?;
/// OutboxRelay::builder_mysql(db, &mq).build()?.drain(10).await?;
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "mysql")]
#[derive(Debug, Clone)]
pub struct MySqlOutbox {
    table: Table<MySql>,
}

#[cfg(feature = "mysql")]
impl Default for MySqlOutbox {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "mysql")]
impl MySqlOutbox {
    /// The outbox in the default table, `acemq_outbox`.
    pub fn new() -> Self {
        Self {
            table: Table::default_table(),
        }
    }

    /// The outbox in `table`.
    ///
    /// # Errors
    /// [`OutboxError::InvalidTable`] when `table` is not a plain SQL identifier.
    pub fn in_table(table: &str) -> Result<Self, OutboxError> {
        Ok(Self {
            table: Table::new(table)?,
        })
    }

    /// The table name.
    pub fn table(&self) -> &str {
        self.table.name()
    }

    /// Creates this outbox's table and index if they are not there yet.
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn migrate(&self, db: &MySqlPool) -> Result<(), OutboxError> {
        self.table.migrate(db).await
    }

    /// Pending and failed rows and the lag, as [`Outbox::status`] counts them.
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn status(&self, db: &MySqlPool) -> Result<OutboxStatus, OutboxError> {
        self.table
            .status(db, i32::try_from(DEFAULT_MAX_ATTEMPTS).unwrap_or(i32::MAX))
            .await
    }

    /// Deletes the rows published more than `older_than` ago and returns how many, as
    /// [`Outbox::purge_published`] does, 10,000 rows per statement.
    ///
    /// # Errors
    /// [`OutboxError::Database`].
    pub async fn purge_published(
        &self,
        db: &MySqlPool,
        older_than: Duration,
    ) -> Result<u64, OutboxError> {
        self.table.purge_published(db, older_than, PURGE_ROWS).await
    }

    /// Writes the message a send of `payload` through `publisher` would put on the wire, in
    /// the caller's transaction `tx`, as [`Outbox::record`] does.
    ///
    /// # Errors
    /// As [`Outbox::record`].
    pub async fn record<T: ?Sized, E: Encode<T>>(
        &self,
        tx: &mut MySqlConnection,
        publisher: &Publisher<T, E>,
        payload: &T,
    ) -> Result<Envelope, OutboxError> {
        self.write(tx, publisher, payload, None).await
    }

    /// [`MySqlOutbox::record`] with the envelope given, as [`Publisher::send_with`] takes it.
    ///
    /// # Errors
    /// As [`Outbox::record`].
    pub async fn record_with<T: ?Sized, E: Encode<T>>(
        &self,
        tx: &mut MySqlConnection,
        publisher: &Publisher<T, E>,
        payload: &T,
        envelope: Envelope,
    ) -> Result<Envelope, OutboxError> {
        self.write(tx, publisher, payload, Some(envelope)).await
    }

    async fn write<T: ?Sized, E: Encode<T>>(
        &self,
        tx: &mut MySqlConnection,
        publisher: &Publisher<T, E>,
        payload: &T,
        envelope: Option<Envelope>,
    ) -> Result<Envelope, OutboxError> {
        let (row, envelope) = stored(publisher, payload, envelope)?;
        self.table.insert(tx, &row).await?;
        Ok(envelope)
    }
}
