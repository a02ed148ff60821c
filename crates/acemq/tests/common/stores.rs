//! Idempotency stores for the tests: one backing (a unique PostgreSQL table, a unique Redis
//! prefix, or one in-memory store) with as many instances on it as a test needs, removed
//! afterwards; and a store wrapper that reports what each claim found.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use acemq::idempotency::postgres::PostgresIdempotencyStore;
use acemq::idempotency::redis::RedisIdempotencyStore;
use acemq::idempotency::{ClaimResult, IdempotencyStore, InMemoryIdempotencyStore, StoreError};
use futures_util::future::BoxFuture;
use polyq_testkit::brokers::DeleteRedisKeys;
use polyq_testkit::postgres::DropTables;
use sqlx::PgPool;
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy)]
pub enum Kind {
    InMemory,
    Postgres,
    Redis,
}

/// One shared store for a test: a unique PostgreSQL table or Redis prefix, removed afterwards.
pub struct Backing {
    pub kind: Kind,
    memory: InMemoryIdempotencyStore,
    pub pool: Option<PgPool>,
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
        Self {
            kind,
            memory: InMemoryIdempotencyStore::new(),
            pool,
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
    let _keys = matches!(kind, Kind::Redis)
        .then(|| DeleteRedisKeys::new(&polyq_testkit::redis_url(), [&backing.prefix]));
    body(Arc::clone(&backing)).await;
}
