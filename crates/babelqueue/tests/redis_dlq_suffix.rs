//! `RedisOptions::dlq_suffix` names the dead-letter queue everywhere the runtime derives it (the
//! Python SDK's `dead_letter_suffix`): the worker writes to `<queue><suffix>`, and
//! `BabelQueue::redrive` reads from it. On both Redis layouts.

#![cfg(feature = "redis")]

mod runtime_support;

use babelqueue::redrive::RedriveOptions;
use babelqueue::transport::Transport;
use babelqueue::worker::Job;
use polyq_testkit::brokers::TestBroker;
use runtime_support::{Bound, IDLE};
use serde_json::json;

const URN: &str = "urn:babel:orders:created";

async fn worker_and_redrive_follow_the_suffix(broker: &'static TestBroker) {
    let bound = Bound::with(broker, Bound::dlq_suffix(":dead")).await;
    let queue = bound.name().to_owned();
    let dlq = format!("{queue}:dead");
    assert_eq!(bound.transport().dead_letter_queue(&queue), dlq);
    assert_eq!(bound.queue.worker().dead_letter_queue_name(), dlq);

    // The worker dead-letters to `<queue>:dead`, never to `<queue>.dlq`.
    bound.queue.publish(URN, &json!({"n": 1})).await.unwrap();
    let report = bound
        .queue
        .worker()
        .max_attempts(1)
        .handle(URN, |_job| async { Err("refused") })
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    assert_eq!(bound.depth(&format!("{queue}.dlq")).await, 0);
    assert_eq!(bound.depth(&dlq).await, 1);

    // The redrive takes it from there back to the queue.
    let done = bound
        .queue
        .redrive(&RedriveOptions::new().wait(IDLE))
        .await
        .unwrap();
    assert_eq!(done.redriven, 1, "{done:?}");
    assert_eq!(done.items[0].from, dlq);
    assert_eq!(bound.depth(&dlq).await, 0);
    let report = bound
        .queue
        .worker()
        .handle(URN, |job: Job| async move {
            if job.attempts() == 0 && job.envelope().dead_letter_raw().is_none() {
                Ok(())
            } else {
                Err("not reset by the redrive")
            }
        })
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1, "{report:?}");
}

polyq_testkit::both_brokers!(on redis, laravel; worker_and_redrive_follow_the_suffix);
