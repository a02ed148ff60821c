//! How the `dlq` verbs write: a table on a terminal, one JSON object per line otherwise, and a
//! progress bar on standard error (when it is a terminal) for the verbs that move messages.

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use super::row::Row;

/// How many of a queue's most frequent errors `list` shows.
const TOP_ERRORS: usize = 3;

/// The output form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    Table,
    Json,
}

/// Messages of one failure group.
#[derive(Debug, Serialize)]
pub(crate) struct Group {
    pub(crate) group_key: String,
    pub(crate) group: String,
    pub(crate) count: u64,
    /// Epoch ms of the earliest and latest failure (or first sight) in the group.
    pub(crate) first_seen_ms: Option<i64>,
    pub(crate) last_seen_ms: Option<i64>,
    /// The id and error of the group's first message.
    pub(crate) sample_id: Option<String>,
    pub(crate) sample_error: Option<String>,
}

/// The groups of `rows`, the largest first (ties by first appearance).
pub(crate) fn groups(rows: &[Row]) -> Vec<Group> {
    polyq_runtime::group(rows.iter().map(|row| {
        let summary = &row.summary;
        (summary.fingerprint.clone(), summary.at_ms, summary)
    }))
    .into_iter()
    .map(|group| Group {
        group_key: group.fingerprint.key(),
        group: group.fingerprint.to_string(),
        count: group.count,
        first_seen_ms: group.first_seen,
        last_seen_ms: group.last_seen,
        sample_id: group.sample.id.clone(),
        sample_error: group.sample.error.clone(),
    })
    .collect()
}

/// One line of `list`.
#[derive(Debug, Serialize)]
pub(crate) struct QueueSummary {
    queue: String,
    depth: u64,
    oldest_age_ms: Option<u64>,
    newest_age_ms: Option<u64>,
    top_errors: Vec<TopError>,
}

#[derive(Debug, Serialize)]
struct TopError {
    group: String,
    count: u64,
}

impl QueueSummary {
    /// The summary of `queue`, whose messages are `rows`.
    pub(crate) fn of(queue: &str, rows: &[Row]) -> Self {
        let ages = rows.iter().filter_map(|row| row.summary.age_ms);
        Self {
            queue: queue.to_owned(),
            depth: rows.len() as u64,
            oldest_age_ms: ages.clone().max(),
            newest_age_ms: ages.min(),
            top_errors: groups(rows)
                .into_iter()
                .take(TOP_ERRORS)
                .map(|group| TopError {
                    group: group.group,
                    count: group.count,
                })
                .collect(),
        }
    }
}

impl Output {
    /// Writes messages: in a table, position, id, type, attempts, age and error.
    pub(crate) fn rows<'a>(self, rows: impl Iterator<Item = &'a Row>) -> anyhow::Result<()> {
        match self {
            Self::Json => json_lines(rows),
            Self::Table => table(
                &["#", "FAMILY", "ID", "TYPE", "ATTEMPTS", "AGE", "ERROR"],
                rows.map(|row| {
                    let s = &row.summary;
                    vec![
                        s.position.to_string(),
                        serde_json::to_value(s.family)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default(),
                        s.id.clone().unwrap_or_default(),
                        s.message_type.clone().unwrap_or_default(),
                        s.attempts.map(|n| n.to_string()).unwrap_or_default(),
                        s.age_ms.map(age).unwrap_or_default(),
                        s.error.clone().unwrap_or_default(),
                    ]
                }),
            ),
        }
    }

    /// Writes failure groups.
    pub(crate) fn groups(self, groups: &[Group]) -> anyhow::Result<()> {
        match self {
            Self::Json => json_lines(groups.iter()),
            Self::Table => table(
                &["COUNT", "KEY", "GROUP", "SAMPLE"],
                groups.iter().map(|group| {
                    vec![
                        group.count.to_string(),
                        group.group_key.clone(),
                        group.group.clone(),
                        group.sample_id.clone().unwrap_or_default(),
                    ]
                }),
            ),
        }
    }

    /// Writes queue summaries.
    pub(crate) fn queues(self, queues: &[QueueSummary]) -> anyhow::Result<()> {
        match self {
            Self::Json => json_lines(queues.iter()),
            Self::Table => table(
                &["QUEUE", "DEPTH", "OLDEST", "NEWEST", "TOP ERRORS"],
                queues.iter().map(|queue| {
                    let errors: Vec<String> = queue
                        .top_errors
                        .iter()
                        .map(|error| format!("{}× {}", error.count, error.group))
                        .collect();
                    vec![
                        queue.queue.clone(),
                        queue.depth.to_string(),
                        queue.oldest_age_ms.map(age).unwrap_or_default(),
                        queue.newest_age_ms.map(age).unwrap_or_default(),
                        errors.join("; "),
                    ]
                }),
            ),
        }
    }
}

fn json_lines<T: Serialize>(items: impl Iterator<Item = T>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for item in items {
        serde_json::to_writer(&mut out, &item)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// Columns padded to their widest cell; control characters in cells shown escaped, so a
/// message cannot move the terminal's cursor.
fn table(header: &[&str], rows: impl Iterator<Item = Vec<String>>) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = std::iter::once(header.iter().map(|h| (*h).to_owned()).collect())
        .chain(rows.map(|row| {
            row.iter()
                .map(|cell| cell.escape_debug().to_string())
                .collect()
        }))
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|column| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = std::io::stdout().lock();
    for row in &rows {
        let last = row.len() - 1;
        for (column, cell) in row.iter().enumerate() {
            if column == last {
                writeln!(out, "{cell}")?;
            } else {
                write!(out, "{cell:<width$}  ", width = widths[column])?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// `42s`, `7m`, `3h`, `2d`.
pub(crate) fn age(ms: u64) -> String {
    let seconds = ms / 1000;
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds / 60),
        3600..86_400 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

/// A progress bar on standard error, drawn only on a terminal and only once the work has taken
/// a second.
pub(crate) struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `length` steps labelled `what`.
    pub(crate) fn new(length: u64, what: &str) -> Self {
        // Hidden until the work has taken a second: short runs finish before the first draw.
        let bar =
            ProgressBar::with_draw_target(Some(length), indicatif::ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_message(what.to_owned());
        if std::io::stderr().is_terminal() {
            let shown = bar.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if !shown.is_finished() {
                    shown.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                }
            });
        }
        Self { bar }
    }

    /// One more step done.
    pub(crate) fn advance(&self) {
        self.bar.inc(1);
    }

    /// `done` steps done.
    pub(crate) fn set(&self, done: u64) {
        self.bar.set_position(done);
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::age;

    #[test]
    fn ages_read_in_their_largest_unit() {
        assert_eq!(age(999), "0s");
        assert_eq!(age(59_000), "59s");
        assert_eq!(age(60_000), "1m");
        assert_eq!(age(7_200_000), "2h");
        assert_eq!(age(172_800_000), "2d");
    }
}
