//! Worker interceptors, each scenario on the embedded broker, RabbitMQ and Redis (the default
//! layout).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use babelqueue::BabelQueue;
use babelqueue::transport::{AnyTransport, Transport};
use babelqueue::worker::{
    AfterFailure, BoxError, Job, JobContext, JobInterceptor, JobResult, Shutdown, UnknownUrn,
};
use polyq_testkit::brokers::TestBroker;
use serde_json::json;

const URN: &str = "urn:babel:orders:created";
/// How long a bounded consume waits for one more message before it returns.
const IDLE: Duration = Duration::from_millis(500);
/// Upper bound for a message to arrive where a test expects it.
const PATIENCE: Duration = Duration::from_secs(10);

polyq_testkit::both_brokers!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    and redis if feature = "redis";
    before_in_order_after_in_reverse,
    a_refusal_retries_then_dead_letters_with_its_text,
    after_sees_success_and_failure,
    a_panicking_interceptor_is_contained,
    poison_and_unknown_urns_never_reach_interceptors,
    a_stop_during_the_handler_is_seen_as_interrupted,
);

/// What happened, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Before(&'static str, i64),
    Handler(i64),
    After(&'static str, JobResult),
}

type Log = Arc<Mutex<Vec<Event>>>;

fn log() -> Log {
    Arc::default()
}

fn events(log: &Log) -> Vec<Event> {
    log.lock().unwrap().clone()
}

/// Records every call; refuses or panics when told to.
struct Recorder {
    label: &'static str,
    log: Log,
    refuse: Option<&'static str>,
    panic_before_first_attempt: bool,
    panic_after: bool,
}

impl Recorder {
    fn new(label: &'static str, log: &Log) -> Self {
        Self {
            label,
            log: log.clone(),
            refuse: None,
            panic_before_first_attempt: false,
            panic_after: false,
        }
    }
}

impl JobInterceptor for Recorder {
    fn before_handle(&self, job: &JobContext<'_>) -> Result<(), BoxError> {
        let attempts = job.job().attempts();
        self.log
            .lock()
            .unwrap()
            .push(Event::Before(self.label, attempts));
        assert!(
            !(self.panic_before_first_attempt && attempts == 0),
            "{} cannot take a first attempt",
            self.label
        );
        match self.refuse {
            Some(reason) => Err(reason.into()),
            None => Ok(()),
        }
    }

    fn after_handle(&self, job: &JobContext<'_>, result: &JobResult) {
        assert_eq!(job.job().urn(), URN);
        self.log
            .lock()
            .unwrap()
            .push(Event::After(self.label, result.clone()));
        assert!(!self.panic_after, "{} fails after the job", self.label);
    }
}

/// A handler that logs each call and fails (`"gateway timeout"`) when `data.fail` is true.
fn handler(
    log: &Log,
) -> impl Fn(Job) -> std::future::Ready<Result<(), &'static str>> + Send + Sync + 'static {
    let log = log.clone();
    move |job: Job| {
        log.lock().unwrap().push(Event::Handler(job.attempts()));
        let data: serde_json::Value = job.data_as().unwrap();
        std::future::ready(if data["fail"] == true {
            Err("gateway timeout")
        } else {
            Ok(())
        })
    }
}

/// A queue with a unique name on the test's broker; it and its dead-letter queue are deleted
/// at the end of the test.
async fn connect(broker: &'static TestBroker) -> BabelQueue<AnyTransport> {
    let name = broker.remember_queue(broker.name("bq-ic"));
    broker.remember_queue(format!("{name}.dlq"));
    BabelQueue::builder(broker.url())
        .queue(name)
        .connect()
        .await
        .unwrap()
}

fn dlq(queue: &BabelQueue<AnyTransport>) -> String {
    format!("{}.dlq", queue.queue())
}

/// Takes exactly `count` messages off `queue` and checks nothing is left; returns their bodies.
async fn take_all(queue: &BabelQueue<AnyTransport>, name: &str, count: usize) -> Vec<Vec<u8>> {
    let transport = queue.transport();
    let mut bodies = Vec::with_capacity(count);
    for _ in 0..count {
        let reserved = transport
            .reserve(name, PATIENCE)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{name} ran dry after {} messages", bodies.len()));
        transport.ack(&reserved.receipt).await.unwrap();
        bodies.push(reserved.body.to_vec());
    }
    transport.unsubscribe(name).await.unwrap();
    assert_eq!(transport.depth(name).await.unwrap(), 0, "{name} holds more");
    bodies
}

/// Checks the queue and its dead-letter queue are empty.
async fn finish(queue: BabelQueue<AnyTransport>) {
    let dlq = dlq(&queue);
    for name in [queue.queue(), dlq.as_str()] {
        assert_eq!(queue.transport().depth(name).await.unwrap(), 0, "{name}");
    }
}

async fn before_in_order_after_in_reverse(broker: &'static TestBroker) {
    let queue = connect(broker).await;
    queue.publish(URN, &json!({"fail": false})).await.unwrap();
    let log = log();
    let report = queue
        .worker()
        .interceptor(Recorder::new("outer", &log))
        .interceptor(Recorder::new("inner", &log))
        .handle(URN, handler(&log))
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1, "{report:?}");
    assert_eq!(
        events(&log),
        [
            Event::Before("outer", 0),
            Event::Before("inner", 0),
            Event::Handler(0),
            Event::After("inner", JobResult::Succeeded),
            Event::After("outer", JobResult::Succeeded),
        ]
    );
    finish(queue).await;
}

async fn a_refusal_retries_then_dead_letters_with_its_text(broker: &'static TestBroker) {
    const REASON: &str = "tenant umbrella is not served here";
    let queue = connect(broker).await;
    let sent = queue.publish(URN, &json!({"fail": false})).await.unwrap();
    let log = log();
    let refusing = Recorder {
        refuse: Some(REASON),
        ..Recorder::new("tenant", &log)
    };
    let report = queue
        .worker()
        .max_attempts(3)
        .interceptor(Recorder::new("metrics", &log))
        .interceptor(refusing)
        .interceptor(Recorder::new("never", &log))
        .handle(URN, handler(&log))
        .consume(3, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.received, report.retried, report.dead_lettered),
        (3, 2, 1),
        "{report:?}"
    );

    // Neither the handler nor the interceptors after the refusing one run; only those whose
    // `before_handle` passed see the outcome.
    let failed = |next| {
        Event::After(
            "metrics",
            JobResult::Failed {
                error: REASON.to_owned(),
                next,
            },
        )
    };
    let mut expected = Vec::new();
    for (attempts, next) in [
        (0, AfterFailure::Retried),
        (1, AfterFailure::Retried),
        (2, AfterFailure::DeadLettered),
    ] {
        expected.extend([
            Event::Before("metrics", attempts),
            Event::Before("tenant", attempts),
            failed(next),
        ]);
    }
    assert_eq!(events(&log), expected);

    let body = take_all(&queue, &dlq(&queue), 1).await.remove(0);
    let dead = babelqueue::decode(&body).unwrap().envelope;
    assert_eq!(dead.meta().unwrap().id(), sent.meta().unwrap().id());
    assert_eq!(dead.attempts(), Some(3));
    let block = dead.dead_letter().unwrap();
    assert_eq!(block.reason.as_deref(), Some("failed"));
    assert_eq!(block.error.as_deref(), Some(REASON));
    assert_eq!(block.exception.as_deref(), Some("InterceptorRefused"));
    assert_eq!(block.original_queue.as_deref(), Some(queue.queue()));
    finish(queue).await;
}

async fn after_sees_success_and_failure(broker: &'static TestBroker) {
    let queue = connect(broker).await;
    queue.publish(URN, &json!({"fail": true})).await.unwrap();
    queue.publish(URN, &json!({"fail": false})).await.unwrap();
    let log = log();
    let report = queue
        .worker()
        .max_attempts(1)
        .interceptor(Recorder::new("metrics", &log))
        .handle(URN, handler(&log))
        .consume(2, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.succeeded, report.dead_lettered),
        (1, 1),
        "{report:?}"
    );
    let results: Vec<JobResult> = events(&log)
        .into_iter()
        .filter_map(|event| match event {
            Event::After(_, result) => Some(result),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            JobResult::Failed {
                error: "gateway timeout".to_owned(),
                next: AfterFailure::DeadLettered,
            },
            JobResult::Succeeded,
        ]
    );
    assert_eq!(results[0].error(), Some("gateway timeout"));
    assert_eq!(results[1].error(), None);
    let body = take_all(&queue, &dlq(&queue), 1).await.remove(0);
    let block = babelqueue::decode(&body)
        .unwrap()
        .envelope
        .dead_letter()
        .unwrap();
    assert_eq!(block.error.as_deref(), Some("gateway timeout"));
    finish(queue).await;
}

async fn a_panicking_interceptor_is_contained(broker: &'static TestBroker) {
    let queue = connect(broker).await;
    queue.publish(URN, &json!({"fail": false})).await.unwrap();
    let log = log();
    let panicking = Recorder {
        panic_before_first_attempt: true,
        panic_after: true,
        ..Recorder::new("panicky", &log)
    };
    // A panic before the handler fails the job like a panicking handler: it is retried, and the
    // second delivery gets through; a panic after it is ignored, the outer interceptor still
    // runs, and the worker carries on.
    let report = queue
        .worker()
        .max_attempts(2)
        .interceptor(Recorder::new("outer", &log))
        .interceptor(panicking)
        .handle(URN, handler(&log))
        .consume(2, IDLE)
        .await
        .unwrap();
    assert_eq!(
        (report.received, report.retried, report.succeeded),
        (2, 1, 1),
        "{report:?}"
    );
    assert_eq!(
        events(&log),
        [
            Event::Before("outer", 0),
            Event::Before("panicky", 0),
            Event::After(
                "outer",
                JobResult::Failed {
                    error: "panicky cannot take a first attempt".to_owned(),
                    next: AfterFailure::Retried,
                }
            ),
            Event::Before("outer", 1),
            Event::Before("panicky", 1),
            Event::Handler(1),
            Event::After("panicky", JobResult::Succeeded),
            Event::After("outer", JobResult::Succeeded),
        ]
    );
    finish(queue).await;
}

async fn poison_and_unknown_urns_never_reach_interceptors(broker: &'static TestBroker) {
    let queue = connect(broker).await;
    queue
        .transport()
        .publish(queue.queue(), "not json at all".into(), &[])
        .await
        .unwrap();
    queue
        .publish("urn:babel:orders:unknown", &json!({}))
        .await
        .unwrap();
    let log = log();
    let report = queue
        .worker()
        .unknown_urn(UnknownUrn::DeadLetter)
        .interceptor(Recorder::new("metrics", &log))
        .handle(URN, handler(&log))
        .consume(2, IDLE)
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 2, "{report:?}");
    assert_eq!(events(&log), []);
    take_all(&queue, &dlq(&queue), 2).await;
    finish(queue).await;
}

async fn a_stop_during_the_handler_is_seen_as_interrupted(broker: &'static TestBroker) {
    let queue = connect(broker).await;
    let sent = queue.publish(URN, &json!({"fail": false})).await.unwrap();
    let log = log();
    let shutdown = Shutdown::new();
    let (started, mut running) = tokio::sync::mpsc::unbounded_channel();
    let worker = queue
        .worker()
        .shutdown_timeout(Duration::ZERO)
        .interceptor(Recorder::new("metrics", &log))
        .handle(URN, move |_job: Job| {
            let _ = started.send(());
            std::future::pending::<Result<(), &'static str>>()
        })
        .consume_until(1, IDLE, &shutdown);
    let stopper = async {
        running.recv().await.unwrap();
        shutdown.stop();
    };
    let (report, ()) = tokio::join!(worker, stopper);
    let report = report.unwrap();
    assert_eq!(report.released, 1, "{report:?}");
    assert_eq!(
        events(&log),
        [
            Event::Before("metrics", 0),
            Event::After("metrics", JobResult::Interrupted),
        ]
    );
    let body = take_all(&queue, queue.queue(), 1).await.remove(0);
    let back = babelqueue::decode(&body).unwrap().envelope;
    assert_eq!(back.meta().unwrap().id(), sent.meta().unwrap().id());
    finish(queue).await;
}
