//! Interceptors: publish interceptors stamp or refuse; consume interceptors run before and
//! after the handler, the after half in reverse, and a failing `before` fails the delivery.

mod common;

use std::sync::{Arc, Mutex};

use acemq::interceptor::{BoxError, ConsumeInterceptor, PublishContext, PublishInterceptor};
use acemq::{AceMq, Envelope, Message, Outcome, RuntimeError};
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

struct Recorder {
    name: &'static str,
    fail_before: bool,
    log: Arc<Mutex<Vec<String>>>,
}

impl ConsumeInterceptor for Recorder {
    fn before_handle(&self, _queue: &str, envelope: &Envelope) -> Result<(), BoxError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("before {} {}", self.name, envelope.attempt()));
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
    }
}

async fn interceptors(env: &'static Env) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mq = AceMq::builder()
        .url(env.url.as_str())
        .publish_interceptor(Stamp)
        .consume_interceptor(Recorder {
            name: "a",
            fail_before: false,
            log: log.clone(),
        })
        .consume_interceptor(Recorder {
            name: "b",
            fail_before: true,
            log: log.clone(),
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
