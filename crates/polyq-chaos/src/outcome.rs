//! What one scenario measured, and whether it kept the promise.

use std::fmt;
use std::time::Duration;

use crate::timeline::Timeline;

/// The result of one scenario: one line of the campaign's report.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The scenario's name.
    pub scenario: String,
    /// Messages the broker confirmed.
    pub messages: u64,
    /// Confirmed messages no worker processed.
    pub lost: u64,
    /// Processings beyond the first of a message.
    pub duplicates: u64,
    /// The most duplicates the scenario allows (the unsettled window times the faults).
    pub duplicate_bound: u64,
    /// From the end of the fault (the worker killed, the broker or the network back) to the
    /// first message confirmed or processed again; the longest when the fault repeats.
    pub resume: Option<Duration>,
    /// What else it saw: faults injected, publishes refused and tried again, blocked time.
    pub details: Vec<String>,
    /// A check of the scenario's own that failed (publishers never blocked by an alarm, ...).
    pub failure: Option<String>,
    /// Confirmed and processed messages per second, for a scenario under steady traffic.
    pub timeline: Option<Timeline>,
}

impl Outcome {
    /// Whether nothing confirmed was lost, duplicates stayed in bound, and the scenario's own
    /// checks held.
    pub fn passed(&self) -> bool {
        self.lost == 0 && self.duplicates <= self.duplicate_bound && self.failure.is_none()
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let resume = self
            .resume
            .map_or_else(|| "-".to_owned(), |r| format!("{:.2}s", r.as_secs_f64()));
        write!(
            f,
            "{:<28} {} messages={} lost={} duplicates={} (bound {}) resume={}",
            self.scenario,
            if self.passed() { "ok  " } else { "FAIL" },
            self.messages,
            self.lost,
            self.duplicates,
            self.duplicate_bound,
            resume,
        )?;
        if !self.details.is_empty() {
            write!(f, "  [{}]", self.details.join("; "))?;
        }
        if let Some(failure) = &self.failure {
            write!(f, "  failed: {failure}")?;
        }
        Ok(())
    }
}
