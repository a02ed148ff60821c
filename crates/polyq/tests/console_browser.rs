//! `polyq console` in headless Chromium (chromedriver over WebDriver) against the real RabbitMQ
//! and Redis: dead-lettered AceMQ messages and BabelQueue jobs (from polyq and from the Python
//! SDK) appear on the overview (live), are inspected, grouped, replayed, edited and replayed,
//! and deleted; what they carry never runs. Screenshots of the overview, a dead-letter queue
//! and a message are saved (see `Browser::screenshot`).

mod console_support;

use std::time::Duration;

use console_support::{Browser, Console, HOSTILE, Rabbit, TOKEN, eventually};
use fantoccini::Locator;
use polyq_amqp::ClientOptions;
use polyq_amqp::browse::browse;
use polyq_testkit::brokers::DeleteRedisKeys;

const URN: &str = "urn:babel:orders:created";

/// Logs the browser in with the token.
async fn log_in(browser: &Browser, console: &Console) {
    let client = &browser.client;
    client.goto(&console.url("/login")).await.unwrap();
    let form = client.form(Locator::Css("form")).await.unwrap();
    form.set_by_name("token", TOKEN).await.unwrap();
    form.submit().await.unwrap();
    browser.wait_for_text("signed in").await;
}

/// Clicks the button labelled `label` (the first one).
async fn press(browser: &Browser, label: &str) {
    let xpath = format!("//button[normalize-space()='{label}']");
    browser
        .client
        .find(Locator::XPath(&xpath))
        .await
        .unwrap_or_else(|e| panic!("a button {label:?}: {e}"))
        .click()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acemq_dead_letters_on_rabbitmq_are_inspected_grouped_replayed_edited_and_deleted() {
    let rabbit = Rabbit::new("browser").await;
    for (id, error) in [
        ("order-1", "ValueError: order o-1 has no line '1x'"),
        ("order-2", "ValueError: order o-2 has no line '2x'"),
        ("order-3", "ValueError: order o-3 has no line '3x'"),
        ("order-4", "TimeoutError: no answer after 120 ms"),
    ] {
        let body = format!("{{\"order\":\"{id}\"}}");
        rabbit.dead_letter(id, error, "acme", &body).await;
    }
    rabbit
        .dead_letter("hostile", HOSTILE, HOSTILE, HOSTILE)
        .await;
    let console = Console::start(&[
        "--url",
        &rabbit.url,
        "--queue",
        &rabbit.queue,
        "--token",
        TOKEN,
    ]);
    let browser = Browser::start().await;
    let client = &browser.client;

    // The overview shows the queue and its dead-letter depth, and follows it live.
    log_in(&browser, &console).await;
    client.goto(&console.url("/")).await.unwrap();
    browser.wait_for_text(&rabbit.queue).await;
    let dlq_cell = format!("//tr[td[1][normalize-space()='{}']]/td[5]", rabbit.queue);
    // The live update replaces the tables, so an element found may be gone when read.
    let dlq_depth = || async {
        match client.find(Locator::XPath(&dlq_cell)).await {
            Ok(cell) => cell.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    };
    eventually("the overview shows five dead letters", || async {
        dlq_depth().await == "5"
    })
    .await;
    rabbit
        .dead_letter(
            "order-5",
            "TimeoutError: no answer after 130 ms",
            "acme",
            "{}",
        )
        .await;
    eventually(
        "the overview shows the sixth dead letter without a reload",
        || async { dlq_depth().await == "6" },
    )
    .await;
    browser.screenshot("overview").await;

    // The dead-letter queue: every message, grouped by fingerprint.
    client
        .goto(&console.url(&format!("/dlq?b=0&q={}", rabbit.dlq)))
        .await
        .unwrap();
    browser.wait_for_text("6 of 6 messages match").await;
    let groups = client
        .find(Locator::Id("groups"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        groups.contains("ValueError: order o-<n> has no line '…'"),
        "{groups}"
    );
    assert!(
        groups.contains("TimeoutError: no answer after <n> ms"),
        "{groups}"
    );
    browser.assert_nothing_ran().await;
    browser.screenshot("dead-letter-queue").await;

    // A message: decoded beside the wire, hostile content shown as text.
    client
        .find(Locator::XPath(
            "//a[@class='message' and normalize-space()='hostile']",
        ))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.wait_for_text("Message hostile").await;
    let body = client
        .find(Locator::Id("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, HOSTILE);
    let wire = client
        .find(Locator::Id("wire"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        wire.contains("x-tenant") && wire.contains(HOSTILE),
        "{wire}"
    );
    let json = client
        .find(Locator::Id("message-json"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap()
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["headers"]["x-tenant"], HOSTILE);
    browser.assert_nothing_ran().await;
    browser.screenshot("message").await;

    // Delete it from its page.
    press(&browser, "Delete").await;
    browser.wait_for_text("deleted 1 of").await;
    assert_eq!(rabbit.depth(&rabbit.dlq).await, 5);

    // Replay one group: the three ValueErrors go back.
    let group_row = "//table[@id='groups']//tr[td[2][contains(., 'ValueError')]]";
    client
        .find(Locator::XPath(&format!(
            "{group_row}//button[normalize-space()='Replay group']"
        )))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.wait_for_text("replayed 3 of").await;
    assert_eq!(rabbit.depth(&rabbit.queue).await, 3);
    assert_eq!(rabbit.depth(&rabbit.dlq).await, 2);

    // Edit and replay order-4: the edited copy goes back marked, the original leaves.
    client
        .find(Locator::XPath(
            "//a[@class='message' and normalize-space()='order-4']",
        ))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.wait_for_text("Message order-4").await;
    client
        .find(Locator::LinkText("Edit and replay"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let editor = client
        .find(Locator::Css("textarea[name=body]"))
        .await
        .unwrap();
    editor.clear().await.unwrap();
    editor
        .send_keys("{\"order\":\"order-4\",\"fixed\":true}")
        .await
        .unwrap();
    press(&browser, "Publish the edited copy").await;
    browser.wait_for_text("the edited copy went to").await;
    assert_eq!(rabbit.depth(&rabbit.dlq).await, 1);
    let replayed = browse(&rabbit.url, ClientOptions::default(), &rabbit.queue, None)
        .await
        .unwrap();
    let edited = replayed
        .iter()
        .find(|swept| swept.message.properties.message_id.as_deref() == Some("order-4"))
        .expect("the edited copy is in the source queue");
    assert_eq!(
        &edited.message.body[..],
        b"{\"order\":\"order-4\",\"fixed\":true}"
    );
    let headers = &edited.message.properties.headers;
    assert!(headers.contains_key("x-polyq-edited"), "{headers:?}");
    assert!(headers.contains_key("acemq-replayed-from"), "{headers:?}");

    // Tick the last one and delete the selection.
    client
        .find(Locator::Css("input[type=checkbox][name=id][value=order-5]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    press(&browser, "Delete selected").await;
    browser.wait_for_text("deleted 1 of").await;
    assert_eq!(rabbit.depth(&rabbit.dlq).await, 0);

    // The audit page lists every action.
    client.goto(&console.url("/audit")).await.unwrap();
    let audit = client
        .find(Locator::Id("audit"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for action in ["delete", "replay", "edit-replay"] {
        assert!(audit.contains(action), "{audit}");
    }
    assert_eq!(console.audit().len(), 4);

    // A browser that has not logged in sees no action and cannot post one.
    client.delete_all_cookies().await.unwrap();
    client
        .goto(&console.url(&format!("/dlq?b=0&q={}", rabbit.dlq)))
        .await
        .unwrap();
    browser.wait_for_text("with the token to act").await;
    assert!(
        client
            .find_all(Locator::XPath("//button[normalize-space()='Purge']"))
            .await
            .unwrap()
            .is_empty()
    );
    browser.close().await;
}

/// A Redis URL on database 13, which only these tests use, so the overview lists their
/// queues alone.
fn redis_url() -> String {
    let mut url = url::Url::parse(&polyq_testkit::redis_url()).unwrap();
    url.set_path("/13");
    url.to_string()
}

/// The Python SDK publishes a job to `queue` and fails it once, dead-lettering it.
async fn python_dead_letters(url: &str, queue: &str) {
    const PEER: &str = r#"
import sys
from babelqueue import BabelQueue, EnvelopeCodec
from babelqueue.redis_transport import RedisTransport
url, queue, urn = sys.argv[1:]
transport = RedisTransport(url)
transport.publish(queue, EnvelopeCodec.encode(EnvelopeCodec.make(urn, {"order": "py-1"}, queue=queue)))
app = BabelQueue(transport=transport, queue=queue, dead_letter=True, max_attempts=1)
def failing(data, meta):
    raise RuntimeError("boom from python")
app.register(urn, failing)
app.consume(max_messages=1, timeout=10, handle_signals=False)
"#;
    let python = std::env::var("POLYQ_PYTHON").unwrap_or_else(|_| {
        panic!(
            "POLYQ_PYTHON is not set: run scripts/test (which sets it), or scripts/python-peer and \
             export POLYQ_PYTHON=$PWD/.venv/bin/python"
        )
    });
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(python)
            .args(["-c", PEER, url, queue, URN])
            .output(),
    )
    .await
    .expect("the Python peer finishes within a minute")
    .expect("the Python peer starts");
    assert!(
        output.status.success(),
        "the Python peer failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn redis_list(url: &str, key: &str) -> Vec<String> {
    let client = redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(&mut connection)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn babelqueue_jobs_on_redis_from_polyq_and_python_are_inspected_grouped_redriven_edited_and_deleted()
 {
    let url = redis_url();
    let queue = polyq_testkit::unique_name("polyq-console-jobs");
    let dlq = format!("{queue}.dlq");
    let _keys = DeleteRedisKeys::new(&url, [&queue]);
    // Two jobs dead-lettered by polyq's own worker (no handler for the URN), one by Python's.
    let jobs = babelqueue::BabelQueue::builder(url.as_str())
        .queue(queue.as_str())
        .connect()
        .await
        .unwrap();
    for order in ["rs-1", "rs-2"] {
        jobs.publish(URN, &serde_json::json!({"order": order}))
            .await
            .unwrap();
    }
    let report = jobs
        .worker()
        .max_attempts(1)
        .consume(2, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 2);
    python_dead_letters(&url, &queue).await;
    assert_eq!(redis_list(&url, &dlq).await.len(), 3);

    let console = Console::start(&["--url", &url, "--token", TOKEN]);
    let browser = Browser::start().await;
    let client = &browser.client;
    log_in(&browser, &console).await;
    client.goto(&console.url("/")).await.unwrap();
    browser.wait_for_text(&queue).await;

    client
        .goto(&console.url(&format!("/dlq?b=0&q={dlq}")))
        .await
        .unwrap();
    browser.wait_for_text("3 of 3 messages match").await;
    let groups = client
        .find(Locator::Id("groups"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        groups.contains("RuntimeError") && groups.contains("boom from python"),
        "{groups}"
    );
    let messages = client
        .find(Locator::Id("messages"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(messages.matches("babelqueue").count(), 3, "{messages}");

    // Python's job: its envelope decoded, its dead_letter block shown.
    client
        .goto(&console.url(&format!("/dlq?b=0&q={dlq}&error=python")))
        .await
        .unwrap();
    browser.wait_for_text("1 of 3 messages match").await;
    client
        .find(Locator::Css("a.message"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let decoded = client
        .find(Locator::Id("decoded"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        decoded.contains("\"lang\":\"python\"") && decoded.contains("dead_letter"),
        "{decoded}"
    );
    assert!(decoded.contains("boom from python"), "{decoded}");

    // Edit and redrive it: the copy, marked, goes to the source queue; the original leaves.
    client
        .find(Locator::LinkText("Edit and replay"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let editor = client
        .find(Locator::Css("textarea[name=body]"))
        .await
        .unwrap();
    let envelope = editor.prop("value").await.unwrap().unwrap();
    let edited = envelope.replace("\"py-1\"", "\"py-1-fixed\"");
    assert_ne!(edited, envelope);
    editor.clear().await.unwrap();
    editor.send_keys(&edited).await.unwrap();
    press(&browser, "Publish the edited copy").await;
    browser.wait_for_text("the edited copy went to").await;
    let source = redis_list(&url, &queue).await;
    assert_eq!(source.len(), 1, "{source:?}");
    let copy: serde_json::Value = serde_json::from_str(&source[0]).unwrap();
    assert_eq!(copy["data"]["order"], "py-1-fixed");
    assert_eq!(copy["x-polyq-edited"]["from"], dlq.as_str());
    assert!(copy.get("dead_letter").is_none(), "{copy}");
    assert_eq!(redis_list(&url, &dlq).await.len(), 2);

    // Redrive one of polyq's jobs, selected by its checkbox; delete the other.
    client
        .goto(&console.url(&format!("/dlq?b=0&q={dlq}")))
        .await
        .unwrap();
    let boxes = client
        .find_all(Locator::Css("input[type=checkbox][name=id]"))
        .await
        .unwrap();
    assert_eq!(boxes.len(), 2);
    boxes[0].click().await.unwrap();
    press(&browser, "Replay selected").await;
    browser.wait_for_text("replayed 1 of").await;
    assert_eq!(redis_list(&url, &queue).await.len(), 2);
    client
        .find(Locator::Css("input[type=checkbox][name=id]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    press(&browser, "Delete selected").await;
    browser.wait_for_text("deleted 1 of").await;
    assert!(redis_list(&url, &dlq).await.is_empty());
    browser.close().await;
}
