//! RabbitMQ nodes of a test's own, beside the machine's shared broker, for tests that would
//! disturb every other test on that broker: a memory alarm blocks all its publishers, and a
//! cluster test stops and joins nodes. Each node is started by `scripts/rabbitmq-node` on free
//! ports and removed when its [`OwnNode`] is dropped, also when the test fails.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// A RabbitMQ node of one test: started on construction, stopped and its files removed on drop.
#[derive(Debug)]
pub struct OwnNode {
    name: String,
    port: u16,
}

impl OwnNode {
    /// Starts a node named `<prefix>-<random>@localhost` on two free ports (AMQP and Erlang
    /// distribution) and waits until it accepts AMQP connections, which takes ten seconds or
    /// more. Blocks the calling thread meanwhile.
    ///
    /// # Panics
    /// When the node does not come up; whatever it started is removed first.
    pub fn start(prefix: &str) -> Self {
        Self::start_on(prefix, free_port(), free_port())
    }

    /// [`OwnNode::start`] on the given AMQP and Erlang distribution ports, for a run that
    /// keeps to a port range of its own.
    ///
    /// # Panics
    /// When the node does not come up; whatever it started is removed first.
    pub fn start_on(prefix: &str, port: u16, dist_port: u16) -> Self {
        let node = Self {
            name: format!(
                "{prefix}-{}",
                &uuid::Uuid::new_v4().simple().to_string()[..12]
            ),
            port,
        };
        // Constructed before starting, so that a failed start is cleaned up by the drop.
        run_script(&[
            "start",
            &node.name,
            &node.port.to_string(),
            &dist_port.to_string(),
        ]);
        node
    }

    /// The node's Erlang name, `<name>@localhost`, for `join_cluster` and the like.
    pub fn node_name(&self) -> String {
        format!("{}@localhost", self.name)
    }

    /// Its AMQP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its AMQP URL, as the default `guest` user on the default vhost.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Runs `rabbitmqctl` against this node and returns what it printed.
    ///
    /// # Panics
    /// When `rabbitmqctl` fails.
    pub fn ctl(&self, args: &[&str]) -> String {
        self.try_ctl(args).unwrap_or_else(|error| panic!("{error}"))
    }

    /// [`OwnNode::ctl`] that reports a failure instead of panicking, for cleanup that also runs
    /// while a failed test unwinds.
    pub fn try_ctl(&self, args: &[&str]) -> Result<String, String> {
        let mut script_args = vec!["ctl", self.name.as_str()];
        script_args.extend_from_slice(args);
        try_run_script(&script_args)
    }
}

/// A memory alarm on a node of a test's own: every connection that publishes to it is blocked
/// until the alarm is dropped.
#[derive(Debug)]
pub struct MemoryAlarm<'a> {
    node: &'a OwnNode,
}

impl<'a> MemoryAlarm<'a> {
    /// Raises the alarm at once (a watermark of 0). Blocks the calling thread while
    /// `rabbitmqctl` runs.
    ///
    /// # Panics
    /// When `rabbitmqctl` fails.
    pub fn raise(node: &'a OwnNode) -> Self {
        let alarm = Self { node };
        node.ctl(&["set_vm_memory_high_watermark", "0"]);
        alarm
    }
}

impl MemoryAlarm<'_> {
    /// Holds the alarm for `hold`, running `check` every `every` meanwhile (a check that blocks
    /// is cut off after `limit`, which fails the test), then clears it.
    ///
    /// # Panics
    /// When a check takes longer than `limit`.
    pub async fn hold_checking(
        self,
        hold: Duration,
        every: Duration,
        limit: Duration,
        mut check: impl AsyncFnMut(),
    ) {
        let until = Instant::now() + hold;
        while Instant::now() < until {
            tokio::time::timeout(limit, check())
                .await
                .expect("a check during the alarm ended within the limit");
            // Pacing the checks over the alarm, not waiting for an event.
            tokio::time::sleep(every).await;
        }
        drop(self);
    }
}

impl Drop for MemoryAlarm<'_> {
    fn drop(&mut self) {
        // RabbitMQ's default watermark.
        if let Err(error) = self.node.try_ctl(&["set_vm_memory_high_watermark", "0.4"]) {
            eprintln!("could not clear the memory alarm: {error}");
        }
    }
}

impl Drop for OwnNode {
    fn drop(&mut self) {
        if let Err(error) = try_run_script(&["stop", &self.name]) {
            eprintln!(
                "could not remove RabbitMQ node {}: {error}",
                self.node_name()
            );
        }
    }
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/rabbitmq-node")
}

fn run_script(args: &[&str]) -> String {
    try_run_script(args).unwrap_or_else(|error| panic!("{error}"))
}

fn try_run_script(args: &[&str]) -> Result<String, String> {
    let output = Command::new(script())
        .args(args)
        .output()
        .map_err(|error| format!("scripts/rabbitmq-node cannot run: {error}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "scripts/rabbitmq-node {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// A port nothing listens on right now (the system's choice for a listener on port 0).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}
