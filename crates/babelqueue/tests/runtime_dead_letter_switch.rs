//! Dead-lettering of exhausted retries can be turned off (`Worker::dead_letter(false)`, the
//! Python SDK's `dead_letter=False`): the message is then acknowledged and dropped after its last
//! attempt. The default dead-letters it. Poison is dead-lettered either way. On every binding.

#![cfg(feature = "redis")]

mod runtime_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use babelqueue::transport::Transport;
use babelqueue::worker::{AfterFailure, BoxError, JobContext, JobInterceptor, JobResult};
use polyq_testkit::brokers::TestBroker;
use runtime_support::{Bound, IDLE};
use serde_json::json;

const URN: &str = "urn:babel:orders:created";

/// Counts the failed jobs whose message was dropped.
struct CountDropped(Arc<AtomicU64>);

impl JobInterceptor for CountDropped {
    fn before_handle(&self, _: &JobContext) -> Result<(), BoxError> {
        Ok(())
    }

    fn after_handle(&self, _: &JobContext, result: &JobResult) {
        if matches!(
            result,
            JobResult::Failed {
                next: AfterFailure::Dropped,
                ..
            }
        ) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

async fn exhausted_retries_dropped_only_when_switched_off(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    let queue = bound.name().to_owned();
    let dlq = bound.transport().dead_letter_queue(&queue);
    let failing = |switch: Option<bool>| {
        let dropped = Arc::new(AtomicU64::new(0));
        let mut worker = bound
            .queue
            .worker()
            .max_attempts(2)
            .interceptor(CountDropped(dropped.clone()))
            .handle(URN, |_job| async { Err("refused") });
        if let Some(switch) = switch {
            worker = worker.dead_letter(switch);
        }
        (worker, dropped)
    };

    // Off: one retry, then acknowledged and dropped; nothing on the dead-letter queue.
    bound.queue.publish(URN, &json!({"n": 1})).await.unwrap();
    let (worker, dropped) = failing(Some(false));
    let report = worker.consume(2, IDLE).await.unwrap();
    assert_eq!(
        (report.retried, report.deleted, report.dead_lettered),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
    assert_eq!(bound.depth(&queue).await, 0);
    assert_eq!(bound.depth(&dlq).await, 0);

    // Poison is never dropped, switch or not.
    bound
        .transport()
        .publish(&queue, "not json".into(), &[])
        .await
        .unwrap();
    let (worker, _) = failing(Some(false));
    let report = worker.consume(1, IDLE).await.unwrap();
    assert_eq!((report.dead_lettered, report.deleted), (1, 0), "{report:?}");
    let poison = bound.take_and_ack(&dlq).await;
    assert!(String::from_utf8_lossy(&poison.body).contains("\"poison\""));
    bound.transport().unsubscribe(&dlq).await.unwrap();

    // Default: one retry, then the dead-letter queue.
    bound.queue.publish(URN, &json!({"n": 2})).await.unwrap();
    let (worker, dropped) = failing(None);
    let report = worker.consume(2, IDLE).await.unwrap();
    assert_eq!(
        (report.retried, report.dead_lettered, report.deleted),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    let dead = bound.take_and_ack(&dlq).await;
    let envelope = babelqueue::decode(&dead.body).unwrap().envelope;
    assert_eq!(envelope.attempts(), Some(2));
    assert_eq!(
        envelope
            .dead_letter()
            .and_then(|block| block.reason)
            .as_deref(),
        Some("failed")
    );
    bound.transport().unsubscribe(&dlq).await.unwrap();
}

polyq_testkit::both_brokers!(
    on memory, rabbitmq, redis, laravel;
    exhausted_retries_dropped_only_when_switched_off
);
