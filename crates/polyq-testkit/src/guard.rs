//! What the cleanup guards share: running their cleanup from `Drop`.

use std::future::Future;

/// Runs the future `cleanup` makes, from a guard's `Drop`, on a thread and a runtime of its own:
/// `Drop` may run inside the test's runtime, maybe while it unwinds, where nothing the cleanup
/// awaits would be driven, and a connection belongs to the runtime that opened it. A test that
/// passed fails when the cleanup fails (returns an error or panics), naming `what`; a test
/// already failing keeps its own panic.
pub(crate) fn clean_up_on_drop<F, Fut>(what: &str, cleanup: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), String>>,
{
    let outcome = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| error.to_string())?
            .block_on(cleanup())
    })
    .join()
    .unwrap_or_else(|panic| Err(polyq_runtime::panic_message(panic.as_ref())));
    if let Err(error) = outcome {
        assert!(std::thread::panicking(), "could not {what}: {error}");
    }
}

/// Runs `statements` in order on a connection of type `C` to `url`, from a guard's `Drop`, as
/// [`clean_up_on_drop`] does: the SQL guards' drop, each dialect passing its own statements.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn run_sql_on_drop<C>(what: &str, url: String, statements: Vec<String>)
where
    C: sqlx::Connection,
    for<'c> &'c mut C: sqlx::Executor<'c, Database = C::Database>,
{
    clean_up_on_drop(what, move || async move {
        let mut connection = C::connect(&url).await.map_err(|error| error.to_string())?;
        for statement in &statements {
            sqlx::raw_sql(statement)
                .execute(&mut connection)
                .await
                .map_err(|error| error.to_string())?;
        }
        connection.close().await.map_err(|error| error.to_string())
    });
}
