//! Messages a worker drops on purpose are counted by `polyq.babelqueue.messages.dropped.total`
//! with the reason, not only logged: an unknown URN under the `delete` strategy, and the last
//! failed attempt with dead-lettering off.

mod runtime_support;

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use babelqueue::worker::{MESSAGES_DROPPED_TOTAL, UnknownUrn};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use polyq_testkit::brokers::TestBroker;
use runtime_support::{IDLE, Scene};
use serde_json::json;

/// Dropped-message totals by `(queue, reason)`. A snapshot resets the recorder's counters, and
/// the tests of this binary run side by side, so every read goes through this accumulator.
struct Counters {
    snapshotter: Snapshotter,
    totals: Mutex<BTreeMap<(String, String), u64>>,
}

fn counters() -> &'static Counters {
    static COUNTERS: OnceLock<Counters> = OnceLock::new();
    COUNTERS.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        Counters {
            snapshotter,
            totals: Mutex::new(BTreeMap::new()),
        }
    })
}

/// The `(reason, count)` of every dropped-message series of `queue`.
fn dropped(queue: &str) -> Vec<(String, u64)> {
    let counters = counters();
    let mut totals = counters.totals.lock().unwrap();
    for (key, _, _, value) in counters.snapshotter.snapshot().into_vec() {
        let key = key.key();
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
        };
        if let (true, Some(of), Some(reason), DebugValue::Counter(n)) = (
            key.name() == MESSAGES_DROPPED_TOTAL,
            label("queue"),
            label("reason"),
            value,
        ) {
            *totals.entry((of, reason)).or_default() += n;
        }
    }
    totals
        .iter()
        .filter(|((of, _), _)| of == queue)
        .map(|((_, reason), n)| (reason.clone(), *n))
        .collect()
}

async fn dropped_messages_are_counted_with_their_reason(broker: &'static TestBroker) {
    counters();
    let scene = Scene::new(broker).await;
    scene
        .queue
        .publish("urn:babel:orders:unknown", &json!({}))
        .await
        .unwrap();
    scene
        .queue
        .publish("urn:babel:orders:created", &json!({}))
        .await
        .unwrap();
    let report = scene
        .queue
        .worker()
        .max_attempts(1)
        .dead_letter(false)
        .unknown_urn(UnknownUrn::Delete)
        .handle("urn:babel:orders:created", |_job| async { Err("refused") })
        .consume(2, IDLE)
        .await
        .unwrap();
    assert_eq!(report.deleted, 2, "{report:?}");
    assert_eq!(
        dropped(scene.name()),
        [
            ("attempts_exhausted".to_owned(), 1),
            ("unknown_urn".to_owned(), 1)
        ]
    );
    scene.assert_empty(scene.name()).await;
    scene.assert_empty(&scene.dlq()).await;
}

polyq_testkit::both_brokers!(dropped_messages_are_counted_with_their_reason);
