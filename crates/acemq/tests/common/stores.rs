//! Idempotency stores for the tests: one backing (a unique PostgreSQL or MariaDB table, a unique
//! Redis prefix, or one in-memory store) with as many instances on it as a test needs, removed
//! afterwards; and a store wrapper that reports what each claim found.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use acemq::idempotency::mysql::MySqlIdempotencyStore;
use acemq::idempotency::postgres::PostgresIdempotencyStore;
use acemq::idempotency::redis::RedisIdempotencyStore;
use acemq::idempotency::{ClaimResult, IdempotencyStore, InMemoryIdempotencyStore, StoreError};
use futures_util::future::BoxFuture;
use polyq_testkit::brokers::DeleteRedisKeys;
use polyq_testkit::postgres::DropTables;
use sqlx::{MySqlPool, PgPool};
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy)]
pub enum Kind {
    InMemory,
    Postgres,
    MySql,
    Redis,
}

/// One shared store for a test: a unique PostgreSQL or MariaDB table or Redis prefix, removed
/// afterwards.
pub struct Backing {
    pub kind: Kind,
    memory: InMemoryIdempotencyStore,
    pool: Option<PgPool>,
    mysql: Option<MySqlPool>,
    pub table: String,
    pub prefix: String,
}

pub fn unique_identifier() -> String {
    polyq_testkit::unique_name("acemq_idem").replace('.', "_")
}

impl Backing {
    /// A fresh backing: a unique table or prefix.
    pub async fn new(kind: Kind) -> Self {
        Self::on(kind, &unique_identifier()).await
    }

    /// The backing named `name` (the table, and the Redis prefix `<name>:`), made by another
    /// test process.
    pub async fn on(kind: Kind, name: &str) -> Self {
        let pool = match kind {
            Kind::Postgres => Some(
                PgPool::connect(&polyq_testkit::postgres_url())
                    .await
                    .expect("connect to PostgreSQL"),
            ),
            _ => None,
        };
        let mysql = match kind {
            Kind::MySql => Some(
                MySqlPool::connect(&polyq_testkit::mariadb_url())
                    .await
                    .expect("connect to MariaDB"),
            ),
            _ => None,
        };
        Self {
            kind,
            memory: InMemoryIdempotencyStore::new(),
            pool,
            mysql,
            table: name.to_owned(),
            prefix: format!("{name}:"),
        }
    }

    /// Another instance on the same keys, with its own identity (in memory: the same store,
    /// which one process shares).
    pub async fn instance(&self, claim_timeout: Duration) -> Arc<dyn IdempotencyStore> {
        match self.kind {
            Kind::InMemory => Arc::new(self.memory.clone().claim_timeout(claim_timeout)),
            Kind::Postgres => {
                let store = PostgresIdempotencyStore::new(self.pool.clone().unwrap())
                    .table(&self.table)
                    .unwrap()
                    .claim_timeout(claim_timeout);
                store.migrate().await.expect("migrate");
                Arc::new(store)
            }
            Kind::MySql => {
                let store = MySqlIdempotencyStore::new(self.mysql.clone().unwrap())
                    .table(&self.table)
                    .unwrap()
                    .claim_timeout(claim_timeout);
                store.migrate().await.expect("migrate");
                Arc::new(store)
            }
            Kind::Redis => Arc::new(
                RedisIdempotencyStore::connect(&polyq_testkit::redis_url())
                    .await
                    .expect("connect to Redis")
                    .prefix(&self.prefix)
                    .unwrap()
                    .claim_timeout(claim_timeout),
            ),
        }
    }
}

/// A row of the backing's table, in the Java port's layout.
#[derive(Debug, PartialEq, Eq)]
pub struct JavaRow {
    pub state: String,
    pub claimed_by: Option<String>,
    pub live: bool,
}

impl Backing {
    /// Writes a row the way the Java port's JdbcIdempotencyStore does, expiring
    /// `expires_in_seconds` from now (negative: in the past), in the table's SQL dialect.
    pub async fn write_java_row(
        &self,
        key: &str,
        state: &str,
        claimed_by: Option<&str>,
        expires_in_seconds: i64,
    ) {
        let table = &self.table;
        let columns = "message_id, state, claimed_by, recorded_at, expires_at";
        match self.kind {
            Kind::Postgres => sqlx::query(&format!(
                "INSERT INTO {table} ({columns}) \
                 VALUES ($1, $2, $3, now(), now() + make_interval(secs => $4))"
            ))
            .bind(key)
            .bind(state)
            .bind(claimed_by)
            .bind(expires_in_seconds as f64)
            .execute(self.pool.as_ref().unwrap())
            .await
            .map(drop),
            Kind::MySql => sqlx::query(&format!(
                "INSERT INTO {table} ({columns}) \
                 VALUES (?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? SECOND)"
            ))
            .bind(key)
            .bind(state)
            .bind(claimed_by)
            .bind(expires_in_seconds)
            .execute(self.mysql.as_ref().unwrap())
            .await
            .map(drop),
            kind => panic!("{kind:?} has no table"),
        }
        .expect("write a row");
    }

    /// The row of `key`, as the Java store reads it.
    pub async fn java_row(&self, key: &str) -> JavaRow {
        let table = &self.table;
        let (state, claimed_by, live): (String, Option<String>, bool) = match self.kind {
            Kind::Postgres => sqlx::query_as(&format!(
                "SELECT state, claimed_by, expires_at > now() FROM {table} WHERE message_id = $1"
            ))
            .bind(key)
            .fetch_one(self.pool.as_ref().unwrap())
            .await,
            Kind::MySql => {
                sqlx::query_as(&format!(
                    "SELECT state, claimed_by, expires_at > UTC_TIMESTAMP(6) FROM {table} \
                 WHERE message_id = ?"
                ))
                .bind(key)
                .fetch_one(self.mysql.as_ref().unwrap())
                .await
            }
            kind => panic!("{kind:?} has no table"),
        }
        .expect("read a row");
        JavaRow {
            state,
            claimed_by,
            live,
        }
    }

    /// Moves the deadline of `key` into the past.
    pub async fn expire_row(&self, key: &str) {
        let table = &self.table;
        match self.kind {
            Kind::Postgres => sqlx::query(&format!(
                "UPDATE {table} SET expires_at = now() - interval '1 second' WHERE message_id = $1"
            ))
            .bind(key)
            .execute(self.pool.as_ref().unwrap())
            .await
            .map(drop),
            Kind::MySql => sqlx::query(&format!(
                "UPDATE {table} SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND \
                 WHERE message_id = ?"
            ))
            .bind(key)
            .execute(self.mysql.as_ref().unwrap())
            .await
            .map(drop),
            kind => panic!("{kind:?} has no table"),
        }
        .expect("expire a row");
    }
}

/// A store that reports what each claim found.
pub struct Observed {
    pub inner: Arc<dyn IdempotencyStore>,
    pub claims: mpsc::UnboundedSender<ClaimResult>,
}

impl IdempotencyStore for Observed {
    fn claim<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ClaimResult, StoreError>> {
        Box::pin(async move {
            let found = self.inner.claim(key).await?;
            self.claims.send(found).ok();
            Ok(found)
        })
    }

    fn confirm<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.confirm(key)
    }

    fn release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.release(key)
    }

    fn purge_expired(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.inner.purge_expired()
    }
}

/// Runs `body` with a fresh backing of `kind`, removing it afterwards even when it fails.
pub async fn with_backing<F, Fut>(kind: Kind, body: F)
where
    F: FnOnce(Arc<Backing>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let backing = Arc::new(Backing::new(kind).await);
    // Made before any instance migrates the table or writes a key.
    let _table = matches!(kind, Kind::Postgres).then(|| DropTables::new([&backing.table]));
    let _mysql_table = matches!(kind, Kind::MySql)
        .then(|| polyq_testkit::mysql::DropTables::new([&backing.table]));
    let _keys = matches!(kind, Kind::Redis)
        .then(|| DeleteRedisKeys::new(&polyq_testkit::redis_url(), [&backing.prefix]));
    body(Arc::clone(&backing)).await;
}
