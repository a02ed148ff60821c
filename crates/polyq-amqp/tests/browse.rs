//! Reading a queue without consuming it, on RabbitMQ and the embedded broker: count and order
//! are kept, and a sweep removes exactly its selection.

#[allow(
    dead_code,
    reason = "the fixture is shared with behaviour.rs, which uses all of it"
)]
mod common;

use polyq_amqp::browse::{browse, sweep};
use polyq_amqp::{ClientOptions, OutgoingMessage, Properties, PublishOutcome, QueueSpec};

use common::{Fixture, within};
use polyq_testkit::brokers::Fixture as _;

polyq_testkit::both_brokers!(
    #[tokio::test]
    rabbitmq if feature = "amqp";
    browsing_keeps_count_and_order,
    a_sweep_removes_its_selection_and_keeps_the_rest_in_order,
    a_limited_browse_reads_the_head_only,
);

/// A queue holding `count` messages with bodies `0`, `1`, ...
async fn filled(fixture: &Fixture, count: usize) -> String {
    let queue = fixture.name("browse");
    fixture.queue(QueueSpec::new(&queue)).await;
    for n in 0..count {
        let confirm = fixture
            .client
            .publish(OutgoingMessage::new(
                "",
                queue.as_str(),
                Properties::default(),
                n.to_string(),
            ))
            .await
            .expect("publish");
        assert_eq!(confirm.await.expect("confirm"), PublishOutcome::Acked);
    }
    queue
}

async fn bodies(fixture: &Fixture, queue: &str) -> Vec<String> {
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
    .expect("browse")
    .into_iter()
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
