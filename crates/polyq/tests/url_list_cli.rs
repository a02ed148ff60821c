//! Several broker addresses on the command line: `--url` given once per node, or the nodes
//! listed in one URL. A node that does not answer is passed over for the next; a list whose
//! nodes cannot all be reached fails with the list redacted.

mod common;

use common::{failure_stderr, polyq, success_lines};
use polyq_testkit::brokers::DeleteQueues;

/// `url` with its host and port replaced by 127.0.0.1:1, where nothing listens, and the
/// `host:port` it had.
fn dead_twin(url: &str) -> (String, String) {
    let (head, rest) = url
        .split_once('@')
        .expect("the test broker URL has credentials");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (host, tail) = rest.split_at(end);
    (format!("{head}@127.0.0.1:1{tail}"), host.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_first_node_is_passed_over_in_repeated_urls_and_in_a_list() {
    let live = polyq_testkit::amqp_url();
    let (dead, host) = dead_twin(&live);
    let queue = polyq_testkit::unique_name("polyq.cli.url-list");
    let _queues = DeleteQueues::new(&live, [queue.clone(), format!("{queue}.dlq")]);
    let publish = [
        "babel",
        "publish",
        "--url",
        &dead,
        "--url",
        &live,
        "--queue",
        &queue,
        "--urn",
        "urn:babel:url:list",
        "--data",
        "{}",
        "--count",
        "3",
    ];
    assert_eq!(success_lines(polyq(&publish), &publish).len(), 3);

    let list = dead.replacen("127.0.0.1:1", &format!("127.0.0.1:1,{host}"), 1);
    let consume = [
        "babel",
        "consume",
        "--url",
        &list,
        "--queue",
        &queue,
        "--limit",
        "3",
        "--timeout",
        "10",
    ];
    assert_eq!(success_lines(polyq(&consume), &consume).len(), 3);
}

#[test]
fn a_list_of_dead_nodes_fails_without_the_password() {
    let dead = "amqp://user:s3cret@127.0.0.1:1/%2f";
    let args = [
        "acemq",
        "publish",
        "--url",
        dead,
        "--url",
        "amqp://user:s3cret@127.0.0.1:2/%2f",
        "--routing-key",
        "q",
        "--data",
        "{}",
    ];
    let stderr = failure_stderr(polyq(&args), &args);
    assert!(
        stderr.contains("amqp://user:***@127.0.0.1:1,127.0.0.1:2/%2f"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
}
