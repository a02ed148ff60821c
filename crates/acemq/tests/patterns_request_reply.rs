//! Request/reply: many requests in flight, the wire form of a request, timeouts and late
//! replies, a failing responder, a request without a reply address.

mod common;

use std::sync::Arc;
use std::time::Duration;

use acemq::interceptor::{BoxError, PublishContext, PublishInterceptor};
use acemq::patterns::PatternError;
use acemq::patterns::request_reply::{Requester, respond};
use acemq::{AceMq, Envelope, Message};
use common::{Env, LIMIT};
use polyq_amqp::{FieldValue, OutgoingMessage, Properties};

async fn concurrent_requests_are_matched(env: &'static Env) {
    let queue = env.queue("rr.double").await;
    let responder = respond(
        &env.mq,
        env.mq
            .consumer::<u64>(queue.as_str())
            .concurrency(4)
            .prefetch(8),
        |m: Message<u64>| async move { Ok::<_, std::convert::Infallible>(m.payload() * 2) },
    )
    .await
    .unwrap();
    let requester = Arc::new(Requester::start(&env.mq).await.unwrap());
    assert!(requester.reply_queue().starts_with("acemq.reply."));
    let calls = (0..32u64).map(|n| {
        let requester = Arc::clone(&requester);
        let queue = queue.clone();
        tokio::spawn(async move {
            let doubled: u64 = requester.request("", &queue, &n).await.unwrap();
            (n, doubled)
        })
    });
    for call in futures_util::future::join_all(calls).await {
        let (n, doubled) = call.unwrap();
        assert_eq!(doubled, n * 2);
    }
    assert_eq!(responder.answered(), 32);
    assert_eq!(requester.late_replies(), 0);
    assert!(responder.drain(LIMIT).await.is_clean());
    Arc::into_inner(requester).unwrap().close().await.unwrap();
}
polyq_testkit::both_brokers!(concurrent_requests_are_matched);

/// Answers `request` by hand, as another port's responder would.
async fn reply_by_hand(env: &Env, request: &Envelope, reply_to: &str, body: &'static [u8]) {
    let reply = request.causing(reply_to).build().unwrap();
    let mut properties = Properties::default();
    reply.write_properties(&mut properties);
    env.client()
        .publish(OutgoingMessage::new("", reply_to, properties, body))
        .await
        .unwrap()
        .await
        .unwrap();
}

async fn wire_form_timeout_and_late_replies(env: &'static Env) {
    let queue = env.queue("rr.wire").await;
    let requester = Arc::new(Requester::start(&env.mq).await.unwrap());
    let call = tokio::spawn({
        let requester = Arc::clone(&requester);
        let queue = queue.clone();
        async move { requester.request::<str, String>("", &queue, "ping").await }
    });
    let raw = env.next_in(&queue).await;
    let reply_to = requester.reply_queue().to_owned();
    assert_eq!(raw.properties.reply_to.as_deref(), Some(reply_to.as_str()));
    assert_eq!(
        raw.properties.headers["acemq-reply-to"],
        FieldValue::from(reply_to.as_str())
    );
    let request = Envelope::from_properties(&raw.properties, &raw.routing_key);
    assert_eq!(request.message_type(), queue);
    assert_ne!(
        request.correlation_id(),
        request.id(),
        "a fresh correlation per request"
    );
    assert_eq!(
        raw.properties.correlation_id, None,
        "the AMQP correlation-id is not used"
    );
    reply_by_hand(env, &request, &reply_to, b"\"pong\"").await;
    assert_eq!(call.await.unwrap().unwrap(), "pong");

    // Nobody answers in time: a timeout of its own kind.
    let err = requester
        .request_within::<str, String>("", &queue, "late", Duration::from_millis(100))
        .await
        .unwrap_err();
    let PatternError::Timeout { correlation_id, .. } = &err else {
        panic!("expected a timeout, got {err}");
    };
    assert_eq!(requester.timed_out(), 1);
    let raw = env.next_in(&queue).await;
    let late = Envelope::from_properties(&raw.properties, &raw.routing_key);
    assert_eq!(late.correlation_id(), correlation_id);
    reply_by_hand(env, &late, &reply_to, b"\"too late\"").await;

    // Replies arrive in order: once a later one is matched, the late one was seen and dropped.
    let call = tokio::spawn({
        let requester = Arc::clone(&requester);
        let queue = queue.clone();
        async move { requester.request::<str, String>("", &queue, "again").await }
    });
    let raw = env.next_in(&queue).await;
    let again = Envelope::from_properties(&raw.properties, &raw.routing_key);
    reply_by_hand(env, &again, &reply_to, b"\"on time\"").await;
    assert_eq!(call.await.unwrap().unwrap(), "on time");
    assert_eq!(requester.late_replies(), 1);
    Arc::into_inner(requester).unwrap().close().await.unwrap();
}
polyq_testkit::both_brokers!(wire_form_timeout_and_late_replies);

async fn a_failing_responder_answers_once_and_rejects(env: &'static Env) {
    let queue = env.queue("rr.fail").await;
    let responder = respond(
        &env.mq,
        env.mq.consumer::<u32>(queue.as_str()),
        |m: Message<u32>| async move {
            match *m.payload() {
                0 => Err("cannot divide by zero"),
                n => Ok(100 / n),
            }
        },
    )
    .await
    .unwrap();
    let requester = Requester::start(&env.mq).await.unwrap();
    let err = requester
        .request::<u32, u32>("", &queue, &0)
        .await
        .unwrap_err();
    let PatternError::Responder { error, .. } = &err else {
        panic!("expected the responder's error, got {err}");
    };
    assert_eq!(error, "Error: cannot divide by zero");
    let dead = env.next_in(&format!("{queue}.dlq")).await;
    assert_eq!(
        dead.properties.headers["x-acemq-error"],
        FieldValue::from(
            "the handler reported an unprocessable message: Error: cannot divide by zero"
        )
    );
    assert_eq!(
        requester.request::<u32, u32>("", &queue, &4).await.unwrap(),
        25
    );
    assert_eq!((responder.failed(), responder.answered()), (1, 1));

    // No reply address: acknowledged unhandled and counted (Java). The responder handles one
    // message at a time, so the request after it is answered only once it was counted.
    env.mq
        .publisher::<u32>("", queue.as_str())
        .send(&5)
        .await
        .unwrap();
    assert_eq!(
        requester
            .request::<u32, u32>("", &queue, &10)
            .await
            .unwrap(),
        10
    );
    assert_eq!((responder.unanswerable(), responder.answered()), (1, 2));
    assert!(responder.drain(LIMIT).await.is_clean());
    requester.close().await.unwrap();
}
polyq_testkit::both_brokers!(a_failing_responder_answers_once_and_rejects);

/// A request from a plain AMQP client, addressed only by the AMQP `reply-to` property.
async fn the_amqp_reply_to_property_is_answered(env: &'static Env) {
    let queue = env.queue("rr.property").await;
    let replies = env.queue("rr.property.replies").await;
    let responder = respond(
        &env.mq,
        env.mq.consumer::<u32>(queue.as_str()),
        |m: Message<u32>| async move {
            assert!(
                m.envelope().headers().get("acemq-reply-to").is_none(),
                "the request carries no reply header"
            );
            Ok::<_, std::convert::Infallible>(m.payload() + 1)
        },
    )
    .await
    .unwrap();
    let properties = Properties {
        content_type: Some("application/json".to_owned()),
        reply_to: Some(replies.clone()),
        ..Properties::default()
    };
    env.client()
        .publish(OutgoingMessage::new(
            "",
            queue.as_str(),
            properties,
            &b"41"[..],
        ))
        .await
        .unwrap()
        .await
        .unwrap();
    let reply = env.next_in(&replies).await;
    assert_eq!(&reply.body[..], b"42");
    assert_eq!(reply.routing_key, replies);
    assert_eq!((responder.answered(), responder.unanswerable()), (1, 0));
    assert!(responder.drain(LIMIT).await.is_clean());
}
polyq_testkit::both_brokers!(the_amqp_reply_to_property_is_answered);

/// Stamps every publish of its connection with an application header.
struct Stamp;

impl PublishInterceptor for Stamp {
    fn before_publish(&self, publish: &mut PublishContext<'_>) -> Result<(), BoxError> {
        let stamped = publish
            .envelope()
            .to_builder()
            .header("x-stamp", publish.routing_key().to_owned())
            .build()?;
        publish.set_envelope(stamped);
        Ok(())
    }
}

/// Requests go out through a publisher: the connection's publish interceptors see them.
async fn requests_pass_publish_interceptors(env: &'static Env) {
    let queue = env.queue("rr.intercepted").await;
    let responder = respond(
        &env.mq,
        env.mq.consumer::<u32>(queue.as_str()),
        |m: Message<u32>| async move {
            let stamp = m.envelope().headers().get("x-stamp").cloned();
            Ok::<_, std::convert::Infallible>(stamp.map(|s| format!("{s:?}")))
        },
    )
    .await
    .unwrap();
    let stamping = AceMq::builder()
        .url(env.url.as_str())
        .publish_interceptor(Stamp)
        .connect()
        .await
        .unwrap();
    let requester = Requester::start(&stamping).await.unwrap();
    let stamp: Option<String> = requester.request("", &queue, &1u32).await.unwrap();
    assert_eq!(
        stamp,
        Some(format!("{:?}", FieldValue::from(queue.as_str())))
    );
    assert_eq!(responder.answered(), 1);
    assert!(responder.drain(LIMIT).await.is_clean());
    requester.close().await.unwrap();
    stamping.close().await.unwrap();
}
polyq_testkit::both_brokers!(requests_pass_publish_interceptors);
