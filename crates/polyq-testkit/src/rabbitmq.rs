//! Broker-side actions on the local RabbitMQ through `rabbitmqctl`, for recovery tests that must
//! affect their own connections only.

use std::process::Command;
use std::time::{Duration, Instant};

/// Runs `rabbitmqctl` with `args` and returns what it printed.
///
/// # Panics
/// When `rabbitmqctl` cannot run or reports a failure: the test cannot do what it set out to.
pub fn rabbitmqctl(args: &[&str]) -> String {
    let output = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .expect("rabbitmqctl runs (it is installed with the broker)");
    assert!(
        output.status.success(),
        "rabbitmqctl {} failed: {}",
        args.first().copied().unwrap_or_default(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Closes, from the broker's side, every connection the client named `connection_name` (the
/// connection name shown by the management tools), and returns how many it closed. Unlike
/// `rabbitmqctl close_all_connections`, other tests connected at the time are not touched.
///
/// RabbitMQ lists a new connection a moment after the client has it, later still on a loaded
/// machine, so the listing is repeated until the name shows up, for up to ten seconds.
pub async fn close_connections_named(connection_name: &str) -> usize {
    let connection_name = connection_name.to_owned();
    // rabbitmqctl is run and waited for off the runtime's worker threads.
    tokio::task::spawn_blocking(move || close_named(&connection_name))
        .await
        .expect("rabbitmqctl ran")
}

fn close_named(connection_name: &str) -> usize {
    // rabbitmqctl prints client properties as `{"connection_name","<name>"}`.
    let wanted = format!("{{\"connection_name\",\"{connection_name}\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let pids = loop {
        let listed = rabbitmqctl(&[
            "list_connections",
            "--quiet",
            "--no-table-headers",
            "pid",
            "client_properties",
        ]);
        let pids: Vec<String> = listed
            .lines()
            .filter(|line| line.contains(&wanted))
            .filter_map(|line| line.split('\t').next())
            .map(str::to_owned)
            .collect();
        if !pids.is_empty() || Instant::now() >= deadline {
            break pids;
        }
    };
    for pid in &pids {
        rabbitmqctl(&[
            "close_connection",
            pid.as_str(),
            "closed by a polyq recovery test",
        ]);
    }
    pids.len()
}
