//! One behavioural suite, two brokers: every test body runs against RabbitMQ (`amqp://`, feature
//! `amqp`) and against the embedded broker (`memory://`), so that a runtime behaves the same on
//! both. Where they differ, the embedded broker is the one to fix.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::StreamExt as _;
use polyq_amqp::{
    Binding, Client, ConsumeOptions, Consumer, Delivery, Error, ExchangeKind, ExchangeSpec,
    FieldTable, FieldValue, OutgoingMessage, Properties, PublishOutcome, QueueSpec,
};
use tokio::time::Instant;

use common::{Fixture, within};

polyq_testkit::both_brokers!(
    #[tokio::test]
    rabbitmq if feature = "amqp";
    headers_of_every_field_type_and_all_properties_round_trip,
    unroutable_mandatory_publish_comes_back_returned,
    ttl_queue_dead_letters_back_to_its_origin_through_an_exchange,
    reject_without_requeue_dead_letters,
    requeue_sets_redelivered,
    prefetch_is_never_exceeded,
    topic_routing_follows_star_and_hash,
    confirm_outcomes,
    publishing_to_a_missing_exchange_fails_with_not_found,
    inspecting_an_exchange_proves_that_it_exists,
    basic_get_fetches_one_message_at_a_time,
    purge_delete_and_counts,
    exclusive_queue_is_refused_to_another_connection,
    server_named_queue,
    closing_a_connection_requeues_its_unsettled_deliveries,
    a_dropped_delivery_is_requeued_and_a_settled_one_is_not_settled_again,
    full_queue_with_reject_publish_nacks,
    oversized_short_strings_are_refused,
    per_message_expiration_dead_letters_with_the_original_expiration,
    an_invalid_expiration_is_refused_before_publishing,
    max_length_drops_the_oldest_into_the_dead_letter_exchange,
    deleting_a_queue_ends_its_consumers,
    a_closed_client_refuses_work_and_its_consumers_end,
    closing_a_client_first_writes_what_it_published,
    exclusive_consumer_keeps_others_off_the_queue,
    auto_delete_queue_goes_with_its_last_consumer,
    redeclaring_differently_fails_as_on_rabbitmq,
    consumers_of_one_queue_take_turns,
    a_cancelled_consumers_prefetch_is_ready_when_cancel_returns,
);

/// How long an absence is watched for: a delivery that a broker was about to make arrives well
/// within it.
const QUIET: Duration = Duration::from_millis(300);

fn transient(name: &str) -> QueueSpec {
    QueueSpec {
        durable: false,
        ..QueueSpec::new(name)
    }
}

fn message(exchange: &str, key: &str, body: &str) -> OutgoingMessage {
    OutgoingMessage::new(exchange, key, Properties::default(), body.to_owned())
}

async fn publish(client: &Client, message: OutgoingMessage) -> PublishOutcome {
    let confirm = client.publish(message).await.expect("publish");
    within("a publisher confirm", confirm)
        .await
        .expect("confirm")
}

async fn acked(client: &Client, exchange: &str, key: &str, body: &str) {
    assert_eq!(
        publish(client, message(exchange, key, body)).await,
        PublishOutcome::Acked,
        "publish {body} to {exchange}/{key}"
    );
}

async fn next(consumer: &mut Consumer) -> Delivery {
    within("a delivery", consumer.next())
        .await
        .expect("the consumer ended")
        .expect("delivery")
}

async fn nothing_more(consumer: &mut Consumer) {
    if let Ok(extra) = tokio::time::timeout(QUIET, consumer.next()).await {
        panic!(
            "unexpected delivery: {:?}",
            extra.map(|d| d.map(|d| d.body))
        );
    }
}

async fn get(client: &Client, queue: &str) -> Delivery {
    client
        .get(queue)
        .await
        .expect("basic.get")
        .unwrap_or_else(|| panic!("no message in {queue}"))
}

fn death_history(delivery: &Delivery) -> Vec<FieldTable> {
    match delivery.properties.headers.get("x-death") {
        Some(FieldValue::Array(entries)) => entries
            .iter()
            .map(|entry| match entry {
                FieldValue::Table(table) => table.clone(),
                other => panic!("x-death entry is not a table: {other:?}"),
            })
            .collect(),
        other => panic!("x-death header is {other:?}"),
    }
}

async fn headers_of_every_field_type_and_all_properties_round_trip(fx: &'static Fixture) {
    let queue = fx.name("headers");
    fx.queue(transient(&queue)).await;

    let mut nested = FieldTable::new();
    nested.insert("inner".into(), FieldValue::I32(7));
    nested.insert("deeper".into(), FieldValue::Table(nested.clone()));
    let mut headers = FieldTable::new();
    for (name, value) in [
        ("bool", FieldValue::Bool(true)),
        ("i8", FieldValue::I8(-8)),
        ("u8", FieldValue::U8(200)),
        ("i16", FieldValue::I16(-1600)),
        ("u16", FieldValue::U16(60_000)),
        ("i32", FieldValue::I32(-320_000)),
        ("u32", FieldValue::U32(4_000_000_000)),
        ("i64", FieldValue::I64(-(1 << 40))),
        ("f32", FieldValue::F32(1.5)),
        ("f64", FieldValue::F64(-2.25)),
        (
            "decimal",
            FieldValue::Decimal {
                scale: 2,
                value: 12_345,
            },
        ),
        ("text", FieldValue::from("héllo")),
        (
            "bytes-in-long-string",
            FieldValue::LongString(vec![0xff, 0, 0xfe]),
        ),
        (
            "array",
            FieldValue::Array(vec![
                FieldValue::from("a"),
                FieldValue::I64(1),
                FieldValue::Bool(false),
                FieldValue::Table(nested.clone()),
            ]),
        ),
        ("timestamp", FieldValue::Timestamp(1_700_000_000)),
        ("table", FieldValue::Table(nested)),
        ("byte-array", FieldValue::ByteArray(vec![0, 1, 255])),
        ("void", FieldValue::Void),
    ] {
        headers.insert(name.into(), value);
    }
    let properties = Properties {
        content_type: Some("application/json".into()),
        content_encoding: Some("identity".into()),
        headers,
        delivery_mode: Some(2),
        priority: Some(5),
        correlation_id: Some("corr-1".into()),
        reply_to: Some("replies".into()),
        expiration: Some("600000".into()),
        message_id: Some("msg-1".into()),
        timestamp: Some(1_700_000_001),
        kind: Some("order.placed".into()),
        user_id: None,
        app_id: Some("polyq-tests".into()),
    };
    let outgoing = OutgoingMessage::new("", &queue, properties.clone(), "{}");
    assert_eq!(publish(&fx.client, outgoing).await, PublishOutcome::Acked);

    let delivery = get(&fx.client, &queue).await;
    for (name, sent) in &properties.headers {
        assert_eq!(
            delivery.properties.headers.get(name),
            Some(sent),
            "header `{name}` ({}) came back changed",
            sent.type_letter()
        );
    }
    assert_eq!(delivery.properties, properties);
    assert_eq!(&delivery.body[..], b"{}");
    assert_eq!(delivery.exchange, "");
    assert_eq!(delivery.routing_key, queue);
    delivery.ack().await.unwrap();
}

async fn unroutable_mandatory_publish_comes_back_returned(fx: &'static Fixture) {
    let exchange = fx.name("unbound");
    fx.exchange(ExchangeSpec {
        durable: false,
        ..ExchangeSpec::new(&exchange, ExchangeKind::Direct)
    })
    .await;
    let mut properties = Properties::default().with_content_type("text/plain");
    properties
        .headers
        .insert("kept".into(), FieldValue::from("yes"));
    for (exchange, key) in [
        ("", fx.name("no-such-queue")),
        (exchange.as_str(), "k".into()),
    ] {
        let outgoing = OutgoingMessage::new(exchange, &key, properties.clone(), "lost?");
        let PublishOutcome::Returned(returned) = publish(&fx.client, outgoing).await else {
            panic!("an unroutable mandatory message to {exchange:?}/{key} was not returned");
        };
        assert_eq!(returned.reply_code, 312);
        assert_eq!(returned.reply_text, "NO_ROUTE");
        assert_eq!(returned.exchange, exchange);
        assert_eq!(returned.routing_key, key);
        assert_eq!(returned.properties, properties);
        assert_eq!(&returned.body[..], b"lost?");
    }
}

async fn ttl_queue_dead_letters_back_to_its_origin_through_an_exchange(fx: &'static Fixture) {
    let exchange = fx.name("origin");
    let work = fx.name("work");
    let rung = fx.name("rung");
    fx.exchange(ExchangeSpec::new(&exchange, ExchangeKind::Direct))
        .await;
    fx.queue(transient(&work)).await;
    fx.client
        .bind_queue(&Binding::new(&work, &exchange, &work))
        .await
        .unwrap();
    fx.queue(
        transient(&rung)
            .argument("x-message-ttl", FieldValue::I32(1000))
            .argument(
                "x-dead-letter-exchange",
                FieldValue::from(exchange.as_str()),
            )
            .argument("x-dead-letter-routing-key", FieldValue::from(work.as_str())),
    )
    .await;
    let mut consumer = fx
        .client
        .consume(&work, &ConsumeOptions::default())
        .await
        .unwrap();

    let published = Instant::now();
    acked(&fx.client, "", &rung, "retry me").await;
    let delivery = next(&mut consumer).await;
    let waited = published.elapsed();

    // The broker's millisecond clock may round the 1000 ms down by a tick, never by more.
    assert!(
        waited >= Duration::from_millis(995),
        "dead-lettered after {waited:?}, before the 1 s TTL ran out"
    );
    assert_eq!(&delivery.body[..], b"retry me");
    assert_eq!(delivery.exchange, exchange);
    assert_eq!(delivery.routing_key, work);
    assert!(!delivery.redelivered);
    let deaths = death_history(&delivery);
    assert_eq!(deaths.len(), 1, "{deaths:?}");
    let death = &deaths[0];
    assert_eq!(death["count"].as_i64(), Some(1));
    assert_eq!(death["reason"], FieldValue::from("expired"));
    assert_eq!(death["queue"], FieldValue::from(rung.as_str()));
    assert_eq!(death["exchange"], FieldValue::from(""));
    assert_eq!(
        death["routing-keys"],
        FieldValue::Array(vec![FieldValue::from(rung.as_str())])
    );
    assert!(matches!(death.get("time"), Some(FieldValue::Timestamp(_))));
    let first = |name: &str| delivery.properties.headers.get(name).cloned();
    assert_eq!(first("x-first-death-reason"), Some("expired".into()));
    assert_eq!(first("x-first-death-queue"), Some(rung.as_str().into()));
    delivery.ack().await.unwrap();
    assert_eq!(
        fx.client.inspect_queue(&rung).await.unwrap().message_count,
        0
    );
}

async fn reject_without_requeue_dead_letters(fx: &'static Fixture) {
    let dlx = fx.name("dlx");
    let work = fx.name("work");
    let dead = fx.name("dead");
    fx.exchange(ExchangeSpec::new(&dlx, ExchangeKind::Fanout))
        .await;
    fx.queue(transient(&dead)).await;
    fx.client
        .bind_queue(&Binding::new(&dead, &dlx, ""))
        .await
        .unwrap();
    fx.queue(transient(&work).argument("x-dead-letter-exchange", FieldValue::from(dlx.as_str())))
        .await;
    let mut dead_consumer = fx
        .client
        .consume(&dead, &ConsumeOptions::default())
        .await
        .unwrap();

    acked(&fx.client, "", &work, "rejected").await;
    acked(&fx.client, "", &work, "nacked").await;
    get(&fx.client, &work).await.reject(false).await.unwrap();
    get(&fx.client, &work).await.nack(false).await.unwrap();

    for body in ["rejected", "nacked"] {
        let delivery = next(&mut dead_consumer).await;
        assert_eq!(&delivery.body[..], body.as_bytes());
        assert_eq!(delivery.exchange, dlx);
        assert_eq!(
            delivery.routing_key, work,
            "the original routing key is kept"
        );
        let death = &death_history(&delivery)[0];
        assert_eq!(death["reason"], FieldValue::from("rejected"));
        assert_eq!(death["queue"], FieldValue::from(work.as_str()));
        assert_eq!(death["count"].as_i64(), Some(1));
        delivery.ack().await.unwrap();
    }
    assert_eq!(
        fx.client.inspect_queue(&work).await.unwrap().message_count,
        0
    );
}

async fn requeue_sets_redelivered(fx: &'static Fixture) {
    let queue = fx.name("requeue");
    fx.queue(transient(&queue)).await;
    acked(&fx.client, "", &queue, "first").await;
    acked(&fx.client, "", &queue, "second").await;

    let first = get(&fx.client, &queue).await;
    assert!(!first.redelivered);
    first.nack(true).await.unwrap();
    let again = get(&fx.client, &queue).await;
    assert_eq!(
        &again.body[..],
        b"first",
        "requeued to its original position"
    );
    assert!(again.redelivered);
    again.reject(true).await.unwrap();

    let mut consumer = fx
        .client
        .consume(&queue, &ConsumeOptions::default())
        .await
        .unwrap();
    let third = next(&mut consumer).await;
    assert_eq!((&third.body[..], third.redelivered), (&b"first"[..], true));
    let fourth = next(&mut consumer).await;
    assert_eq!(
        (&fourth.body[..], fourth.redelivered),
        (&b"second"[..], false)
    );
    third.ack().await.unwrap();
    fourth.ack().await.unwrap();
    assert!(matches!(third.ack().await, Err(Error::AlreadySettled)));
}

async fn prefetch_is_never_exceeded(fx: &'static Fixture) {
    const PREFETCH: u16 = 3;
    let queue = fx.name("prefetch");
    fx.queue(transient(&queue)).await;
    for n in 0..10 {
        acked(&fx.client, "", &queue, &n.to_string()).await;
    }
    let mut consumer = fx
        .client
        .consume(&queue, &ConsumeOptions::default().prefetch(PREFETCH))
        .await
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..PREFETCH {
        held.push(next(&mut consumer).await);
    }
    nothing_more(&mut consumer).await;
    let info = fx.client.inspect_queue(&queue).await.unwrap();
    assert_eq!((info.message_count, info.consumer_count), (7, 1));

    held.remove(0).ack().await.unwrap();
    held.push(next(&mut consumer).await);
    nothing_more(&mut consumer).await;
    let bodies: Vec<&[u8]> = held.iter().map(|d| &d.body[..]).collect();
    assert_eq!(bodies, [b"1", b"2", b"3"]);
    for delivery in held {
        delivery.ack().await.unwrap();
    }
    consumer.cancel().await.unwrap();
}

/// What a consumer had prefetched is back on the queue, ready, by the time `cancel` returns, so
/// a depth read right after counts it (a redrive sizes its work by such a read). Several rounds,
/// as a return that lags behind `cancel` shows only now and then.
async fn a_cancelled_consumers_prefetch_is_ready_when_cancel_returns(fx: &'static Fixture) {
    const MESSAGES: u32 = 20;
    const ROUNDS: u32 = 10;
    let queue = fx.name("cancel-prefetch");
    fx.queue(transient(&queue)).await;
    for n in 0..MESSAGES {
        acked(&fx.client, "", &queue, &n.to_string()).await;
    }
    for round in 1..=ROUNDS {
        let mut consumer = fx
            .client
            .consume(&queue, &ConsumeOptions::default().prefetch(10))
            .await
            .unwrap();
        next(&mut consumer).await.ack().await.unwrap();
        consumer.cancel().await.unwrap();
        let info = fx.client.inspect_queue(&queue).await.unwrap();
        assert_eq!(
            (info.message_count, info.consumer_count),
            (MESSAGES - round, 0),
            "round {round}: the prefetched deliveries are ready again"
        );
    }
}

async fn topic_routing_follows_star_and_hash(fx: &'static Fixture) {
    let exchange = fx.name("topic");
    fx.exchange(ExchangeSpec::new(&exchange, ExchangeKind::Topic))
        .await;
    let star = fx.name("star");
    let tail = fx.name("tail");
    let several = fx.name("several");
    let bindings: [(&str, &[&str]); 3] = [
        (&star, &["order.*"]),
        (&tail, &["#.eu"]),
        (&several, &["order.#", "audit.log", "*.*.us"]),
    ];
    for (queue, keys) in bindings {
        fx.queue(transient(queue)).await;
        for key in keys {
            fx.client
                .bind_queue(&Binding::new(queue, &exchange, *key))
                .await
                .unwrap();
        }
    }
    for key in [
        "order.placed",
        "order.placed.eu",
        "order",
        "audit.log",
        "billing.invoice.us",
        "eu",
        "billing.us",
    ] {
        let outcome = publish(&fx.client, message(&exchange, key, key)).await;
        let routed = !matches!(outcome, PublishOutcome::Returned(_));
        assert_eq!(routed, key != "billing.us", "routing of {key}: {outcome:?}");
    }
    let expected: [(&str, &[&str]); 3] = [
        (&star, &["order.placed"]),
        (&tail, &["order.placed.eu", "eu"]),
        (
            &several,
            &[
                "order.placed",
                "order.placed.eu",
                "order",
                "audit.log",
                "billing.invoice.us",
            ],
        ),
    ];
    for (queue, bodies) in expected {
        let mut received = BTreeSet::new();
        while let Some(delivery) = fx.client.get(queue).await.unwrap() {
            received.insert(String::from_utf8(delivery.body.to_vec()).unwrap());
            delivery.ack().await.unwrap();
        }
        let bodies: BTreeSet<String> = bodies.iter().map(|b| (*b).to_owned()).collect();
        assert_eq!(received, bodies, "messages in the queue bound as {queue}");
    }
}

async fn confirm_outcomes(fx: &'static Fixture) {
    let queue = fx.name("confirm");
    fx.queue(transient(&queue)).await;
    assert_eq!(
        publish(&fx.client, message("", &queue, "routed")).await,
        PublishOutcome::Acked
    );
    let nowhere = fx.name("nowhere");
    assert!(matches!(
        publish(&fx.client, message("", &nowhere, "returned")).await,
        PublishOutcome::Returned(_)
    ));
    let mut optional = message("", &nowhere, "dropped");
    optional.mandatory = false;
    assert_eq!(
        publish(&fx.client, optional).await,
        PublishOutcome::Acked,
        "a non-mandatory unroutable message is acked and dropped"
    );

    // Many confirms in flight at once all resolve, in any order of awaiting.
    let mut confirms = Vec::new();
    for n in 0..50 {
        let outgoing = message("", &queue, &format!("batch {n}"));
        confirms.push(fx.client.publish(outgoing).await.unwrap());
    }
    for confirm in confirms.into_iter().rev() {
        assert_eq!(
            within("a confirm", confirm).await.unwrap(),
            PublishOutcome::Acked
        );
    }
    assert_eq!(
        fx.client.inspect_queue(&queue).await.unwrap().message_count,
        51
    );
}

async fn publishing_to_a_missing_exchange_fails_with_not_found(fx: &'static Fixture) {
    // On RabbitMQ this closes the channel; a separate connection keeps the fixture's clean.
    let client = fx.connect().await;
    let missing = fx.name("missing");
    let outcome = match client.publish(message(&missing, "k", "x")).await {
        Ok(confirm) => within("the confirm", confirm).await,
        Err(error) => Err(error),
    };
    match outcome {
        Err(Error::NotFound { kind, name }) => {
            assert_eq!((kind, name.as_str()), ("exchange", missing.as_str()));
        }
        other => panic!("publish to a missing exchange gave {other:?}"),
    }
}

async fn inspecting_an_exchange_proves_that_it_exists(fx: &'static Fixture) {
    let exchange = fx.name("inspected");
    let missing = fx.client.inspect_exchange(&exchange).await;
    assert!(
        matches!(&missing, Err(Error::NotFound { kind: "exchange", name }) if *name == exchange),
        "{missing:?}"
    );
    // The 404 closed RabbitMQ's channel; the same client goes on with a new one.
    fx.exchange(ExchangeSpec::new(&exchange, ExchangeKind::Topic))
        .await;
    fx.client
        .inspect_exchange(&exchange)
        .await
        .expect("a declared exchange is found");
    fx.client
        .inspect_exchange("amq.fanout")
        .await
        .expect("the system exchanges exist");
    let default = fx.client.inspect_exchange("").await;
    assert!(
        matches!(&default, Err(Error::AccessRefused { reason, .. }) if reason.contains("ACCESS_REFUSED")),
        "the default exchange is not for inspection: {default:?}"
    );
    fx.client.delete_exchange(&exchange).await.unwrap();
    assert!(matches!(
        fx.client.inspect_exchange(&exchange).await,
        Err(Error::NotFound {
            kind: "exchange",
            ..
        })
    ));
}

async fn basic_get_fetches_one_message_at_a_time(fx: &'static Fixture) {
    let queue = fx.name("get");
    fx.queue(transient(&queue)).await;
    assert!(fx.client.get(&queue).await.unwrap().is_none());
    acked(&fx.client, "", &queue, "one").await;
    acked(&fx.client, "", &queue, "two").await;

    let one = get(&fx.client, &queue).await;
    assert_eq!(&one.body[..], b"one");
    assert_eq!(
        fx.client.inspect_queue(&queue).await.unwrap().message_count,
        1
    );
    let two = get(&fx.client, &queue).await;
    assert_eq!(&two.body[..], b"two");
    assert!(fx.client.get(&queue).await.unwrap().is_none());
    one.ack().await.unwrap();
    two.ack().await.unwrap();
    assert!(matches!(
        fx.connect().await.get(&fx.name("missing")).await,
        Err(Error::NotFound { kind: "queue", .. })
    ));
}

async fn purge_delete_and_counts(fx: &'static Fixture) {
    let queue = fx.name("counts");
    let declared = fx.queue(transient(&queue)).await;
    assert_eq!((declared.message_count, declared.consumer_count), (0, 0));
    for n in 0..3 {
        acked(&fx.client, "", &queue, &n.to_string()).await;
    }
    let info = fx.client.inspect_queue(&queue).await.unwrap();
    assert_eq!(
        (info.name.as_str(), info.message_count),
        (queue.as_str(), 3)
    );
    let redeclared = fx.client.declare_queue(&transient(&queue)).await.unwrap();
    assert_eq!(redeclared.message_count, 3);

    let unacked = get(&fx.client, &queue).await;
    assert_eq!(
        fx.client.purge_queue(&queue).await.unwrap(),
        2,
        "purge counts ready messages"
    );
    assert_eq!(
        fx.client.inspect_queue(&queue).await.unwrap().message_count,
        0
    );
    unacked.nack(true).await.unwrap();
    let mut consumer = fx
        .client
        .consume(&queue, &ConsumeOptions::default())
        .await
        .unwrap();
    let requeued = next(&mut consumer).await;
    assert!(
        requeued.redelivered,
        "purge left the unacknowledged message alone"
    );
    requeued.ack().await.unwrap();
    consumer.cancel().await.unwrap();

    acked(&fx.client, "", &queue, "more").await;
    acked(&fx.client, "", &queue, "and more").await;
    assert_eq!(fx.client.delete_queue(&queue).await.unwrap(), 2);
    assert!(matches!(
        fx.connect().await.inspect_queue(&queue).await,
        Err(Error::NotFound { kind: "queue", .. })
    ));
}

async fn exclusive_queue_is_refused_to_another_connection(fx: &'static Fixture) {
    let owner = fx.connect().await;
    let queue = fx.name("exclusive");
    let spec = QueueSpec {
        exclusive: true,
        durable: false,
        ..QueueSpec::new(&queue)
    };
    owner.declare_queue(&spec).await.unwrap();
    acked(&fx.client, "", &queue, "anyone may publish").await;
    assert_eq!(owner.inspect_queue(&queue).await.unwrap().message_count, 1);

    for attempt in ["inspect", "consume"] {
        let other = fx.connect().await;
        let result = match attempt {
            "inspect" => other.inspect_queue(&queue).await.map(drop),
            _ => other
                .consume(&queue, &ConsumeOptions::default())
                .await
                .map(drop),
        };
        assert!(
            matches!(result, Err(Error::Precondition { .. })),
            "{attempt} of another connection's exclusive queue gave {result:?}"
        );
    }

    owner.close().await.unwrap();
    let observer = fx.connect().await;
    within("the exclusive queue to go with its connection", async {
        while observer.inspect_queue(&queue).await.is_ok() {}
    })
    .await;
}

async fn server_named_queue(fx: &'static Fixture) {
    let spec = QueueSpec {
        exclusive: true,
        durable: false,
        ..QueueSpec::new("")
    };
    let info = fx.client.declare_queue(&spec).await.unwrap();
    assert!(info.name.starts_with("amq.gen-"), "{}", info.name);
    let second = fx.client.declare_queue(&spec).await.unwrap();
    assert_ne!(info.name, second.name);
    acked(&fx.client, "", &info.name, "to a named-by-broker queue").await;
    assert_eq!(
        &get(&fx.client, &info.name).await.body[..],
        b"to a named-by-broker queue"
    );
    assert_eq!(fx.client.delete_queue(&second.name).await.unwrap(), 0);
}

async fn a_dropped_delivery_is_requeued_and_a_settled_one_is_not_settled_again(
    fx: &'static Fixture,
) {
    let queue = fx.name("dropped");
    fx.queue(transient(&queue)).await;
    acked(&fx.client, "", &queue, "dropped").await;
    acked(&fx.client, "", &queue, "kept").await;
    // A window of one: the dropped delivery must leave it for anything else to arrive.
    let mut consumer = fx
        .client
        .consume(&queue, &ConsumeOptions::default().prefetch(1))
        .await
        .unwrap();
    let first = next(&mut consumer).await;
    assert_eq!(
        (&first.body[..], first.redelivered),
        (&b"dropped"[..], false)
    );
    drop(first);

    let again = next(&mut consumer).await;
    assert_eq!(
        (&again.body[..], again.redelivered),
        (&b"dropped"[..], true)
    );
    again.ack().await.unwrap();
    drop(again);
    // A second settlement of the same tag would close the channel on RabbitMQ, and this
    // delivery could then not be acknowledged.
    let kept = next(&mut consumer).await;
    assert_eq!((&kept.body[..], kept.redelivered), (&b"kept"[..], false));
    // Split off, the acker alone gives the delivery back when it is dropped.
    let Delivery { acker, .. } = kept;
    drop(acker);
    let kept = next(&mut consumer).await;
    assert_eq!((&kept.body[..], kept.redelivered), (&b"kept"[..], true));
    kept.ack().await.unwrap();
    nothing_more(&mut consumer).await;
    consumer.cancel().await.unwrap();

    // basic.get: the same.
    acked(&fx.client, "", &queue, "got").await;
    drop(get(&fx.client, &queue).await);
    let got = within("the dropped message back", async {
        loop {
            if let Some(delivery) = fx.client.get(&queue).await.unwrap() {
                return delivery;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!((&got.body[..], got.redelivered), (&b"got"[..], true));
    got.ack().await.unwrap();
    let info = fx.client.inspect_queue(&queue).await.unwrap();
    assert_eq!(info.message_count, 0);
}

async fn closing_a_connection_requeues_its_unsettled_deliveries(fx: &'static Fixture) {
    let queue = fx.name("close");
    fx.queue(transient(&queue)).await;
    acked(&fx.client, "", &queue, "unsettled").await;
    let leaving = fx.connect().await;
    let mut consumer = leaving
        .consume(&queue, &ConsumeOptions::default())
        .await
        .unwrap();
    let delivery = next(&mut consumer).await;
    assert!(!delivery.redelivered);
    leaving.close().await.unwrap();
    assert!(
        delivery.ack().await.is_err(),
        "settling on a closed connection"
    );

    let mut successor = fx
        .client
        .consume(&queue, &ConsumeOptions::default())
        .await
        .unwrap();
    let again = next(&mut successor).await;
    assert_eq!(&again.body[..], b"unsettled");
    assert!(again.redelivered);
    again.ack().await.unwrap();
}

async fn full_queue_with_reject_publish_nacks(fx: &'static Fixture) {
    let queue = fx.name("full");
    fx.queue(
        transient(&queue)
            .argument("x-max-length", FieldValue::I32(1))
            .argument("x-overflow", FieldValue::from("reject-publish")),
    )
    .await;
    acked(&fx.client, "", &queue, "fits").await;
    assert_eq!(
        publish(&fx.client, message("", &queue, "over")).await,
        PublishOutcome::Nacked
    );
    assert_eq!(
        fx.client.inspect_queue(&queue).await.unwrap().message_count,
        1
    );
    assert_eq!(&get(&fx.client, &queue).await.body[..], b"fits");
}

async fn oversized_short_strings_are_refused(fx: &'static Fixture) {
    let long = "n".repeat(256);
    let declared = fx.client.declare_queue(&transient(&long)).await;
    assert!(
        matches!(declared, Err(Error::Invalid { .. })),
        "{declared:?}"
    );
    let mut properties = Properties::default();
    properties.headers.insert(long.clone(), FieldValue::Void);
    let outgoing = OutgoingMessage::new("", fx.name("q"), properties, "x");
    let published = fx.client.publish(outgoing).await.map(drop);
    assert!(
        matches!(published, Err(Error::Invalid { .. })),
        "{published:?}"
    );
    // The client stays usable: nothing reached the broker.
    let queue = fx.name("after");
    fx.queue(transient(&queue)).await;
    acked(&fx.client, "", &queue, "still fine").await;
}

async fn per_message_expiration_dead_letters_with_the_original_expiration(fx: &'static Fixture) {
    let queue = fx.name("expiring");
    let dead = fx.name("expired");
    fx.queue(transient(&dead)).await;
    fx.queue(
        transient(&queue)
            .argument("x-dead-letter-exchange", FieldValue::from(""))
            .argument("x-dead-letter-routing-key", FieldValue::from(dead.as_str())),
    )
    .await;
    let mut consumer = fx
        .client
        .consume(&dead, &ConsumeOptions::default())
        .await
        .unwrap();
    let properties = Properties {
        expiration: Some("200".into()),
        ..Properties::default()
    };
    let published = Instant::now();
    let outgoing = OutgoingMessage::new("", &queue, properties, "short-lived");
    assert_eq!(publish(&fx.client, outgoing).await, PublishOutcome::Acked);
    let delivery = next(&mut consumer).await;
    let waited = published.elapsed();
    assert!(
        waited >= Duration::from_millis(195),
        "dead-lettered after {waited:?}, before its 200 ms expiration"
    );
    assert_eq!(&delivery.body[..], b"short-lived");
    assert_eq!(
        delivery.properties.expiration, None,
        "expiration does not travel on"
    );
    let death = &death_history(&delivery)[0];
    assert_eq!(death["reason"], FieldValue::from("expired"));
    assert_eq!(death["original-expiration"], FieldValue::from("200"));
    delivery.ack().await.unwrap();
}

async fn max_length_drops_the_oldest_into_the_dead_letter_exchange(fx: &'static Fixture) {
    let queue = fx.name("bounded");
    let dead = fx.name("overflowed");
    fx.queue(transient(&dead)).await;
    fx.queue(
        transient(&queue)
            .argument("x-max-length", FieldValue::I32(2))
            .argument("x-dead-letter-exchange", FieldValue::from(""))
            .argument("x-dead-letter-routing-key", FieldValue::from(dead.as_str())),
    )
    .await;
    for body in ["1", "2", "3"] {
        acked(&fx.client, "", &queue, body).await;
    }
    let mut consumer = fx
        .client
        .consume(&dead, &ConsumeOptions::default())
        .await
        .unwrap();
    let dropped = next(&mut consumer).await;
    assert_eq!(&dropped.body[..], b"1");
    assert_eq!(
        death_history(&dropped)[0]["reason"],
        FieldValue::from("maxlen")
    );
    dropped.ack().await.unwrap();
    assert_eq!(
        fx.client.inspect_queue(&queue).await.unwrap().message_count,
        2
    );
    assert_eq!(&get(&fx.client, &queue).await.body[..], b"2");
}

async fn deleting_a_queue_ends_its_consumers(fx: &'static Fixture) {
    let queue = fx.name("deleted");
    fx.queue(transient(&queue)).await;
    let mut consumer = fx
        .client
        .consume(&queue, &ConsumeOptions::default())
        .await
        .unwrap();
    fx.client.delete_queue(&queue).await.unwrap();
    // The consumer says why it stops, then ends.
    let reason = within("the consumer to stop", consumer.next()).await;
    assert!(
        matches!(&reason, Some(Err(Error::NotFound { kind: "queue", name })) if *name == queue),
        "a consumer of a deleted queue reports it: {reason:?}"
    );
    let ended = within("the consumer to end", consumer.next()).await;
    assert!(ended.is_none(), "then the stream ends: {ended:?}");
}

async fn a_closed_client_refuses_work_and_its_consumers_end(fx: &'static Fixture) {
    let queue = fx.name("closing");
    fx.queue(transient(&queue)).await;
    acked(&fx.client, "", &queue, "held").await;
    let client = fx.connect().await;
    let mut consumer = client
        .consume(&queue, &ConsumeOptions::default())
        .await
        .unwrap();
    let held = next(&mut consumer).await;
    client.close().await.unwrap();

    let after = within("the consumer to end", consumer.next()).await;
    assert!(
        after.is_none(),
        "the consumer of a closed client ends: {after:?}"
    );
    let settled = held.ack().await;
    assert!(matches!(settled, Err(Error::StaleDelivery)), "{settled:?}");
    let inspected = client.inspect_queue(&queue).await;
    assert!(matches!(inspected, Err(Error::Closed)), "{inspected:?}");
    let published = client.publish(message("", &queue, "late")).await.map(drop);
    assert!(matches!(published, Err(Error::Closed)), "{published:?}");
}

/// A publish returns before its frames are on the socket; closing the client still puts every
/// returned publish on the wire before the connection goes, as if each had been awaited.
async fn closing_a_client_first_writes_what_it_published(fx: &'static Fixture) {
    const MESSAGES: u32 = 2_000;
    let queue = fx.name("close-writes");
    fx.queue(transient(&queue)).await;
    let client = fx.connect().await;
    let body = "x".repeat(366);
    let mut confirms = Vec::new();
    for _ in 0..MESSAGES {
        confirms.push(client.publish(message("", &queue, &body)).await.unwrap());
    }
    client.close().await.unwrap();

    // On RabbitMQ the closed connection's channel hands its messages to the queue process
    // asynchronously, so another connection may count them a moment later; no event says when,
    // so the depth is read until it is complete (or the deadline fails the test).
    within("every publish to reach the queue", async {
        loop {
            let info = fx.client.inspect_queue(&queue).await.unwrap();
            assert!(
                info.message_count <= MESSAGES,
                "{} queued",
                info.message_count
            );
            if info.message_count == MESSAGES {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Every confirm still resolves; what it says depends on whether the broker's ack came
    // before the close.
    within(
        "the confirms to resolve",
        futures_util::future::join_all(confirms),
    )
    .await;
}

async fn exclusive_consumer_keeps_others_off_the_queue(fx: &'static Fixture) {
    let queue = fx.name("exclusive-consumer");
    fx.queue(transient(&queue)).await;
    let exclusive = ConsumeOptions::default().exclusive(true);
    let only = fx.client.consume(&queue, &exclusive).await.unwrap();
    let other = fx.connect().await;
    let refused = other
        .consume(&queue, &ConsumeOptions::default())
        .await
        .map(drop);
    assert!(
        matches!(&refused, Err(Error::AccessRefused { reason, .. }) if reason.contains("in exclusive use")),
        "{refused:?}"
    );
    only.cancel().await.unwrap();
}

async fn auto_delete_queue_goes_with_its_last_consumer(fx: &'static Fixture) {
    let queue = fx.name("auto-delete");
    let spec = QueueSpec {
        auto_delete: true,
        durable: false,
        ..QueueSpec::new(&queue)
    };
    fx.client.declare_queue(&spec).await.unwrap();
    let first = fx
        .client
        .consume(&queue, &ConsumeOptions::default())
        .await
        .unwrap();
    let second = fx
        .client
        .consume(&queue, &ConsumeOptions::default())
        .await
        .unwrap();
    first.cancel().await.unwrap();
    assert!(
        fx.client.inspect_queue(&queue).await.is_ok(),
        "the queue stays while a consumer remains"
    );
    second.cancel().await.unwrap();
    let observer = fx.connect().await;
    within("the queue to go with its last consumer", async {
        while observer.inspect_queue(&queue).await.is_ok() {}
    })
    .await;
}

async fn redeclaring_differently_fails_as_on_rabbitmq(fx: &'static Fixture) {
    let queue = fx.name("redeclared");
    let spec = transient(&queue).argument("x-message-ttl", FieldValue::I32(1000));
    fx.queue(spec.clone()).await;
    fx.client
        .declare_queue(&spec)
        .await
        .expect("an equal redeclaration is accepted");
    let wider = transient(&queue).argument("x-message-ttl", FieldValue::I64(1000));
    fx.client
        .declare_queue(&wider)
        .await
        .expect("integer widths are one class");
    let unknown = spec.clone().argument("x-polyq-ignored", FieldValue::I32(1));
    fx.client
        .declare_queue(&unknown)
        .await
        .expect("unchecked arguments are ignored");

    let precondition = |result: Result<(), Error>, about: &str| {
        assert!(
            matches!(&result, Err(Error::Precondition { reason, .. }) if reason.contains(about)),
            "expected a precondition failure about {about}: {result:?}"
        );
    };
    let other_ttl = transient(&queue).argument("x-message-ttl", FieldValue::I32(2000));
    precondition(
        fx.client.declare_queue(&other_ttl).await.map(drop),
        "x-message-ttl",
    );
    let durable = QueueSpec::new(&queue).argument("x-message-ttl", FieldValue::I32(1000));
    precondition(fx.client.declare_queue(&durable).await.map(drop), "durable");
    let text_ttl = transient(&fx.name("bad-ttl")).argument("x-message-ttl", "soon".into());
    precondition(
        fx.client.declare_queue(&text_ttl).await.map(drop),
        "x-message-ttl",
    );

    let exchange = fx.name("redeclared");
    fx.exchange(ExchangeSpec::new(&exchange, ExchangeKind::Direct))
        .await;
    let topic = ExchangeSpec::new(&exchange, ExchangeKind::Topic);
    precondition(fx.client.declare_exchange(&topic).await, "type");

    let access_refused = |result: Result<(), Error>| {
        assert!(
            matches!(&result, Err(Error::AccessRefused { reason, .. }) if reason.contains("ACCESS_REFUSED")),
            "expected ACCESS_REFUSED: {result:?}"
        );
    };
    let reserved = transient(&format!("amq.{}", fx.name("reserved")));
    match fx.client.declare_queue(&reserved).await {
        Err(Error::AccessRefused { operation, reason }) => {
            assert_eq!(operation, format!("declare queue `{}`", reserved.name));
            assert!(
                reason.contains("reserved prefix"),
                "broker text kept: {reason}"
            );
        }
        other => panic!("expected AccessRefused, got {other:?}"),
    }
    let default = ExchangeSpec::new("", ExchangeKind::Direct);
    access_refused(fx.client.declare_exchange(&default).await);
    access_refused(fx.client.delete_exchange("amq.direct").await);
}

async fn consumers_of_one_queue_take_turns(fx: &'static Fixture) {
    let queue = fx.name("turns");
    fx.queue(transient(&queue)).await;
    let unlimited = ConsumeOptions::default().prefetch(0);
    let mut first = fx.client.consume(&queue, &unlimited).await.unwrap();
    let mut second = fx.client.consume(&queue, &unlimited).await.unwrap();
    for n in 0..6 {
        acked(&fx.client, "", &queue, &n.to_string()).await;
    }
    let mut bodies = BTreeSet::new();
    for consumer in [&mut first, &mut second] {
        for _ in 0..3 {
            let delivery = next(consumer).await;
            bodies.insert(delivery.body.to_vec());
            delivery.ack().await.unwrap();
        }
    }
    nothing_more(&mut first).await;
    nothing_more(&mut second).await;
    assert_eq!(bodies.len(), 6, "each message went to exactly one consumer");
}

/// RabbitMQ closes the channel on an `expiration` that is not a non-negative integer of
/// milliseconds (at most ten years), which would surface as an unconfirmed publish; both brokers
/// refuse it before publishing instead, and the client goes on publishing.
async fn an_invalid_expiration_is_refused_before_publishing(fx: &'static Fixture) {
    let queue = fx.name("bad-expiration");
    fx.queue(transient(&queue)).await;
    for expiration in ["soon", "", "-1", "+1", "1.5", " 1", "315360000001"] {
        let mut bad = message("", &queue, "never enqueued");
        bad.properties.expiration = Some(expiration.to_owned());
        let result = match fx.client.publish(bad).await {
            Ok(confirm) => within("a publisher confirm", confirm).await,
            Err(error) => Err(error),
        };
        match result {
            Err(Error::Invalid { reason, .. }) => assert!(
                reason.contains("`expiration`") && reason.contains(&format!("`{expiration}`")),
                "the property and its value are named: {reason}"
            ),
            other => panic!("expiration {expiration:?}: expected Invalid, got {other:?}"),
        }
    }
    let mut longest = message("", &queue, "kept");
    longest.properties.expiration = Some("315360000000".to_owned());
    assert_eq!(publish(&fx.client, longest).await, PublishOutcome::Acked);
    let info = fx.client.inspect_queue(&queue).await.unwrap();
    assert_eq!(info.message_count, 1, "only the valid publish was enqueued");
}
