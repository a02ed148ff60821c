//! End-to-end throughput of the embedded broker through the client API: confirmed publishes in
//! a window, consumed with prefetch 1000 and acknowledged one by one, 366-byte bodies.
//!
//! `cargo bench -p polyq-amqp --bench memory`; criterion reports elements/s = messages/s.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt as _;
use polyq_amqp::{Client, ConsumeOptions, OutgoingMessage, Properties, PublishOutcome, QueueSpec};

const MESSAGES: u64 = 100_000;
const SIZE: usize = 366;
const WINDOW: usize = 500;
const PREFETCH: u16 = 1000;
const QUEUE: &str = "bench";

/// Publishes [`MESSAGES`] with at most [`WINDOW`] confirms outstanding while one consumer takes
/// and acknowledges them all.
async fn round_trip(client: &Client, body: &bytes::Bytes) {
    let mut consumer = client
        .consume(QUEUE, &ConsumeOptions::default().prefetch(PREFETCH))
        .await
        .expect("consume");
    let consuming = tokio::spawn(async move {
        for _ in 0..MESSAGES {
            let delivery = consumer
                .next()
                .await
                .expect("a delivery")
                .expect("delivery");
            delivery.ack().await.expect("ack");
        }
        consumer.cancel().await.expect("cancel");
    });
    let mut confirms = Vec::with_capacity(WINDOW);
    for _ in 0..MESSAGES {
        let message = OutgoingMessage::new("", QUEUE, Properties::default(), body.clone());
        confirms.push(client.publish(message).await.expect("publish"));
        if confirms.len() == WINDOW {
            for confirm in confirms.drain(..) {
                assert_eq!(confirm.await.expect("confirm"), PublishOutcome::Acked);
            }
        }
    }
    for confirm in confirms {
        assert_eq!(confirm.await.expect("confirm"), PublishOutcome::Acked);
    }
    consuming.await.expect("consumer task");
}

fn publish_consume_ack(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let client = runtime.block_on(async {
        let client = Client::connect("memory://bench").await.expect("connect");
        client
            .declare_queue(&QueueSpec {
                durable: false,
                ..QueueSpec::new(QUEUE)
            })
            .await
            .expect("declare");
        client
    });
    let body = bytes::Bytes::from(vec![b'x'; SIZE]);

    let mut group = c.benchmark_group("memory");
    group.throughput(Throughput::Elements(MESSAGES));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("publish_consume_ack_366B", |b| {
        b.to_async(&runtime).iter(|| round_trip(&client, &body));
    });
    group.finish();
}

criterion_group!(benches, publish_consume_ack);
criterion_main!(benches);
