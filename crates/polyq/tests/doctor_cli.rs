//! `polyq doctor`, run as the built binary: each rule's violation planted on RabbitMQ or Redis
//! and found, the exit status, and queues left with every message, in order.

use std::collections::BTreeSet;
use std::process::Output;

use acemq::topology::{SourceQueue, Topology};
use acemq::topology_apply;
use polyq_amqp::{Client, FieldTable, FieldValue, OutgoingMessage, Properties, QueueSpec};
use polyq_testkit::brokers::{DeleteQueues, DeleteRedisKeys};
use polyq_testkit::unique_name;
use serde_json::Value;

mod common;
use common::polyq;

const POLICY: &str = "exponential(6, 10s, 5m)";

/// Runs `polyq doctor --output json` with `args`; the findings and whether it exited 0.
fn doctor(url: &str, args: &[&str]) -> (Vec<Value>, bool) {
    let mut all = vec!["doctor", "--url", url, "--output", "json"];
    all.extend_from_slice(args);
    let output: Output = polyq(&all);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "polyq {all:?}: {stderr}"
    );
    let findings = String::from_utf8(output.stdout)
        .expect("UTF-8 stdout")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON finding per line"))
        .collect();
    (findings, output.status.success())
}

fn rules(findings: &[Value]) -> BTreeSet<String> {
    findings
        .iter()
        .map(|f| f["rule"].as_str().expect("rule").to_owned())
        .collect()
}

fn of_rule<'a>(findings: &'a [Value], rule: &str) -> Vec<&'a Value> {
    findings.iter().filter(|f| f["rule"] == rule).collect()
}

async fn client() -> Client {
    Client::connect(&polyq_testkit::amqp_url()).await.unwrap()
}

async fn publish(client: &Client, queue: &str, headers: FieldTable, body: &str) {
    let properties = Properties {
        headers,
        ..Properties::default()
    };
    let confirm = client
        .publish(OutgoingMessage::new(
            "",
            queue,
            properties,
            body.as_bytes().to_vec(),
        ))
        .await
        .unwrap();
    confirm.await.unwrap();
}

fn envelope_headers(type_name: &str) -> FieldTable {
    let mut properties = Properties::default();
    acemq::Envelope::of(type_name)
        .build()
        .unwrap()
        .write_properties(&mut properties);
    properties.headers
}

/// Every body in `queue`, in order, taken off it.
async fn bodies(queue: &str) -> Vec<String> {
    let reader = Client::connect(&polyq_testkit::amqp_url()).await.unwrap();
    let mut seen = Vec::new();
    while let Some(delivery) = reader.get(queue).await.unwrap() {
        delivery.ack().await.unwrap();
        seen.push(String::from_utf8(delivery.body.to_vec()).unwrap());
    }
    reader.close().await.unwrap();
    seen
}

/// Declares what `topology` plans, as an AceMQ service would; the queues it declared.
async fn plant(client: &Client, topology: Topology) -> Vec<String> {
    let plan = topology.plan().unwrap();
    let report = topology_apply::apply(client, &plan).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    plan.queues
        .into_iter()
        .map(|queue| queue.item.name)
        .collect()
}

/// A source queue with dead-lettering and the consumer of [`POLICY`], everything declared.
async fn complete_acemq_topology(client: &Client, queue: &str) -> Vec<String> {
    let topology = Topology::new()
        .queue(SourceQueue::new(queue).with_dead_letter())
        .consumer(queue, POLICY.parse().unwrap());
    plant(client, topology).await
}

#[tokio::test]
async fn a_clean_acemq_queue_has_no_findings_and_keeps_its_messages_in_order() {
    let url = polyq_testkit::amqp_url();
    let client = client().await;
    let queue = unique_name("doctor.clean");
    let declared = complete_acemq_topology(&client, &queue).await;
    let _queues = DeleteQueues::new(&url, declared.iter());
    for n in 1..=3 {
        publish(
            &client,
            &queue,
            envelope_headers("order.placed"),
            &format!("{n}"),
        )
        .await;
    }

    let (findings, ok) = doctor(&url, &["--queue", &queue, "--policy", POLICY]);
    let kept = bodies(&queue).await;

    assert!(findings.is_empty(), "{findings:?}");
    assert!(ok);
    assert_eq!(kept, ["1", "2", "3"]);
}

#[tokio::test]
async fn malformed_below_one_and_unknown_reserved_headers_are_found_and_left_in_place() {
    let url = polyq_testkit::amqp_url();
    let client = client().await;
    let queue = unique_name("doctor.headers");
    let declared = complete_acemq_topology(&client, &queue).await;
    let _queues = DeleteQueues::new(&url, declared.iter());
    let mut below_one = envelope_headers("a");
    below_one.insert(acemq::headers::ATTEMPT.into(), FieldValue::I32(0));
    let mut malformed = envelope_headers("a");
    malformed.insert(acemq::headers::VERSION.into(), FieldValue::from("soon"));
    let mut unknown = envelope_headers("a");
    unknown.insert("x-acemq-from-next-year".into(), FieldValue::I32(1));
    for (n, headers) in [below_one, malformed, unknown].into_iter().enumerate() {
        publish(&client, &queue, headers, &n.to_string()).await;
    }

    let (findings, ok) = doctor(&url, &["--queue", &queue]);
    let kept = bodies(&queue).await;

    let below = of_rule(&findings, "acemq/counter-below-one");
    assert_eq!(below.len(), 1, "{findings:?}");
    assert_eq!(below[0]["subject"], format!("queue {queue}, message 1"));
    assert_eq!(below[0]["severity"], "error");
    let malformed = of_rule(&findings, "acemq/malformed-reserved-header");
    assert_eq!(malformed.len(), 1, "{findings:?}");
    assert!(
        malformed[0]["message"]
            .as_str()
            .unwrap()
            .contains("x-acemq-version")
    );
    assert!(!malformed[0]["message"].as_str().unwrap().contains("soon"));
    let unknown = of_rule(&findings, "acemq/unknown-reserved-header");
    assert_eq!(unknown.len(), 1, "{findings:?}");
    assert_eq!(unknown[0]["severity"], "warning");
    assert!(unknown[0]["fix"].as_str().unwrap().contains("upgrade"));
    assert_eq!(findings.len(), 3, "{findings:?}");
    assert!(!ok, "errors give exit status 1");
    assert_eq!(kept, ["0", "1", "2"]);
}

#[tokio::test]
async fn a_rung_route_without_its_binding_is_an_error() {
    let url = polyq_testkit::amqp_url();
    let client = client().await;
    let queue = unique_name("doctor.route");
    let declared = complete_acemq_topology(&client, &queue).await;
    let _queues = DeleteQueues::new(&url, declared.iter());
    client
        .unbind_queue(&polyq_amqp::Binding::new(&queue, "acemq.retry", &queue))
        .await
        .unwrap();

    let (findings, ok) = doctor(&url, &["--queue", &queue, "--policy", POLICY]);

    let nowhere = of_rule(&findings, "acemq/rung-route-nowhere");
    assert_eq!(nowhere.len(), 1, "{findings:?}");
    assert_eq!(nowhere[0]["severity"], "error");
    assert!(
        nowhere[0]["fix"]
            .as_str()
            .unwrap()
            .contains(&format!("routing key {queue}"))
    );
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert!(!ok, "an error gives exit status 1");
}

#[tokio::test]
async fn missing_rungs_and_a_dead_letter_queue_that_is_not_there_are_errors() {
    let url = polyq_testkit::amqp_url();
    let client = client().await;
    let queue = unique_name("doctor.rungs");
    let declared = plant(
        &client,
        Topology::new().queue(SourceQueue::new(&queue).with_dead_letter()),
    )
    .await;
    let _queues = DeleteQueues::new(&url, declared.iter());
    client.delete_queue(&format!("{queue}.dlq")).await.unwrap();

    let (findings, ok) = doctor(&url, &["--queue", &queue, "--policy", POLICY]);

    let rungs = of_rule(&findings, "acemq/rung-missing");
    assert_eq!(rungs.len(), 3, "{findings:?}");
    assert!(
        rungs[0]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{queue}.retry.40s"))
    );
    let nowhere = of_rule(&findings, "acemq/dead-letter-nowhere");
    assert_eq!(nowhere.len(), 1, "{findings:?}");
    assert!(
        nowhere[0]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{queue}.dlq"))
    );
    assert_eq!(rules(&findings).len(), 2, "{findings:?}");
    assert!(!ok);
}

#[tokio::test]
async fn a_classic_source_queue_is_a_warning_and_alone_exits_zero() {
    let url = polyq_testkit::amqp_url();
    let client = client().await;
    let queue = unique_name("doctor.classic");
    let declared = plant(
        &client,
        Topology::new().queue(SourceQueue::new(&queue).classic()),
    )
    .await;
    let _queues = DeleteQueues::new(&url, declared.iter());

    let (findings, ok) = doctor(&url, &["--queue", &queue]);
    let text = polyq(&["doctor", "--url", &url, "--queue", &queue]);

    let line = String::from_utf8(text.stdout).unwrap();
    assert!(
        line.starts_with(&format!("warning acemq/source-not-quorum queue {queue}: ")),
        "{line}"
    );
    assert!(line.contains("(fix: declare a quorum queue"), "{line}");
    assert!(text.status.success());
    assert_eq!(
        rules(&findings),
        BTreeSet::from(["acemq/source-not-quorum".to_owned()])
    );
    assert_eq!(findings[0]["severity"], "warning");
    assert!(ok, "warnings alone exit 0");
}

#[tokio::test]
async fn a_queue_with_arguments_of_its_own_is_not_judged_by_type_and_keeps_them() {
    let url = polyq_testkit::amqp_url();
    let client = client().await;
    let queue = unique_name("doctor.own-arguments");
    let own = SourceQueue::new(&queue)
        .classic()
        .argument("x-max-length", FieldValue::I64(10));
    let declared = plant(&client, Topology::new().queue(own.clone())).await;
    let _queues = DeleteQueues::new(&url, declared.iter());

    let (findings, ok) = doctor(&url, &["--queue", &queue]);
    let still = plant(&client, Topology::new().queue(own)).await;

    assert!(findings.is_empty(), "{findings:?}");
    assert!(ok);
    assert_eq!(still, declared, "the same declaration is still accepted");
}

#[tokio::test]
async fn a_queue_that_does_not_exist_is_one_error() {
    let url = polyq_testkit::amqp_url();
    let queue = unique_name("doctor.absent");
    let (findings, ok) = doctor(&url, &["--queue", &queue, "--policy", POLICY]);
    assert_eq!(
        rules(&findings),
        BTreeSet::from(["acemq/queue-missing".to_owned()])
    );
    assert!(!ok);
    let client = client().await;
    let absent = client.inspect_queue(&queue).await;
    assert!(
        matches!(absent, Err(polyq_amqp::Error::NotFound { .. })),
        "{absent:?}"
    );
}

const VALID: &str = r#"{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"id":"i","queue":"orders","lang":"python","schema_version":1,"created_at":1},"attempts":0}"#;

fn planted_bodies() -> [String; 4] {
    [
        VALID.replacen(r#""attempts":0"#, r#""attempts":0,"timestamp":1"#, 1),
        VALID.replacen(r#""schema_version":1"#, r#""schema_version":2"#, 1),
        VALID.replacen(r#""job":"urn:babel:orders:created""#, r#""job":"  ""#, 1),
        VALID.replacen(r#""python""#, r#""cobol""#, 1),
    ]
}

fn assert_body_rules(findings: &[Value], queue: &str) {
    for (position, rule) in [
        (1, "babelqueue/forbidden-key"),
        (2, "babelqueue/unsupported-schema-version"),
        (3, "babelqueue/blank-urn"),
        (4, "babelqueue/unknown-lang"),
    ] {
        let found = of_rule(findings, rule);
        assert_eq!(found.len(), 1, "{rule}: {findings:?}");
        assert_eq!(
            found[0]["subject"],
            format!("queue {queue}, message {position}")
        );
    }
}

#[tokio::test]
async fn babelqueue_bodies_and_a_missing_dead_letter_queue_are_found_on_rabbitmq() {
    let url = polyq_testkit::amqp_url();
    let client = client().await;
    let queue = unique_name("doctor.babel");
    let _queues = DeleteQueues::new(&url, [&queue]);
    client
        .declare_queue(&QueueSpec::new(queue.clone()))
        .await
        .unwrap();
    for body in planted_bodies() {
        publish(&client, &queue, FieldTable::new(), &body).await;
    }

    let (findings, ok) = doctor(&url, &["--queue", &queue, "--family", "babel"]);
    let kept = bodies(&queue).await;

    assert_body_rules(&findings, &queue);
    let missing = of_rule(&findings, "babelqueue/dead-letter-queue-missing");
    assert_eq!(missing.len(), 1, "{findings:?}");
    assert!(
        missing[0]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{queue}.dlq"))
    );
    assert_eq!(findings.len(), 5, "{findings:?}");
    assert!(!ok);
    assert_eq!(kept, planted_bodies());
}

#[tokio::test]
async fn a_clean_babelqueue_queue_on_rabbitmq_has_no_findings() {
    let url = polyq_testkit::amqp_url();
    let client = client().await;
    let queue = unique_name("doctor.babel-clean");
    let dlq = format!("{queue}.dlq");
    let _queues = DeleteQueues::new(&url, [&queue, &dlq]);
    for name in [&queue, &dlq] {
        client
            .declare_queue(&QueueSpec::new(name.clone()))
            .await
            .unwrap();
    }
    publish(&client, &queue, FieldTable::new(), VALID).await;

    let (findings, ok) = doctor(&url, &["--queue", &queue, "--family", "babel"]);
    let kept = bodies(&queue).await;

    assert!(findings.is_empty(), "{findings:?}");
    assert!(ok);
    assert_eq!(kept, [VALID]);
}

async fn redis() -> redis::aio::MultiplexedConnection {
    redis::Client::open(polyq_testkit::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn rpush(connection: &mut redis::aio::MultiplexedConnection, key: &str, value: &str) {
    let _: u64 = redis::cmd("RPUSH")
        .arg(key)
        .arg(value)
        .query_async(connection)
        .await
        .unwrap();
}

async fn lrange(connection: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(connection)
        .await
        .unwrap()
}

#[tokio::test]
async fn mixed_layouts_and_bad_bodies_are_found_on_redis_and_nothing_is_taken() {
    let url = polyq_testkit::redis_url();
    let mut connection = redis().await;
    let queue = unique_name("doctor.redis");
    // The keys of both layouts: `<queue>` and `queues:<queue>`.
    let _keys = DeleteRedisKeys::new(&url, [&queue]);
    let laravel = format!("queues:{queue}");
    let [first, second, third, fourth] = planted_bodies();
    for body in [&first, &second] {
        rpush(&mut connection, &queue, body).await;
    }
    for body in [&third, &fourth] {
        rpush(&mut connection, &laravel, body).await;
    }

    let (findings, ok) = doctor(&url, &["--queue", &queue]);
    let kept = (
        lrange(&mut connection, &queue).await,
        lrange(&mut connection, &laravel).await,
    );

    assert_body_rules(&findings, &queue);
    let mixed = of_rule(&findings, "babelqueue/mixed-redis-layouts");
    assert_eq!(mixed.len(), 1, "{findings:?}");
    assert_eq!(mixed[0]["severity"], "error");
    assert_eq!(findings.len(), 5, "{findings:?}");
    assert!(!ok);
    assert_eq!(kept, (vec![first, second], vec![third, fourth]));
}

#[tokio::test]
async fn a_clean_redis_queue_has_no_findings_and_text_output_says_so() {
    let url = polyq_testkit::redis_url();
    let mut connection = redis().await;
    let queue = unique_name("doctor.redis-clean");
    let _keys = DeleteRedisKeys::new(&url, [&queue]);
    let framed = babelqueue::projection::frame(VALID, &[("bq-schema-version", "1")]).into_owned();
    rpush(&mut connection, &queue, &framed).await;

    let (findings, ok) = doctor(&url, &["--queue", &queue]);
    let text = polyq(&["doctor", "--url", &url, "--queue", &queue]);
    let kept = lrange(&mut connection, &queue).await;

    assert!(findings.is_empty(), "{findings:?}");
    assert!(ok);
    assert!(text.status.success());
    assert!(text.stdout.is_empty());
    assert_eq!(String::from_utf8_lossy(&text.stderr).trim(), "no findings");
    assert_eq!(kept, [framed]);
}

#[tokio::test]
async fn without_queue_names_every_redis_queue_of_either_layout_is_examined() {
    let url = polyq_testkit::redis_url();
    let mut connection = redis().await;
    let queue = unique_name("doctor.redis-scan");
    let _keys = DeleteRedisKeys::new(&url, [&queue]);
    let laravel_delayed = format!("queues:{queue}:delayed");
    let [forbidden, ..] = planted_bodies();
    rpush(&mut connection, &queue, &forbidden).await;
    let _: u64 = redis::cmd("ZADD")
        .arg(&laravel_delayed)
        .arg(1)
        .arg(VALID)
        .query_async(&mut connection)
        .await
        .unwrap();

    let (findings, _) = doctor(&url, &[]);

    let ours: Vec<&Value> = findings
        .iter()
        .filter(|f| {
            let subject = f["subject"].as_str().unwrap();
            subject == format!("queue {queue}") || subject.starts_with(&format!("queue {queue},"))
        })
        .collect();
    let rules: BTreeSet<&str> = ours.iter().map(|f| f["rule"].as_str().unwrap()).collect();
    assert_eq!(
        rules,
        BTreeSet::from(["babelqueue/forbidden-key", "babelqueue/mixed-redis-layouts"]),
        "{findings:?}"
    );
}

#[test]
fn without_queue_names_or_the_management_api_the_error_says_to_name_them() {
    let url = polyq_testkit::amqp_url();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .unwrap()
        .port();
    let management = format!("http://guest:hidden-word@127.0.0.1:{port}");
    let output = polyq(&["doctor", "--url", &url, "--management-url", &management]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--queue"), "{stderr}");
    assert!(stderr.contains("management API"), "{stderr}");
    assert!(!stderr.contains("hidden-word"), "{stderr}");
}

#[tokio::test]
async fn without_a_queue_the_family_s_queues_are_found_through_the_management_api() {
    let url = polyq_testkit::amqp_url();
    let client = client().await;
    let prefix = unique_name("doctor.survey");
    let (clean, broken, plain) = (
        format!("{prefix}.clean"),
        format!("{prefix}.broken"),
        format!("{prefix}.plain"),
    );
    let mut declared = complete_acemq_topology(&client, &clean).await;
    declared.extend(
        plant(
            &client,
            Topology::new().queue(SourceQueue::new(&broken).with_dead_letter()),
        )
        .await,
    );
    client.delete_queue(&format!("{broken}.dlq")).await.unwrap();
    // Of neither family: not examined as AceMQ's.
    client.declare_queue(&QueueSpec::new(&plain)).await.unwrap();
    declared.push(plain.clone());
    let _queues = DeleteQueues::new(&url, declared.iter());

    // The API lists a queue once its declaration is recorded: polled, so a slow node is
    // waited for rather than failed.
    let args = ["--prefix", prefix.as_str(), "--policy", POLICY];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (findings, ok) = loop {
        let (findings, ok) = doctor(&url, &args);
        if !findings.is_empty() || std::time::Instant::now() > deadline {
            break (findings, ok);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };

    let nowhere = of_rule(&findings, "acemq/dead-letter-nowhere");
    assert_eq!(nowhere.len(), 1, "{findings:?}");
    assert!(
        nowhere[0]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{broken}.dlq"))
    );
    assert_eq!(
        of_rule(&findings, "acemq/rung-missing").len(),
        3,
        "{findings:?}"
    );
    assert_eq!(rules(&findings).len(), 2, "{findings:?}");
    for finding in &findings {
        let text = finding.to_string();
        assert!(text.contains(&broken), "only the broken queue: {finding}");
    }
    assert!(!ok);
}
