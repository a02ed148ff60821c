//! A Redis Sentinel set and a Redis Cluster of the tests' own, beside the machine's shared Redis,
//! for tests that kill masters. `scripts/redis-sentinel` and `scripts/redis-cluster` start them
//! on their fixed ports (71xx) the first time a test of a binary asks; the tests of one binary
//! take turns on them (each may kill a master, which the next start brings back as a replica),
//! and the last one to finish stops them and removes their files.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Which set of nodes.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Sentinel,
    Cluster,
}

impl Kind {
    fn script(self) -> &'static str {
        match self {
            Kind::Sentinel => "redis-sentinel",
            Kind::Cluster => "redis-cluster",
        }
    }

    fn path(self) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../scripts/{}", self.script()))
    }

    fn users(self) -> &'static AtomicUsize {
        static SENTINEL: AtomicUsize = AtomicUsize::new(0);
        static CLUSTER: AtomicUsize = AtomicUsize::new(0);
        match self {
            Kind::Sentinel => &SENTINEL,
            Kind::Cluster => &CLUSTER,
        }
    }

    fn turn(self) -> &'static Mutex<()> {
        static SENTINEL: Mutex<()> = Mutex::new(());
        static CLUSTER: Mutex<()> = Mutex::new(());
        match self {
            Kind::Sentinel => &SENTINEL,
            Kind::Cluster => &CLUSTER,
        }
    }
}

/// One test's turn on the nodes: every node running (started or brought back) on
/// construction; dropped by the last test waiting, the nodes are stopped.
#[derive(Debug)]
pub struct RedisNodes {
    kind: Kind,
    _turn: MutexGuard<'static, ()>,
}

impl RedisNodes {
    /// A master, a replica and three Sentinels watching them as the service `polyq`
    /// (`scripts/redis-sentinel`). Blocks until this test's turn and the nodes are up.
    ///
    /// # Panics
    /// When the nodes do not come up.
    pub fn sentinel() -> Self {
        Self::take(Kind::Sentinel)
    }

    /// Three masters with a replica each (`scripts/redis-cluster`). Blocks until this test's
    /// turn and the cluster serves every slot.
    ///
    /// # Panics
    /// When the nodes do not come up.
    pub fn cluster() -> Self {
        Self::take(Kind::Cluster)
    }

    fn take(kind: Kind) -> Self {
        kind.users().fetch_add(1, Ordering::SeqCst);
        let nodes = Self {
            kind,
            _turn: kind.turn().lock().unwrap_or_else(PoisonError::into_inner),
        };
        // Constructed first, so that a failed start is stopped by the drop.
        nodes.run(&["start"]);
        nodes
    }

    /// The URL a client connects with: `redis+sentinel://.../polyq` or `redis+cluster://...`.
    pub fn url(&self) -> String {
        self.run(&["url"]).trim().to_owned()
    }

    /// Runs the script with `args` (`kill-master`, `master`, `start`, ...) and returns what it
    /// printed.
    ///
    /// # Panics
    /// When the script fails, with what it printed on stderr.
    pub fn run(&self, args: &[&str]) -> String {
        let script = self.kind.script();
        let output = Command::new(self.kind.path())
            .args(args)
            .output()
            .unwrap_or_else(|error| panic!("scripts/{script} cannot run: {error}"));
        assert!(
            output.status.success(),
            "scripts/{script} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for RedisNodes {
    fn drop(&mut self) {
        if self.kind.users().fetch_sub(1, Ordering::SeqCst) == 1 {
            let script = self.kind.script();
            let stopped = Command::new(self.kind.path()).arg("stop").status();
            if !stopped.is_ok_and(|status| status.success()) {
                eprintln!("could not stop the nodes of scripts/{script}");
            }
        }
    }
}
