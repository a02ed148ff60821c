//! Publishing: a typed round trip with the envelope stamped, unroutable messages refused,
//! `send_all` reporting a partial failure, publish interceptors, and `send_async` held back
//! at `max_outstanding_confirms`.

mod common;

use acemq::{AceMq, DEFAULT_MAX_OUTSTANDING_CONFIRMS, Envelope, Message, RuntimeError};
use common::{Env, LIMIT};
use polyq_amqp::{FieldValue, QueueSpec};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
    item: String,
}

async fn typed_round_trip(env: &'static Env) {
    let queue = env.queue("round-trip").await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consume(queue.as_str(), move |message: Message<Order>| {
            let tx = tx.clone();
            async move {
                tx.send((
                    message.payload().clone(),
                    message.envelope().clone(),
                    message.redelivered(),
                ))
                .unwrap();
            }
        })
        .await
        .expect("consumer starts");
    let order = Order {
        id: 7,
        item: "book".into(),
    };
    let chosen = Envelope::of("order.placed")
        .header("x-tenant", "acme")
        .build()
        .unwrap();
    let sent = env
        .mq
        .publisher::<Order>("", queue.as_str())
        .send_with(&order, chosen.clone())
        .await
        .expect("confirmed");
    assert_eq!(sent.id(), chosen.id());
    assert_eq!(sent.origin(), Some(env.mq.origin()));
    assert!(env.mq.origin().starts_with("acemq-runtime-test@"));

    let (payload, received, redelivered) = tokio::time::timeout(LIMIT, rx.recv())
        .await
        .expect("handled in time")
        .unwrap();
    assert_eq!(payload, order);
    assert_eq!(received, sent);
    assert_eq!(received.message_type(), "order.placed");
    assert_eq!(received.headers()["x-tenant"], FieldValue::from("acme"));
    assert!(!redelivered);

    // Without an envelope, the type is the routing key.
    let plain = env
        .mq
        .publisher::<Order>("", queue.as_str())
        .send(&order)
        .await
        .unwrap();
    assert_eq!(plain.message_type(), queue);
    let (_, received, _) = tokio::time::timeout(LIMIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(received.id(), plain.id());

    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(env.count(&queue).await, 0, "both messages acknowledged");
}
polyq_testkit::both_brokers!(typed_round_trip);

async fn wire_properties_are_the_contract(env: &'static Env) {
    let queue = env.queue("wire").await;
    let sent = env
        .mq
        .publisher::<Order>("", queue.as_str())
        .with_priority(3)
        .expiring_after(std::time::Duration::from_secs(60))
        .send(&Order {
            id: 1,
            item: "pen".into(),
        })
        .await
        .unwrap();
    let delivery = env.next_in(&queue).await;
    let p = &delivery.properties;
    assert_eq!(p.content_type.as_deref(), Some("application/json"));
    assert_eq!(p.delivery_mode, Some(2));
    assert_eq!(p.priority, Some(3));
    assert_eq!(p.expiration.as_deref(), Some("60000"));
    assert_eq!(p.message_id.as_deref(), Some(sent.id()));
    assert_eq!(p.headers["x-acemq-attempt"], FieldValue::I32(1));
    assert_eq!(
        p.headers["x-acemq-origin"],
        FieldValue::from(env.mq.origin())
    );
    assert_eq!(&delivery.body[..], br#"{"id":1,"item":"pen"}"#);
}
polyq_testkit::both_brokers!(wire_properties_are_the_contract);

async fn unroutable_publish_is_an_error(env: &'static Env) {
    let key = polyq_testkit::unique_name("acemq.rt.nobody");
    let publisher = env.mq.publisher::<Order>("", key.as_str());
    let order = Order {
        id: 1,
        item: "lost".into(),
    };
    let error = publisher.send(&order).await.unwrap_err();
    assert!(
        matches!(error, RuntimeError::Unroutable { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("exchange ``") && text.contains(&format!("routing key `{key}`")),
        "{text}"
    );

    publisher
        .allow_unroutable()
        .send(&order)
        .await
        .expect("an unroutable message may be dropped when allowed");
}
polyq_testkit::both_brokers!(unroutable_publish_is_an_error);

async fn send_all_reports_partial_failure(env: &'static Env) {
    let name = polyq_testkit::unique_name("acemq.rt.bounded");
    env.declare(
        QueueSpec::new(name.clone())
            .argument("x-max-length", FieldValue::I32(2))
            .argument("x-overflow", FieldValue::from("reject-publish")),
    )
    .await;
    let publisher = env.mq.publisher::<u32>("", name.as_str());
    let error = publisher.send_all([1, 2, 3, 4, 5]).await.unwrap_err();
    match &error {
        RuntimeError::Batch {
            total,
            confirmed,
            failed,
            first,
        } => {
            assert_eq!((*total, *confirmed, *failed), (5, 2, 3));
            assert!(matches!(**first, RuntimeError::Nacked { .. }), "{first:?}");
        }
        other => panic!("expected a batch error, got {other:?}"),
    }
    assert!(
        error
            .to_string()
            .starts_with("2 of 5 messages confirmed, 3 failed"),
        "{error}"
    );
    let bodies: Vec<_> = env
        .take(&name, 2)
        .await
        .into_iter()
        .map(|d| d.body)
        .collect();
    assert_eq!(bodies, [&b"1"[..], &b"2"[..]]);

    let sent = publisher.send_all([6, 7]).await.expect("room again");
    assert_eq!(sent.len(), 2);
}
polyq_testkit::both_brokers!(send_all_reports_partial_failure);

/// With `cap` confirms outstanding (sent with `send_async`, not yet awaited), the next
/// `send_async` does not hand its message to the broker until one of them is settled.
async fn send_async_waits_at_the_cap(env: &Env, mq: &AceMq, queue: &str, cap: usize) {
    let publisher = mq.publisher::<usize>("", queue);
    let mut outstanding = Vec::with_capacity(cap);
    for n in 0..cap {
        outstanding.push(publisher.send_async(&n).await.expect("below the cap"));
    }
    let beyond = publisher.send_async(&cap);
    tokio::pin!(beyond);
    // Until the broker holds every message sent so far, the one beyond the cap must not get
    // through; once it does, it still must not.
    let held = u32::try_from(cap).unwrap();
    tokio::time::timeout(LIMIT, async {
        loop {
            tokio::select! {
                biased;
                _ = &mut beyond => panic!("send_async returned with {cap} confirms outstanding"),
                count = env.count(queue) => if count == held { break },
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{cap} messages did not all reach {queue}"));
    assert!(futures_util::poll!(&mut beyond).is_pending());
    assert_eq!(
        env.count(queue).await,
        held,
        "nothing beyond the cap was published"
    );

    // Settling one confirm lets it through.
    let first = outstanding.remove(0);
    first.await.expect("confirmed");
    let last = tokio::time::timeout(LIMIT, beyond)
        .await
        .expect("a settled confirm frees a place")
        .expect("published");
    outstanding.push(last);
    for confirm in outstanding {
        confirm.await.expect("confirmed");
    }
    let bodies: Vec<String> = env
        .take(queue, cap + 1)
        .await
        .into_iter()
        .map(|d| String::from_utf8(d.body.to_vec()).unwrap())
        .collect();
    let expected: Vec<String> = (0..=cap).map(|n| n.to_string()).collect();
    assert_eq!(bodies, expected, "every message arrived once, in order");
}

async fn send_async_honours_max_outstanding_confirms(env: &'static Env) {
    let queue = env.queue("backpressure").await;
    let mq = AceMq::builder()
        .url(env.url.as_str())
        .max_outstanding_confirms(2)
        .connect()
        .await
        .expect("connect");
    send_async_waits_at_the_cap(env, &mq, &queue, 2).await;
    mq.close().await.expect("close");
}
polyq_testkit::both_brokers!(send_async_honours_max_outstanding_confirms);

async fn send_async_honours_the_default_cap(env: &'static Env) {
    let queue = env.queue("backpressure-default").await;
    // The harness's connection is built with the default.
    send_async_waits_at_the_cap(env, &env.mq, &queue, DEFAULT_MAX_OUTSTANDING_CONFIRMS).await;
}
polyq_testkit::both_brokers!(send_async_honours_the_default_cap);

/// A bad option is a configuration error naming it, not a failure of the broker.
#[tokio::test]
async fn zero_outstanding_confirms_is_refused_as_a_configuration_error() {
    let error = acemq::AceMq::builder()
        .url("memory://acemq-config-error")
        .max_outstanding_confirms(0)
        .connect()
        .await
        .expect_err("a window of no confirms is refused");
    assert!(
        matches!(
            &error,
            RuntimeError::Config {
                option: "max_outstanding_confirms",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!error.is_transient(), "{error:?}");
}
