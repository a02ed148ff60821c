//! Replay from `Q.dlq` and `Q.parked`: moved back by name, stamped, resumed by a consumer that
//! sees the stamps; filter (hold and continue), limit, dry run; a missing destination loses
//! nothing.

mod common;

use acemq::patterns::PatternError;
use acemq::patterns::replay::{Replay, ReplayReport, Stopped};
use acemq::time::{Duration as TimeDuration, OffsetDateTime};
use acemq::{Envelope, Message};
use common::{Env, LIMIT};
use polyq_amqp::{FieldValue, QueueSpec};
use tokio::sync::mpsc;

/// Puts a message into `target` as the engine sets one aside: attempt 3, an error, an old
/// first-seen time and an application header.
async fn set_aside(env: &Env, target: &str, n: i64) -> Envelope {
    let envelope = Envelope::of("order.placed")
        .attempt(3)
        .error("exhausted 3 attempts: Error: boom")
        .first_seen(OffsetDateTime::now_utc() - TimeDuration::hours(2))
        .header("x-n", n)
        .build()
        .unwrap();
    env.mq
        .publisher::<i64>("", target)
        .send_with(&n, envelope)
        .await
        .unwrap()
}

/// Messages in a set-aside queue, counted by a dry run: messages given back with a `nack` are
/// only counted by the broker once it has processed the `nack`, and a dry run's reads come
/// after it on the same channel, where a passive declare on another channel may not.
async fn remaining(env: &Env, source: &str) -> u64 {
    Replay::from_queue(&env.mq, source)
        .unwrap()
        .dry_run(true)
        .run()
        .await
        .unwrap()
        .moved
}

async fn replay_moves_stamps_and_resumes(env: &'static Env) {
    let queue = env.queue("replay").await;
    let dlq = format!("{queue}.dlq");
    env.declare(QueueSpec::new(dlq.clone())).await;
    let sent = set_aside(env, &dlq, 7).await;

    let replay = Replay::dead_letters(&env.mq, &queue);
    assert_eq!(replay.pending().await.unwrap(), 1);
    let before = OffsetDateTime::now_utc();
    let report = replay.run().await.unwrap();
    assert_eq!(
        report,
        ReplayReport {
            moved: 1,
            skipped: 0,
            stopped: Some(Stopped::Drained)
        }
    );
    assert_eq!(env.count(&dlq).await, 0);

    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consume(queue.as_str(), move |message: Message<i64>| {
            let tx = tx.clone();
            async move {
                tx.send((message.envelope().clone(), *message.payload()))
                    .unwrap();
            }
        })
        .await
        .unwrap();
    let (seen, payload) = tokio::time::timeout(LIMIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payload, 7);
    assert_eq!(seen.id(), sent.id());
    assert_eq!(seen.attempt(), 1);
    assert_eq!(seen.first_seen(), sent.first_seen());
    assert_eq!(
        seen.error(),
        sent.error(),
        "the error is kept, as Java does"
    );
    assert_eq!(seen.replayed_from(), Some(dlq.as_str()));
    assert_eq!(seen.replay_count(), 1);
    let at = seen.replayed_at().expect("replayed-at stamped");
    assert!(at >= before - TimeDuration::seconds(1) && at <= OffsetDateTime::now_utc());
    // The same facts as ordinary headers, for code that reads headers only.
    assert_eq!(
        seen.headers()["acemq-replayed-from"],
        FieldValue::from(dlq.as_str())
    );
    assert_eq!(seen.headers()["acemq-replay-count"], FieldValue::I32(1));
    let stamp = seen.headers()["acemq-replayed-at"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        stamp.ends_with('Z') && stamp.len() == 24,
        "RFC 3339 ms Z: {stamp}"
    );
    assert_eq!(seen.headers()["x-n"], FieldValue::I64(7));
    assert!(consumer.drain(LIMIT).await.is_clean());
}
polyq_testkit::both_brokers!(replay_moves_stamps_and_resumes);

async fn a_second_replay_counts_two(env: &'static Env) {
    let queue = env.queue("replay2").await;
    let parked = format!("{queue}.parked");
    env.declare(QueueSpec::new(parked.clone())).await;
    set_aside(env, &parked, 1).await;
    Replay::parked(&env.mq, &queue).run().await.unwrap();
    // Back into the parking queue as it arrived, then replayed again.
    let first = env.next_in(&queue).await;
    env.client()
        .publish(polyq_amqp::OutgoingMessage::new(
            "",
            parked.as_str(),
            first.properties.clone(),
            first.body.clone(),
        ))
        .await
        .unwrap()
        .await
        .unwrap();
    let report = Replay::from_queue(&env.mq, &parked)
        .unwrap()
        .run()
        .await
        .unwrap();
    assert_eq!(report.moved, 1);
    let second = env.next_in(&queue).await;
    let envelope = Envelope::from_properties(&second.properties, &second.routing_key);
    assert_eq!(envelope.replay_count(), 2);
    assert_eq!(envelope.replayed_from(), Some(parked.as_str()));
    assert_eq!(second.exchange, "", "back through the default exchange");
    assert_eq!(second.routing_key, queue);
}
polyq_testkit::both_brokers!(a_second_replay_counts_two);

async fn filter_holds_and_continues_limit_and_dry_run(env: &'static Env) {
    let queue = env.queue("filter").await;
    let dlq = format!("{queue}.dlq");
    env.declare(QueueSpec::new(dlq.clone())).await;
    for n in 0..6 {
        set_aside(env, &dlq, n).await;
    }

    let dry = Replay::dead_letters(&env.mq, &queue)
        .dry_run(true)
        .batch_size(4)
        .run()
        .await
        .unwrap();
    assert_eq!((dry.moved, dry.skipped), (6, 0));
    assert_eq!(env.count(&queue).await, 0, "a dry run publishes nothing");

    let even = |envelope: &Envelope| envelope.headers()["x-n"].as_i64().unwrap_or(1) % 2 == 0;
    let mut progress = Vec::new();
    let filtered = Replay::dead_letters(&env.mq, &queue)
        .filter(even)
        .batch_size(2)
        .run_with_progress(|report| progress.push(*report))
        .await
        .unwrap();
    // Declined messages do not stop the pass: all three even ones moved.
    assert_eq!((filtered.moved, filtered.skipped), (3, 3));
    assert_eq!(filtered.stopped, Some(Stopped::Drained));
    assert_eq!(progress.last(), Some(&filtered));
    assert_eq!(
        progress.len(),
        7,
        "one report per message and one at the end"
    );
    assert_eq!(env.count(&queue).await, 3);
    let moved: Vec<i64> = env
        .take(&queue, 3)
        .await
        .iter()
        .map(|d| {
            Envelope::from_properties(&d.properties, &d.routing_key).headers()["x-n"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(moved, [0, 2, 4]);

    let limited = Replay::dead_letters(&env.mq, &queue)
        .limit(2)
        .run()
        .await
        .unwrap();
    assert_eq!((limited.moved, limited.stopped), (2, Some(Stopped::Limit)));
    assert_eq!(env.count(&queue).await, 2);
    assert_eq!(remaining(env, &dlq).await, 1);
}
polyq_testkit::both_brokers!(filter_holds_and_continues_limit_and_dry_run);

async fn a_missing_destination_loses_nothing(env: &'static Env) {
    let queue = polyq_testkit::unique_name("acemq.rt.gone");
    let dlq = format!("{queue}.dlq");
    env.declare(QueueSpec::new(dlq.clone())).await;
    set_aside(env, &dlq, 1).await;
    let err = Replay::dead_letters(&env.mq, &queue)
        .run()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, PatternError::ReplayPublish { destination, .. } if *destination == queue),
        "{err}"
    );
    let chain = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ");
    assert!(chain.contains("does not exist"), "{chain}");
    assert_eq!(remaining(env, &dlq).await, 1);
}
polyq_testkit::both_brokers!(a_missing_destination_loses_nothing);

#[test]
fn only_set_aside_queues_are_replayed() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mq = acemq::AceMq::connect("memory://replay-names")
            .await
            .unwrap();
        let err = Replay::from_queue(&mq, "orders").unwrap_err();
        assert!(matches!(err, PatternError::NotASetAsideQueue { .. }));
        assert!(Replay::from_queue(&mq, ".dlq").is_err());
        assert_eq!(
            Replay::from_queue(&mq, "orders.parked")
                .unwrap()
                .destination(),
            "orders"
        );
    });
}
