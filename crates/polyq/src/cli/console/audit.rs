//! The audit log: every action, one JSON object per line, appended to a file and shown on the
//! console's audit page. Bodies and header values never go in it: only what was asked, of
//! which queue, from where, and how many messages it touched.

use std::io::{BufRead as _, Write as _};
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// How many of the latest entries the audit page shows.
pub(crate) const SHOWN: usize = 200;

/// One action.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// RFC 3339, UTC.
    pub(crate) at: String,
    /// The client's address.
    pub(crate) from: String,
    /// `replay`, `delete`, `purge` or `edit-replay`.
    pub(crate) action: String,
    /// The broker, credentials redacted.
    pub(crate) broker: String,
    pub(crate) queue: String,
    /// The filters, as `polyq dlq` would take them.
    pub(crate) selection: serde_json::Value,
    /// Messages moved or removed.
    pub(crate) count: u64,
    /// `ok`, or the error.
    pub(crate) outcome: String,
}

/// The open log.
pub(crate) struct Audit {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl Audit {
    /// Opens `path` for appending, creating it.
    pub(crate) fn open(path: PathBuf) -> anyhow::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("--audit-log {}: cannot append to it", path.display()))?;
        Ok(Self {
            path,
            file: Mutex::new(file),
        })
    }

    /// Appends `entry` as one line, written through before the action's answer is sent.
    pub(crate) fn record(&self, entry: &Entry) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(entry)?;
        line.push(b'\n');
        let mut file = self
            .file
            .lock()
            .map_err(|_| anyhow::anyhow!("the audit log's lock was poisoned"))?;
        file.write_all(&line)
            .and_then(|()| file.sync_data())
            .with_context(|| format!("--audit-log {}: cannot write", self.path.display()))
    }

    /// The latest [`SHOWN`] entries, newest first; lines that do not read as entries are
    /// skipped.
    pub(crate) fn recent(&self) -> anyhow::Result<Vec<Entry>> {
        let file = std::fs::File::open(&self.path)
            .with_context(|| format!("--audit-log {}: cannot read", self.path.display()))?;
        let mut entries: Vec<Entry> = std::io::BufReader::new(file)
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| serde_json::from_str(&line).ok())
            .collect();
        entries.reverse();
        entries.truncate(SHOWN);
        Ok(entries)
    }
}
