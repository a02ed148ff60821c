//! A worker process killed with SIGKILL again and again while it works through a full queue.
//!
//! The queue is filled first, every message confirmed. Then a worker process (this program's
//! `worker` command: the family's own worker, recording each message in a file ledger before it
//! is settled) is started, killed once it has processed its share, and started again, until
//! the last one has processed everything. Every confirmed message must be in the ledger; a
//! message is processed twice only when a kill caught it unsettled, so at most the worker's
//! window per kill.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::process::{Child, Command};

use crate::binding::Binding;
use crate::ledger::LedgerTail;
use crate::outcome::Outcome;

/// How often the ledger is read while waiting on it.
const POLL: Duration = Duration::from_millis(20);

/// One kill loop.
#[derive(Debug, Clone)]
pub struct KillLoop {
    /// The binding the worker runs on.
    pub binding: Binding,
    /// The broker.
    pub url: String,
    /// Messages published before the first worker starts.
    pub messages: u64,
    /// Workers killed.
    pub kills: u32,
    /// The program whose `worker` command is the worker (this one).
    pub worker_program: PathBuf,
    /// The longest the whole loop may take; what is still missing then counts as lost.
    pub limit: Duration,
}

impl KillLoop {
    /// Runs the loop on a queue of its own, removed afterwards.
    ///
    /// # Errors
    /// When the queue cannot be filled, a worker cannot be started, or the ledger not read.
    pub async fn run(&self) -> anyhow::Result<Outcome> {
        let queue = polyq_testkit::unique_name(&format!("chaos.kill.{}", self.binding));
        let dir = scratch_dir(&queue)?;
        let result = self.run_on(&queue, &dir).await;
        let removed = self.binding.remove(&self.url, &queue).await;
        std::fs::remove_dir_all(&dir).ok();
        let outcome = result?;
        removed?;
        Ok(outcome)
    }

    async fn run_on(&self, queue: &str, dir: &Path) -> anyhow::Result<Outcome> {
        let deadline = Instant::now() + self.limit;
        self.binding.prepare(&self.url, queue).await?;
        self.binding
            .fill(&self.url, queue, 0..self.messages)
            .await
            .context("filling the queue")?;
        let ledger = dir.join("ledger");
        let mut tail = LedgerTail::new(&ledger);
        let share = self.messages / (u64::from(self.kills) + 1);
        let mut resumes = Vec::new();
        let mut killed_at = None;
        let mut kills = 0;
        loop {
            let mut worker = self.spawn_worker(queue, &ledger)?;
            let at_start = tail.tally().records();
            // The first record of the new worker: processing resumed.
            wait_for(&mut tail, deadline, &mut worker, |tally| {
                tally.records() > at_start || tally.distinct() == self.messages
            })
            .await?;
            if let Some(killed) = killed_at.take() {
                resumes.push(Instant::now().duration_since(killed));
            }
            if kills == self.kills {
                wait_for(&mut tail, deadline, &mut worker, |tally| {
                    tally.distinct() == self.messages
                })
                .await?;
                kill(&mut worker).await?;
                break;
            }
            wait_for(&mut tail, deadline, &mut worker, |tally| {
                tally.records() >= at_start + share || tally.distinct() == self.messages
            })
            .await?;
            kill(&mut worker).await?;
            killed_at = Some(Instant::now());
            kills += 1;
            if Instant::now() >= deadline {
                break;
            }
        }
        // Whatever the last kill caught between record and settle is processed again by the
        // next worker; after the last worker everything must have been recorded.
        tail.refresh()?;
        let tally = tail.tally();
        let lost = tally.missing(0..self.messages);
        Ok(Outcome {
            scenario: format!("kill-{}", self.binding),
            messages: self.messages,
            lost,
            duplicates: tally.duplicates(),
            duplicate_bound: u64::from(kills) * self.binding.window(),
            resume: resumes.iter().max().copied(),
            details: vec![
                format!("{kills} kills"),
                format!(
                    "worker back in {:.2}s on average",
                    average(&resumes).as_secs_f64()
                ),
            ],
            failure: (kills < self.kills)
                .then(|| format!("only {kills} of {} kills within the limit", self.kills)),
            timeline: None,
        })
    }

    fn spawn_worker(&self, queue: &str, ledger: &Path) -> anyhow::Result<Child> {
        Command::new(&self.worker_program)
            .arg("worker")
            .args(["--binding", self.binding.name()])
            .args(["--url", &self.url])
            .args(["--queue", queue])
            .arg("--ledger")
            .arg(ledger)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.worker_program.display()))
    }
}

/// Reads the ledger until `done` holds for it, failing when the worker exits by itself or the
/// deadline passes.
async fn wait_for(
    tail: &mut LedgerTail,
    deadline: Instant,
    worker: &mut Child,
    done: impl Fn(&crate::ledger::Tally) -> bool,
) -> anyhow::Result<()> {
    loop {
        tail.refresh()?;
        if done(tail.tally()) || Instant::now() >= deadline {
            return Ok(());
        }
        if let Some(status) = worker.try_wait()? {
            anyhow::bail!("the worker exited by itself: {status}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// SIGKILL, and wait for the process to be gone.
async fn kill(worker: &mut Child) -> anyhow::Result<()> {
    worker.start_kill()?;
    worker.wait().await?;
    Ok(())
}

fn average(durations: &[Duration]) -> Duration {
    match u32::try_from(durations.len()) {
        Ok(n) if n > 0 => durations.iter().sum::<Duration>() / n,
        _ => Duration::ZERO,
    }
}

/// A directory of the scenario's own under the system's temporary directory.
pub(crate) fn scratch_dir(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("polyq-chaos-{name}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
