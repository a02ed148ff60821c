//! Metrics with the reference's names and tags, and a failed set-aside giving the delivery
//! back to the broker instead of losing it.

mod common;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use acemq::patterns::PatternError;
use acemq::patterns::pipeline::Pipeline;
use acemq::patterns::request_reply::{Requester, respond};
use acemq::retry::RetryPolicy;
use acemq::{Message, Outcome};
use common::{Env, LIMIT};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use polyq_amqp::QueueSpec;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// A metric name and its tags.
type Series = (String, Vec<(String, String)>);

/// Counter totals by name and tags. Snapshots reset the recorder's counters, so every test
/// reads through this one accumulator.
struct Counters {
    snapshotter: Snapshotter,
    totals: Mutex<HashMap<Series, u64>>,
}

fn counters() -> &'static Counters {
    static COUNTERS: OnceLock<Counters> = OnceLock::new();
    COUNTERS.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        Counters {
            snapshotter,
            totals: Mutex::new(HashMap::new()),
        }
    })
}

/// The counter `name` (for a histogram: its number of samples) whose tags include all of
/// `tags`, summed.
fn counter(name: &str, tags: &[(&str, &str)]) -> u64 {
    let counters = counters();
    let mut totals = counters.totals.lock().unwrap();
    for (key, _, _, value) in counters.snapshotter.snapshot().into_vec() {
        let n = match value {
            DebugValue::Counter(n) => n,
            DebugValue::Histogram(samples) => samples.len() as u64,
            DebugValue::Gauge(_) => continue,
        };
        {
            let key = key.key();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            *totals.entry((key.name().to_owned(), labels)).or_default() += n;
        }
    }
    totals
        .iter()
        .filter(|((n, labels), _)| {
            n == name
                && tags
                    .iter()
                    .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, total)| total)
        .sum()
}

async fn outcomes_are_counted_with_java_names(env: &'static Env) {
    counters();
    let queue = env.queue("metrics").await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer::<String>(queue.as_str())
        .retry(RetryPolicy::fixed(2, Duration::from_millis(5)).unwrap())
        .start(move |message: Message<String>| {
            let tx = tx.clone();
            async move {
                let outcome = match message.payload().as_str() {
                    "ok" => Outcome::Accept,
                    "fail" => Outcome::retry("no"),
                    "fatal" => Outcome::reject("never"),
                    _ => Outcome::park("unreadable"),
                };
                tx.send(()).unwrap();
                outcome
            }
        })
        .await
        .unwrap();
    let publisher = env.mq.publisher::<str>("", queue.as_str());
    for body in ["ok", "fail", "fatal", "park"] {
        publisher.send(body).await.unwrap();
    }
    // ok, fail (twice), fatal, park
    for _ in 0..5 {
        tokio::time::timeout(LIMIT, rx.recv()).await.unwrap();
    }
    env.take(&format!("{queue}.dlq"), 2).await;
    env.next_in(&format!("{queue}.parked")).await;
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");

    let q = queue.as_str();
    let outcome = |o| counter("acemq.consume.total", &[("queue", q), ("outcome", o)]);
    assert_eq!(
        [
            outcome("acked"),
            outcome("retried"),
            outcome("dead_lettered"),
            outcome("rejected"),
            outcome("parked")
        ],
        [1, 1, 1, 1, 1]
    );
    assert_eq!(counter("acemq.messages.retried.total", &[("queue", q)]), 1);
    assert_eq!(
        counter(
            "acemq.messages.dead.lettered.total",
            &[("queue", q), ("outcome", "dead_lettered")]
        ),
        2
    );
    assert_eq!(
        counter(
            "acemq.messages.dead.lettered.total",
            &[("queue", q), ("outcome", "parked")]
        ),
        1
    );
    assert_eq!(
        counter(
            "acemq.publish.total",
            &[
                ("routing.key", q),
                ("outcome", "confirmed"),
                ("exchange", "")
            ]
        ),
        4
    );

    let nowhere = polyq_testkit::unique_name("acemq.rt.nowhere");
    assert!(
        env.mq
            .publisher::<str>("", nowhere.as_str())
            .send("x")
            .await
            .is_err()
    );
    assert_eq!(
        counter(
            "acemq.publish.total",
            &[("routing.key", nowhere.as_str()), ("outcome", "unroutable")]
        ),
        1
    );
}
polyq_testkit::both_brokers!(outcomes_are_counted_with_java_names);

async fn a_missing_rung_is_counted(env: &'static Env) {
    counters();
    let queue = env.queue("rung-missing").await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer::<String>(queue.as_str())
        .retry(
            RetryPolicy::fixed(2, Duration::from_secs(1))
                .unwrap()
                .wait_in_broker_from(Duration::from_millis(500)),
        )
        .declare(false)
        .start(move |message: Message<String>| {
            let tx = tx.clone();
            async move {
                tx.send((message.envelope().attempt(), message.exchange().to_owned()))
                    .unwrap();
                if message.envelope().attempt() == 1 {
                    Outcome::retry("once")
                } else {
                    Outcome::Accept
                }
            }
        })
        .await
        .unwrap();
    env.mq
        .publisher::<str>("", queue.as_str())
        .send("x")
        .await
        .unwrap();
    assert_eq!(
        tokio::time::timeout(LIMIT, rx.recv())
            .await
            .unwrap()
            .unwrap()
            .0,
        1
    );
    let (attempt, exchange) = tokio::time::timeout(LIMIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (attempt, exchange.as_str()),
        (2, ""),
        "republished by the consumer, not expired home"
    );
    assert!(consumer.drain(LIMIT).await.is_clean());
    let rung = format!("{queue}.retry.1s");
    assert_eq!(
        counter(
            "acemq.retry.rung.missing",
            &[("queue", queue.as_str()), ("rung", rung.as_str())]
        ),
        1
    );
}
polyq_testkit::both_brokers!(a_missing_rung_is_counted);

async fn a_failed_set_aside_gives_the_delivery_back(env: &'static Env) {
    counters();
    let queue = env.queue("set-aside-failed").await;
    let dlq = format!("{queue}.dlq");
    let (tx, mut rx) = mpsc::unbounded_channel();
    // No declarations: Q.dlq does not exist, so the set-aside comes back unroutable.
    let consumer = env
        .mq
        .consumer::<String>(queue.as_str())
        .declare(false)
        .start(move |message: Message<String>| {
            let tx = tx.clone();
            async move {
                tx.send(message.redelivered()).unwrap();
                Outcome::reject("fatal")
            }
        })
        .await
        .unwrap();
    env.mq
        .publisher::<str>("", queue.as_str())
        .send("keep me")
        .await
        .unwrap();
    assert_eq!(
        tokio::time::timeout(LIMIT, rx.recv()).await.unwrap(),
        Some(false)
    );
    assert_eq!(
        tokio::time::timeout(LIMIT, rx.recv()).await.unwrap(),
        Some(true),
        "given back to the broker, which delivered it again"
    );
    env.declare(QueueSpec::new(dlq.clone())).await;
    let dead = env.next_in(&dlq).await;
    assert_eq!(&dead.body[..], br#""keep me""#);
    let report = consumer.drain(LIMIT).await;
    assert_eq!(report.interrupted, 0, "{report:?}");
    assert!(
        counter(
            "acemq.messages.set.aside.failed",
            &[("queue", queue.as_str()), ("target", dlq.as_str())]
        ) >= 1
    );
}
polyq_testkit::both_brokers!(a_failed_set_aside_gives_the_delivery_back);

/// The `transport` tag of `env`'s connection.
fn transport(env: &Env) -> &'static str {
    if env.url.starts_with("memory:") {
        "memory"
    } else {
        "rabbitmq"
    }
}

async fn requests_are_counted_with_java_names(env: &'static Env) {
    counters();
    let transport = transport(env);
    let queue = env.queue("metrics.rr").await;
    let silent = env.queue("metrics.rr.silent").await;
    let responder = respond(
        &env.mq,
        env.mq.consumer::<u32>(queue.as_str()),
        |m: Message<u32>| async move { Ok::<_, std::convert::Infallible>(*m.payload()) },
    )
    .await
    .unwrap();
    let requester = Requester::start(&env.mq).await.unwrap();
    assert_eq!(
        requester.request::<u32, u32>("", &queue, &3).await.unwrap(),
        3
    );
    let err = requester
        .request_within::<u32, u32>("", &silent, &4, Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(matches!(err, PatternError::Timeout { .. }), "{err}");

    let tags = |outcome| [("transport", transport), ("outcome", outcome)];
    assert_eq!(counter("acemq.request.total", &tags("answered")), 1);
    assert_eq!(counter("acemq.request.total", &tags("timed_out")), 1);
    assert_eq!(counter("acemq.request.duration", &tags("answered")), 1);
    assert_eq!(counter("acemq.request.duration", &tags("timed_out")), 1);
    // Requests go through a publisher: the publish meters see them.
    for key in [&queue, &silent] {
        assert_eq!(
            counter(
                "acemq.publish.total",
                &[("routing.key", key.as_str()), ("outcome", "confirmed")]
            ),
            1,
            "request to {key}"
        );
    }
    assert!(responder.drain(LIMIT).await.is_clean());
    requester.close().await.unwrap();
}
polyq_testkit::both_brokers!(requests_are_counted_with_java_names);

async fn pipeline_runs_are_counted_with_java_names(env: &'static Env) {
    counters();
    let name = polyq_testkit::unique_name("acemq.metrics.pl");
    let pipeline = Pipeline::new(&env.mq, &name, ["check", "store"]).unwrap();
    for step in pipeline.steps() {
        env.declare(QueueSpec::new(pipeline.queue_of(step))).await;
    }
    pipeline.declare().await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    // 0 ends the run at `check`; anything else goes through `store`, which completes it.
    let check = pipeline
        .step("check", |c| c, {
            let tx = tx.clone();
            move |m: Message<Value>| {
                let tx = tx.clone();
                async move {
                    if m.payload() == &json!(0) {
                        tx.send("ended early").unwrap();
                        return Ok::<_, std::convert::Infallible>(None);
                    }
                    Ok(Some(m.into_payload()))
                }
            }
        })
        .await
        .unwrap();
    let store = pipeline
        .step(
            "store",
            |c| c,
            move |_: Message<Value>| {
                let tx = tx.clone();
                async move {
                    tx.send("completed").unwrap();
                    Ok::<_, std::convert::Infallible>(Some(json!("stored")))
                }
            },
        )
        .await
        .unwrap();
    pipeline.start(&json!(0)).await.unwrap();
    pipeline.start(&json!(1)).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(
            tokio::time::timeout(LIMIT, rx.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    seen.sort_unstable();
    assert_eq!(seen, ["completed", "ended early"]);
    // A drain waits for the handler tasks, which count the run after the handler returned.
    assert!(check.drain(LIMIT).await.is_clean());
    assert!(store.drain(LIMIT).await.is_clean());

    let run = |step, outcome| {
        [
            ("pipeline", name.as_str()),
            ("step", step),
            ("outcome", outcome),
        ]
    };
    assert_eq!(
        counter("acemq.pipeline.run.total", &run("check", "ended_early")),
        1
    );
    assert_eq!(
        counter("acemq.pipeline.run.total", &run("store", "completed")),
        1
    );
    assert_eq!(
        counter("acemq.pipeline.run.total", &run("check", "completed")),
        0
    );
    assert_eq!(
        counter("acemq.pipeline.run.total", &run("store", "ended_early")),
        0
    );
    assert_eq!(
        counter("acemq.pipeline.run.duration", &run("check", "ended_early")),
        1
    );
    assert_eq!(
        counter("acemq.pipeline.run.duration", &run("store", "completed")),
        1
    );
    assert_eq!((pipeline.completed(), pipeline.ended_early()), (1, 1));
    env.client().delete_exchange(pipeline.name()).await.unwrap();
}
polyq_testkit::both_brokers!(pipeline_runs_are_counted_with_java_names);
