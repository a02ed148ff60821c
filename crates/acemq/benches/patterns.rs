//! Request/reply round trips with 1 and with 64 requests in flight, and runs through a
//! three-step pipeline with 64 in flight, on RabbitMQ and on `memory://` side by side.

use std::sync::Arc;
use std::time::Duration;

use acemq::patterns::pipeline::Pipeline;
use acemq::patterns::request_reply::{Requester, Responder, respond};
use acemq::{AceMq, Consumer, Message};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use polyq_amqp::QueueSpec;
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

const IN_FLIGHT: usize = 64;

struct Setup {
    mq: AceMq,
    queue: String,
    responder: Option<Responder>,
    requester: Option<Arc<Requester>>,
    pipeline: Pipeline,
    steps: Vec<Consumer>,
    finished: mpsc::UnboundedReceiver<()>,
}

async fn setup(url: &str) -> Setup {
    let mq = AceMq::connect(url).await.unwrap();
    let queue = polyq_testkit::unique_name("acemq.bench.rr");
    mq.client()
        .declare_queue(&QueueSpec::new(queue.as_str()))
        .await
        .unwrap();
    let responder = respond(
        &mq,
        mq.consumer::<u64>(queue.as_str())
            .concurrency(8)
            .prefetch(IN_FLIGHT as u16),
        |m: Message<u64>| async move { Ok::<_, std::convert::Infallible>(m.payload() + 1) },
    )
    .await
    .unwrap();
    let requester = Arc::new(Requester::start(&mq).await.unwrap());
    let pipeline = Pipeline::new(
        &mq,
        &polyq_testkit::unique_name("acemq.bench.pl"),
        ["one", "two", "three"],
    )
    .unwrap();
    pipeline.declare().await.unwrap();
    let (tx, finished) = mpsc::unbounded_channel();
    let mut steps = Vec::new();
    for step in ["one", "two"] {
        steps.push(
            pipeline
                .step(
                    step,
                    |c| c.concurrency(8).prefetch(IN_FLIGHT as u16),
                    |m: Message<Value>| async move {
                        Ok::<_, std::convert::Infallible>(Some(m.payload().clone()))
                    },
                )
                .await
                .unwrap(),
        );
    }
    steps.push(
        pipeline
            .step(
                "three",
                |c| c.concurrency(8).prefetch(IN_FLIGHT as u16),
                move |_m: Message<Value>| {
                    let tx = tx.clone();
                    async move {
                        tx.send(()).ok();
                        Ok::<_, std::convert::Infallible>(None)
                    }
                },
            )
            .await
            .unwrap(),
    );
    Setup {
        mq,
        queue,
        responder: Some(responder),
        requester: Some(requester),
        pipeline,
        steps,
        finished,
    }
}

async fn teardown(mut s: Setup) {
    s.responder
        .take()
        .unwrap()
        .drain(Duration::from_secs(10))
        .await;
    Arc::into_inner(s.requester.take().unwrap())
        .unwrap()
        .close()
        .await
        .unwrap();
    for consumer in s.steps.drain(..) {
        consumer.drain(Duration::from_secs(10)).await;
    }
    let client = s.mq.client();
    let mut queues = vec![s.queue.clone()];
    for step in s.pipeline.steps() {
        queues.push(s.pipeline.queue_of(step));
    }
    for queue in queues {
        for name in [
            queue.clone(),
            format!("{queue}.dlq"),
            format!("{queue}.parked"),
        ] {
            client.delete_queue(&name).await.ok();
        }
    }
    client.delete_exchange(s.pipeline.name()).await.ok();
    s.mq.close().await.ok();
}

async fn requests(s: &Setup, n: usize) {
    let requester = s.requester.as_ref().unwrap();
    let calls = (0..n as u64).map(|i| async move {
        let answer: u64 = requester.request("", &s.queue, &i).await.unwrap();
        assert_eq!(answer, i + 1);
    });
    futures_util::future::join_all(calls).await;
}

async fn runs(s: &mut Setup, n: usize) {
    for i in 0..n {
        s.pipeline.start(&json!(i)).await.unwrap();
    }
    for _ in 0..n {
        s.finished.recv().await.unwrap();
    }
}

fn patterns(c: &mut Criterion) {
    let runtime = Runtime::new().unwrap();
    let brokers = [
        (
            "memory",
            format!("memory://{}", polyq_testkit::unique_name("bench")),
        ),
        ("rabbitmq", polyq_testkit::amqp_url()),
    ];
    for (broker, url) in brokers {
        let mut s = runtime.block_on(setup(&url));
        let mut group = c.benchmark_group(format!("patterns/{broker}"));
        for in_flight in [1, IN_FLIGHT] {
            group.throughput(Throughput::Elements(in_flight as u64));
            group.bench_with_input(
                BenchmarkId::new("request_reply", in_flight),
                &in_flight,
                |b, &n| b.iter(|| runtime.block_on(requests(&s, n))),
            );
        }
        group.throughput(Throughput::Elements(IN_FLIGHT as u64));
        group.bench_function(BenchmarkId::new("pipeline_3_steps", IN_FLIGHT), |b| {
            b.iter(|| runtime.block_on(runs(&mut s, IN_FLIGHT)))
        });
        group.finish();
        runtime.block_on(teardown(s));
    }
}

criterion_group!(benches, patterns);
criterion_main!(benches);
