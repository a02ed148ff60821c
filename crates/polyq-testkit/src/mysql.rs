//! MariaDB (or MySQL) tables and databases a test makes, dropped when the test ends, whether it
//! passed or not (feature `mysql`).
//!
//! ```ignore
//! let table = polyq_testkit::unique_name("outbox").replace('.', "_");
//! let _tables = polyq_testkit::mysql::DropTables::new([&table]);
//! // ... create and use `table`; a failed assertion still drops it ...
//! ```

/// Drops its tables (`DROP TABLE IF EXISTS`, so a table the test never made is no error) when it
/// is dropped: at the end of the test, or while a failed test unwinds.
#[derive(Debug)]
pub struct DropTables {
    _guard: Guard,
}

impl DropTables {
    /// A guard for `tables` in the database of [`mariadb_url`](crate::mariadb_url); make it
    /// before the tables, so that one made before a failure is dropped too.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub fn new(tables: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            _guard: Guard::new("TABLE", tables),
        }
    }
}

/// Drops its databases with everything in them (`DROP DATABASE IF EXISTS`) when it is dropped:
/// at the end of the test, or while a failed test unwinds.
#[derive(Debug)]
pub struct DropDatabases {
    _guard: Guard,
}

impl DropDatabases {
    /// A guard for `databases` on the server of [`mariadb_url`](crate::mariadb_url); make it
    /// before the databases, so that one made before a failure is dropped too.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub fn new(databases: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            _guard: Guard::new("DATABASE", databases),
        }
    }
}

#[derive(Debug)]
struct Guard {
    url: String,
    what: String,
    statements: Vec<String>,
}

impl Guard {
    fn new(kind: &str, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        Self {
            url: crate::mariadb_url(),
            what: format!("drop the {}s {names:?}", kind.to_lowercase()),
            // MySQL drops one database per statement: one statement per name for both kinds.
            statements: names
                .iter()
                .map(|name| format!("DROP {kind} IF EXISTS {name}"))
                .collect(),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.statements.is_empty() {
            return;
        }
        let statements = std::mem::take(&mut self.statements);
        crate::guard::run_sql_on_drop::<sqlx::MySqlConnection>(
            &self.what,
            self.url.clone(),
            statements,
        );
    }
}
