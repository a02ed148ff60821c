//! The same worker and redrive code on Redis, in both key layouts, chosen by URL through
//! `BabelQueue::builder`.

#![cfg(feature = "redis")]

mod runtime_support;

use babelqueue::BabelQueue;
use babelqueue::redrive::RedriveOptions;
use babelqueue::transport::{RedisLayout, Transport};
use babelqueue::worker::{Job, UnknownUrn};
use runtime_support::IDLE;
use serde_json::json;
use tokio::sync::mpsc;

const URN: &str = "urn:babel:orders:created";

async fn fail_dead_letter_redrive_replay(layout: RedisLayout) {
    let url = polyq_testkit::redis_url();
    let name = polyq_testkit::unique_name("bq-rt-redis");
    let _keys = polyq_testkit::brokers::DeleteQueues::new(&url, [&name]);
    let queue = BabelQueue::builder(&url)
        .queue(&name)
        .redis_layout(layout)
        .connect()
        .await
        .unwrap();
    let sent = queue
        .publish_with(
            URN,
            &json!({"n": 1}),
            babelqueue::MakeOptions::new().meta("vendor_flag", json!({})),
            &[("traceparent".to_owned(), "00-r-01".to_owned())],
        )
        .await
        .unwrap();

    // The Laravel layout has nowhere to carry out-of-band headers; the default one frames them.
    let headers = queue.transport().capabilities().headers;
    let traceparent = headers.then(|| "00-r-01".to_owned());

    // Fails twice: one retry, then the dead-letter queue with the block.
    let (tx, mut seen) = mpsc::unbounded_channel();
    let failing = tx.clone();
    let report = queue
        .worker()
        .max_attempts(2)
        .handle(URN, move |job: Job| {
            let _ = failing.send((job.attempts(), job.header("traceparent").map(str::to_owned)));
            async { Err("refused") }
        })
        .consume(5, IDLE)
        .await
        .unwrap();
    assert_eq!((report.retried, report.dead_lettered), (1, 1), "{report:?}");
    assert_eq!(seen.recv().await, Some((0, traceparent.clone())));
    assert_eq!(seen.recv().await, Some((1, traceparent)));

    // A dry run plans it back to its source; the real one moves it, marked as a replay.
    let plan = queue
        .redrive(&RedriveOptions::new().dry_run(true).wait(IDLE))
        .await
        .unwrap();
    assert_eq!(
        (plan.skipped, plan.items[0].to.as_str()),
        (1, name.as_str())
    );
    assert_eq!(plan.items[0].reason, "failed");
    let bypass = RedriveOptions::new().bypass(true).wait(IDLE);
    if !headers {
        // The Laravel layout cannot carry bq-replay-bypass: a bypass redrive is refused before
        // anything moves, unless told to go on without the stamp.
        let refused = queue.redrive(&bypass).await.unwrap_err();
        assert!(
            matches!(&refused, babelqueue::Error::InvalidOption { option: "bypass", reason }
                if reason.contains("carries no headers")),
            "{refused}"
        );
        let dlq = queue.transport().dead_letter_queue(&name);
        assert_eq!(
            queue.transport().depth(&dlq).await.unwrap(),
            1,
            "nothing moved"
        );
    }
    let done = queue.redrive(&bypass.bypass_uncarried(true)).await.unwrap();
    assert_eq!(
        (done.redriven, done.items[0].bypassed),
        (1, headers),
        "{done:?}"
    );

    let report = queue
        .worker()
        .handle(URN, move |job: Job| {
            let _ = tx.send((job.attempts(), Some(job.is_replay().to_string())));
            let intact = job.meta() == sent.meta() && job.envelope().dead_letter_raw().is_none();
            async move {
                if intact {
                    Ok(())
                } else {
                    Err("changed by the trip")
                }
            }
        })
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1, "{report:?}");
    assert_eq!(seen.recv().await, Some((0, Some(headers.to_string()))));

    // Unknown URNs under the dead_letter strategy, then nothing is left anywhere.
    queue
        .publish("urn:babel:nobody:home", &json!({}))
        .await
        .unwrap();
    let report = queue
        .worker()
        .unknown_urn(UnknownUrn::DeadLetter)
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    let rest = queue
        .redrive(&RedriveOptions::new().filter(|_| false).wait(IDLE))
        .await
        .unwrap();
    assert_eq!((rest.redriven, rest.skipped), (0, 1), "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_layout() {
    fail_dead_letter_redrive_replay(RedisLayout::Default).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn laravel_layout() {
    fail_dead_letter_redrive_replay(RedisLayout::Laravel).await;
}
