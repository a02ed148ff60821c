//! On a three-node RabbitMQ cluster (`scripts/rabbitmq-cluster`): a publisher on node 2 whose
//! publishes to a quorum queue were refused while the queue had no leader publishes again once
//! the queue has one.
//!
//! RabbitMQ 3.x looks up a quorum queue's leader once per channel, on the channel's first
//! publish to it; when that lookup finds a dead node, the channel refuses (nacks) every later
//! publish to the queue for as long as it lives, although the queue has a leader again and
//! channels opened since publish normally. The client replaces a publishing channel that got a
//! nack, so publishing resumes.
//!
//! Nodes 1 (the queue's leader) and 3 are killed before the first publish, so that the queue
//! surely has no leader then; node 3, not node 1, comes back, since a lookup that reached node 1
//! alive again would hide the fault.

use std::time::Duration;

use polyq_amqp::{Client, FieldValue, OutgoingMessage, Properties, PublishOutcome, QueueSpec};
use polyq_testkit::rabbitmq_cluster::Cluster;
use tokio::time::timeout;

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(60);
/// The pause before a refused publish is sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

async fn publish(client: &Client, queue: &str) -> PublishOutcome {
    let message = OutgoingMessage::new("", queue, Properties::default().persistent(), "m");
    client
        .publish(message)
        .await
        .expect("publish")
        .await
        .expect("an answer from the broker")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_refused_while_a_quorum_queue_had_no_leader_go_through_once_it_has_one() {
    let cluster = tokio::task::spawn_blocking(Cluster::start)
        .await
        .expect("the cluster started");
    let queue = polyq_testkit::unique_name("amqp.cluster");
    // Declared on node 1, the queue's leader is node 1.
    let declaring = Client::connect(&cluster.node_url(1))
        .await
        .expect("connect to node 1");
    declaring
        .declare_queue(
            &QueueSpec::new(queue.as_str()).argument("x-queue-type", FieldValue::from("quorum")),
        )
        .await
        .expect("declare a quorum queue");
    declaring.close().await.expect("close");
    let publisher = Client::connect(&cluster.node_url(2))
        .await
        .expect("connect to node 2");

    let cluster = tokio::task::spawn_blocking(move || {
        cluster.kill(1);
        cluster.kill(3);
        cluster
    })
    .await
    .expect("nodes 1 and 3 killed");
    assert_eq!(
        publish(&publisher, &queue).await,
        PublishOutcome::Nacked,
        "a queue without a leader refuses the publish"
    );

    let cluster = tokio::task::spawn_blocking(move || {
        cluster.revive(3);
        cluster
    })
    .await
    .expect("node 3 back");
    timeout(LIMIT, async {
        while publish(&publisher, &queue).await != PublishOutcome::Acked {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    })
    .await
    .expect("a publish acked once nodes 2 and 3 elected a leader");
    let held = publisher
        .inspect_queue(&queue)
        .await
        .expect("inspect the queue")
        .message_count;
    assert_eq!(held, 1, "the acked message is in the queue, no refused one");

    publisher
        .delete_queue(&queue)
        .await
        .expect("delete the queue");
    publisher.close().await.expect("close");
    drop(cluster);
}
