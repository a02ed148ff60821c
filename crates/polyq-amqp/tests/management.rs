//! The management API client against the real RabbitMQ (its `rabbitmq_management` plugin).
#![cfg(feature = "management")]

use std::time::{Duration, Instant};

use polyq_amqp::management::{Management, ManagementError, ManagementOptions, QueueStats};
use polyq_amqp::{Client, FieldValue, OutgoingMessage, Properties, PublishOutcome, QueueSpec};
use polyq_testkit::{amqp_url, unique_name};

/// The broker's statistics lag the queues by its emission interval (5 s by default): polls
/// until `ready` holds for the listed queue, or fails after a deadline with what was seen.
async fn listed_until(
    api: &Management,
    name: &str,
    ready: impl Fn(&QueueStats) -> bool,
) -> QueueStats {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let queues = api.queues().await.expect("the management API answers");
        let seen = queues.into_iter().find(|queue| queue.name == name);
        match seen {
            Some(queue) if ready(&queue) => return queue,
            seen if Instant::now() > deadline => panic!("{name} never as expected: {seen:?}"),
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

#[tokio::test]
async fn queues_are_listed_with_depths_consumers_and_arguments() {
    let url = amqp_url();
    let client = Client::connect(&url).await.expect("RabbitMQ");
    let source = unique_name("mgmt.orders");
    let dlq = format!("{source}.dlq");
    client
        .declare_queue(
            &QueueSpec::new(&source)
                .argument("x-queue-type", FieldValue::from("quorum"))
                .argument("x-dead-letter-exchange", FieldValue::from("acemq.dlx"))
                .argument("x-dead-letter-routing-key", FieldValue::from(dlq.as_str())),
        )
        .await
        .expect("declare the source");
    client
        .declare_queue(&QueueSpec::new(&dlq))
        .await
        .expect("declare the dead-letter queue");
    for body in ["a", "b", "c"] {
        let message = OutgoingMessage::new("", &dlq, Properties::default(), body);
        let confirm = client.publish(message).await.expect("publish");
        assert_eq!(confirm.await.expect("confirm"), PublishOutcome::Acked);
    }
    let held = client.get(&dlq).await.expect("get").expect("a message");

    let api = Management::new(&url, ManagementOptions::new()).expect("derived from the AMQP URL");
    // The rates and the consumer count can come with a later statistics emission of the node
    // (every 5 s by default) than the depths: all are waited for.
    let listed = listed_until(&api, &dlq, |queue| {
        queue.messages_ready == Some(2)
            && queue.messages_unacknowledged == Some(1)
            && queue.rates.publish.is_some()
            && queue.consumers.is_some()
    })
    .await;
    assert_eq!(listed.queue_type(), "classic");
    assert_eq!(listed.dead_letter_exchange(), None);
    assert!(listed.durable && !listed.exclusive);
    assert_eq!(listed.consumers, Some(0));

    let source_listed = listed_until(&api, &source, |queue| queue.consumers.is_some()).await;
    assert_eq!(source_listed.queue_type(), "quorum");
    assert_eq!(source_listed.dead_letter_exchange(), Some("acemq.dlx"));
    assert_eq!(source_listed.dead_letter_routing_key(), Some(dlq.as_str()));
    assert_eq!(source_listed.vhost, api.vhost());

    let one = api.queue(&dlq).await.expect("describe").expect("exists");
    assert_eq!(one.name, dlq);
    assert_eq!(
        api.queue(&unique_name("mgmt.none")).await.expect("answers"),
        None
    );

    drop(held);
    for queue in [&source, &dlq] {
        client.delete_queue(queue).await.expect("clean up");
    }
    client.close().await.ok();
}

#[tokio::test]
async fn a_wrong_password_is_refused_and_never_shown() {
    let url = amqp_url();
    let api = Management::new(
        &url,
        ManagementOptions::new().url("http://guest:not-the-password@127.0.0.1:15672"),
    )
    .expect("a valid URL");
    let error = api.queues().await.expect_err("refused");
    assert!(error.is_refused() && !error.is_connection(), "{error}");
    let text = polyq_amqp::error_chain(&error);
    assert!(!text.contains("not-the-password"), "{text}");
    assert!(text.contains("`guest`"), "{text}");
}

#[tokio::test]
async fn an_api_that_does_not_answer_is_a_connection_error() {
    let url = amqp_url();
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let api = Management::new(
        &url,
        ManagementOptions::new()
            .url(format!("http://guest:sekrit@127.0.0.1:{port}"))
            .timeout(Duration::from_secs(2)),
    )
    .expect("a valid URL");
    let error = api.queues().await.expect_err("nothing answers");
    assert!(error.is_connection() && error.is_transient(), "{error}");
    let text = polyq_amqp::error_chain(&error);
    assert!(text.contains("rabbitmq_management"), "{text}");
    assert!(!text.contains("sekrit"), "{text}");
}

#[tokio::test]
async fn a_vhost_that_does_not_exist_is_not_found() {
    let url = amqp_url();
    let (base, _) = url.rsplit_once('/').expect("a URL with a vhost");
    let api = Management::new(
        &format!("{base}/{}", unique_name("no-such-vhost")),
        ManagementOptions::new(),
    )
    .expect("a valid URL");
    let error = api.queues().await.expect_err("no vhost");
    assert!(
        matches!(error, ManagementError::NotFound { ref what, .. } if what.starts_with("vhost")),
        "{error}"
    );
    let error = api.queue("q").await.expect_err("no vhost");
    assert!(matches!(error, ManagementError::NotFound { .. }), "{error}");
}
