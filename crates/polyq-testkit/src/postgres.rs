//! PostgreSQL tables a test makes, dropped when the test ends, whether it passed or not
//! (feature `postgres`).
//!
//! ```ignore
//! let table = polyq_testkit::unique_name("outbox").replace('.', "_");
//! let _tables = polyq_testkit::postgres::DropTables::new([&table]);
//! // ... create and use `table`; a failed assertion still drops it ...
//! ```

use sqlx::Connection as _;

/// Drops its tables (`DROP TABLE IF EXISTS`, so a table the test never made is no error) when it
/// is dropped: at the end of the test, or while a failed test unwinds.
#[derive(Debug)]
pub struct DropTables {
    url: String,
    tables: Vec<String>,
}

impl DropTables {
    /// A guard for `tables` on the PostgreSQL of [`postgres_url`](crate::postgres_url); make it
    /// before the tables, so that one made before a failure is dropped too.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub fn new(tables: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            url: crate::postgres_url(),
            tables: tables.into_iter().map(Into::into).collect(),
        }
    }

    fn drop_tables(&self) -> Result<(), String> {
        let url = self.url.clone();
        let mut statement = String::new();
        if std::thread::panicking() {
            // A test that failed mid-transaction leaves a connection holding locks on its
            // tables, one its runtime would only give back once this drop returns: the
            // sessions locking them, the test's own as the names are unique, are ended first.
            let tables: Vec<String> = self
                .tables
                .iter()
                .map(|table| format!("to_regclass('{}')", table.replace('\'', "''")))
                .collect();
            statement.push_str(&format!(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'relation' \
                 AND relation = ANY(ARRAY[{}]::oid[]) AND pid <> pg_backend_pid();",
                tables.join(", ")
            ));
        }
        statement.push_str(&format!("DROP TABLE IF EXISTS {}", self.tables.join(", ")));
        // A connection belongs to the runtime that opened it, and this runs from `Drop`, maybe
        // inside the test's runtime, maybe while it unwinds: the statement gets a thread and a
        // runtime of its own.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| error.to_string())?;
            runtime.block_on(async {
                let mut connection = sqlx::PgConnection::connect(&url)
                    .await
                    .map_err(|error| error.to_string())?;
                sqlx::raw_sql(&statement)
                    .execute(&mut connection)
                    .await
                    .map_err(|error| error.to_string())?;
                connection.close().await.map_err(|error| error.to_string())
            })
        })
        .join()
        .map_err(|_| "the thread dropping the tables panicked".to_owned())?
    }
}

impl Drop for DropTables {
    fn drop(&mut self) {
        if self.tables.is_empty() {
            return;
        }
        if let Err(error) = self.drop_tables() {
            // A test that passed fails on what it left behind; one already failing keeps its
            // own panic.
            assert!(
                std::thread::panicking(),
                "could not drop the tables {:?}: {error}",
                self.tables
            );
        }
    }
}
