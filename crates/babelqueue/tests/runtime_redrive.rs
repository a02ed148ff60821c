//! Redrive (reference §4.6) on the embedded broker and on RabbitMQ.

mod runtime_support;

use std::time::Duration;

use babelqueue::redrive::{RedriveAction, RedriveOptions};
use babelqueue::worker::{Job, UnknownUrn};
use polyq_amqp::Properties;
use runtime_support::{IDLE, Scene, envelope_of, json_of};
use serde_json::json;
use tokio::sync::mpsc;

const A: &str = "urn:babel:orders:created";
const B: &str = "urn:babel:orders:cancelled";
const WAIT: Duration = Duration::from_millis(300);

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

async fn redrive_scenarios(url: &str) {
    let mut scene = Scene::new(url).await;
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
                .select(|e| e.urn() == Some(B))
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
        .redrive(&base.clone().max(1).bypass(true))
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
    scene.cleanup().await;
}

async fn undecodable_records_are_restored(url: &str) {
    let scene = Scene::new(url).await;
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
    scene.cleanup().await;
}

on_both_brokers!(redrive_scenarios, undecodable_records_are_restored);
