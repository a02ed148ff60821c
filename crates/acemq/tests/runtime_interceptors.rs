//! Interceptors: publish interceptors stamp or refuse; consume interceptors run before and
//! after the handler, the after half in reverse, and a failing `before` fails the delivery. A
//! panicking interceptor is contained: before the handler it fails the delivery (retry, then
//! `.dlq`), after it the next interceptor still runs, and before a publish it refuses it.

mod common;

use std::sync::{Arc, Mutex};

use acemq::interceptor::{BoxError, ConsumeInterceptor, PublishContext, PublishInterceptor};
use acemq::retry::RetryPolicy;
use acemq::{AceMq, Consumer, Envelope, Message, Outcome, RuntimeError};
use common::{Env, LIMIT};
use polyq_amqp::FieldValue;
use tokio::sync::mpsc;

struct Stamp;

impl PublishInterceptor for Stamp {
    fn before_publish(&self, publish: &mut PublishContext<'_>) -> Result<(), BoxError> {
        if publish.envelope().message_type() == "forbidden" {
            return Err("forbidden messages are not sent".into());
        }
        let stamped = publish
            .envelope()
            .to_builder()
            .header("x-stamped", publish.routing_key())
            .build()?;
        publish.set_envelope(stamped);
        Ok(())
    }
}

/// Logs its calls; refuses the first attempt or panics when told to.
struct Recorder {
    name: &'static str,
    fail_before: bool,
    panics: Panics,
    log: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    /// One that passes everything and never panics.
    fn new(name: &'static str, log: &Arc<Mutex<Vec<String>>>) -> Self {
        Self {
            name,
            fail_before: false,
            panics: Panics::Never,
            log: log.clone(),
        }
    }
}

/// Where a [`Recorder`] panics.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Panics {
    Never,
    Before,
    After,
}

impl ConsumeInterceptor for Recorder {
    fn before_handle(&self, _queue: &str, envelope: &Envelope) -> Result<(), BoxError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("before {} {}", self.name, envelope.attempt()));
        assert!(
            self.panics != Panics::Before,
            "{} refuses everything",
            self.name
        );
        if self.fail_before && envelope.attempt() == 1 {
            return Err("not on the first attempt".into());
        }
        Ok(())
    }

    fn after_handle(&self, _queue: &str, _envelope: &Envelope, outcome: &Outcome) {
        let what = if outcome.error().is_some() {
            "failed"
        } else {
            "ok"
        };
        self.log
            .lock()
            .unwrap()
            .push(format!("after {} {what}", self.name));
        assert!(
            self.panics != Panics::After,
            "{} cannot look back",
            self.name
        );
    }
}

async fn interceptors(env: &'static Env) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mq = AceMq::builder()
        .url(env.url.as_str())
        .publish_interceptor(Stamp)
        .consume_interceptor(Recorder::new("a", &log))
        .consume_interceptor(Recorder {
            fail_before: true,
            ..Recorder::new("b", &log)
        })
        .connect()
        .await
        .unwrap();
    let queue = env.queue("intercept").await;

    let refused = mq
        .publisher::<u32>("", queue.as_str())
        .send_with(&1, Envelope::of("forbidden").build().unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, RuntimeError::Refused { .. }),
        "{refused:?}"
    );
    assert!(
        refused
            .to_string()
            .contains("forbidden messages are not sent")
    );

    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = mq
        .consumer::<u32>(queue.as_str())
        .retry("fixed(2, 10ms)".parse().unwrap())
        .start(move |message: Message<u32>| {
            let tx = tx.clone();
            async move {
                tx.send(message.envelope().clone()).unwrap();
            }
        })
        .await
        .unwrap();
    mq.publisher::<u32>("", queue.as_str())
        .send(&2)
        .await
        .unwrap();
    let handled = tokio::time::timeout(LIMIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        handled.headers()["x-stamped"],
        FieldValue::from(queue.as_str())
    );
    assert_eq!(
        handled.attempt(),
        2,
        "the failing before_handle made attempt 1 a retry"
    );
    let drained = consumer.drain(LIMIT).await;
    // The handled delivery's after-half may finish before or during the drain; nothing else
    // was delivered, so nothing is given back and nothing is cut short.
    assert!(drained.is_clean(), "{drained:?}");
    assert_eq!(
        (drained.returned, drained.interrupted),
        (0, 0),
        "{drained:?}"
    );
    assert!(drained.completed <= 1, "{drained:?}");
    assert_eq!(
        *log.lock().unwrap(),
        [
            "before a 1",
            "before b 1",
            "after a failed",
            "before a 2",
            "before b 2",
            "after b ok",
            "after a ok"
        ]
    );
    for name in [format!("{queue}.dlq"), format!("{queue}.parked")] {
        mq.client()
            .inspect_queue(&name)
            .await
            .unwrap_or_else(|e| panic!("the consumer declared {name}: {e}"));
    }
    mq.close().await.unwrap();
}

polyq_testkit::both_brokers!(interceptors);

/// A connection to the test's broker with consume interceptors `a` and then `b`, which panics
/// where `panics` says, and a consumer of `queue` on it whose handler reports each payload.
struct PanickingConsumer {
    mq: AceMq,
    consumer: Consumer,
    handled: mpsc::UnboundedReceiver<u32>,
    log: Arc<Mutex<Vec<String>>>,
}

impl PanickingConsumer {
    async fn start(env: &Env, queue: &str, panics: Panics, retry: RetryPolicy) -> Self {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mq = AceMq::builder()
            .url(env.url.as_str())
            .consume_interceptor(Recorder::new("a", &log))
            .consume_interceptor(Recorder {
                panics,
                ..Recorder::new("b", &log)
            })
            .connect()
            .await
            .unwrap();
        let (handled, handled_rx) = mpsc::unbounded_channel();
        let consumer = mq
            .consumer::<u32>(queue)
            .retry(retry)
            .start(move |message: Message<u32>| {
                let handled = handled.clone();
                async move {
                    handled.send(*message.payload()).unwrap();
                }
            })
            .await
            .unwrap();
        Self {
            mq,
            consumer,
            handled: handled_rx,
            log,
        }
    }
}

async fn a_panicking_before_handle_retries_then_dead_letters(env: &'static Env) {
    let queue = env.queue("intercept-panic-before").await;
    let PanickingConsumer {
        mq,
        consumer,
        handled: mut handled_rx,
        log,
    } = PanickingConsumer::start(
        env,
        &queue,
        Panics::Before,
        "fixed(2, 10ms)".parse().unwrap(),
    )
    .await;
    mq.publisher::<u32>("", queue.as_str())
        .send(&3)
        .await
        .unwrap();

    let dead = env.next_in(&format!("{queue}.dlq")).await;
    assert_eq!(&dead.body[..], b"3");
    let dead = Envelope::from_properties(&dead.properties, &dead.routing_key);
    assert_eq!(
        dead.attempt(),
        2,
        "retried once before it was dead-lettered"
    );
    let error = dead.error().expect("the dead letter says why");
    assert!(
        error.starts_with("exhausted 2 attempts: ")
            && error.contains("runtime_interceptors::Recorder` panicked: b refuses everything"),
        "{error}"
    );
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
    assert!(
        handled_rx.try_recv().is_err(),
        "the handler never ran after a panicking before_handle"
    );
    assert_eq!(
        *log.lock().unwrap(),
        [
            "before a 1",
            "before b 1",
            "after a failed",
            "before a 2",
            "before b 2",
            "after a failed"
        ]
    );
    assert_eq!(env.count(&queue).await, 0);
    mq.close().await.unwrap();
}
polyq_testkit::both_brokers!(a_panicking_before_handle_retries_then_dead_letters);

async fn a_panicking_after_handle_is_ignored(env: &'static Env) {
    let queue = env.queue("intercept-panic-after").await;
    let PanickingConsumer {
        mq,
        consumer,
        handled: mut handled_rx,
        log,
    } = PanickingConsumer::start(env, &queue, Panics::After, RetryPolicy::none()).await;
    let publisher = mq.publisher::<u32>("", queue.as_str());
    publisher.send(&4).await.unwrap();
    publisher.send(&5).await.unwrap();
    for expected in [4, 5] {
        let payload = tokio::time::timeout(LIMIT, handled_rx.recv())
            .await
            .unwrap();
        assert_eq!(payload, Some(expected), "the task survived the panic");
    }
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(
        *log.lock().unwrap(),
        [
            "before a 1",
            "before b 1",
            "after b ok",
            "after a ok",
            "before a 1",
            "before b 1",
            "after b ok",
            "after a ok"
        ],
        "the interceptor before the panicking one still saw the outcome"
    );
    assert_eq!(
        (
            env.count(&queue).await,
            env.count(&format!("{queue}.dlq")).await
        ),
        (0, 0),
        "both messages were acknowledged"
    );
    mq.close().await.unwrap();
}
polyq_testkit::both_brokers!(a_panicking_after_handle_is_ignored);

struct PanicsOnPublish;

impl PublishInterceptor for PanicsOnPublish {
    fn before_publish(&self, _publish: &mut PublishContext<'_>) -> Result<(), BoxError> {
        panic!("no publishing today");
    }
}

async fn a_panicking_publish_interceptor_refuses_the_publish(env: &'static Env) {
    let queue = env.queue("intercept-panic-publish").await;
    let mq = AceMq::builder()
        .url(env.url.as_str())
        .publish_interceptor(PanicsOnPublish)
        .connect()
        .await
        .unwrap();
    let publisher = mq.publisher::<u32>("", queue.as_str());
    for _ in 0..2 {
        let refused = publisher.send(&6).await.unwrap_err();
        assert!(
            matches!(refused, RuntimeError::Refused { .. }),
            "{refused:?}"
        );
        let text = refused.to_string();
        assert!(
            text.contains("runtime_interceptors::PanicsOnPublish` panicked: no publishing today"),
            "{text}"
        );
    }
    assert_eq!(env.count(&queue).await, 0, "nothing reached the broker");
    mq.close().await.unwrap();
}
polyq_testkit::both_brokers!(a_panicking_publish_interceptor_refuses_the_publish);
