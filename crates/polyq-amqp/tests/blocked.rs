//! Publishing while RabbitMQ blocks the connection. A publish not sent yet waits up to
//! `ClientOptions::blocked_timeout`, then fails with `Error::Blocked` naming the broker's
//! reason, unsent. Publishes the block catches already sent are not failed by any bound
//! (`blocked_timeout`, the resend deadline of `resend_lost`): their confirms wait for the alarm
//! to clear and are then acked, so the queue ends with every message once, none lost and none
//! sent twice.
//!
//! A memory alarm blocks every publisher of its node, so this test raises it on a RabbitMQ node
//! of its own (started on free ports, removed at the end), never on the shared broker. The
//! alarm is cleared and the node removed by drop guards, also when the test fails.

use std::time::Duration;

use polyq_amqp::{
    Client, ClientOptions, Error, Health, OutgoingMessage, Properties, PublishOutcome, QueueSpec,
};
use polyq_testkit::rabbitmq_node::{MemoryAlarm, OwnNode};
use tokio::time::timeout;

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(60);
/// The bounds of the client under test, both far shorter than the alarm.
const BOUND: Duration = Duration::from_millis(500);
/// How long the alarm is held once the publishers are blocked: longer than every bound.
const ALARM: Duration = Duration::from_secs(3);
/// Publishes sent at once as the alarm is raised, so that some are in flight when the block
/// comes.
const IN_FLIGHT: usize = 20;

fn message(queue: &str, body: impl Into<bytes::Bytes>) -> OutgoingMessage {
    OutgoingMessage::new("", queue, Properties::default(), body)
}

#[tokio::test(flavor = "multi_thread")]
async fn publishes_caught_by_a_block_wait_it_out_and_unsent_ones_fail_after_the_blocked_timeout() {
    let node = tokio::task::spawn_blocking(|| OwnNode::start("polyq-blocked"))
        .await
        .expect("the node started");
    let options = ClientOptions::default()
        .blocked_timeout(BOUND)
        .resend_lost(Some(BOUND));
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
    // RabbitMQ blocks a connection, and says so, once it publishes during the alarm: these
    // are sent, and the block holds their confirms back.
    // One sent after the client learnt of the block is held back instead, unsent.
    let (mut caught, mut held_back) = (Vec::new(), Vec::new());
    for n in 0..IN_FLIGHT {
        match client.publish(message(queue, format!("caught {n}"))).await {
            Ok(confirm) => caught.push((n, tokio::spawn(confirm))),
            unsent => {
                assert_blocked(&unsent.map(drop));
                held_back.push(n);
            }
        }
    }
    assert!(!caught.is_empty(), "every publish was held back");
    timeout(LIMIT, health.wait_for(|h| h.blocked().is_some()))
        .await
        .expect("the broker blocks the connection")
        .expect("the client is open");
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
    assert_blocked(&held);

    // The alarm outlasts both bounds; the confirms caught by it are still waiting.
    tokio::time::sleep(ALARM).await;
    assert!(
        caught.iter().all(|(_, confirm)| !confirm.is_finished()),
        "a confirm caught by the block ended while the block lasted"
    );
    drop(alarm);
    for (n, confirm) in caught {
        let outcome = timeout(LIMIT, confirm)
            .await
            .expect("the broker answers once the alarm clears")
            .expect("the confirm task ran");
        assert_eq!(
            outcome.expect("confirm"),
            PublishOutcome::Acked,
            "caught {n}"
        );
    }
    timeout(LIMIT, health.wait_for(|h| h.blocked().is_none()))
        .await
        .expect("the broker unblocks the connection")
        .expect("the client is open");
    let after = client
        .publish(message(queue, "after"))
        .await
        .expect("publish");
    assert_eq!(after.await.expect("confirm"), PublishOutcome::Acked);

    // Every message once: none lost, none sent twice, the one held back not at all.
    let mut bodies = Vec::new();
    while let Some(delivery) = client.get(queue).await.expect("get") {
        bodies.push(String::from_utf8_lossy(&delivery.body).into_owned());
        delivery.ack().await.expect("ack");
    }
    let mut expected = vec!["before".to_owned()];
    expected.extend(
        (0..IN_FLIGHT)
            .filter(|n| !held_back.contains(n))
            .map(|n| format!("caught {n}")),
    );
    expected.push("after".to_owned());
    assert_eq!(bodies, expected);
    client.close().await.expect("close");
}

fn assert_blocked<T: std::fmt::Debug>(outcome: &Result<T, Error>) {
    match outcome {
        Err(
            error @ Error::Blocked {
                exchange, reason, ..
            },
        ) => {
            assert_eq!(exchange, "");
            assert!(reason.contains("memory"), "{reason}");
            assert!(!error.may_have_been_published(), "{error}");
            assert!(error.to_string().contains(reason.as_str()), "{error}");
        }
        other => panic!("expected a blocked error, got {other:?}"),
    }
}
