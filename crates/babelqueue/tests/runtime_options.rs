//! A worker refuses options it cannot run with (a `max_attempts` or `concurrency` of 0, a
//! backoff multiplier below 1) before it takes anything, with an error naming the option, the
//! value and what is allowed, instead of correcting them. On every binding.

#![cfg(feature = "redis")]

mod runtime_support;

use std::time::Duration;

use babelqueue::Error;
use babelqueue::worker::Backoff;
use polyq_testkit::brokers::TestBroker;
use runtime_support::{Bound, IDLE};
use serde_json::json;

const URN: &str = "urn:babel:orders:created";

async fn invalid_worker_options_are_refused(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    let queue = bound.name().to_owned();
    bound.queue.publish(URN, &json!({"n": 1})).await.unwrap();
    let worker = || {
        bound
            .queue
            .worker()
            .handle(URN, |_job| async { Ok::<_, String>(()) })
    };
    let refusals = [
        (worker().max_attempts(0), "max_attempts", "was 0;"),
        (worker().concurrency(0), "concurrency", "was 0;"),
        (
            worker().backoff(Backoff::exponential(Duration::from_millis(10), 0.5)),
            "backoff multiplier",
            "was 0.5;",
        ),
        (
            worker().backoff(Backoff::exponential(Duration::from_millis(10), f64::NAN)),
            "backoff multiplier",
            "was NaN;",
        ),
    ];
    for (worker, named, value) in refusals {
        match worker.consume(1, IDLE).await {
            Err(Error::InvalidOption { option, reason }) => {
                assert_eq!(option, named);
                assert!(reason.starts_with(value), "{reason}");
                assert!(reason.contains("at least 1"), "{reason}");
            }
            other => panic!("{named}: expected it refused, got {other:?}"),
        }
        assert_eq!(bound.depth(&queue).await, 1, "{named}: nothing is taken");
    }

    // The smallest allowed values run.
    let report = worker()
        .max_attempts(1)
        .concurrency(1)
        .backoff(Backoff::exponential(Duration::from_millis(10), 1.0))
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1, "{report:?}");
}

polyq_testkit::both_brokers!(
    on memory, rabbitmq, redis, laravel;
    invalid_worker_options_are_refused
);
