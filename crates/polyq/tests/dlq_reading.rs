//! Reading a dead-letter queue for display (`polyq dlq show`, `groups`, `list`, a page) loses
//! and reorders nothing, on RabbitMQ and on Redis: a few thousand messages, their count and
//! order checked before and after.

use polyq_amqp::browse::browse;
use polyq_amqp::{Client, ClientOptions, FieldValue, OutgoingMessage, Properties, QueueSpec};
use serde_json::Value;

mod common;
use common::{polyq, success_lines};
use polyq_testkit::brokers::DeleteRedisKeys;

const MESSAGES: usize = 3_000;

fn run(args: &[&str]) -> Vec<Value> {
    success_lines(polyq(args), args)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn ids(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|row| row["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// Every display read of `queue`: the ids `show` printed, then that `groups`, `list` and a
/// page saw all of it (or its head).
fn displayed(url: &str, queue: &str, expected: &[String]) {
    let shown = ids(&run(&["dlq", "show", "--url", url, "--queue", queue]));
    assert_eq!(shown.len(), expected.len());
    assert!(shown == expected, "show printed the queue out of order");
    let page = ids(&run(&[
        "dlq", "show", "--url", url, "--queue", queue, "--limit", "50",
    ]));
    assert_eq!(page, expected[..50]);
    let groups = run(&["dlq", "groups", "--url", url, "--queue", queue]);
    let grouped: u64 = groups.iter().map(|g| g["count"].as_u64().unwrap()).sum();
    assert_eq!(grouped, expected.len() as u64);
    // On Redis `list` also shows every other dead-letter queue it finds; the prefix keeps it
    // to this test's own.
    let listed = run(&[
        "dlq", "list", "--url", url, "--queue", queue, "--prefix", queue,
    ]);
    assert_eq!(listed.len(), 1, "only this test's queue is listed");
    assert_eq!(listed[0]["queue"], queue);
    assert_eq!(listed[0]["depth"], expected.len() as u64);
}

#[tokio::test]
async fn reading_a_rabbitmq_dead_letter_queue_for_display_loses_and_reorders_nothing() {
    let url = polyq_testkit::amqp_url();
    let queue = polyq_testkit::unique_name("polyq.dlq-reading") + ".dlq";
    let client = Client::connect(&url).await.unwrap();
    client.declare_queue(&QueueSpec::new(&queue)).await.unwrap();
    let expected: Vec<String> = (0..MESSAGES).map(|n| format!("m-{n}")).collect();
    let mut confirms = Vec::new();
    for (n, id) in expected.iter().enumerate() {
        let mut properties = Properties {
            message_id: Some(id.clone()),
            ..Properties::default()
        };
        for (name, value) in [
            ("x-acemq-id", FieldValue::from(id.as_str())),
            (
                "x-acemq-error",
                FieldValue::from(format!("E{}: failed", n % 7)),
            ),
        ] {
            properties.headers.insert(name.to_owned(), value);
        }
        let message = OutgoingMessage::new("", queue.as_str(), properties, "{}");
        confirms.push(client.publish(message).await.unwrap());
    }
    for confirm in confirms {
        confirm.await.unwrap();
    }
    let in_queue = || async {
        browse(&url, ClientOptions::default(), &queue, None)
            .await
            .unwrap()
            .into_iter()
            .map(|swept| swept.message.properties.message_id.unwrap_or_default())
            .collect::<Vec<_>>()
    };
    assert!(in_queue().await == expected, "the queue as published");

    displayed(&url, &queue, &expected);

    let after = in_queue().await;
    assert_eq!(after.len(), MESSAGES);
    assert!(
        after == expected,
        "the queue is in its order after the reads"
    );
    client.delete_queue(&queue).await.unwrap();
    client.close().await.ok();
}

#[tokio::test]
async fn reading_a_redis_dead_letter_queue_for_display_loses_and_reorders_nothing() {
    let url = polyq_testkit::redis_url();
    let queue = polyq_testkit::unique_name("polyq-dlq-reading") + ".dlq";
    let _keys = DeleteRedisKeys::new(&url, [&queue]);
    let redis = redis::Client::open(url.as_str()).unwrap();
    let mut raw = redis.get_multiplexed_async_connection().await.unwrap();
    let expected: Vec<String> = (0..MESSAGES).map(|n| format!("j-{n}")).collect();
    let mut pipe = redis::pipe();
    for (n, id) in expected.iter().enumerate() {
        let job = format!(
            r#"{{"job":"urn:babel:orders:created","trace_id":"t","data":{{}},"meta":{{"id":"{id}","schema_version":1,"lang":"rust"}},"attempts":1,"dead_letter":{{"reason":"failed","error":"E{}: failed","failed_at":{n},"attempts":1,"original_queue":"q","lang":"rust"}}}}"#,
            n % 7
        );
        pipe.rpush(&queue, job).ignore();
    }
    pipe.query_async::<()>(&mut raw).await.unwrap();
    let stored = || {
        let mut raw = raw.clone();
        let queue = queue.clone();
        async move {
            redis::cmd("LRANGE")
                .arg(&queue)
                .arg(0)
                .arg(-1)
                .query_async::<Vec<Vec<u8>>>(&mut raw)
                .await
                .unwrap()
        }
    };
    let before = stored().await;
    assert_eq!(before.len(), MESSAGES);

    displayed(&url, &queue, &expected);

    assert!(
        stored().await == before,
        "the list is byte for byte as it was"
    );
}
