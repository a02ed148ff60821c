//! The demo's output: one line per event, stamped with the time since the start.

use std::fmt::Display;
use std::io::Write as _;
use std::time::Instant;

/// Prints events as `+<seconds>s <part> <event> <detail>`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeline {
    start: Instant,
}

impl Timeline {
    /// A timeline starting now.
    pub(crate) fn start() -> Self {
        Self {
            start: Instant::now(),
        }
    }

    /// Prints one event. `part` and `event` are single words; `detail` is free text.
    pub(crate) fn event(&self, part: &str, event: &str, detail: impl Display) {
        let elapsed = self.start.elapsed().as_secs_f64();
        let mut out = std::io::stdout().lock();
        // A closed stdout only loses the display, not the demo's work.
        let _ = writeln!(out, "+{elapsed:.3}s  {part:<6} {event:<13} {detail}");
    }
}
