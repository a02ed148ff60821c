//! `polyq dlq`, run as the built binary against RabbitMQ (AceMQ messages) and Redis in both
//! layouts (BabelQueue jobs): list, show, groups, replay by id and by group, delete, purge, an
//! export and import that keeps every byte, and a replay killed with SIGKILL that loses nothing.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use babelqueue::{DeadLetter, DeadLetterReason, MakeOptions};
use bytes::Bytes;
use polyq_amqp::browse::browse;
use polyq_amqp::{Client, ClientOptions, FieldValue, OutgoingMessage, Properties, QueueSpec};
use serde_json::{Value, json};

mod common;
use common::{command, polyq, success_lines, with_input};
use polyq_testkit::brokers::DeleteQueues;

/// Upper bound for anything awaited; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(30);

fn run(args: &[&str]) -> Vec<Value> {
    success_lines(polyq(args), args)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

fn ids(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|row| row["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// A source queue and its `.dlq` on RabbitMQ, removed on drop.
struct Rabbit {
    url: String,
    queue: String,
    dlq: String,
}

impl Rabbit {
    async fn new(what: &str) -> Self {
        let url = polyq_testkit::amqp_url();
        let queue = polyq_testkit::unique_name(&format!("polyq.dlq-cli.{what}"));
        let dlq = format!("{queue}.dlq");
        let client = Client::connect(&url).await.unwrap();
        for name in [&queue, &dlq] {
            client.declare_queue(&QueueSpec::new(name)).await.unwrap();
        }
        client.close().await.unwrap();
        Self { url, queue, dlq }
    }

    /// Dead-letters `count` AceMQ messages `m-0`, `m-1`, ...: the even ones failed with a
    /// `ValueError` about their order, the odd ones with a `TimeoutError`.
    async fn dead_letter(&self, count: usize) {
        let client = Client::connect(&self.url).await.unwrap();
        for n in 0..count {
            let mut properties = Properties {
                message_id: Some(format!("m-{n}")),
                content_type: Some("application/json".to_owned()),
                ..Properties::default()
            };
            let error = if n % 2 == 0 {
                format!("ValueError: order o-{n} has no line '{n}x'")
            } else {
                format!("TimeoutError: no answer after {} ms", 100 + n)
            };
            for (name, value) in [
                ("x-acemq-id", FieldValue::from(format!("m-{n}"))),
                ("x-acemq-type", FieldValue::from("orders.new")),
                ("x-acemq-attempt", FieldValue::from(3_i64)),
                ("x-acemq-error", FieldValue::from(error)),
            ] {
                properties.headers.insert(name.to_owned(), value);
            }
            let body = json!({"order": n}).to_string();
            let confirm = client
                .publish(OutgoingMessage::new(
                    "",
                    self.dlq.as_str(),
                    properties,
                    body,
                ))
                .await
                .unwrap();
            confirm.await.unwrap();
        }
        client.close().await.unwrap();
    }

    /// The message ids in `queue`, in order, none consumed.
    async fn ids_in(&self, queue: &str) -> Vec<String> {
        browse(&self.url, ClientOptions::default(), queue, None)
            .await
            .unwrap()
            .into_iter()
            .map(|swept| swept.message.properties.message_id.unwrap_or_default())
            .collect()
    }
}

impl Drop for Rabbit {
    fn drop(&mut self) {
        let (url, names) = (self.url.clone(), [self.queue.clone(), self.dlq.clone()]);
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

impl Rabbit {
    /// Dead-letters one AceMQ message `id` of `content_type` with `body`.
    async fn dead_letter_body(&self, id: &str, content_type: &str, body: &[u8]) {
        let client = Client::connect(&self.url).await.unwrap();
        let mut properties = Properties {
            message_id: Some(id.to_owned()),
            content_type: Some(content_type.to_owned()),
            ..Properties::default()
        };
        properties
            .headers
            .insert("x-acemq-id".to_owned(), FieldValue::from(id));
        let publish = OutgoingMessage::new("", self.dlq.as_str(), properties, body.to_vec());
        client.publish(publish).await.unwrap().await.unwrap();
        client.close().await.unwrap();
    }
}

fn numbered(range: impl Iterator<Item = usize>) -> Vec<String> {
    range.map(|n| format!("m-{n}")).collect()
}

#[tokio::test]
async fn acemq_dead_letters_are_shown_grouped_and_replayed_by_id_and_group() {
    let rabbit = Rabbit::new("acemq").await;
    rabbit.dead_letter(10).await;
    let url = rabbit.url.as_str();
    let dlq = rabbit.dlq.as_str();

    let shown = run(&["dlq", "show", "--url", url, "--queue", dlq]);
    assert_eq!(ids(&shown), numbered(0..10));
    assert_eq!(shown[0]["family"], "acemq");
    assert_eq!(shown[0]["type"], "orders.new");
    assert_eq!(shown[0]["attempts"], 3);
    assert_eq!(shown[0]["error"], "ValueError: order o-0 has no line '0x'");
    assert_eq!(shown[0]["decoded"]["payload"], json!({"order": 0}));
    assert_eq!(shown[0]["message"]["body"], r#"{"order":0}"#);
    // Reading consumed nothing and kept the order.
    assert_eq!(rabbit.ids_in(dlq).await, numbered(0..10));

    let one = run(&["dlq", "show", "--url", url, "--queue", dlq, "--id", "m-3"]);
    assert_eq!(ids(&one), ["m-3"]);
    let limited = run(&[
        "dlq", "show", "--url", url, "--queue", dlq, "--limit", "2", "--error", "Timeout",
    ]);
    assert_eq!(ids(&limited), ["m-1", "m-3"]);

    let groups = run(&["dlq", "groups", "--url", url, "--queue", dlq]);
    assert_eq!(groups.len(), 2, "{groups:?}");
    assert_eq!(
        groups[0]["group"],
        "ValueError: order o-<n> has no line '…'"
    );
    assert_eq!(groups[0]["count"], 5);
    assert_eq!(groups[0]["sample_id"], "m-0");
    assert_eq!(groups[1]["group"], "TimeoutError: no answer after <n> ms");
    assert_eq!(groups[1]["count"], 5);

    let listed = run(&["dlq", "list", "--url", url, "--queue", dlq]);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["queue"], dlq);
    assert_eq!(listed[0]["depth"], 10);
    assert_eq!(listed[0]["top_errors"][0]["count"], 5);
    // A topology plan names the set-aside queues to list.
    let plan = std::env::temp_dir().join(format!("{dlq}.plan.json"));
    let queues = json!({"queues": [{"name": rabbit.queue}, {"name": dlq}]});
    std::fs::write(&plan, queues.to_string()).unwrap();
    let args = [
        "dlq",
        "list",
        "--url",
        url,
        "--topology",
        plan.to_str().unwrap(),
    ];
    let from_plan = run(&args);
    std::fs::remove_file(&plan).ok();
    assert_eq!(from_plan.len(), 1, "{from_plan:?}");
    assert_eq!(from_plan[0]["queue"], dlq);

    let replayed = run(&["dlq", "replay", "--url", url, "--queue", dlq, "--id", "m-4"]);
    assert_eq!(replayed[0]["moved"]["acemq"], 1);
    assert_eq!(rabbit.ids_in(&rabbit.queue).await, ["m-4"]);

    let key = groups[1]["group_key"].as_str().unwrap();
    let replayed = run(&[
        "dlq", "replay", "--url", url, "--queue", dlq, "--group", key,
    ]);
    assert_eq!(replayed[0]["moved"]["acemq"], 5);
    let mut back = vec!["m-4".to_owned()];
    back.extend(numbered((0..10).filter(|n| n % 2 == 1)));
    assert_eq!(rabbit.ids_in(&rabbit.queue).await, back);
    assert_eq!(rabbit.ids_in(dlq).await, ["m-0", "m-2", "m-6", "m-8"]);

    let deleted = run(&[
        "dlq", "delete", "--url", url, "--queue", dlq, "--id", "m-2", "--id", "m-8",
    ]);
    assert_eq!(deleted[0]["deleted"], 2);
    assert_eq!(rabbit.ids_in(dlq).await, ["m-0", "m-6"]);
    // A delete without a selection is refused rather than taken for "everything".
    let args = ["dlq", "delete", "--url", url, "--queue", dlq];
    let refused = common::failure(&args);
    assert!(refused.contains("purge"), "{refused}");

    // Purge asks; anything but yes keeps the queue.
    let args = ["dlq", "purge", "--url", url, "--queue", dlq];
    let kept = with_input(command(&args), b"n\n");
    assert!(!kept.status.success());
    assert_eq!(rabbit.ids_in(dlq).await, ["m-0", "m-6"]);
    let purged = run(&["dlq", "purge", "--url", url, "--queue", dlq, "--yes"]);
    assert_eq!(purged[0]["purged"], 2);
    assert!(rabbit.ids_in(dlq).await.is_empty());
}

#[tokio::test]
async fn an_export_imports_back_byte_for_byte_on_rabbitmq() {
    let rabbit = Rabbit::new("export").await;
    rabbit.dead_letter(4).await;
    // A body that is not UTF-8 and a header of a pinned width travel too.
    let client = Client::connect(&rabbit.url).await.unwrap();
    let mut properties = Properties {
        message_id: Some("binary".to_owned()),
        ..Properties::default()
    };
    properties
        .headers
        .insert("x-acemq-id".to_owned(), FieldValue::from("binary"));
    properties
        .headers
        .insert("count".to_owned(), FieldValue::I8(1));
    let body = Bytes::from_static(&[0xff, 0x00, 0xfe, b'{']);
    client
        .publish(OutgoingMessage::new(
            "",
            rabbit.dlq.as_str(),
            properties,
            body.clone(),
        ))
        .await
        .unwrap()
        .await
        .unwrap();
    client.close().await.unwrap();

    let before = browse(&rabbit.url, ClientOptions::default(), &rabbit.dlq, None)
        .await
        .unwrap();
    let file = std::env::temp_dir().join(format!("{}.jsonl", rabbit.dlq));
    let path = file.to_str().unwrap();
    let url = rabbit.url.as_str();
    let exported = run(&[
        "dlq",
        "export",
        "--url",
        url,
        "--queue",
        &rabbit.dlq,
        "--to",
        path,
    ]);
    assert_eq!(exported[0]["exported"], 5);
    run(&[
        "dlq",
        "purge",
        "--url",
        url,
        "--queue",
        &rabbit.dlq,
        "--yes",
    ]);
    let imported = run(&[
        "dlq",
        "import",
        "--url",
        url,
        "--queue",
        &rabbit.dlq,
        "--from",
        path,
    ]);
    assert_eq!(imported[0]["imported"], 5);
    // An import to a queue that does not exist fails instead of dropping the messages, and
    // says so without printing them.
    let missing = format!("{}.missing", rabbit.queue);
    let args = [
        "dlq", "import", "--url", url, "--queue", &missing, "--from", path,
    ];
    let refused = common::failure(&args);
    assert!(refused.contains("does not exist"), "{refused}");
    assert!(!refused.contains("order"), "{refused}");
    std::fs::remove_file(&file).ok();

    let after = browse(&rabbit.url, ClientOptions::default(), &rabbit.dlq, None)
        .await
        .unwrap();
    assert_eq!(after.len(), before.len());
    for (was, is) in before.iter().zip(&after) {
        assert_eq!(is.message.body, was.message.body);
        assert_eq!(is.message.properties, was.message.properties);
    }
    assert_eq!(after[4].message.body, body);
}

#[tokio::test]
async fn a_replay_killed_midway_leaves_every_message_in_one_of_the_two_queues() {
    const COUNT: usize = 3000;
    let rabbit = Rabbit::new("sigkill").await;
    rabbit.dead_letter(COUNT).await;
    let args = [
        "dlq",
        "replay",
        "--url",
        rabbit.url.as_str(),
        "--queue",
        rabbit.dlq.as_str(),
    ];
    let mut child = command(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("polyq runs");
    // Kill it once the first messages have arrived, well before all of them can have.
    let client = Client::connect(&rabbit.url).await.unwrap();
    let started = Instant::now();
    loop {
        let moved = client
            .inspect_queue(&rabbit.queue)
            .await
            .unwrap()
            .message_count;
        if moved > 0 {
            break;
        }
        assert!(started.elapsed() < LIMIT, "the replay moved nothing");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    client.close().await.unwrap();

    // The broker gives back what the killed connection held once it notices the connection is
    // gone; every browse below reads the queues whole.
    let in_source: BTreeSet<String> = rabbit.ids_in(&rabbit.queue).await.into_iter().collect();
    let in_dlq: BTreeSet<String> = rabbit.ids_in(&rabbit.dlq).await.into_iter().collect();
    assert!(!in_source.is_empty() && !in_dlq.is_empty(), "killed midway");
    let everything: BTreeSet<String> = numbered(0..COUNT).into_iter().collect();
    let found: BTreeSet<String> = in_source.union(&in_dlq).cloned().collect();
    let lost: Vec<&String> = everything.difference(&found).collect();
    assert!(lost.is_empty(), "lost {} message(s): {lost:?}", lost.len());
}

/// A BabelQueue job dead-lettered from `queue` with `error`, as the worker writes it, and its
/// id.
fn dead_lettered(queue: &str, n: usize, error: &str) -> (String, String) {
    let mut envelope = babelqueue::make(
        "urn:babel:orders:created",
        &json!({"n": n}),
        MakeOptions::new().queue(queue),
    )
    .unwrap();
    let id = envelope
        .meta()
        .and_then(babelqueue::Meta::id)
        .unwrap()
        .to_owned();
    envelope.annotate(
        &DeadLetter::new(DeadLetterReason::Failed, queue, 3)
            .error(error)
            .exception("ValueError")
            .failed_at(1_767_323_045_678 + n as i64),
    );
    (id, envelope.encode().unwrap())
}

#[tokio::test]
async fn babelqueue_and_acemq_dead_letters_side_by_side_on_rabbitmq() {
    let rabbit = Rabbit::new("babel").await;
    rabbit.dead_letter(2).await;
    let (job_id, job) = dead_lettered(&rabbit.queue, 0, "no stock for sku-9");
    let client = Client::connect(&rabbit.url).await.unwrap();
    let properties = Properties {
        content_type: Some("application/json".to_owned()),
        ..Properties::default()
    };
    client
        .publish(OutgoingMessage::new(
            "",
            rabbit.dlq.as_str(),
            properties,
            job,
        ))
        .await
        .unwrap()
        .await
        .unwrap();
    client.close().await.unwrap();
    let url = rabbit.url.as_str();
    let dlq = rabbit.dlq.as_str();

    let shown = run(&["dlq", "show", "--url", url, "--queue", dlq]);
    let families: Vec<&str> = shown
        .iter()
        .map(|row| row["family"].as_str().unwrap())
        .collect();
    assert_eq!(families, ["acemq", "acemq", "babelqueue"]);
    assert_eq!(shown[2]["id"], job_id.as_str());
    assert_eq!(shown[2]["exception"], "ValueError");
    assert_eq!(shown[2]["dead_letter"]["error"], "no stock for sku-9");

    let table = success_lines(
        polyq(&[
            "dlq", "groups", "--url", url, "--queue", dlq, "--output", "table",
        ]),
        &["dlq", "groups"],
    );
    assert!(table[0].starts_with("COUNT"), "{table:?}");
    assert_eq!(table.len(), 4, "{table:?}");

    let moved = run(&[
        "dlq",
        "replay",
        "--url",
        url,
        "--queue",
        dlq,
        "--urn",
        "urn:babel:orders:created",
    ]);
    assert_eq!(moved[0]["moved"], json!({"babelqueue": 1}));
    assert_eq!(rabbit.ids_in(dlq).await, ["m-0", "m-1"]);
    let source = browse(&rabbit.url, ClientOptions::default(), &rabbit.queue, None)
        .await
        .unwrap();
    assert_eq!(source.len(), 1);
    let body = std::str::from_utf8(&source[0].message.body).unwrap();
    assert!(
        body.contains(&job_id) && !body.contains("dead_letter"),
        "{body}"
    );
}

/// Everything the Redis list `key` holds.
async fn list(raw: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(raw)
        .await
        .unwrap()
}

async fn redis_dead_letters_round_trip(layout: &str, key_prefix: &str) {
    let url = polyq_testkit::redis_url();
    let queue = polyq_testkit::unique_name(&format!("polyq-dlq-cli-{layout}"));
    let dlq = format!("{queue}.dlq");
    let _keys = DeleteQueues::new(&url, [&queue]);
    let redis = redis::Client::open(url.as_str()).unwrap();
    let mut raw = redis.get_multiplexed_async_connection().await.unwrap();
    let (job_ids, jobs): (Vec<String>, Vec<String>) = (0..6)
        .map(|n| dead_lettered(&queue, n, &format!("no stock for sku-{n} in '{n}a'")))
        .unzip();
    for job in &jobs {
        redis::cmd("RPUSH")
            .arg(format!("{key_prefix}{dlq}"))
            .arg(job)
            .query_async::<()>(&mut raw)
            .await
            .unwrap();
    }
    let base = ["--url", url.as_str(), "--layout", layout];
    let with = |verb: &str, rest: &[&str]| -> Vec<Value> {
        let mut args = vec!["dlq", verb];
        args.extend(base);
        args.extend(rest);
        run(&args)
    };

    let listed = with("list", &[]);
    let mine: Vec<&Value> = listed
        .iter()
        .filter(|q| q["queue"] == dlq.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "{listed:?}");
    assert_eq!(mine[0]["depth"], 6);

    let shown = with("show", &["--queue", &dlq]);
    assert_eq!(ids(&shown), job_ids);
    assert_eq!(shown[0]["family"], "babelqueue");
    assert_eq!(shown[0]["type"], "urn:babel:orders:created");
    assert_eq!(shown[0]["dead_letter"]["original_queue"], queue.as_str());
    assert_eq!(shown[0]["message"]["body"], jobs[0].as_str());

    let groups = with("groups", &["--queue", &dlq]);
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(
        groups[0]["group"],
        "ValueError: no stock for sku-<n> in '…'"
    );
    assert_eq!(groups[0]["count"], 6);
    assert_eq!(groups[0]["first_seen_ms"], 1_767_323_045_678_i64);
    assert_eq!(groups[0]["last_seen_ms"], 1_767_323_045_683_i64);

    let file = std::env::temp_dir().join(format!("{dlq}.jsonl"));
    let path = file.to_str().unwrap();
    assert_eq!(
        with("export", &["--queue", &dlq, "--to", path])[0]["exported"],
        6
    );
    assert_eq!(with("purge", &["--queue", &dlq, "--yes"])[0]["purged"], 6);
    assert_eq!(
        with("import", &["--queue", &dlq, "--from", path])[0]["imported"],
        6
    );
    std::fs::remove_file(&file).ok();
    let stored = list(&mut raw, &format!("{key_prefix}{dlq}")).await;
    assert_eq!(stored, jobs);

    assert_eq!(
        with("delete", &["--queue", &dlq, "--id", &job_ids[1]])[0]["deleted"],
        1
    );
    let replayed = with("replay", &["--queue", &dlq, "--id", &job_ids[2]]);
    assert_eq!(replayed[0]["moved"]["babelqueue"], 1);
    let left = ids(&with("show", &["--queue", &dlq]));
    let expected: Vec<String> = [0, 3, 4, 5].iter().map(|&n| job_ids[n].clone()).collect();
    assert_eq!(left, expected);
    let source = list(&mut raw, &format!("{key_prefix}{queue}")).await;
    assert_eq!(source.len(), 1, "{source:?}");
    assert!(source[0].contains(&job_ids[2]), "{source:?}");
}

#[tokio::test]
async fn babelqueue_dead_letters_on_redis_default_layout() {
    redis_dead_letters_round_trip("default", "").await;
}

#[tokio::test]
async fn babelqueue_dead_letters_on_redis_laravel_layout() {
    redis_dead_letters_round_trip("laravel", "queues:").await;
}

/// `dlq delete` of a thousand messages from a Redis dead-letter list of three thousand: exactly
/// the selected ones go, the others stay byte for byte in their order.
async fn a_large_selection_is_deleted_from_redis(layout: &str, key_prefix: &str) {
    let url = polyq_testkit::redis_url();
    let queue = polyq_testkit::unique_name(&format!("polyq-dlq-delete-{layout}"));
    let dlq = format!("{queue}.dlq");
    let _keys = DeleteQueues::new(&url, [&queue]);
    let key = format!("{key_prefix}{dlq}");
    let redis = redis::Client::open(url.as_str()).unwrap();
    let mut raw = redis.get_multiplexed_async_connection().await.unwrap();
    let jobs: Vec<String> = (0..3_000)
        .map(|n| {
            let error = if n % 3 == 1 {
                format!("timeout talking to the bank, order {n}")
            } else {
                format!("no stock for sku-{n}")
            };
            dead_lettered(&queue, n, &error).1
        })
        .collect();
    redis::cmd("RPUSH")
        .arg(&key)
        .arg(&jobs)
        .query_async::<()>(&mut raw)
        .await
        .unwrap();

    let deleted = run(&[
        "dlq", "delete", "--url", &url, "--layout", layout, "--queue", &dlq, "--error", "timeout",
    ]);
    assert_eq!(deleted[0]["deleted"], 1_000, "{deleted:?}");
    let kept: Vec<String> = jobs
        .iter()
        .enumerate()
        .filter(|(n, _)| n % 3 != 1)
        .map(|(_, job)| job.clone())
        .collect();
    assert_eq!(list(&mut raw, &key).await, kept);
}

#[tokio::test]
async fn a_large_selection_is_deleted_from_redis_default_layout() {
    a_large_selection_is_deleted_from_redis("default", "").await;
}

#[tokio::test]
async fn a_large_selection_is_deleted_from_redis_laravel_layout() {
    a_large_selection_is_deleted_from_redis("laravel", "queues:").await;
}

/// An imported message with a property value AMQP cannot hold is refused with an error that
/// names the property and its length, before anything is published.
#[tokio::test]
async fn an_import_with_a_property_too_long_is_refused_naming_it() {
    let url = polyq_testkit::amqp_url();
    let queue = polyq_testkit::unique_name("polyq.dlq.long.dlq");
    let _queues = DeleteQueues::new(&url, [&queue]);
    let client = Client::connect(&url).await.unwrap();
    client.declare_queue(&QueueSpec::new(&queue)).await.unwrap();
    let file = std::env::temp_dir().join(format!("{queue}.jsonl"));
    let line = json!({
        "exchange": "",
        "routing_key": queue,
        "properties": {"message_id": "m".repeat(300), "content_type": "application/json"},
        "headers": {"x-acemq-id": "m".repeat(300)},
        "body": "{\"z\":1,\"a\":2.50}",
    });
    std::fs::write(&file, format!("{line}\n")).unwrap();
    let path = file.to_str().unwrap();
    let refused = common::failure(&[
        "dlq", "import", "--url", &url, "--queue", &queue, "--from", path,
    ]);
    std::fs::remove_file(&file).ok();
    assert!(
        refused.contains(
            "property `message_id` is 300 bytes long; AMQP short strings hold at most 255"
        ),
        "{refused}"
    );
    assert!(
        !refused.contains(&"m".repeat(300)),
        "the value is not printed: {refused}"
    );
    assert_eq!(client.inspect_queue(&queue).await.unwrap().message_count, 0);
    client.close().await.unwrap();
}

#[tokio::test]
async fn show_puts_each_format_beside_its_raw_bytes() {
    let rabbit = Rabbit::new("formats").await;
    let yaml = "orderId: o-1\nitems:\n- widget\n";
    rabbit
        .dead_letter_body("m-yaml", "application/yaml", yaml.as_bytes())
        .await;
    let registered = [0, 0, 0, 0, 7, 6, b'o', b'-', b'1'];
    rabbit
        .dead_letter_body("m-avro", "application/vnd.acemq.avro", &registered)
        .await;
    let shown = run(&["dlq", "show", "--url", &rabbit.url, "--queue", &rabbit.dlq]);
    assert_eq!(ids(&shown), ["m-yaml", "m-avro"]);
    assert_eq!(shown[0]["decoded"]["payload"], yaml);
    assert_eq!(shown[0]["decoded"]["payload_note"], Value::Null);
    assert_eq!(shown[0]["message"]["body"], yaml);
    assert_eq!(
        shown[1]["decoded"]["payload"],
        json!({"base64": "AAAAAAcGby0x"})
    );
    assert_eq!(
        shown[1]["decoded"]["payload_note"],
        "registered Avro, schema id 7: shown as raw bytes; reading it needs that schema from \
         the schema registry"
    );
    // The wire body is UTF-8 by chance, so the message JSON keeps it as text; the decoded view
    // shows the bytes, as a binary format's.
    assert_eq!(shown[1]["message"]["body"], "\0\0\0\0\u{7}\u{6}o-1");
}

#[tokio::test]
async fn an_encrypted_dead_letter_shows_its_key_id_and_with_the_key_file_its_plaintext() {
    let rabbit = Rabbit::new("encrypted").await;
    let keys = acemq::codec::keyring::KeyRing::new("k-old", &[0x11; 32]).unwrap();
    let body = acemq::codec::encrypted::seal(&keys, br#"{"card":"4111"}"#).unwrap();
    let mut properties = Properties {
        message_id: Some("m-enc".to_owned()),
        content_type: Some("application/vnd.acemq.encrypted".to_owned()),
        ..Properties::default()
    };
    for (name, value) in [
        ("x-acemq-id", "m-enc"),
        (
            "x-acemq-error",
            "could not be decoded: encrypted with key `k-old`, which is not in the key ring",
        ),
    ] {
        properties
            .headers
            .insert(name.to_owned(), FieldValue::from(value));
    }
    let client = Client::connect(&rabbit.url).await.unwrap();
    client
        .publish(OutgoingMessage::new(
            "",
            rabbit.dlq.as_str(),
            properties,
            body.clone(),
        ))
        .await
        .unwrap()
        .await
        .unwrap();
    client.close().await.unwrap();
    let key_file = std::env::temp_dir().join(format!("{}.keys", rabbit.dlq));
    std::fs::write(
        &key_file,
        format!(
            "k-new = hex:{}\nk-old = hex:{}\n",
            "22".repeat(32),
            "11".repeat(32)
        ),
    )
    .unwrap();

    let show = ["dlq", "show", "--url", &rabbit.url, "--queue", &rabbit.dlq];
    let without = run(&show);
    assert_eq!(
        without[0]["decoded"]["encrypted"],
        json!({"key_id": "k-old", "payload": null, "note": "no key ring given: the plaintext is not shown"})
    );
    let mut with_keys = show.to_vec();
    with_keys.extend(["--key-file", key_file.to_str().unwrap()]);
    let output = polyq(&with_keys);
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    let with = run(&with_keys);
    std::fs::remove_file(&key_file).unwrap();
    assert_eq!(
        with[0]["decoded"]["encrypted"],
        json!({"key_id": "k-old", "payload": {"card": "4111"}, "note": null})
    );
    assert_eq!(
        with[0]["message"], without[0]["message"],
        "the raw bytes beside it"
    );
    assert!(!printed.contains(&"11".repeat(32)) && !printed.contains(&"22".repeat(32)));
    assert_eq!(
        rabbit.ids_in(&rabbit.dlq).await,
        ["m-enc"],
        "nothing consumed"
    );
}
