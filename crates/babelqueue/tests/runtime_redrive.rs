//! Redrive (reference §4.6) on the embedded broker and on RabbitMQ; a dead-letter queue many
//! windows long, and a window whose publishes are refused, also on Redis, in both layouts; and
//! acknowledgements that fail after their copies were published.

mod runtime_support;

use std::time::Duration;

use babelqueue::BabelQueue;
use babelqueue::redrive::{RedriveAction, RedriveOptions, RedriveReport};
use babelqueue::transport::{AnyTransport, ConnectOptions, Reserved, Transport};
use babelqueue::worker::{Job, UnknownUrn};
use bytes::Bytes;
use polyq_amqp::Properties;
use polyq_testkit::brokers::{DeleteQueues, TestBroker};
use runtime_support::{IDLE, PATIENCE, Refusing, Scene, envelope_of, json_of};
use serde_json::json;
use tokio::sync::mpsc;

const A: &str = "urn:babel:orders:created";
const B: &str = "urn:babel:orders:cancelled";
/// A redrive only waits when a reserve finds nothing although the depth said there was more
/// (here: a consumer slow to start on a busy machine), so a generous wait costs nothing.
const WAIT: Duration = PATIENCE;

/// Dead-letters `urns` in order (no handler, the `dead_letter` strategy).
async fn dead_letter(scene: &Scene, urns: &[&str]) {
    for (n, urn) in urns.iter().enumerate() {
        scene.queue.publish(urn, &json!({ "n": n })).await.unwrap();
    }
    let report = scene
        .queue
        .worker()
        .unknown_urn(UnknownUrn::DeadLetter)
        .consume(urns.len() as u64, IDLE)
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, urns.len() as u64, "{report:?}");
}

async fn redrive_scenarios(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    let sandbox = scene.other("sandbox");
    dead_letter(&scene, &[A, A, B]).await;
    let base = RedriveOptions::new().wait(WAIT);

    // A dry run reports the plan and restores everything.
    let plan = scene
        .queue
        .redrive(&base.clone().dry_run(true))
        .await
        .unwrap();
    assert_eq!((plan.redriven, plan.skipped), (0, 3), "{plan:?}");
    let targets: Vec<_> = plan
        .items
        .iter()
        .map(|i| (i.urn.as_str(), i.to.as_str(), i.action))
        .collect();
    assert_eq!(
        targets,
        [
            (A, scene.name(), RedriveAction::DryRun),
            (A, scene.name(), RedriveAction::DryRun),
            (B, scene.name(), RedriveAction::DryRun)
        ]
    );
    assert!(
        plan.items
            .iter()
            .all(|i| i.reason == "unknown_urn" && i.from == scene.dlq())
    );

    // Selection and redirection: only B, to the sandbox.
    let chosen = scene
        .queue
        .redrive(
            &base
                .clone()
                .filter(|e| e.urn() == Some(B))
                .to_queue(&sandbox),
        )
        .await
        .unwrap();
    assert_eq!((chosen.redriven, chosen.skipped), (1, 2), "{chosen:?}");
    let moved = scene.take(&sandbox).await;
    let body = json_of(&moved);
    assert_eq!(body["job"], B);
    assert_eq!(body["attempts"], 0);
    assert!(
        body.get("dead_letter").is_none(),
        "the block is removed: {body}"
    );
    assert!(!moved.properties.headers.contains_key("bq-replay-bypass"));
    scene.assert_empty(&sandbox).await;

    // max 1 with bypass: one A back to its source, marked as a replay for the handler.
    let one = scene
        .queue
        .redrive(&base.clone().limit(1).bypass(true))
        .await
        .unwrap();
    assert_eq!(
        (one.redriven, one.skipped, one.items.len()),
        (1, 0, 1),
        "{one:?}"
    );
    assert!(one.items[0].bypassed && one.items[0].redriven);
    assert_eq!(one.items[0].to, scene.name());
    let (tx, mut jobs) = mpsc::unbounded_channel();
    let report = scene
        .queue
        .worker()
        .handle(A, move |job: Job| {
            let _ = tx.send((
                job.is_replay(),
                job.attempts(),
                job.envelope().dead_letter().is_none(),
            ));
            async { Ok::<_, String>(()) }
        })
        .consume(1, IDLE)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1);
    assert_eq!(jobs.recv().await, Some((true, 0, true)));

    // The rest, then nothing: restored messages were not lost and are not seen twice.
    let rest = scene.queue.redrive(&base).await.unwrap();
    assert_eq!((rest.redriven, rest.skipped), (1, 0), "{rest:?}");
    assert!(!rest.items[0].bypassed);
    let empty = scene.queue.redrive(&base).await.unwrap();
    assert!(empty.items.is_empty(), "{empty:?}");
    let last = envelope_of(&scene.take(scene.name()).await);
    assert_eq!(last.urn(), Some(A));

    // The report serialises for the command line.
    let json = serde_json::to_value(&one).unwrap();
    assert_eq!(json["items"][0]["action"], "redriven");
    assert_eq!(json["redriven"], 1);
}

async fn undecodable_records_are_restored(broker: &'static TestBroker) {
    let scene = Scene::new(broker).await;
    scene
        .publish_raw(&scene.dlq(), Properties::default(), "not json at all")
        .await;
    dead_letter(&scene, &[A]).await;
    let report = scene
        .queue
        .redrive(&RedriveOptions::new().wait(WAIT))
        .await
        .unwrap();
    assert_eq!((report.redriven, report.skipped), (1, 1), "{report:?}");
    assert_eq!(report.items[0].action, RedriveAction::Undecodable);
    assert_eq!(report.items[0].to, "");
    let kept = scene.take(&scene.dlq()).await;
    assert_eq!(&kept.body[..], b"not json at all");
    scene.assert_empty(&scene.dlq()).await;
    assert_eq!(envelope_of(&scene.take(scene.name()).await).urn(), Some(A));
}

polyq_testkit::both_brokers!(redrive_scenarios, undecodable_records_are_restored);

/// A dead-letter queue several prefetch windows long, on every binding.
mod long_dead_letter_queue {
    use babelqueue::transport::ConnectOptions;
    #[cfg(feature = "redis")]
    use babelqueue::transport::RedisLayout;
    #[cfg(feature = "redis")]
    use babelqueue::transport::redis::RedisOptions;

    use super::{PREFETCH, long_dead_letter_queue};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory() {
        let options = ConnectOptions::default().prefetch(PREFETCH);
        long_dead_letter_queue(&polyq_testkit::brokers::Broker::Memory.url(), options).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rabbitmq() {
        let options = ConnectOptions::default().prefetch(PREFETCH);
        long_dead_letter_queue(&polyq_testkit::amqp_url(), options).await;
    }

    #[cfg(feature = "redis")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_default() {
        let options =
            ConnectOptions::default().redis(RedisOptions::new().prefetch(usize::from(PREFETCH)));
        long_dead_letter_queue(&polyq_testkit::redis_url(), options).await;
    }

    #[cfg(feature = "redis")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_laravel() {
        let options = ConnectOptions::default().redis_layout(RedisLayout::Laravel);
        long_dead_letter_queue(&polyq_testkit::redis_url(), options).await;
    }
}

/// The prefetch window of the long scenario (AMQP, and the default Redis layout).
const PREFETCH: u16 = 10;
/// How many messages the long scenario dead-letters: many prefetch windows.
const LONG: usize = 250;
/// The redrive window of the long scenario: several of them, each more than [`PREFETCH`].
const LONG_WINDOW: usize = 32;

/// One message written to the dead-letter queue.
struct Written {
    body: Bytes,
    traceparent: String,
}

impl Written {
    /// Every 50th message from the 7th on is not an envelope at all.
    fn decodable(n: usize) -> bool {
        n % 50 != 7
    }
}

/// Writes `count` messages straight to `dlq`, each with a `traceparent` header and a block
/// pointing back at `original_queue(n)`.
async fn fill_dead_letter_queue(
    transport: &AnyTransport,
    dlq: &str,
    count: usize,
    original_queue: impl Fn(usize) -> String,
) -> Vec<Written> {
    let mut written = Vec::with_capacity(count);
    for n in 0..count {
        let body = if Written::decodable(n) {
            let envelope = json!({
                "job": A,
                "trace_id": uuid::Uuid::new_v4().to_string(),
                "data": { "n": n },
                "meta": {
                    "id": uuid::Uuid::new_v4().to_string(),
                    "queue": original_queue(n),
                    "lang": "python",
                    "schema_version": 1,
                    "created_at": 1_764_460_800_000_i64,
                },
                "attempts": 3,
                "dead_letter": {
                    "reason": "unknown_urn",
                    "original_queue": original_queue(n),
                    "failed_at": 1_764_460_800_000_i64,
                    "attempts": 3,
                },
            });
            Bytes::from(serde_json::to_vec(&envelope).unwrap())
        } else {
            Bytes::from(format!("not json #{n}"))
        };
        let traceparent = format!("00-{n:032x}-{n:016x}-01");
        transport
            .publish(
                dlq,
                body.clone(),
                &[("traceparent".to_owned(), traceparent.clone())],
            )
            .await
            .unwrap();
        written.push(Written { body, traceparent });
    }
    written
}

/// Takes exactly `count` messages off `queue` (each must come within [`PATIENCE`]), acknowledges
/// them, hands back anything prefetched and checks nothing is left.
async fn take_exactly(
    transport: &AnyTransport,
    queue: &str,
    count: usize,
) -> Vec<Reserved<<AnyTransport as Transport>::Receipt>> {
    let mut taken = Vec::with_capacity(count);
    for _ in 0..count {
        let reserved = transport
            .reserve(queue, PATIENCE)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{queue} ran dry after {} messages", taken.len()));
        transport.ack(&reserved.receipt).await.unwrap();
        taken.push(reserved);
    }
    transport.unsubscribe(queue).await.unwrap();
    assert_eq!(
        transport.depth(queue).await.unwrap(),
        0,
        "{queue} holds more"
    );
    taken
}

/// The `n` of each redriven message on `queue`, checking each was reset.
async fn redriven_ns(transport: &AnyTransport, queue: &str, count: usize) -> Vec<usize> {
    take_exactly(transport, queue, count)
        .await
        .iter()
        .map(|reserved| {
            let body: serde_json::Value = serde_json::from_slice(&reserved.body).unwrap();
            assert_eq!(body["attempts"], 0, "{body}");
            assert!(body.get("dead_letter").is_none(), "{body}");
            usize::try_from(body["data"]["n"].as_u64().unwrap()).unwrap()
        })
        .collect()
}

/// The message id of every item, in report order.
fn item_ids(report: &RedriveReport) -> Vec<String> {
    report.items.iter().map(|i| i.message_id.clone()).collect()
}

/// The message ids `ns` stand for, empty for undecodable ones, as a report lists them.
fn ids_of(written: &[Written], ns: &[usize]) -> Vec<String> {
    ns.iter()
        .map(|&n| match babelqueue::decode(&written[n].body) {
            Ok(decoded) => decoded.envelope.meta().unwrap().id().unwrap().to_owned(),
            Err(_) => String::new(),
        })
        .collect()
}

/// The `n` a written envelope carries.
fn n_of(envelope: &babelqueue::Envelope) -> Option<u64> {
    envelope
        .data_as::<serde_json::Value>()
        .ok()
        .and_then(|data| data["n"].as_u64())
}

fn even_n(envelope: &babelqueue::Envelope) -> bool {
    n_of(envelope).is_some_and(|n| n % 2 == 0)
}

fn n_below_200(envelope: &babelqueue::Envelope) -> bool {
    n_of(envelope).is_some_and(|n| n < 200)
}

async fn long_dead_letter_queue(url: &str, options: ConnectOptions) {
    let name = polyq_testkit::unique_name("bq-rt-long");
    let dlq = format!("{name}.dlq");
    let _queues = delete_at_end(url, &[&name, &dlq]);
    let queue = BabelQueue::builder(url)
        .queue(&name)
        .options(options)
        .connect()
        .await
        .unwrap();
    let transport = queue.transport().as_ref();
    let written = fill_dead_letter_queue(transport, &dlq, LONG, |_| name.clone()).await;
    // Several windows where the binding does not bound them; the prefetch window where it does.
    let base = RedriveOptions::new().wait(WAIT).window(LONG_WINDOW);
    let all: Vec<usize> = (0..LONG).collect();
    let odd: Vec<usize> = all.iter().copied().filter(|n| n % 2 == 1).collect();

    // A dry run reports every message, in order, and moves none.
    let plan = queue.redrive(&base.clone().dry_run(true)).await.unwrap();
    assert_eq!((plan.redriven, plan.skipped), (0, LONG));
    assert_eq!(item_ids(&plan), ids_of(&written, &all));
    assert!(plan.items.iter().enumerate().all(|(n, item)| item.action
        == if Written::decodable(n) {
            RedriveAction::DryRun
        } else {
            RedriveAction::Undecodable
        }));
    assert_eq!(transport.depth(&name).await.unwrap(), 0);
    assert_eq!(transport.depth(&dlq).await.unwrap(), LONG as u64);

    // Every other one, in one pass: each selected one arrives once, each other one is met once.
    let evens = queue.redrive(&base.clone().filter(even_n)).await.unwrap();
    assert_eq!((evens.redriven, evens.skipped), (LONG / 2, LONG / 2));
    assert_eq!(
        item_ids(&evens),
        ids_of(&written, &all),
        "in order, none twice"
    );
    // Publishes of one window are in flight together, so they may arrive in any order.
    let mut arrived = redriven_ns(transport, &name, LONG / 2).await;
    arrived.sort_unstable();
    let expected: Vec<usize> = all.iter().copied().filter(|n| n % 2 == 0).collect();
    assert_eq!(arrived, expected);

    // `max` stops at exactly max: the first 50 of the odd ones, two of them undecodable.
    let first = queue.redrive(&base.clone().limit(50)).await.unwrap();
    assert_eq!(first.items.len(), 50);
    assert_eq!(item_ids(&first), ids_of(&written, &odd[..50]));
    assert_eq!((first.redriven, first.skipped), (48, 2));
    arrived.extend(redriven_ns(transport, &name, 48).await);

    // The rest, but only below 200: the two undecodable ones restored by the last run come last.
    let met: Vec<usize> = odd[50..].iter().copied().chain([7, 57]).collect();
    let below = queue
        .redrive(&base.clone().filter(n_below_200))
        .await
        .unwrap();
    assert_eq!(item_ids(&below), ids_of(&written, &met));
    assert_eq!((below.redriven, below.skipped), (48, met.len() - 48));
    arrived.extend(redriven_ns(transport, &name, 48).await);

    // Every redriven one arrived exactly once; the rest are still there, byte-identical, in the
    // order they were met, with their headers where the binding carries them.
    let kept: Vec<usize> = met
        .iter()
        .copied()
        .filter(|&n| !Written::decodable(n) || n >= 200)
        .collect();
    arrived.sort_unstable();
    let mut redriven: Vec<usize> = all.iter().copied().filter(|n| !kept.contains(n)).collect();
    redriven.sort_unstable();
    assert_eq!(arrived, redriven);
    let left = take_exactly(transport, &dlq, kept.len()).await;
    let headers = transport.capabilities().headers;
    for (reserved, &n) in left.iter().zip(&kept) {
        assert_eq!(reserved.body, written[n].body, "message {n}");
        if headers && Written::decodable(n) {
            let traceparent = reserved
                .headers
                .iter()
                .find(|(name, _)| name == "traceparent")
                .map(|(_, value)| value.as_str());
            assert_eq!(traceparent, Some(written[n].traceparent.as_str()));
        }
    }
}

/// Deletes `queues` when dropped, also when the test fails (on Redis every key holding one's
/// name); an embedded broker is the test's own and goes with the process.
fn delete_at_end(url: &str, queues: &[&str]) -> Option<DeleteQueues> {
    (!url.starts_with("memory://")).then(|| DeleteQueues::new(url, queues.iter().copied()))
}

/// A window with refused publishes, on every binding.
mod failed_window {
    use babelqueue::transport::ConnectOptions;
    #[cfg(feature = "redis")]
    use babelqueue::transport::RedisLayout;

    use super::a_failed_window_reports_what_it_settled;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory() {
        let url = polyq_testkit::brokers::Broker::Memory.url();
        a_failed_window_reports_what_it_settled(&url, ConnectOptions::default()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rabbitmq() {
        let url = polyq_testkit::amqp_url();
        a_failed_window_reports_what_it_settled(&url, ConnectOptions::default()).await;
    }

    #[cfg(feature = "redis")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_default() {
        let url = polyq_testkit::redis_url();
        a_failed_window_reports_what_it_settled(&url, ConnectOptions::default()).await;
    }

    #[cfg(feature = "redis")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_laravel() {
        let options = ConnectOptions::default().redis_layout(RedisLayout::Laravel);
        a_failed_window_reports_what_it_settled(&polyq_testkit::redis_url(), options).await;
    }
}

/// How many messages the failure scenario dead-letters: three windows.
const FAILING: usize = 60;
/// The redrive window of the failure scenario.
const FAILING_WINDOW: usize = 20;

/// Every third message (from the second on) is headed for the refused queue.
fn headed_for_refused(n: usize) -> bool {
    n % 3 == 1
}

/// Every fifth message (from the fifth on) is turned down by the selection.
fn turned_down(n: u64) -> bool {
    n % 5 == 4
}

async fn a_failed_window_reports_what_it_settled(url: &str, options: ConnectOptions) {
    let name = polyq_testkit::unique_name("bq-rt-fail");
    let dlq = format!("{name}.dlq");
    let refused = format!("{name}.refused");
    let _queues = delete_at_end(url, &[&name, &dlq, &refused]);
    let transport = AnyTransport::connect(url, options).await.unwrap();
    let written = fill_dead_letter_queue(&transport, &dlq, FAILING, |n| {
        if headed_for_refused(n) {
            refused.clone()
        } else {
            name.clone()
        }
    })
    .await;
    let refusing = Refusing {
        publish_to: Some(refused.clone()),
        ..Refusing::new(transport.clone())
    };
    let options = RedriveOptions::new()
        .wait(WAIT)
        .window(FAILING_WINDOW)
        .filter(|envelope| n_of(envelope).is_some_and(|n| !turned_down(n)));

    let zero = babelqueue::redrive::redrive(&refusing, &dlq, &options.clone().window(0)).await;
    assert!(
        matches!(
            zero,
            Err(babelqueue::Error::InvalidOption {
                option: "window",
                ..
            })
        ),
        "{zero:?}"
    );

    // The first window is settled in full, then the redrive stops with its report.
    let failed = babelqueue::redrive::redrive(&refusing, &dlq, &options).await;
    let Err(babelqueue::Error::Redrive {
        dlq: from,
        report,
        source,
    }) = failed
    else {
        panic!("expected a stopped redrive, got {failed:?}");
    };
    assert_eq!(from, dlq);
    assert!(
        matches!(&*source, babelqueue::Error::NotPublished { queue, .. } if *queue == refused),
        "{source:?}"
    );
    let window: Vec<usize> = (0..FAILING_WINDOW).collect();
    assert_eq!(item_ids(&report), ids_of(&written, &window), "in order");
    let action = |n: usize| {
        if !Written::decodable(n) {
            RedriveAction::Undecodable
        } else if turned_down(n as u64) {
            RedriveAction::NotSelected
        } else if headed_for_refused(n) {
            RedriveAction::Failed
        } else {
            RedriveAction::Redriven
        }
    };
    let actions: Vec<_> = report.items.iter().map(|item| item.action).collect();
    let expected: Vec<_> = window.iter().map(|&n| action(n)).collect();
    assert_eq!(actions, expected);
    let count = |wanted: &[RedriveAction]| expected.iter().filter(|a| wanted.contains(a)).count();
    assert_eq!(
        (report.redriven, report.skipped, report.failed),
        (
            count(&[RedriveAction::Redriven]),
            count(&[RedriveAction::Undecodable, RedriveAction::NotSelected]),
            count(&[RedriveAction::Failed]),
        ),
        "{report:?}"
    );
    assert!(
        report
            .items
            .iter()
            .all(|item| item.redriven == (item.action == RedriveAction::Redriven))
    );

    // Nothing lost: the redriven ones are at their queue, the messages not taken are still in
    // front, and every restored one (refused or planned) follows them in its order, unchanged.
    let redriven: Vec<usize> = window
        .iter()
        .copied()
        .filter(|&n| action(n) == RedriveAction::Redriven)
        .collect();
    let mut arrived = redriven_ns(&transport, &name, redriven.len()).await;
    arrived.sort_unstable();
    assert_eq!(arrived, redriven);
    let restored: Vec<usize> = window
        .iter()
        .copied()
        .filter(|&n| action(n) != RedriveAction::Redriven)
        .collect();
    let order: Vec<usize> = (FAILING_WINDOW..FAILING)
        .chain(restored.iter().copied())
        .collect();
    let left = take_exactly(&transport, &dlq, order.len()).await;
    let headers = transport.capabilities().headers;
    for (reserved, &n) in left.iter().zip(&order) {
        assert_eq!(reserved.body, written[n].body, "message {n}");
        let traceparent = reserved
            .headers
            .iter()
            .find(|(name, _)| name == "traceparent")
            .map(|(_, value)| value.as_str());
        if headers && Written::decodable(n) {
            assert_eq!(traceparent, Some(written[n].traceparent.as_str()));
        }
    }
}

/// Acknowledgements refused after the copies were published, on the AMQP bindings (whose
/// unacknowledged originals come back when their connection closes).
mod failed_ack {
    use super::an_ack_failing_after_its_publish_loses_nothing;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory() {
        an_ack_failing_after_its_publish_loses_nothing(
            &polyq_testkit::brokers::Broker::Memory.url(),
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rabbitmq() {
        an_ack_failing_after_its_publish_loses_nothing(&polyq_testkit::amqp_url()).await;
    }
}

/// How many messages the failed-acknowledgement scenario dead-letters (one undecodable).
const UNACKED: usize = 10;

async fn an_ack_failing_after_its_publish_loses_nothing(url: &str) {
    let name = polyq_testkit::unique_name("bq-rt-ack");
    let dlq = format!("{name}.dlq");
    let _queues = delete_at_end(url, &[&name, &dlq]);
    let first = AnyTransport::connect(url, ConnectOptions::default())
        .await
        .unwrap();
    let written = fill_dead_letter_queue(&first, &dlq, UNACKED, |_| name.clone()).await;
    let decodable: Vec<usize> = (0..UNACKED).filter(|&n| Written::decodable(n)).collect();
    assert_eq!(decodable.len(), UNACKED - 1);
    let refusing = Refusing {
        ack: true,
        ..Refusing::new(first.clone())
    };
    let options = RedriveOptions::new().wait(WAIT).window(UNACKED);

    let failed = babelqueue::redrive::redrive(&refusing, &dlq, &options).await;
    let Err(babelqueue::Error::Redrive { report, source, .. }) = failed else {
        panic!("expected a stopped redrive, got {failed:?}");
    };
    assert!(
        matches!(&*source, babelqueue::Error::NotPublished { queue, .. } if queue == "ack"),
        "{source:?}"
    );
    // Each copy went out, so the report says so, and names the message as failed.
    let all: Vec<usize> = (0..UNACKED).collect();
    assert_eq!(item_ids(&report), ids_of(&written, &all), "in order");
    for (n, item) in report.items.iter().enumerate() {
        if Written::decodable(n) {
            assert_eq!(item.action, RedriveAction::Failed, "message {n}");
            assert!(item.redriven, "message {n}: its copy was published");
        } else {
            assert_eq!(item.action, RedriveAction::Undecodable, "message {n}");
        }
    }
    assert_eq!(report.failed, UNACKED - 1);

    // The originals were never acknowledged: closing their connection gives them back, so
    // every message is still on the dead-letter queue beside its copy.
    let AnyTransport::Amqp(amqp) = &first else {
        panic!("an AMQP binding");
    };
    amqp.client().close().await.unwrap();
    let second = AnyTransport::connect(url, ConnectOptions::default())
        .await
        .unwrap();
    let mut copies = redriven_ns(&second, &name, decodable.len()).await;
    copies.sort_unstable();
    assert_eq!(copies, decodable);

    // A later redrive redrives them again: at least once, never lost.
    let report = babelqueue::redrive::redrive(&second, &dlq, &options)
        .await
        .unwrap();
    assert_eq!((report.redriven, report.skipped), (UNACKED - 1, 1));
    let mut again = redriven_ns(&second, &name, decodable.len()).await;
    again.sort_unstable();
    assert_eq!(again, decodable);
    let left = take_exactly(&second, &dlq, 1).await;
    assert_eq!(left[0].body, written[7].body, "the undecodable one stays");
}
