//! `polyq babel publish`, `consume` and `redrive`, run as the built binary against RabbitMQ and
//! Redis (both layouts).

use std::time::Duration;

use babelqueue::BabelQueue;
use babelqueue::transport::{AnyTransport, ConnectOptions, RedisLayout};
use serde_json::Value;

mod common;
use common::{command, failure, polyq, success_lines, with_input};
use polyq_testkit::brokers::DeleteQueues;

fn run(args: &[&str]) -> Vec<String> {
    success_lines(polyq(args), args)
}

async fn round_trip(url: &str, layout: &str) {
    let queue = polyq_testkit::unique_name("polyq.cli.babel");
    let _queues = DeleteQueues::new(url, [queue.clone(), format!("{queue}.dlq")]);
    let headers_ride = layout == "default";
    let mut publish = vec![
        "babel",
        "publish",
        "--url",
        url,
        "--layout",
        layout,
        "--queue",
        &queue,
        "--urn",
        "urn:babel:orders:created",
        "--data",
        r#"{"order_id":1042,"amount":99.90,"note":"café ☕"}"#,
        "--trace-id",
        "trace-7",
        "--count",
        "2",
    ];
    if headers_ride {
        publish.extend([
            "--header",
            "traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ]);
    }
    let bodies = run(&publish);
    assert_eq!(bodies.len(), 2, "{layout}: one body per job");
    for body in &bodies {
        let job: Value = serde_json::from_str(body).unwrap();
        assert_eq!(job["job"], "urn:babel:orders:created");
        assert_eq!(job["trace_id"], "trace-7");
        assert_eq!(job["meta"]["queue"], queue.as_str());
        assert!(
            body.contains(r#""data":{"order_id":1042,"amount":99.90,"note":"café ☕"}"#),
            "data bytes kept: {body}"
        );
    }

    let consumed = run(&[
        "babel",
        "consume",
        "--url",
        url,
        "--layout",
        layout,
        "--queue",
        &queue,
        "--max",
        "2",
        "--timeout",
        "5",
    ]);
    assert_eq!(consumed.len(), 2, "{layout}");
    for (line, body) in consumed.iter().zip(&bodies) {
        let report: Value = serde_json::from_str(line).unwrap();
        assert_eq!(report["accepts"], true, "{line}");
        assert_eq!(report["urn"], "urn:babel:orders:created");
        assert_eq!(
            report["envelope"],
            body.as_str(),
            "{layout}: the job as published"
        );
        if headers_ride {
            assert_eq!(
                report["headers"]["traceparent"],
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            );
        }
        // The same line `babel decode` prints for the body.
        let mut expected: Value = serde_json::from_str(&polyq_decode(body)).unwrap();
        if headers_ride {
            expected["headers"] = report["headers"].clone();
        }
        assert_eq!(report, expected);
    }
    let empty = run(&[
        "babel",
        "consume",
        "--url",
        url,
        "--layout",
        layout,
        "--queue",
        &queue,
        "--timeout",
        "0.3",
    ]);
    assert!(empty.is_empty(), "{layout}: the jobs were acknowledged");
}

fn polyq_decode(body: &str) -> String {
    let output = with_input(command(&["babel", "decode"]), body.as_bytes());
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn publish_then_consume_on_rabbitmq() {
    round_trip(&polyq_testkit::amqp_url(), "default").await;
}

#[tokio::test]
async fn publish_then_consume_on_redis_default_layout() {
    round_trip(&polyq_testkit::redis_url(), "default").await;
}

#[tokio::test]
async fn publish_then_consume_on_redis_laravel_layout() {
    round_trip(&polyq_testkit::redis_url(), "laravel").await;
}

async fn redrive(url: &str) {
    let queue = polyq_testkit::unique_name("polyq.cli.redrive");
    let _queues = DeleteQueues::new(url, [queue.clone(), format!("{queue}.dlq")]);
    let dlq = format!("{queue}.dlq");
    let layout = ConnectOptions::default().redis_layout(RedisLayout::Default);
    let jobs = BabelQueue::with_transport(
        AnyTransport::connect(url, layout).await.unwrap(),
        queue.as_str(),
    );
    let sent = jobs
        .publish(
            "urn:babel:orders:shipped",
            &serde_json::json!({"order_id": 7}),
        )
        .await
        .unwrap();
    // No handler for the URN and one attempt: the job is dead-lettered as unknown_urn.
    let report = jobs
        .worker()
        .max_attempts(1)
        .consume(1, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 1);
    let id = sent.meta().unwrap().id().unwrap().to_owned();

    let plan = run(&["babel", "redrive", "--url", url, "--dlq", &dlq, "--dry-run"]);
    let plan: Value = serde_json::from_str(&plan[0]).unwrap();
    assert_eq!(
        (plan["redriven"].as_u64(), plan["skipped"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(plan["items"][0]["action"], "dry_run");
    assert_eq!(plan["items"][0]["to"], queue.as_str());

    let args = ["babel", "redrive", "--url", url, "--dlq", &dlq, "--bypass"];
    let output = polyq(&args);
    assert!(output.status.success());
    assert!(
        output.stderr.is_empty(),
        "no progress bar when standard error is not a terminal: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let done: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(done.len(), 1, "one JSON report");
    let done: Value = serde_json::from_str(&done[0]).unwrap();
    assert_eq!(done["redriven"], 1);
    let item = &done["items"][0];
    assert_eq!(item["action"], "redriven");
    assert_eq!(item["redriven"], true);
    assert_eq!(item["reason"], "unknown_urn");
    assert_eq!(item["message_id"], id.as_str());
    assert_eq!(
        (item["from"].as_str(), item["to"].as_str()),
        (Some(dlq.as_str()), Some(queue.as_str()))
    );

    let back = run(&[
        "babel",
        "consume",
        "--url",
        url,
        "--queue",
        &queue,
        "--max",
        "1",
        "--timeout",
        "5",
    ]);
    let back: Value = serde_json::from_str(&back[0]).unwrap();
    let envelope: Value = serde_json::from_str(back["envelope"].as_str().unwrap()).unwrap();
    assert_eq!(envelope["attempts"], 0, "attempts reset");
    assert!(
        envelope.get("dead_letter").is_none(),
        "the block is removed"
    );
    assert_eq!(back["headers"]["bq-replay-bypass"], "1");
    let left = run(&[
        "babel",
        "consume",
        "--url",
        url,
        "--queue",
        &dlq,
        "--timeout",
        "0.3",
    ]);
    assert!(left.is_empty(), "the dead-letter queue is empty");
}

#[tokio::test]
async fn redrive_moves_a_dead_lettered_job_back_on_rabbitmq() {
    redrive(&polyq_testkit::amqp_url()).await;
}

#[tokio::test]
async fn redrive_moves_a_dead_lettered_job_back_on_redis() {
    redrive(&polyq_testkit::redis_url()).await;
}

#[test]
fn bad_input_is_named_and_fails() {
    let redis = polyq_testkit::redis_url();
    let error = failure(&[
        "babel",
        "publish",
        "--url",
        "kafka://ops:hunter2@broker",
        "--queue",
        "q",
        "--urn",
        "urn:a:b",
        "--data",
        "{}",
    ]);
    assert!(
        error.contains("kafka://ops:***@broker") && !error.contains("hunter2"),
        "{error}"
    );
    let error = failure(&[
        "babel", "publish", "--url", &redis, "--queue", "q", "--urn", "urn:a:b", "--data", "{",
    ]);
    assert!(error.contains("--data: not JSON"), "{error}");
    let error = failure(&[
        "babel",
        "publish",
        "--url",
        &redis,
        "--layout",
        "laravel",
        "--queue",
        "q",
        "--urn",
        "urn:a:b",
        "--data",
        "{}",
        "--header",
        "traceparent=x",
    ]);
    assert!(
        error.contains("--header") && error.contains("Laravel"),
        "{error}"
    );
    let error = failure(&[
        "babel",
        "consume",
        "--url",
        &redis,
        "--queue",
        "q",
        "--timeout=0",
    ]);
    assert!(error.contains("--timeout"), "{error}");
    let error = failure(&[
        "babel", "consume", "--url", &redis, "--layout", "symfony", "--queue", "q",
    ]);
    assert!(error.contains("symfony"), "{error}");
}
