//! A reservation whose receipt is dropped without being settled is given back at once and
//! delivered again, instead of being held until its channel closes (RabbitMQ, `memory://`) or its
//! deadline lapses (both Redis layouts); a settled one is not settled again. On every binding.

#![cfg(feature = "redis")]

mod runtime_support;

use babelqueue::transport::{ConnectOptions, Transport};
use polyq_testkit::brokers::TestBroker;
use runtime_support::Bound;

async fn a_dropped_receipt_gives_its_message_back(broker: &'static TestBroker) {
    // One delivery in flight at a time: on RabbitMQ and `memory://` the dropped one must leave
    // the prefetch window for anything to be delivered at all.
    let bound = Bound::with(broker, ConnectOptions::default().prefetch(1)).await;
    let queue = bound.name().to_owned();
    let transport = bound.transport();
    let headers = [("traceparent".to_owned(), "00-dropped-01".to_owned())];
    transport
        .publish(&queue, "{\"first\":1}".into(), &headers)
        .await
        .unwrap();

    let first = bound.take(&queue).await;
    let (body, carried) = (first.body.clone(), first.headers.clone());
    drop(first);

    let again = bound.take(&queue).await;
    assert_eq!(again.body, body, "given back unchanged");
    assert_eq!(again.headers, carried, "given back with its headers");
    transport.ack(&again.receipt).await.unwrap();
    drop(again);

    // Settled, then dropped: nothing more happens to it. On RabbitMQ a second settlement of its
    // delivery tag would close the channel, and the next message could not be acknowledged.
    transport
        .publish(&queue, "{\"second\":2}".into(), &[])
        .await
        .unwrap();
    let second = bound.take(&queue).await;
    assert_eq!(&second.body[..], b"{\"second\":2}");
    transport.ack(&second.receipt).await.unwrap();
    transport.unsubscribe(&queue).await.unwrap();
    assert_eq!(bound.depth(&queue).await, 0);
}

polyq_testkit::both_brokers!(
    on memory, rabbitmq, redis, laravel;
    a_dropped_receipt_gives_its_message_back
);
