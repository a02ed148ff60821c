//! Out-of-band headers (`traceparent`, `tracestate`, `bq-replay-bypass`) stay with a message
//! through a retry, a dead-letter move and a redrive, on every binding that carries headers:
//! `memory://`, RabbitMQ (AMQP headers) and the default Redis layout (its header frame). The
//! Laravel layout has no header channel (`capabilities().headers` is false).

#![cfg(feature = "redis")]

mod runtime_support;

use babelqueue::redrive::RedriveOptions;
use babelqueue::transport::Transport;
use babelqueue::worker::{Job, REPLAY_BYPASS_HEADER};
use polyq_testkit::brokers::TestBroker;
use runtime_support::{Bound, IDLE};
use serde_json::json;
use tokio::sync::mpsc;

const URN: &str = "urn:babel:orders:created";
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const TRACESTATE: &str = "congo=t61rcWkgMzE";

fn headers(bypass: bool) -> Vec<(String, String)> {
    let mut headers = vec![
        ("traceparent".to_owned(), TRACEPARENT.to_owned()),
        ("tracestate".to_owned(), TRACESTATE.to_owned()),
    ];
    if bypass {
        headers.push((REPLAY_BYPASS_HEADER.to_owned(), "1".to_owned()));
    }
    headers
}

/// The three headers of `seen`, in a fixed order, `None` where absent.
fn out_of_band(seen: &[(String, String)]) -> [Option<String>; 3] {
    ["traceparent", "tracestate", REPLAY_BYPASS_HEADER].map(|name| {
        seen.iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.clone())
    })
}

fn expected(bypass: bool) -> [Option<String>; 3] {
    out_of_band(&headers(bypass))
}

/// A worker that fails every job, reporting the attempt and the headers it saw.
async fn fail_until_dead_lettered(
    bound: &Bound,
    max_attempts: u32,
) -> Vec<(i64, [Option<String>; 3])> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let report = bound
        .queue
        .worker()
        .max_attempts(max_attempts)
        .handle(URN, move |job: Job| {
            let _ = tx.send((job.attempts(), out_of_band(job.headers())));
            async { Err("refused") }
        })
        .consume(u64::from(max_attempts), IDLE)
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    let mut seen = Vec::new();
    while let Ok(one) = rx.try_recv() {
        seen.push(one);
    }
    seen
}

/// Looks at the message on the dead-letter queue and puts it back where it was.
async fn dead_lettered_headers(bound: &Bound) -> [Option<String>; 3] {
    let dlq = bound.transport().dead_letter_queue(bound.name());
    let dead = bound.take(&dlq).await;
    let seen = out_of_band(&dead.headers);
    // Unsubscribed first, so that the copy put back is not handed to this consumer again.
    bound.transport().unsubscribe(&dlq).await.unwrap();
    bound.transport().move_to_end(&dead.receipt).await.unwrap();
    seen
}

/// Redrives the one dead-lettered message, with or without bypass, and fails it once more,
/// returning what the handler saw.
async fn redrive_then_fail(bound: &Bound, bypass: bool) -> Vec<(i64, [Option<String>; 3])> {
    let done = bound
        .queue
        .redrive(&RedriveOptions::new().bypass(bypass).wait(IDLE))
        .await
        .unwrap();
    assert_eq!(
        (done.redriven, done.items[0].bypassed),
        (1, bypass),
        "{done:?}"
    );
    fail_until_dead_lettered(bound, 1).await
}

async fn headers_survive_retry_dead_letter_and_redrive(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    assert!(bound.transport().capabilities().headers);
    bound
        .queue
        .publish_with(URN, &json!({"n": 1}), Default::default(), &headers(true))
        .await
        .unwrap();

    // The retry carries all three; so does the dead-letter copy.
    let seen = fail_until_dead_lettered(&bound, 2).await;
    assert_eq!(seen, vec![(0, expected(true)), (1, expected(true))]);
    assert_eq!(dead_lettered_headers(&bound).await, expected(true));

    // A redrive with bypass keeps the trace headers and the bypass stamp.
    assert_eq!(
        redrive_then_fail(&bound, true).await,
        vec![(0, expected(true))]
    );
    assert_eq!(dead_lettered_headers(&bound).await, expected(true));

    // A redrive without bypass keeps the trace headers; the replay is then a real one.
    assert_eq!(
        redrive_then_fail(&bound, false).await,
        vec![(0, expected(false))]
    );
}

polyq_testkit::both_brokers!(
    on memory, rabbitmq, redis;
    headers_survive_retry_dead_letter_and_redrive
);

/// Poison and version-gated bodies keep their headers on the dead-letter queue too.
async fn poison_keeps_its_headers(broker: &'static TestBroker) {
    let bound = Bound::new(broker).await;
    bound
        .transport()
        .publish(bound.name(), "{\"job\":".into(), &headers(true))
        .await
        .unwrap();
    let report = bound.queue.worker().consume(1, IDLE).await.unwrap();
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    assert_eq!(dead_lettered_headers(&bound).await, expected(true));
}

polyq_testkit::both_brokers!(on memory, rabbitmq, redis; poison_keeps_its_headers);
