//! Carried itineraries: a chain of hops each stamping `completedAt`, an empty itinerary ending
//! the run, an unreadable slip dead-lettered without a retry, and the itinerary read before the
//! route trio.

mod common;

use acemq::patterns::itinerary_follower::{follow, start};
use acemq::retry::RetryPolicy;
use acemq::{Envelope, Itinerary, Message, RoutingSlip, Stop};
use common::{Env, LIMIT};
use polyq_amqp::{FieldValue, OutgoingMessage, Properties};
use serde_json::{Value, json};
use std::time::Duration;

type Infallible = std::convert::Infallible;

async fn appending(
    env: &'static Env,
    queue: &str,
    mark: &'static str,
) -> acemq::patterns::itinerary_follower::Follower {
    follow(
        &env.mq,
        env.mq.consumer::<Value>(queue),
        move |m: Message<Value>| async move {
            Ok::<_, Infallible>(json!(format!(
                "{}{mark}",
                m.payload().as_str().unwrap_or("?")
            )))
        },
    )
    .await
    .unwrap()
}

async fn a_hop_chain_follows_the_slip(env: &'static Env) {
    let a = env.queue("it.a").await;
    let b = env.queue("it.b").await;
    let end = env.queue("it.end").await;
    let first = appending(env, &a, "a").await;
    let second = appending(env, &b, "b").await;
    let trip = Itinerary::of([
        Stop::new("", a.as_str(), "first"),
        Stop::new("", b.as_str(), ""),
        Stop::new("", end.as_str(), "end"),
    ]);
    let started = start(&env.mq, &trip, &json!(">")).await.unwrap();
    let arrived = env.next_in(&end).await;
    assert_eq!(&arrived.body[..], br#"">ab""#);
    let envelope = Envelope::from_properties(&arrived.properties, &arrived.routing_key);
    assert_eq!(envelope.correlation_id(), started.correlation_id());
    // Python and Go: every hop is a new message caused by the one before.
    assert_ne!(envelope.id(), started.id());
    assert!(envelope.causation_id().is_some_and(|c| c != envelope.id()));
    let slip = envelope.itinerary().unwrap().unwrap();
    let done: Vec<&str> = slip.done().iter().map(Stop::routing_key).collect();
    assert_eq!(done, [a.as_str(), b.as_str()]);
    for stop in slip.done() {
        let at = stop.completed_at();
        assert!(at.len() == 20 && at.ends_with('Z'), "seconds and Z: {at}");
    }
    assert_eq!(slip.steps().len(), 1);
    assert_eq!(slip.next().unwrap().name(), "end");
    let counts = [first.counts(), second.counts()];
    for follower in [first, second] {
        assert!(follower.drain(LIMIT).await.is_clean());
    }
    for counts in counts {
        assert_eq!((counts.forwarded(), counts.completed()), (1, 0));
    }

    // A follower at the last stop handles the message and ends the run: nothing goes on.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let last = follow(
        &env.mq,
        env.mq.consumer::<Value>(end.as_str()),
        move |m: Message<Value>| {
            let tx = tx.clone();
            async move {
                tx.send(m.payload().clone()).unwrap();
                Ok::<_, Infallible>(json!("ignored"))
            }
        },
    )
    .await
    .unwrap();
    start(
        &env.mq,
        &Itinerary::of([Stop::new("", end.as_str(), "")]),
        &json!("x"),
    )
    .await
    .unwrap();
    assert_eq!(
        tokio::time::timeout(LIMIT, rx.recv()).await.unwrap(),
        Some(json!("x"))
    );
    // Draining waits for the handled delivery to be settled.
    let counts = last.counts();
    assert!(last.drain(LIMIT).await.is_clean());
    assert_eq!((counts.forwarded(), counts.completed()), (0, 1));
    assert_eq!(env.count(&end).await, 0);
}
polyq_testkit::both_brokers!(a_hop_chain_follows_the_slip);

async fn raw(env: &Env, queue: &str, slip: FieldValue, route: Option<RoutingSlip>) {
    let mut builder = Envelope::of("t");
    if let Some(route) = route {
        builder = builder.route(route);
    }
    let mut properties = Properties::default();
    builder.build().unwrap().write_properties(&mut properties);
    properties.headers.insert("acemq-routing-slip".into(), slip);
    env.client()
        .publish(OutgoingMessage::new("", queue, properties, &b"\"p\""[..]))
        .await
        .unwrap()
        .await
        .unwrap();
}

async fn unreadable_slips_are_fatal_and_the_itinerary_wins(env: &'static Env) {
    let queue = env.queue("it.bad").await;
    let next = env.queue("it.next").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let follower = follow(
        &env.mq,
        env.mq
            .consumer::<Value>(queue.as_str())
            .retry(RetryPolicy::fixed(3, Duration::from_millis(10)).unwrap()),
        move |m: Message<Value>| {
            let tx = tx.clone();
            async move {
                tx.send(m.envelope().id().to_owned()).unwrap();
                Ok::<_, Infallible>(m.payload().clone())
            }
        },
    )
    .await
    .unwrap();
    raw(env, &queue, FieldValue::from("{not json"), None).await;
    let dead = env.next_in(&format!("{queue}.dlq")).await;
    let reason = dead.properties.headers["x-acemq-error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        reason.starts_with("the handler reported an unprocessable message"),
        "{reason}"
    );
    let dead_envelope = Envelope::from_properties(&dead.properties, &dead.routing_key);
    assert_eq!(dead_envelope.attempt(), 1, "never retried");

    // Both forms: the itinerary is followed, not the route trio.
    let both = Itinerary::of([
        Stop::new("", queue.as_str(), ""),
        Stop::new("", next.as_str(), ""),
    ]);
    let route = RoutingSlip::start_of(["elsewhere", "nowhere"]).unwrap();
    raw(env, &queue, FieldValue::from(both.to_json()), Some(route)).await;
    let forwarded = env.next_in(&next).await;
    let envelope = Envelope::from_properties(&forwarded.properties, &forwarded.routing_key);
    assert_eq!(envelope.itinerary().unwrap().unwrap().done().len(), 1);
    // Only the second message reached the handler.
    assert!(rx.try_recv().is_ok());
    assert!(rx.try_recv().is_err());
    let counts = follower.counts();
    assert!(follower.drain(LIMIT).await.is_clean());
    assert_eq!(counts.forwarded(), 1);
}
polyq_testkit::both_brokers!(unreadable_slips_are_fatal_and_the_itinerary_wins);
