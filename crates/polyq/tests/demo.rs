//! `polyq demo`: the timeline shows the same events in the same order on every run, on the
//! embedded broker, RabbitMQ and Redis.

use std::process::Command;

const ACEMQ: &[(&str, &str)] = &[
    ("acemq", "connected"),
    ("acemq", "declared"),
    ("acemq", "consuming"),
    ("acemq", "publish"),
    ("acemq", "failed"),
    ("acemq", "failed"),
    ("acemq", "handled"),
    ("acemq", "publish"),
    ("acemq", "failed"),
    ("acemq", "failed"),
    ("acemq", "failed"),
    ("acemq", "dead-lettered"),
    ("acemq", "publish"),
    ("acemq", "parked"),
    ("acemq", "drained"),
];

const BABEL: &[(&str, &str)] = &[
    ("babel", "connected"),
    ("babel", "produced"),
    ("babel", "failed"),
    ("babel", "handled"),
    ("babel", "produced"),
    ("babel", "produced"),
    ("babel", "dead-lettered"),
    ("babel", "poison"),
    ("babel", "redriven"),
    ("babel", "kept"),
    ("babel", "deployed"),
    ("babel", "handled"),
];

const DONE: (&str, &str) = ("demo", "done");

/// Runs the demo; returns its lines.
fn demo(args: &[&str]) -> Vec<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_polyq"))
        .arg("demo")
        .args(args)
        .output()
        .expect("polyq runs");
    assert!(
        output.status.success(),
        "polyq demo {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("UTF-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The `(part, event)` of each line, after checking the time column.
fn events(lines: &[String]) -> Vec<(String, String)> {
    lines
        .iter()
        .map(|line| {
            let mut words = line.split_whitespace();
            let time = words.next().unwrap_or_default();
            assert!(
                time.starts_with('+') && time.ends_with('s'),
                "a time since the start opens each line: {line}"
            );
            let part = words.next().unwrap_or_default().to_owned();
            let event = words.next().unwrap_or_default().to_owned();
            (part, event)
        })
        .collect()
}

fn expected(parts: &[&[(&str, &str)]]) -> Vec<(String, String)> {
    parts
        .iter()
        .flat_map(|part| part.iter())
        .chain(std::iter::once(&DONE))
        .map(|(p, e)| ((*p).to_owned(), (*e).to_owned()))
        .collect()
}

fn line<'a>(lines: &'a [String], event: &str, containing: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.split_whitespace().nth(2) == Some(event) && l.contains(containing))
        .unwrap_or_else(|| {
            panic!(
                "no {event} line with {containing:?} in:\n{}",
                lines.join("\n")
            )
        })
}

#[test]
fn the_demo_on_the_embedded_broker_shows_every_step_in_order() {
    let lines = demo(&[]);
    assert_eq!(
        events(&lines),
        expected(&[ACEMQ, BABEL]),
        "{}",
        lines.join("\n")
    );
    assert!(line(&lines, "connected", "").contains("memory://"));
    line(
        &lines,
        "failed",
        "order 1042, attempt 1: payment gateway timed out",
    );
    line(&lines, "handled", "order 1042, attempt 3: succeeded");
    line(
        &lines,
        "dead-lettered",
        "x-acemq-error = exhausted 3 attempts: PaymentDeclined: card reported stolen",
    );
    line(
        &lines,
        "parked",
        "original bytes intact: x-acemq-error = could not be decoded",
    );
    line(&lines, "failed", "urn:babel:orders:created attempts=0");
    line(&lines, "handled", "urn:babel:orders:created attempts=1");
    line(&lines, "dead-lettered", "urn:babel:orders:refunded");
    line(&lines, "dead-lettered", "reason unknown_urn");
    line(&lines, "poison", "reason poison");
    line(&lines, "kept", "(undecodable)");
    line(
        &lines,
        "handled",
        "urn:babel:orders:refunded attempts=0 replay=true",
    );
}

#[test]
fn each_part_runs_alone() {
    assert_eq!(events(&demo(&["acemq"])), expected(&[ACEMQ]));
    assert_eq!(events(&demo(&["babel"])), expected(&[BABEL]));
}

#[tokio::test]
async fn the_demo_on_rabbitmq_shows_the_same_steps_and_cleans_up() {
    let url = polyq_testkit::amqp_url();
    let lines = demo(&["--url", &url]);
    assert_eq!(
        events(&lines),
        expected(&[ACEMQ, BABEL]),
        "{}",
        lines.join("\n")
    );
    let connected = line(&lines, "connected", "amqp://");
    assert!(
        !connected.contains("guest:guest"),
        "credentials are redacted: {connected}"
    );
    line(&lines, "handled", "replay=true");

    let client = polyq_amqp::Client::connect(&url).await.unwrap();
    for queue in declared_queues(&lines) {
        assert!(
            matches!(
                client.inspect_queue(&queue).await,
                Err(polyq_amqp::Error::NotFound { .. })
            ),
            "{queue} was removed"
        );
    }
    client.close().await.ok();
}

#[tokio::test]
async fn the_babel_demo_on_redis_shows_the_same_steps_in_both_layouts_and_cleans_up() {
    let url = polyq_testkit::redis_url();
    for layout in ["default", "laravel"] {
        let lines = demo(&["babel", "--url", &url, "--layout", layout]);
        assert_eq!(events(&lines), expected(&[BABEL]), "{}", lines.join("\n"));
        let queue = line(&lines, "produced", " on ")
            .split(" on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap()
            .to_owned();
        let keys = polyq_testkit::brokers::redis_keys(&url, &queue).await;
        assert!(
            keys.is_empty(),
            "{layout}: the demo removed its keys, found {keys:?}"
        );
    }
}

#[test]
fn the_acemq_part_refuses_redis() {
    let output = Command::new(env!("CARGO_BIN_EXE_polyq"))
        .args(["demo", "--url", "redis://127.0.0.1:6379/0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("polyq demo babel"), "{error}");
}

/// Every queue name the timeline mentions.
fn declared_queues(lines: &[String]) -> Vec<String> {
    let mut queues: Vec<String> = lines
        .iter()
        .flat_map(|l| l.split([' ', ',', '(', ')', ':']))
        .filter(|w| w.starts_with("polyq-demo."))
        .map(str::to_owned)
        .collect();
    queues.sort();
    queues.dedup();
    assert!(
        queues.len() >= 5,
        "the queues are named in the timeline: {queues:?}"
    );
    queues
}
