//! On a three-node RabbitMQ cluster (`scripts/rabbitmq-cluster`) with no mirroring policy: the
//! classic `Q.dlq` and retry rung of a quorum source queue live on node 3, which is killed with
//! SIGKILL before a message comes that the consumer (on node 1) retries once and then sets
//! aside. RabbitMQ acknowledges a plain publish whose only queue is on a node that is down, and
//! drops it; a mandatory one comes back. The retry engine publishes mandatory and takes a return
//! as a copy that did not land: the retry waits in the consumer instead of the rung, the
//! set-aside holds the delivery and tries again, and the message reaches `Q.dlq` once node 3 is
//! back. Nothing is acknowledged into the dead queue.

use std::collections::HashMap;
use std::time::Duration;

use acemq::retry::RetryPolicy;
use acemq::{AceMq, Envelope, Message, Outcome, topology};
use futures_util::StreamExt as _;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use polyq_amqp::{
    ConsumeOptions, FieldValue, OutgoingMessage, Properties, PublishOutcome, QueueSpec,
};
use polyq_testkit::rabbitmq_cluster::Cluster;
use tokio::sync::mpsc;
use tokio::time::timeout;

/// Upper bound for anything awaited while node 3 is down; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(40);
/// Upper bound for the held message to reach `Q.dlq` once node 3 is back: the engine tries a
/// republish that did not land again at most 30 s after the last try.
const LANDED: Duration = Duration::from_secs(70);
const RUNG_DELAY: Duration = Duration::from_secs(1);

/// Counter totals by name and tags, read from the recorder, whose snapshots reset its counters.
struct Counters {
    snapshotter: Snapshotter,
    totals: HashMap<(String, Vec<(String, String)>), u64>,
}

impl Counters {
    fn install() -> Self {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        Self {
            snapshotter,
            totals: HashMap::new(),
        }
    }

    /// The counter `name` of the series tagged `tag`, summed.
    fn get(&mut self, name: &str, tag: (&str, &str)) -> u64 {
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            if let DebugValue::Counter(n) = value {
                let key = key.key();
                let labels = key
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                *self
                    .totals
                    .entry((key.name().to_owned(), labels))
                    .or_default() += n;
            }
        }
        self.totals
            .iter()
            .filter(|((n, labels), _)| {
                n == name && labels.iter().any(|(k, v)| (k.as_str(), v.as_str()) == tag)
            })
            .map(|(_, total)| total)
            .sum()
    }

    /// Waits until the counter reaches 1. A metric has no event to await, so it is read every
    /// few milliseconds, bounded by [`LIMIT`].
    async fn until_counted(&mut self, name: &str, tag: (&str, &str)) {
        let reached = async {
            while self.get(name, tag) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        timeout(LIMIT, reached)
            .await
            .unwrap_or_else(|_| panic!("{name} {tag:?} not counted"));
    }
}

/// A message for `queue` that says only "probe".
fn probe(queue: &str, mandatory: bool) -> OutgoingMessage {
    let mut message = OutgoingMessage::new("", queue, Properties::default().persistent(), "probe");
    message.mandatory = mandatory;
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_aside_into_a_queue_whose_node_is_down_is_held_until_it_lands() {
    let mut counters = Counters::install();
    let cluster = tokio::task::spawn_blocking(Cluster::start)
        .await
        .expect("the cluster started");
    let queue = polyq_testkit::unique_name("acemq.cluster.set-aside");
    let dlq = topology::dead_letter_queue(&queue);
    let rung = topology::retry_queue(&queue, RUNG_DELAY);
    let policy = RetryPolicy::fixed(2, RUNG_DELAY)
        .expect("a policy")
        .wait_in_broker_from(RUNG_DELAY);

    // Declared from node 1, the quorum source queue has its leader there and stays available.
    // Connected to node 1 alone, so the client is on it even while a revived node 1 is still
    // joining (the cluster's URL would fail over to node 3, the node this test kills).
    let mq = AceMq::builder()
        .url(cluster.node_url(1))
        .client_name("acemq-cluster-test")
        .connect()
        .await
        .expect("connect to the cluster");
    mq.client()
        .declare_queue(
            &QueueSpec::new(queue.as_str()).argument("x-queue-type", FieldValue::from("quorum")),
        )
        .await
        .expect("declare a quorum source queue");
    // A consumer connected to node 3 declares `.dlq`, `.parked` and the rung, classic queues,
    // so they live on node 3.
    let on_node_3 = AceMq::builder()
        .url(cluster.node_url(3))
        .client_name("acemq-cluster-test")
        .connect()
        .await
        .expect("connect to node 3");
    on_node_3
        .consumer::<u32>(queue.as_str())
        .retry(policy.clone())
        .start(|_: Message<u32>| async { Outcome::Accept })
        .await
        .expect("declare the set-aside queues from node 3")
        .drain(LIMIT)
        .await;
    on_node_3.close().await.expect("close");

    let (handled, mut attempts) = mpsc::unbounded_channel();
    let consumer = mq
        .consumer::<u32>(queue.as_str())
        .retry(policy)
        .start(move |message: Message<u32>| {
            let handled = handled.clone();
            async move {
                handled
                    .send((message.envelope().attempt(), message.redelivered()))
                    .unwrap();
                Outcome::retry("still failing")
            }
        })
        .await
        .expect("consume on node 1");

    let cluster = tokio::task::spawn_blocking(move || {
        cluster.kill(3);
        cluster
    })
    .await
    .expect("node 3 killed");
    let sent = mq
        .publisher::<u32>("", queue.as_str())
        .send(&7)
        .await
        .expect("published to the quorum queue");

    // Attempt 1's copy for the rung came back: it waited in the consumer instead. Acknowledged
    // into the dead rung, it would not have come back while node 3 is down.
    for attempt in 1..=2 {
        assert_eq!(
            timeout(LIMIT, attempts.recv())
                .await
                .expect("handled in time"),
            Some((attempt, false)),
            "attempt {attempt}"
        );
    }
    assert_eq!(counters.get("acemq.retry.rung.missing", ("rung", &rung)), 1);
    // Attempt 2 exhausted the policy; its copy for `.dlq` came back, and the delivery is held.
    counters
        .until_counted("acemq.messages.set.aside.failed", ("target", &dlq))
        .await;

    // Why a return must count as a miss: the broker acknowledges a plain publish into the
    // queue whose node is down, and keeps nothing of it.
    let acked = mq
        .client()
        .publish(probe(&dlq, false))
        .await
        .expect("publish");
    assert_eq!(acked.await.expect("answered"), PublishOutcome::Acked);
    let returned = mq
        .client()
        .publish(probe(&dlq, true))
        .await
        .expect("publish");
    assert!(matches!(
        returned.await.expect("answered"),
        PublishOutcome::Returned(_)
    ));

    let cluster = tokio::task::spawn_blocking(move || {
        cluster.revive(3);
        cluster
    })
    .await
    .expect("node 3 back");
    let mut dead_letters = mq
        .client()
        .consume(&dlq, &ConsumeOptions::default().prefetch(1))
        .await
        .expect("consume the dead letters");
    let dead = timeout(LANDED, dead_letters.next())
        .await
        .expect("the held message reached .dlq once node 3 was back")
        .expect("consumer open")
        .expect("delivery");
    dead.ack().await.expect("ack");
    dead_letters.cancel().await.expect("cancel");
    // First in `.dlq`: the acknowledged probe, published before, is not there.
    assert_eq!(&dead.body[..], b"7");
    let envelope = Envelope::from_properties(&dead.properties, &dead.routing_key);
    assert_eq!((envelope.id(), envelope.attempt()), (sent.id(), 2));
    assert_eq!(
        dead.properties.headers["x-acemq-error"].as_str(),
        Some("exhausted 2 attempts: Error: still failing")
    );
    assert!(
        attempts.try_recv().is_err(),
        "redelivered while its set-aside was held"
    );
    let report = consumer.drain(LIMIT).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(
        mq.client()
            .inspect_queue(&queue)
            .await
            .expect("inspect")
            .message_count,
        0
    );

    for name in [
        queue.clone(),
        dlq,
        topology::parked_queue(&queue),
        rung.clone(),
    ] {
        mq.client().delete_queue(&name).await.expect("delete");
    }
    mq.close().await.expect("close");
    drop(cluster);
}
