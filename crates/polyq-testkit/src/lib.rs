//! Test support shared by the polyq crates.
//!
//! Broker tests talk to the real brokers. When a broker cannot be reached the test fails with a
//! message naming the broker and its URL: a broker test never passes silently.

pub mod brokers;
pub mod child;
mod guard;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod proxy;
pub mod rabbitmq;
pub mod rabbitmq_cluster;
pub mod rabbitmq_node;
pub mod redis_nodes;
mod shared_fixtures;
pub mod tls;

pub use shared_fixtures::assert_no_drift;

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Default RabbitMQ URL; override with `POLYQ_AMQP_URL`.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Default Redis URL; override with `POLYQ_REDIS_URL`.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379/0";

/// The RabbitMQ URL for broker tests, after checking that the broker accepts TCP connections.
///
/// # Panics
/// When the broker cannot be reached, naming the broker and the URL (credentials hidden).
pub fn amqp_url() -> String {
    let url = std::env::var("POLYQ_AMQP_URL").unwrap_or_else(|_| DEFAULT_AMQP_URL.to_owned());
    require_reachable("RabbitMQ", &url, 5672);
    url
}

/// The Redis URL for broker tests, after checking that the server accepts TCP connections.
///
/// # Panics
/// When the server cannot be reached, naming it and the URL (credentials hidden).
pub fn redis_url() -> String {
    let url = std::env::var("POLYQ_REDIS_URL").unwrap_or_else(|_| DEFAULT_REDIS_URL.to_owned());
    require_reachable("Redis", &url, 6379);
    url
}

/// Default PostgreSQL URL (trust authentication, database `test`); override with
/// `POLYQ_POSTGRES_URL`.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The PostgreSQL URL for store tests, after checking that the server accepts TCP connections.
///
/// # Panics
/// When the server cannot be reached, naming it and the URL (credentials hidden).
pub fn postgres_url() -> String {
    let url =
        std::env::var("POLYQ_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned());
    require_reachable("PostgreSQL", &url, 5432);
    url
}

/// Default MariaDB URL (root with an empty password, database `test`); override with
/// `POLYQ_MARIADB_URL`.
pub const DEFAULT_MARIADB_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// The MariaDB (or MySQL) URL for store tests, after checking that the server accepts TCP
/// connections.
///
/// # Panics
/// When the server cannot be reached, naming it and the URL (credentials hidden).
pub fn mariadb_url() -> String {
    let url = std::env::var("POLYQ_MARIADB_URL").unwrap_or_else(|_| DEFAULT_MARIADB_URL.to_owned());
    require_reachable("MariaDB", &url, 3306);
    url
}

/// A name no other test run uses: `<prefix>.<random>`.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}.{}", uuid::Uuid::new_v4().simple())
}

fn require_reachable(broker: &str, url: &str, default_port: u16) {
    let shown = polyq_amqp::redact_url(url);
    let authority = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let target = if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:{default_port}")
    };
    let reachable = target.to_socket_addrs().ok().is_some_and(|mut addrs| {
        addrs.any(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(3)).is_ok())
    });
    assert!(
        reachable,
        "{broker} is not reachable at {shown}: start it (scripts/test starts the local one) \
         or point the tests at another with the environment variable"
    );
}
