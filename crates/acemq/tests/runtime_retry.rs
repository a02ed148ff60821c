//! The retry engine: a failing handler retried in the consumer, and a retry through a broker
//! rung (a missing rung is in `runtime_metrics`, with its counter).

mod common;

use std::time::Duration;

use acemq::Message;
use acemq::retry::RetryPolicy;
use acemq::topology;
use common::{Env, LIMIT};
use tokio::sync::mpsc;

/// Starts a consumer that fails the first `failures` attempts and reports every attempt.
async fn failing_consumer(
    env: &'static Env,
    queue: &str,
    policy: RetryPolicy,
    failures: u32,
) -> (
    acemq::Consumer,
    mpsc::UnboundedReceiver<(String, u32, String)>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer::<String>(queue)
        .retry(policy)
        .start(move |message: Message<String>| {
            let tx = tx.clone();
            async move {
                let attempt = message.envelope().attempt();
                tx.send((
                    message.envelope().id().to_owned(),
                    attempt,
                    message.exchange().to_owned(),
                ))
                .unwrap();
                if attempt <= failures {
                    return Err(format!("failure {attempt}"));
                }
                Ok(())
            }
        })
        .await
        .expect("consumer starts");
    (consumer, rx)
}

async fn a_failing_handler_is_retried_in_the_consumer(env: &'static Env) {
    let queue = env.queue("consumer-wait").await;
    let policy =
        RetryPolicy::exponential(4, Duration::from_millis(20), Duration::from_millis(80)).unwrap();
    let (consumer, mut attempts) = failing_consumer(env, &queue, policy.clone(), 2).await;
    let sent = env
        .mq
        .publisher::<str>("", queue.as_str())
        .send("work")
        .await
        .unwrap();
    for expected in 1..=3 {
        let (id, attempt, _) = tokio::time::timeout(LIMIT, attempts.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (id.as_str(), attempt),
            (sent.id(), expected),
            "same message, attempt raised"
        );
    }
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(env.count(&queue).await, 0);
    assert_eq!(
        env.count(&format!("{queue}.dlq")).await,
        0,
        "nothing dead-lettered"
    );
    // Every wait of this policy is below the broker-wait threshold, so it needs no rung, and
    // none of the rungs its delays would name was declared.
    assert!(topology::rungs(&queue, &policy).is_empty());
    let rung_names: Vec<String> = policy
        .schedule()
        .iter()
        .map(|&delay| topology::retry_queue(&queue, delay))
        .collect();
    assert_eq!(
        rung_names,
        [
            format!("{queue}.retry.20ms"),
            format!("{queue}.retry.40ms"),
            format!("{queue}.retry.80ms"),
        ]
    );
    for rung in rung_names {
        match env.client().inspect_queue(&rung).await {
            Err(polyq_amqp::Error::NotFound { .. }) => {}
            other => panic!("{rung} should not exist: {other:?}"),
        }
    }
    // The consumer did declare its dead-letter side: the look-ups above reached the broker.
    env.client()
        .inspect_queue(&topology::dead_letter_queue(&queue))
        .await
        .expect("the consumer declared the dead-letter queue");
}
polyq_testkit::both_brokers!(a_failing_handler_is_retried_in_the_consumer);

async fn a_retry_goes_through_the_broker_rung(env: &'static Env) {
    let queue = env.queue("rung").await;
    let policy = RetryPolicy::fixed(3, Duration::from_secs(1))
        .unwrap()
        .wait_in_broker_from(Duration::from_millis(500));
    let (consumer, mut attempts) = failing_consumer(env, &queue, policy, 1).await;
    let rung = format!("{queue}.retry.1s");
    assert_eq!(env.count(&rung).await, 0, "the consumer declared the rung");

    let sent = env
        .mq
        .publisher::<str>("", queue.as_str())
        .send("work")
        .await
        .unwrap();
    let (_, first, _) = tokio::time::timeout(LIMIT, attempts.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, 1);
    let (id, second, exchange) = tokio::time::timeout(LIMIT, attempts.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((id.as_str(), second), (sent.id(), 2));
    assert_eq!(
        exchange, "acemq.retry",
        "the second attempt expired home through acemq.retry"
    );
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(env.count(&rung).await, 0);
    assert_eq!(env.count(&format!("{queue}.dlq")).await, 0);
}
polyq_testkit::both_brokers!(a_retry_goes_through_the_broker_rung);

/// Waits (up to [`LIMIT`]) until `queue` holds `count` ready messages.
async fn until_count(env: &Env, queue: &str, count: u32) {
    let reached = tokio::time::timeout(LIMIT, async {
        while env.count(queue).await != count {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        reached.is_ok(),
        "{queue} did not come to hold {count} messages"
    );
}

/// The delay hop is the one step the broker does not confirm: a retry waiting on a rung when its
/// source queue is deleted expires into `acemq.retry`, finds no binding, and the broker drops it
/// without a trace (no dead-letter, no return, no counter). Measured here so the documentation
/// (docs/RELIABILITY.md, "Delay hops") states what happens, and `polyq doctor` reports the route
/// that leads nowhere.
async fn a_retry_waiting_on_a_rung_is_dropped_when_its_source_queue_is_gone(env: &'static Env) {
    let queue = env.queue("rung-orphan").await;
    let policy = RetryPolicy::fixed(3, Duration::from_secs(1))
        .unwrap()
        .wait_in_broker_from(Duration::from_millis(500));
    let (consumer, mut attempts) = failing_consumer(env, &queue, policy, 1).await;
    let rung = format!("{queue}.retry.1s");
    env.mq
        .publisher::<str>("", queue.as_str())
        .send("work")
        .await
        .unwrap();
    let (_, first, _) = tokio::time::timeout(LIMIT, attempts.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, 1);
    // The drain waits for the failed attempt's retry to be confirmed onto the rung.
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(env.count(&rung).await, 1, "the retry waits on the rung");

    env.client().delete_queue(&queue).await.unwrap();
    until_count(env, &rung, 0).await;
    env.declare(polyq_amqp::QueueSpec::new(queue.clone())).await;
    for lost in [
        queue.clone(),
        format!("{queue}.dlq"),
        format!("{queue}.parked"),
        rung,
    ] {
        assert_eq!(env.count(&lost).await, 0, "{lost} holds nothing: dropped");
    }
}
polyq_testkit::both_brokers!(a_retry_waiting_on_a_rung_is_dropped_when_its_source_queue_is_gone);

/// A consumer whose rungs exist but whose source queue does not (deleted while its rungs stayed)
/// refuses to start with a typed error naming the rung, instead of starting on a route that
/// drops every retry that expires there.
async fn a_consumer_refuses_to_start_when_its_rungs_lead_nowhere(env: &'static Env) {
    let queue = env.queue("rung-nowhere").await;
    let policy = RetryPolicy::fixed(3, Duration::from_secs(1))
        .unwrap()
        .wait_in_broker_from(Duration::from_millis(500));
    // A first consumer declares its side of the topology: the rung, acemq.retry, the binding.
    let (consumer, _) = failing_consumer(env, &queue, policy.clone(), 0).await;
    assert!(consumer.drain(LIMIT).await.is_clean());
    env.client().delete_queue(&queue).await.unwrap();

    let refused = env
        .mq
        .consumer::<String>(queue.as_str())
        .retry(policy)
        .declare(false)
        .start(|_message: Message<String>| async {})
        .await
        .expect_err("the consumer does not start");
    assert!(refused.is_rung_route_broken(), "{refused}");
    let text = refused.to_string();
    assert!(text.contains(&format!("{queue}.retry.1s")), "{text}");
    assert!(text.contains("source queue"), "{text}");
}
polyq_testkit::both_brokers!(a_consumer_refuses_to_start_when_its_rungs_lead_nowhere);

/// A consumer whose rungs exist but whose `acemq.retry` exchange does not refuses to start: the
/// queue is there to subscribe to, so without the check it would start and every retry expiring
/// on a rung would be dropped. On the embedded broker only: on RabbitMQ `acemq.retry` is shared
/// by every test running beside this one.
async fn a_consumer_refuses_to_start_when_acemq_retry_is_gone(env: &'static Env) {
    let queue = env.queue("rung-no-exchange").await;
    let policy = RetryPolicy::fixed(3, Duration::from_secs(1))
        .unwrap()
        .wait_in_broker_from(Duration::from_millis(500));
    let (consumer, _) = failing_consumer(env, &queue, policy.clone(), 0).await;
    assert!(consumer.drain(LIMIT).await.is_clean());
    env.client()
        .delete_exchange(topology::RETRY_EXCHANGE)
        .await
        .unwrap();

    let refused = env
        .mq
        .consumer::<String>(queue.as_str())
        .retry(policy)
        .declare(false)
        .start(|_message: Message<String>| async {})
        .await
        .expect_err("the consumer does not start");
    assert!(refused.is_rung_route_broken(), "{refused}");
    assert!(refused.to_string().contains("acemq.retry"), "{refused}");
}
polyq_testkit::both_brokers!(on memory; a_consumer_refuses_to_start_when_acemq_retry_is_gone);
