//! What the SQL outboxes share: the validated table name, its errors, the migration, and the
//! relay's backend over a pool. The statements are each dialect's own (`store.rs` for
//! PostgreSQL, `mysql.rs` for MariaDB and MySQL).

use std::marker::PhantomData;

use crate::outbox::backend::{database_error, table_name};
use crate::outbox::error::OutboxError;
use crate::outbox::row::StoredMessage;

/// The table every port defaults to.
pub const DEFAULT_TABLE: &str = "acemq_outbox";

/// A database the outbox table lives in.
pub(crate) trait Dialect: sqlx::Database {
    /// The shipped migration, written for [`DEFAULT_TABLE`].
    const MIGRATION: &'static str;

    /// The insert of one row into `table`, its placeholders in the order
    /// [`StoredMessage::bind`] binds the columns.
    fn insert_statement(table: &str) -> String;
}

/// A validated table name in dialect `D`: it reaches SQL by interpolation, so only a plain
/// identifier passes.
pub(crate) struct Table<D> {
    name: String,
    dialect: PhantomData<fn() -> D>,
}

// By hand: derived, they would ask the same of the dialect's marker type.
impl<D> std::fmt::Debug for Table<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Table").field(&self.name).finish()
    }
}

impl<D> Clone for Table<D> {
    fn clone(&self) -> Self {
        Self::named(self.name.clone())
    }
}

impl<D> PartialEq for Table<D> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl<D> Eq for Table<D> {}

impl<D> Table<D> {
    fn named(name: String) -> Self {
        Self {
            name,
            dialect: PhantomData,
        }
    }

    pub fn new(name: &str) -> Result<Self, OutboxError> {
        Ok(Self::named(table_name(name)?))
    }

    pub fn default_table() -> Self {
        Self::named(DEFAULT_TABLE.to_owned())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn failed(&self, operation: &'static str) -> impl FnOnce(sqlx::Error) -> OutboxError + '_ {
        database_error(operation, &self.name)
    }
}

impl<D: Dialect> Table<D> {
    /// Creates the table and its index if they are not there yet.
    pub async fn migrate(&self, db: &sqlx::Pool<D>) -> Result<(), OutboxError>
    where
        for<'c> &'c mut D::Connection: sqlx::Executor<'c, Database = D>,
    {
        sqlx::raw_sql(&D::MIGRATION.replace(DEFAULT_TABLE, &self.name))
            .execute(db)
            .await
            .map_err(self.failed("create"))?;
        Ok(())
    }

    /// Inserts one message in the caller's transaction.
    pub async fn insert(
        &self,
        tx: &mut D::Connection,
        row: &StoredMessage,
    ) -> Result<(), OutboxError>
    where
        for<'c> &'c mut D::Connection: sqlx::Executor<'c, Database = D>,
        for<'q> D::Arguments<'q>: sqlx::IntoArguments<'q, D>,
        for<'q> String: sqlx::Encode<'q, D> + sqlx::Type<D>,
        for<'q> Option<String>: sqlx::Encode<'q, D>,
        for<'q> Vec<u8>: sqlx::Encode<'q, D> + sqlx::Type<D>,
        for<'q> bool: sqlx::Encode<'q, D> + sqlx::Type<D>,
    {
        let insert = D::insert_statement(&self.name);
        row.bind(sqlx::query(&insert))
            .execute(tx)
            .await
            .map_err(self.failed("write to"))?;
        Ok(())
    }
}

/// The table on the relay's own pool.
#[derive(Debug)]
pub(crate) struct SqlBackend<D: sqlx::Database> {
    pub db: sqlx::Pool<D>,
    pub table: Table<D>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_identifiers_are_table_names() {
        assert!(Table::<()>::new("acemq_outbox").is_ok());
        assert!(Table::<()>::new("_t1").is_ok());
        for bad in ["", "1t", "a-b", "a;drop", "a b", &"x".repeat(64)] {
            assert!(
                matches!(Table::<()>::new(bad), Err(OutboxError::InvalidTable(_))),
                "{bad}"
            );
        }
    }
}
