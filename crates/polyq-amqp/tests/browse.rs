//! Reading a queue without consuming it, on RabbitMQ and the embedded broker: count and order
//! are kept, and a sweep removes exactly its selection.

#[allow(
    dead_code,
    reason = "the fixture is shared with behaviour.rs, which uses all of it"
)]
mod common;

use futures_util::StreamExt as _;
use polyq_amqp::browse::{Swept, browse, sweep};
use polyq_amqp::{
    ClientOptions, ConsumeOptions, OutgoingMessage, Properties, PublishOutcome, QueueSpec,
};

use common::{Fixture, within};
use polyq_testkit::brokers::Fixture as _;

polyq_testkit::both_brokers!(
    #[tokio::test]
    rabbitmq if feature = "amqp";
    browsing_keeps_count_and_order,
    a_sweep_removes_its_selection_and_keeps_the_rest_in_order,
    a_limited_browse_reads_the_head_only,
    a_browse_ends_at_the_depth_it_began_with_while_publishing_goes_on,
    more_than_one_window_keeps_count_and_order_on_classic_and_quorum_queues,
    a_queue_held_by_another_single_active_consumer_is_read_all_the_same,
);

/// A queue holding `count` messages with bodies `0`, `1`, ...
async fn filled(fixture: &Fixture, count: usize) -> String {
    let queue = fixture.name("browse");
    fixture.queue(QueueSpec::new(&queue)).await;
    publish(fixture, &queue, 0..count).await;
    queue
}

/// Publishes bodies `range` to `queue`, many confirms in flight at once.
async fn publish(fixture: &Fixture, queue: &str, range: std::ops::Range<usize>) {
    let mut confirms = Vec::with_capacity(range.len());
    for n in range {
        confirms.push(
            fixture
                .client
                .publish(OutgoingMessage::new(
                    "",
                    queue,
                    Properties::default(),
                    n.to_string(),
                ))
                .await
                .expect("publish"),
        );
    }
    for confirm in confirms {
        assert_eq!(confirm.await.expect("confirm"), PublishOutcome::Acked);
    }
}

async fn bodies(fixture: &Fixture, queue: &str) -> Vec<String> {
    texts(
        within(
            "a browse",
            browse(
                fixture.broker().url(),
                ClientOptions::default(),
                queue,
                None,
            ),
        )
        .await
        .expect("browse"),
    )
}

fn texts(read: Vec<Swept>) -> Vec<String> {
    read.into_iter()
        .map(|swept| String::from_utf8(swept.message.body.to_vec()).expect("utf-8"))
        .collect()
}

fn numbers(range: impl Iterator<Item = usize>) -> Vec<String> {
    range.map(|n| n.to_string()).collect()
}

async fn browsing_keeps_count_and_order(fixture: &'static Fixture) {
    let queue = filled(fixture, 300).await;
    for _ in 0..3 {
        assert_eq!(bodies(fixture, &queue).await, numbers(0..300));
    }
    let info = fixture.client.inspect_queue(&queue).await.expect("inspect");
    assert_eq!(info.message_count, 300);
    // A consumer still gets them all, in order.
    let mut consumed = Vec::new();
    while let Some(delivery) = fixture.client.get(&queue).await.expect("get") {
        consumed.push(String::from_utf8(delivery.body.to_vec()).expect("utf-8"));
        delivery.ack().await.expect("ack");
    }
    assert_eq!(consumed, numbers(0..300));
}

async fn a_sweep_removes_its_selection_and_keeps_the_rest_in_order(fixture: &'static Fixture) {
    let queue = filled(fixture, 100).await;
    let swept = sweep(
        fixture.broker().url(),
        ClientOptions::default(),
        &queue,
        None,
        |message| message.body.last().is_some_and(|digit| *digit == b'7'),
    )
    .await
    .expect("sweep");
    assert_eq!(swept.len(), 100);
    let taken: Vec<String> = swept
        .iter()
        .filter(|swept| swept.taken)
        .map(|swept| String::from_utf8(swept.message.body.to_vec()).expect("utf-8"))
        .collect();
    assert_eq!(taken, numbers((0..100).filter(|n| n % 10 == 7)));
    assert_eq!(
        bodies(fixture, &queue).await,
        numbers((0..100).filter(|n| n % 10 != 7))
    );
}

async fn a_limited_browse_reads_the_head_only(fixture: &'static Fixture) {
    let queue = filled(fixture, 20).await;
    let head = browse(
        fixture.broker().url(),
        ClientOptions::default(),
        &queue,
        Some(5),
    )
    .await
    .expect("browse");
    let head: Vec<&[u8]> = head.iter().map(|swept| &swept.message.body[..]).collect();
    assert_eq!(head, [b"0", b"1", b"2", b"3", b"4"]);
    assert_eq!(bodies(fixture, &queue).await, numbers(0..20));
}

async fn a_browse_ends_at_the_depth_it_began_with_while_publishing_goes_on(
    fixture: &'static Fixture,
) {
    let queue = filled(fixture, 200).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let publisher = tokio::spawn({
        let (queue, stop) = (queue.clone(), stop.clone());
        async move {
            let mut next = 200;
            while !stop.is_cancelled() {
                publish(fixture, &queue, next..next + 1).await;
                next += 1;
            }
            next
        }
    });
    let read = bodies(fixture, &queue).await;
    stop.cancel();
    let published = publisher.await.expect("the publisher");
    assert!(read.len() >= 200, "read {} of at least 200", read.len());
    assert_eq!(read, numbers(0..read.len()));
    // Nothing was held back or lost: a second read, with publishing over, sees them all.
    assert_eq!(bodies(fixture, &queue).await, numbers(0..published));
}

/// Past 65,535 (the largest prefetch count) a read takes a second consumer's window.
async fn more_than_one_window_keeps_count_and_order_on_classic_and_quorum_queues(
    fixture: &'static Fixture,
) {
    let count = usize::from(u16::MAX) + 100;
    for kind in ["classic", "quorum"] {
        let queue = fixture.name(&format!("browse-windows-{kind}"));
        fixture
            .queue(QueueSpec::new(&queue).argument("x-queue-type", kind.into()))
            .await;
        publish(fixture, &queue, 0..count).await;
        for _ in 0..2 {
            // Tens of thousands of messages: longer than the suite's bound on a busy machine.
            let read = tokio::time::timeout(
                std::time::Duration::from_secs(120),
                browse(
                    fixture.broker().url(),
                    ClientOptions::default(),
                    &queue,
                    None,
                ),
            )
            .await
            .expect("a read of two windows within two minutes")
            .expect("browse");
            assert_eq!(texts(read), numbers(0..count), "{kind}");
        }
        let info = fixture.client.inspect_queue(&queue).await.expect("inspect");
        assert_eq!(info.message_count as usize, count, "{kind}");
    }
}

/// A queue with a single active consumer hands a second one nothing; the read goes on with
/// `basic.get` (the embedded broker has no single active consumer, and reads the same).
async fn a_queue_held_by_another_single_active_consumer_is_read_all_the_same(
    fixture: &'static Fixture,
) {
    let queue = fixture.name("browse-single-active");
    fixture
        .queue(QueueSpec::new(&queue).argument("x-single-active-consumer", true.into()))
        .await;
    publish(fixture, &queue, 0..10).await;
    let mut active = fixture
        .client
        .consume(&queue, &ConsumeOptions::default().prefetch(1))
        .await
        .expect("consume");
    let first = within("the first delivery", active.next())
        .await
        .expect("a delivery")
        .expect("a delivery");
    assert_eq!(&first.body[..], b"0");
    assert_eq!(bodies(fixture, &queue).await, numbers(1..10));
    active.cancel().await.expect("cancel");
    drop(first);
    assert_eq!(bodies(fixture, &queue).await, numbers(0..10));
}
