//! `polyq acemq publish`, `consume` and `topology`, run as the built binary against RabbitMQ.

use polyq_amqp::{Client, FieldValue, QueueSpec};
use polyq_testkit::brokers::DeleteQueues;
use serde_json::Value;

mod common;
use common::{failure, polyq, success_lines};

fn run(args: &[&str]) -> Vec<Value> {
    success_lines(polyq(args), args)
        .iter()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect()
}

fn json(args: &[&str]) -> (bool, Value) {
    let output = polyq(args);
    let value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "polyq {args:?}: no JSON on stdout ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.success(), value)
}

#[tokio::test]
async fn publish_then_consume_round_trips_the_envelope_as_decode_shows_it() {
    let url = polyq_testkit::amqp_url();
    let queue = polyq_testkit::unique_name("polyq.cli.acemq");
    let _queues = DeleteQueues::new(&url, [&queue]);
    let client = Client::connect(&url).await.unwrap();
    client.declare_queue(&QueueSpec::new(&queue)).await.unwrap();

    let published = run(&[
        "acemq",
        "publish",
        "--url",
        &url,
        "--routing-key",
        &queue,
        "--type",
        "order.placed",
        "--header",
        "x-tenant=acme",
        "--header",
        "x-region=eu=west",
        "--correlation-id",
        "corr-1",
        "--claim",
        "s3://bucket/order-1",
        "--json",
        r#"{"order":1042,"note":"café"}"#,
        "--count",
        "2",
    ]);
    assert_eq!(published.len(), 2);
    assert_ne!(
        published[0]["id"], published[1]["id"],
        "each message has its own id"
    );
    for sent in &published {
        assert_eq!(sent["type"], "order.placed");
        assert_eq!(sent["correlation_id"], "corr-1");
        assert_eq!(sent["claim"], "s3://bucket/order-1");
        assert_eq!(sent["attempt"], 1);
        assert_eq!(
            sent["headers"],
            serde_json::json!({"x-tenant": "acme", "x-region": "eu=west"})
        );
        assert_eq!(sent["content_type"], "application/json");
        assert_eq!(
            sent["payload"],
            serde_json::json!({"order": 1042, "note": "café"})
        );
        assert!(sent["origin"].as_str().unwrap().starts_with("polyq@"));
    }

    let consumed = run(&[
        "acemq",
        "consume",
        "--url",
        &url,
        "--queue",
        &queue,
        "--count",
        "2",
        "--timeout",
        "5",
    ]);
    assert_eq!(consumed.len(), 2);
    for (sent, got) in published.iter().zip(&consumed) {
        let (mut sent, mut got) = (sent.clone(), got.clone());
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            keys(&sent),
            keys(&got),
            "one shape for publish, consume and decode"
        );
        sent["age_ms"] = Value::Null;
        got["age_ms"] = Value::Null;
        assert_eq!(sent, got, "what was published is what was consumed");
    }
    assert_eq!(
        client.inspect_queue(&queue).await.unwrap().message_count,
        0,
        "consume acknowledged both"
    );

    let idle = run(&[
        "acemq",
        "consume",
        "--url",
        &url,
        "--queue",
        &queue,
        "--timeout",
        "0.3",
    ]);
    assert!(
        idle.is_empty(),
        "an empty queue ends the command at the timeout"
    );
    client.close().await.ok();
}

#[tokio::test]
async fn consume_leaves_a_message_it_cannot_show_on_the_queue() {
    let url = polyq_testkit::amqp_url();
    let queue = polyq_testkit::unique_name("polyq.cli.acemq.bad");
    let _queues = DeleteQueues::new(&url, [&queue]);
    let client = Client::connect(&url).await.unwrap();
    client.declare_queue(&QueueSpec::new(&queue)).await.unwrap();
    let properties = polyq_amqp::Properties::default().with_content_type("application/json");
    let confirm = client
        .publish(polyq_amqp::OutgoingMessage::new(
            "",
            &queue,
            properties,
            "{not json",
        ))
        .await
        .unwrap();
    confirm.await.unwrap();

    let error = failure(&[
        "acemq",
        "consume",
        "--url",
        &url,
        "--queue",
        &queue,
        "--count",
        "1",
        "--timeout",
        "5",
    ]);
    assert!(
        error.contains("left on the queue") && error.contains("not valid JSON"),
        "{error}"
    );
    let kept = client
        .get(&queue)
        .await
        .unwrap()
        .expect("the message is still there");
    assert_eq!(&kept.body[..], b"{not json");
    kept.ack().await.unwrap();
    client.close().await.ok();
}

#[test]
fn topology_plan_prints_the_consumer_declarations_as_data() {
    let (ok, plan) = json(&[
        "acemq",
        "topology",
        "plan",
        "--queue",
        "orders",
        "--policy",
        "exponential(5, 10s, 1m)",
        "--broker-wait-from",
        "30s",
    ]);
    assert!(ok);
    let names = |key: &str| {
        plan[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names("exchanges"), ["acemq.dlx", "acemq.retry"]);
    assert_eq!(
        names("queues"),
        [
            "orders.dlq",
            "orders.parked",
            "orders.retry.40s",
            "orders.retry.1m"
        ]
    );
    let rung = &plan["queues"][2];
    assert_eq!(rung["type"], "classic");
    assert_eq!(rung["declared_by"], "consumer");
    assert_eq!(
        rung["arguments"],
        serde_json::json!({"x-message-ttl": 40000, "x-dead-letter-exchange": "acemq.retry", "x-dead-letter-routing-key": "orders"})
    );
    let bindings = plan["bindings"].as_array().unwrap();
    assert_eq!(bindings.len(), 3);
    assert_eq!(
        bindings[2],
        serde_json::json!({"queue": "orders", "exchange": "acemq.retry", "routing_key": "orders", "arguments": {}, "declared_by": "consumer"})
    );

    let (_, no_rungs) = json(&[
        "acemq",
        "topology",
        "plan",
        "--queue",
        "orders",
        "--policy",
        "exponential(5, 1s, 1m).giveUpAfter(1h)",
        "--source-queue",
    ]);
    let queues: Vec<_> = no_rungs["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| (q["name"].as_str().unwrap(), q["type"].as_str().unwrap()))
        .collect();
    assert_eq!(
        queues,
        [
            ("orders", "quorum"),
            ("orders.dlq", "classic"),
            ("orders.parked", "classic")
        ]
    );
}

#[tokio::test]
async fn topology_apply_then_validate_finds_no_drift_until_a_queue_is_declared_otherwise() {
    let url = polyq_testkit::amqp_url();
    let queue = polyq_testkit::unique_name("polyq.cli.topology");
    let consumer = [
        "--queue",
        queue.as_str(),
        "--policy",
        "fixed(3, 2s)",
        "--broker-wait-from",
        "1s",
        "--source-queue",
    ];
    let with = |command: &'static str| {
        let mut args = vec!["acemq", "topology", command, "--url", url.as_str()];
        args.extend(consumer);
        args
    };
    let client = Client::connect(&url).await.unwrap();
    let declared = [
        queue.clone(),
        format!("{queue}.dlq"),
        format!("{queue}.parked"),
        format!("{queue}.retry.2s"),
    ];
    let _queues = DeleteQueues::new(&url, declared.iter());

    let (ok, applied) = json(&with("apply"));
    assert!(ok, "{applied}");
    assert_eq!(applied["conflicts"], 0);
    let states: Vec<_> = applied["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "queue")
        .map(|i| i["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["created"; 4]);
    for name in &declared {
        client
            .inspect_queue(name)
            .await
            .unwrap_or_else(|e| panic!("{name} was created: {e}"));
    }

    let (ok, again) = json(&with("apply"));
    assert!(ok, "applying twice is harmless: {again}");
    assert!(
        again["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["kind"] == "queue")
            .all(|i| i["state"] == "exists")
    );

    let (ok, report) = json(&with("validate"));
    assert!(ok, "{report}");
    assert_eq!(report["drift"], 0);

    // Someone declares the parking queue differently.
    let parked = format!("{queue}.parked");
    client.delete_queue(&parked).await.unwrap();
    client
        .declare_queue(&QueueSpec::new(&parked).argument("x-max-length", FieldValue::I64(10)))
        .await
        .unwrap();
    let (ok, report) = json(&with("validate"));
    assert!(!ok, "drift exits non-zero");
    assert_eq!(report["drift"], 1);
    let item = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == parked.as_str())
        .unwrap();
    assert_eq!(item["state"], "differs");
    assert!(
        item["reason"].as_str().unwrap().contains("x-max-length"),
        "{item}"
    );

    let (ok, conflict) = json(&with("apply"));
    assert!(!ok, "apply refuses to change an existing queue");
    assert_eq!(conflict["conflicts"], 1);

    client
        .delete_queue(&format!("{queue}.retry.2s"))
        .await
        .unwrap();
    let (ok, report) = json(&with("validate"));
    assert!(!ok);
    let missing = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == format!("{queue}.retry.2s").as_str())
        .unwrap();
    assert_eq!(missing["state"], "missing");

    client.close().await.ok();
}

#[test]
fn bad_input_is_named_and_fails() {
    let url = polyq_testkit::amqp_url();
    let error = failure(&[
        "acemq",
        "publish",
        "--url",
        "kafka://ops:hunter2@broker",
        "--routing-key",
        "k",
        "--json",
        "{}",
    ]);
    assert!(error.contains("--url kafka://ops:***@broker"), "{error}");
    assert!(
        !error.contains("hunter2"),
        "credentials are redacted: {error}"
    );
    let error = failure(&[
        "acemq",
        "publish",
        "--url",
        &url,
        "--routing-key",
        "k",
        "--json",
        "{",
    ]);
    assert!(error.contains("--json: not JSON"), "{error}");
    let error = failure(&[
        "acemq",
        "publish",
        "--url",
        &url,
        "--routing-key",
        "k",
        "--json",
        "{}",
        "--header",
        "novalue",
    ]);
    assert!(error.contains("--header: expected NAME=VALUE"), "{error}");
    let error = failure(&[
        "acemq",
        "publish",
        "--url",
        &url,
        "--routing-key",
        "k",
        "--json",
        "{}",
        "--header",
        "x-acemq-attempt=2",
    ]);
    assert!(
        error.contains("--header") && error.contains("x-acemq-attempt"),
        "{error}"
    );
    let error = failure(&[
        "acemq",
        "consume",
        "--url",
        &url,
        "--queue",
        "q",
        "--timeout=0",
    ]);
    assert!(error.contains("--timeout"), "{error}");
    let error = failure(&[
        "acemq",
        "topology",
        "plan",
        "--queue",
        "q",
        "--policy",
        "sometimes(3)",
    ]);
    assert!(error.contains("--policy"), "{error}");
    let error = failure(&[
        "acemq",
        "topology",
        "plan",
        "--queue",
        "q",
        "--broker-wait-from",
        "soon",
    ]);
    assert!(error.contains("--broker-wait-from"), "{error}");
    let missing = polyq_testkit::unique_name("polyq.cli.missing");
    let error = failure(&[
        "acemq",
        "consume",
        "--url",
        &url,
        "--queue",
        &missing,
        "--timeout",
        "1",
    ]);
    assert!(error.contains(&missing), "{error}");
}

#[tokio::test]
async fn publish_sends_the_payload_bytes_as_given() {
    let url = polyq_testkit::amqp_url();
    let queue = polyq_testkit::unique_name("polyq.cli.acemq.bytes");
    let _queues = DeleteQueues::new(&url, [&queue]);
    let client = Client::connect(&url).await.unwrap();
    client.declare_queue(&QueueSpec::new(&queue)).await.unwrap();

    let payload = r#"{"z":1, "a":2.50,"e":"\u00e9"}"#;
    let published = run(&[
        "acemq",
        "publish",
        "--url",
        &url,
        "--routing-key",
        &queue,
        "--data",
        payload,
    ]);
    assert_eq!(published.len(), 1);
    let delivery = client.get(&queue).await.unwrap().expect("the message");
    delivery.ack().await.unwrap();
    assert_eq!(
        std::str::from_utf8(&delivery.body).unwrap(),
        payload,
        "key order, spacing, number spelling and escapes as given"
    );

    let refused = failure(&[
        "acemq",
        "publish",
        "--url",
        &url,
        "--routing-key",
        &queue,
        "--data",
        r#"{"z":1,"#,
    ]);
    assert!(refused.contains("--data: not JSON"), "{refused}");
    assert_eq!(client.inspect_queue(&queue).await.unwrap().message_count, 0);
    client.close().await.ok();
}
