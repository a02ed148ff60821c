//! A job whose URN, `trace_id` or `meta.id` is longer than the 255 bytes an AMQP property
//! holds, as a producer on Redis or another SDK may write it: on RabbitMQ and `memory://` it is
//! retried with its attempts raised and dead-lettered like any other, the values carried in the
//! body as they came and the properties left out.

mod runtime_support;

use polyq_testkit::brokers::TestBroker;
use runtime_support::{IDLE, Scene, envelope_of};

async fn long_values_are_retried_and_dead_lettered(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    let urn = format!("urn:babel:orders:{}", "created.".repeat(40));
    let trace_id = format!("trace-{}", "t".repeat(300));
    let id = format!("id-{}", "i".repeat(300));
    let body = format!(
        r#"{{"job":"{urn}","trace_id":"{trace_id}","data":{{"z":1,"a":2.50}},"meta":{{"id":"{id}","lang":"go","schema_version":1}},"attempts":0}}"#
    );
    let properties = polyq_amqp::Properties::default().with_content_type("application/json");
    scene.publish_raw(scene.name(), properties, body).await;

    let report = scene
        .queue
        .worker()
        .max_attempts(2)
        .handle(&urn, |_job| async { Err("refused") })
        .consume(2, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.retried, report.dead_lettered, report.released),
        (1, 1, 0),
        "retried once, then dead-lettered, never released unchanged: {report:?}"
    );

    let dead = scene.take(&scene.dlq()).await;
    let envelope = envelope_of(&dead);
    assert_eq!(envelope.urn(), Some(urn.as_str()));
    assert_eq!(envelope.trace_id(), Some(trace_id.as_str()));
    assert_eq!(
        envelope.meta().and_then(|meta| meta.id()),
        Some(id.as_str())
    );
    assert_eq!(envelope.attempts(), Some(2));
    assert!(
        String::from_utf8_lossy(&dead.body).contains(r#""data":{"z":1,"a":2.50}"#),
        "data as it came"
    );
    let props = &dead.properties;
    assert_eq!(
        (&props.kind, &props.correlation_id, &props.message_id),
        (&None, &None, &None),
        "values that do not fit are left out of the properties"
    );
    scene.assert_empty(scene.name()).await;
}

polyq_testkit::both_brokers!(long_values_are_retried_and_dead_lettered);
