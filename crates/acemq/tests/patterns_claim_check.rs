//! The claim check through a broker: bodies below the threshold travel inline, bodies above
//! it are stored (in memory and on disk) and come back byte for byte.

mod common;

use acemq::codec::Raw;
use acemq::patterns::claim_check::{
    ClaimCheck, ClaimStore, DEFAULT_THRESHOLD, FileStore, INLINE_FRAME, MemoryStore, key_of,
};
use bytes::Bytes;
use common::Env;

/// A body of `len` bytes that is not all one value, so a truncation or shift would show.
fn body(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

async fn round_trip<S: ClaimStore>(
    env: &Env,
    queue: &str,
    claims: &ClaimCheck<S>,
    len: usize,
) -> Bytes {
    let original = body(len);
    let framed = claims.encode(original.clone()).await.unwrap();
    env.mq
        .publisher_with::<[u8], _>("", queue, Raw)
        .send(&framed)
        .await
        .unwrap();
    let delivered = env.next_in(queue).await;
    assert_eq!(delivered.body, framed);
    let back = claims.decode(&delivered.body).await.unwrap();
    assert_eq!(back, original);
    delivered.body
}

async fn below_and_above_the_threshold(env: &'static Env) {
    let queue = env.queue("claims").await;
    let store = MemoryStore::default();
    let claims = ClaimCheck::new(store.clone());

    let small = round_trip(env, &queue, &claims, DEFAULT_THRESHOLD).await;
    assert!(small.starts_with(INLINE_FRAME));
    assert_eq!(small.len(), INLINE_FRAME.len() + DEFAULT_THRESHOLD);
    assert!(store.is_empty());

    let large = round_trip(env, &queue, &claims, DEFAULT_THRESHOLD + 1).await;
    let key = key_of(&large).expect("a stored body's key");
    assert!(large.len() < 100, "only the frame and key travel");
    assert_eq!(store.len(), 1);
    assert_eq!(store.get(key).await.unwrap(), body(DEFAULT_THRESHOLD + 1));

    let dir = std::env::temp_dir().join(polyq_testkit::unique_name("acemq-claims"));
    let on_disk = ClaimCheck::new(FileStore::new(&dir)).threshold(1024);
    let stored = round_trip(env, &queue, &on_disk, 200_000).await;
    let key = key_of(&stored).unwrap();
    assert_eq!(std::fs::read(dir.join(key)).unwrap().len(), 200_000);
    round_trip(env, &queue, &on_disk, 10).await;
    std::fs::remove_dir_all(&dir).unwrap();
}
polyq_testkit::both_brokers!(below_and_above_the_threshold);
