//! On a three-node RabbitMQ cluster (`scripts/rabbitmq-cluster`): the node that a publisher and
//! a consumer of a quorum source queue are connected to is killed with SIGKILL in the middle of
//! the load. Both fail over to another node of the URL's list; no confirmed message is lost,
//! the consumer sees a message twice only within its prefetch window (or as a publish sent
//! again after its confirm was lost with the node, or refused and sent again), and handling and
//! publishing resume. Prints the time from the kill to the first redelivery handled (the first
//! message the surviving nodes handed over), the figure in docs/RELIABILITY.md.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acemq::{AceMq, Envelope, Message, Publisher, RuntimeError};
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use polyq_amqp::{FieldValue, QueueSpec};
use polyq_testkit::rabbitmq_cluster::Cluster;
use tokio::time::{Instant, timeout};

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(40);
const MESSAGES: u64 = 3000;
/// Confirms awaited at once by the publisher.
const PUBLISH_WINDOW: usize = 50;
const PREFETCH: u16 = 50;
/// Messages handled before the node is killed.
const BEFORE_KILL: usize = 800;
/// The pause before a refused publish is sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Publishes `n` after `pause` and waits for its confirm; `n` comes back with the outcome.
async fn confirmed(
    publisher: &Publisher<u64>,
    n: u64,
    pause: Duration,
) -> (u64, Result<Envelope, RuntimeError>) {
    tokio::time::sleep(pause).await;
    let outcome = match publisher.send_async(&n).await {
        Ok(confirm) => confirm.await,
        Err(error) => Err(error),
    };
    (n, outcome)
}

/// What the consumer handled: copies per message, redeliveries, how many in all, and when the
/// first redelivery was: the first message the new node handed over.
#[derive(Default)]
struct Handled {
    copies: HashMap<u64, u32>,
    redelivered: u32,
    count: usize,
    first_redelivery: Option<Instant>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_loses_no_confirmed_message_and_handling_resumes_on_another() {
    let cluster = tokio::task::spawn_blocking(Cluster::start)
        .await
        .expect("the cluster started");
    let mq = AceMq::builder()
        .url(cluster.url())
        .client_name("acemq-cluster-test")
        .connect()
        .await
        .expect("connect to the cluster");
    let queue = polyq_testkit::unique_name("acemq.cluster");
    mq.client()
        .declare_queue(
            &QueueSpec::new(queue.as_str()).argument("x-queue-type", FieldValue::from("quorum")),
        )
        .await
        .expect("declare a quorum source queue");

    let handled = Arc::new(Mutex::new(Handled::default()));
    let consumer = {
        let handled = handled.clone();
        // Only the quorum source queue: `.dlq` and `.parked` are classic queues, which live on
        // one node and are away while it is (docs/RELIABILITY.md).
        mq.consumer::<u64>(queue.as_str())
            .prefetch(PREFETCH)
            .declare(false)
            .start(move |message: Message<u64>| {
                let handled = handled.clone();
                async move {
                    let mut handled = handled.lock().unwrap();
                    *handled.copies.entry(*message.payload()).or_default() += 1;
                    handled.count += 1;
                    if message.redelivered() {
                        handled.redelivered += 1;
                        handled.first_redelivery.get_or_insert_with(Instant::now);
                    }
                }
            })
            .await
            .expect("consume")
    };

    let publisher = mq.publisher::<u64>("", queue.as_str());
    let publishing = tokio::spawn(async move {
        let mut pending = FuturesUnordered::new();
        let (mut next, mut resent) = (0, 0);
        while next < MESSAGES || !pending.is_empty() {
            if next < MESSAGES && pending.len() < PUBLISH_WINDOW {
                pending.push(confirmed(&publisher, next, Duration::ZERO));
                next += 1;
                continue;
            }
            match pending.next().await.expect("a publish pending") {
                (_, Ok(_)) => {}
                // What a caller is told to do with a transient failure: just after the
                // failover the broker may refuse (nack) publishes to the quorum queue until the
                // client's new channel finds the queue's new leader.
                (n, Err(error)) if error.is_transient() => {
                    resent += 1;
                    pending.push(confirmed(&publisher, n, RETRY_PAUSE));
                }
                (n, Err(error)) => panic!("message {n} not confirmed: {error}"),
            }
        }
        resent
    });

    timeout(LIMIT, async {
        while handled.lock().unwrap().count < BEFORE_KILL {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("messages handled before the kill");
    // Counted from before the kill, so the figure includes the script's own start.
    let killed_at = Instant::now();
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.kill(1);
        cluster
    })
    .await
    .expect("node 1 killed");

    let resent = timeout(LIMIT, publishing)
        .await
        .expect("every publish confirmed in time")
        .expect("every publish confirmed");
    timeout(LIMIT, async {
        while handled.lock().unwrap().copies.len() < MESSAGES as usize {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        let handled = handled.lock().unwrap();
        panic!(
            "every confirmed message handled in time: {} of {MESSAGES} handled ({} deliveries, \
             {} redelivered)",
            handled.copies.len(),
            handled.count,
            handled.redelivered
        )
    });

    {
        let handled = handled.lock().unwrap();
        let resumed = handled
            .first_redelivery
            .map(|at| {
                at.saturating_duration_since(killed_at)
                    .as_millis()
                    .to_string()
            })
            .unwrap_or_else(|| "(no redelivery)".to_owned());
        let duplicates: u32 = handled.copies.values().map(|n| n - 1).sum();
        println!(
            "first redelivery from the new node handled {resumed} ms after the kill; \
             {duplicates} duplicates ({} redelivered); {resent} publishes refused and sent again",
            handled.redelivered
        );
        assert!(
            (0..MESSAGES).all(|n| handled.copies.contains_key(&n)),
            "no confirmed message lost"
        );
        assert!(
            handled.redelivered <= u32::from(PREFETCH),
            "{} redeliveries, more than the prefetch window of {PREFETCH}",
            handled.redelivered
        );
        // A copy that is no redelivery was published twice: its confirm was lost with the node,
        // and it was sent again, at most the publisher's window of them; or it was refused and
        // sent again, and may have reached the queue the first time.
        assert!(
            duplicates <= u32::from(PREFETCH) + PUBLISH_WINDOW as u32 + resent,
            "{duplicates} duplicates, more than the prefetch and publish windows and the {resent} \
             publishes sent again"
        );
    }

    consumer.drain(LIMIT).await;
    mq.client()
        .delete_queue(&queue)
        .await
        .expect("delete the queue");
    mq.close().await.expect("close");
    drop(cluster);
}
