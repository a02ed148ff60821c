//! Recovery of the `amqp://` client: consumers and publishers carry on through a broker-side
//! close of the connection, a delivery from before the failure cannot be settled on the new
//! channel, a publish during an outage waits for the connection (up to its bound), and publishes
//! whose frames were still queued when the connection went down are sent again.
//!
//! Every failure here is the test's own: the broker closes only the connection the test named
//! uniquely, and outages that must last a while go through a local TCP proxy. Tests running at
//! the same time, in this process or another (nextest), are not touched.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use polyq_amqp::{
    Client, ClientOptions, ConsumeOptions, Consumer, Delivery, Error, OutgoingMessage, Properties,
    PublishOutcome, QueueSpec,
};
use polyq_testkit::proxy::TcpProxy;
use polyq_testkit::{amqp_url, unique_name};
use tokio::sync::watch;
use tokio::time::timeout;

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(60);

fn options() -> ClientOptions {
    ClientOptions::default()
        .connection_name("polyq-recovery-test")
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(500))
        .recovery_wait(Duration::from_secs(30))
}

fn transient_queue(name: &str) -> QueueSpec {
    let mut spec = QueueSpec::new(name);
    spec.durable = false;
    spec
}

fn message(queue: &str, body: String) -> OutgoingMessage {
    OutgoingMessage::new("", queue, Properties::default(), body)
}

/// A client on `url` and a transient queue named after `prefix`, declared through it.
async fn client_with_queue(url: &str, options: ClientOptions, prefix: &str) -> (Client, String) {
    let client = Client::connect_with(url, options).await.expect("connects");
    let queue = unique_name(prefix);
    client
        .declare_queue(&transient_queue(&queue))
        .await
        .expect("declares");
    (client, queue)
}

/// Publishes `body` to `queue` and waits for the broker's answer.
async fn publish_confirmed(client: &Client, queue: &str, body: &str) -> PublishOutcome {
    client
        .publish(message(queue, body.into()))
        .await
        .expect("publishes")
        .await
        .expect("confirmed")
}

/// The consumer's next delivery, within [`LIMIT`].
async fn next_delivery(consumer: &mut Consumer) -> Delivery {
    timeout(LIMIT, consumer.next())
        .await
        .expect("delivered in time")
        .expect("stream open")
        .expect("delivery")
}

/// Deletes the test's queue and closes its client.
async fn remove_and_close(client: Client, queue: &str) {
    client.delete_queue(queue).await.expect("deletes the queue");
    client.close().await.expect("closes");
}

/// What the publisher task confirmed, shared with the test body.
#[derive(Default)]
struct Published {
    acked: HashSet<String>,
    unconfirmed: u64,
}

/// Publishes `m0`, `m1`, ... with up to `window` confirms outstanding until `stop` is set, then
/// until every message is confirmed. A message whose publish or confirm failed is published
/// again; only `Acked` counts as confirmed.
async fn publish_until_stopped(
    client: Client,
    queue: String,
    window: usize,
    stop: Arc<AtomicBool>,
    progress: watch::Sender<Published>,
) -> u64 {
    let mut next = 0u64;
    let mut retry: VecDeque<String> = VecDeque::new();
    let mut in_flight = FuturesUnordered::new();
    loop {
        let stopping = stop.load(Ordering::Acquire);
        if stopping && retry.is_empty() && in_flight.is_empty() {
            return next;
        }
        if in_flight.len() < window && (!retry.is_empty() || !stopping) {
            let id = retry.pop_front().unwrap_or_else(|| {
                next += 1;
                format!("m{}", next - 1)
            });
            match client.publish(message(&queue, id.clone())).await {
                Ok(confirm) => in_flight.push(confirm.map(move |outcome| (id, outcome))),
                Err(error) => {
                    assert!(
                        matches!(error, Error::Unavailable { .. }),
                        "publish failed with {error}"
                    );
                    retry.push_back(id);
                }
            }
            continue;
        }
        let Some((id, outcome)) = in_flight.next().await else {
            continue;
        };
        match outcome {
            Ok(PublishOutcome::Acked) => progress.send_modify(|p| {
                p.acked.insert(id);
            }),
            Ok(other) => panic!("message {id} was not accepted: {other:?}"),
            Err(Error::Unconfirmed { .. }) => {
                progress.send_modify(|p| p.unconfirmed += 1);
                retry.push_back(id);
            }
            Err(error) => panic!("confirm of {id} failed with {error}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_and_publisher_carry_on_through_a_broker_side_close() {
    let url = amqp_url();
    let queue = unique_name("polyq.recovery.close-all");
    let connection_name = unique_name("polyq-recovery-test");
    let client = Client::connect_with(&url, options().connection_name(connection_name.as_str()))
        .await
        .expect("connects");
    client
        .declare_queue(&transient_queue(&queue))
        .await
        .expect("declares");
    let mut consumer = client
        .consume(&queue, &ConsumeOptions::default().prefetch(100))
        .await
        .expect("consumes");

    // A delivery held unsettled across the failure.
    let _ = client
        .publish(message(&queue, "before".into()))
        .await
        .expect("publishes")
        .await
        .expect("confirmed");
    let before = next_delivery(&mut consumer).await;
    assert_eq!(&before.body[..], b"before");
    assert!(!before.redelivered);

    let stop = Arc::new(AtomicBool::new(false));
    let (progress, mut seen_progress) = watch::channel(Published::default());
    let publisher = tokio::spawn(publish_until_stopped(
        client.clone(),
        queue.clone(),
        100,
        stop.clone(),
        progress,
    ));

    // Consume and ack everything; report the redelivery of `before` and what was received.
    let (received_tx, mut received) = watch::channel((false, HashMap::<String, u32>::new()));
    let (done, mut finish) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        let mut stale_acks = 0u32;
        loop {
            let next = tokio::select! {
                next = consumer.next() => next,
                _ = &mut finish => break,
            };
            let Some(delivery) = next else {
                panic!("the consumer stream ended while the client was open");
            };
            let delivery = delivery.expect("the consumer stream yields no errors");
            let body = String::from_utf8(delivery.body.to_vec()).expect("utf-8 body");
            match delivery.ack().await {
                Ok(()) => {}
                // Received on a channel that closed before the ack: it comes again.
                Err(Error::StaleDelivery) => stale_acks += 1,
                Err(error) => panic!("ack failed: {error}"),
            }
            received_tx.send_modify(|(before_again, counts)| {
                if body == "before" {
                    assert!(delivery.redelivered, "`before` came again as a redelivery");
                    *before_again = true;
                } else {
                    *counts.entry(body).or_default() += 1;
                }
            });
        }
        consumer.cancel().await.expect("cancels");
        stale_acks
    });

    timeout(LIMIT, seen_progress.wait_for(|p| p.acked.len() >= 200))
        .await
        .expect("200 confirms in time")
        .expect("publisher alive");
    assert_eq!(
        polyq_testkit::rabbitmq::close_connections_named(&connection_name).await,
        1,
        "the broker closed the test's one connection"
    );

    // The broker requeued `before` when its channel died and the re-created consumer got it
    // again; the old delivery must not be settled on the new channel.
    timeout(LIMIT, received.wait_for(|(before_again, _)| *before_again))
        .await
        .expect("`before` redelivered in time")
        .expect("reader alive");
    match before.ack().await {
        Err(Error::StaleDelivery) => {}
        other => panic!("ack of a pre-failure delivery must be StaleDelivery, got {other:?}"),
    }

    // Keep publishing through the recovered connection for a while, then stop.
    let confirmed_at_recovery = seen_progress.borrow().acked.len();
    timeout(
        LIMIT,
        seen_progress.wait_for(|p| p.acked.len() >= confirmed_at_recovery + 200),
    )
    .await
    .expect("publishing resumed in time")
    .expect("publisher alive");
    stop.store(true, Ordering::Release);
    let published = timeout(LIMIT, publisher)
        .await
        .expect("publisher finished in time")
        .expect("publisher did not panic");
    let confirmed = seen_progress.borrow().acked.clone();
    assert_eq!(
        confirmed.len() as u64,
        published,
        "every message was confirmed in the end"
    );

    // Every confirmed message is consumed, possibly more than once.
    timeout(
        LIMIT,
        received.wait_for(|(_, counts)| confirmed.iter().all(|id| counts.contains_key(id))),
    )
    .await
    .expect("every confirmed message consumed in time")
    .expect("reader alive");
    let duplicates: u32 = received.borrow().1.values().map(|n| n - 1).sum();
    let unconfirmed = seen_progress.borrow().unconfirmed;
    println!(
        "published {published}, confirmed {}, confirms lost with the connection and \
         republished {unconfirmed}, consumed duplicates {duplicates}",
        confirmed.len()
    );

    done.send(()).expect("reader alive");
    let stale_acks = timeout(LIMIT, reader)
        .await
        .expect("consumer cancelled in time")
        .expect("reader did not panic");
    println!("acks refused as stale: {stale_acks}");
    client
        .delete_queue(&queue)
        .await
        .expect("deletes the queue");
    client.close().await.expect("closes");
}

/// The broker address of `url`, and `url` pointed at `proxy` instead.
fn through_proxy(url: &str, proxy: SocketAddr) -> (SocketAddr, String) {
    let mut parsed = url::Url::parse(url).expect("valid broker URL");
    let upstream = parsed
        .socket_addrs(|| Some(5672))
        .expect("broker address resolves")
        .into_iter()
        .next()
        .expect("one broker address");
    parsed.set_port(Some(proxy.port())).expect("port settable");
    parsed
        .set_host(Some(&proxy.ip().to_string()))
        .expect("host settable");
    (upstream, parsed.to_string())
}

async fn proxied_client(recovery_wait: Duration) -> (TcpProxy, Client, String) {
    let url = amqp_url();
    let (upstream, _) = through_proxy(&url, "127.0.0.1:1".parse().expect("address"));
    let proxy = TcpProxy::start(upstream).await;
    let (_, proxied) = through_proxy(&url, proxy.address());
    let (client, queue) = client_with_queue(
        &proxied,
        options().recovery_wait(recovery_wait),
        "polyq.recovery.outage",
    )
    .await;
    (proxy, client, queue)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_during_an_outage_waits_for_the_connection() {
    let (mut proxy, client, queue) = proxied_client(Duration::from_secs(30)).await;

    proxy.cut();
    proxy.await_refusals(1, LIMIT).await;
    let publishing = tokio::spawn({
        let (client, queue) = (client.clone(), queue.clone());
        async move {
            client
                .publish(message(&queue, "during the outage".into()))
                .await?
                .await
        }
    });
    // Still refused twice more while the publish is pending: it is waiting, not failing.
    proxy.await_refusals(2, LIMIT).await;
    assert!(!publishing.is_finished(), "the publish waits for recovery");

    proxy.restore();
    let outcome = timeout(LIMIT, publishing)
        .await
        .expect("publish completed in time")
        .expect("task did not panic");
    assert_eq!(outcome.expect("publish succeeded"), PublishOutcome::Acked);
    // The queue was declared again on the new connection, and the message is in it.
    let delivery = client
        .get(&queue)
        .await
        .expect("gets")
        .expect("the message published during the outage");
    assert_eq!(&delivery.body[..], b"during the outage");
    delivery.ack().await.expect("acks");

    remove_and_close(client, &queue).await;
}

/// Publishes return once their frames are queued; the client writes them afterwards. Publishes
/// whose frames were still queued when the connection went down never reached the broker, and
/// their confirms send them again on the new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_caught_unwritten_by_a_lost_connection_are_sent_again() {
    const MESSAGES: usize = 600;
    let (proxy, client, queue) = proxied_client(Duration::from_secs(30)).await;
    // 64 KiB each: the sockets' buffers (a few MB) hold a small part of them, lapin the rest.
    let body = "x".repeat(64 * 1024);

    proxy.stall();
    let mut confirms = Vec::new();
    for _ in 0..MESSAGES {
        let published = timeout(LIMIT, client.publish(message(&queue, body.clone())))
            .await
            .expect("a publish returns without the broker having the message");
        confirms.push(published.expect("queued"));
    }
    proxy.cut();
    proxy.resume();
    proxy.restore();

    let outcomes = timeout(LIMIT, futures_util::future::join_all(confirms))
        .await
        .expect("every confirm resolved in time");
    let mut acked = 0;
    for outcome in outcomes {
        match outcome {
            Ok(PublishOutcome::Acked) => acked += 1,
            // Written into the sockets' buffers, then lost with the connection.
            Err(Error::Unconfirmed { .. }) => {}
            other => panic!("expected Acked or Unconfirmed, got {other:?}"),
        }
    }
    // Nothing reached the broker before the cut, so every ack is of a message sent again.
    assert!(
        acked > 0,
        "no publish was sent again after the connection came back"
    );
    let info = client.inspect_queue(&queue).await.expect("inspects");
    assert_eq!(
        info.message_count, acked,
        "exactly the acked messages are in the queue"
    );
    println!("{MESSAGES} published during the stall, {acked} sent again and acked");
    remove_and_close(client, &queue).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_during_a_long_outage_fails_unavailable_after_the_bound() {
    let (mut proxy, client, queue) = proxied_client(Duration::from_millis(300)).await;

    proxy.cut();
    proxy.await_refusals(1, LIMIT).await;
    let error = client
        .publish(message(&queue, "never sent".into()))
        .await
        .expect_err("no connection within the bound");
    match &error {
        Error::Unavailable {
            waited_ms,
            operation,
            url,
        } => {
            assert_eq!(*waited_ms, 300);
            assert_eq!(operation, "publish");
            assert!(url.contains("***"), "password hidden: {url}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(!error.to_string().contains(":guest@"), "{error}");

    // Once the connection is back the client works again.
    proxy.restore();
    let info = timeout(LIMIT, async {
        loop {
            match client.inspect_queue(&queue).await {
                Err(Error::Unavailable { .. }) => continue,
                other => break other.expect("inspects"),
            }
        }
    })
    .await
    .expect("reconnected in time");
    assert_eq!(info.message_count, 0, "the refused publish left nothing");
    remove_and_close(client, &queue).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_errors_leave_the_client_usable() {
    let (client, queue) =
        client_with_queue(&amqp_url(), options(), "polyq.recovery.channel-errors").await;
    let missing = unique_name("polyq.recovery.missing");
    assert_eq!(
        publish_confirmed(&client, &queue, "one").await,
        PublishOutcome::Acked
    );
    let fetched = client
        .get(&queue)
        .await
        .expect("gets")
        .expect("the message");

    // Each of these closes the channel it ran on.
    match client.inspect_queue(&missing).await {
        Err(Error::NotFound {
            kind: "queue",
            name,
        }) => assert_eq!(name, missing),
        other => panic!("expected NotFound, got {other:?}"),
    }
    match client.declare_queue(&QueueSpec::new(&queue)).await {
        Err(Error::Precondition { reason, .. }) => {
            assert!(reason.contains("durable"), "broker text kept: {reason}")
        }
        other => panic!("expected Precondition, got {other:?}"),
    }
    let to_missing = OutgoingMessage::new(&missing, "any", Properties::default(), "lost");
    let result = match client.publish(to_missing).await {
        Ok(confirm) => confirm.await,
        Err(error) => Err(error),
    };
    match result {
        Err(Error::NotFound {
            kind: "exchange",
            name,
        }) => assert_eq!(name, missing),
        other => panic!("expected NotFound, got {other:?}"),
    }

    // Fetched messages live on their own channel, untouched by those errors.
    fetched.ack().await.expect("acks the fetched message");
    // Publishing, declaring and consuming go on, on new channels.
    assert_eq!(
        publish_confirmed(&client, &queue, "two").await,
        PublishOutcome::Acked
    );
    let info = client.inspect_queue(&queue).await.expect("inspects");
    assert_eq!(info.message_count, 1);
    let mut consumer = client
        .consume(&queue, &ConsumeOptions::default())
        .await
        .expect("consumes");
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(&delivery.body[..], b"two");
    delivery.ack().await.expect("acks");
    assert!(
        matches!(delivery.ack().await, Err(Error::AlreadySettled)),
        "a second settlement is refused"
    );
    consumer.cancel().await.expect("cancels");
    remove_and_close(client, &queue).await;
}

/// A server-named queue that went with the lost connection ends its consumer with
/// `QueueLost`; one that outlives the connection is consumed again under its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_named_queue_lost_with_the_connection_ends_its_consumer() {
    let (proxy, client, queue) = proxied_client(Duration::from_secs(30)).await;
    let mut exclusive = QueueSpec::new("");
    (
        exclusive.durable,
        exclusive.exclusive,
        exclusive.auto_delete,
    ) = (false, true, true);
    let gone = client.declare_queue(&exclusive).await.expect("declares");
    let mut lasting = QueueSpec::new("");
    lasting.durable = false;
    let kept = client.declare_queue(&lasting).await.expect("declares");
    assert!(gone.name.starts_with("amq.gen-"), "{}", gone.name);
    let mut on_gone = client
        .consume(&gone.name, &ConsumeOptions::default())
        .await
        .expect("consumes");
    let mut on_kept = client
        .consume(&kept.name, &ConsumeOptions::default())
        .await
        .expect("consumes");

    proxy.cut();
    proxy.restore();

    match timeout(LIMIT, on_gone.next()).await.expect("ended in time") {
        Some(Err(Error::QueueLost { name })) => assert_eq!(name, gone.name),
        other => panic!("expected QueueLost, got {other:?}"),
    }
    assert!(
        timeout(LIMIT, on_gone.next())
            .await
            .expect("ended in time")
            .is_none(),
        "the stream ends after the error"
    );
    assert_eq!(
        publish_confirmed(&client, &kept.name, "after").await,
        PublishOutcome::Acked
    );
    let delivery = next_delivery(&mut on_kept).await;
    assert_eq!(&delivery.body[..], b"after");
    delivery.ack().await.expect("acks");

    on_kept.cancel().await.expect("cancels");
    client.delete_queue(&kept.name).await.expect("deletes");
    remove_and_close(client, &queue).await;
}

/// Acks sent while the connection goes down all come back, as done or as stale deliveries,
/// never left waiting: lapin leaves a settlement that reaches its connection's command task
/// after the task's stop waiting forever, and a handler awaiting such an ack would stop its
/// consumer for good. Many acks are sent around each cut, over several cuts, because the window
/// is narrow (on this machine, under load, raw lapin left acks waiting in one cut in seven).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_sent_as_the_connection_is_lost_all_complete() {
    const CUTS: usize = 12;
    const PREFETCH: u16 = 200;
    /// Deliveries acked before the cut; the rest of the window is acked as it goes down.
    const BEFORE_CUT: usize = 60;
    let (proxy, client, queue) = proxied_client(Duration::from_secs(30)).await;
    let mut stale = 0;
    for _ in 0..CUTS {
        for n in 0..usize::from(PREFETCH) {
            publish_confirmed(&client, &queue, &format!("m{n}")).await;
        }
        let mut consumer = client
            .consume(&queue, &ConsumeOptions::default().prefetch(PREFETCH))
            .await
            .expect("consumes");
        let mut window = Vec::new();
        for _ in 0..PREFETCH {
            window.push(next_delivery(&mut consumer).await);
        }
        let mut acks = tokio::task::JoinSet::new();
        for (n, delivery) in window.into_iter().enumerate() {
            if n == BEFORE_CUT {
                proxy.cut();
            }
            acks.spawn(async move { delivery.ack().await });
            tokio::task::yield_now().await;
        }
        while let Some(acked) = timeout(LIMIT, acks.join_next())
            .await
            .expect("every ack completes")
        {
            match acked.expect("the ack task did not panic") {
                Ok(()) => {}
                Err(Error::StaleDelivery) => stale += 1,
                Err(error) => panic!(
                    "an ack failed otherwise: {}",
                    polyq_amqp::error_chain(&error)
                ),
            }
        }
        drop(consumer);
        proxy.restore();
        // The client is back once a request goes through; what was not acked is on the queue
        // again, and is purged so that every cut starts from the same window.
        client
            .purge_queue(&queue)
            .await
            .expect("purges after the reconnect");
    }
    assert!(stale > 0, "some acks were caught by the cuts");
    remove_and_close(client, &queue).await;
}
