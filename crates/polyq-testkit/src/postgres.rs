//! PostgreSQL tables and schemas a test makes, dropped when the test ends, whether it passed or
//! not (feature `postgres`).
//!
//! ```ignore
//! let table = polyq_testkit::unique_name("outbox").replace('.', "_");
//! let _tables = polyq_testkit::postgres::DropTables::new([&table]);
//! // ... create and use `table`; a failed assertion still drops it ...
//! ```

/// The plan PostgreSQL picks for `statement`, one line a row, with `before` (say a `SET LOCAL`)
/// sent ahead of it in the same simple query, so that it holds for the `EXPLAIN`.
///
/// # Panics
/// When the database refuses the `EXPLAIN`.
pub async fn plan(db: &sqlx::PgPool, before: &str, statement: &str) -> Vec<String> {
    use sqlx::Row as _;
    sqlx::raw_sql(&format!("{before} EXPLAIN {statement}"))
        .fetch_all(db)
        .await
        .expect("explain")
        .iter()
        .map(|row| row.get::<String, _>(0))
        .collect()
}

/// Drops its tables (`DROP TABLE IF EXISTS`, so a table the test never made is no error) when it
/// is dropped: at the end of the test, or while a failed test unwinds.
#[derive(Debug)]
pub struct DropTables {
    _guard: Guard,
}

impl DropTables {
    /// A guard for `tables` on the PostgreSQL of [`postgres_url`](crate::postgres_url); make it
    /// before the tables, so that one made before a failure is dropped too.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub fn new(tables: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            _guard: Guard::new(Kind::Tables, tables),
        }
    }
}

/// Drops its schemas with everything in them (`DROP SCHEMA IF EXISTS ... CASCADE`) when it is
/// dropped: at the end of the test, or while a failed test unwinds.
#[derive(Debug)]
pub struct DropSchemas {
    _guard: Guard,
}

impl DropSchemas {
    /// A guard for `schemas` on the PostgreSQL of [`postgres_url`](crate::postgres_url); make it
    /// before the schemas, so that one made before a failure is dropped too.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub fn new(schemas: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            _guard: Guard::new(Kind::Schemas, schemas),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Tables,
    Schemas,
}

#[derive(Debug)]
struct Guard {
    kind: Kind,
    url: String,
    names: Vec<String>,
}

impl Guard {
    fn new(kind: Kind, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            kind,
            url: crate::postgres_url(),
            names: names.into_iter().map(Into::into).collect(),
        }
    }

    fn statement(&self) -> String {
        let mut statement = String::new();
        if std::thread::panicking() {
            // A test that failed mid-transaction leaves a connection holding locks on its
            // tables (or on the tables in its schemas), one its runtime would only give back
            // once this drop returns: the sessions locking them, the test's own as the names are
            // unique, are ended first.
            let literals: Vec<String> = self
                .names
                .iter()
                .map(|name| format!("'{}'", name.replace('\'', "''")))
                .collect();
            let names = format!("unnest(ARRAY[{}]::text[]) AS name", literals.join(", "));
            let relations = match self.kind {
                Kind::Tables => format!("SELECT to_regclass(name) FROM {names}"),
                Kind::Schemas => format!(
                    "SELECT oid FROM pg_class WHERE relnamespace IN \
                     (SELECT to_regnamespace(name) FROM {names})"
                ),
            };
            statement.push_str(&format!(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'relation' \
                 AND relation IN ({relations}) AND pid <> pg_backend_pid();"
            ));
        }
        let names = self.names.join(", ");
        statement.push_str(&match self.kind {
            Kind::Tables => format!("DROP TABLE IF EXISTS {names}"),
            Kind::Schemas => format!("DROP SCHEMA IF EXISTS {names} CASCADE"),
        });
        statement
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.names.is_empty() {
            return;
        }
        let statement = self.statement();
        let what = match self.kind {
            Kind::Tables => format!("drop the tables {:?}", self.names),
            Kind::Schemas => format!("drop the schemas {:?}", self.names),
        };
        crate::guard::run_sql_on_drop::<sqlx::PgConnection>(
            &what,
            self.url.clone(),
            vec![statement],
        );
    }
}
