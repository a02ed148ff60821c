//! Publishes that outlive a connection loss: with `ClientOptions::resend_lost`, a RabbitMQ node
//! stopped and started again (`stop_app` / `start_app`) in the middle of a stream of publishes
//! leaves every publish acked, and the broker holding every message at least once, a duplicate
//! only ever a copy of the same message id and bytes.
//!
//! The restart would disturb every other test on the shared broker, so it happens on a node of
//! the test's own. The test also prints how long after the node accepted connections again the
//! first publish was confirmed: the figure quoted in docs/RELIABILITY.md.

use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use polyq_amqp::{
    Client, ClientOptions, ConsumeOptions, OutgoingMessage, Properties, PublishOutcome, QueueSpec,
};
use polyq_testkit::rabbitmq_node::OwnNode;
use tokio::time::{Instant, timeout};

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(60);
/// Confirms awaited at once.
const WINDOW: usize = 100;
/// Confirms before the node is stopped.
const BEFORE_STOP: usize = 500;

fn message(queue: &str, index: usize) -> OutgoingMessage {
    let mut properties = Properties::default().persistent();
    properties.message_id = Some(format!("m{index}"));
    OutgoingMessage::new("", queue, properties, format!("body {index}"))
}

/// When each publish was confirmed, in confirm order.
type Confirmed = Arc<Mutex<Vec<Instant>>>;

/// Publishes `m0`, `m1`, ... with [`WINDOW`] confirms outstanding until `stop` is set, then
/// waits for the last confirms; every one must be acked, however long the node is away.
/// Returns how many it published.
async fn publish_until_stopped(
    client: Client,
    queue: String,
    confirmed: Confirmed,
    stop: Arc<AtomicBool>,
) -> usize {
    let mut pending = FuturesUnordered::new();
    let mut published = 0;
    while !stop.load(Ordering::Acquire) {
        while pending.len() >= WINDOW {
            settle(pending.next().await, &confirmed);
        }
        let index = published;
        let confirm = client
            .publish(message(&queue, index))
            .await
            .unwrap_or_else(|error| panic!("publish of m{index} failed: {error}"));
        pending.push(async move { (index, confirm.await) });
        published += 1;
    }
    while let Some(next) = pending.next().await {
        settle(Some(next), &confirmed);
    }
    published
}

fn settle(next: Option<(usize, polyq_amqp::Result<PublishOutcome>)>, confirmed: &Confirmed) {
    match next {
        Some((_, Ok(PublishOutcome::Acked))) => confirmed.lock().unwrap().push(Instant::now()),
        Some((index, other)) => panic!("m{index} was not acked: {other:?}"),
        None => unreachable!("settled only while confirms are pending"),
    }
}

fn confirmed_count(confirmed: &Confirmed) -> usize {
    confirmed.lock().unwrap().len()
}

/// Polls `condition` every 10 ms until it holds, within [`LIMIT`].
async fn until(what: &str, condition: impl Fn() -> bool) {
    timeout(LIMIT, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} within {LIMIT:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_publish_is_acked_through_a_node_restart_and_resent_with_its_own_id() {
    let node = tokio::task::spawn_blocking(|| OwnNode::start("polyq-resend"))
        .await
        .expect("the node started");
    let port = node.port();
    let options = ClientOptions::default().resend_lost(Some(LIMIT));
    let client = Client::connect_with(&node.url(), options)
        .await
        .expect("connect to the node of this test");
    let queue = "polyq.resend-lost".to_owned();
    client
        .declare_queue(&QueueSpec::new(queue.as_str()))
        .await
        .expect("declare a durable queue");

    let confirmed = Confirmed::default();
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = tokio::spawn(publish_until_stopped(
        client.clone(),
        queue.clone(),
        confirmed.clone(),
        stop.clone(),
    ));
    until("confirms before the restart", || {
        confirmed_count(&confirmed) >= BEFORE_STOP
    })
    .await;
    tokio::task::block_in_place(|| node.ctl(&["stop_app"]));
    let stopped_with = confirmed_count(&confirmed);
    let node = Arc::new(node);
    let starting = {
        let node = node.clone();
        tokio::task::spawn_blocking(move || node.ctl(&["start_app"]))
    };
    until("the node accepts connections again", || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    let open_at = Instant::now();
    starting.await.expect("start_app ran");

    until("confirms after the restart", || {
        confirmed_count(&confirmed) >= stopped_with + BEFORE_STOP
    })
    .await;
    stop.store(true, Ordering::Release);
    let published = timeout(LIMIT, publisher)
        .await
        .expect("every publish confirmed in time")
        .expect("every publish acked");
    assert_eq!(
        confirmed_count(&confirmed),
        published,
        "every publish acked"
    );
    let first_after = confirmed.lock().unwrap()[stopped_with];
    println!(
        "first confirm {} ms after the node accepted connections again \
         ({stopped_with} confirmed before the stop)",
        first_after.saturating_duration_since(open_at).as_millis()
    );

    // Count on the broker: every message at least once, every copy of a message identical.
    let held = client
        .inspect_queue(&queue)
        .await
        .expect("inspect the queue")
        .message_count as usize;
    assert!(held >= published, "the broker holds {held} of {published}");
    let mut consumer = client
        .consume(&queue, &ConsumeOptions::default().prefetch(500))
        .await
        .expect("consume");
    let mut copies = HashMap::<String, usize>::new();
    for _ in 0..held {
        let delivery = timeout(LIMIT, consumer.next())
            .await
            .expect("delivered in time")
            .expect("stream open")
            .expect("delivery");
        let id = delivery
            .properties
            .message_id
            .clone()
            .expect("every message carries its id");
        let index: usize = id[1..].parse().expect("an id this test sent");
        assert_eq!(
            &delivery.body[..],
            format!("body {index}").as_bytes(),
            "{id}"
        );
        *copies.entry(id).or_default() += 1;
        delivery.ack().await.expect("ack");
    }
    assert_eq!(copies.len(), published, "every message id is on the broker");
    let duplicates = held - published;
    println!("{held} messages on the broker for {published} publishes ({duplicates} duplicates)");

    consumer.cancel().await.expect("cancel");
    client.delete_queue(&queue).await.expect("delete the queue");
    client.close().await.expect("close");
}
