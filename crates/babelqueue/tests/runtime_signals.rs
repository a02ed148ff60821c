//! `Shutdown::on_signals`: SIGTERM asks for a graceful stop, a second signal for an immediate one.
//! In its own test binary, because it signals its own process.

#![cfg(unix)]

use std::time::Duration;

use babelqueue::worker::Shutdown;

async fn signal_self(name: &str) {
    let status = tokio::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(std::process::id().to_string())
        .status()
        .await
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn the_first_signal_stops_gracefully_the_second_at_once() {
    let shutdown = Shutdown::on_signals();
    assert!(!shutdown.is_stopping());
    signal_self("TERM").await;
    tokio::time::timeout(Duration::from_secs(10), shutdown.stopping())
        .await
        .expect("SIGTERM asks for a graceful stop");
    let immediate = shutdown.clone();
    assert!(
        tokio::time::timeout(Duration::from_millis(50), immediate.stopping_now())
            .await
            .is_err(),
        "one signal is not an immediate stop"
    );
    signal_self("INT").await;
    tokio::time::timeout(Duration::from_secs(10), shutdown.stopping_now())
        .await
        .expect("a second signal asks for an immediate stop");
}
