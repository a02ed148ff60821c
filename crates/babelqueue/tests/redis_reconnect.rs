//! Both Redis layouts through a TCP proxy that cuts every connection: a worker's wait for work,
//! which runs on a connection kept idle between waits, is served again as soon as the network
//! is back, instead of failing on the connection that the cut broke.

#![cfg(feature = "redis")]

mod redis_support;

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use babelqueue::transport::Transport;
use babelqueue::transport::redis::{LaravelTransport, RedisOptions, RedisTransport};
use bytes::Bytes;
use polyq_testkit::brokers::DeleteRedisKeys;
use polyq_testkit::proxy::TcpProxy;
use redis_support::{NO_WAIT, UPPER_BOUND};

/// Messages published after the cut, each of which must be reserved and acked.
const AFTER_CUT: usize = 20;
/// A wait short enough to end on an empty queue within the test, long enough to block.
const SHORT_WAIT: Duration = Duration::from_millis(200);

fn upstream(url: &str) -> SocketAddr {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    let host = rest.split('/').next().unwrap();
    host.to_socket_addrs()
        .unwrap()
        .next()
        .expect("the Redis URL names a reachable address")
}

/// The URL of the suite's Redis, with its host and port replaced by the proxy's.
fn through(url: &str, proxy: &TcpProxy) -> String {
    let database = url.rsplit_once('/').map_or("0", |(_, db)| db);
    format!("redis://{}/{database}", proxy.address())
}

async fn waits_again_after_a_cut<T: Transport>(transport: &T, proxy: &TcpProxy, queue: &str) {
    // A wait on the empty queue leaves its connection idle for the next one.
    assert!(
        transport
            .reserve(queue, SHORT_WAIT)
            .await
            .unwrap()
            .is_none()
    );

    proxy.cut();
    proxy.restore();
    // The command connection reconnects by itself; a reserve that does not wait uses it only.
    let deadline = Instant::now() + UPPER_BOUND;
    while transport.reserve(queue, NO_WAIT).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the command connection did not come back"
        );
        tokio::task::yield_now().await;
    }

    // The wait, on the empty queue, must not fail on the idle connection the cut broke.
    match transport.reserve(queue, SHORT_WAIT).await {
        Ok(waited) => assert!(waited.is_none(), "the queue was empty"),
        Err(error) => panic!("a wait after the network came back failed: {error}"),
    }

    for n in 0..AFTER_CUT {
        transport
            .publish(queue, Bytes::from(format!("{{\"n\":{n}}}")), &[])
            .await
            .unwrap();
    }
    for _ in 0..AFTER_CUT {
        let reserved = transport
            .reserve(queue, UPPER_BOUND)
            .await
            .unwrap()
            .expect("every message published after the cut");
        transport.ack(&reserved.receipt).await.unwrap();
    }
    assert!(transport.reserve(queue, NO_WAIT).await.unwrap().is_none());
}

#[tokio::test]
async fn default_layout_waits_again_after_a_cut() {
    let url = polyq_testkit::redis_url();
    let proxy = TcpProxy::start(upstream(&url)).await;
    let queue = polyq_testkit::unique_name("bq-redis-reconnect");
    let _keys = DeleteRedisKeys::new(&url, [&queue]);
    let transport = RedisTransport::connect(&through(&url, &proxy), RedisOptions::new())
        .await
        .unwrap();
    waits_again_after_a_cut(&transport, &proxy, &queue).await;
}

#[tokio::test]
async fn laravel_layout_waits_again_after_a_cut() {
    let url = polyq_testkit::redis_url();
    let proxy = TcpProxy::start(upstream(&url)).await;
    let queue = polyq_testkit::unique_name("bq-redis-reconnect-laravel");
    let transport = LaravelTransport::connect(&through(&url, &proxy), RedisOptions::new())
        .await
        .unwrap();
    let _keys = DeleteRedisKeys::new(&url, [&queue]);
    waits_again_after_a_cut(&transport, &proxy, &queue).await;
}
