//! What the Redis tests share: a guard that removes a test's keys, a raw connection to look at
//! them and the waits a reserve is given.

// Each test binary uses the part it needs.
#![allow(dead_code)]

use std::time::Duration;

use babelqueue::Error;
use babelqueue::transport::Transport;
use babelqueue::transport::redis::RedisErrorKind;

/// A reserve that only looks.
pub const NO_WAIT: Duration = Duration::ZERO;
/// Upper bound for a reserve that must find something.
pub const UPPER_BOUND: Duration = Duration::from_secs(10);

/// Deletes every key of one test when dropped, also when the test fails.
pub struct Keys {
    /// The server the keys live on.
    pub url: String,
    /// A `KEYS` pattern matching every key of the test and no other.
    pub pattern: String,
}

impl Drop for Keys {
    fn drop(&mut self) {
        let Ok(mut connection) =
            redis::Client::open(self.url.as_str()).and_then(|client| client.get_connection())
        else {
            return;
        };
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
            .arg(&self.pattern)
            .query(&mut connection)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(keys).query(&mut connection);
        }
    }
}

/// A connection beside the transport's, to read and write keys directly.
pub async fn raw_connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Whether `queue` has nothing ready to reserve right now.
pub async fn nothing_ready(transport: &impl Transport, queue: &str) -> bool {
    transport.reserve(queue, NO_WAIT).await.unwrap().is_none()
}

/// Now in whole epoch seconds, the unit of the layouts' scores.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as f64
}

/// The kind of the Redis error `result` failed with; panics on anything else.
pub fn kind(result: babelqueue::Result<()>) -> RedisErrorKind {
    match result {
        Err(Error::Redis { kind, .. }) => kind,
        other => panic!("expected a Redis error, got {other:?}"),
    }
}

/// Settles the second of `taken`, moves all three to the end at once and checks the answers:
/// the first and third moved, the second no longer held; and that moving none is nothing.
pub async fn move_three_with_the_second_settled<T: Transport>(
    transport: &T,
    taken: &[babelqueue::transport::Reserved<T::Receipt>; 3],
) {
    transport.ack(&taken[1].receipt).await.unwrap();
    let receipts: Vec<_> = taken.iter().map(|job| &job.receipt).collect();
    let mut moved = transport.move_all_to_end(&receipts).await.into_iter();
    assert!(moved.next().unwrap().is_ok());
    assert_eq!(kind(moved.next().unwrap()), RedisErrorKind::ReservationLost);
    assert!(moved.next().unwrap().is_ok());
    assert!(moved.next().is_none());
    assert!(transport.move_all_to_end(&[]).await.is_empty());
}
