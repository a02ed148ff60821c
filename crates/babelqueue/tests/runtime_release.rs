//! A zero-delay release puts the message at the end of its queue, as the Go and Python SDKs
//! republish it, so the next one queued is delivered before it comes back: on RabbitMQ and
//! `memory://` a republish confirmed before the original is acknowledged (a `basic.nack` with
//! requeue would hand it straight back to the consumer that released it), on Redis the end of
//! the list (default layout) or a due `:delayed` member (Laravel layout).

#![cfg(feature = "redis")]

mod runtime_support;

use std::time::Duration;

use babelqueue::transport::{ConnectOptions, Transport};
use polyq_testkit::brokers::TestBroker;
use runtime_support::Bound;

async fn zero_delay_release_goes_behind_the_next_job(broker: &'static TestBroker) {
    // One delivery in flight at a time, so what comes next is what the broker hands out next.
    let bound = Bound::with(broker, ConnectOptions::default().prefetch(1)).await;
    let queue = bound.name().to_owned();
    let transport = bound.transport();
    for body in ["{\"first\":1}", "{\"second\":2}"] {
        let headers = [("traceparent".to_owned(), "00-release-01".to_owned())];
        transport
            .publish(&queue, body.into(), &headers)
            .await
            .unwrap();
    }

    let first = bound.take(&queue).await;
    assert_eq!(&first.body[..], b"{\"first\":1}");
    transport
        .release(&first.receipt, Duration::ZERO)
        .await
        .unwrap();

    let second = bound.take_and_ack(&queue).await;
    assert_eq!(
        String::from_utf8_lossy(&second.body),
        "{\"second\":2}",
        "the released job came back before the one queued behind it"
    );
    let again = bound.take_and_ack(&queue).await;
    assert_eq!(&again.body[..], b"{\"first\":1}", "released unchanged");
    assert_eq!(again.headers, first.headers, "released with its headers");
    transport.unsubscribe(&queue).await.unwrap();
    assert_eq!(bound.depth(&queue).await, 0);
}

polyq_testkit::both_brokers!(
    on memory, rabbitmq, redis, laravel;
    zero_delay_release_goes_behind_the_next_job
);
