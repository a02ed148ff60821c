//! `polyq babel` and `polyq dlq` on Redis Sentinel (`redis+sentinel://`) and Redis Cluster
//! (`redis+cluster://`) URLs, run as the built binary against nodes of the tests' own
//! (`scripts/redis-sentinel`, `scripts/redis-cluster`).

use polyq_testkit::redis_nodes::RedisNodes;
use serde_json::Value;

mod common;
use common::{failure, polyq, success_lines};

const URN: &str = "urn:babel:orders:created";

fn run(args: &[&str]) -> Vec<String> {
    success_lines(polyq(args), args)
}

fn json_lines(args: &[&str]) -> Vec<Value> {
    run(args)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Publishes three jobs to `queue` (pushes waiting for a replica), then consumes them.
fn publish_and_consume(url: &str, layout: &str, queue: &str) {
    let durable = format!("{url}?wait_replicas=1&wait_timeout_ms=1000");
    let published = run(&[
        "babel",
        "publish",
        "--url",
        &durable,
        "--layout",
        layout,
        "--queue",
        queue,
        "--urn",
        URN,
        "--data",
        r#"{"n":1}"#,
        "--count",
        "3",
    ]);
    assert_eq!(published.len(), 3, "{published:?}");
    let consumed = json_lines(&[
        "babel",
        "consume",
        "--url",
        url,
        "--layout",
        layout,
        "--queue",
        queue,
        "--max",
        "3",
        "--timeout",
        "5",
    ]);
    assert_eq!(consumed.len(), 3, "{consumed:?}");
    assert!(
        consumed.iter().all(|report| report["accepts"] == true),
        "{consumed:?}"
    );
}

#[test]
fn babel_publishes_and_consumes_behind_sentinel() {
    let nodes = RedisNodes::sentinel();
    let url = nodes.url();
    for layout in ["default", "laravel"] {
        publish_and_consume(
            &url,
            layout,
            &polyq_testkit::unique_name("polyq-cli-sentinel"),
        );
    }
}

#[test]
fn babel_and_dlq_work_a_hash_tagged_queue_on_a_cluster() {
    let nodes = RedisNodes::cluster();
    let url = nodes.url();
    for layout in ["default", "laravel"] {
        let queue = format!("{{{}}}", polyq_testkit::unique_name("polyq-cli-cluster"));
        publish_and_consume(&url, layout, &queue);

        // A job on the queue's dead-letter queue is found by scanning every master.
        let dlq = format!("{queue}.dlq");
        run(&[
            "babel",
            "publish",
            "--url",
            &url,
            "--layout",
            layout,
            "--queue",
            &dlq,
            "--urn",
            URN,
            "--data",
            r#"{"n":2}"#,
        ]);
        let listed = json_lines(&["dlq", "list", "--url", &url, "--layout", layout]);
        let mine: Vec<&Value> = listed
            .iter()
            .filter(|q| q["queue"] == dlq.as_str())
            .collect();
        assert_eq!(mine.len(), 1, "{listed:?}");
        assert_eq!(mine[0]["depth"], 1);
        let shown = json_lines(&[
            "dlq", "show", "--url", &url, "--layout", layout, "--queue", &dlq,
        ]);
        assert_eq!(shown.len(), 1, "{shown:?}");
        assert_eq!(shown[0]["type"], URN);
        let purged = json_lines(&[
            "dlq", "purge", "--url", &url, "--layout", layout, "--queue", &dlq, "--yes",
        ]);
        assert_eq!(purged[0]["purged"], 1);
    }
}

#[test]
fn a_queue_without_a_hash_tag_is_refused_on_a_cluster_with_how_to_name_it() {
    let nodes = RedisNodes::cluster();
    let url = nodes.url();
    let queue = polyq_testkit::unique_name("polyq-cli-untagged");
    let stderr = failure(&[
        "babel", "publish", "--url", &url, "--queue", &queue, "--urn", URN, "--data", "{}",
    ]);
    assert!(stderr.contains("hash tag"), "{stderr}");
    assert!(stderr.contains(&format!("\"{{{queue}}}\"")), "{stderr}");
}
