//! The default Redis layout against the real server: FIFO reserve and ack, retry, release,
//! dead-letter (atomic and gated), the deadline sweep, the header frame and poison bodies.

#![cfg(feature = "redis")]

mod redis_support;

use std::time::Duration;

use babelqueue::transport::redis::{RedisErrorKind, RedisOptions, RedisTransport};
use babelqueue::transport::{Reserved, Transport};
use babelqueue::{Error, projection};
use bytes::Bytes;
use polyq_testkit::brokers::DeleteRedisKeys;
use redis::AsyncCommands;
use redis_support::{
    NO_WAIT, UPPER_BOUND, kind, move_three_with_the_second_settled, nothing_ready, now,
};

struct Fixture {
    queue: String,
    transport: RedisTransport,
    raw: redis::aio::MultiplexedConnection,
    _keys: DeleteRedisKeys,
}

async fn fixture(options: RedisOptions) -> Fixture {
    let url = polyq_testkit::redis_url();
    let queue = polyq_testkit::unique_name("bq-redis-default");
    let keys = DeleteRedisKeys::new(&url, [&queue]);
    let transport = RedisTransport::connect(&url, options).await.unwrap();
    let raw = redis_support::raw_connection(&url).await;
    Fixture {
        queue,
        transport,
        raw,
        _keys: keys,
    }
}

impl Fixture {
    async fn list(&mut self, key: &str) -> Vec<Vec<u8>> {
        self.raw.lrange(key, 0, -1).await.unwrap()
    }

    async fn deadlines(&mut self) -> Vec<(Vec<u8>, f64)> {
        let key = self.transport.deadlines_key(&self.queue);
        self.raw.zrange_withscores(key, 0, -1).await.unwrap()
    }

    async fn reserve(&self) -> Reserved<babelqueue::transport::redis::RedisReceipt> {
        self.transport
            .reserve(&self.queue, UPPER_BOUND)
            .await
            .unwrap()
            .expect("a message within the upper bound")
    }
}

#[tokio::test]
async fn reserves_in_fifo_order_with_a_deadline_and_acks() {
    let mut f = fixture(RedisOptions::new()).await;
    let bodies = [&b"{\"n\":1}"[..], b"{\"n\":2}", b"{\"n\":3}"];
    for body in bodies {
        f.transport
            .publish(&f.queue, Bytes::from_static(body), &[])
            .await
            .unwrap();
    }
    let before = now();
    let mut receipts = Vec::new();
    for body in bodies {
        let job = f.reserve().await;
        assert_eq!(job.body, body);
        assert!(job.headers.is_empty());
        receipts.push(job.receipt);
    }
    let after = now();
    let processing = f.transport.processing_key(&f.queue);
    assert_eq!(f.list(&processing).await, bodies.map(<[u8]>::to_vec));
    let deadlines = f.deadlines().await;
    assert_eq!(deadlines.len(), 3);
    for (member, score) in &deadlines {
        let (token, value) = member.split_at(33);
        assert!(token[..32].iter().all(|b| b"0123456789abcdef".contains(b)));
        assert_eq!(token[32], b':');
        assert!(bodies.contains(&value));
        assert!(
            (before + 90.0..=after + 90.0).contains(score),
            "score {score}"
        );
    }
    for receipt in &receipts {
        f.transport.ack(receipt).await.unwrap();
    }
    assert!(f.list(&processing).await.is_empty());
    assert!(f.deadlines().await.is_empty());
    assert_eq!(
        kind(f.transport.ack(&receipts[0]).await),
        RedisErrorKind::ReservationLost
    );
    assert!(nothing_ready(&f.transport, &f.queue).await);
}

#[tokio::test]
async fn retry_pushes_the_new_body_to_the_end_and_settles_once() {
    let mut f = fixture(RedisOptions::new()).await;
    for body in ["first", "second"] {
        f.transport
            .publish(&f.queue, Bytes::from(body), &[])
            .await
            .unwrap();
    }
    let job = f.reserve().await;
    assert_eq!(job.body, "first");
    f.transport
        .retry(
            &job.receipt,
            &f.queue,
            Bytes::from("first, attempt 2"),
            &[],
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    let queue = f.queue.clone();
    assert_eq!(
        f.list(&queue).await,
        vec![b"second".to_vec(), b"first, attempt 2".to_vec()]
    );
    let processing = f.transport.processing_key(&f.queue);
    assert!(f.list(&processing).await.is_empty());
    assert!(f.deadlines().await.is_empty());
    let again = f
        .transport
        .retry(&job.receipt, &f.queue, Bytes::from("x"), &[], NO_WAIT)
        .await;
    assert_eq!(kind(again), RedisErrorKind::ReservationLost);
    assert_eq!(f.list(&queue).await.len(), 2);
}

#[tokio::test]
async fn release_puts_the_stored_frame_back_unchanged() {
    let mut f = fixture(RedisOptions::new()).await;
    let headers = vec![("traceparent".to_owned(), "00-abc-def-01".to_owned())];
    f.transport
        .publish(&f.queue, Bytes::from("{\"job\":\"u\"}"), &headers)
        .await
        .unwrap();
    let queue = f.queue.clone();
    let stored = f.list(&queue).await;
    let job = f.reserve().await;
    f.transport
        .release(&job.receipt, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(f.list(&queue).await, stored);
    let again = f.reserve().await;
    assert_eq!(again.body, "{\"job\":\"u\"}");
    assert_eq!(again.headers, headers);
    f.transport.ack(&again.receipt).await.unwrap();
}

#[tokio::test]
async fn dead_letter_is_atomic_and_happens_once() {
    let mut f = fixture(RedisOptions::new()).await;
    let dlq = f.transport.options().dead_letter_queue(&f.queue);
    f.transport
        .publish(&f.queue, Bytes::from("{\"n\":1}"), &[])
        .await
        .unwrap();
    let job = f.reserve().await;
    f.transport
        .dead_letter(
            &job.receipt,
            &dlq,
            Bytes::from("{\"n\":1,\"dead_letter\":{}}"),
        )
        .await
        .unwrap();
    assert_eq!(
        f.list(&dlq).await,
        vec![b"{\"n\":1,\"dead_letter\":{}}".to_vec()]
    );
    let processing = f.transport.processing_key(&f.queue);
    assert!(f.list(&processing).await.is_empty());
    assert!(f.deadlines().await.is_empty());

    let twice = f
        .transport
        .dead_letter(&job.receipt, &dlq, Bytes::from("again"))
        .await;
    assert_eq!(kind(twice), RedisErrorKind::ReservationLost);
    assert_eq!(f.list(&dlq).await.len(), 1);
}

#[tokio::test]
async fn a_swept_reservation_cannot_be_settled_by_its_old_receipt() {
    // A zero deadline lapses at once: the next reserve sweeps it back and takes it again.
    let mut f = fixture(RedisOptions::new().reservation_deadline(Some(Duration::ZERO))).await;
    let dlq = f.transport.options().dead_letter_queue(&f.queue);
    f.transport
        .publish(&f.queue, Bytes::from("only"), &[])
        .await
        .unwrap();
    let stale = f.reserve().await;
    let fresh = f.reserve().await;
    assert_eq!(fresh.body, "only");
    assert_ne!(stale.receipt.token(), fresh.receipt.token());

    let late = f
        .transport
        .dead_letter(&stale.receipt, &dlq, Bytes::from("dead"))
        .await;
    assert_eq!(kind(late), RedisErrorKind::ReservationLost);
    assert_eq!(
        kind(f.transport.ack(&stale.receipt).await),
        RedisErrorKind::ReservationLost
    );
    assert!(f.list(&dlq).await.is_empty());
    let processing = f.transport.processing_key(&f.queue);
    assert_eq!(f.list(&processing).await, vec![b"only".to_vec()]);

    f.transport
        .dead_letter(&fresh.receipt, &dlq, Bytes::from("dead"))
        .await
        .unwrap();
    assert_eq!(f.list(&dlq).await, vec![b"dead".to_vec()]);
    assert!(f.list(&processing).await.is_empty());
}

#[tokio::test]
async fn the_sweep_returns_lapsed_reservations_to_the_end_and_drops_malformed_members() {
    let mut f = fixture(RedisOptions::new().reservation_deadline(Some(Duration::ZERO))).await;
    let lapsed = br#"{"job":"urn:babel:t:a","attempts":2}"#;
    f.transport
        .publish(&f.queue, Bytes::from_static(lapsed), &[])
        .await
        .unwrap();
    f.transport
        .publish(&f.queue, Bytes::from("next"), &[])
        .await
        .unwrap();
    // Reserved and never settled, as by a worker that died: no destructor runs, so nothing
    // gives it back but the sweep.
    std::mem::forget(f.reserve().await);

    let deadlines = f.transport.deadlines_key(&f.queue);
    let orphan = format!("{}:not in processing", "0".repeat(32));
    let _: i64 = redis::cmd("ZADD")
        .arg(&deadlines)
        .arg(0)
        .arg("short")
        .arg(0)
        .arg(format!("{}-no-colon-at-33", "0".repeat(32)))
        .arg(0)
        .arg(&orphan)
        .query_async(&mut f.raw)
        .await
        .unwrap();

    let next = f.reserve().await;
    assert_eq!(next.body, "next");
    let queue = f.queue.clone();
    assert_eq!(f.list(&queue).await, vec![lapsed.to_vec()]);
    let members: Vec<Vec<u8>> = f.deadlines().await.into_iter().map(|(m, _)| m).collect();
    assert_eq!(members.len(), 1, "only the live reservation stays");
    assert!(members[0].ends_with(b":next"));

    let back = f.reserve().await;
    assert_eq!(back.body, &lapsed[..], "bytes and attempts unchanged");
}

#[tokio::test]
async fn an_extension_moves_the_deadline_only_while_the_reservation_is_held() {
    let mut f =
        fixture(RedisOptions::new().reservation_deadline(Some(Duration::from_secs(60)))).await;
    let body = br#"{"job":"urn:babel:orders:created","attempts":0}"#;
    f.transport
        .publish(&f.queue, Bytes::from_static(body), &[])
        .await
        .unwrap();
    let taken = f.reserve().await;
    let (member, _) = f.deadlines().await.remove(0);
    // As if the deadline were about to lapse.
    let key = f.transport.deadlines_key(&f.queue);
    let _: i64 = f.raw.zadd(&key, &member, 0).await.unwrap();

    assert!(
        f.transport
            .extend_reservation(&taken.receipt)
            .await
            .unwrap()
    );
    let (extended, score) = f.deadlines().await.remove(0);
    assert_eq!(extended, member, "the same member, rescored");
    assert!(score >= now() + 59.0, "a full deadline from now: {score}");

    f.transport.ack(&taken.receipt).await.unwrap();
    assert!(
        !f.transport
            .extend_reservation(&taken.receipt)
            .await
            .unwrap(),
        "a settled reservation is not held"
    );
    assert!(f.deadlines().await.is_empty(), "and is not brought back");
}

const KILLED_QUEUE_VAR: &str = "BABELQUEUE_REDIS_KILLED_QUEUE";
const HANDLING: &str = "handling: ";
/// The killed worker's reservation deadline: long enough to be extended while it lives.
const KILLED_DEADLINE: Duration = Duration::from_secs(2);
/// How long the child may take to start, connect and take the job: a second process of a test
/// binary on a loaded machine.
const CHILD_READY: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_worker_killed_mid_job_loses_nothing() {
    let options = || RedisOptions::new().reservation_deadline(Some(KILLED_DEADLINE));
    let mut f = fixture(options()).await;
    let body = babelqueue::make(
        "urn:babel:orders:created",
        &serde_json::json!({"order": 7}),
        babelqueue::MakeOptions::default().queue(&f.queue),
    )
    .unwrap()
    .encode()
    .unwrap();
    f.transport
        .publish(&f.queue, Bytes::from(body.clone()), &[])
        .await
        .unwrap();

    // A worker process whose handler is running, extending its reservation, when it is killed.
    let (mut child, _) = polyq_testkit::child::spawn(
        "child_worker_mid_job",
        &[(KILLED_QUEUE_VAR, f.queue.as_str())],
        HANDLING,
        CHILD_READY,
    )
    .await;
    polyq_testkit::child::kill_9(&mut child).await;
    let processing = f.transport.processing_key(&f.queue);
    assert_eq!(
        f.list(&processing).await,
        vec![body.as_bytes().to_vec()],
        "the killed worker's reservation is still held"
    );

    // Nobody extends it any more: the survivor's sweep brings the job back once it lapses.
    let recovered = f.reserve().await;
    assert_eq!(
        recovered.body,
        body.as_bytes(),
        "bytes and attempts unchanged"
    );
    f.transport.ack(&recovered.receipt).await.unwrap();
    assert!(f.list(&processing).await.is_empty());
    assert!(f.deadlines().await.is_empty());
}

/// The killed process of `a_worker_killed_mid_job_loses_nothing`: a worker whose handler says it
/// started, then never finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs only as the child process of a_worker_killed_mid_job_loses_nothing"]
async fn child_worker_mid_job() {
    let queue = std::env::var(KILLED_QUEUE_VAR).expect("started by the kill test");
    let transport = RedisTransport::connect(
        &polyq_testkit::redis_url(),
        RedisOptions::new().reservation_deadline(Some(KILLED_DEADLINE)),
    )
    .await
    .unwrap();
    babelqueue::BabelQueue::with_transport(transport, &queue)
        .worker()
        .handle(
            "urn:babel:orders:created",
            |job: babelqueue::worker::Job| {
                println!("{HANDLING}{}", job.attempts());
                std::future::pending::<Result<(), &str>>()
            },
        )
        .consume(1, UPPER_BOUND)
        .await
        .unwrap();
}

#[tokio::test]
async fn headers_ride_in_the_frame_and_stay_with_a_dead_letter() {
    let mut f = fixture(RedisOptions::new()).await;
    let body = r#"{"job":"urn:babel:t:x","data":{"path":"a/b","é":"☕"}}"#;
    let headers = vec![
        (
            "traceparent".to_owned(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
        ),
        ("tracestate".to_owned(), "congo=t61rcWkgMzE".to_owned()),
        ("blank".to_owned(), String::new()),
        ("bq-replay-bypass".to_owned(), "1".to_owned()),
    ];
    f.transport
        .publish(&f.queue, Bytes::from(body), &headers)
        .await
        .unwrap();
    let pairs: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let framed = projection::frame(body, &pairs).into_owned();
    let queue = f.queue.clone();
    assert_eq!(f.list(&queue).await, vec![framed.as_bytes().to_vec()]);

    let job = f.reserve().await;
    assert_eq!(job.body, body);
    // A frame is a JSON object: its headers come back as a set, not in writing order.
    let sorted = |mut headers: Vec<(String, String)>| {
        headers.sort();
        headers
    };
    let expected = sorted(
        headers
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .cloned()
            .collect(),
    );
    assert_eq!(sorted(job.headers), expected);
    assert_eq!(job.receipt.stored(), framed.as_bytes());

    let dlq = f.transport.options().dead_letter_queue(&f.queue);
    f.transport
        .dead_letter(&job.receipt, &dlq, Bytes::from("{\"dead\":true}"))
        .await
        .unwrap();
    let dead = f.list(&dlq).await;
    let (dead_body, dead_headers) = projection::unframe(std::str::from_utf8(&dead[0]).unwrap());
    assert_eq!(dead_body, "{\"dead\":true}");
    assert_eq!(sorted(dead_headers), expected);

    // Blank headers only: the bare body, byte for byte.
    f.transport
        .publish(
            &f.queue,
            Bytes::from(body),
            &[("x".to_owned(), String::new())],
        )
        .await
        .unwrap();
    assert_eq!(f.list(&queue).await, vec![body.as_bytes().to_vec()]);
}

#[tokio::test]
async fn poison_bodies_survive_byte_for_byte() {
    let mut f = fixture(RedisOptions::new()).await;
    let dlq = f.transport.options().dead_letter_queue(&f.queue);
    let poison: [&[u8]; 5] = [
        b"\xff\xfe\x00{\"job\":\"x\"}\xc3",
        b"not json at all",
        b"",
        br#"{"__bq_frame":1,"headers":{"a":"b"}}"#,
        br#"["an","array"]"#,
    ];
    for body in poison {
        f.transport
            .publish(&f.queue, Bytes::from_static(body), &[])
            .await
            .unwrap();
    }
    for body in poison {
        let job = f.reserve().await;
        assert_eq!(job.body, body);
        assert!(job.headers.is_empty());
        f.transport
            .dead_letter(&job.receipt, &dlq, job.body.clone())
            .await
            .unwrap();
    }
    assert_eq!(f.list(&dlq).await, poison.map(<[u8]>::to_vec));

    let refused = f
        .transport
        .publish(
            &f.queue,
            Bytes::from_static(poison[0]),
            &[("traceparent".to_owned(), "00-a".to_owned())],
        )
        .await;
    assert_eq!(kind(refused), RedisErrorKind::Unframeable);
    let queue = f.queue.clone();
    assert!(f.list(&queue).await.is_empty());
}

#[tokio::test]
async fn waiting_outlasts_the_client_default_response_timeout_and_wakes_on_a_publish() {
    let f = fixture(RedisOptions::new()).await;
    // Longer than redis-rs's 500 ms default response timeout: the waits are blocking commands.
    let nothing = f
        .transport
        .reserve(&f.queue, Duration::from_millis(1500))
        .await
        .unwrap();
    assert!(nothing.is_none());

    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let transport = f.transport.clone();
            let queue = f.queue.clone();
            tokio::spawn(async move { transport.reserve(&queue, UPPER_BOUND).await })
        })
        .collect();
    for n in 0..3 {
        f.transport
            .publish(&f.queue, Bytes::from(format!("job {n}")), &[])
            .await
            .unwrap();
    }
    let mut bodies = Vec::new();
    for waiter in waiters {
        let job = waiter
            .await
            .unwrap()
            .unwrap()
            .expect("each waiter gets one job");
        f.transport.ack(&job.receipt).await.unwrap();
        bodies.push(job.body);
    }
    bodies.sort();
    assert_eq!(bodies, ["job 0", "job 1", "job 2"]);
}

#[tokio::test]
async fn connect_refuses_other_urls_and_bad_options_and_hides_credentials() {
    match RedisTransport::connect("amqp://user:secret@localhost", RedisOptions::new()).await {
        Err(Error::UnsupportedUrl { url, .. }) => assert!(!url.contains("secret"), "{url}"),
        other => panic!("expected an unsupported URL, got {other:?}"),
    }
    let bad = RedisOptions::new().block_slice(Duration::from_secs(5));
    assert!(matches!(
        RedisTransport::connect(&polyq_testkit::redis_url(), bad).await,
        Err(Error::InvalidOption {
            option: "block_slice",
            ..
        })
    ));
    // Nothing listens on port 1.
    match RedisTransport::connect("redis://user:secret@127.0.0.1:1/0", RedisOptions::new()).await {
        Err(
            error @ Error::Redis {
                kind: RedisErrorKind::Connection,
                ..
            },
        ) => {
            assert!(!error.to_string().contains("secret"), "{error}");
        }
        other => panic!("expected a connection error, got {other:?}"),
    }
}

#[tokio::test]
async fn prefetch_takes_several_in_one_reserve_and_unsubscribe_puts_back_the_rest() {
    let mut f = fixture(RedisOptions::new().prefetch(3)).await;
    for body in ["a", "b", "c", "d"] {
        f.transport
            .publish(&f.queue, Bytes::from(body), &[])
            .await
            .unwrap();
    }
    let processing = f.transport.processing_key(&f.queue);
    let queue = f.queue.clone();
    let a = f.reserve().await;
    assert_eq!(a.body, "a");
    assert_eq!(
        f.list(&processing).await.len(),
        3,
        "a, b and c reserved at once"
    );
    assert_eq!(f.deadlines().await.len(), 3);
    let b = f.reserve().await;
    assert_eq!(b.body, "b");
    assert_eq!(
        f.list(&queue).await,
        vec![b"d".to_vec()],
        "b came from the transport"
    );

    f.transport.unsubscribe(&f.queue).await.unwrap();
    assert_eq!(f.list(&queue).await, vec![b"c".to_vec(), b"d".to_vec()]);
    assert_eq!(
        f.list(&processing).await,
        vec![b"a".to_vec(), b"b".to_vec()]
    );
    f.transport.ack(&a.receipt).await.unwrap();
    f.transport.ack(&b.receipt).await.unwrap();
    assert!(f.deadlines().await.is_empty());
}

#[tokio::test]
async fn a_prefetched_message_held_too_long_goes_back_instead_of_out() {
    // With a zero deadline every held message is stale at once.
    let mut f = fixture(
        RedisOptions::new()
            .prefetch(2)
            .reservation_deadline(Some(Duration::ZERO)),
    )
    .await;
    for body in ["a", "b", "c"] {
        f.transport
            .publish(&f.queue, Bytes::from(body), &[])
            .await
            .unwrap();
    }
    // Each reservation is held to the end: one dropped is released to the end of the queue by a
    // task of its own, which would race the listing below.
    let a = f.reserve().await;
    assert_eq!(a.body, "a");
    // b is put back rather than handed out, a is swept back, then c is next.
    let c = f.reserve().await;
    assert_eq!(c.body, "c");
    let queue = f.queue.clone();
    assert_eq!(f.list(&queue).await, vec![b"a".to_vec()]);
    drop((a, c));
}

#[tokio::test]
async fn moving_many_to_the_end_keeps_their_order_and_reports_each() {
    let mut f = fixture(RedisOptions::new()).await;
    let headers = vec![("traceparent".to_owned(), "00-abc-def-01".to_owned())];
    for n in 0..4 {
        f.transport
            .publish(&f.queue, Bytes::from(format!("{{\"n\":{n}}}")), &headers)
            .await
            .unwrap();
    }
    let queue = f.queue.clone();
    let stored = f.list(&queue).await;
    let taken = [f.reserve().await, f.reserve().await, f.reserve().await];
    move_three_with_the_second_settled(&f.transport, &taken).await;
    // Behind the one never taken, in their order, stored exactly as before.
    assert_eq!(
        f.list(&queue).await,
        vec![stored[3].clone(), stored[0].clone(), stored[2].clone()]
    );
    assert!(f.list(&f.transport.processing_key(&queue)).await.is_empty());
    assert!(f.deadlines().await.is_empty());
}

#[tokio::test]
async fn deleting_a_queue_removes_its_keys_and_its_dead_letter_queues_and_no_other() {
    let mut f = fixture(RedisOptions::new().prefetch(2)).await;
    let options = f.transport.options().clone();
    let dlq = options.dead_letter_queue(&f.queue);
    let neighbour = format!("{}-neighbour", f.queue);
    for body in ["a", "b", "c"] {
        f.transport
            .publish(&f.queue, Bytes::from(body), &[])
            .await
            .unwrap();
    }
    f.transport
        .publish(&neighbour, Bytes::from("n"), &[])
        .await
        .unwrap();
    // Each reserve prefetches a second message: it is held in the transport, reserved on the
    // server.
    let job = f.reserve().await;
    f.transport
        .dead_letter(&job.receipt, &dlq, Bytes::from("a"))
        .await
        .unwrap();
    for body in ["x", "y"] {
        f.transport
            .publish(&dlq, Bytes::from(body), &[])
            .await
            .unwrap();
    }
    let dead = f
        .transport
        .reserve(&dlq, UPPER_BOUND)
        .await
        .unwrap()
        .expect("the dead-lettered message");
    let mut keys = options.default_layout_keys(&f.queue).to_vec();
    keys.extend(options.default_layout_keys(&dlq));
    let existing: u64 = f.raw.exists(&keys).await.unwrap();
    assert_eq!(existing, 6, "{keys:?}");

    assert_eq!(f.transport.delete_queue(&f.queue).await.unwrap(), 6);
    let left: u64 = f.raw.exists(&keys).await.unwrap();
    assert_eq!(left, 0);
    assert_eq!(f.list(&neighbour).await, vec![b"n".to_vec()]);
    // The prefetched "b" is not handed out any more, and the reservation taken is void.
    assert!(nothing_ready(&f.transport, &f.queue).await);
    assert_eq!(
        kind(f.transport.ack(&dead.receipt).await),
        RedisErrorKind::ReservationLost
    );
    assert_eq!(f.transport.delete_queue(&f.queue).await.unwrap(), 0);
}
