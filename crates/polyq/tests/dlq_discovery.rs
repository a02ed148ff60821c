//! `polyq dlq list` on RabbitMQ without naming queues: the dead-letter and parked queues of
//! both families found through the management API, and a clear error when it does not answer.

use std::time::{Duration, Instant};

use polyq_amqp::{Client, FieldValue, OutgoingMessage, Properties, PublishOutcome, QueueSpec};
use serde_json::Value;

mod common;
use common::{failure, polyq, success_lines};

/// Queues under one unique prefix, deleted on drop.
struct Estate {
    url: String,
    queues: Vec<String>,
}

impl Estate {
    async fn declare(&mut self, client: &Client, spec: QueueSpec) {
        client.declare_queue(&spec).await.expect("declare");
        self.queues.push(spec.name);
    }
}

impl Drop for Estate {
    fn drop(&mut self) {
        let (url, names) = (self.url.clone(), std::mem::take(&mut self.queues));
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                let client = Client::connect(&url).await.unwrap();
                for name in names {
                    client.delete_queue(&name).await.ok();
                }
                client.close().await.ok();
            });
        })
        .join()
        .ok();
    }
}

async fn publish(client: &Client, queue: &str, headers: &[(&str, &str)], body: &str) {
    let mut properties = Properties::default();
    for (name, value) in headers {
        properties
            .headers
            .insert((*name).to_owned(), FieldValue::from(*value));
    }
    let message = OutgoingMessage::new("", queue, properties, body.to_owned());
    let outcome = client.publish(message).await.unwrap().await.unwrap();
    assert_eq!(outcome, PublishOutcome::Acked);
}

#[tokio::test]
async fn every_set_aside_queue_of_both_families_is_found_through_the_management_api() {
    let url = polyq_testkit::amqp_url();
    let prefix = polyq_testkit::unique_name("polyq.discovery");
    let mut estate = Estate {
        url: url.clone(),
        queues: Vec::new(),
    };
    let client = Client::connect(&url).await.unwrap();
    let orders = format!("{prefix}.orders");
    let (dlq, parked) = (format!("{orders}.dlq"), format!("{orders}.parked"));
    let jobs_dlq = format!("{prefix}.jobs.dlq");
    estate
        .declare(
            &client,
            QueueSpec::new(&orders)
                .argument("x-queue-type", FieldValue::from("quorum"))
                .argument("x-dead-letter-exchange", FieldValue::from("acemq.dlx"))
                .argument("x-dead-letter-routing-key", FieldValue::from(dlq.as_str())),
        )
        .await;
    for name in [&dlq, &parked, &jobs_dlq, &format!("{orders}.retry.5s")] {
        estate.declare(&client, QueueSpec::new(name)).await;
    }
    for n in 0..3 {
        let error = format!("ValueError: order o-{n} has no line '{n}x'");
        let id = format!("m-{n}");
        let headers = [
            ("x-acemq-id", id.as_str()),
            ("x-acemq-error", error.as_str()),
        ];
        publish(&client, &dlq, &headers, "{}").await;
    }
    let parked_error = [("x-acemq-error", "could not be decoded: not JSON")];
    publish(&client, &parked, &parked_error, "not json").await;
    let job = r#"{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"id":"j-1","schema_version":1,"lang":"rust"},"attempts":3,"dead_letter":{"reason":"failed","error":"no stock","failed_at":1767323045678,"attempts":3,"original_queue":"jobs","lang":"rust"}}"#;
    publish(&client, &jobs_dlq, &[], job).await;
    client.close().await.ok();

    let args = ["dlq", "list", "--url", &url, "--prefix", &prefix];
    // The API lists a queue once its declaration is recorded; polled so a slow node is waited
    // for rather than failed.
    let deadline = Instant::now() + Duration::from_secs(30);
    let listed: Vec<Value> = loop {
        let lines = success_lines(polyq(&args), &args);
        let listed: Vec<Value> = lines
            .iter()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        if listed.len() == 3 || Instant::now() > deadline {
            break listed;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let names: Vec<&str> = listed
        .iter()
        .map(|q| q["queue"].as_str().unwrap())
        .collect();
    assert_eq!(names, [jobs_dlq.as_str(), dlq.as_str(), parked.as_str()]);
    let depths: Vec<u64> = listed
        .iter()
        .map(|q| q["depth"].as_u64().unwrap())
        .collect();
    assert_eq!(depths, [1, 3, 1]);
    assert_eq!(
        listed[1]["top_errors"][0]["group"],
        "ValueError: order o-<n> has no line '…'"
    );
    assert_eq!(listed[1]["top_errors"][0]["count"], 3);
    assert_eq!(listed[0]["top_errors"][0]["count"], 1);
    assert!(listed[0]["oldest_age_ms"].as_u64().is_some(), "{listed:?}");
    drop(estate);
}

#[tokio::test]
async fn without_the_management_api_the_error_says_to_name_the_queues() {
    let url = polyq_testkit::amqp_url();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .unwrap()
        .port();
    let management = format!("http://guest:hidden-word@127.0.0.1:{port}");
    let stderr = failure(&[
        "dlq",
        "list",
        "--url",
        &url,
        "--management-url",
        &management,
    ]);
    assert!(stderr.contains("--queue"), "{stderr}");
    assert!(stderr.contains("rabbitmq_management"), "{stderr}");
    assert!(!stderr.contains("hidden-word"), "{stderr}");
}
