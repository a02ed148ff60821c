//! Outbox tables for the tests, on PostgreSQL or MariaDB: a unique outbox table and business
//! table, dropped afterwards, and what a test does with them in either database's SQL.

#![allow(dead_code)]

use acemq::outbox::{MySqlOutbox, Outbox, OutboxRelay};
use acemq::{AceMq, Envelope};
use serde_json::{Value, json};
use sqlx::{MySqlPool, PgPool, Row as _};

/// The database an outbox lives in.
#[derive(Debug, Clone, Copy)]
pub enum Db {
    Postgres,
    MySql,
}

/// An outbox in one of the databases, on its pool.
pub enum Store {
    Postgres(PgPool, Outbox),
    MySql(MySqlPool, MySqlOutbox),
}

/// A unique outbox table and business table, dropped with it, also when the test fails.
pub struct Tables {
    pub store: Store,
    pub outbox: String,
    pub business: String,
    /// The table-drop guard of the database.
    _dropped: Box<dyn Send + Sync>,
}

/// Runs `$body` with `$tx`, a transaction of the tables' database, `$outbox`, its writer, and
/// `$placeholder`, how that database writes a statement's first parameter; then commits when
/// `$commit` holds, or rolls back.
macro_rules! in_transaction {
    ($tables:expr, $commit:expr, |$tx:ident, $outbox:ident, $placeholder:ident| $body:block) => {
        match &$tables.store {
            Store::Postgres(db, $outbox) => {
                let $placeholder = "$1";
                let mut $tx = db.begin().await.unwrap();
                let value = $body;
                if $commit {
                    $tx.commit().await
                } else {
                    $tx.rollback().await
                }
                .unwrap();
                value
            }
            Store::MySql(db, $outbox) => {
                let $placeholder = "?";
                let mut $tx = db.begin().await.unwrap();
                let value = $body;
                if $commit {
                    $tx.commit().await
                } else {
                    $tx.rollback().await
                }
                .unwrap();
                value
            }
        }
    };
}

/// Runs `$sql` (its placeholders `?`, written `$1`, `$2` ... on PostgreSQL) on the tables'
/// database, binding `$value`s, with `$run` (`execute`, `fetch_one`, ...); the result is `$map`ped.
macro_rules! on_db {
    ($tables:expr, $sql:expr, [$($value:expr),*], $run:ident, |$result:ident| $map:expr) => {
        match &$tables.store {
            Store::Postgres(db, ..) => {
                let mut n = 0;
                let sql = $sql.split('?').fold(String::new(), |mut sql, part| {
                    if n > 0 {
                        sql.push_str(&format!("${n}"));
                    }
                    n += 1;
                    sql.push_str(part);
                    sql
                });
                let $result = sqlx::query(&sql)$(.bind($value))*.$run(db).await.unwrap();
                $map
            }
            Store::MySql(db, ..) => {
                let $result = sqlx::query(&$sql)$(.bind($value))*.$run(db).await.unwrap();
                $map
            }
        }
    };
}

impl Tables {
    /// Fresh tables, dropped with the value.
    pub async fn new(db: Db) -> Self {
        Self::named(
            db,
            &polyq_testkit::unique_name("t").replace(['-', '.'], "_"),
        )
        .await
    }

    /// The tables named with `suffix`, made unless they exist, dropped with the value.
    pub async fn named(db: Db, suffix: &str) -> Self {
        let (outbox, business) = (format!("acemq_outbox_{suffix}"), format!("orders_{suffix}"));
        let names = [outbox.as_str(), business.as_str()];
        let (store, dropped): (_, Box<dyn Send + Sync>) = match db {
            Db::Postgres => {
                let dropped = polyq_testkit::postgres::DropTables::new(names);
                let pool = PgPool::connect(&polyq_testkit::postgres_url())
                    .await
                    .expect("PostgreSQL is reachable (POLYQ_POSTGRES_URL)");
                let writer = Outbox::in_table(&outbox).unwrap();
                writer.migrate(&pool).await.expect("migrate");
                // Twice: the migration is safe to run again.
                writer.migrate(&pool).await.expect("migrate again");
                (Store::Postgres(pool, writer), Box::new(dropped))
            }
            Db::MySql => {
                let dropped = polyq_testkit::mysql::DropTables::new(names);
                let pool = MySqlPool::connect(&polyq_testkit::mariadb_url())
                    .await
                    .expect("MariaDB is reachable (POLYQ_MARIADB_URL)");
                let writer = MySqlOutbox::in_table(&outbox).unwrap();
                writer.migrate(&pool).await.expect("migrate");
                writer.migrate(&pool).await.expect("migrate again");
                (Store::MySql(pool, writer), Box::new(dropped))
            }
        };
        let tables = Self {
            store,
            outbox,
            business,
            _dropped: dropped,
        };
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {} (id BIGINT PRIMARY KEY)",
            tables.business
        );
        on_db!(tables, create, [], execute, |_done| ());
        tables
    }

    pub fn relay(&self, mq: &AceMq) -> acemq::outbox::OutboxRelayBuilder {
        match &self.store {
            Store::Postgres(db, ..) => OutboxRelay::builder(db.clone(), mq),
            Store::MySql(db, ..) => OutboxRelay::builder_mysql(db.clone(), mq),
        }
        .table(&self.outbox)
    }

    /// Places an order and records its message in one transaction, committed or rolled back.
    pub async fn place(&self, mq: &AceMq, queue: &str, id: i64, commit: bool) -> Envelope {
        let publisher = mq.publisher::<Value>("", queue);
        in_transaction!(self, commit, |tx, outbox, placeholder| {
            let insert = format!("INSERT INTO {} (id) VALUES ({placeholder})", self.business);
            sqlx::query(&insert)
                .bind(id)
                .execute(&mut *tx)
                .await
                .unwrap();
            outbox
                .record(&mut tx, &publisher, &json!({ "id": id }))
                .await
                .expect("recorded")
        })
    }

    pub async fn count(&self, table: &str, filter: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {table} {filter}");
        on_db!(self, sql, [], fetch_one, |row| row.get(0))
    }
}
