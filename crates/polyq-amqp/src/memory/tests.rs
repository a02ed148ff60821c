//! The embedded broker through the client API. Time-dependent behaviour runs on tokio's paused
//! clock, so TTLs are checked to the millisecond without waiting for them.

use std::time::Duration;

use futures_util::{FutureExt as _, StreamExt as _};

use crate::{
    Binding, Client, ConsumeOptions, Delivery, Error, ExchangeKind, ExchangeSpec, FieldValue,
    OutgoingMessage, Properties, PublishOutcome, QueueSpec,
};

fn url(test: &str) -> String {
    format!("memory://unit-{test}-{}", rand::random::<u64>())
}

async fn publish(client: &Client, exchange: &str, key: &str, body: &str) -> PublishOutcome {
    publish_with(client, exchange, key, Properties::default(), body).await
}

async fn publish_with(
    client: &Client,
    exchange: &str,
    key: &str,
    properties: Properties,
    body: &str,
) -> PublishOutcome {
    let message = OutgoingMessage::new(exchange, key, properties, body.to_owned());
    client.publish(message).await.unwrap().await.unwrap()
}

async fn ready(client: &Client, queue: &str) -> u32 {
    client.inspect_queue(queue).await.unwrap().message_count
}

async fn take(client: &Client, queue: &str) -> Delivery {
    client.get(queue).await.unwrap().expect("a message")
}

/// [`take`], acknowledged: a delivery dropped unsettled would go back to its queue.
async fn take_acked(client: &Client, queue: &str) -> Delivery {
    let delivery = take(client, queue).await;
    delivery.ack().await.unwrap();
    delivery
}

fn x_death(delivery: &Delivery) -> Vec<crate::FieldTable> {
    match delivery.properties.headers.get("x-death") {
        Some(FieldValue::Array(entries)) => entries
            .iter()
            .map(|entry| match entry {
                FieldValue::Table(table) => table.clone(),
                other => panic!("x-death entry {other:?}"),
            })
            .collect(),
        other => panic!("x-death is {other:?}"),
    }
}

/// Lets the expiry tasks run at the current (paused) instant.
async fn settle_timers() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn ttl_dead_letters_exactly_when_due_without_a_consumer() {
    let client = Client::connect(&url("ttl")).await.unwrap();
    client
        .declare_exchange(&ExchangeSpec::new("retry", ExchangeKind::Direct))
        .await
        .unwrap();
    client.declare_queue(&QueueSpec::new("work")).await.unwrap();
    client
        .bind_queue(&Binding::new("work", "retry", "work"))
        .await
        .unwrap();
    let rung = QueueSpec::new("rung")
        .argument("x-message-ttl", FieldValue::I32(1000))
        .argument("x-dead-letter-exchange", "retry".into())
        .argument("x-dead-letter-routing-key", "work".into());
    client.declare_queue(&rung).await.unwrap();

    assert_eq!(
        publish(&client, "", "rung", "again").await,
        PublishOutcome::Acked
    );
    tokio::time::advance(Duration::from_millis(999)).await;
    settle_timers().await;
    assert_eq!(
        (ready(&client, "rung").await, ready(&client, "work").await),
        (1, 0)
    );

    tokio::time::advance(Duration::from_millis(1)).await;
    settle_timers().await;
    assert_eq!(
        (ready(&client, "rung").await, ready(&client, "work").await),
        (0, 1)
    );

    let delivery = take(&client, "work").await;
    assert_eq!(&delivery.body[..], b"again");
    assert_eq!(delivery.exchange, "retry");
    assert_eq!(delivery.routing_key, "work");
    assert!(!delivery.redelivered);
    let deaths = x_death(&delivery);
    assert_eq!(deaths.len(), 1);
    assert_eq!(deaths[0]["reason"], "expired".into());
    assert_eq!(deaths[0]["queue"], "rung".into());
    assert_eq!(deaths[0]["exchange"], "".into());
    assert_eq!(
        deaths[0]["routing-keys"],
        FieldValue::Array(vec!["rung".into()])
    );
    assert_eq!(deaths[0]["count"], FieldValue::I64(1));
}

#[tokio::test(start_paused = true)]
async fn messages_expire_in_order_each_after_its_own_ttl() {
    let client = Client::connect(&url("order")).await.unwrap();
    client.declare_queue(&QueueSpec::new("dead")).await.unwrap();
    let rung = QueueSpec::new("rung")
        .argument("x-message-ttl", FieldValue::I32(100))
        .argument("x-dead-letter-exchange", "".into())
        .argument("x-dead-letter-routing-key", "dead".into());
    client.declare_queue(&rung).await.unwrap();
    publish(&client, "", "rung", "first").await;
    tokio::time::advance(Duration::from_millis(60)).await;
    publish(&client, "", "rung", "second").await;
    tokio::time::advance(Duration::from_millis(40)).await;
    settle_timers().await;
    assert_eq!(
        (ready(&client, "rung").await, ready(&client, "dead").await),
        (1, 1)
    );
    tokio::time::advance(Duration::from_millis(60)).await;
    settle_timers().await;
    assert_eq!(
        (ready(&client, "rung").await, ready(&client, "dead").await),
        (0, 2)
    );
    assert_eq!(&take_acked(&client, "dead").await.body[..], b"first");
    assert_eq!(&take_acked(&client, "dead").await.body[..], b"second");
}

#[tokio::test(start_paused = true)]
async fn expired_messages_without_dead_letter_exchange_are_dropped() {
    let client = Client::connect(&url("drop")).await.unwrap();
    let queue = QueueSpec::new("q").argument("x-message-ttl", FieldValue::I32(10));
    client.declare_queue(&queue).await.unwrap();
    publish(&client, "", "q", "gone").await;
    tokio::time::advance(Duration::from_millis(10)).await;
    settle_timers().await;
    assert_eq!(ready(&client, "q").await, 0);
    assert!(client.get("q").await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn requeued_message_keeps_its_original_expiry() {
    let client = Client::connect(&url("requeue-ttl")).await.unwrap();
    client.declare_queue(&QueueSpec::new("dead")).await.unwrap();
    let queue = QueueSpec::new("q")
        .argument("x-message-ttl", FieldValue::I32(100))
        .argument("x-dead-letter-exchange", "".into())
        .argument("x-dead-letter-routing-key", "dead".into());
    client.declare_queue(&queue).await.unwrap();
    publish(&client, "", "q", "m").await;
    tokio::time::advance(Duration::from_millis(80)).await;
    let delivery = take(&client, "q").await;
    tokio::time::advance(Duration::from_millis(30)).await;
    delivery.nack(true).await.unwrap();
    settle_timers().await;
    assert_eq!(
        (ready(&client, "q").await, ready(&client, "dead").await),
        (0, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn per_message_expiration_applies_at_the_head_and_is_recorded() {
    let client = Client::connect(&url("expiration")).await.unwrap();
    client.declare_queue(&QueueSpec::new("dead")).await.unwrap();
    let queue = QueueSpec::new("q")
        .argument("x-dead-letter-exchange", "".into())
        .argument("x-dead-letter-routing-key", "dead".into());
    client.declare_queue(&queue).await.unwrap();
    publish(&client, "", "q", "forever").await;
    let short = Properties {
        expiration: Some("50".into()),
        ..Properties::default()
    };
    publish_with(&client, "", "q", short, "short").await;
    tokio::time::advance(Duration::from_millis(100)).await;
    settle_timers().await;
    // Behind a message without expiry it waits, as on RabbitMQ.
    assert_eq!(ready(&client, "q").await, 2);
    take(&client, "q").await.ack().await.unwrap();
    settle_timers().await;
    assert_eq!(
        (ready(&client, "q").await, ready(&client, "dead").await),
        (0, 1)
    );
    let dead = take(&client, "dead").await;
    assert_eq!(dead.properties.expiration, None);
    assert_eq!(x_death(&dead)[0]["original-expiration"], "50".into());
}

#[tokio::test(start_paused = true)]
async fn zero_ttl_reaches_a_waiting_consumer_only() {
    let client = Client::connect(&url("zero")).await.unwrap();
    let queue = QueueSpec::new("q").argument("x-message-ttl", FieldValue::I32(0));
    client.declare_queue(&queue).await.unwrap();
    publish(&client, "", "q", "nobody").await;
    settle_timers().await;
    assert_eq!(ready(&client, "q").await, 0);
    let mut consumer = client
        .consume("q", &ConsumeOptions::default())
        .await
        .unwrap();
    publish(&client, "", "q", "someone").await;
    let delivery = consumer.next().await.unwrap().unwrap();
    assert_eq!(&delivery.body[..], b"someone");
}

#[tokio::test]
async fn reject_and_nack_without_requeue_dead_letter_with_the_original_key() {
    let client = Client::connect(&url("reject")).await.unwrap();
    client
        .declare_exchange(&ExchangeSpec::new("dlx", ExchangeKind::Topic))
        .await
        .unwrap();
    client.declare_queue(&QueueSpec::new("dead")).await.unwrap();
    client
        .bind_queue(&Binding::new("dead", "dlx", "#"))
        .await
        .unwrap();
    let work = QueueSpec::new("work").argument("x-dead-letter-exchange", "dlx".into());
    client.declare_queue(&work).await.unwrap();
    publish(&client, "", "work", "one").await;
    publish(&client, "", "work", "two").await;
    take(&client, "work").await.reject(false).await.unwrap();
    take(&client, "work").await.nack(false).await.unwrap();
    for body in ["one", "two"] {
        let dead = take_acked(&client, "dead").await;
        assert_eq!(&dead.body[..], body.as_bytes());
        assert_eq!(dead.routing_key, "work");
        assert_eq!(dead.exchange, "dlx");
        let deaths = x_death(&dead);
        assert_eq!(deaths[0]["reason"], "rejected".into());
        assert_eq!(deaths[0]["queue"], "work".into());
        assert_eq!(
            dead.properties.headers["x-first-death-reason"],
            "rejected".into()
        );
    }
}

#[tokio::test]
async fn rejected_without_dead_letter_exchange_is_dropped() {
    let client = Client::connect(&url("reject-drop")).await.unwrap();
    client.declare_queue(&QueueSpec::new("q")).await.unwrap();
    publish(&client, "", "q", "x").await;
    take(&client, "q").await.reject(false).await.unwrap();
    assert_eq!(ready(&client, "q").await, 0);
}

#[tokio::test]
async fn rejection_back_into_the_same_queue_is_not_a_cycle() {
    let client = Client::connect(&url("self-reject")).await.unwrap();
    let queue = QueueSpec::new("q").argument("x-dead-letter-exchange", "".into());
    client.declare_queue(&queue).await.unwrap();
    publish(&client, "", "q", "x").await;
    take(&client, "q").await.reject(false).await.unwrap();
    let again = take(&client, "q").await;
    assert_eq!(x_death(&again)[0]["count"], FieldValue::I64(1));
    again.reject(false).await.unwrap();
    assert_eq!(
        x_death(&take(&client, "q").await)[0]["count"],
        FieldValue::I64(2)
    );
}

#[tokio::test(start_paused = true)]
async fn expiry_loop_without_rejection_is_dropped() {
    let client = Client::connect(&url("cycle")).await.unwrap();
    let queue = QueueSpec::new("q")
        .argument("x-message-ttl", FieldValue::I32(10))
        .argument("x-dead-letter-exchange", "".into());
    client.declare_queue(&queue).await.unwrap();
    publish(&client, "", "q", "x").await;
    tokio::time::advance(Duration::from_millis(10)).await;
    settle_timers().await;
    assert_eq!(ready(&client, "q").await, 0);
}

#[tokio::test]
async fn max_length_drops_the_oldest_into_the_dead_letter_exchange() {
    let client = Client::connect(&url("maxlen")).await.unwrap();
    client.declare_queue(&QueueSpec::new("dead")).await.unwrap();
    let queue = QueueSpec::new("q")
        .argument("x-max-length", FieldValue::I32(2))
        .argument("x-dead-letter-exchange", "".into())
        .argument("x-dead-letter-routing-key", "dead".into());
    client.declare_queue(&queue).await.unwrap();
    for body in ["1", "2", "3"] {
        publish(&client, "", "q", body).await;
    }
    assert_eq!(ready(&client, "q").await, 2);
    let dead = take(&client, "dead").await;
    assert_eq!(&dead.body[..], b"1");
    assert_eq!(x_death(&dead)[0]["reason"], "maxlen".into());
}

#[tokio::test]
async fn requeue_returns_to_the_original_position_flagged_redelivered() {
    let client = Client::connect(&url("requeue")).await.unwrap();
    client.declare_queue(&QueueSpec::new("q")).await.unwrap();
    for body in ["1", "2", "3"] {
        publish(&client, "", "q", body).await;
    }
    let first = take(&client, "q").await;
    let second = take(&client, "q").await;
    second.nack(true).await.unwrap();
    first.reject(true).await.unwrap();
    let order: Vec<(Vec<u8>, bool)> = {
        let mut order = Vec::new();
        while let Some(delivery) = client.get("q").await.unwrap() {
            order.push((delivery.body.to_vec(), delivery.redelivered));
            delivery.ack().await.unwrap();
        }
        order
    };
    assert_eq!(
        order,
        vec![
            (b"1".to_vec(), true),
            (b"2".to_vec(), true),
            (b"3".to_vec(), false)
        ]
    );
}

#[tokio::test]
async fn settling_twice_is_refused() {
    let client = Client::connect(&url("twice")).await.unwrap();
    client.declare_queue(&QueueSpec::new("q")).await.unwrap();
    publish(&client, "", "q", "x").await;
    let delivery = take(&client, "q").await;
    delivery.ack().await.unwrap();
    assert!(matches!(delivery.ack().await, Err(Error::AlreadySettled)));
    assert!(matches!(
        delivery.reject(true).await,
        Err(Error::AlreadySettled)
    ));
}

#[tokio::test]
async fn prefetch_bounds_in_flight_deliveries_and_round_robins() {
    let client = Client::connect(&url("prefetch")).await.unwrap();
    client.declare_queue(&QueueSpec::new("q")).await.unwrap();
    let options = ConsumeOptions::default().prefetch(2);
    let mut a = client.consume("q", &options).await.unwrap();
    let mut b = client.consume("q", &options).await.unwrap();
    for n in 0..6 {
        publish(&client, "", "q", &n.to_string()).await;
    }
    let a1 = a.next().await.unwrap().unwrap();
    let b1 = b.next().await.unwrap().unwrap();
    let a2 = a.next().await.unwrap().unwrap();
    let _b2 = b.next().await.unwrap().unwrap();
    assert_eq!(
        [&a1.body[..], &b1.body[..], &a2.body[..]],
        [b"0", b"1", b"2"]
    );
    assert_eq!(ready(&client, "q").await, 2);
    assert!(
        a.next().now_or_never().is_none(),
        "a third delivery exceeded prefetch 2"
    );
    a1.ack().await.unwrap();
    let a3 = a.next().await.unwrap().unwrap();
    assert_eq!(&a3.body[..], b"4");
    assert_eq!(ready(&client, "q").await, 1);
}

#[tokio::test]
async fn closing_requeues_unsettled_deliveries_and_makes_them_stale() {
    let url = url("close");
    let consumer_side = Client::connect(&url).await.unwrap();
    let observer = Client::connect(&url).await.unwrap();
    observer.declare_queue(&QueueSpec::new("q")).await.unwrap();
    publish(&observer, "", "q", "x").await;
    let mut consumer = consumer_side
        .consume("q", &ConsumeOptions::default())
        .await
        .unwrap();
    let delivery = consumer.next().await.unwrap().unwrap();
    assert_eq!(ready(&observer, "q").await, 0);
    consumer_side.close().await.unwrap();
    assert!(
        consumer.next().await.is_none(),
        "the consumer ends with its connection"
    );
    assert!(matches!(delivery.ack().await, Err(Error::StaleDelivery)));
    assert!(matches!(
        consumer_side.inspect_queue("q").await,
        Err(Error::Closed)
    ));
    let again = take(&observer, "q").await;
    assert!(again.redelivered);
}

#[tokio::test]
async fn cancel_keeps_held_deliveries_until_the_connection_closes() {
    let url = url("cancel");
    let client = Client::connect(&url).await.unwrap();
    let observer = Client::connect(&url).await.unwrap();
    client.declare_queue(&QueueSpec::new("q")).await.unwrap();
    publish(&client, "", "q", "held").await;
    publish(&client, "", "q", "buffered").await;
    let mut consumer = client
        .consume("q", &ConsumeOptions::default())
        .await
        .unwrap();
    let held = consumer.next().await.unwrap().unwrap();
    consumer.cancel().await.unwrap();
    let info = observer.inspect_queue("q").await.unwrap();
    assert_eq!((info.message_count, info.consumer_count), (1, 0));
    let buffered = take(&observer, "q").await;
    assert_eq!(&buffered.body[..], b"buffered");
    held.ack().await.unwrap();
    drop(client);
    drop(held);
    assert!(observer.get("q").await.unwrap().is_none());
}

#[tokio::test]
async fn dropping_a_consumer_cancels_it() {
    let client = Client::connect(&url("drop-consumer")).await.unwrap();
    client.declare_queue(&QueueSpec::new("q")).await.unwrap();
    let consumer = client
        .consume("q", &ConsumeOptions::default())
        .await
        .unwrap();
    assert_eq!(client.inspect_queue("q").await.unwrap().consumer_count, 1);
    drop(consumer);
    assert_eq!(client.inspect_queue("q").await.unwrap().consumer_count, 0);
}

#[tokio::test]
async fn auto_delete_queue_goes_with_its_last_consumer() {
    let client = Client::connect(&url("auto-delete")).await.unwrap();
    let spec = QueueSpec {
        auto_delete: true,
        ..QueueSpec::new("q")
    };
    client.declare_queue(&spec).await.unwrap();
    let first = client
        .consume("q", &ConsumeOptions::default())
        .await
        .unwrap();
    let second = client
        .consume("q", &ConsumeOptions::default())
        .await
        .unwrap();
    first.cancel().await.unwrap();
    assert!(client.inspect_queue("q").await.is_ok());
    second.cancel().await.unwrap();
    assert!(matches!(
        client.inspect_queue("q").await,
        Err(Error::NotFound { kind: "queue", .. })
    ));
}

#[tokio::test]
async fn exclusive_queue_belongs_to_its_connection() {
    let url = url("exclusive");
    let owner = Client::connect(&url).await.unwrap();
    let other = Client::connect(&url).await.unwrap();
    let spec = QueueSpec {
        exclusive: true,
        ..QueueSpec::new("mine")
    };
    owner.declare_queue(&spec).await.unwrap();
    publish(&other, "", "mine", "publishing is allowed").await;
    for result in [
        other.inspect_queue("mine").await.map(drop),
        other.declare_queue(&spec).await.map(drop),
        other.get("mine").await.map(drop),
        other.purge_queue("mine").await.map(drop),
        other.delete_queue("mine").await.map(drop),
        other
            .consume("mine", &ConsumeOptions::default())
            .await
            .map(drop),
    ] {
        assert!(
            matches!(&result, Err(Error::Precondition { reason, .. }) if reason.contains("RESOURCE_LOCKED")),
            "{result:?}"
        );
    }
    assert_eq!(ready(&owner, "mine").await, 1);
    owner.close().await.unwrap();
    assert!(matches!(
        other.inspect_queue("mine").await,
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test]
async fn exclusive_consumer_refuses_others() {
    let client = Client::connect(&url("exclusive-consumer")).await.unwrap();
    client.declare_queue(&QueueSpec::new("q")).await.unwrap();
    let exclusive = ConsumeOptions {
        exclusive: true,
        ..ConsumeOptions::default()
    };
    let _only = client.consume("q", &exclusive).await.unwrap();
    assert!(matches!(
        client.consume("q", &ConsumeOptions::default()).await,
        Err(Error::AccessRefused { reason, .. }) if reason.contains("in exclusive use")
    ));
    let other = Client::connect(&client.url()).await.unwrap();
    other.declare_queue(&QueueSpec::new("r")).await.unwrap();
    let _shared = other
        .consume("r", &ConsumeOptions::default())
        .await
        .unwrap();
    assert!(matches!(
        client.consume("r", &exclusive).await,
        Err(Error::AccessRefused { reason, .. }) if reason.contains("cannot obtain exclusive access")
    ));
}

#[tokio::test]
async fn brokers_are_shared_by_name_and_separate_across_names() {
    let name = url("shared");
    let a = Client::connect(&name).await.unwrap();
    let b = Client::connect(&format!("{name}/")).await.unwrap();
    let elsewhere = Client::connect(&format!("{name}-other")).await.unwrap();
    a.declare_queue(&QueueSpec::new("q")).await.unwrap();
    assert!(b.inspect_queue("q").await.is_ok());
    assert!(matches!(
        elsewhere.inspect_queue("q").await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(a.url(), name);
    assert!(matches!(
        Client::connect("memory://a/b").await,
        Err(Error::InvalidUrl { .. })
    ));
}

#[tokio::test]
async fn declarations_follow_rabbitmq_equivalence() {
    let client = Client::connect(&url("equivalence")).await.unwrap();
    let direct = ExchangeSpec::new("x", ExchangeKind::Direct);
    client.declare_exchange(&direct).await.unwrap();
    client.declare_exchange(&direct).await.unwrap();
    let topic = ExchangeSpec::new("x", ExchangeKind::Topic);
    assert!(matches!(
        client.declare_exchange(&topic).await,
        Err(Error::Precondition { reason, .. }) if reason.contains("'type'")
    ));
    let ttl = QueueSpec::new("q").argument("x-message-ttl", FieldValue::I32(5));
    client.declare_queue(&ttl).await.unwrap();
    assert!(matches!(
        client.declare_queue(&QueueSpec::new("q")).await,
        Err(Error::Precondition { reason, .. }) if reason.contains("'x-message-ttl'")
    ));
    for refused in [
        client
            .declare_exchange(&ExchangeSpec::new("", ExchangeKind::Direct))
            .await,
        client
            .declare_exchange(&ExchangeSpec::new("amq.mine", ExchangeKind::Direct))
            .await,
        client.delete_exchange("amq.direct").await,
        client
            .declare_queue(&QueueSpec::new("amq.mine"))
            .await
            .map(drop),
        client.bind_queue(&Binding::new("q", "", "q")).await,
    ] {
        assert!(
            matches!(&refused, Err(Error::AccessRefused { reason, .. }) if reason.starts_with("ACCESS_REFUSED - ")),
            "{refused:?}"
        );
    }
    client
        .declare_exchange(&ExchangeSpec::new("amq.topic", ExchangeKind::Topic))
        .await
        .unwrap();
}

#[tokio::test]
async fn missing_objects_are_not_found_except_where_rabbitmq_is_idempotent() {
    let client = Client::connect(&url("missing")).await.unwrap();
    assert!(matches!(
        client.purge_queue("nope").await,
        Err(Error::NotFound { kind: "queue", .. })
    ));
    assert!(matches!(
        client.get("nope").await,
        Err(Error::NotFound { kind: "queue", .. })
    ));
    client.declare_queue(&QueueSpec::new("q")).await.unwrap();
    assert!(matches!(
        client.bind_queue(&Binding::new("q", "nope", "k")).await,
        Err(Error::NotFound {
            kind: "exchange",
            ..
        })
    ));
    assert!(matches!(
        client
            .bind_queue(&Binding::new("nope", "amq.direct", "k"))
            .await,
        Err(Error::NotFound { kind: "queue", .. })
    ));
    assert_eq!(client.delete_queue("nope").await.unwrap(), 0);
    client.delete_exchange("nope").await.unwrap();
    client
        .unbind_queue(&Binding::new("q", "amq.direct", "never"))
        .await
        .unwrap();
}

#[tokio::test]
async fn deleting_removes_messages_and_bindings() {
    let client = Client::connect(&url("delete")).await.unwrap();
    client
        .declare_exchange(&ExchangeSpec::new("x", ExchangeKind::Fanout))
        .await
        .unwrap();
    client.declare_queue(&QueueSpec::new("q")).await.unwrap();
    client
        .bind_queue(&Binding::new("q", "x", ""))
        .await
        .unwrap();
    publish(&client, "x", "", "1").await;
    publish(&client, "x", "", "2").await;
    let mut consumer = client
        .consume("q", &ConsumeOptions::default().prefetch(1))
        .await
        .unwrap();
    let _held = consumer.next().await.unwrap().unwrap();
    assert_eq!(client.delete_queue("q").await.unwrap(), 1);
    assert!(
        matches!(
            consumer.next().await,
            Some(Err(Error::NotFound { kind: "queue", .. }))
        ),
        "the consumer reports that its queue went"
    );
    assert!(consumer.next().await.is_none(), "then it ends");
    client.declare_queue(&QueueSpec::new("q")).await.unwrap();
    let outcome = publish(&client, "x", "", "3").await;
    assert!(
        matches!(outcome, PublishOutcome::Returned(_)),
        "the binding went with the queue"
    );

    client
        .bind_queue(&Binding::new("q", "x", ""))
        .await
        .unwrap();
    client
        .unbind_queue(&Binding::new("q", "x", ""))
        .await
        .unwrap();
    assert!(matches!(
        publish(&client, "x", "", "4").await,
        PublishOutcome::Returned(_)
    ));
    client
        .bind_queue(&Binding::new("q", "x", ""))
        .await
        .unwrap();
    client.delete_exchange("x").await.unwrap();
    client
        .declare_exchange(&ExchangeSpec::new("x", ExchangeKind::Fanout))
        .await
        .unwrap();
    assert!(matches!(
        publish(&client, "x", "", "5").await,
        PublishOutcome::Returned(_)
    ));
}

#[tokio::test]
async fn exchanges_route_by_kind() {
    let client = Client::connect(&url("kinds")).await.unwrap();
    for (name, kind) in [
        ("direct", ExchangeKind::Direct),
        ("fanout", ExchangeKind::Fanout),
        ("headers", ExchangeKind::Headers),
    ] {
        client
            .declare_exchange(&ExchangeSpec::new(name, kind))
            .await
            .unwrap();
    }
    for queue in ["a", "b"] {
        client.declare_queue(&QueueSpec::new(queue)).await.unwrap();
    }
    client
        .bind_queue(&Binding::new("a", "direct", "k"))
        .await
        .unwrap();
    client
        .bind_queue(&Binding::new("b", "direct", "k"))
        .await
        .unwrap();
    client
        .bind_queue(&Binding::new("a", "fanout", "ignored"))
        .await
        .unwrap();
    client
        .bind_queue(&Binding::new("b", "fanout", ""))
        .await
        .unwrap();
    let mut by_tenant = Binding::new("a", "headers", "");
    by_tenant.arguments.insert("tenant".into(), "acme".into());
    client.bind_queue(&by_tenant).await.unwrap();

    publish(&client, "direct", "k", "d").await;
    publish(&client, "fanout", "whatever", "f").await;
    let mut properties = Properties::default();
    properties.headers.insert("tenant".into(), "acme".into());
    publish_with(&client, "headers", "", properties, "h").await;
    assert!(matches!(
        publish(&client, "direct", "other", "-").await,
        PublishOutcome::Returned(_)
    ));
    assert!(matches!(
        publish(&client, "headers", "", "-").await,
        PublishOutcome::Returned(_)
    ));
    assert_eq!(
        (ready(&client, "a").await, ready(&client, "b").await),
        (3, 2)
    );
}

#[tokio::test]
async fn a_queue_bound_twice_gets_one_copy() {
    let client = Client::connect(&url("dedup")).await.unwrap();
    client
        .declare_exchange(&ExchangeSpec::new("t", ExchangeKind::Topic))
        .await
        .unwrap();
    client.declare_queue(&QueueSpec::new("q")).await.unwrap();
    client
        .bind_queue(&Binding::new("q", "t", "a.*"))
        .await
        .unwrap();
    client
        .bind_queue(&Binding::new("q", "t", "#"))
        .await
        .unwrap();
    client
        .bind_queue(&Binding::new("q", "t", "#"))
        .await
        .unwrap();
    publish(&client, "t", "a.b", "x").await;
    assert_eq!(ready(&client, "q").await, 1);
}

#[tokio::test]
async fn unroutable_non_mandatory_is_acked_and_dropped() {
    let client = Client::connect(&url("drop-unroutable")).await.unwrap();
    let mut message = OutgoingMessage::new("", "nowhere", Properties::default(), "x");
    message.mandatory = false;
    let outcome = client.publish(message).await.unwrap().await.unwrap();
    assert_eq!(outcome, PublishOutcome::Acked);
}

#[test]
fn expiry_survives_the_runtime_that_started_it() {
    let url = url("runtimes");
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let spec = QueueSpec::new("q")
        .argument("x-message-ttl", FieldValue::I32(10))
        .argument("x-dead-letter-exchange", "".into())
        .argument("x-dead-letter-routing-key", "dead".into());
    runtime().block_on(async {
        let client = Client::connect(&url).await.unwrap();
        client.declare_queue(&QueueSpec::new("dead")).await.unwrap();
        client.declare_queue(&spec).await.unwrap();
    });
    runtime().block_on(async {
        let client = Client::connect(&url).await.unwrap();
        publish(&client, "", "q", "x").await;
    });
    runtime().block_on(async {
        let client = Client::connect(&url).await.unwrap();
        // Using the queue restarts its expiry task on this runtime.
        assert_eq!(ready(&client, "q").await, 1);
        tokio::time::advance(Duration::from_millis(10)).await;
        settle_timers().await;
        assert_eq!(ready(&client, "dead").await, 1);
    });
}

#[tokio::test]
async fn reject_publish_overflow_nacks_and_may_dead_letter() {
    let client = Client::connect(&url("overflow")).await.unwrap();
    client.declare_queue(&QueueSpec::new("dead")).await.unwrap();
    client
        .declare_queue(&QueueSpec::new("other"))
        .await
        .unwrap();
    client
        .declare_exchange(&ExchangeSpec::new("both", ExchangeKind::Fanout))
        .await
        .unwrap();
    for (name, overflow) in [("plain", "reject-publish"), ("dlx", "reject-publish-dlx")] {
        let spec = QueueSpec::new(name)
            .argument("x-max-length", FieldValue::I32(1))
            .argument("x-overflow", overflow.into())
            .argument("x-dead-letter-exchange", "".into())
            .argument("x-dead-letter-routing-key", "dead".into());
        client.declare_queue(&spec).await.unwrap();
        assert_eq!(
            publish(&client, "", name, "fits").await,
            PublishOutcome::Acked
        );
        assert_eq!(
            publish(&client, "", name, "over").await,
            PublishOutcome::Nacked
        );
        assert_eq!(ready(&client, name).await, 1);
    }
    let dead = take(&client, "dead").await;
    assert_eq!(&dead.body[..], b"over");
    assert_eq!(x_death(&dead)[0]["reason"], "maxlen".into());
    assert!(
        client.get("dead").await.unwrap().is_none(),
        "reject-publish drops"
    );

    client
        .bind_queue(&Binding::new("plain", "both", ""))
        .await
        .unwrap();
    client
        .bind_queue(&Binding::new("other", "both", ""))
        .await
        .unwrap();
    assert_eq!(
        publish(&client, "both", "", "split").await,
        PublishOutcome::Nacked
    );
    assert_eq!(
        ready(&client, "other").await,
        1,
        "the queue with room keeps its copy"
    );
}

#[tokio::test]
async fn oversized_short_strings_are_refused_before_reaching_the_broker() {
    let client = Client::connect(&url("limits")).await.unwrap();
    let long = "n".repeat(256);
    assert!(matches!(
        client.declare_queue(&QueueSpec::new(long.as_str())).await,
        Err(Error::Invalid { .. })
    ));
    let mut properties = Properties::default();
    properties.headers.insert(long.clone(), "v".into());
    let message = OutgoingMessage::new("", "q", properties, "x");
    assert!(matches!(
        client.publish(message).await,
        Err(Error::Invalid { .. })
    ));
    let message = OutgoingMessage::new("", long, Properties::default(), "x");
    assert!(matches!(
        client.publish(message).await,
        Err(Error::Invalid { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_publishers_and_consumers_settle_every_message_exactly_once() {
    const PUBLISHERS: usize = 3;
    const PER_PUBLISHER: usize = 3000;
    let url = url("concurrent");
    let client = Client::connect(&url).await.unwrap();
    client.declare_queue(&QueueSpec::new("q")).await.unwrap();
    let (acked_tx, mut acked_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut consumers = Vec::new();
    for _ in 0..3 {
        let client = Client::connect(&url).await.unwrap();
        let acked = acked_tx.clone();
        let mut consumer = client
            .consume("q", &ConsumeOptions::default().prefetch(8))
            .await
            .unwrap();
        consumers.push(tokio::spawn(async move {
            // The stream runs until the queue is deleted at the end of the test.
            while let Some(Ok(delivery)) = consumer.next().await {
                let body = delivery.body.clone();
                // Some messages (last byte a multiple of 7) go back once, mixing requeues in.
                if !delivery.redelivered && body.last().is_some_and(|b| b % 7 == 0) {
                    delivery.nack(true).await.unwrap();
                } else {
                    delivery.ack().await.unwrap();
                    acked.send(body).unwrap();
                }
            }
        }));
    }
    drop(acked_tx);
    let publishers: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            let client = client.clone();
            tokio::spawn(async move {
                for n in 0..PER_PUBLISHER {
                    let body = format!("{p}-{n}");
                    let outcome = publish(&client, "", "q", &body).await;
                    assert_eq!(outcome, PublishOutcome::Acked);
                }
            })
        })
        .collect();
    for publisher in publishers {
        publisher.await.unwrap();
    }
    let mut seen = std::collections::HashSet::new();
    while seen.len() < PUBLISHERS * PER_PUBLISHER {
        let body = tokio::time::timeout(Duration::from_secs(10), acked_rx.recv())
            .await
            .expect("every message is consumed")
            .expect("consumers run");
        assert!(seen.insert(body.clone()), "acked twice: {body:?}");
    }
    let info = client.inspect_queue("q").await.unwrap();
    assert_eq!((info.message_count, info.consumer_count), (0, 3));
    client.delete_queue("q").await.unwrap();
    for consumer in consumers {
        consumer.await.unwrap();
    }
}
