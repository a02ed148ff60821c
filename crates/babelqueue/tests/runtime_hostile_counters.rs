//! `attempts` counters out of range, as a careless or hostile producer writes them: a negative
//! one (down to i64::MIN) is counted from 0, so the job is retried `max_attempts - 1` times and
//! then dead-lettered, where the Python SDK counts on from it and would retry without end; a
//! huge one is past the limit at once and dead-lettered on its first failure, as in Python.

mod runtime_support;

use polyq_testkit::brokers::TestBroker;
use runtime_support::{IDLE, Scene, envelope_of};

const URN: &str = "urn:babel:orders:created";

async fn run_failing(scene: &Scene, attempts: i64) -> babelqueue::worker::WorkerReport {
    let body = format!(
        r#"{{"job":"{URN}","trace_id":"t-1","data":{{}},"meta":{{"id":"m-1","lang":"go","schema_version":1}},"attempts":{attempts}}}"#
    );
    let properties = polyq_amqp::Properties::default().with_content_type("application/json");
    scene.publish_raw(scene.name(), properties, body).await;
    // One more than a bounded run takes: a counter read as in range would leave one to spare.
    scene
        .queue
        .worker()
        .max_attempts(3)
        .handle(URN, |_job| async { Err("refused") })
        .consume(4, IDLE)
        .await
        .unwrap()
}

async fn negative_attempts_are_counted_from_zero(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    for negative in [i64::MIN, -5] {
        let report = run_failing(&scene, negative).await;
        assert_eq!(
            (report.received, report.retried, report.dead_lettered),
            (3, 2, 1),
            "attempts {negative}: {report:?}"
        );
        let dead = envelope_of(&scene.take(&scene.dlq()).await);
        assert_eq!(dead.attempts(), Some(3), "attempts {negative}");
    }
    scene.assert_empty(scene.name()).await;
}

async fn huge_attempts_are_exhausted_at_once(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    let report = run_failing(&scene, i64::MAX).await;
    assert_eq!(
        (report.received, report.retried, report.dead_lettered),
        (1, 0, 1),
        "{report:?}"
    );
    let dead = envelope_of(&scene.take(&scene.dlq()).await);
    assert_eq!(dead.attempts(), Some(i64::MAX), "saturated, never wrapped");
    scene.assert_empty(scene.name()).await;
}

polyq_testkit::both_brokers!(
    negative_attempts_are_counted_from_zero,
    huge_attempts_are_exhausted_at_once
);
