//! Steady traffic through a fault: publishers send sequence numbers at a fixed rate, each
//! waiting for its confirm and sending the same message again when it was refused; a worker of
//! the family consumes them in this process. A fault runs beside them and says when it ended;
//! afterwards every confirmed message must have been processed.

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use babelqueue::worker::Shutdown;

use crate::binding::{Binding, Publisher};
use crate::ledger::{Ledger, Tally};
use crate::outcome::Outcome;
use crate::timeline::{CpuSample, Timeline};

/// Publishing tasks, each waiting on its own confirms.
const PUBLISHERS: u64 = 16;
/// The pause before a refused publish is sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long publishers keep trying once the schedule has run out.
const PUBLISH_SLACK: Duration = Duration::from_secs(60);
/// How long the worker may go without processing anything while confirmed messages wait, after
/// the last publish: a worker that stopped, or never came back after the fault, is told from
/// one that works slowly on a loaded machine (a worker making one round trip after another
/// through a backlog, as the Laravel layout's does, is starved of CPU, not stopped).
const STALL_LIMIT: Duration = Duration::from_secs(30);
/// How long a worker that keeps processing may take, after the last publish, to work through
/// what was confirmed: a bound on the campaign's time, far beyond the slowest drain measured.
const DRAIN_LIMIT: Duration = Duration::from_secs(600);
/// How long the worker may take to stop once drained.
const STOP_LIMIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);

/// The traffic of one scenario.
#[derive(Debug, Clone)]
pub struct Load {
    /// The binding publishers and worker use.
    pub binding: Binding,
    /// The broker as publishers and worker reach it (through a proxy, for network faults).
    pub url: String,
    /// The broker itself, for declaring and removing the queue.
    pub admin_url: String,
    /// Messages per second.
    pub rate: u64,
    /// Messages in all.
    pub messages: u64,
}

/// What publishing has reached so far, for a fault that waits on it or watches it.
#[derive(Debug)]
pub struct Progress {
    queue: String,
    confirmed: AtomicU64,
    publisher: Publisher,
}

impl Progress {
    /// The queue the traffic runs on.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Messages confirmed so far.
    pub fn confirmed(&self) -> u64 {
        self.confirmed.load(Ordering::Acquire)
    }

    /// Waits until `n` messages are confirmed.
    pub async fn until_confirmed(&self, n: u64) {
        while self.confirmed() < n {
            tokio::time::sleep(POLL).await;
        }
    }

    /// Whether the broker blocks the publishers' connection.
    pub fn blocked(&self) -> bool {
        self.publisher.blocked()
    }
}

/// What a fault reports: when it ended, and what it saw.
#[derive(Debug)]
pub struct FaultReport {
    /// When the fault was injected.
    pub began: Instant,
    /// When the broker or the network was whole again.
    pub ended: Instant,
    /// Facts for the report line.
    pub details: Vec<String>,
    /// A check of the fault's own that failed.
    pub failure: Option<String>,
}

impl Load {
    /// The longest a load goes on past its schedule: the publishers' retries, the drain and
    /// the worker's stop.
    pub const LONGEST_TAIL: Duration =
        Duration::from_secs(PUBLISH_SLACK.as_secs() + DRAIN_LIMIT.as_secs() + STOP_LIMIT.as_secs());

    /// Runs the traffic on a queue of its own with `fault` beside it, and tallies it.
    ///
    /// # Errors
    /// When the queue cannot be prepared or the publisher cannot connect.
    pub async fn run<F, Fut>(&self, scenario: &str, fault: F) -> anyhow::Result<Outcome>
    where
        F: FnOnce(Arc<Progress>) -> Fut,
        Fut: Future<Output = anyhow::Result<FaultReport>>,
    {
        let mut queue = polyq_testkit::unique_name(&format!("chaos.{scenario}"));
        if self.binding.is_redis() {
            // A hash tag keeps every key of the queue in one slot of a Redis Cluster.
            queue = format!("{{{queue}}}");
        }
        self.binding.prepare(&self.admin_url, &queue).await?;
        let result = self.run_on(scenario, &queue, fault).await;
        let removed = self.binding.remove(&self.admin_url, &queue).await;
        let outcome = result?;
        removed?;
        Ok(outcome)
    }

    async fn run_on<F, Fut>(&self, scenario: &str, queue: &str, fault: F) -> anyhow::Result<Outcome>
    where
        F: FnOnce(Arc<Progress>) -> Fut,
        Fut: Future<Output = anyhow::Result<FaultReport>>,
    {
        let ledger = Ledger::in_memory();
        let shutdown = Shutdown::new();
        let worker = tokio::spawn({
            let (binding, url, queue) = (self.binding, self.url.clone(), queue.to_owned());
            let (ledger, shutdown) = (ledger.clone(), shutdown.clone());
            async move { binding.work(&url, &queue, ledger, &shutdown).await }
        });
        let progress = Arc::new(Progress {
            queue: queue.to_owned(),
            confirmed: AtomicU64::new(0),
            publisher: self.binding.publisher(&self.url, queue).await?,
        });
        let confirms = Arc::new(Mutex::new(Vec::new()));
        let refusals = Arc::new(Refusals::default());
        let (cpu, sampling) = CpuSample::every_second();
        let start = tokio::time::Instant::now();
        let started = start.into_std();
        let give_up = Instant::now()
            + Duration::from_secs_f64(self.messages as f64 / self.rate as f64)
            + PUBLISH_SLACK;
        let publishing = futures_util::future::join_all((0..PUBLISHERS).map(|lane| {
            let (progress, confirms, refusals) =
                (progress.clone(), confirms.clone(), refusals.clone());
            let (rate, messages) = (self.rate, self.messages);
            async move {
                for seq in (lane..messages).step_by(PUBLISHERS as usize) {
                    let due = start + Duration::from_secs_f64(seq as f64 / rate as f64);
                    tokio::time::sleep_until(due).await;
                    if publish(&progress, &refusals, seq, give_up).await {
                        lock(&confirms).push((seq, Instant::now()));
                        progress.confirmed.fetch_add(1, Ordering::AcqRel);
                    }
                }
            }
        }));
        let (_, report) = tokio::join!(publishing, fault(progress.clone()));
        let report = report?;

        let confirmed: Vec<(u64, Instant)> = lock(&confirms).clone();
        let drain_began = Instant::now();
        let mut last_processed = drain_began;
        let mut unprocessed: HashSet<u64> = confirmed.iter().map(|(seq, _)| *seq).collect();
        let mut seen = 0;
        let mut stalled = false;
        while !worker.is_finished() {
            let new = ledger.records_from(seen);
            seen += new.len();
            if !new.is_empty() {
                last_processed = Instant::now();
            }
            for (seq, _) in &new {
                unprocessed.remove(seq);
            }
            if unprocessed.is_empty() || drain_began.elapsed() >= DRAIN_LIMIT {
                break;
            }
            if last_processed.elapsed() >= STALL_LIMIT {
                stalled = true;
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        let stopped = Instant::now();
        sampling.abort();
        shutdown.stop();
        let worker_result = tokio::time::timeout(STOP_LIMIT, worker).await;
        if let Ok(publisher) = Arc::try_unwrap(progress) {
            publisher.publisher.close().await.ok();
        }

        let records = ledger.records();
        let tally = Tally::of(records.iter().map(|(seq, _)| *seq));
        let missing = tally.missing(confirmed.iter().map(|(seq, _)| *seq));
        // Still in the queue is late, not lost: the scenario fails on it all the same.
        let stranded = if missing > 0 {
            self.binding
                .pending(&self.admin_url, queue)
                .await
                .unwrap_or(0)
        } else {
            0
        };
        let lost = missing.saturating_sub(stranded);
        let first_after = |instants: &mut dyn Iterator<Item = Instant>| {
            instants
                .filter(|at| *at >= report.ended)
                .min()
                .map(|at| at - report.ended)
        };
        let publish_back = first_after(&mut confirmed.iter().map(|(_, at)| *at));
        let consume_back = first_after(&mut records.iter().map(|(_, at)| *at));
        let seconds = |d: Option<Duration>| {
            d.map_or_else(
                || "never".to_owned(),
                |d| format!("{:.2}s", d.as_secs_f64()),
            )
        };
        let (last_record, longest_pause) = records
            .iter()
            .map(|(_, at)| *at)
            .filter(|at| *at >= report.ended)
            .fold((report.ended, Duration::ZERO), |(last, longest), at| {
                (at, longest.max(at.saturating_duration_since(last)))
            });
        // Work left over: processing never resumed after the last record.
        let longest_pause = if missing > 0 {
            longest_pause.max(stopped.saturating_duration_since(last_record))
        } else {
            longest_pause
        };
        let timeline = Timeline::of(
            started,
            (report.began, report.ended),
            confirmed.iter().map(|(_, at)| *at),
            records.iter().map(|(_, at)| *at),
            &lock(&cpu),
        );
        let resent = refusals.count.load(Ordering::Acquire);
        let mut details = report.details;
        details.push(format!(
            "publishing back in {}, consuming in {}",
            seconds(publish_back),
            seconds(consume_back)
        ));
        details.push(format!(
            "longest pause in processing after the fault {:.2}s",
            longest_pause.as_secs_f64()
        ));
        // Seconds in which a backlog waited and less than half the publishing rate was
        // processed: a worker that came back but crawls.
        let crawl = timeline.longest_crawl(self.rate, 0.5);
        if !crawl.is_zero() {
            details.push(format!(
                "processing below half the rate with a backlog for {}s after the fault",
                crawl.as_secs()
            ));
        }
        if resent > 0 {
            details.push(format!(
                "{resent} publishes refused and sent again (first: {})",
                lock(&refusals.first).clone().unwrap_or_default()
            ));
        }
        let unconfirmed = self.messages - confirmed.len() as u64;
        if unconfirmed > 0 {
            details.push(format!("{unconfirmed} never confirmed"));
        }
        let mut failure = report.failure;
        // Losing nothing is not enough: publishers that never get a confirm again after the
        // fault have not recovered, even though the caller was told about every one.
        if publish_back.is_none() && unconfirmed > 0 {
            failure.get_or_insert(format!(
                "publishing never resumed after the fault: {unconfirmed} never confirmed"
            ));
        }
        match worker_result {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => {
                failure.get_or_insert(format!("the worker stopped: {error:#}"));
            }
            Ok(Err(panicked)) => {
                failure.get_or_insert(format!("the worker panicked: {panicked}"));
            }
            Err(_) => {
                failure.get_or_insert(format!(
                    "the worker did not stop within {} s",
                    STOP_LIMIT.as_secs()
                ));
            }
        }
        if stranded > 0 {
            failure.get_or_insert(if stalled {
                format!(
                    "{stranded} messages still queued and none processed for {} s: the worker stopped",
                    STALL_LIMIT.as_secs()
                )
            } else {
                format!(
                    "{stranded} messages still queued {} s after the last publish, the worker still processing",
                    DRAIN_LIMIT.as_secs()
                )
            });
        }
        Ok(Outcome {
            scenario: scenario.to_owned(),
            messages: confirmed.len() as u64,
            lost,
            duplicates: tally.duplicates(),
            // A kill-free fault leaves at most one window unsettled, and a refused publish
            // sent again may have reached the broker the first time.
            duplicate_bound: self.binding.window() + resent,
            resume: publish_back.max(consume_back),
            details,
            failure,
            timeline: Some(timeline),
        })
    }
}

#[derive(Debug, Default)]
struct Refusals {
    count: AtomicU64,
    first: Mutex<Option<String>>,
}

/// Publishes `seq` until it is confirmed or `give_up` passes; whether it was confirmed.
async fn publish(progress: &Progress, refusals: &Refusals, seq: u64, give_up: Instant) -> bool {
    loop {
        match progress.publisher.send(seq).await {
            Ok(()) => return true,
            Err(error) => {
                refusals.count.fetch_add(1, Ordering::AcqRel);
                lock(&refusals.first).get_or_insert_with(|| format!("{error:#}"));
                if Instant::now() >= give_up {
                    return false;
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
