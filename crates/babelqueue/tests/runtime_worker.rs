//! The worker's behaviour (reference §4), each scenario on the embedded broker and on RabbitMQ.

mod runtime_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use babelqueue::transport::AmqpTransport;
use babelqueue::worker::{Backoff, Job, Shutdown, UnknownUrn};
use babelqueue::{BabelQueue, Envelope, MakeOptions};
use polyq_amqp::{FieldValue, Properties};
use polyq_testkit::brokers::TestBroker;
use runtime_support::{IDLE, PATIENCE, Refusing, Scene, envelope_of, json_of, recorder};
use serde_json::json;
use tokio::sync::mpsc;

const URN: &str = "urn:babel:orders:created";

async fn round_trip(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    let trace = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b";
    let sent = scene
        .queue
        .publish_with(
            URN,
            &json!({"order_id": 1042, "amount": 99.90, "note": "café ☕"}),
            MakeOptions::new()
                .trace_id(trace)
                .meta("ext", json!({"acme": {"tier": "gold"}})),
            &[("traceparent".to_owned(), "00-abc-def-01".to_owned())],
        )
        .await
        .unwrap();
    let (handler, mut jobs) = recorder();
    let report = scene
        .queue
        .worker()
        .handle(URN, handler)
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!((report.received, report.succeeded), (1, 1), "{report:?}");
    let job = jobs.recv().await.unwrap();
    assert_eq!(job.urn(), URN);
    assert_eq!(
        job.data().unwrap().as_str(),
        r#"{"amount":99.9,"note":"café ☕","order_id":1042}"#
    );
    assert_eq!(job.trace_id(), Some(trace));
    assert_eq!(job.meta(), sent.meta());
    assert_eq!(job.meta().unwrap().queue(), Some(scene.name()));
    assert_eq!(job.meta().unwrap().lang(), Some("rust"));
    assert_eq!(job.attempts(), 0);
    assert_eq!(job.header("traceparent"), Some("00-abc-def-01"));
    assert!(!job.is_replay());
    assert_eq!(job.envelope(), &sent);
    scene.assert_empty(scene.name()).await;
    scene.assert_empty(&scene.dlq()).await;
}

async fn failing_then_succeeding(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    scene.queue.publish(URN, &json!({"n": 1})).await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let (tx, mut attempts) = mpsc::unbounded_channel();
    let report = scene
        .queue
        .worker()
        .handle(URN, move |job: Job| {
            let call = seen.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send(job.attempts());
            async move {
                if call == 0 {
                    Err("gateway timeout")
                } else {
                    Ok(())
                }
            }
        })
        .consume(2, IDLE)
        .await
        .unwrap();
    assert_eq!((report.retried, report.succeeded), (1, 1), "{report:?}");
    assert_eq!(attempts.recv().await, Some(0));
    assert_eq!(attempts.recv().await, Some(1));
    scene.assert_empty(&scene.dlq()).await;
}

#[derive(Debug)]
struct GatewayTimeout;

impl std::fmt::Display for GatewayTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the payment gateway timed out")
    }
}

async fn exhaustion_dead_letters_with_the_block(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    let sent = scene.queue.publish(URN, &json!({"n": 1})).await.unwrap();
    let report = scene
        .queue
        .worker()
        .handle(URN, |_job| async { Err(GatewayTimeout) })
        .consume(5, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.received, report.retried, report.dead_lettered),
        (3, 2, 1),
        "{report:?}"
    );
    let dead = scene.take(&scene.dlq()).await;
    let body = json_of(&dead);
    assert_eq!(body["attempts"], 3);
    assert_eq!(body["trace_id"], sent.trace_id().unwrap());
    assert_eq!(body["data"], json!({"n": 1}));
    let block = &body["dead_letter"];
    assert_eq!(block["reason"], "failed");
    assert_eq!(block["error"], "the payment gateway timed out");
    assert!(
        block["exception"]
            .as_str()
            .unwrap()
            .ends_with("GatewayTimeout")
    );
    assert_eq!(block["original_queue"], scene.name());
    assert_eq!(block["attempts"], 3);
    assert_eq!(block["lang"], "rust");
    assert!(block["failed_at"].as_i64().unwrap() > 0);
    // The projection follows the body onto the dead-letter queue.
    assert_eq!(dead.properties.kind.as_deref(), Some(URN));
    assert_eq!(dead.properties.headers["x-attempts"].as_i64(), Some(3));
    scene.assert_empty(scene.name()).await;
}

/// A URN no handler is registered for.
const UNKNOWN_URN: &str = "urn:babel:nobody:home";

/// A fresh scene whose queue holds one job for [`UNKNOWN_URN`], and that job.
async fn scene_with_unknown_job(broker: &'static TestBroker) -> (Scene, Envelope) {
    let scene = Scene::new(broker).await;
    let sent = scene.queue.publish(UNKNOWN_URN, &json!({})).await.unwrap();
    (scene, sent)
}

async fn unknown_urn_strategies(broker: &'static TestBroker) {
    // fail: retried like a failure, dead-lettered as unknown_urn.
    let (scene, _) = scene_with_unknown_job(broker).await;
    let report = scene.queue.worker().consume(5, IDLE).await.unwrap();
    assert_eq!((report.retried, report.dead_lettered), (2, 1), "{report:?}");
    let body = json_of(&scene.take(&scene.dlq()).await);
    assert_eq!(body["dead_letter"]["reason"], "unknown_urn");
    assert_eq!(body["dead_letter"]["attempts"], 3);
    assert_eq!(body["attempts"], 3);

    // delete: acknowledged and gone.
    let (scene, _) = scene_with_unknown_job(broker).await;
    let report = scene
        .queue
        .worker()
        .unknown_urn(UnknownUrn::Delete)
        .consume(5, IDLE)
        .await
        .unwrap();
    assert_eq!((report.received, report.deleted), (1, 1), "{report:?}");
    scene.assert_empty(scene.name()).await;
    scene.assert_empty(&scene.dlq()).await;

    // release: back on the queue, byte for byte.
    let (scene, sent) = scene_with_unknown_job(broker).await;
    let report = scene
        .queue
        .worker()
        .unknown_urn(UnknownUrn::Release)
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.released, 1, "{report:?}");
    let back = scene.take(scene.name()).await;
    assert_eq!(&back.body[..], sent.encode().unwrap().as_bytes());
    scene.assert_empty(&scene.dlq()).await;

    // dead_letter: straight to the dead-letter queue, no attempt counted.
    let (scene, _) = scene_with_unknown_job(broker).await;
    let report = scene
        .queue
        .worker()
        .unknown_urn(UnknownUrn::DeadLetter)
        .consume(5, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.received, report.dead_lettered),
        (1, 1),
        "{report:?}"
    );
    let body = json_of(&scene.take(&scene.dlq()).await);
    assert_eq!(body["dead_letter"]["reason"], "unknown_urn");
    assert_eq!(body["attempts"], 0);
    assert_eq!(
        body["dead_letter"]["error"],
        "no handler is registered for URN \"urn:babel:nobody:home\""
    );
}

async fn poison_is_recorded_on_its_first_delivery(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    let json_props = Properties::default().with_content_type("application/json");
    scene
        .publish_raw(scene.name(), json_props.clone(), r#"{"job": 5"#)
        .await;
    scene
        .publish_raw(
            scene.name(),
            json_props.clone(),
            r#"{"job":"  ","n":1e400}"#,
        )
        .await;
    scene
        .publish_raw(scene.name(), json_props, &b"\xff\xfe"[..])
        .await;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let report = scene
        .queue
        .worker()
        .handle("  ", move |_job: Job| {
            seen.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, String>(()) }
        })
        .consume(3, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.received, report.dead_lettered),
        (3, 3),
        "{report:?}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "a poison body reached a handler"
    );

    let wrapped = json_of(&scene.take(&scene.dlq()).await);
    assert_eq!(wrapped["raw"], r#"{"job": 5"#);
    assert_eq!(wrapped["dead_letter"]["reason"], "poison");
    assert_eq!(wrapped["dead_letter"]["attempts"], 0);
    assert_eq!(wrapped["dead_letter"]["original_queue"], scene.name());
    let spliced = scene.take(&scene.dlq()).await;
    let text = std::str::from_utf8(&spliced.body).unwrap();
    assert!(
        text.starts_with(r#"{"job":"  ","n":1e400,"dead_letter":{"reason":"poison""#),
        "{text}"
    );
    let binary = json_of(&scene.take(&scene.dlq()).await);
    assert_eq!(binary["raw"], "//4=");
    assert_eq!(binary["raw_encoding"], "base64");
    scene.assert_empty(scene.name()).await;
}

/// RabbitMQ's `x-schema-version` header is not gated (reference §1.11, as the Python SDK): a
/// good body is handled whatever the header says; the body's own `meta.schema_version` decides.
async fn the_x_schema_version_header_is_not_gated(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    let envelope = babelqueue::make(URN, &json!({"n": 1}), MakeOptions::new()).unwrap();
    let body = envelope.encode().unwrap();
    let headers = [
        FieldValue::I32(2),
        FieldValue::F64(1.0),
        FieldValue::from(" 1"),
        FieldValue::from(" "),
    ];
    for header in &headers {
        let mut props = babelqueue::projection::rabbitmq_properties(&envelope, &[]);
        props
            .headers
            .insert("x-schema-version".to_owned(), header.clone());
        scene.publish_raw(scene.name(), props, body.clone()).await;
    }
    let version_2 = body.replace(r#""schema_version":1"#, r#""schema_version":2"#);
    assert_ne!(version_2, body);
    scene
        .publish_raw(scene.name(), Properties::default(), version_2.clone())
        .await;

    let (handler, mut jobs) = recorder();
    let report = scene
        .queue
        .worker()
        .handle(URN, handler)
        .consume(5, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.succeeded, report.dead_lettered),
        (4, 1),
        "{report:?}"
    );
    for _ in &headers {
        assert!(jobs.recv().await.is_some());
    }
    let refused = json_of(&scene.take(&scene.dlq()).await);
    assert_eq!(refused["dead_letter"]["reason"], "poison");
    scene.assert_empty(&scene.dlq()).await;
}

async fn unknown_keys_survive_a_retry(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    let body = format!(
        r#"{{"job":"{URN}","trace_id":"t-1","data":{{"price":1.50,"big":12345678901234567890}},"meta":{{"id":"i-1","queue":"{q}","lang":"cobol","schema_version":1,"created_at":1,"vendor_flag":{{}},"vendor_ctx":[true]}},"attempts":0,"extra_top":true}}"#,
        q = scene.name()
    );
    scene
        .publish_raw(scene.name(), Properties::default(), body.clone())
        .await;
    let (tx, mut bodies) = mpsc::unbounded_channel();
    let report = scene
        .queue
        .worker()
        .max_attempts(2)
        .handle(URN, move |job: Job| {
            let _ = tx.send(job.envelope().encode().unwrap());
            async { Err("no") }
        })
        .consume(5, IDLE)
        .await
        .unwrap();
    assert_eq!((report.retried, report.dead_lettered), (1, 1), "{report:?}");
    let second = {
        bodies.recv().await.unwrap();
        bodies.recv().await.unwrap()
    };
    assert_eq!(second, body.replace(r#""attempts":0"#, r#""attempts":1"#));
    let dead = scene.take(&scene.dlq()).await;
    let text = std::str::from_utf8(&dead.body).unwrap();
    assert!(
        text.contains(r#""data":{"price":1.50,"big":12345678901234567890}"#),
        "{text}"
    );
    assert!(
        text.contains(r#""vendor_flag":{},"vendor_ctx":[true]}"#),
        "{text}"
    );
    assert!(text.contains(r#""lang":"cobol""#), "{text}");
    assert!(text.ends_with(r#""extra_top":true}"#), "{text}");
}

async fn delayed_retry_goes_through_a_ttl_queue(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    let delay = Duration::from_millis(300);
    let holding = AmqpTransport::delay_queue_name(scene.name(), delay);
    assert_eq!(holding, scene.other("delay.300"));
    scene.queue.publish(URN, &json!({})).await.unwrap();
    let (called, mut calls) = mpsc::unbounded_channel();
    let count = Arc::new(AtomicUsize::new(0));
    let report = scene
        .queue
        .worker()
        .backoff(Backoff::fixed(delay))
        .handle(URN, move |_job: Job| {
            let _ = called.send(Instant::now());
            let call = count.fetch_add(1, Ordering::SeqCst);
            async move { if call == 0 { Err("later") } else { Ok(()) } }
        })
        .consume(2, PATIENCE)
        .await
        .unwrap();
    assert_eq!((report.retried, report.succeeded), (1, 1), "{report:?}");
    let failed = calls.recv().await.unwrap();
    let again = calls.recv().await.unwrap();
    // The retry was published after the first call and the broker expires it no sooner than
    // its TTL after taking it (counted in whole milliseconds): a lower bound, whatever the load.
    let waited = again - failed;
    assert!(
        waited >= delay - Duration::from_millis(1),
        "the retry came back after {waited:?}, before its {delay:?} delay"
    );
    let info = scene.client.inspect_queue(&holding).await.unwrap();
    assert_eq!(
        info.message_count, 0,
        "the delay queue handed the message back"
    );
}

async fn a_failed_dead_letter_write_keeps_the_message(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    let transport = Refusing {
        dead_letter: true,
        ..Refusing::new(AmqpTransport::connect(broker.url()).await.unwrap())
    };
    let queue = BabelQueue::with_transport(transport, scene.name());
    let sent = queue.publish(URN, &json!({"keep": "me"})).await.unwrap();
    let report = queue
        .worker()
        .max_attempts(1)
        .redelivery_pause(Duration::ZERO)
        .handle(URN, |_job: Job| async { Err("fails") })
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.dead_lettered, report.unsettled),
        (0, 1),
        "{report:?}"
    );
    let back = scene.take(scene.name()).await;
    assert_eq!(
        &back.body[..],
        sent.encode().unwrap().as_bytes(),
        "the message came back unchanged"
    );
    scene.assert_empty(&scene.dlq()).await;
}

async fn a_failed_ack_is_not_a_handler_failure(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    let transport = Refusing {
        ack: true,
        ..Refusing::new(AmqpTransport::connect(broker.url()).await.unwrap())
    };
    let queue = BabelQueue::with_transport(transport, scene.name());
    queue.publish(URN, &json!({})).await.unwrap();
    let (handler, mut jobs) = recorder();
    let report = queue
        .worker()
        .handle(URN, handler)
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.succeeded, report.retried, report.dead_lettered),
        (1, 0, 0),
        "{report:?}"
    );
    assert_eq!(jobs.recv().await.unwrap().attempts(), 0);
    drop(queue);
    // Unacknowledged, the broker delivers it again once the worker's channel is gone: unchanged,
    // never retried.
    let again = envelope_of(&scene.take(scene.name()).await);
    assert_eq!(again.attempts(), Some(0));
    scene.assert_empty(&scene.dlq()).await;
}

async fn a_laravel_x_attempts_header_counts(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    let envelope = babelqueue::make(URN, &json!({}), MakeOptions::new()).unwrap();
    let mut props = babelqueue::projection::rabbitmq_properties(&envelope, &[]);
    // A Laravel release bumps only the header; the body still says 0.
    props
        .headers
        .insert("x-attempts".to_owned(), FieldValue::I8(2));
    scene
        .publish_raw(scene.name(), props, envelope.encode().unwrap())
        .await;
    let (tx, mut attempts) = mpsc::unbounded_channel();
    let report = scene
        .queue
        .worker()
        .handle(URN, move |job: Job| {
            let _ = tx.send(job.attempts());
            async { Err("no") }
        })
        .consume(5, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.received, report.dead_lettered),
        (1, 1),
        "{report:?}"
    );
    assert_eq!(attempts.recv().await, Some(2));
    let body = json_of(&scene.take(&scene.dlq()).await);
    assert_eq!(
        (&body["attempts"], &body["dead_letter"]["attempts"]),
        (&json!(3), &json!(3))
    );
}

async fn handlers_run_concurrently(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    for n in 0..8 {
        scene.queue.publish(URN, &json!({ "n": n })).await.unwrap();
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(4));
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (b, r, p) = (barrier.clone(), running.clone(), peak.clone());
    let report = scene
        .queue
        .worker()
        .concurrency(4)
        .handle(URN, move |_job: Job| {
            let (barrier, running, peak) = (b.clone(), r.clone(), p.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                // Passes only when four handlers are running at the same time.
                let met = tokio::time::timeout(PATIENCE, barrier.wait()).await;
                running.fetch_sub(1, Ordering::SeqCst);
                met.map(|_| ())
                    .map_err(|_| "fewer than four handlers ran at once")
            }
        })
        .consume(8, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 8, "{report:?}");
    assert_eq!(
        peak.load(Ordering::SeqCst),
        4,
        "never more than the concurrency"
    );
}

async fn shutdown_finishes_in_flight_work_then_releases_the_rest(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    scene.queue.publish(URN, &json!({"n": 1})).await.unwrap();
    scene
        .queue
        .publish("urn:babel:slow:one", &json!({"n": 2}))
        .await
        .unwrap();
    let shutdown = Shutdown::new();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (finish_tx, finish) = tokio::sync::watch::channel(false);
    let started_slow = started_tx.clone();
    let worker = scene
        .queue
        .worker()
        .concurrency(2)
        .shutdown_timeout(Duration::from_millis(200))
        .poll_wait(Duration::from_millis(100))
        .handle(URN, move |_job: Job| {
            let mut finish = finish.clone();
            let _ = started_tx.send(URN);
            async move {
                finish
                    .wait_for(|done| *done)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        })
        .handle("urn:babel:slow:one", move |_job: Job| {
            let _ = started_slow.send("slow");
            std::future::pending::<Result<(), String>>()
        });
    let run = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(&shutdown).await }
    });
    for _ in 0..2 {
        tokio::time::timeout(PATIENCE, started.recv())
            .await
            .unwrap();
    }
    shutdown.stop();
    finish_tx.send(true).unwrap();
    let report = tokio::time::timeout(PATIENCE, run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((report.succeeded, report.released), (1, 1), "{report:?}");
    let back = envelope_of(&scene.take(scene.name()).await);
    assert_eq!(back.urn(), Some("urn:babel:slow:one"));
    assert_eq!(back.attempts(), Some(0), "released unchanged");
}

/// A handler that panics, whether before it returns its future or while the future runs, fails
/// its job like any error: retried, then dead-lettered with the panic's text, and the worker
/// goes on to the next job.
async fn a_panicking_handler_is_retried_then_dead_lettered(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    for when in ["before", "during"] {
        scene
            .queue
            .publish(URN, &json!({"when": when}))
            .await
            .unwrap();
    }
    let report = scene
        .queue
        .worker()
        .handle(URN, |job: Job| {
            let when = job.data().map(|data| data.as_str().to_owned());
            if when.as_deref() == Some(r#"{"when":"before"}"#) {
                panic!("the handler gave up before its future");
            }
            async move {
                if when.is_some() {
                    panic!("the handler gave up in its future");
                }
                Ok::<(), GatewayTimeout>(())
            }
        })
        .consume(6, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.received, report.retried, report.dead_lettered),
        (6, 4, 2),
        "{report:?}"
    );
    let mut errors = Vec::new();
    for _ in 0..2 {
        let block = json_of(&scene.take(&scene.dlq()).await)["dead_letter"].clone();
        assert_eq!(block["exception"], "panic");
        errors.push(block["error"].as_str().unwrap().to_owned());
    }
    errors.sort();
    assert_eq!(
        errors,
        [
            "the handler gave up before its future",
            "the handler gave up in its future"
        ]
    );
    scene.assert_empty(scene.name()).await;
}

polyq_testkit::both_brokers!(
    round_trip,
    failing_then_succeeding,
    exhaustion_dead_letters_with_the_block,
    a_panicking_handler_is_retried_then_dead_lettered,
    unknown_urn_strategies,
    poison_is_recorded_on_its_first_delivery,
    the_x_schema_version_header_is_not_gated,
    unknown_keys_survive_a_retry,
    delayed_retry_goes_through_a_ttl_queue,
    a_failed_dead_letter_write_keeps_the_message,
    a_failed_ack_is_not_a_handler_failure,
    a_laravel_x_attempts_header_counts,
    handlers_run_concurrently,
    shutdown_finishes_in_flight_work_then_releases_the_rest,
);
