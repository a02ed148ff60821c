//! The claim check through a broker: bodies below the threshold travel inline, bodies at or
//! above it are stored (in memory and on disk) and come back byte for byte, and the frames on
//! the wire are the ones the other AceMQ ports write and read.

mod common;

use acemq::codec::{JSON_CONTENT_TYPE, Raw};
use acemq::patterns::claim_check::{
    ClaimCheck, ClaimStore, DEFAULT_THRESHOLD, FileStore, FramedBody, INLINE_FRAME, MemoryStore,
    STORED_FRAME, key_of,
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

    let small = round_trip(env, &queue, &claims, DEFAULT_THRESHOLD - 1).await;
    assert!(small.starts_with(INLINE_FRAME));
    assert_eq!(small.len(), INLINE_FRAME.len() + DEFAULT_THRESHOLD - 1);
    assert!(store.is_empty());

    let large = round_trip(env, &queue, &claims, DEFAULT_THRESHOLD).await;
    let key = key_of(&large).expect("a stored body's key");
    assert!(large.len() < 100, "only the frame and key travel");
    assert_eq!(store.len(), 1);
    assert_eq!(store.get(key).await.unwrap(), body(DEFAULT_THRESHOLD));

    let dir = std::env::temp_dir().join(polyq_testkit::unique_name("acemq-claims"));
    let on_disk = ClaimCheck::new(FileStore::new(&dir)).threshold(1024);
    let stored = round_trip(env, &queue, &on_disk, 200_000).await;
    let key = key_of(&stored).unwrap();
    assert_eq!(std::fs::read(dir.join(key)).unwrap().len(), 200_000);
    round_trip(env, &queue, &on_disk, 10).await;
    std::fs::remove_dir_all(&dir).unwrap();
}
polyq_testkit::both_brokers!(below_and_above_the_threshold);

/// The frames as Java's `ClaimCheckCodec` writes them (`0xAC 0x01 0x00` + the payload,
/// `0xAC 0x01 0x01` + the key), published by hand, are read; ours cross the broker as those same
/// bytes, under the payload's content type and with no claim header.
async fn frames_match_the_other_ports(env: &'static Env) {
    let queue = env.queue("claims-wire").await;
    let dir = std::env::temp_dir().join(polyq_testkit::unique_name("acemq-claims-wire"));
    // A file another port's filesystem store wrote: named by its key in the shared directory.
    let key = "3f2b8c1e-6d4a-4f0e-9b7a-2c5d8e1f4a6b";
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(key), br#"{"scan":"from java"}"#).unwrap();
    let claims = ClaimCheck::new(FileStore::new(&dir)).threshold(32);
    let publisher =
        env.mq
            .publisher_with::<[u8], _>("", &queue, FramedBody::new(JSON_CONTENT_TYPE));

    let mut theirs = STORED_FRAME.to_vec();
    theirs.extend_from_slice(key.as_bytes());
    for (sent, payload) in [
        (
            &b"\xAC\x01\x00{\"id\":\"A-1\"}"[..],
            &br#"{"id":"A-1"}"#[..],
        ),
        (&theirs[..], br#"{"scan":"from java"}"#),
        // Written by a publisher without a claim check: read as it is.
        (br#"{"id":"A-2"}"#, br#"{"id":"A-2"}"#),
    ] {
        publisher.send(sent).await.unwrap();
        let delivered = env.next_in(&queue).await;
        assert_eq!(&delivered.body[..], sent);
        assert_eq!(&claims.decode(&delivered.body).await.unwrap()[..], payload);
    }

    let ours = claims
        .encode(Bytes::from_static(br#"{"id":"A-1"}"#))
        .await
        .unwrap();
    publisher.send(&ours).await.unwrap();
    let delivered = env.next_in(&queue).await;
    assert_eq!(&delivered.body[..], b"\xAC\x01\x00{\"id\":\"A-1\"}");
    assert_eq!(
        delivered.properties.content_type.as_deref(),
        Some(JSON_CONTENT_TYPE)
    );
    assert!(!delivered.properties.headers.contains_key("x-acemq-claim"));

    let large = format!(r#"{{"scan":"{}"}}"#, "x".repeat(64));
    let ours = claims.encode(Bytes::from(large.clone())).await.unwrap();
    publisher.send(&ours).await.unwrap();
    let delivered = env.next_in(&queue).await;
    let key = key_of(&delivered.body).expect("a stored body's key");
    assert_eq!(&delivered.body[..3], b"\xAC\x01\x01");
    assert_eq!(&delivered.body[3..], key.as_bytes());
    // Where another port's filesystem store on the same directory looks for it.
    assert_eq!(std::fs::read(dir.join(key)).unwrap(), large.as_bytes());
    std::fs::remove_dir_all(&dir).unwrap();
}
polyq_testkit::both_brokers!(frames_match_the_other_ports);
