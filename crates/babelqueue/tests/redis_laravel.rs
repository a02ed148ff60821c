//! Laravel's Redis layout against the real server: push and notify, the cjson reserve, ack,
//! delayed release and retry, dead-letter (atomic and gated), recovery, poison bodies and bodies
//! re-encoded by Laravel's cjson.

#![cfg(feature = "redis")]

mod redis_support;

use std::time::Duration;

use babelqueue::MakeOptions;
use babelqueue::transport::redis::{LaravelTransport, RedisErrorKind, RedisOptions};
use babelqueue::transport::{Reserved, Transport};
use bytes::Bytes;
use polyq_testkit::brokers::DeleteRedisKeys;
use redis::AsyncCommands;
use redis_support::{
    NO_WAIT, UPPER_BOUND, kind, move_three_with_the_second_settled, nothing_ready, now,
};
use serde_json::json;

struct Fixture {
    queue: String,
    ready: String,
    transport: LaravelTransport,
    raw: redis::aio::MultiplexedConnection,
    _keys: DeleteRedisKeys,
}

async fn fixture(options: RedisOptions) -> Fixture {
    let url = polyq_testkit::redis_url();
    let queue = polyq_testkit::unique_name("bq-redis-laravel");
    let transport = LaravelTransport::connect(&url, options).await.unwrap();
    let ready = transport.key(&queue);
    let keys = DeleteRedisKeys::new(&url, [&queue]);
    let raw = redis_support::raw_connection(&url).await;
    Fixture {
        queue,
        ready,
        transport,
        raw,
        _keys: keys,
    }
}

impl Fixture {
    async fn list(&mut self, suffix: &str) -> Vec<Vec<u8>> {
        let key = format!("{}{suffix}", self.ready);
        self.raw.lrange(key, 0, -1).await.unwrap()
    }

    async fn zset(&mut self, suffix: &str) -> Vec<(Vec<u8>, f64)> {
        let key = format!("{}{suffix}", self.ready);
        self.raw.zrange_withscores(key, 0, -1).await.unwrap()
    }

    async fn reserve(&self) -> Reserved<babelqueue::transport::redis::LaravelReceipt> {
        self.transport
            .reserve(&self.queue, UPPER_BOUND)
            .await
            .unwrap()
            .expect("a message within the upper bound")
    }

    async fn publish(&self, body: impl Into<Bytes>) {
        self.transport
            .publish(&self.queue, body.into(), &[])
            .await
            .unwrap();
    }
}

fn envelope(data: serde_json::Value) -> String {
    babelqueue::make(
        "urn:babel:orders:created",
        &data,
        MakeOptions::new().queue("orders").trace_id("trace-1"),
    )
    .unwrap()
    .encode()
    .unwrap()
}

#[tokio::test]
async fn an_extension_moves_the_reserved_score_only_while_the_reservation_is_held() {
    let mut f = fixture(RedisOptions::new().retry_after(Some(Duration::from_secs(60)))).await;
    f.publish(envelope(json!({"n": 1}))).await;
    let taken = f.reserve().await;
    // As if the reservation were about to lapse.
    let key = format!("{}:reserved", f.ready);
    let member = taken.receipt.reserved().to_vec();
    let _: i64 = f.raw.zadd(&key, &member, 0).await.unwrap();

    assert!(
        f.transport
            .extend_reservation(&taken.receipt)
            .await
            .unwrap()
    );
    let reserved = f.zset(":reserved").await;
    assert_eq!(reserved.len(), 1);
    assert_eq!(reserved[0].0, member, "the same member, rescored");
    assert!(
        reserved[0].1 >= now() + 59.0,
        "a full deadline from now: {}",
        reserved[0].1
    );

    f.transport.ack(&taken.receipt).await.unwrap();
    assert!(
        !f.transport
            .extend_reservation(&taken.receipt)
            .await
            .unwrap(),
        "a settled reservation is not held"
    );
    assert!(
        f.zset(":reserved").await.is_empty(),
        "and is not brought back"
    );
}

#[tokio::test]
async fn push_notifies_and_the_reserve_hands_over_the_raw_job_in_fifo_order() {
    let mut f = fixture(RedisOptions::new()).await;
    let first = envelope(json!({"path": "a/b", "list": [], "big": 12345678901234567_u64}));
    let second = envelope(json!({"n": 2}));
    f.publish(first.clone()).await;
    f.publish(second.clone()).await;
    assert_eq!(f.list("").await.len(), 2);
    assert_eq!(f.list(":notify").await, vec![b"1".to_vec(), b"1".to_vec()]);

    let before = now();
    let job = f.reserve().await;
    let after = now();
    assert_eq!(
        job.body,
        first.as_bytes(),
        "the raw job, never the re-encoding"
    );
    assert_eq!(job.receipt.job(), first.as_bytes());
    assert_eq!(f.list(":notify").await.len(), 1);

    // The reserved member is what Laravel's own reserve writes: cjson's re-encoding with
    // attempts + 1, scored reserved-until.
    let reserved = f.zset(":reserved").await;
    assert_eq!(reserved.len(), 1);
    let (member, score) = &reserved[0];
    assert_eq!(member, &job.receipt.reserved().to_vec());
    let member: serde_json::Value = serde_json::from_slice(member).unwrap();
    assert_eq!(member["attempts"], 1);
    assert_eq!(member["data"]["path"], "a/b");
    assert!(
        std::str::from_utf8(job.receipt.reserved())
            .unwrap()
            .contains(r"a\/b")
    );
    assert!(
        (before + 90.0..=after + 90.0).contains(score),
        "score {score}"
    );

    f.transport.ack(&job.receipt).await.unwrap();
    assert!(f.zset(":reserved").await.is_empty());
    assert_eq!(
        kind(f.transport.ack(&job.receipt).await),
        RedisErrorKind::ReservationLost
    );

    let job = f.reserve().await;
    assert_eq!(job.body, second.as_bytes());
    f.transport.ack(&job.receipt).await.unwrap();
    assert!(nothing_ready(&f.transport, &f.queue).await);
}

#[tokio::test]
async fn release_with_a_delay_lands_in_delayed_and_comes_back_when_due() {
    let mut f = fixture(RedisOptions::new()).await;
    let body = envelope(json!({"n": 1}));
    f.publish(body.clone()).await;
    let job = f.reserve().await;

    let before = now();
    f.transport
        .release(&job.receipt, Duration::from_secs(1))
        .await
        .unwrap();
    let after = now();
    assert!(f.zset(":reserved").await.is_empty());
    let delayed = f.zset(":delayed").await;
    assert_eq!(delayed.len(), 1);
    assert_eq!(delayed[0].0, body.as_bytes(), "released unchanged");
    assert!((before + 1.0..=after + 1.0).contains(&delayed[0].1));
    assert!(nothing_ready(&f.transport, &f.queue).await);

    let again = f.reserve().await;
    assert_eq!(again.body, body.as_bytes());
    assert!(f.zset(":delayed").await.is_empty());
    f.transport.ack(&again.receipt).await.unwrap();

    assert_eq!(
        kind(f.transport.release(&job.receipt, NO_WAIT).await),
        RedisErrorKind::ReservationLost
    );
    assert!(f.zset(":delayed").await.is_empty());
}

#[tokio::test]
async fn retry_replaces_the_job_with_the_new_body_after_the_delay() {
    let mut f = fixture(RedisOptions::new()).await;
    let body = envelope(json!({"n": 1}));
    f.publish(body.clone()).await;
    let job = f.reserve().await;
    let mut next = babelqueue::decode(&job.body).unwrap().envelope;
    next.set_attempts(1);
    let next = next.encode().unwrap();

    let before = now();
    f.transport
        .retry(
            &job.receipt,
            &f.queue,
            Bytes::from(next.clone()),
            &[],
            Duration::from_millis(1500),
        )
        .await
        .unwrap();
    let after = now();
    let delayed = f.zset(":delayed").await;
    assert_eq!(delayed[0].0, next.as_bytes());
    assert!(
        (before + 2.0..=after + 2.0).contains(&delayed[0].1),
        "a fraction is rounded up"
    );
    assert!(f.zset(":reserved").await.is_empty());
    let again = f.reserve().await;
    assert_eq!(again.body, next.as_bytes());
    f.transport.ack(&again.receipt).await.unwrap();
}

#[tokio::test]
async fn dead_letter_is_atomic_and_happens_once() {
    let mut f = fixture(RedisOptions::new()).await;
    let dlq = f.transport.options().dead_letter_queue(&f.queue);
    f.publish(envelope(json!({}))).await;
    let job = f.reserve().await;
    f.transport
        .dead_letter(&job.receipt, &dlq, Bytes::from("dead"))
        .await
        .unwrap();
    assert_eq!(f.list(".dlq").await, vec![b"dead".to_vec()]);
    assert_eq!(f.list(".dlq:notify").await, vec![b"1".to_vec()]);
    assert!(f.zset(":reserved").await.is_empty());

    let twice = f
        .transport
        .dead_letter(&job.receipt, &dlq, Bytes::from("dead"))
        .await;
    assert_eq!(kind(twice), RedisErrorKind::ReservationLost);
    assert_eq!(f.list(".dlq").await.len(), 1);
}

#[tokio::test]
async fn a_lapsed_reservation_is_recovered_as_its_reserved_copy_and_the_old_receipt_is_void() {
    // retry_after zero: the reservation lapses at once and the next pop migrates it back.
    let mut f = fixture(RedisOptions::new().retry_after(Some(Duration::ZERO))).await;
    let dlq = f.transport.options().dead_letter_queue(&f.queue);
    let body = envelope(json!({"path": "a/b"}));
    f.publish(body.clone()).await;
    let stale = f.reserve().await;
    let recovered = f.reserve().await;
    // What a crash recovery hands back on this layout is the cjson copy with attempts + 1.
    assert_eq!(recovered.body, stale.receipt.reserved());
    let decoded = babelqueue::decode(&recovered.body).unwrap().envelope;
    assert_eq!(decoded.attempts(), Some(1));
    assert_eq!(decoded.trace_id(), Some("trace-1"));

    let late = f
        .transport
        .dead_letter(&stale.receipt, &dlq, Bytes::from("dead"))
        .await;
    assert_eq!(kind(late), RedisErrorKind::ReservationLost);
    assert!(f.list(".dlq").await.is_empty());
    f.transport
        .dead_letter(&recovered.receipt, &dlq, Bytes::from("dead"))
        .await
        .unwrap();
    assert_eq!(f.list(".dlq").await, vec![b"dead".to_vec()]);
}

#[tokio::test]
async fn no_retry_after_means_reserved_until_settled() {
    let mut f = fixture(RedisOptions::new().retry_after(None)).await;
    f.publish(envelope(json!({}))).await;
    let job = f.reserve().await;
    assert_eq!(f.zset(":reserved").await[0].1, f64::INFINITY);
    assert!(nothing_ready(&f.transport, &f.queue).await);
    f.transport.ack(&job.receipt).await.unwrap();
}

#[tokio::test]
async fn poison_bodies_are_reserved_raw_and_survive_byte_for_byte() {
    let mut f = fixture(RedisOptions::new()).await;
    let dlq = f.transport.options().dead_letter_queue(&f.queue);
    let poison: [&[u8]; 6] = [
        b"\xff\xfe{\"job\":\"x\"}\xc3",
        b"not json at all",
        b"",
        br#"["an","array"]"#,
        br#"{"job":"urn:babel:t:x","attempts":"2"}"#,
        br#"{"job":"urn:babel:t:x","n":1e400,"attempts":0}"#,
    ];
    for body in poison {
        f.publish(Bytes::from_static(body)).await;
    }
    for body in poison {
        let job = f.reserve().await;
        assert_eq!(job.body, body);
        assert_eq!(job.receipt.reserved(), body, "reserved raw");
        f.transport
            .dead_letter(&job.receipt, &dlq, job.body.clone())
            .await
            .unwrap();
    }
    assert_eq!(f.list(".dlq").await, poison.map(<[u8]>::to_vec));
    assert!(f.zset(":reserved").await.is_empty());
}

#[tokio::test]
async fn bodies_re_encoded_by_laravels_cjson_are_accepted() {
    let mut f = fixture(RedisOptions::new()).await;
    let original = envelope(json!({
        "url": "https://example.com/a/b",
        "tags": [],
        "big": 12345678901234567_u64,
        "ratio": 0.30000000000000004,
        "note": "café ☕"
    }));
    // What Laravel's pop leaves behind after a release or a recovery: the server's cjson copy.
    let re_encoded: Vec<u8> = redis::cmd("EVAL")
        .arg("return cjson.encode(cjson.decode(ARGV[1]))")
        .arg(0)
        .arg(&original)
        .query_async(&mut f.raw)
        .await
        .unwrap();
    let text = std::str::from_utf8(&re_encoded).unwrap();
    assert!(text.contains(r"https:\/\/example.com\/a\/b"), "{text}");
    assert!(text.contains(r#""tags":{}"#), "{text}");
    assert!(text.contains("1.2345678901235e+16"), "{text}");
    assert_ne!(text, original);

    f.publish(re_encoded.clone()).await;
    let job = f.reserve().await;
    assert_eq!(job.body, re_encoded);
    let decoded = babelqueue::decode(&job.body).unwrap();
    assert_eq!(decoded.envelope.accepts(), Ok(()));
    assert_eq!(decoded.envelope.urn(), Some("urn:babel:orders:created"));
    assert_eq!(decoded.envelope.trace_id(), Some("trace-1"));
    let data: serde_json::Value = decoded.envelope.data_as().unwrap();
    assert_eq!(data["url"], "https://example.com/a/b");
    assert_eq!(data["tags"], json!({}));
    assert_eq!(data["note"], "café ☕");
    f.transport.ack(&job.receipt).await.unwrap();
    assert!(f.zset(":reserved").await.is_empty());
}

#[tokio::test]
async fn headers_are_dropped_and_the_body_stored_bare() {
    let mut f = fixture(RedisOptions::new()).await;
    let body = envelope(json!({}));
    f.transport
        .publish(
            &f.queue,
            Bytes::from(body.clone()),
            &[("traceparent".to_owned(), "00-a".to_owned())],
        )
        .await
        .unwrap();
    assert_eq!(f.list("").await, vec![body.as_bytes().to_vec()]);
    let job = f.reserve().await;
    assert!(job.headers.is_empty());
    f.transport.ack(&job.receipt).await.unwrap();
}

#[tokio::test]
async fn a_waiting_reserve_wakes_on_a_publish() {
    let f = fixture(RedisOptions::new()).await;
    let waiter = {
        let transport = f.transport.clone();
        let queue = f.queue.clone();
        tokio::spawn(async move { transport.reserve(&queue, UPPER_BOUND).await })
    };
    f.publish("woken").await;
    let job = waiter.await.unwrap().unwrap().expect("the published job");
    assert_eq!(job.body, "woken");
    f.transport.ack(&job.receipt).await.unwrap();
}

#[tokio::test]
async fn depth_counts_what_a_pop_would_take_including_due_releases_but_not_later_ones() {
    let f = fixture(RedisOptions::new()).await;
    for n in 0..3 {
        f.publish(envelope(json!({"n": n}))).await;
    }
    assert_eq!(f.transport.depth(&f.queue).await.unwrap(), 3);
    let (first, second) = (f.reserve().await, f.reserve().await);
    assert_eq!(f.transport.depth(&f.queue).await.unwrap(), 1);

    // Laravel releases through `:delayed` even without a delay: due at once, so counted.
    f.transport.release(&first.receipt, NO_WAIT).await.unwrap();
    assert_eq!(f.transport.depth(&f.queue).await.unwrap(), 2);
    f.transport
        .release(&second.receipt, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(f.transport.depth(&f.queue).await.unwrap(), 2);
}

#[tokio::test]
async fn moving_many_to_the_end_keeps_their_order_and_reports_each() {
    let mut f = fixture(RedisOptions::new()).await;
    for n in 0..4 {
        f.publish(envelope(json!({ "n": n }))).await;
    }
    let queued = f.list("").await;
    let taken = [f.reserve().await, f.reserve().await, f.reserve().await];
    move_three_with_the_second_settled(&f.transport, &taken).await;
    // Behind the one never taken, in their order, as they were queued, each with its token.
    assert_eq!(
        f.list("").await,
        vec![queued[3].clone(), queued[0].clone(), queued[2].clone()]
    );
    assert!(f.zset(":reserved").await.is_empty());
    let notify = f.list(":notify").await.len();
    let again = [f.reserve().await, f.reserve().await, f.reserve().await];
    assert_eq!(
        again
            .iter()
            .map(|job| job.body.to_vec())
            .collect::<Vec<_>>(),
        vec![queued[3].clone(), queued[0].clone(), queued[2].clone()]
    );
    assert!(notify >= 2, "a wake-up token for each job moved: {notify}");
}

#[tokio::test]
async fn deleting_a_queue_removes_its_keys_and_its_dead_letter_queues_and_no_other() {
    let mut f = fixture(RedisOptions::new()).await;
    let options = f.transport.options().clone();
    let dlq = options.dead_letter_queue(&f.queue);
    let neighbour = format!("{}-neighbour", f.queue);
    for n in 1..=4 {
        f.publish(envelope(json!({ "n": n }))).await;
    }
    f.transport
        .publish(&neighbour, Bytes::from(envelope(json!({}))), &[])
        .await
        .unwrap();
    let reserved = f.reserve().await;
    let delayed = f.reserve().await;
    f.transport
        .release(&delayed.receipt, Duration::from_secs(600))
        .await
        .unwrap();
    let dead = f.reserve().await;
    f.transport
        .dead_letter(&dead.receipt, &dlq, dead.body.clone())
        .await
        .unwrap();
    let mut keys = options.laravel_layout_keys(&f.queue).to_vec();
    keys.extend(options.laravel_layout_keys(&dlq));
    let mut existing = 0;
    for key in &keys {
        let exists: bool = f.raw.exists(key).await.unwrap();
        existing += u64::from(exists);
    }
    // At least the ready list, `:reserved` and `:delayed` of the queue and the dead-letter list.
    assert!(existing >= 4, "{existing} of {keys:?}");

    assert_eq!(f.transport.delete_queue(&f.queue).await.unwrap(), existing);
    let left: u64 = f.raw.exists(&keys).await.unwrap();
    assert_eq!(left, 0);
    let neighbour_ready: u64 = f.raw.llen(f.transport.key(&neighbour)).await.unwrap();
    assert_eq!(neighbour_ready, 1);
    assert!(nothing_ready(&f.transport, &f.queue).await);
    assert_eq!(
        kind(f.transport.ack(&reserved.receipt).await),
        RedisErrorKind::ReservationLost
    );
    assert_eq!(f.transport.delete_queue(&f.queue).await.unwrap(), 0);
}
