//! `polyq babel publish --count` through a RabbitMQ restart: the node is stopped and started
//! again (`stop_app` / `start_app`) while the command publishes; the command still exits 0,
//! having printed every job, and the broker holds every printed job at least once, a duplicate
//! only ever a copy of the same job (same id, same bytes).
//!
//! The restart would disturb every other test on the shared broker, so it happens on a node of
//! the test's own.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead as _, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use futures_util::StreamExt as _;
use polyq_amqp::{Client, ConsumeOptions};
use polyq_testkit::rabbitmq_node::OwnNode;
use tokio::time::timeout;

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(60);
/// Jobs the command publishes.
const JOBS: usize = 1500;
/// Jobs printed before the node is stopped.
const BEFORE_STOP: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn babel_publish_count_exits_0_through_a_node_restart_with_every_job_on_the_broker() {
    let node = tokio::task::spawn_blocking(|| OwnNode::start("polyq-cli-restart"))
        .await
        .expect("the node started");
    let queue = "polyq.cli.restart";
    let count = JOBS.to_string();
    let args = [
        "babel",
        "publish",
        "--url",
        &node.url(),
        "--queue",
        queue,
        "--urn",
        "urn:babel:restart:test",
        "--data",
        "{}",
        "--count",
        &count,
    ];
    let mut child = common::command(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("polyq runs");
    let stdout = child.stdout.take().expect("stdout");
    let (lines_tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = lines_tx.send(line.expect("UTF-8 stdout"));
        }
    });

    let mut printed = Vec::new();
    while printed.len() < BEFORE_STOP {
        printed.push(
            lines
                .recv_timeout(LIMIT)
                .expect("jobs printed before the stop"),
        );
    }
    let node = tokio::task::spawn_blocking(move || {
        node.ctl(&["stop_app"]);
        node.ctl(&["start_app"]);
        node
    })
    .await
    .expect("the node restarted");
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("waited")
        .expect("polyq finishes");
    reader.join().expect("stdout read");
    printed.extend(lines.try_iter());
    assert!(
        output.status.success(),
        "polyq {args:?} failed through the restart: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(printed.len(), JOBS, "one line per job");
    let jobs: HashSet<&str> = printed.iter().map(String::as_str).collect();
    assert_eq!(jobs.len(), JOBS, "every job printed is its own");

    let client = Client::connect(&node.url()).await.expect("connect");
    let held = client
        .inspect_queue(queue)
        .await
        .expect("inspect the queue")
        .message_count as usize;
    assert!(held >= JOBS, "the broker holds {held} of {JOBS}");
    let mut consumer = client
        .consume(queue, &ConsumeOptions::default().prefetch(500))
        .await
        .expect("consume");
    let mut copies = HashMap::<String, usize>::new();
    for _ in 0..held {
        let delivery = timeout(LIMIT, consumer.next())
            .await
            .expect("delivered in time")
            .expect("stream open")
            .expect("delivery");
        let body = String::from_utf8(delivery.body.to_vec()).expect("UTF-8 body");
        assert!(jobs.contains(body.as_str()), "a job the command printed");
        *copies.entry(body).or_default() += 1;
        delivery.ack().await.expect("ack");
    }
    assert_eq!(copies.len(), JOBS, "every printed job is on the broker");
    println!(
        "{held} messages on the broker for {JOBS} jobs ({} duplicates)",
        held - JOBS
    );
    consumer.cancel().await.expect("cancel");
    client.close().await.expect("close");
}
