//! Poison (a body that does not decode into an envelope) is never dropped: under every
//! unknown-URN strategy, `delete` included, it goes to the dead-letter queue on its first
//! delivery as the poison record with its original bytes. On every binding.

#![cfg(feature = "redis")]

mod runtime_support;

use babelqueue::transport::Transport;
use babelqueue::worker::UnknownUrn;
use polyq_testkit::brokers::TestBroker;
use runtime_support::{Bound, IDLE};

/// Not JSON, and not UTF-8: the record keeps the first as text, the second in base64.
const POISON: [(&[u8], &str, Option<&str>); 2] = [
    (br#"{"job": 5"#, r#"{"job": 5"#, None),
    (b"\xff\xfe", "//4=", Some("base64")),
];

async fn poison_is_dead_lettered_whatever_the_strategy(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    let queue = bound.name().to_owned();
    let dlq = bound.transport().dead_letter_queue(&queue);
    for strategy in [
        UnknownUrn::Delete,
        UnknownUrn::Release,
        UnknownUrn::Fail,
        UnknownUrn::DeadLetter,
    ] {
        for (body, raw, encoding) in POISON {
            bound
                .transport()
                .publish(&queue, body.to_vec().into(), &[])
                .await
                .unwrap();
            let report = bound
                .queue
                .worker()
                .unknown_urn(strategy)
                .consume(1, IDLE)
                .await
                .unwrap();
            assert_eq!(
                (report.dead_lettered, report.deleted, report.released),
                (1, 0, 0),
                "{strategy:?}: {report:?}"
            );
            assert_eq!(bound.depth(&queue).await, 0, "{strategy:?}");

            let record = bound.take_and_ack(&dlq).await;
            let record: serde_json::Value = serde_json::from_slice(&record.body).unwrap();
            assert_eq!(record["raw"], raw, "{strategy:?}: the original bytes");
            assert_eq!(
                record.get("raw_encoding").and_then(|e| e.as_str()),
                encoding
            );
            assert_eq!(record["dead_letter"]["reason"], "poison", "{strategy:?}");
            assert_eq!(record["dead_letter"]["original_queue"], queue.as_str());
            bound.transport().unsubscribe(&dlq).await.unwrap();
        }
    }
    assert_eq!(bound.depth(&dlq).await, 0);
}

polyq_testkit::both_brokers!(
    on memory, rabbitmq, redis, laravel;
    poison_is_dead_lettered_whatever_the_strategy
);
