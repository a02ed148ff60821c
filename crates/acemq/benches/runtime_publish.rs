//! The publish path on the embedded broker, where no network or broker time hides client
//! cost: a bare transport publish, a transport publish carrying a prebuilt AceMQ envelope (the
//! bytes every AceMQ message carries), and `Publisher::send` (envelope stamped per message,
//! interceptors, metrics, span, confirm). Each publish awaits its confirm.

use acemq::codec::Raw;
use acemq::{AceMq, Envelope};
use criterion::{Criterion, criterion_group, criterion_main};
use polyq_amqp::{Client, OutgoingMessage, Properties, QueueSpec};

fn publish(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let url = "memory://bench-runtime-publish";
    let (mq, raw) = runtime.block_on(async {
        let mq = AceMq::connect(url).await.unwrap();
        let raw = Client::connect(url).await.unwrap();
        let mut queue = QueueSpec::new("bench");
        queue.durable = false;
        queue = queue.argument("x-max-length", polyq_amqp::FieldValue::I32(1000));
        raw.declare_queue(&queue).await.unwrap();
        (mq, raw)
    });
    let body = vec![b'x'; 366];
    let mut with_envelope = Properties::default().with_content_type("application/octet-stream");
    Envelope::of("bench")
        .origin(mq.origin())
        .build()
        .unwrap()
        .write_properties(&mut with_envelope);
    let publisher = mq.publisher_with::<[u8], _>("", "bench", Raw).transient();

    let mut group = c.benchmark_group("publish on memory://");
    group.bench_function("transport, no headers", |b| {
        b.to_async(&runtime).iter(|| async {
            let message = OutgoingMessage::new("", "bench", Properties::default(), body.clone());
            raw.publish(message).await.unwrap().await.unwrap()
        })
    });
    group.bench_function("transport, prebuilt envelope", |b| {
        b.to_async(&runtime).iter(|| async {
            let message = OutgoingMessage::new("", "bench", with_envelope.clone(), body.clone());
            raw.publish(message).await.unwrap().await.unwrap()
        })
    });
    group.bench_function("acemq Publisher::send", |b| {
        b.to_async(&runtime)
            .iter(|| async { publisher.send(&body).await.unwrap() })
    });
    group.finish();
}

criterion_group!(benches, publish);
criterion_main!(benches);
