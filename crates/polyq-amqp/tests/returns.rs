//! On RabbitMQ, with thousands of publishes awaiting their confirms on one channel, every
//! unroutable mandatory publish is reported returned with its own body and routing key, and
//! every routable one acked. A `basic.return` carries no delivery tag, so a client that hands
//! returns to whichever confirm completes next gets this wrong as soon as confirms overlap;
//! persistent messages to a durable queue make the acks lag so that they do. Publishes cancelled
//! while their frames are being written take part too: their confirms still pop returns.

use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::task::Poll;
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::StreamExt as _;
use futures_util::future::join_all;
use polyq_amqp::{
    Client, ConsumeOptions, ExchangeKind, ExchangeSpec, OutgoingMessage, Properties,
    PublishOutcome, QueueSpec,
};
use polyq_testkit::{amqp_url, unique_name};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(60);
const ROUNDS: usize = 5;
const PER_ROUND: usize = 3000;

/// Where a message goes, and whether a queue takes it.
enum Target {
    Queue,
    UnboundExchange,
    UnknownKey,
}

#[tokio::test]
async fn every_unroutable_publish_is_returned_with_its_own_body_among_thousands_in_flight() {
    run(Cancel::None).await;
}

#[tokio::test]
async fn publishes_cancelled_while_being_written_take_no_other_publish_s_return() {
    run(Cancel::EveryFifth).await;
}

/// Which publishes are dropped after their first poll, unawaited.
#[derive(Clone, Copy)]
enum Cancel {
    None,
    EveryFifth,
}

async fn run(cancel: Cancel) {
    let client = Client::connect(&amqp_url()).await.expect("connect");
    let queue = unique_name("polyq.returns.queue");
    let unbound = unique_name("polyq.returns.unbound");
    client
        .declare_queue(&QueueSpec::new(&queue))
        .await
        .expect("declare the durable queue");
    client
        .declare_exchange(&ExchangeSpec::new(&unbound, ExchangeKind::Direct))
        .await
        .expect("declare the exchange without bindings");
    let outcome = AssertUnwindSafe(publish_rounds(&client, &queue, &unbound, cancel))
        .catch_unwind()
        .await;
    client.delete_queue(&queue).await.expect("delete the queue");
    client
        .delete_exchange(&unbound)
        .await
        .expect("delete the exchange");
    client.close().await.expect("close");
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn publish_rounds(client: &Client, queue: &str, unbound: &str, cancel: Cancel) {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut routed = BTreeSet::new();
    // Cancelled publishes may have reached the broker; those to the queue may be in it.
    let mut maybe_routed = BTreeSet::new();
    for round in 0..ROUNDS {
        let messages: Vec<(Target, OutgoingMessage)> = (0..PER_ROUND)
            .map(|n| {
                let body = format!("round {round} message {n}");
                let (target, exchange, key) = match rng.random_range(0..4) {
                    0 => (Target::UnboundExchange, unbound, format!("key {n}")),
                    1 => (Target::UnknownKey, "", format!("{queue}.nowhere.{n}")),
                    _ => (Target::Queue, "", queue.to_owned()),
                };
                let message =
                    OutgoingMessage::new(exchange, key, Properties::default().persistent(), body);
                (target, message)
            })
            .collect();
        let mut confirms = Vec::with_capacity(PER_ROUND);
        let mut awaited = Vec::with_capacity(PER_ROUND);
        let mut cancelled = 0;
        for (n, (_, message)) in messages.iter().enumerate() {
            if matches!(cancel, Cancel::EveryFifth) && n % 5 == 0 {
                let mut publish = Box::pin(client.publish(message.clone()));
                if let Poll::Ready(confirm) = futures_util::poll!(&mut publish) {
                    confirms.push(confirm.expect("publish"));
                    awaited.push(n);
                } else {
                    cancelled += 1;
                    if matches!(messages[n].0, Target::Queue) {
                        maybe_routed.insert(message.body.clone());
                    }
                }
                continue;
            }
            confirms.push(client.publish(message.clone()).await.expect("publish"));
            awaited.push(n);
        }
        if matches!(cancel, Cancel::EveryFifth) {
            assert!(cancelled > 0, "no publish was pending after its first poll");
        }
        let outcomes = tokio::time::timeout(LIMIT, join_all(confirms))
            .await
            .expect("every confirm within the limit");
        for (n, outcome) in awaited.into_iter().zip(outcomes) {
            let (target, sent) = &messages[n];
            let outcome = outcome.unwrap_or_else(|e| panic!("seed {seed}: confirm: {e}"));
            match (target, outcome) {
                (Target::Queue, PublishOutcome::Acked) => {
                    routed.insert(sent.body.clone());
                }
                (Target::UnboundExchange | Target::UnknownKey, PublishOutcome::Returned(back)) => {
                    assert_eq!(
                        back.body, sent.body,
                        "seed {seed}: returned with another body"
                    );
                    assert_eq!(back.routing_key, sent.routing_key, "seed {seed}");
                    assert_eq!(back.exchange, sent.exchange, "seed {seed}");
                    assert_eq!(back.reply_code, 312, "seed {seed}: NO_ROUTE");
                }
                (_, other) => panic!(
                    "seed {seed}: {:?} to `{}` with key `{}` reported {other:?}",
                    sent.body, sent.exchange, sent.routing_key
                ),
            }
        }
    }
    let queued = drain(client, queue).await;
    assert!(
        queued.is_superset(&routed),
        "seed {seed}: a routable message acked but not queued"
    );
    assert!(
        queued
            .difference(&routed)
            .all(|body| maybe_routed.contains(body)),
        "seed {seed}: the queue holds a message no routable publish sent"
    );
}

/// Consumes every message the queue holds once all publishes are confirmed, each once.
async fn drain(client: &Client, queue: &str) -> BTreeSet<bytes::Bytes> {
    let expected = client
        .inspect_queue(queue)
        .await
        .expect("inspect")
        .message_count as usize;
    let mut consumer = client
        .consume(queue, &ConsumeOptions::default().prefetch(500))
        .await
        .expect("consume");
    let mut bodies = BTreeSet::new();
    while bodies.len() < expected {
        let delivery = tokio::time::timeout(LIMIT, consumer.next())
            .await
            .expect("a delivery within the limit")
            .expect("the consumer ended")
            .expect("delivery");
        delivery.ack().await.expect("ack");
        assert!(bodies.insert(delivery.body), "a message arrived twice");
    }
    consumer.cancel().await.expect("cancel");
    let left = client.inspect_queue(queue).await.expect("inspect");
    assert_eq!(left.message_count, 0, "more messages than were acked");
    bodies
}
