//! Metrics with the reference's names, tags and outcomes, and a set-aside that does not land
//! held and tried again (counted per miss) instead of lost or redelivered in a loop.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use acemq::patterns::PatternError;
use acemq::patterns::pipeline::Pipeline;
use acemq::patterns::request_reply::{Requester, respond};
use acemq::retry::RetryPolicy;
use acemq::{Consumer, Message, Outcome};
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

/// Every series seen so far, with its total (for a histogram: its number of samples).
fn totals() -> std::sync::MutexGuard<'static, HashMap<Series, u64>> {
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
}

/// Whether the series `labels` has every one of `tags`.
fn tagged(labels: &[(String, String)], tags: &[(&str, &str)]) -> bool {
    tags.iter()
        .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
}

/// The counter `name` (for a histogram: its number of samples) whose tags include all of
/// `tags`, summed.
fn counter(name: &str, tags: &[(&str, &str)]) -> u64 {
    totals()
        .iter()
        .filter(|((n, labels), _)| n == name && tagged(labels, tags))
        .map(|(_, total)| total)
        .sum()
}

/// The `outcome` tags registered on `name` for `queue`, counted or not.
fn outcomes_registered(name: &str, queue: &str) -> BTreeSet<String> {
    totals()
        .keys()
        .filter(|(n, labels)| n == name && tagged(labels, &[("queue", queue)]))
        .filter_map(|(_, labels)| labels.iter().find(|(k, _)| k == "outcome"))
        .map(|(_, outcome)| outcome.clone())
        .collect()
}

/// Waits until the counter reaches `at_least`. A metric has no event to await, so it is read
/// every few milliseconds, bounded by [`LIMIT`].
async fn until_counted(name: &str, tags: &[(&str, &str)], at_least: u64) {
    let reached = async {
        while counter(name, tags) < at_least {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(LIMIT, reached)
        .await
        .unwrap_or_else(|_| panic!("{name} {tags:?} stayed below {at_least}"));
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
        ],
        [1, 1, 1, 1]
    );
    // Exactly the reference's outcomes on its meters; the park is on polyq's own.
    let reference: BTreeSet<String> = ["acked", "retried", "dead_lettered", "rejected"]
        .map(str::to_owned)
        .into();
    for meter in ["acemq.consume.total", "acemq.consume.duration"] {
        assert_eq!(outcomes_registered(meter, q), reference, "{meter}");
    }
    for meter in ["polyq.acemq.consume.total", "polyq.acemq.consume.duration"] {
        assert_eq!(
            counter(meter, &[("queue", q), ("outcome", "parked")]),
            1,
            "{meter}"
        );
        assert_eq!(counter(meter, &[("queue", q), ("outcome", "failed")]), 0);
    }
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

/// A consumer of a new queue rejecting every message, started without declaring its topology
/// so that `Q.dlq` does not exist, after "keep me" was published, handled once and its
/// set-aside missed `misses` times. Returns the queue, the consumer and the `redelivered` flag
/// of every later delivery to the handler.
async fn rejecting_with_no_dlq(
    env: &'static Env,
    what: &str,
    misses: u64,
) -> (String, Consumer, mpsc::UnboundedReceiver<bool>) {
    counters();
    let queue = env.queue(what).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
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
    let dlq = format!("{queue}.dlq");
    let missed = [("queue", queue.as_str()), ("target", dlq.as_str())];
    until_counted("acemq.messages.set.aside.failed", &missed, misses).await;
    (queue, consumer, rx)
}

async fn a_set_aside_that_misses_is_held_not_redelivered(env: &'static Env) {
    let (queue, consumer, mut rx) = rejecting_with_no_dlq(env, "set-aside-missed", 3).await;
    // Given back, it would have come round once per miss; held, it was handled once.
    assert!(
        rx.try_recv().is_err(),
        "redelivered while its set-aside was missing"
    );
    let dlq = format!("{queue}.dlq");
    env.declare(QueueSpec::new(dlq.clone())).await;
    let dead = env.next_in(&dlq).await;
    assert_eq!(&dead.body[..], br#""keep me""#);
    assert_eq!(
        dead.properties.headers["x-acemq-error"].as_str(),
        Some("the handler reported an unprocessable message: Error: fatal")
    );
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
    assert!(rx.try_recv().is_err(), "handled once in all");
    assert_eq!(env.count(&queue).await, 0);
    let q = queue.as_str();
    assert_eq!(
        counter(
            "acemq.consume.total",
            &[("queue", q), ("outcome", "rejected")]
        ),
        1
    );
    assert_eq!(counter("polyq.acemq.consume.total", &[("queue", q)]), 0);
}
polyq_testkit::both_brokers!(a_set_aside_that_misses_is_held_not_redelivered);

async fn a_held_delivery_goes_back_at_the_drain_deadline(env: &'static Env) {
    let (queue, consumer, _) = rejecting_with_no_dlq(env, "set-aside-drained", 1).await;
    let report = consumer.drain(Duration::from_millis(200)).await;
    assert_eq!((report.completed, report.interrupted), (0, 1), "{report:?}");
    let back = env.next_in(&queue).await;
    assert_eq!(&back.body[..], br#""keep me""#);
    assert!(back.redelivered, "given back to the broker, not lost");
    let q = queue.as_str();
    assert_eq!(
        counter(
            "polyq.acemq.consume.total",
            &[("queue", q), ("outcome", "failed")]
        ),
        1
    );
    assert_eq!(counter("acemq.consume.total", &[("queue", q)]), 0);
}
polyq_testkit::both_brokers!(a_held_delivery_goes_back_at_the_drain_deadline);

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

/// A request with no reply address, and one whose reply queue is gone, are acknowledged
/// unanswered on purpose: each is counted with its reason.
async fn unanswerable_requests_are_counted_as_dropped(env: &'static Env) {
    counters();
    let queue = env.queue("metrics.rr.dropped").await;
    let responder = respond(
        &env.mq,
        env.mq.consumer::<u32>(queue.as_str()),
        |m: Message<u32>| async move { Ok::<_, std::convert::Infallible>(*m.payload()) },
    )
    .await
    .unwrap();
    let dropped = |reason| {
        counter(
            "polyq.acemq.messages.dropped.total",
            &[("queue", queue.as_str()), ("reason", reason)],
        )
    };
    let send = |reply_to: Option<&str>| {
        let properties = polyq_amqp::Properties {
            content_type: Some("application/json".to_owned()),
            reply_to: reply_to.map(str::to_owned),
            ..polyq_amqp::Properties::default()
        };
        polyq_amqp::OutgoingMessage::new("", queue.as_str(), properties, &b"1"[..])
    };
    env.client()
        .publish(send(None))
        .await
        .unwrap()
        .await
        .unwrap();
    until_counted(
        "polyq.acemq.messages.dropped.total",
        &[("queue", queue.as_str()), ("reason", "no_reply_address")],
        1,
    )
    .await;
    let gone = polyq_testkit::unique_name("acemq.rt.metrics.rr.gone");
    env.client()
        .publish(send(Some(&gone)))
        .await
        .unwrap()
        .await
        .unwrap();
    until_counted(
        "polyq.acemq.messages.dropped.total",
        &[("queue", queue.as_str()), ("reason", "reply_queue_gone")],
        1,
    )
    .await;
    assert_eq!(
        (dropped("no_reply_address"), dropped("reply_queue_gone")),
        (1, 1)
    );
    assert!(responder.drain(LIMIT).await.is_clean());
    assert_eq!(env.count(&queue).await, 0);
}
polyq_testkit::both_brokers!(unanswerable_requests_are_counted_as_dropped);

async fn pipeline_runs_are_counted_with_java_names(env: &'static Env) {
    counters();
    let name = polyq_testkit::unique_name("acemq.metrics.pl");
    let pipeline = Pipeline::new(&env.mq, &name, ["check", "store"]).unwrap();
    for step in pipeline.steps() {
        // As the pipeline declares them: quorum.
        let spec = QueueSpec::new(pipeline.queue_of(step))
            .argument("x-queue-type", polyq_amqp::FieldValue::from("quorum"));
        env.declare(spec).await;
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
