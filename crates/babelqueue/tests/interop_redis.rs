//! The Redis bindings against the Python SDK (`babelqueue` 1.24.0 from PyPI) as a live peer, on
//! both layouts and in both directions: what one side publishes, reserves, settles or
//! dead-letters, the other reads, settles, recovers or redrives.
//!
//! The interpreter is `POLYQ_PYTHON`, which `scripts/test` sets up (`scripts/python-peer`).

#![cfg(feature = "redis")]

mod redis_support;

use std::time::Duration;

use babelqueue::transport::Transport;
use babelqueue::transport::redis::{
    LaravelReceipt, LaravelTransport, RedisOptions, RedisTransport,
};
use babelqueue::{DeadLetter, DeadLetterReason, MakeOptions};
use bytes::Bytes;
use polyq_testkit::brokers::DeleteRedisKeys;
use redis::AsyncCommands;
use redis_support::UPPER_BOUND;
use serde_json::{Value, json};

const URN: &str = "urn:babel:orders:created";

/// The Python side: one command per run, JSON on stdout.
const PEER: &str = r#"
import json, sys
from babelqueue import BabelQueue, EnvelopeCodec
from babelqueue.headers import headers_from_context
from babelqueue.redis_transport import RedisTransport, _LegacyHandle
from babelqueue.redrive import redrive
from babelqueue.transport import ReceivedMessage

command, url, layout, queue, *args = sys.argv[1:]
options = {"laravel_compat": layout == "laravel"}
if command == "pop-lapsing":
    options["retry_after"] = 0
if command == "sweep":
    options["retry_after"] = int(args[0])
transport = RedisTransport(url, **options)

def out(value):
    print(json.dumps(value, ensure_ascii=False), flush=True)

def message(body, handle):
    handle = _LegacyHandle(*handle) if isinstance(handle, list) else handle
    return ReceivedMessage(body=body, queue=queue, handle=handle)

if command == "publish":
    urn, data, headers = args[0], json.loads(args[1]), json.loads(args[2])
    body = EnvelopeCodec.encode(EnvelopeCodec.make(urn, data, queue=queue, trace_id="py-trace"))
    if headers:
        transport.publish_with_headers(queue, body, headers)
    else:
        transport.publish(queue, body)
    out({"body": body})
elif command == "publish-raw":
    transport.publish(queue, args[0])
elif command in ("pop", "pop-lapsing"):
    received = transport.pop(queue, timeout=10)
    handle = received.handle
    out({"body": received.body, "headers": received.headers,
         "handle": list(handle) if isinstance(handle, tuple) else handle})
elif command == "sweep":
    # Reserves (each reserve sweeps or migrates lapsed reservations first) for args[1] seconds;
    # prints every body it took, acked.
    import time
    until = time.monotonic() + float(args[1])
    taken = []
    while time.monotonic() < until:
        received = transport.pop(queue, timeout=0.2)
        if received is not None:
            taken.append(received.body)
            transport.ack(received)
    out(taken)
elif command == "ack":
    transport.ack(message(args[0], json.loads(args[1])))
elif command == "release":
    transport.release(message(args[0], json.loads(args[1])), float(args[2]))
elif command == "consume":
    app = BabelQueue(transport=transport, queue=queue)
    seen = []
    def handler(data, meta, envelope):
        seen.append({"data": data, "meta": meta, "envelope": envelope,
                     "headers": dict(headers_from_context())})
    app.register(args[0], handler)
    app.consume(max_messages=int(args[1]), timeout=10, handle_signals=False)
    out(seen)
elif command == "fail":
    app = BabelQueue(transport=transport, queue=queue, dead_letter=True, max_attempts=1)
    def failing(data, meta):
        raise RuntimeError("boom from python")
    app.register(args[0], failing)
    app.consume(max_messages=1, timeout=10, handle_signals=False)
elif command == "redrive":
    result = redrive(transport, queue)
    out({"redriven": result.redriven, "skipped": result.skipped,
         "reasons": [item.reason for item in result.items], "to": [item.to for item in result.items]})
else:
    raise SystemExit(f"unknown command {command}")
"#;

fn python() -> String {
    std::env::var("POLYQ_PYTHON").unwrap_or_else(|_| {
        panic!(
            "POLYQ_PYTHON is not set: run scripts/test (which sets it), or scripts/python-peer and \
             export POLYQ_PYTHON=$PWD/.venv/bin/python"
        )
    })
}

/// Runs one peer command and returns what it printed, parsed (`null` when it printed nothing).
async fn peer(command: &str, layout: &str, queue: &str, args: &[&str]) -> Value {
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(python())
            .arg("-c")
            .arg(PEER)
            .args([command, &polyq_testkit::redis_url(), layout, queue])
            .args(args)
            .output(),
    )
    .await
    .expect("the Python peer finishes within a minute")
    .expect("the Python peer starts");
    assert!(
        output.status.success(),
        "Python peer `{command}` failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    if stdout.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(stdout.trim()).unwrap()
    }
}

struct Fixture {
    queue: String,
    raw: redis::aio::MultiplexedConnection,
    _keys: DeleteRedisKeys,
}

async fn fixture() -> Fixture {
    let url = polyq_testkit::redis_url();
    let queue = polyq_testkit::unique_name("bq-interop-redis");
    let raw = redis_support::raw_connection(&url).await;
    Fixture {
        _keys: DeleteRedisKeys::new(&url, [&queue]),
        queue,
        raw,
    }
}

impl Fixture {
    /// Asserts that the default layout holds no reservation of the queue.
    async fn assert_nothing_reserved(&mut self, redis: &RedisTransport) {
        let processing = redis.processing_key(&self.queue);
        let deadlines = redis.deadlines_key(&self.queue);
        assert_eq!(self.len(&processing).await, 0);
        assert_eq!(self.zcard(&deadlines).await, 0);
    }

    async fn len(&mut self, key: &str) -> usize {
        self.raw.llen(key).await.unwrap()
    }

    async fn zcard(&mut self, key: &str) -> usize {
        self.raw.zcard(key).await.unwrap()
    }
}

async fn default_layout(options: RedisOptions) -> RedisTransport {
    RedisTransport::connect(&polyq_testkit::redis_url(), options)
        .await
        .unwrap()
}

async fn laravel_layout() -> LaravelTransport {
    LaravelTransport::connect(&polyq_testkit::redis_url(), RedisOptions::new())
        .await
        .unwrap()
}

fn our_body(queue: &str, data: Value) -> String {
    babelqueue::make(
        URN,
        &data,
        MakeOptions::new().queue(queue).trace_id("rust-trace"),
    )
    .unwrap()
    .encode()
    .unwrap()
}

fn decode(body: &[u8]) -> babelqueue::Envelope {
    babelqueue::decode(body).unwrap().envelope
}

fn text(value: &Value) -> &str {
    value.as_str().expect("a JSON string")
}

// ---------------------------------------------------------------------------------------------
// Default layout

#[tokio::test]
async fn default_python_publishes_with_headers_and_rust_reserves_and_acks() {
    let mut f = fixture().await;
    let redis = default_layout(RedisOptions::new()).await;
    let published = peer(
        "publish",
        "default",
        &f.queue,
        &[
            URN,
            r#"{"order_id": 1042, "note": "café ☕", "path": "a/b"}"#,
            r#"{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#,
        ],
    )
    .await;
    let job = redis.reserve(&f.queue, UPPER_BOUND).await.unwrap().unwrap();
    assert_eq!(
        job.body,
        text(&published["body"]),
        "the envelope bytes intact"
    );
    assert_eq!(
        job.headers,
        vec![(
            "traceparent".to_owned(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned()
        )]
    );
    let envelope = decode(&job.body);
    assert_eq!(envelope.trace_id(), Some("py-trace"));
    assert_eq!(
        envelope.data_as::<Value>().unwrap(),
        json!({"order_id": 1042, "note": "café ☕", "path": "a/b"})
    );
    redis.ack(&job.receipt).await.unwrap();
    f.assert_nothing_reserved(&redis).await;
}

#[tokio::test]
async fn default_rust_publishes_and_python_consumes_with_headers() {
    let f = fixture().await;
    let redis = default_layout(RedisOptions::new()).await;
    let body = our_body(&f.queue, json!({"order_id": 7, "path": "a/b"}));
    let headers = vec![("traceparent".to_owned(), "00-abc-def-01".to_owned())];
    redis
        .publish(&f.queue, Bytes::from(body.clone()), &headers)
        .await
        .unwrap();
    let seen = peer("consume", "default", &f.queue, &[URN, "1"]).await;
    let seen = &seen[0];
    let envelope = decode(body.as_bytes());
    assert_eq!(seen["data"], json!({"order_id": 7, "path": "a/b"}));
    assert_eq!(seen["meta"]["id"], envelope.meta().unwrap().id().unwrap());
    assert_eq!(seen["meta"]["lang"], "rust");
    assert_eq!(seen["envelope"]["trace_id"], "rust-trace");
    assert_eq!(seen["headers"], json!({"traceparent": "00-abc-def-01"}));
}

#[tokio::test]
async fn default_a_message_python_dead_letters_is_read_by_rust() {
    let mut f = fixture().await;
    let redis = default_layout(RedisOptions::new()).await;
    peer("publish", "default", &f.queue, &[URN, r#"{"n": 1}"#, "{}"]).await;
    peer("fail", "default", &f.queue, &[URN]).await;
    let dlq = redis.options().dead_letter_queue(&f.queue);
    let job = redis.reserve(&dlq, UPPER_BOUND).await.unwrap().unwrap();
    let envelope = decode(&job.body);
    let block = envelope.dead_letter().expect("a dead_letter block");
    assert_eq!(block.reason.as_deref(), Some("failed"));
    assert_eq!(block.original_queue.as_deref(), Some(f.queue.as_str()));
    assert_eq!(block.lang.as_deref(), Some("python"));
    assert_eq!(envelope.attempts(), Some(1));
    redis.ack(&job.receipt).await.unwrap();
    assert_eq!(f.len(&f.queue.clone()).await, 0);
}

#[tokio::test]
async fn default_a_message_rust_dead_letters_is_redriven_by_python() {
    let mut f = fixture().await;
    let redis = default_layout(RedisOptions::new()).await;
    let body = our_body(&f.queue, json!({"n": 2}));
    redis
        .publish(&f.queue, Bytes::from(body), &[])
        .await
        .unwrap();
    let job = redis.reserve(&f.queue, UPPER_BOUND).await.unwrap().unwrap();
    let mut envelope = decode(&job.body);
    envelope.set_attempts(3);
    envelope.annotate(
        &DeadLetter::new(DeadLetterReason::Failed, f.queue.clone(), 3).error("boom from rust"),
    );
    let dlq = redis.options().dead_letter_queue(&f.queue);
    redis
        .dead_letter(&job.receipt, &dlq, Bytes::from(envelope.encode().unwrap()))
        .await
        .unwrap();

    let report = peer("redrive", "default", &dlq, &[]).await;
    assert_eq!(
        report,
        json!({"redriven": 1, "skipped": 0, "reasons": ["failed"], "to": [f.queue]})
    );
    assert_eq!(f.len(&dlq).await, 0);

    let back = redis.reserve(&f.queue, UPPER_BOUND).await.unwrap().unwrap();
    let envelope = decode(&back.body);
    assert_eq!(envelope.attempts(), Some(0));
    assert!(envelope.dead_letter().is_none());
    assert_eq!(envelope.data_as::<Value>().unwrap(), json!({"n": 2}));
    redis.ack(&back.receipt).await.unwrap();
}

#[tokio::test]
async fn default_each_side_recovers_the_others_lapsed_reservation() {
    let mut f = fixture().await;
    // Ours lapses at once; Python's sweep brings it back and Python takes it.
    let lapsing =
        default_layout(RedisOptions::new().reservation_deadline(Some(Duration::ZERO))).await;
    let body = our_body(&f.queue, json!({"n": 3}));
    lapsing
        .publish(&f.queue, Bytes::from(body.clone()), &[])
        .await
        .unwrap();
    let ours = lapsing
        .reserve(&f.queue, UPPER_BOUND)
        .await
        .unwrap()
        .unwrap();
    let popped = peer("pop", "default", &f.queue, &[]).await;
    assert_eq!(text(&popped["body"]), body);
    assert!(matches!(
        lapsing.ack(&ours.receipt).await,
        Err(babelqueue::Error::Redis { .. })
    ));

    // Python's lapses at once; our sweep brings it back.
    peer(
        "ack",
        "default",
        &f.queue,
        &[text(&popped["body"]), &popped["handle"].to_string()],
    )
    .await;
    peer("publish-raw", "default", &f.queue, &[&body]).await;
    peer("pop-lapsing", "default", &f.queue, &[]).await;
    let redis = default_layout(RedisOptions::new()).await;
    let recovered = redis.reserve(&f.queue, UPPER_BOUND).await.unwrap().unwrap();
    assert_eq!(recovered.body, body);
    redis.ack(&recovered.receipt).await.unwrap();
    f.assert_nothing_reserved(&redis).await;
}

#[tokio::test]
async fn default_unknown_keys_survive_a_rust_retry_and_python_sees_them() {
    let f = fixture().await;
    let redis = default_layout(RedisOptions::new()).await;
    let body = format!(
        r#"{{"job":"{URN}","trace_id":"t-1","data":{{"n":1}},"meta":{{"id":"m-1","queue":"{q}","lang":"go","schema_version":1,"created_at":1700000000,"tenant":"acme"}},"attempts":0,"x_custom":{{"keep":[1,2]}}}}"#,
        q = f.queue
    );
    peer("publish-raw", "default", &f.queue, &[&body]).await;
    let job = redis.reserve(&f.queue, UPPER_BOUND).await.unwrap().unwrap();
    let mut envelope = decode(&job.body);
    envelope.set_attempts(1);
    redis
        .retry(
            &job.receipt,
            &f.queue,
            Bytes::from(envelope.encode().unwrap()),
            &job.headers,
            Duration::ZERO,
        )
        .await
        .unwrap();
    let seen = peer("consume", "default", &f.queue, &[URN, "1"]).await;
    let seen = &seen[0];
    assert_eq!(seen["envelope"]["x_custom"], json!({"keep": [1, 2]}));
    assert_eq!(seen["meta"]["tenant"], "acme");
    assert_eq!(seen["envelope"]["attempts"], 1);
}

// ---------------------------------------------------------------------------------------------
// Laravel layout

#[tokio::test]
async fn laravel_python_publishes_and_rust_reserves_and_acks() {
    let mut f = fixture().await;
    let laravel = laravel_layout().await;
    let published = peer(
        "publish",
        "laravel",
        &f.queue,
        &[
            URN,
            r#"{"order_id": 1042, "path": "a/b", "tags": []}"#,
            "{}",
        ],
    )
    .await;
    let job = laravel
        .reserve(&f.queue, UPPER_BOUND)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.body, text(&published["body"]), "the raw job intact");
    let envelope = decode(&job.body);
    assert_eq!(
        envelope.data_as::<Value>().unwrap(),
        json!({"order_id": 1042, "path": "a/b", "tags": []})
    );
    laravel.ack(&job.receipt).await.unwrap();
    let reserved = format!("{}:reserved", laravel.key(&f.queue));
    assert_eq!(f.zcard(&reserved).await, 0);
}

#[tokio::test]
async fn laravel_rust_publishes_and_python_consumes() {
    let f = fixture().await;
    let laravel = laravel_layout().await;
    let body = our_body(&f.queue, json!({"order_id": 8, "path": "a/b"}));
    laravel
        .publish(&f.queue, Bytes::from(body), &[])
        .await
        .unwrap();
    let seen = peer("consume", "laravel", &f.queue, &[URN, "1"]).await;
    assert_eq!(seen[0]["data"], json!({"order_id": 8, "path": "a/b"}));
    assert_eq!(seen[0]["envelope"]["trace_id"], "rust-trace");
    assert_eq!(seen[0]["envelope"]["attempts"], 0);
}

#[tokio::test]
async fn laravel_rust_settles_reservations_python_made() {
    let mut f = fixture().await;
    let laravel = laravel_layout().await;
    let ready = laravel.key(&f.queue);
    let reserved = format!("{ready}:reserved");
    for n in 1..=2 {
        laravel
            .publish(
                &f.queue,
                Bytes::from(our_body(&f.queue, json!({"n": n}))),
                &[],
            )
            .await
            .unwrap();
    }
    let queue = f.queue.clone();
    let receipt = |popped: &Value| {
        LaravelReceipt::new(
            queue.clone(),
            Bytes::from(text(&popped["body"]).to_owned()),
            Bytes::from(text(&popped["handle"]).to_owned()),
        )
    };

    let first = peer("pop", "laravel", &f.queue, &[]).await;
    assert_eq!(f.zcard(&reserved).await, 1);
    laravel.ack(&receipt(&first)).await.unwrap();
    assert_eq!(f.zcard(&reserved).await, 0);

    let second = peer("pop", "laravel", &f.queue, &[]).await;
    laravel
        .release(&receipt(&second), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(f.zcard(&reserved).await, 0);
    let delayed: Vec<Vec<u8>> = f
        .raw
        .zrange(format!("{ready}:delayed"), 0, -1)
        .await
        .unwrap();
    assert_eq!(delayed, vec![text(&second["body"]).as_bytes().to_vec()]);
}

#[tokio::test]
async fn laravel_python_settles_reservations_rust_made() {
    let mut f = fixture().await;
    let laravel = laravel_layout().await;
    let reserved = format!("{}:reserved", laravel.key(&f.queue));
    for n in 1..=2 {
        laravel
            .publish(
                &f.queue,
                Bytes::from(our_body(&f.queue, json!({"n": n}))),
                &[],
            )
            .await
            .unwrap();
    }
    let handle = |receipt: &LaravelReceipt| {
        Value::String(String::from_utf8(receipt.reserved().to_vec()).unwrap()).to_string()
    };

    let first = laravel
        .reserve(&f.queue, UPPER_BOUND)
        .await
        .unwrap()
        .unwrap();
    let body = String::from_utf8(first.body.to_vec()).unwrap();
    peer(
        "ack",
        "laravel",
        &f.queue,
        &[&body, &handle(&first.receipt)],
    )
    .await;
    assert_eq!(f.zcard(&reserved).await, 0);

    // Python's release hands the job back with attempts + 1; we take it again.
    let second = laravel
        .reserve(&f.queue, UPPER_BOUND)
        .await
        .unwrap()
        .unwrap();
    let body = String::from_utf8(second.body.to_vec()).unwrap();
    peer(
        "release",
        "laravel",
        &f.queue,
        &[&body, &handle(&second.receipt), "0"],
    )
    .await;
    assert_eq!(f.zcard(&reserved).await, 0);
    let again = laravel
        .reserve(&f.queue, UPPER_BOUND)
        .await
        .unwrap()
        .unwrap();
    let envelope = decode(&again.body);
    assert_eq!(envelope.attempts(), Some(1));
    assert_eq!(envelope.data_as::<Value>().unwrap(), json!({"n": 2}));
    laravel.ack(&again.receipt).await.unwrap();
}

#[tokio::test]
async fn laravel_dead_letters_cross_both_ways() {
    let mut f = fixture().await;
    let laravel = laravel_layout().await;
    let dlq = laravel.options().dead_letter_queue(&f.queue);

    // Python dead-letters; we read it off `queues:<queue>.dlq`.
    peer("publish", "laravel", &f.queue, &[URN, r#"{"n": 1}"#, "{}"]).await;
    peer("fail", "laravel", &f.queue, &[URN]).await;
    let dead = laravel.reserve(&dlq, UPPER_BOUND).await.unwrap().unwrap();
    let envelope = decode(&dead.body);
    let block = envelope.dead_letter().expect("a dead_letter block");
    assert_eq!(block.reason.as_deref(), Some("failed"));
    assert_eq!(block.original_queue.as_deref(), Some(f.queue.as_str()));
    assert_eq!(block.lang.as_deref(), Some("python"));
    laravel.ack(&dead.receipt).await.unwrap();

    // We dead-letter; Python reads it.
    laravel
        .publish(
            &f.queue,
            Bytes::from(our_body(&f.queue, json!({"n": 2}))),
            &[],
        )
        .await
        .unwrap();
    let job = laravel
        .reserve(&f.queue, UPPER_BOUND)
        .await
        .unwrap()
        .unwrap();
    let mut envelope = decode(&job.body);
    envelope.set_attempts(1);
    envelope.annotate(&DeadLetter::new(
        DeadLetterReason::Failed,
        f.queue.clone(),
        1,
    ));
    let annotated = envelope.encode().unwrap();
    laravel
        .dead_letter(&job.receipt, &dlq, Bytes::from(annotated.clone()))
        .await
        .unwrap();
    let popped = peer("pop", "laravel", &dlq, &[]).await;
    assert_eq!(text(&popped["body"]), annotated);
    let reserved = format!("{}:reserved", laravel.key(&f.queue));
    assert_eq!(f.zcard(&reserved).await, 0);
}

// ---------------------------------------------------------------------------------------------
// The worker runtime and redrive, on both layouts

mod runtime {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use babelqueue::BabelQueue;
    use babelqueue::redrive::RedriveOptions;
    use babelqueue::transport::RedisLayout;
    use babelqueue::transport::Transport as _;
    use babelqueue::worker::Job;
    use serde_json::{Value, json};
    use tokio::sync::mpsc;

    use super::{Duration, URN, fixture, peer};

    const IDLE: Duration = Duration::from_secs(2);

    fn peer_layout(layout: RedisLayout) -> &'static str {
        match layout {
            RedisLayout::Laravel => "laravel",
            _ => "default",
        }
    }

    async fn babel(queue: &str, layout: RedisLayout) -> BabelQueue {
        BabelQueue::builder(polyq_testkit::redis_url())
            .queue(queue)
            .redis_layout(layout)
            .connect()
            .await
            .unwrap()
    }

    async fn rust_worker_dead_letters_and_python_redrives(layout: RedisLayout) {
        let f = fixture().await;
        let queue = babel(&f.queue, layout).await;
        queue.publish(URN, &json!({"n": 1})).await.unwrap();
        let report = queue
            .worker()
            .max_attempts(1)
            .handle(URN, |_job: Job| async { Err("refused by rust") })
            .consume(1, IDLE)
            .await
            .unwrap();
        assert_eq!(report.dead_lettered, 1, "{report:?}");

        let dlq = format!("{}.dlq", f.queue);
        let redriven = peer("redrive", peer_layout(layout), &dlq, &[]).await;
        assert_eq!(
            redriven,
            json!({"redriven": 1, "skipped": 0, "reasons": ["failed"], "to": [f.queue]})
        );
        let seen = peer("consume", peer_layout(layout), &f.queue, &[URN, "1"]).await;
        assert_eq!(seen[0]["data"], json!({"n": 1}));
        assert_eq!(seen[0]["envelope"]["attempts"], 0);
        assert!(seen[0]["envelope"].get("dead_letter").is_none());
        assert_eq!(seen[0]["meta"]["lang"], "rust");
    }

    async fn python_dead_letters_and_rust_redrives(layout: RedisLayout) {
        let f = fixture().await;
        let queue = babel(&f.queue, layout).await;
        peer(
            "publish",
            peer_layout(layout),
            &f.queue,
            &[URN, r#"{"n": 2}"#, "{}"],
        )
        .await;
        peer("fail", peer_layout(layout), &f.queue, &[URN]).await;

        let done = queue
            .redrive(&RedriveOptions::new().wait(IDLE))
            .await
            .unwrap();
        assert_eq!(done.redriven, 1, "{done:?}");
        assert_eq!(done.items[0].reason, "failed");
        assert_eq!(done.items[0].to, f.queue);

        let (tx, mut seen) = mpsc::unbounded_channel();
        let report = queue
            .worker()
            .handle(URN, move |job: Job| {
                let _ = tx.send((
                    job.attempts(),
                    job.data_as::<Value>().ok(),
                    job.envelope().dead_letter_raw().is_none(),
                    job.meta().and_then(|meta| meta.lang().map(str::to_owned)),
                ));
                async { Ok::<_, &str>(()) }
            })
            .consume(1, IDLE)
            .await
            .unwrap();
        assert_eq!(report.succeeded, 1, "{report:?}");
        assert_eq!(
            seen.recv().await,
            Some((0, Some(json!({"n": 2})), true, Some("python".to_owned())))
        );
    }

    async fn unknown_keys_survive_a_rust_worker_retry(layout: RedisLayout) {
        let f = fixture().await;
        let queue = babel(&f.queue, layout).await;
        let body = format!(
            r#"{{"job":"{URN}","trace_id":"t-1","data":{{"n":1}},"meta":{{"id":"m-1","queue":"{q}","lang":"go","schema_version":1,"created_at":1700000000,"tenant":"acme"}},"attempts":0,"x_custom":{{"keep":[1,2]}}}}"#,
            q = f.queue
        );
        peer("publish-raw", peer_layout(layout), &f.queue, &[&body]).await;
        let report = queue
            .worker()
            .max_attempts(3)
            .handle(URN, |_job: Job| async { Err("once") })
            .consume(1, IDLE)
            .await
            .unwrap();
        assert_eq!(report.retried, 1, "{report:?}");

        let seen = peer("consume", peer_layout(layout), &f.queue, &[URN, "1"]).await;
        assert_eq!(seen[0]["envelope"]["x_custom"], json!({"keep": [1, 2]}));
        assert_eq!(seen[0]["meta"]["tenant"], "acme");
        assert_eq!(seen[0]["meta"]["lang"], "go");
        assert_eq!(seen[0]["envelope"]["attempts"], 1);
    }

    /// The reservation deadline of the long-handler test: short, so the test is, yet long enough
    /// to be extended (a whole-second score can lose one second of it).
    const DEADLINE: Duration = Duration::from_secs(2);
    /// How long the long handler runs: four deadlines.
    const LONG: Duration = Duration::from_secs(8);

    /// A handler running four reservation deadlines long, beside a second Rust worker and the
    /// Python SDK's reserve (which sweeps, or migrates, lapsed reservations first), both on the
    /// same deadline, runs once: its worker extends the reservation where they look.
    async fn a_long_handler_runs_once_beside_a_second_worker_and_a_python_sweep(
        layout: RedisLayout,
    ) {
        let f = fixture().await;
        let connect = || async {
            let options = babelqueue::transport::ConnectOptions::default()
                .redis_layout(layout)
                .redis(
                    babelqueue::transport::redis::RedisOptions::new()
                        .reservation_deadline(Some(DEADLINE))
                        .retry_after(Some(DEADLINE))
                        .block_slice(Duration::from_millis(200)),
                );
            BabelQueue::builder(polyq_testkit::redis_url())
                .queue(&f.queue)
                .options(options)
                .connect()
                .await
                .unwrap()
        };
        let (first, second) = (connect().await, connect().await);
        first.publish(URN, &json!({"n": 1})).await.unwrap();

        let runs = Arc::new(AtomicUsize::new(0));
        let (started, mut has_started) = mpsc::unbounded_channel();
        let long_handler = |runs: Arc<AtomicUsize>, started: mpsc::UnboundedSender<()>| {
            move |_job: Job| {
                runs.fetch_add(1, Ordering::SeqCst);
                let _ = started.send(());
                // The work itself: a handler that takes several deadlines.
                async {
                    tokio::time::sleep(LONG).await;
                    Ok::<_, &str>(())
                }
            }
        };
        let working = tokio::spawn(
            first
                .worker()
                .handle(URN, long_handler(runs.clone(), started.clone()))
                .consume(1, IDLE),
        );
        has_started
            .recv()
            .await
            .expect("the first worker starts the handler");

        let beside = second
            .worker()
            .handle(URN, long_handler(runs.clone(), started))
            .consume(1, LONG);
        let (deadline, window) = (DEADLINE.as_secs().to_string(), LONG.as_secs().to_string());
        let sweep_args = [deadline.as_str(), window.as_str()];
        let sweep = peer("sweep", peer_layout(layout), &f.queue, &sweep_args);
        let (beside, swept) = tokio::join!(beside, sweep);
        let report = working.await.unwrap().unwrap();

        assert_eq!(report.succeeded, 1, "{report:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
        assert_eq!(
            beside.unwrap().succeeded,
            0,
            "the second worker took nothing"
        );
        assert_eq!(swept, json!([]), "the Python sweep took nothing back");
        assert_eq!(first.transport().depth(&f.queue).await.unwrap(), 0);
    }

    /// Declares `#[tokio::test]`s `default` and `laravel` in a module named after the scenario.
    macro_rules! on_both_layouts {
        ($($scenario:ident),* $(,)?) => {$(
            mod $scenario {
                use babelqueue::transport::RedisLayout;

                #[tokio::test]
                async fn default() {
                    super::$scenario(RedisLayout::Default).await;
                }

                #[tokio::test]
                async fn laravel() {
                    super::$scenario(RedisLayout::Laravel).await;
                }
            }
        )*};
    }

    on_both_layouts!(
        rust_worker_dead_letters_and_python_redrives,
        python_dead_letters_and_rust_redrives,
        unknown_keys_survive_a_rust_worker_retry,
        a_long_handler_runs_once_beside_a_second_worker_and_a_python_sweep,
    );
}
