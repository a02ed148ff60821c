//! What the built binary logs with its default filter, tried as a new user would: a publish to a
//! routing key no queue is bound to, on RabbitMQ. The broker's return is logged by where the
//! message went and why, never by its body or header values, and without colour codes when
//! stderr is not a terminal.

use std::process::Output;

mod common;

/// Values only this run uses, so that finding them in the log can only mean a leak.
struct Secrets {
    routing_key: String,
    header: String,
    body: String,
}

impl Secrets {
    fn new() -> Self {
        Self {
            routing_key: polyq_testkit::unique_name("polyq.logs.nowhere"),
            header: polyq_testkit::unique_name("header-secret"),
            body: polyq_testkit::unique_name("body-secret"),
        }
    }
}

/// `polyq acemq publish` of a mandatory message no queue takes, logging as by default; its
/// stderr goes to a pipe.
fn publish_unroutable(secrets: &Secrets) -> Output {
    let header = format!("customer={}", secrets.header);
    let json = serde_json::json!({ "note": secrets.body }).to_string();
    let args = [
        "acemq",
        "publish",
        "--url",
        &polyq_testkit::amqp_url(),
        "--routing-key",
        &secrets.routing_key,
        "--header",
        &header,
        "--json",
        &json,
    ];
    let mut command = common::command(&args);
    command.env_remove("POLYQ_LOG");
    let output = command.output().expect("polyq runs");
    assert!(
        !output.status.success(),
        "an unroutable mandatory publish fails"
    );
    output
}

/// `text`'s bytes as a `Debug` of a byte vector prints them: `104, 101, ...`.
fn as_byte_list(text: &str) -> String {
    let bytes: Vec<String> = text.bytes().map(|byte| byte.to_string()).collect();
    bytes.join(", ")
}

#[test]
fn a_returned_message_is_logged_by_route_and_reply_code_never_by_content() {
    let secrets = Secrets::new();
    let stderr = String::from_utf8(publish_unroutable(&secrets).stderr).expect("UTF-8 stderr");
    for secret in [&secrets.header, &secrets.body] {
        assert!(
            !stderr.contains(secret.as_str()),
            "{secret} leaked: {stderr}"
        );
        assert!(
            !stderr.contains(&as_byte_list(secret)),
            "{secret} leaked as bytes: {stderr}"
        );
    }
    let line = stderr
        .lines()
        .find(|line| line.contains("WARN") && line.contains("returned"))
        .unwrap_or_else(|| panic!("no log line for the return: {stderr}"));
    let routing_key = format!("routing_key=\"{}\"", secrets.routing_key);
    for field in [
        "exchange=\"\"",
        &routing_key,
        "reply_code=312",
        "message_id=",
    ] {
        assert!(line.contains(field), "{field} missing: {line}");
    }
}

#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let stderr = String::from_utf8(publish_unroutable(&Secrets::new()).stderr).expect("UTF-8");
    assert!(stderr.contains("WARN"), "a warning was logged: {stderr}");
    assert!(!stderr.contains("\x1b["), "colour codes in {stderr:?}");
}
