//! Declared pipelines: three steps end to end in one envelope, step queues declared the Java
//! way (quorum) on either side first, a run ending early, and a message replayed into a step's
//! queue resuming the run there.

mod common;

use acemq::patterns::pipeline::Pipeline;
use acemq::patterns::replay::Replay;
use acemq::retry::RetryPolicy;
use acemq::{Envelope, Message};
use common::{Env, LIMIT};
use polyq_amqp::{FieldValue, QueueSpec};
use serde_json::{Value, json};
use tokio::sync::mpsc;

type Infallible = std::convert::Infallible;

/// A step queue as Java's `Pipeline` declares it: durable, quorum, no other arguments.
fn java_step_queue(name: String) -> QueueSpec {
    QueueSpec::new(name).argument("x-queue-type", FieldValue::from("quorum"))
}

/// A pipeline with a unique name whose queues and exchange the test removes. The step queues
/// are declared the Java way first, as a Java service of the same pipeline would have.
async fn pipeline(env: &'static Env, steps: [&str; 3]) -> Pipeline {
    let name = polyq_testkit::unique_name("acemq.pl");
    let pipeline = Pipeline::new(&env.mq, &name, steps).unwrap();
    for step in steps {
        env.declare(java_step_queue(pipeline.queue_of(step))).await;
    }
    pipeline.declare().await.unwrap();
    pipeline
}

async fn remove_exchange(env: &Env, pipeline: &Pipeline) {
    env.client().delete_exchange(pipeline.name()).await.unwrap();
}

async fn three_steps_end_to_end(env: &'static Env) {
    let p = pipeline(env, ["parse", "double", "store"]).await;
    let parse = p
        .step(
            "parse",
            |c| c,
            |m: Message<Value>| async move {
                Ok::<_, Infallible>(Some(json!(m.payload().as_i64().unwrap_or(0) + 1)))
            },
        )
        .await
        .unwrap();
    let double = p
        .step(
            "double",
            |c| c.concurrency(2),
            |m: Message<Value>| async move {
                Ok::<_, Infallible>(Some(json!(m.payload().as_i64().unwrap_or(0) * 2)))
            },
        )
        .await
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let store = p
        .step(
            "store",
            |c| c,
            move |m: Message<Value>| {
                let tx = tx.clone();
                async move {
                    tx.send((m.envelope().clone(), m.payload().clone()))
                        .unwrap();
                    Ok::<_, Infallible>(Some(json!("stored")))
                }
            },
        )
        .await
        .unwrap();
    let started = p.start(&json!(7)).await.unwrap();
    let (seen, payload): (Envelope, Value) = tokio::time::timeout(LIMIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payload, json!(16));
    let slip = seen.route().expect("the route travels");
    assert_eq!(slip.steps(), ["parse", "double", "store"]);
    assert_eq!((slip.position(), slip.current()), (2, Some("store")));
    assert_eq!(slip.run_id(), started.route().unwrap().run_id());
    // One envelope for the whole run, as Java carries it from step to step.
    assert_eq!(seen.id(), started.id());
    assert_eq!(seen.first_seen(), started.first_seen());
    assert_eq!(seen.correlation_id(), started.correlation_id());
    assert_eq!(seen.causation_id(), None);
    assert_eq!(seen.message_type(), p.name());
    assert_eq!(
        started.message_type(),
        p.name(),
        "Java types a run by its pipeline"
    );
    for consumer in [parse, double, store] {
        assert!(consumer.drain(LIMIT).await.is_clean());
    }
    assert_eq!((p.completed(), p.ended_early()), (1, 0));
    remove_exchange(env, &p).await;
}
polyq_testkit::both_brokers!(three_steps_end_to_end);

async fn a_step_returning_nothing_ends_the_run_early(env: &'static Env) {
    let p = pipeline(env, ["check", "ship", "notify"]).await;
    let check = p
        .step(
            "check",
            |c| c,
            |m: Message<Value>| async move {
                Ok::<_, Infallible>((m.payload() != &json!(0)).then(|| m.payload().clone()))
            },
        )
        .await
        .unwrap();
    p.start(&json!(0)).await.unwrap();
    // One handler at a time: once the second run's message waits in `ship`, the first ended.
    p.start(&json!(1)).await.unwrap();
    let forwarded = env.next_in(&p.queue_of("ship")).await;
    assert_eq!(&forwarded.body[..], b"1");
    assert!(check.drain(LIMIT).await.is_clean());
    assert_eq!((p.completed(), p.ended_early()), (0, 1));
    assert_eq!(env.count(&p.queue_of("ship")).await, 0);
    remove_exchange(env, &p).await;
}
polyq_testkit::both_brokers!(a_step_returning_nothing_ends_the_run_early);

async fn a_replayed_message_resumes_at_its_step(env: &'static Env) {
    let p = pipeline(env, ["receive", "enrich", "send"]).await;
    let receive = p
        .step(
            "receive",
            |c| c,
            |m: Message<Value>| async move { Ok::<_, Infallible>(Some(m.payload().clone())) },
        )
        .await
        .unwrap();
    let (failed_tx, mut failed) = mpsc::unbounded_channel();
    let enrich = p
        .step(
            "enrich",
            |c| c,
            move |_m: Message<Value>| {
                let failed_tx = failed_tx.clone();
                async move {
                    failed_tx.send(()).unwrap();
                    Err::<Option<Value>, _>("the enrichment service is down")
                }
            },
        )
        .await
        .unwrap();
    let started = p.start(&json!("order-9")).await.unwrap();
    tokio::time::timeout(LIMIT, failed.recv()).await.unwrap();
    // Draining waits for the failed delivery to be set aside into `enrich`'s dead-letter queue.
    assert!(enrich.drain(LIMIT).await.is_clean());

    let (tx, mut rx) = mpsc::unbounded_channel();
    let enrich = p
        .step(
            "enrich",
            |c| c,
            move |m: Message<Value>| {
                let tx = tx.clone();
                async move {
                    tx.send(m.envelope().clone()).unwrap();
                    Ok::<_, Infallible>(Some(json!({"order": m.payload(), "enriched": true})))
                }
            },
        )
        .await
        .unwrap();
    let report = Replay::dead_letters(&env.mq, &p.queue_of("enrich"))
        .run()
        .await
        .unwrap();
    assert_eq!(report.moved, 1);
    let replayed = tokio::time::timeout(LIMIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(replayed.replay_count(), 1);
    assert_eq!(replayed.route().unwrap().current(), Some("enrich"));
    // `send` has no consumer: the resumed run's next hop waits there, same run.
    let next = env.next_in(&p.queue_of("send")).await;
    let envelope = Envelope::from_properties(&next.properties, &next.routing_key);
    let slip = envelope.route().unwrap();
    assert_eq!(
        (slip.current(), slip.run_id()),
        (Some("send"), started.route().unwrap().run_id())
    );
    assert_eq!(
        envelope.replay_count(),
        0,
        "replay stamps describe one delivery only"
    );
    assert_eq!(replayed.error().map(|e| !e.is_empty()), Some(true));
    assert_eq!(
        envelope.error(),
        None,
        "so does the error that set it aside"
    );
    assert_eq!(
        (envelope.id(), envelope.first_seen()),
        (started.id(), started.first_seen()),
        "the resumed run is still the message that started it"
    );
    for consumer in [receive, enrich] {
        assert!(consumer.drain(LIMIT).await.is_clean());
    }
    remove_exchange(env, &p).await;
}
polyq_testkit::both_brokers!(a_replayed_message_resumes_at_its_step);

async fn step_queues_match_a_java_declaration(env: &'static Env) {
    // polyq first, then a Java service declaring the same queues: no PRECONDITION_FAILED.
    let name = polyq_testkit::unique_name("acemq.pl");
    let p = Pipeline::new(&env.mq, &name, ["receive", "ship"]).unwrap();
    p.declare().await.unwrap();
    for step in p.steps() {
        env.declare(java_step_queue(p.queue_of(step))).await;
    }
    // A classic declaration is what no longer matches.
    let classic = env
        .client()
        .declare_queue(&QueueSpec::new(p.queue_of("ship")))
        .await
        .unwrap_err();
    assert!(classic.to_string().contains("x-queue-type"), "{classic}");
    remove_exchange(env, &p).await;
}
polyq_testkit::both_brokers!(step_queues_match_a_java_declaration);

async fn every_step_sees_attempt_one_of_the_same_message(env: &'static Env) {
    let p = pipeline(env, ["fetch", "price", "bill"]).await;
    // `fetch` succeeds on its second attempt; `price` must not inherit that attempt.
    let fetch = p
        .step(
            "fetch",
            |c| c.retry(RetryPolicy::fixed(2, std::time::Duration::from_millis(10)).unwrap()),
            |m: Message<Value>| async move {
                if m.envelope().attempt() == 1 {
                    return Err("the catalogue timed out");
                }
                Ok(Some(m.payload().clone()))
            },
        )
        .await
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let price = p
        .step(
            "price",
            |c| c,
            move |m: Message<Value>| {
                let tx = tx.clone();
                async move {
                    tx.send(m.envelope().clone()).unwrap();
                    Ok::<_, Infallible>(Some(json!(12)))
                }
            },
        )
        .await
        .unwrap();
    let started = p.start(&json!("sku-1")).await.unwrap();
    let seen = tokio::time::timeout(LIMIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (seen.id(), seen.first_seen(), seen.attempt()),
        (started.id(), started.first_seen(), 1)
    );
    // `bill` has no consumer: the hop waits there, still the same message.
    let next = env.next_in(&p.queue_of("bill")).await;
    let hop = Envelope::from_properties(&next.properties, &next.routing_key);
    assert_eq!((hop.id(), hop.attempt()), (started.id(), 1));
    assert_eq!(next.properties.message_id.as_deref(), Some(started.id()));
    for consumer in [fetch, price] {
        assert!(consumer.drain(LIMIT).await.is_clean());
    }
    remove_exchange(env, &p).await;
}
polyq_testkit::both_brokers!(every_step_sees_attempt_one_of_the_same_message);
