//! Throughput over time: how many messages were confirmed and processed in each second of a
//! scenario's traffic, with the fault's start and end marked, so that a worker that recovers
//! slowly (falls behind after the fault and does not catch up) shows as a trickle rather than
//! only as one "longest pause". Beside them, where Linux tells it, the CPU time the process
//! ran and the time its threads waited for a CPU in each second: a trickle with the process
//! idle is a wait in the code, one with the process waiting for a CPU is a machine too busy.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Confirmed and processed messages per second of one scenario's traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// Second of the traffic in which the fault began.
    pub fault_began: u64,
    /// Second of the traffic in which the fault ended.
    pub fault_ended: u64,
    /// For each second from the start of the traffic: messages confirmed, processings.
    pub seconds: Vec<(u64, u64)>,
    /// For each second, when sampled: milliseconds the process ran on a CPU, and milliseconds
    /// its threads were ready to run but waited for one.
    pub cpu: Vec<Option<(u64, u64)>>,
}

impl Timeline {
    /// Buckets `confirms` and `processings` (their instants) by whole seconds since `start`.
    pub fn of(
        start: Instant,
        (began, ended): (Instant, Instant),
        confirms: impl IntoIterator<Item = Instant>,
        processings: impl IntoIterator<Item = Instant>,
        cpu: &[CpuSample],
    ) -> Self {
        let second = |at: Instant| at.saturating_duration_since(start).as_secs();
        let mut seconds: Vec<(u64, u64)> = Vec::new();
        let mut count = |at: Instant, column: fn(&mut (u64, u64)) -> &mut u64| {
            let index = usize::try_from(second(at)).unwrap_or(usize::MAX);
            if index >= seconds.len() {
                seconds.resize(index + 1, (0, 0));
            }
            *column(&mut seconds[index]) += 1;
        };
        confirms.into_iter().for_each(|at| count(at, |s| &mut s.0));
        processings
            .into_iter()
            .for_each(|at| count(at, |s| &mut s.1));
        let mut per_second = vec![None; seconds.len()];
        for pair in cpu.windows(2) {
            let index = usize::try_from(second(pair[1].at)).unwrap_or(usize::MAX);
            if let Some(slot) = per_second.get_mut(index) {
                let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                *slot = Some((
                    ms(pair[1].running.saturating_sub(pair[0].running)),
                    ms(pair[1].waiting.saturating_sub(pair[0].waiting)),
                ));
            }
        }
        Self {
            fault_began: second(began),
            fault_ended: second(ended),
            seconds,
            cpu: per_second,
        }
    }

    /// The longest run of whole seconds after the fault in which fewer messages were processed
    /// than `share` of the traffic's rate while more than that many waited: a crawl.
    pub fn longest_crawl(&self, rate: u64, share: f64) -> Duration {
        let floor = rate as f64 * share;
        let (mut backlog, mut run, mut longest) = (0i64, 0u64, 0u64);
        for (second, (confirmed, processed)) in self.seconds.iter().enumerate() {
            backlog += i64::try_from(*confirmed).unwrap_or(i64::MAX)
                - i64::try_from(*processed).unwrap_or(i64::MAX);
            let after = second as u64 > self.fault_ended;
            if after && backlog as f64 > floor && (*processed as f64) < floor {
                run += 1;
                longest = longest.max(run);
            } else {
                run = 0;
            }
        }
        Duration::from_secs(longest)
    }
}

impl fmt::Display for Timeline {
    /// One line per second: confirmed, processed, and the backlog (confirmed so far less
    /// processed so far; duplicates make it smaller), the fault's seconds marked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut backlog = 0i64;
        for (second, (confirmed, processed)) in self.seconds.iter().enumerate() {
            let second = second as u64;
            backlog += i64::try_from(*confirmed).unwrap_or(i64::MAX)
                - i64::try_from(*processed).unwrap_or(i64::MAX);
            let mark = match (second == self.fault_began, second == self.fault_ended) {
                (true, true) => "  fault began and ended",
                (true, false) => "  fault began",
                (false, true) => "  fault ended",
                (false, false) => "",
            };
            let cpu = match self.cpu.get(second as usize).copied().flatten() {
                Some((running, waiting)) => format!(" cpu={running:>4}ms waiting={waiting:>4}ms"),
                None => String::new(),
            };
            writeln!(
                f,
                "  t={second:>4}s confirmed={confirmed:>6} processed={processed:>6} backlog={backlog:>7}{cpu}{mark}"
            )?;
        }
        Ok(())
    }
}

/// The CPU time of this process's threads at one instant: on a CPU, and ready but waiting for
/// one (Linux's `/proc/self/task/*/schedstat`).
#[derive(Debug, Clone, Copy)]
pub struct CpuSample {
    /// When it was read.
    pub at: Instant,
    /// Time the threads ran, summed.
    pub running: Duration,
    /// Time the threads waited on a run queue, summed.
    pub waiting: Duration,
}

impl CpuSample {
    /// The process's CPU times now; `None` where Linux's scheduler statistics are not there.
    pub fn now() -> Option<Self> {
        let mut sample = Self {
            at: Instant::now(),
            running: Duration::ZERO,
            waiting: Duration::ZERO,
        };
        for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            // A thread that ended meanwhile takes its figures with it.
            let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
                continue;
            };
            let mut fields = text.split_whitespace().map(|n| n.parse::<u64>().ok());
            let (Some(Some(running)), Some(Some(waiting))) = (fields.next(), fields.next()) else {
                return None;
            };
            sample.running += Duration::from_nanos(running);
            sample.waiting += Duration::from_nanos(waiting);
        }
        Some(sample)
    }

    /// Samples the process every second into the returned list until the task is aborted.
    pub fn every_second() -> (Arc<Mutex<Vec<CpuSample>>>, tokio::task::JoinHandle<()>) {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sampling = tokio::spawn({
            let samples = samples.clone();
            async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    let Some(sample) = CpuSample::now() else {
                        return;
                    };
                    samples
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .push(sample);
                }
            }
        });
        (samples, sampling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_count_what_happened_in_them_and_a_crawl_is_a_backlog_processed_slowly() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        // 10 a second confirmed for 6 s; the fault is seconds 1-2; processing stops in the
        // fault and then trickles at 1 a second until second 5.
        let confirms: Vec<_> = (0..60).map(|n| at(n * 100)).collect();
        let mut processed: Vec<_> = (0..10).map(|n| at(n * 100)).collect();
        processed.extend([at(3_100), at(4_100), at(5_100)]);
        let cpu = |ms: u64, running: u64, waiting: u64| CpuSample {
            at: at(ms),
            running: Duration::from_millis(running),
            waiting: Duration::from_millis(waiting),
        };
        let samples = [cpu(500, 100, 10), cpu(1_500, 400, 60), cpu(2_500, 450, 560)];
        let timeline = Timeline::of(start, (at(1_000), at(2_500)), confirms, processed, &samples);
        assert_eq!(timeline.fault_began, 1);
        assert_eq!(timeline.fault_ended, 2);
        assert_eq!(
            timeline.seconds,
            [(10, 10), (10, 0), (10, 0), (10, 1), (10, 1), (10, 1)]
        );
        assert_eq!(timeline.cpu[..3], [None, Some((300, 50)), Some((50, 500))]);
        assert_eq!(timeline.longest_crawl(10, 0.5), Duration::from_secs(3));
        let text = timeline.to_string();
        assert!(
            text.contains(
                "t=   2s confirmed=    10 processed=     0 backlog=     20 cpu=  50ms waiting= 500ms  fault ended"
            ),
            "{text}"
        );
        assert!(
            CpuSample::now().is_some(),
            "Linux reports the process's CPU time"
        );
        assert_eq!(text.lines().count(), 6);
    }
}
