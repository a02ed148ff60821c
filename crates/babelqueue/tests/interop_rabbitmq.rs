//! The Python SDK (`babelqueue` 1.24.0 from PyPI) as a live peer on RabbitMQ, both directions:
//! publishing, consuming, dead-lettering and redriving each other's messages.

mod runtime_support;

use babelqueue::MakeOptions;
use babelqueue::redrive::RedriveOptions;
use babelqueue::worker::Job;
use polyq_amqp::Properties;
use polyq_testkit::brokers::TestBroker;
use runtime_support::{IDLE, Scene, recorder};
use serde_json::{Value, json};

const URN: &str = "urn:babel:orders:created";
const TRACE: &str = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b";

/// Runs one command of tests/python/runtime_peer.py and returns its JSON answer.
async fn peer(command: &str, args: Value) -> Value {
    runtime_support::python_peer("runtime_peer.py", command, args).await
}

/// A scene on the test's RabbitMQ, and the URL the Python peer connects to.
async fn scene(broker: &'static TestBroker) -> (Scene, &'static str) {
    (Scene::new(broker).await, broker.url())
}

async fn python_publishes_rust_consumes(broker: &'static TestBroker) {
    let (scene, url) = scene(broker).await;
    let sent = peer(
        "publish",
        json!({"url": url, "queue": scene.name(), "urn": URN, "data": {"order_id": 1042, "note": "café ☕"},
               "trace_id": TRACE, "headers": {"traceparent": "00-py-01"}}),
    )
    .await;
    let (handler, mut jobs) = recorder();
    let report = scene
        .queue
        .worker()
        .handle(URN, handler)
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1, "{report:?}");
    let job = jobs.recv().await.unwrap();
    assert_eq!(
        job.data_as::<Value>().unwrap(),
        json!({"order_id": 1042, "note": "café ☕"})
    );
    assert_eq!(job.trace_id(), Some(TRACE));
    let meta = job.meta().unwrap();
    assert_eq!(meta.id(), sent["id"].as_str());
    assert_eq!(meta.lang(), Some("python"));
    assert_eq!(meta.queue(), Some(scene.name()));
    assert_eq!(job.header("traceparent"), Some("00-py-01"));
    assert_eq!(job.attempts(), 0);
}

async fn rust_publishes_python_consumes(broker: &'static TestBroker) {
    let (scene, url) = scene(broker).await;
    let sent = scene
        .queue
        .publish_with(
            URN,
            &json!({"order_id": 1042, "amount": 99.9}),
            MakeOptions::new()
                .trace_id(TRACE)
                .meta("ext", json!({"acme": {"tier": "gold"}})),
            &[("traceparent".to_owned(), "00-rs-01".to_owned())],
        )
        .await
        .unwrap();
    let answer = peer(
        "consume",
        json!({"url": url, "queue": scene.name(), "urns": [URN], "max": 1}),
    )
    .await;
    assert_eq!(answer["processed"], 1, "{answer}");
    let job = &answer["jobs"][0];
    assert_eq!(job["data"], json!({"order_id": 1042, "amount": 99.9}));
    assert_eq!(job["envelope"]["trace_id"], TRACE);
    assert_eq!(job["meta"]["id"], sent.meta().unwrap().id().unwrap());
    assert_eq!(job["meta"]["lang"], "rust");
    assert_eq!(job["meta"]["queue"], scene.name());
    assert_eq!(job["meta"]["ext"], json!({"acme": {"tier": "gold"}}));
    assert_eq!(job["headers"]["traceparent"], "00-rs-01");
    assert_eq!(job["headers"]["x-schema-version"], "1");
    assert_eq!(job["replay"], false);
}

async fn rust_dead_letters_python_redrives(broker: &'static TestBroker) {
    let (scene, url) = scene(broker).await;
    let sent = scene.queue.publish(URN, &json!({"n": 1})).await.unwrap();
    let report = scene
        .queue
        .worker()
        .max_attempts(1)
        .handle(URN, |_job: Job| async { Err("rust handler refused it") })
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 1, "{report:?}");

    let result = peer(
        "redrive",
        json!({"url": url, "dlq": scene.dlq(), "bypass": true}),
    )
    .await;
    assert_eq!(
        (&result["redriven"], &result["skipped"]),
        (&json!(1), &json!(0)),
        "{result}"
    );
    let item = &result["items"][0];
    assert_eq!(item["reason"], "failed");
    assert_eq!(item["to"], scene.name(), "Python reads our original_queue");
    assert_eq!(item["bypassed"], true);

    let (handler, mut jobs) = recorder();
    scene
        .queue
        .worker()
        .handle(URN, handler)
        .consume(1, IDLE)
        .await
        .unwrap();
    let job = jobs.recv().await.unwrap();
    assert!(
        job.is_replay(),
        "Python's bypass header reaches the Rust handler"
    );
    assert_eq!(job.attempts(), 0);
    assert!(job.envelope().dead_letter_raw().is_none());
    assert_eq!(job.meta(), sent.meta());
}

async fn python_dead_letters_rust_redrives(broker: &'static TestBroker) {
    let (scene, url) = scene(broker).await;
    let sent = peer(
        "publish",
        json!({"url": url, "queue": scene.name(), "urn": URN, "data": {"n": 2}, "trace_id": TRACE}),
    )
    .await;
    let failed = peer(
        "fail",
        json!({"url": url, "queue": scene.name(), "urn": URN}),
    )
    .await;
    assert_eq!(failed["processed"], 1, "{failed}");

    let report = scene
        .queue
        .redrive(&RedriveOptions::new().bypass(true))
        .await
        .unwrap();
    assert_eq!(report.redriven, 1, "{report:?}");
    let item = &report.items[0];
    assert_eq!(item.reason, "failed");
    assert_eq!(item.to, scene.name());
    assert_eq!(item.message_id, sent["id"].as_str().unwrap());
    assert_eq!(item.trace_id, TRACE);

    let answer = peer(
        "consume",
        json!({"url": url, "queue": scene.name(), "urns": [URN], "max": 1}),
    )
    .await;
    let job = &answer["jobs"][0];
    assert_eq!(
        job["replay"], true,
        "our bypass header reaches the Python handler: {answer}"
    );
    assert_eq!(job["envelope"]["attempts"], 0);
    assert!(job["envelope"].get("dead_letter").is_none(), "{answer}");
    assert_eq!(job["meta"]["lang"], "python");
    assert_eq!(job["data"], json!({"n": 2}));
}

async fn unknown_keys_survive_a_rust_retry_and_python_sees_them(broker: &'static TestBroker) {
    let (scene, url) = scene(broker).await;
    let body = format!(
        r#"{{"job":"{URN}","trace_id":"{TRACE}","data":{{"n":1}},"meta":{{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"{q}","lang":"go","schema_version":1,"created_at":1749132727000,"vendor_flag":{{}},"vendor_ctx":{{"k":[1,true]}}}},"attempts":0,"extra_top":"kept"}}"#,
        q = scene.name()
    );
    scene
        .publish_raw(scene.name(), Properties::default(), body)
        .await;
    let report = scene
        .queue
        .worker()
        .handle(URN, |_job: Job| async { Err("try again") })
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.retried, 1, "{report:?}");

    let answer = peer(
        "consume",
        json!({"url": url, "queue": scene.name(), "urns": [URN], "max": 1}),
    )
    .await;
    let envelope = &answer["jobs"][0]["envelope"];
    assert_eq!(envelope["attempts"], 1, "{answer}");
    assert_eq!(envelope["extra_top"], "kept");
    assert_eq!(envelope["meta"]["vendor_flag"], json!({}));
    assert_eq!(envelope["meta"]["vendor_ctx"], json!({"k": [1, true]}));
    assert_eq!(envelope["meta"]["lang"], "go");
    assert_eq!(answer["jobs"][0]["headers"]["x-attempts"], "1");
    // Nothing was dead-lettered on the way.
    assert!(scene.poll(&scene.dlq()).await.is_none());
}

polyq_testkit::both_brokers!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    rabbitmq only;
    python_publishes_rust_consumes,
    rust_publishes_python_consumes,
    rust_dead_letters_python_redrives,
    python_dead_letters_rust_redrives,
    unknown_keys_survive_a_rust_retry_and_python_sees_them,
);
