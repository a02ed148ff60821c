//! A test that needs a second process (to kill it with SIGKILL mid-flight) runs its own test
//! binary again, selecting one of its ignored tests by name as the child's body.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Child;

/// Runs this test binary again as its ignored test `test`, with `env`, and waits (up to
/// `limit`) for the child to print a line starting with `ready`. Returns the child (killed when
/// dropped) and the rest of that line.
///
/// # Panics
/// When the binary cannot be started, or the child ends or takes longer than `limit` before it
/// prints the line.
pub async fn spawn(
    test: &str,
    env: &[(&str, &str)],
    ready: &str,
    limit: Duration,
) -> (Child, String) {
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", test, "--nocapture"])
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the test binary runs again as the child process");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let rest = tokio::time::timeout(limit, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.strip_prefix(ready) {
                return rest.to_owned();
            }
        }
        panic!("the child process `{test}` ended before it said `{ready}`");
    })
    .await
    .unwrap_or_else(|_| {
        panic!("the child process `{test}` did not say `{ready}` within {limit:?}")
    });
    (child, rest)
}

/// Kills `child` with SIGKILL and waits for it to end.
///
/// # Panics
/// When the signal cannot be sent, or the child had already ended on its own.
pub async fn kill_9(child: &mut Child) {
    child.start_kill().expect("SIGKILL");
    let status = child.wait().await.expect("the killed child is reaped");
    assert!(!status.success(), "killed, not finished: {status}");
}
