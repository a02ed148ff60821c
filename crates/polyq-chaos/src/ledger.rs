//! What the workers processed, counted against what was published.
//!
//! Every message carries a sequence number. A worker records the number before its handler
//! returns, so before the message is settled: a message settled is always recorded, and a
//! worker killed between the record and the settle leaves a duplicate, never a gap. Records go
//! to a file in append mode (one `write` per record, kept by the kernel when the process is
//! killed) for a worker in a child process, or to memory, with the time, for one in this
//! process.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Where a worker records the sequence numbers it processed. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Ledger {
    sink: Arc<Sink>,
}

#[derive(Debug)]
enum Sink {
    File(Mutex<File>),
    Memory(Mutex<Vec<(u64, Instant)>>),
}

impl Ledger {
    /// Appends to `path`, created when missing.
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            sink: Arc::new(Sink::File(Mutex::new(file))),
        })
    }

    /// Keeps the records, with the time of each, in memory.
    pub fn in_memory() -> Self {
        Self {
            sink: Arc::new(Sink::Memory(Mutex::new(Vec::new()))),
        }
    }

    /// Records `seq` as processed. A record that cannot be written ends the process at once:
    /// the message is then not settled and comes back, where returning would settle it
    /// unrecorded and count it lost.
    pub fn record(&self, seq: u64) {
        match &*self.sink {
            Sink::File(file) => {
                // One small write to the page cache: it does not wait on the disk, and the
                // kernel keeps it however the process ends.
                let line = format!("{seq}\n");
                let mut file = file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if let Err(error) = file.write_all(line.as_bytes()) {
                    eprintln!("polyq-chaos: cannot record message {seq}: {error}");
                    std::process::abort();
                }
            }
            Sink::Memory(records) => records
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push((seq, Instant::now())),
        }
    }

    /// The records kept in memory so far (none for a file ledger).
    pub fn records(&self) -> Vec<(u64, Instant)> {
        self.records_from(0)
    }

    /// The records kept in memory after the first `seen`, for a watcher that reads only what
    /// is new (a copy of every record each time would cost the worker beside it its CPU).
    pub fn records_from(&self, seen: usize) -> Vec<(u64, Instant)> {
        match &*self.sink {
            Sink::File(_) => Vec::new(),
            Sink::Memory(records) => records
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .get(seen..)
                .map(<[_]>::to_vec)
                .unwrap_or_default(),
        }
    }
}

/// Reads a file ledger as it grows.
#[derive(Debug)]
pub struct LedgerTail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    tally: Tally,
}

impl LedgerTail {
    /// Follows `path` from its start.
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
            offset: 0,
            partial: Vec::new(),
            tally: Tally::default(),
        }
    }

    /// Reads what was appended since the last call and returns how many records it held.
    ///
    /// # Errors
    /// When the file cannot be read, or holds something that is not a record.
    pub fn refresh(&mut self) -> anyhow::Result<u64> {
        let mut file = match File::open(&self.path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(error) => return Err(error.into()),
        };
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = std::mem::take(&mut self.partial);
        let read = file.read_to_end(&mut bytes)?;
        self.offset += read as u64;
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        self.partial = bytes.split_off(complete);
        let mut added = 0;
        for line in bytes.split(|b| *b == b'\n').filter(|line| !line.is_empty()) {
            let seq: u64 = std::str::from_utf8(line)?.parse()?;
            self.tally.add(seq);
            added += 1;
        }
        Ok(added)
    }

    /// What was read so far.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }
}

/// How often each sequence number was processed.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    counts: HashMap<u64, u32>,
    records: u64,
}

impl Tally {
    /// The tally of `seqs`.
    pub fn of(seqs: impl IntoIterator<Item = u64>) -> Self {
        let mut tally = Self::default();
        for seq in seqs {
            tally.add(seq);
        }
        tally
    }

    fn add(&mut self, seq: u64) {
        *self.counts.entry(seq).or_default() += 1;
        self.records += 1;
    }

    /// Records read, duplicates included.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Distinct sequence numbers processed.
    pub fn distinct(&self) -> u64 {
        self.counts.len() as u64
    }

    /// Processings beyond the first of each message.
    pub fn duplicates(&self) -> u64 {
        self.records - self.distinct()
    }

    /// Whether `seq` was processed.
    pub fn contains(&self, seq: u64) -> bool {
        self.counts.contains_key(&seq)
    }

    /// How many of `expected` were never processed.
    pub fn missing(&self, expected: impl IntoIterator<Item = u64>) -> u64 {
        expected
            .into_iter()
            .filter(|seq| !self.contains(*seq))
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_counts_duplicates_and_waits_for_a_line_to_end() {
        let dir = std::env::temp_dir().join(format!("polyq-chaos-ledger-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ledger");
        let ledger = Ledger::to_file(&path).unwrap();
        let mut tail = LedgerTail::new(&path);
        assert_eq!(tail.refresh().unwrap(), 0);
        for seq in [1, 2, 2, 3] {
            ledger.record(seq);
        }
        OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"4")
            .unwrap();
        assert_eq!(tail.refresh().unwrap(), 4);
        assert_eq!((tail.tally().distinct(), tail.tally().duplicates()), (3, 1));
        ledger.record(5);
        assert_eq!(
            tail.refresh().unwrap(),
            1,
            "the unfinished line completed as 45"
        );
        assert!(tail.tally().contains(45));
        assert_eq!(tail.tally().missing(0..4), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
