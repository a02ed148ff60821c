//! What the CLI tests share: running the built `polyq` binary and reading what it printed.

// Each test binary uses the part it needs.
#![allow(dead_code)]

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

/// The built binary with `args`, logging off so that stderr holds only what it reports.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_polyq"));
    command.args(args).env("POLYQ_LOG", "off");
    command
}

/// Runs `command` with `stdin` as its whole input.
pub fn with_input(mut command: Command, stdin: &[u8]) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("polyq runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("input written");
    child.wait_with_output().expect("polyq finishes")
}

/// Runs the binary with `args` and no input.
pub fn polyq(args: &[&str]) -> Output {
    command(args).output().expect("polyq runs")
}

/// The lines `output` printed, after asserting that the run of `args` succeeded.
pub fn success_lines(output: Output, args: &[&str]) -> Vec<String> {
    assert!(
        output.status.success(),
        "polyq {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("UTF-8 stdout")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// What `output` reported on stderr, after asserting that the run of `args` failed.
pub fn failure_stderr(output: Output, args: &[&str]) -> String {
    assert!(!output.status.success(), "polyq {args:?} should fail");
    String::from_utf8(output.stderr).expect("UTF-8 stderr")
}

/// Runs the binary with `args`, asserting that it fails, and returns its stderr.
pub fn failure(args: &[&str]) -> String {
    failure_stderr(polyq(args), args)
}
