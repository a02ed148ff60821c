//! One spelling for each knob across both families, with the former spellings still read:
//! `--data` (formerly acemq's `--json`) and `--limit` (formerly `acemq consume --count`,
//! `babel consume --max` and `babel redrive --max`), run as the built binary against RabbitMQ
//! and Redis.

use polyq_amqp::{Client, QueueSpec};
use serde_json::{Value, json};

mod common;
use common::{failure, polyq, success_lines};
use polyq_testkit::brokers::DeleteQueues;

fn run(args: &[&str]) -> Vec<Value> {
    success_lines(polyq(args), args)
        .iter()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect()
}

fn help(command: &[&str]) -> String {
    let args = [command, &["--help"]].concat();
    success_lines(polyq(&args), &args).join("\n")
}

#[test]
fn help_shows_only_the_one_spelling() {
    for (command, shown, hidden) in [
        (&["acemq", "publish"][..], "--data", "--json"),
        (&["babel", "publish"], "--data", "--json"),
        (&["acemq", "consume"], "--limit", "--count"),
        (&["babel", "consume"], "--limit", "--max"),
        (&["babel", "redrive"], "--limit", "--max"),
    ] {
        let text = help(command);
        assert!(text.contains(shown), "{command:?}: {text}");
        assert!(!text.contains(hidden), "{command:?}: {text}");
    }
}

#[test]
fn a_payload_given_twice_is_refused_and_errors_name_the_flag_used() {
    let url = polyq_testkit::amqp_url();
    let publish = ["acemq", "publish", "--url", &url, "--routing-key", "k"];
    let both = [&publish[..], &["--data", "{}", "--json", "{}"]].concat();
    assert!(failure(&both).contains("cannot be used with"));
    let none = failure(&publish);
    assert!(none.contains("--data"), "{none}");
    for flag in ["--data", "--json"] {
        let error = failure(&[&publish[..], &[flag, "{"]].concat());
        assert!(error.contains(&format!("{flag}: not JSON")), "{error}");
    }
}

#[tokio::test]
async fn acemq_takes_both_spellings() {
    let url = polyq_testkit::amqp_url();
    let queue = polyq_testkit::unique_name("polyq.cli.spelling");
    let _queues = DeleteQueues::new(&url, [&queue]);
    let client = Client::connect(&url).await.unwrap();
    client.declare_queue(&QueueSpec::new(&queue)).await.unwrap();
    let publish = ["acemq", "publish", "--url", &url, "--routing-key", &queue];
    for (flag, n) in [("--data", "1"), ("--json", "2")] {
        let sent = run(&[&publish[..], &[flag, &format!(r#"{{"n":{n}}}"#)]].concat());
        assert_eq!(
            sent[0]["payload"],
            json!({"n": n.parse::<u8>().unwrap()}),
            "{flag}"
        );
    }
    let consume = [
        "acemq",
        "consume",
        "--url",
        &url,
        "--queue",
        &queue,
        "--timeout",
        "5",
    ];
    let mut payloads = Vec::new();
    for flag in ["--limit", "--count"] {
        let got = run(&[&consume[..], &[flag, "1"]].concat());
        assert_eq!(got.len(), 1, "{flag} stops after one message");
        payloads.push(got[0]["payload"].clone());
    }
    client.close().await.ok();
    assert_eq!(payloads, [json!({"n": 1}), json!({"n": 2})]);
}

#[tokio::test]
async fn babel_takes_both_spellings() {
    let url = polyq_testkit::redis_url();
    let queue = polyq_testkit::unique_name("polyq.cli.spelling");
    let dlq = format!("{queue}.dlq");
    let _keys = DeleteQueues::new(&url, [&queue]);
    let publish = [
        "babel",
        "publish",
        "--url",
        &url,
        "--queue",
        &dlq,
        "--urn",
        "urn:babel:a:b",
    ];
    for (flag, n) in [("--data", 1), ("--json", 2), ("--data", 3)] {
        run(&[&publish[..], &[flag, &format!(r#"{{"n":{n}}}"#)]].concat());
    }
    let redrive = [
        "babel", "redrive", "--url", &url, "--dlq", &dlq, "--to", &queue,
    ];
    for flag in ["--limit", "--max"] {
        let report = run(&[&redrive[..], &[flag, "1"]].concat());
        assert_eq!(report[0]["redriven"], 1, "{flag}: {}", report[0]);
    }
    let consume = |queue: &str, flag: &str, limit: &str| {
        let args = [
            "babel",
            "consume",
            "--url",
            &url,
            "--queue",
            queue,
            "--timeout",
            "1",
            flag,
            limit,
        ];
        run(&args)
            .iter()
            .map(|line| {
                let envelope: Value =
                    serde_json::from_str(line["envelope"].as_str().unwrap()).unwrap();
                envelope["data"]["n"].as_u64().unwrap()
            })
            .collect::<Vec<_>>()
    };
    let redriven = [
        consume(&queue, "--limit", "1"),
        consume(&queue, "--max", "1"),
    ]
    .concat();
    let left = consume(&dlq, "--limit", "5");

    assert_eq!(redriven, [1, 2], "one job per redrive, one per consume");
    assert_eq!(left, [3]);
}

/// The commands `polyq --help` lists, in the order it lists them (`help` left out).
fn listed_commands() -> Vec<String> {
    help(&[])
        .lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_crate_readme_lists_every_command() {
    let readme = include_str!("../README.md");
    let commands = listed_commands();
    assert!(commands.len() >= 9, "{commands:?}");
    let missing: Vec<_> = commands
        .iter()
        .filter(|name| !readme.contains(&format!("| `{name}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "crates/polyq/README.md has no row for {missing:?}: add one to its command table"
    );
}
