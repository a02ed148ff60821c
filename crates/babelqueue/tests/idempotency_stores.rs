//! The persistent idempotency stores' own contract on the real Redis, PostgreSQL and MariaDB, beyond the
//! conformance sequences: a claim is not a commit, a release leaves a commit alone, an expired
//! claim (a consumer that died holding it) is taken over, an expired seen-set row counts as absent,
//! and the rows and keys are the upstream layouts'. Expiry is made by moving the stored expiry
//! into the past, never by waiting.

#![cfg(all(feature = "redis", feature = "postgres", feature = "mysql"))]

mod runtime_support;

use std::time::Duration;

use babelqueue::idempotency::{
    Claim, ClaimingStore, IdempotencyStore, MySqlStore, PostgresClaimingStore, PostgresStore,
    RedisClaimingStore, RedisStore,
};
use polyq_testkit::brokers::DeleteRedisKeys;
use polyq_testkit::postgres::{DropSchemas, DropTables};
use redis::AsyncCommands;

const TTL: Duration = Duration::from_secs(3600);

async fn claiming_contract(store: &dyn ClaimingStore, id: &str) {
    assert!(store.claim(id, TTL).await.unwrap(), "the first claim wins");
    assert!(!store.claim(id, TTL).await.unwrap(), "a live claim holds");
    assert!(!store.seen(id).await.unwrap(), "a claim is not a commit");
    store.release(id).await.unwrap();
    assert!(
        store.claim(id, TTL).await.unwrap(),
        "released, claimed again"
    );
    store.remember(id).await.unwrap();
    store.release(id).await.unwrap();
    assert!(store.seen(id).await.unwrap(), "a release leaves a commit");
    assert!(
        !store.claim(id, TTL).await.unwrap(),
        "a commit is never claimed"
    );
    assert_eq!(
        store.try_claim(id, TTL).await.unwrap(),
        Claim::Committed,
        "a lost claim tells a commit"
    );
    store.forget(id).await.unwrap();
    assert!(!store.seen(id).await.unwrap());
    assert_eq!(store.try_claim(id, TTL).await.unwrap(), Claim::Won);
    assert_eq!(
        store.try_claim(id, TTL).await.unwrap(),
        Claim::Held,
        "a lost claim tells a claim in flight"
    );
    store.forget(id).await.unwrap();
}

#[tokio::test]
async fn redis_claiming_store() {
    let url = polyq_testkit::redis_url();
    let prefix = format!("{}:", polyq_testkit::unique_name("bq-idem-store"));
    let _keys = DeleteRedisKeys::new(&url, [&prefix]);
    let store = RedisClaimingStore::connect(&url)
        .await
        .unwrap()
        .prefix(&prefix)
        .unwrap();
    claiming_contract(&store, "id-A").await;

    let mut redis = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let key = format!("{prefix}id-B");
    assert!(store.claim("id-B", TTL).await.unwrap());
    let value: String = redis.get(&key).await.unwrap();
    assert_eq!(value, "1", "PHP's CLAIMED");
    let () = redis::cmd("PEXPIREAT")
        .arg(&key)
        .arg(1)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(
        store.claim("id-B", TTL).await.unwrap(),
        "an expired claim is taken over"
    );
    store.remember("id-B").await.unwrap();
    let value: String = redis.get(&key).await.unwrap();
    let ttl: i64 = redis.pttl(&key).await.unwrap();
    assert_eq!((value.as_str(), ttl), ("2", -1), "PHP's SEEN, no expiry");
}

#[tokio::test]
async fn redis_seen_set_keeps_the_go_layout() {
    let url = polyq_testkit::redis_url();
    let prefix = format!("{}:", polyq_testkit::unique_name("bq-idem-store"));
    let _keys = DeleteRedisKeys::new(&url, [&prefix]);
    let store = RedisStore::connect(&url)
        .await
        .unwrap()
        .prefix(&prefix)
        .unwrap()
        .ttl(TTL);
    assert!(!store.seen("id-A").await.unwrap());
    store.remember("id-A").await.unwrap();
    assert!(store.seen("id-A").await.unwrap());
    let mut redis = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let key = format!("{prefix}id-A");
    let value: String = redis.get(&key).await.unwrap();
    let ttl: i64 = redis.pttl(&key).await.unwrap();
    assert_eq!(value, "1");
    assert!(ttl > 0 && ttl <= 3_600_000, "PX from the TTL: {ttl}");
    store.forget("id-A").await.unwrap();
    assert!(!store.seen("id-A").await.unwrap());
}

/// A pool and a table name of this test's own, and the guard that drops the table, also when
/// the test fails.
async fn table() -> (sqlx::PgPool, String, DropTables) {
    let pool = sqlx::PgPool::connect(&polyq_testkit::postgres_url())
        .await
        .unwrap();
    let name = polyq_testkit::unique_name("bq_idem_store").replace('.', "_");
    let dropped = DropTables::new([&name]);
    (pool, name, dropped)
}

#[tokio::test]
async fn postgres_claiming_store() {
    let (pool, table, _dropped) = table().await;
    let store = PostgresClaimingStore::new(pool.clone())
        .table(&table)
        .unwrap();
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    claiming_contract(&store, "id-A").await;

    assert!(store.claim("id-B", TTL).await.unwrap());
    let (state, expires): (String, Option<i64>) = sqlx::query_as(&format!(
        "SELECT state, expires_at FROM {table} WHERE message_id = 'id-B'"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(state, "claimed");
    assert!(expires.is_some(), "epoch seconds");
    sqlx::query(&format!(
        "UPDATE {table} SET expires_at = 0 WHERE message_id = 'id-B'"
    ))
    .execute(&pool)
    .await
    .unwrap();
    assert!(
        store.claim("id-B", TTL).await.unwrap(),
        "an expired claim is taken over"
    );
    assert!(!store.claim("id-B", TTL).await.unwrap(), "and holds again");
    sqlx::query(&format!(
        "UPDATE {table} SET expires_at = 0 WHERE message_id = 'id-B'"
    ))
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(store.purge_expired().await.unwrap(), 1);
    store.remember("id-C").await.unwrap();
    let (state, expires): (String, Option<i64>) = sqlx::query_as(&format!(
        "SELECT state, expires_at FROM {table} WHERE message_id = 'id-C'"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((state.as_str(), expires), ("seen", None));
}

/// A seen-set row past its TTL counts as absent, is taken over by the next remember, and is
/// what `purge` deletes; `expire` moves a row's expiry into the past.
async fn seen_set_expiry_contract(
    store: &dyn IdempotencyStore,
    expire: impl AsyncFn(&str),
    purge: impl AsyncFn() -> u64,
) {
    store.remember("id-A").await.unwrap();
    assert!(store.seen("id-A").await.unwrap());
    expire("id-A").await;
    assert!(
        !store.seen("id-A").await.unwrap(),
        "expired counts as absent"
    );
    store.remember("id-A").await.unwrap();
    assert!(
        store.seen("id-A").await.unwrap(),
        "an expired row is taken over"
    );
    store.remember("id-B").await.unwrap();
    expire("id-B").await;
    assert_eq!(purge().await, 1);
    store.forget("id-A").await.unwrap();
    assert!(!store.seen("id-A").await.unwrap());
}

#[tokio::test]
async fn postgres_seen_set_treats_an_expired_row_as_absent() {
    let (pool, table, _dropped) = table().await;
    let store = PostgresStore::new(pool.clone())
        .table(&table)
        .unwrap()
        .ttl(TTL);
    store.migrate().await.unwrap();
    let expire = async |id: &str| {
        sqlx::query(&format!(
            "UPDATE {table} SET expires_at = now() - interval '1 second' WHERE message_id = $1"
        ))
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    };
    seen_set_expiry_contract(&store, expire, async || {
        store.purge_expired().await.unwrap()
    })
    .await;
}

/// A pool on MariaDB and a table name of this test's own, and the guard that drops the table,
/// also when the test fails.
async fn mysql_table() -> (sqlx::MySqlPool, String, polyq_testkit::mysql::DropTables) {
    let pool = sqlx::MySqlPool::connect(&polyq_testkit::mariadb_url())
        .await
        .unwrap();
    let name = polyq_testkit::unique_name("bq_idem_store").replace('.', "_");
    let dropped = polyq_testkit::mysql::DropTables::new([&name]);
    (pool, name, dropped)
}

#[tokio::test]
async fn mysql_seen_set_treats_an_expired_row_as_absent() {
    let (pool, table, _dropped) = mysql_table().await;
    let store = MySqlStore::new(pool.clone())
        .table(&table)
        .unwrap()
        .ttl(TTL);
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    let expire = async |id: &str| {
        sqlx::query(&format!(
            "UPDATE {table} SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND \
             WHERE message_id = ?"
        ))
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    };
    seen_set_expiry_contract(&store, expire, async || {
        store.purge_expired().await.unwrap()
    })
    .await;
}

/// The MariaDB seen-set keeps the Go layout's columns, remembers without a TTL as a NULL
/// expiry, compares ids exactly, and refuses an id its key column cannot hold.
#[tokio::test]
async fn mysql_seen_set_keeps_the_go_columns() {
    let (pool, table, _dropped) = mysql_table().await;
    let store = MySqlStore::new(pool.clone()).table(&table).unwrap();
    store.migrate().await.unwrap();
    let columns: String = sqlx::query_scalar(
        "SELECT GROUP_CONCAT(column_name ORDER BY column_name) FROM information_schema.columns \
         WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(&table)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(columns, "created_at,expires_at,message_id");
    store.remember("id-A").await.unwrap();
    store.remember("id-A").await.unwrap();
    let (rows, without_expiry): (i64, i64) = sqlx::query_as(&format!(
        "SELECT COUNT(*), CAST(SUM(expires_at IS NULL) AS SIGNED) FROM {table}"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((rows, without_expiry), (1, 1), "one row, no expiry");
    assert!(!store.seen("ID-A").await.unwrap(), "ids differ by case");
    let refused = store.remember(&"x".repeat(256)).await;
    assert!(
        matches!(
            refused,
            Err(babelqueue::Error::StoreFailed { store: "mysql", .. })
        ),
        "{refused:?}"
    );
}

#[tokio::test]
async fn mysql_the_shipped_migration_creates_the_default_table() {
    // In a database of its own (one connection, `USE`), so the default name is free.
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&polyq_testkit::mariadb_url())
        .await
        .unwrap();
    let database = polyq_testkit::unique_name("bq_idem_migration").replace('.', "_");
    let _dropped = polyq_testkit::mysql::DropDatabases::new([&database]);
    sqlx::raw_sql(&format!("CREATE DATABASE {database}"))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::raw_sql(&format!("USE {database}"))
        .execute(&pool)
        .await
        .unwrap();
    let store = MySqlStore::new(pool.clone());
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    let found: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name, GROUP_CONCAT(column_name ORDER BY column_name) \
         FROM information_schema.columns WHERE table_schema = ? GROUP BY table_name",
    )
    .bind(&database)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        found,
        [(
            "babelqueue_idempotency".to_owned(),
            "created_at,expires_at,message_id".to_owned()
        )]
    );
}

/// An unreachable MariaDB fails each call with a store error, never an answer.
#[tokio::test]
async fn mysql_an_unreachable_database_fails_each_call() {
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy("mysql://root@127.0.0.1:1/test")
        .unwrap();
    let store = MySqlStore::new(pool);
    let seen = store.seen("id-A").await;
    assert!(
        matches!(&seen, Err(e @ babelqueue::Error::StoreFailed { store: "mysql", .. }) if e.is_transient()),
        "{seen:?}"
    );
    assert!(store.remember("id-A").await.is_err());
}

#[tokio::test]
async fn the_shipped_migration_creates_both_default_tables() {
    // In a schema of its own (one connection, its search path), so the default names are free.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&polyq_testkit::postgres_url())
        .await
        .unwrap();
    let schema = polyq_testkit::unique_name("bq_idem_migration").replace('.', "_");
    let _dropped = DropSchemas::new([&schema]);
    sqlx::raw_sql(&format!(
        "CREATE SCHEMA {schema}; SET search_path TO {schema}"
    ))
    .execute(&pool)
    .await
    .unwrap();
    babelqueue::idempotency::migrate(&pool).await.unwrap();
    babelqueue::idempotency::migrate(&pool).await.unwrap();
    for (table, columns) in [
        ("babelqueue_idempotency", "created_at,expires_at,message_id"),
        ("bq_idempotency", "expires_at,message_id,state"),
    ] {
        let found: String = sqlx::query_scalar(
            "SELECT string_agg(column_name, ',' ORDER BY column_name) FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = $2",
        )
        .bind(&schema)
        .bind(table)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(found, columns, "{table}");
    }
}

/// Claims of one id made at once (batched into one statement, or a few) are won exactly once;
/// claims of distinct ids among them are each won.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_claims_win_each_id_once() {
    let (pool, table, _dropped) = table().await;
    let store = PostgresClaimingStore::new(pool.clone())
        .table(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let ids: Vec<String> = (0..40)
        .map(|n| format!("id-{}", n % 10))
        .chain((0..60).map(|n| format!("solo-{n}")))
        .collect();
    let won = futures_util::future::join_all(ids.iter().map(|id| store.claim(id, TTL))).await;
    let mut winners = std::collections::HashMap::<&str, usize>::new();
    for (id, won) in ids.iter().zip(won) {
        if won.unwrap() {
            *winners.entry(id.as_str()).or_default() += 1;
        }
    }
    assert_eq!(winners.len(), 70, "every id was won: {winners:?}");
    assert!(winners.values().all(|&wins| wins == 1), "{winners:?}");

    let committed = ids.iter().step_by(2).map(|id| store.remember(id));
    for commit in futures_util::future::join_all(committed).await {
        commit.unwrap();
    }
    let seen = futures_util::future::join_all(ids.iter().map(|id| store.seen(id))).await;
    let expected: std::collections::HashSet<&String> = ids.iter().step_by(2).collect();
    for (id, seen) in ids.iter().zip(seen) {
        assert_eq!(seen.unwrap(), expected.contains(id), "{id}");
    }
    // Claims lost in one batch: each tells whether its id was committed or is held.
    let fresh: Vec<String> = (0..20).map(|n| format!("fresh-{n}")).collect();
    let all: Vec<&String> = ids.iter().chain(&fresh).collect();
    let claims =
        futures_util::future::join_all(all.iter().map(|id| store.try_claim(id, TTL))).await;
    let mut won = std::collections::HashSet::new();
    for (id, claim) in all.iter().zip(claims) {
        let claim = claim.unwrap();
        if expected.contains(id) {
            assert_eq!(claim, Claim::Committed, "{id}");
        } else if id.starts_with("fresh-") && won.insert(*id) {
            assert_eq!(claim, Claim::Won, "{id}");
        } else {
            assert_eq!(claim, Claim::Held, "{id}");
        }
    }
}

/// An id the table cannot hold (past `VARCHAR(255)`) fails its own call, not the others
/// batched with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_id_the_table_refuses_fails_only_its_own_call() {
    let (pool, table, _dropped) = table().await;
    let store = PostgresClaimingStore::new(pool.clone())
        .table(&table)
        .unwrap();
    store.migrate().await.unwrap();
    let long = "x".repeat(300);
    let ids: Vec<String> = (0..30)
        .map(|n| format!("ok-{n}"))
        .chain([long.clone()])
        .collect();
    let claims = futures_util::future::join_all(ids.iter().map(|id| store.claim(id, TTL))).await;
    for (id, claim) in ids.iter().zip(&claims) {
        if *id == long {
            assert!(
                matches!(claim, Err(babelqueue::Error::StoreFailed { .. })),
                "{claim:?}"
            );
        } else {
            assert!(matches!(claim, Ok(true)), "{id}: {claim:?}");
        }
    }
    let commits = futures_util::future::join_all(ids.iter().map(|id| store.remember(id))).await;
    for (id, commit) in ids.iter().zip(commits) {
        assert_eq!(commit.is_err(), *id == long, "{id}");
    }
}

/// Lookups and records made at once on the seen-set each get their own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_seen_set_answers_each_of_concurrent_calls() {
    let (pool, table, _dropped) = table().await;
    let store = PostgresStore::new(pool.clone()).table(&table).unwrap();
    store.migrate().await.unwrap();
    let ids: Vec<String> = (0..100).map(|n| format!("id-{}", n % 50)).collect();
    let remembered = ids
        .iter()
        .filter(|id| id.ends_with('7'))
        .map(|id| store.remember(id));
    for remember in futures_util::future::join_all(remembered).await {
        remember.unwrap();
    }
    let seen = futures_util::future::join_all(ids.iter().map(|id| store.seen(id))).await;
    for (id, seen) in ids.iter().zip(seen) {
        assert_eq!(seen.unwrap(), id.ends_with('7'), "{id}");
    }
    let rows: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {table} WHERE expires_at IS NULL"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(rows, 5, "one row per id, no expiry without a TTL");
}

/// A lookup is planned for the table as it is when it runs: after many lookups on a small table
/// no lookup of either store runs on a cached generic plan (which PostgreSQL keeps while the
/// table grows, until the next `ANALYZE`: a plan for an empty table scans every row later).
#[tokio::test]
async fn postgres_lookups_keep_no_plan_made_while_the_table_was_small() {
    // One connection, so every statement of the stores is prepared (or not) on the one this
    // test then inspects.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&polyq_testkit::postgres_url())
        .await
        .unwrap();
    let (_, seen_set_table, _seen_set_dropped) = table().await;
    let claiming_table = format!("{seen_set_table}_claiming");
    let _claiming_dropped = DropTables::new([&claiming_table]);
    let seen_set = PostgresStore::new(pool.clone())
        .table(&seen_set_table)
        .unwrap();
    seen_set.migrate().await.unwrap();
    let claiming = PostgresClaimingStore::new(pool.clone())
        .table(&claiming_table)
        .unwrap();
    claiming.migrate().await.unwrap();
    // Batches of many ids, as a busy worker's: PostgreSQL weighs a generic plan against the
    // plans for the ids given, and prefers it for arrays longer than the ten it assumes.
    for round in 0..10 {
        let ids: Vec<String> = (0..100).map(|n| format!("id-{round}-{n}")).collect();
        let lookups = ids
            .iter()
            .flat_map(|id| [seen_set.seen(id), claiming.seen(id)]);
        for seen in futures_util::future::join_all(lookups).await {
            assert!(!seen.unwrap());
        }
        // Claims lost, so that the claim also reads the ids it did not win.
        for claim in
            futures_util::future::join_all(ids.iter().map(|id| claiming.claim(id, TTL))).await
        {
            assert!(claim.unwrap());
        }
        for claim in
            futures_util::future::join_all(ids.iter().map(|id| claiming.try_claim(id, TTL))).await
        {
            assert_eq!(claim.unwrap(), Claim::Held);
        }
    }
    let cached: Vec<(String, i64)> = sqlx::query_as(
        "SELECT statement, generic_plans FROM pg_prepared_statements \
         WHERE statement LIKE 'SELECT message_id FROM %' AND generic_plans > 0",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(cached.is_empty(), "lookups on cached plans: {cached:?}");
}
