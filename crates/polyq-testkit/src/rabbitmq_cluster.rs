//! The three-node RabbitMQ cluster of `scripts/rabbitmq-cluster` (127.0.0.1:5701-5703), for
//! tests that kill a node under load. The script is idempotent: the first test starts the
//! cluster, later ones find it running (or bring back the node a test before them killed).
//! `scripts/test` stops it when the suite ends. A cluster that cannot start fails the test.
//!
//! Tests that kill nodes must not overlap: keep one such test per test binary (`cargo test`
//! runs the binaries one after another).

use std::path::PathBuf;
use std::process::Command;

/// The running cluster.
#[derive(Debug)]
pub struct Cluster {
    url: String,
}

impl Cluster {
    /// Starts the cluster unless it runs, and completes it when a node is missing. Blocks the
    /// calling thread meanwhile (a cold start of the three nodes takes tens of seconds).
    ///
    /// # Panics
    /// When the cluster cannot start, with the script's reason.
    pub fn start() -> Self {
        Self {
            url: run(&["start"]).trim().to_owned(),
        }
    }

    /// The URL listing the three nodes, node 1 first: a client connects to node 1.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The URL of node `n` (1, 2 or 3) alone: a client that stays on that node.
    ///
    /// # Panics
    /// When `n` is not a node of the list.
    pub fn node_url(&self, n: u8) -> String {
        usize::from(n)
            .checked_sub(1)
            .and_then(|index| {
                polyq_amqp::split_addresses(&self.url)
                    .into_iter()
                    .nth(index)
            })
            .unwrap_or_else(|| panic!("the cluster has no node {n}"))
    }

    /// Kills node `n` (1, 2 or 3) with SIGKILL and waits until its port is closed.
    ///
    /// # Panics
    /// When the node was not running.
    pub fn kill(&self, n: u8) {
        run(&["kill", &n.to_string()]);
    }

    /// Starts node `n` again; it rejoins the cluster.
    ///
    /// # Panics
    /// When it does not come back.
    pub fn revive(&self, n: u8) {
        run(&["revive", &n.to_string()]);
    }

    /// Runs `rabbitmqctl` against node `n` and returns what it printed.
    ///
    /// # Panics
    /// When `rabbitmqctl` fails.
    pub fn ctl(&self, n: u8, args: &[&str]) -> String {
        let n = n.to_string();
        let mut all = vec!["ctl", n.as_str()];
        all.extend_from_slice(args);
        run(&all)
    }
}

fn run(args: &[&str]) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/rabbitmq-cluster");
    let output = Command::new(&script)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("scripts/rabbitmq-cluster cannot run: {error}"));
    assert!(
        output.status.success(),
        "scripts/rabbitmq-cluster {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
