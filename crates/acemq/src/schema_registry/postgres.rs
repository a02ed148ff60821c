//! The PostgreSQL schema store (features `avro` and `postgres`): one table of schemas, shared
//! by every registry that points at it, and a one-row counter table the ids come from, in the
//! Java port's layout (`JdbcSchemaRegistry`): `acemq_schema_registry` (`id`, `fingerprint`,
//! `format`, `subject`, `definition`, `registered_at`) and `acemq_schema_registry_seq`
//! (`only_row`, `last_id`).
//!
//! Registering looks the text up first (one indexed read, the path of every schema already
//! known). A new text takes the counter row's lock in a transaction, looks again (another
//! instance may have registered it while this one waited for the lock), inserts under the
//! counter's value and advances it: two instances registering one schema at once get one id,
//! and an id, once committed, is never given out again.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use sqlx::PgPool;

use super::{AVRO, SchemaRegistryError, SchemaStore};

/// The table a store uses unless told otherwise.
pub const DEFAULT_TABLE: &str = "acemq_schema_registry";

/// The migration creating the tables, with `${table}` standing for the schema table's name
/// (the counter is `${table}_seq`). Run it with [`PostgresSchemaStore::migrate`], or copy it
/// into the migrations the application's own tool runs.
pub const MIGRATION: &str = include_str!("../../migrations/postgres/schema_registry_0001.sql");

/// Schemas in a PostgreSQL table. Clones share the pool.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use acemq::schema_registry::SchemaRegistry;
/// use acemq::schema_registry::postgres::PostgresSchemaStore;
///
/// let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1:5432/test").await?;
/// let store = PostgresSchemaStore::new(pool);
/// store.migrate().await?;
/// let registry = SchemaRegistry::new(store);
/// let id = registry.register(r#""string""#).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresSchemaStore {
    pool: PgPool,
    table: Arc<str>,
    statements: Arc<Statements>,
}

struct Statements {
    find: String,
    lock: String,
    insert: String,
    advance: String,
    schema: String,
}

impl Statements {
    fn for_table(table: &str) -> Self {
        // The hex SHA-256 of the exact text: 64 characters, as the column holds.
        const FINGERPRINT: &str = "encode(sha256(convert_to($1, 'UTF8')), 'hex')";
        Self {
            find: format!("SELECT id FROM {table} WHERE fingerprint = {FINGERPRINT}"),
            lock: format!("SELECT last_id FROM {table}_seq WHERE only_row = 1 FOR UPDATE"),
            insert: format!(
                "INSERT INTO {table} (id, fingerprint, format, subject, definition, registered_at) \
                 VALUES ($3, {FINGERPRINT}, '{AVRO}', $2, $1, now())"
            ),
            advance: format!("UPDATE {table}_seq SET last_id = $1 WHERE only_row = 1"),
            schema: format!("SELECT format, definition FROM {table} WHERE id = $1"),
        }
    }
}

impl std::fmt::Debug for PostgresSchemaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSchemaStore")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl PostgresSchemaStore {
    /// A store on `pool` using [`DEFAULT_TABLE`].
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            table: Arc::from(DEFAULT_TABLE),
            statements: Arc::new(Statements::for_table(DEFAULT_TABLE)),
        }
    }

    /// Uses the table `name` (and `<name>_seq`) instead of [`DEFAULT_TABLE`].
    ///
    /// # Errors
    ///
    /// [`SchemaRegistryError::InvalidName`] unless `name` is a plain SQL identifier (ASCII
    /// letters, digits and underscores, not starting with a digit, at most 56 bytes): a table
    /// name reaches SQL as text, since no database binds it as a parameter.
    pub fn table(mut self, name: &str) -> Result<Self, SchemaRegistryError> {
        if let Some(reason) = crate::idempotency::identifier_problem(name) {
            return Err(SchemaRegistryError::InvalidName {
                name: name.to_owned(),
                reason,
            });
        }
        self.table = Arc::from(name);
        self.statements = Arc::new(Statements::for_table(name));
        Ok(self)
    }

    /// The schema table's name.
    pub fn table_name(&self) -> &str {
        &self.table
    }

    /// [`MIGRATION`] for this store's table.
    pub fn migration_sql(&self) -> String {
        MIGRATION.replace("${table}", &self.table)
    }

    /// Creates the tables and the counter row unless they exist.
    ///
    /// # Errors
    ///
    /// [`SchemaRegistryError::Backend`] when the database refuses.
    pub async fn migrate(&self) -> Result<(), SchemaRegistryError> {
        sqlx::raw_sql(&self.migration_sql())
            .execute(&self.pool)
            .await
            .map_err(|e| self.failed(format!("create the table `{}`", self.table), e))?;
        Ok(())
    }

    fn failed(&self, operation: String, error: sqlx::Error) -> SchemaRegistryError {
        SchemaRegistryError::backend("postgres", operation, error)
    }

    async fn find(
        &self,
        executor: impl sqlx::PgExecutor<'_>,
        schema: &str,
    ) -> Result<Option<u32>, sqlx::Error> {
        let id: Option<i32> = sqlx::query_scalar(&self.statements.find)
            .bind(schema)
            .fetch_optional(executor)
            .await?;
        Ok(id.and_then(|id| u32::try_from(id).ok()))
    }

    async fn register_now(&self, subject: &str, schema: &str) -> Result<u32, SchemaRegistryError> {
        let failed = |e| self.failed(format!("register a schema in `{}`", self.table), e);
        if let Some(id) = self.find(&self.pool, schema).await.map_err(failed)? {
            return Ok(id);
        }
        let mut tx = self.pool.begin().await.map_err(failed)?;
        let last: i32 = sqlx::query_scalar(&self.statements.lock)
            .fetch_optional(&mut *tx)
            .await
            .map_err(failed)?
            .ok_or_else(|| SchemaRegistryError::MissingCounter {
                table: format!("{}_seq", self.table),
            })?;
        // Registered by another instance while this one waited for the counter's lock.
        if let Some(id) = self.find(&mut *tx, schema).await.map_err(failed)? {
            return Ok(id);
        }
        let Some((next, id)) = last
            .checked_add(1)
            .and_then(|next| Some((next, u32::try_from(next).ok()?)))
        else {
            return Err(SchemaRegistryError::Exhausted);
        };
        sqlx::query(&self.statements.insert)
            .bind(schema)
            .bind(subject)
            .bind(next)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        sqlx::query(&self.statements.advance)
            .bind(next)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        Ok(id)
    }
}

impl SchemaStore for PostgresSchemaStore {
    fn register<'a>(
        &'a self,
        subject: &'a str,
        schema: &'a str,
    ) -> BoxFuture<'a, Result<u32, SchemaRegistryError>> {
        Box::pin(self.register_now(subject, schema))
    }

    fn schema(&self, id: u32) -> BoxFuture<'_, Result<Option<String>, SchemaRegistryError>> {
        Box::pin(async move {
            // An id beyond INTEGER was never given out.
            let Ok(key) = i32::try_from(id) else {
                return Ok(None);
            };
            let row: Option<(String, String)> = sqlx::query_as(&self.statements.schema)
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.failed(format!("look up schema id {id}"), e))?;
            match row {
                Some((format, definition)) if format == AVRO => Ok(Some(definition)),
                Some((format, _)) => Err(SchemaRegistryError::OtherFormat { id, format }),
                None => Ok(None),
            }
        })
    }
}
