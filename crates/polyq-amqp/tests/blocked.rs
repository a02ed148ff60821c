//! Publishing while RabbitMQ blocks the connection: a publish waits up to
//! `ClientOptions::blocked_timeout`, then fails with `Error::Blocked` naming the broker's
//! reason, saying whether the message was sent; once the alarm clears publishing works again.
//!
//! A memory alarm blocks every publisher of its node, so this test raises it on a RabbitMQ node
//! of its own (started on free ports, removed at the end), never on the shared broker. The
//! alarm is cleared and the node removed by drop guards, also when the test fails.

use std::time::Duration;

use polyq_amqp::{
    Client, ClientOptions, Error, Health, OutgoingMessage, Properties, PublishOutcome, QueueSpec,
};
use polyq_testkit::rabbitmq_node::OwnNode;
use tokio::time::timeout;

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(60);

/// A memory alarm on `node`: every publishing connection to it is blocked until the drop.
struct MemoryAlarm<'a> {
    node: &'a OwnNode,
}

impl<'a> MemoryAlarm<'a> {
    /// A watermark of 0 raises the alarm at once.
    fn raise(node: &'a OwnNode) -> Self {
        let alarm = Self { node };
        node.ctl(&["set_vm_memory_high_watermark", "0"]);
        alarm
    }
}

impl Drop for MemoryAlarm<'_> {
    fn drop(&mut self) {
        // RabbitMQ's default watermark.
        if let Err(error) = self.node.try_ctl(&["set_vm_memory_high_watermark", "0.4"]) {
            eprintln!("could not clear the memory alarm: {error}");
        }
    }
}

fn message(queue: &str, body: &'static str) -> OutgoingMessage {
    OutgoingMessage::new("", queue, Properties::default(), body)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_publish_on_a_blocked_connection_fails_with_the_brokers_reason_after_the_blocked_timeout()
{
    let node = tokio::task::spawn_blocking(|| OwnNode::start("polyq-blocked"))
        .await
        .expect("the node started");
    let options = ClientOptions::default().blocked_timeout(Duration::from_millis(500));
    let client = Client::connect_with(&node.url(), options)
        .await
        .expect("connect to the node of this test");
    let queue = "polyq.blocked";
    client
        .declare_queue(&QueueSpec::new(queue))
        .await
        .expect("declare the queue");
    let before = client
        .publish(message(queue, "before"))
        .await
        .expect("publish");
    assert_eq!(before.await.expect("confirm"), PublishOutcome::Acked);

    let mut health = client.health_watch();
    let alarm = tokio::task::block_in_place(|| MemoryAlarm::raise(&node));
    // RabbitMQ blocks a connection, and says so, once it publishes during the alarm: this
    // message is sent, then its confirm is held up by the block.
    let caught = timeout(LIMIT, async {
        client
            .publish(message(queue, "caught by the block"))
            .await?
            .await
    })
    .await
    .expect("the confirm gives up on its own");
    assert_blocked(&caught, true);
    let blocked = health.borrow_and_update().clone();
    assert!(
        matches!(&blocked, Health::Up { blocked: Some(reason), .. } if reason.contains("memory")),
        "{blocked:?}"
    );

    // With the block known, the next publish is not sent at all.
    let held = timeout(LIMIT, client.publish(message(queue, "held back")))
        .await
        .expect("the publish gives up on its own")
        .map(drop);
    assert_blocked(&held, false);

    drop(alarm);
    timeout(LIMIT, health.wait_for(|h| h.blocked().is_none()))
        .await
        .expect("the broker unblocks the connection")
        .expect("the client is open");
    let after = client
        .publish(message(queue, "after"))
        .await
        .expect("publish");
    assert_eq!(after.await.expect("confirm"), PublishOutcome::Acked);
    client.close().await.expect("close");
}

fn assert_blocked<T: std::fmt::Debug>(outcome: &Result<T, Error>, sent: bool) {
    match outcome {
        Err(
            error @ Error::Blocked {
                exchange,
                reason,
                may_have_been_published,
                ..
            },
        ) => {
            assert_eq!(exchange, "");
            assert!(reason.contains("memory"), "{reason}");
            assert_eq!(*may_have_been_published, sent, "{error}");
            assert!(error.to_string().contains(reason.as_str()), "{error}");
        }
        other => panic!("expected a blocked error, got {other:?}"),
    }
}
