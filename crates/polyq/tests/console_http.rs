//! `polyq console` over plain HTTP against RabbitMQ: actions need the token and are audited,
//! `--read-only` refuses them, beyond loopback reading needs the token too, pages escape what
//! messages carry, and `/metrics` and `/health` answer.

mod console_support;

use console_support::{Console, HOSTILE, LIMIT, Rabbit, TOKEN};
use polyq_testkit::brokers::DeleteRedisKeys;
use reqwest::StatusCode;

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn console_for(rabbit: &Rabbit, extra: &[&str]) -> Console {
    let mut args = vec!["--url", &rabbit.url, "--queue", &rabbit.queue];
    args.extend_from_slice(extra);
    Console::start(&args)
}

async fn delete_form(console: &Console, rabbit: &Rabbit, bearer: Option<&str>) -> StatusCode {
    let mut request = http()
        .post(console.url("/action"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("b=0&q={}&action=delete&id=m-1", rabbit.dlq));
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().status()
}

#[tokio::test]
async fn an_action_without_the_token_is_refused_and_with_it_runs_and_is_audited() {
    let rabbit = Rabbit::new("token").await;
    for id in ["m-1", "m-2"] {
        rabbit
            .dead_letter(id, "ValueError: no line '3x'", "acme", "{}")
            .await;
    }
    let console = console_for(&rabbit, &["--token", TOKEN]);

    assert_eq!(
        delete_form(&console, &rabbit, None).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        delete_form(&console, &rabbit, Some("not-the-token-at-all")).await,
        StatusCode::FORBIDDEN
    );
    // A form that names the session's field without the session is no better.
    let forged = http()
        .post(console.url("/action"))
        .header("cookie", "polyq_console=guess")
        .body(format!(
            "b=0&q={}&action=purge&confirm=yes&csrf=guess",
            rabbit.dlq
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert_eq!(rabbit.depth(&rabbit.dlq).await, 2, "nothing was removed");
    assert!(console.audit().is_empty(), "a refused action does nothing");

    assert_eq!(
        delete_form(&console, &rabbit, Some(TOKEN)).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(rabbit.depth(&rabbit.dlq).await, 1);
    let audit = console.audit();
    assert_eq!(audit.len(), 1, "{audit:?}");
    let entry = &audit[0];
    assert_eq!(entry["action"], "delete");
    assert_eq!(entry["count"], 1);
    assert_eq!(entry["queue"], rabbit.dlq.as_str());
    assert_eq!(entry["selection"]["ids"], serde_json::json!(["m-1"]));
    assert_eq!(entry["outcome"], "ok");
    assert!(
        entry["from"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{entry}"
    );
    assert!(
        !entry["broker"].as_str().unwrap().contains("guest:guest"),
        "{entry}"
    );

    let page = http().get(console.url("/audit")).send().await.unwrap();
    let page = page.text().await.unwrap();
    assert!(
        page.contains(&rabbit.dlq) && page.contains("delete"),
        "{page}"
    );
}

#[tokio::test]
async fn a_login_gives_a_session_whose_forms_carry_the_field_that_lets_them_act() {
    let rabbit = Rabbit::new("login").await;
    rabbit.dead_letter("m-1", "boom", "acme", "{}").await;
    let console = console_for(&rabbit, &["--token", TOKEN]);

    let wrong = http()
        .post(console.url("/login"))
        .body("token=wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get("set-cookie").is_none());

    let login = http()
        .post(console.url("/login"))
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_owned();

    let page = http()
        .get(console.url(&format!("/dlq?b=0&q={}", rabbit.dlq)))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let field = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a csrf field on a session's page")
        .to_owned();
    assert!(!field.is_empty());

    let without_field = http()
        .post(console.url("/action"))
        .header("cookie", &session)
        .body(format!("b=0&q={}&action=delete&id=m-1", rabbit.dlq))
        .send()
        .await
        .unwrap();
    assert_eq!(without_field.status(), StatusCode::FORBIDDEN);
    let with_field = http()
        .post(console.url("/action"))
        .header("cookie", &session)
        .body(format!(
            "b=0&q={}&action=delete&id=m-1&csrf={field}",
            rabbit.dlq
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(with_field.status(), StatusCode::SEE_OTHER);
    assert_eq!(rabbit.depth(&rabbit.dlq).await, 0);
}

#[tokio::test]
async fn read_only_refuses_every_action_even_with_the_token() {
    let rabbit = Rabbit::new("readonly").await;
    rabbit.dead_letter("m-1", "boom", "acme", "{}").await;
    let console = console_for(&rabbit, &["--token", TOKEN, "--read-only"]);
    assert_eq!(
        delete_form(&console, &rabbit, Some(TOKEN)).await,
        StatusCode::FORBIDDEN
    );
    let purge = http()
        .post(console.url("/action"))
        .bearer_auth(TOKEN)
        .body(format!("b=0&q={}&action=purge&confirm=yes", rabbit.dlq))
        .send()
        .await
        .unwrap();
    assert_eq!(purge.status(), StatusCode::FORBIDDEN);
    assert!(purge.text().await.unwrap().contains("read-only"));
    assert_eq!(rabbit.depth(&rabbit.dlq).await, 1);
    // Reading still works, with no action on the page.
    let page = http()
        .get(console.url(&format!("/dlq?b=0&q={}", rabbit.dlq)))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("m-1") && !page.contains("Replay all"),
        "{page}"
    );
}

#[tokio::test]
async fn beyond_loopback_every_page_but_login_and_health_needs_the_token() {
    let rabbit = Rabbit::new("exposed").await;
    let console = console_for(&rabbit, &["--token", TOKEN, "--bind", "0.0.0.0:0"]);
    let port = console.base.rsplit(':').next().unwrap().to_owned();
    let at = |path: &str| format!("http://127.0.0.1:{port}{path}");
    for path in ["/", "/audit", "/metrics", "/events"] {
        let status = http().get(at(path)).send().await.unwrap().status();
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    let overview = http().get(at("/")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(overview.status(), StatusCode::OK);
    for path in ["/health", "/login"] {
        let status = http().get(at(path)).send().await.unwrap().status();
        assert_eq!(status, StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn on_loopback_a_generated_token_is_printed_once_and_works() {
    let rabbit = Rabbit::new("generated").await;
    rabbit.dead_letter("m-1", "boom", "acme", "{}").await;
    let console = console_for(&rabbit, &[]);
    let token = console
        .banner
        .iter()
        .find_map(|line| line.strip_prefix("polyq console: token "))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the token is printed")
        .to_owned();
    assert_eq!(token.len(), 64);
    let page = http().get(console.url("/")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK, "reading is open on loopback");
    assert_eq!(
        delete_form(&console, &rabbit, Some(&token)).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(rabbit.depth(&rabbit.dlq).await, 0);
}

#[tokio::test]
async fn pages_show_markup_in_bodies_and_header_values_as_text() {
    let rabbit = Rabbit::new("escape").await;
    rabbit.dead_letter("m-1", HOSTILE, HOSTILE, HOSTILE).await;
    let console = console_for(&rabbit, &["--token", TOKEN]);
    for path in [
        format!("/dlq?b=0&q={}", rabbit.dlq),
        format!("/message?b=0&q={}&pos=0&id=m-1", rabbit.dlq),
        format!("/edit?b=0&q={}&pos=0&id=m-1", rabbit.dlq),
        format!(
            "/dlq?b=0&q={}&grep=%3Cscript%3E&done=%3Cscript%3Ealert(1)%3C/script%3E",
            rabbit.dlq
        ),
    ] {
        let page = http().get(console.url(&path)).send().await.unwrap();
        assert_eq!(page.status(), StatusCode::OK, "{path}");
        let page = page.text().await.unwrap();
        assert!(!page.contains("<script>window"), "{path}: {page}");
        assert!(!page.contains("<img"), "{path}: {page}");
        assert!(!page.contains("<script>alert"), "{path}: {page}");
        assert!(page.contains("&lt;script&gt;"), "{path}: {page}");
    }
}

#[tokio::test]
async fn a_message_page_shows_each_format_beside_what_reading_it_needs() {
    let rabbit = Rabbit::new("formats").await;
    let xml = "<OrderPlaced><orderId>o-1</orderId></OrderPlaced>";
    rabbit
        .dead_letter_as("m-xml", "boom", "acme", "application/xml", xml.as_bytes())
        .await;
    let mut sealed = vec![0xAE, 0x01, 8];
    sealed.extend_from_slice(b"orders-1");
    sealed.extend_from_slice(&[7; 12 + 16 + 5]);
    rabbit
        .dead_letter_as(
            "m-enc",
            "boom",
            "acme",
            "application/vnd.acemq.encrypted",
            &sealed,
        )
        .await;
    let console = console_for(&rabbit, &["--token", TOKEN]);
    let page = |pos: usize, id: &str| {
        let path = format!("/message?b=0&q={}&pos={pos}&id={id}", rabbit.dlq);
        let url = console.url(&path);
        async move {
            let page = http().get(url).send().await.unwrap();
            assert_eq!(page.status(), StatusCode::OK, "{path}");
            page.text().await.unwrap()
        }
    };
    let shown = page(0, "m-xml").await;
    assert!(
        shown.contains("&lt;OrderPlaced&gt;&lt;orderId&gt;o-1&lt;/orderId&gt;"),
        "the XML as text: {shown}"
    );
    let shown = page(1, "m-enc").await;
    assert!(shown.contains("payload_note"), "{shown}");
    assert!(
        shown.contains("encrypted with key id `orders-1`: shown as raw bytes"),
        "{shown}"
    );
}

#[tokio::test]
async fn metrics_show_depths_and_action_counters_and_health_answers() {
    let rabbit = Rabbit::new("metrics").await;
    for id in ["m-1", "m-2", "m-3"] {
        rabbit.dead_letter(id, "boom", "acme", "{}").await;
    }
    let console = console_for(&rabbit, &["--token", TOKEN]);
    assert_eq!(
        delete_form(&console, &rabbit, Some(TOKEN)).await,
        StatusCode::SEE_OTHER
    );
    let metrics = http().get(console.url("/metrics")).send().await.unwrap();
    assert!(
        metrics.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let metrics = metrics.text().await.unwrap();
    let depth = metrics
        .lines()
        .find(|line| {
            line.starts_with("polyq_console_queue_depth{")
                && line.contains(&format!("queue=\"{}\"", rabbit.dlq))
        })
        .unwrap_or_else(|| panic!("a depth for the dead-letter queue: {metrics}"));
    assert!(depth.ends_with(" 2"), "{depth}");
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("polyq_console_actions_total{")
                && line.contains("action=\"delete\"")
                && line.contains("outcome=\"ok\"")
                && line.ends_with(" 1")),
        "{metrics}"
    );
    let health = http().get(console.url("/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(health.text().await.unwrap(), r#"{"status":"ok"}"#);
}

/// The ids the console's pages list for `queue`, page after page, in order.
async fn listed_ids(console: &Console, queue: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for page in 1.. {
        let html = http()
            .get(console.url(&format!("/dlq?b=0&q={queue}&page={page}")))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let before = ids.len();
        ids.extend(
            html.split("name=\"id\" value=\"")
                .skip(1)
                .filter_map(|rest| rest.split('"').next())
                .map(str::to_owned),
        );
        if ids.len() == before {
            break;
        }
    }
    ids
}

/// Enough messages for several pages; on RabbitMQ each page reads the whole queue with one
/// `basic.get` a message, so it holds fewer.
const MANY: usize = 400;
const MANY_ON_RABBITMQ: usize = 160;

#[tokio::test]
async fn reading_a_rabbitmq_queue_for_display_loses_and_reorders_nothing() {
    let rabbit = Rabbit::new("order").await;
    rabbit.dead_letter_many(MANY_ON_RABBITMQ).await;
    let console = console_for(&rabbit, &["--token", TOKEN]);
    let expected: Vec<String> = (0..MANY_ON_RABBITMQ).map(|n| format!("m-{n}")).collect();
    for round in 0..2 {
        assert_eq!(
            listed_ids(&console, &rabbit.dlq).await,
            expected,
            "round {round}"
        );
    }
    assert_eq!(rabbit.depth(&rabbit.dlq).await as usize, MANY_ON_RABBITMQ);
}

#[tokio::test]
async fn reading_a_redis_queue_for_display_loses_and_reorders_nothing() {
    let url = polyq_testkit::redis_url();
    let queue = polyq_testkit::unique_name("polyq-console-order");
    let dlq = format!("{queue}.dlq");
    let _keys = DeleteRedisKeys::new(&url, [&dlq]);
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let mut expected = Vec::with_capacity(MANY);
    let mut jobs = Vec::with_capacity(MANY);
    for n in 0..MANY {
        let mut envelope = babelqueue::make(
            "urn:babel:orders:created",
            &serde_json::json!({"n": n}),
            babelqueue::MakeOptions::new().queue(queue.as_str()),
        )
        .unwrap();
        expected.push(
            envelope
                .meta()
                .and_then(babelqueue::Meta::id)
                .unwrap()
                .to_owned(),
        );
        envelope.annotate(
            &babelqueue::DeadLetter::new(babelqueue::DeadLetterReason::Failed, &queue, 3)
                .error(format!("order {n} failed")),
        );
        jobs.push(envelope.encode().unwrap());
    }
    redis::cmd("RPUSH")
        .arg(&dlq)
        .arg(&jobs)
        .query_async::<()>(&mut connection)
        .await
        .unwrap();
    let console = Console::start(&["--url", &url, "--token", TOKEN]);
    for round in 0..2 {
        assert_eq!(listed_ids(&console, &dlq).await, expected, "round {round}");
    }
    let stored: Vec<String> = redis::cmd("LRANGE")
        .arg(&dlq)
        .arg(0)
        .arg(-1)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(stored, jobs, "the list is as it was, byte for byte");
}

#[tokio::test]
async fn without_named_queues_the_overview_shows_what_the_management_api_surveys() {
    use polyq_amqp::{Client, OutgoingMessage, Properties};
    let rabbit = Rabbit::new("survey").await;
    for id in ["m-1", "m-2"] {
        rabbit.dead_letter(id, "boom", "acme", "{}").await;
    }
    let client = Client::connect(&rabbit.url).await.unwrap();
    for body in ["a", "b"] {
        let message = OutgoingMessage::new("", rabbit.queue.as_str(), Properties::default(), body);
        client.publish(message).await.unwrap().await.unwrap();
    }
    // Held, not acknowledged, until the end of the test: the API counts it as unacked.
    let held = client.get(&rabbit.queue).await.unwrap().expect("a message");
    let console = Console::start(&["--url", &rabbit.url, "--token", TOKEN]);

    let row_start = format!("<td>{}</td>", rabbit.queue);
    let wanted = r#"<td class="n">1</td><td class="n">1</td><td class="n">0</td>"#;
    // RabbitMQ's statistics lag by up to 5 s: poll until they show the queue as it is.
    let deadline = std::time::Instant::now() + LIMIT;
    let page = loop {
        let page = http().get(console.url("/")).send().await.unwrap();
        let page = page.text().await.unwrap();
        let found = page
            .split_once(row_start.as_str())
            .is_some_and(|(_, rest)| {
                let row = rest.split("</tr>").next().unwrap_or_default();
                row.starts_with(wanted) && row.contains(">2</a>")
            });
        if found {
            break page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not within {LIMIT:?}: the surveyed queue with its unacked message in {page}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    assert!(page.contains("Publish / deliver / ack per s"), "{page}");
    drop(held);
    client.close().await.ok();
}

/// The management API the AMQP URL implies: its host, on port 15672.
fn implied_management_api(amqp_url: &str) -> std::net::SocketAddr {
    use std::net::ToSocketAddrs as _;
    let authority = amqp_url
        .split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .expect("an AMQP URL with a host");
    let host_port = authority.rsplit('@').next().unwrap_or(authority);
    let host = host_port
        .rsplit_once(':')
        .map_or(host_port, |(host, _)| host);
    (host, 15672)
        .to_socket_addrs()
        .unwrap()
        .next()
        .expect("the host resolves")
}

#[tokio::test]
async fn the_overview_surveys_through_the_management_url_given() {
    let rabbit = Rabbit::new("management-url").await;
    rabbit.dead_letter("m-1", "boom", "acme", "{}").await;
    // The API behind a proxy of the test's own: only a console that asks where it is told
    // reaches it there.
    let proxy = polyq_testkit::proxy::TcpProxy::start(implied_management_api(&rabbit.url)).await;
    let management = format!("http://{}", proxy.address());
    let console = Console::start(&[
        "--url",
        &rabbit.url,
        "--management-url",
        &management,
        "--token",
        TOKEN,
    ]);
    let row = format!("<td>{}</td>", rabbit.queue);
    let overview = || async {
        http()
            .get(console.url("/"))
            .send()
            .await
            .unwrap()
            .text()
            .await
    };
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let page = overview().await.unwrap();
        if page.contains(&row) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not within {LIMIT:?}: the queue surveyed through {management} in {page}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }

    // With the proxy cut the API no longer answers there: the console was asking it, and now
    // finds no queues rather than asking the default address.
    proxy.cut();
    let refused = proxy.refusals();
    let page = overview().await.unwrap();
    assert!(
        proxy.refusals() > refused,
        "the console did not ask the proxy"
    );
    assert!(!page.contains(&row), "{page}");
    assert!(page.contains("No queues found"), "{page}");
}

#[test]
fn one_management_url_for_several_rabbitmq_brokers_is_refused() {
    let url = polyq_testkit::amqp_url();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_polyq"))
        .args(["console", "--url", &url, "--url", &url])
        .args([
            "--management-url",
            "http://127.0.0.1:15672",
            "--bind",
            "127.0.0.1:0",
        ])
        .env("POLYQ_LOG", "off")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--management-url"), "{stderr}");
    assert!(stderr.contains("2 are given"), "{stderr}");
}

/// Puts `body` with `properties` on `rabbit`'s dead-letter queue, confirmed.
async fn dead_letter_raw(rabbit: &Rabbit, properties: polyq_amqp::Properties, body: Vec<u8>) {
    let client = polyq_amqp::Client::connect(&rabbit.url).await.unwrap();
    client
        .publish(polyq_amqp::OutgoingMessage::new(
            "",
            rabbit.dlq.as_str(),
            properties,
            body,
        ))
        .await
        .unwrap()
        .await
        .unwrap();
    client.close().await.unwrap();
}

/// The page at `path` of `console`, which answers 200; the console is stopped after.
async fn page_of(console: Console, path: &str) -> String {
    let page = http().get(console.url(path)).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    page.text().await.unwrap()
}

#[tokio::test]
async fn a_message_page_shows_an_encrypted_body_in_plaintext_with_the_key_file() {
    use polyq_amqp::{FieldValue, Properties};
    let rabbit = Rabbit::new("encrypted").await;
    let keys = acemq::codec::keyring::KeyRing::new("k-old", &[0x11; 32]).unwrap();
    let body = acemq::codec::encrypted::seal(&keys, br#"{"card":"4111-plaintext"}"#).unwrap();
    let mut properties = Properties {
        message_id: Some("m-1".to_owned()),
        content_type: Some("application/vnd.acemq.encrypted".to_owned()),
        ..Properties::default()
    };
    properties
        .headers
        .insert("x-acemq-id".to_owned(), FieldValue::from("m-1"));
    dead_letter_raw(&rabbit, properties, body.to_vec()).await;
    let key_file = std::env::temp_dir().join(format!("{}.keys", rabbit.dlq));
    std::fs::write(&key_file, format!("k-old = hex:{}\n", "11".repeat(32))).unwrap();
    let path = format!("/message?b=0&q={}&pos=0&id=m-1", rabbit.dlq);

    let without = page_of(console_for(&rabbit, &["--token", TOKEN]), &path).await;
    let with = page_of(
        console_for(
            &rabbit,
            &["--token", TOKEN, "--key-file", key_file.to_str().unwrap()],
        ),
        &path,
    )
    .await;
    std::fs::remove_file(&key_file).unwrap();
    assert!(
        without.contains("k-old") && without.contains("no key ring given"),
        "{without}"
    );
    assert!(!without.contains("4111-plaintext"), "{without}");
    assert!(
        with.contains("k-old") && with.contains("4111-plaintext"),
        "{with}"
    );
    assert!(!with.contains(&"11".repeat(32)), "a key was shown");
}

#[tokio::test]
async fn with_a_registry_a_message_page_masks_the_fields_it_marks_sensitive() {
    use polyq_amqp::Properties;
    const URN: &str = "urn:babel:people:registered";
    let rabbit = Rabbit::new("masked").await;
    let job = babelqueue::make(
        URN,
        &serde_json::json!({"email": "ana.secret@example.com", "plan": "gold"}),
        babelqueue::MakeOptions::new().queue(rabbit.queue.as_str()),
    )
    .unwrap()
    .encode()
    .unwrap();
    let properties = Properties {
        content_type: Some("application/json".to_owned()),
        ..Properties::default()
    };
    dead_letter_raw(&rabbit, properties, job.into_bytes()).await;
    let registry = std::env::temp_dir().join(polyq_testkit::unique_name("console-registry"));
    std::fs::create_dir_all(&registry).unwrap();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"email": {"type": "string", "x-gdpr-sensitive": true}}
    });
    std::fs::write(registry.join("people.json"), schema.to_string()).unwrap();
    let manifest = serde_json::json!({"schemas": [{"urn": URN, "schema": "people.json"}]});
    std::fs::write(registry.join("registry.json"), manifest.to_string()).unwrap();
    let path = format!("/message?b=0&q={}&pos=0", rabbit.dlq);

    let without = page_of(console_for(&rabbit, &["--token", TOKEN]), &path).await;
    let with = page_of(
        console_for(
            &rabbit,
            &["--token", TOKEN, "--registry", registry.to_str().unwrap()],
        ),
        &path,
    )
    .await;
    std::fs::remove_dir_all(&registry).unwrap();
    assert!(without.contains("ana.secret@example.com"), "{without}");
    assert!(!with.contains("ana.secret@example.com"), "{with}");
    assert!(with.contains("a***") && with.contains("gold"), "{with}");
}
