//! What the Redis tests share: a raw connection to look at a test's keys and the waits a
//! reserve is given.

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
