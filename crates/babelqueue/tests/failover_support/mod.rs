//! A worker and a publisher on one queue while a fault is injected, and what came through: the
//! failover tests of Redis Sentinel and Redis Cluster share it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use babelqueue::BabelQueue;
use babelqueue::transport::redis::RedisOptions;
use babelqueue::transport::{ConnectOptions, RedisLayout, Transport};
use babelqueue::worker::{Job, Shutdown};
use serde_json::{Value, json};

pub const URN: &str = "urn:babel:orders:created";
/// Messages published, one after another, while the fault happens.
const MESSAGES: u64 = 600;
/// The fault is injected once this many were handled.
const HANDLED_BEFORE_FAULT: usize = 100;
/// Bounds every wait of the run.
const DEADLINE: Duration = Duration::from_secs(60);

/// What a run published and handled.
#[derive(Debug)]
pub struct Report {
    /// Every message whose publish succeeded (`n`).
    confirmed: BTreeSet<u64>,
    /// How many times each message was handled.
    handled: BTreeMap<u64, u32>,
    /// The longest time between two deliveries.
    longest_pause: Duration,
}

impl Report {
    /// Fails unless every confirmed message was handled, the reservation held across the fault
    /// (message 0) among them.
    pub fn assert_nothing_lost(&self) {
        let lost: Vec<u64> = self
            .confirmed
            .iter()
            .filter(|n| !self.handled.contains_key(n))
            .copied()
            .collect();
        assert!(lost.is_empty(), "lost {lost:?}; {self:?}");
        assert!(
            self.handled.contains_key(&0),
            "the held reservation came back"
        );
        let duplicates: u32 = self.handled.values().map(|times| times - 1).sum();
        eprintln!(
            "{} confirmed, {} handled, {duplicates} duplicates, longest pause {:?}",
            self.confirmed.len(),
            self.handled.len(),
            self.longest_pause
        );
    }
}

/// Publishes `MESSAGES` messages to `queue` at `url` while a worker handles them, runs `fault`
/// once some were handled, and waits until every confirmed message was handled. A reservation
/// taken before the fault and never settled (message 0) must come back by its deadline. A
/// publish that fails transiently, or may have been done, is tried again (a duplicate is
/// counted, not lost).
pub async fn publish_and_consume_through(
    url: &str,
    layout: RedisLayout,
    queue: &str,
    fault: impl FnOnce(),
) -> Report {
    let short = Some(Duration::from_secs(2));
    let options = ConnectOptions::default().redis_layout(layout).redis(
        RedisOptions::new()
            .reservation_deadline(short)
            .retry_after(short)
            .block_slice(Duration::from_millis(250)),
    );
    let client = BabelQueue::builder(url)
        .queue(queue)
        .options(options)
        .connect()
        .await
        .unwrap();
    client.publish(URN, &json!({"n": 0})).await.unwrap();
    let held = client
        .transport()
        .reserve(queue, Duration::from_secs(5))
        .await
        .unwrap()
        .expect("message 0");
    // Neither settled nor given back on drop: only the deadline sweep returns it.
    std::mem::forget(held);

    let deliveries: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
    let shutdown = Shutdown::new();
    let worker = {
        let deliveries = deliveries.clone();
        let worker = client
            .worker()
            .poll_wait(Duration::from_millis(200))
            .concurrency(4)
            .handle(URN, move |job: Job| {
                let n = job
                    .data_as::<Value>()
                    .ok()
                    .and_then(|data| data["n"].as_u64());
                if let Some(n) = n {
                    let mut deliveries = deliveries.lock().unwrap_or_else(PoisonError::into_inner);
                    deliveries.push((n, Instant::now()));
                }
                async move { n.map(drop).ok_or("a message without n") }
            });
        let shutdown = shutdown.clone();
        tokio::spawn(async move { worker.run(&shutdown).await })
    };
    let publisher = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut confirmed = BTreeSet::from([0]);
            for n in 1..=MESSAGES {
                let started = Instant::now();
                loop {
                    match client.publish(URN, &json!({"n": n})).await {
                        Ok(_) => break,
                        Err(error) if error.is_transient() || error.may_have_been_published() => {
                            assert!(started.elapsed() < DEADLINE, "publishing {n}: {error}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(error) => panic!("publishing {n}: {error}"),
                    }
                }
                confirmed.insert(n);
            }
            confirmed
        })
    };

    let handled = || {
        deliveries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(n, _)| *n)
            .collect::<BTreeSet<u64>>()
    };
    let started = Instant::now();
    while handled().len() < HANDLED_BEFORE_FAULT {
        assert!(started.elapsed() < DEADLINE, "nothing was handled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fault();
    let confirmed = publisher.await.unwrap();
    while !confirmed.is_subset(&handled()) {
        assert!(
            started.elapsed() < DEADLINE,
            "still not handled: {:?}",
            confirmed.difference(&handled()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.stop();
    worker.await.unwrap().unwrap();

    let deliveries = deliveries.lock().unwrap_or_else(PoisonError::into_inner);
    let mut handled = BTreeMap::new();
    for (n, _) in deliveries.iter() {
        *handled.entry(*n).or_insert(0) += 1;
    }
    let longest_pause = deliveries
        .windows(2)
        .map(|pair| pair[1].1.saturating_duration_since(pair[0].1))
        .max()
        .unwrap_or_default();
    Report {
        confirmed,
        handled,
        longest_pause,
    }
}
