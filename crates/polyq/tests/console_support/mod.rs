//! What the console tests share: the built `polyq console` as a child process, headless
//! Chromium under chromedriver, both killed on drop (a failing test included), dead-lettered
//! messages of both families, and conditions polled with a deadline.

// Each test binary uses the part it needs.
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use polyq_amqp::{Client, FieldValue, OutgoingMessage, Properties, QueueSpec};

/// Upper bound for anything awaited; reaching it fails the test.
pub const LIMIT: Duration = Duration::from_secs(30);

/// The token the tests start the console with.
pub const TOKEN: &str = "console-test-token-0123456789";

/// A body and header value that would run if the console ever interpreted them.
pub const HOSTILE: &str =
    "<script>window.__xss=1;alert(1)</script><img id=injected src=x onerror=\"window.__xss=2\">";

/// Polls `condition` until it holds, failing the test at [`LIMIT`].
pub async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + LIMIT;
    while !condition().await {
        assert!(Instant::now() < deadline, "not within {LIMIT:?}: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A running `polyq console`, killed on drop.
pub struct Console {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    pub audit_log: PathBuf,
    /// What it wrote on stderr up to the line that names its address.
    pub banner: Vec<String>,
}

impl Console {
    /// Starts the console with `args` on an ephemeral loopback port (unless `args` binds) and
    /// an audit log of its own.
    pub fn start(args: &[&str]) -> Self {
        let audit_log = std::env::temp_dir().join(format!(
            "{}.jsonl",
            polyq_testkit::unique_name("polyq-console-audit")
        ));
        let mut command = Command::new(env!("CARGO_BIN_EXE_polyq"));
        command
            .arg("console")
            .args(args)
            .arg("--audit-log")
            .arg(&audit_log)
            .env("POLYQ_LOG", "off")
            .env_remove("POLYQ_CONSOLE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if !args.contains(&"--bind") {
            command.args(["--bind", "127.0.0.1:0"]);
        }
        let mut child = command.spawn().expect("polyq console starts");
        let stderr = child.stderr.take().expect("stderr");
        let (lines, heard) = mpsc::channel();
        // Keeps reading after the banner, so the console never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.send(line).ok();
            }
        });
        let mut banner = Vec::new();
        let base = loop {
            let line = heard
                .recv_timeout(LIMIT)
                .unwrap_or_else(|_| panic!("the console did not start: {banner:?}"));
            banner.push(line.clone());
            if let Some(address) = line.strip_prefix("polyq console: listening on ") {
                break address.trim_end_matches('/').to_owned();
            }
        };
        // The token line, when there is one, follows at once.
        if let Ok(line) = heard.recv_timeout(Duration::from_millis(500)) {
            banner.push(line);
        }
        Self {
            child,
            base,
            audit_log,
            banner,
        }
    }

    /// `base` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The audit log's entries.
    pub fn audit(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.audit_log)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        std::fs::remove_file(&self.audit_log).ok();
    }
}

/// chromedriver on an ephemeral port driving headless Chromium; the driver and the browsers
/// it started (one process group) are killed on drop.
pub struct Browser {
    pub client: fantoccini::Client,
    _driver: DriverGuard,
}

impl Browser {
    pub async fn start() -> Self {
        use std::os::unix::process::CommandExt as _;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("/usr/bin/chromedriver runs (apt-get install chromium-driver)");
        let guard = DriverGuard(Some(driver));
        let capabilities: fantoccini::wd::Capabilities =
            serde_json::from_value(serde_json::json!({
                "goog:chromeOptions": {
                    "binary": "/usr/bin/chromium",
                    "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--window-size=1280,1000"]
                }
            }))
            .expect("capabilities");
        let webdriver = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + LIMIT;
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match fantoccini::ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&webdriver)
                .await
            {
                Ok(client) => break client,
                Err(error) => {
                    assert!(
                        Instant::now() < deadline,
                        "chromedriver did not answer: {error}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        Self {
            client,
            _driver: guard,
        }
    }

    /// The page's text; empty while a navigation replaces the page.
    pub async fn text(&self) -> String {
        match self.client.find(fantoccini::Locator::Css("body")).await {
            Ok(body) => body.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Waits until the page's text contains `wanted`.
    pub async fn wait_for_text(&self, wanted: &str) {
        eventually(&format!("the page shows {wanted:?}"), || async {
            self.text().await.contains(wanted)
        })
        .await;
    }

    /// Saves a screenshot as `name`.png in `POLYQ_CONSOLE_SCREENSHOTS` (docs/console refreshes
    /// that way), else in the test's temporary directory.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = std::env::var_os("POLYQ_CONSOLE_SCREENSHOTS").map_or_else(
            || PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console"),
            PathBuf::from,
        );
        std::fs::create_dir_all(&dir).expect("the screenshot directory");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("the screenshot saved");
    }

    /// Nothing the pages showed ran: no alert open, no injected element, no global set.
    pub async fn assert_nothing_ran(&self) {
        assert!(
            self.client.get_alert_text().await.is_err(),
            "an alert is open"
        );
        let injected = self
            .client
            .find_all(fantoccini::Locator::Css("#injected"))
            .await
            .expect("a query");
        assert!(injected.is_empty(), "an injected element is in the DOM");
        let ran = self
            .client
            .execute("return typeof window.__xss;", vec![])
            .await
            .expect("a script of the test runs");
        assert_eq!(ran, serde_json::json!("undefined"), "a hostile script ran");
    }

    /// Ends the session, then the driver.
    pub async fn close(self) {
        let Self { client, _driver } = self;
        client.close().await.ok();
    }
}

/// Kills chromedriver's whole process group (the browsers it started with it).
struct DriverGuard(Option<Child>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        if let Some(mut driver) = self.0.take() {
            Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", driver.id())])
                .status()
                .ok();
            driver.kill().ok();
            driver.wait().ok();
        }
    }
}

/// A source queue and its `.dlq` on RabbitMQ, deleted on drop.
pub struct Rabbit {
    pub url: String,
    pub queue: String,
    pub dlq: String,
}

impl Rabbit {
    pub async fn new(what: &str) -> Self {
        let url = polyq_testkit::amqp_url();
        let queue = polyq_testkit::unique_name(&format!("polyq.console.{what}"));
        let dlq = format!("{queue}.dlq");
        let client = Client::connect(&url).await.unwrap();
        for name in [&queue, &dlq] {
            client.declare_queue(&QueueSpec::new(name)).await.unwrap();
        }
        client.close().await.unwrap();
        Self { url, queue, dlq }
    }

    /// Puts an AceMQ message `id` on the dead-letter queue, failed with `error`, with
    /// `tenant` as an application header.
    pub async fn dead_letter(&self, id: &str, error: &str, tenant: &str, body: &str) {
        self.dead_letter_as(id, error, tenant, "text/plain", body.as_bytes())
            .await;
    }

    /// [`Rabbit::dead_letter`] with a body of `content_type`.
    pub async fn dead_letter_as(
        &self,
        id: &str,
        error: &str,
        tenant: &str,
        content_type: &str,
        body: &[u8],
    ) {
        let client = Client::connect(&self.url).await.unwrap();
        let mut properties = Properties {
            message_id: Some(id.to_owned()),
            content_type: Some(content_type.to_owned()),
            ..Properties::default()
        };
        for (name, value) in [
            ("x-acemq-id", id),
            ("x-acemq-type", "orders.new"),
            ("x-acemq-error", error),
            ("x-tenant", tenant),
        ] {
            properties
                .headers
                .insert(name.to_owned(), FieldValue::from(value));
        }
        properties
            .headers
            .insert("x-acemq-attempt".to_owned(), FieldValue::from(3_i64));
        let confirm = client
            .publish(OutgoingMessage::new(
                "",
                self.dlq.as_str(),
                properties,
                body.to_vec(),
            ))
            .await
            .unwrap();
        confirm.await.unwrap();
        client.close().await.unwrap();
    }

    /// Messages ready in `queue`.
    pub async fn depth(&self, queue: &str) -> u32 {
        let client = Client::connect(&self.url).await.unwrap();
        let depth = client.inspect_queue(queue).await.unwrap().message_count;
        client.close().await.unwrap();
        depth
    }
}

impl Drop for Rabbit {
    fn drop(&mut self) {
        let (url, names) = (self.url.clone(), [self.queue.clone(), self.dlq.clone()]);
        // Drop runs inside the test's runtime; the cleanup gets a thread and runtime of its own.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(client) = Client::connect(&url).await {
                    for name in &names {
                        client.delete_queue(name).await.ok();
                    }
                    client.close().await.ok();
                }
            });
        })
        .join()
        .ok();
    }
}

impl Rabbit {
    /// Puts `count` AceMQ messages `m-0`, `m-1`, ... on the dead-letter queue in that order,
    /// every publish confirmed.
    pub async fn dead_letter_many(&self, count: usize) {
        let client = Client::connect(&self.url).await.unwrap();
        let mut confirms = Vec::with_capacity(count);
        for n in 0..count {
            let mut properties = Properties {
                message_id: Some(format!("m-{n}")),
                ..Properties::default()
            };
            for (name, value) in [
                ("x-acemq-id", format!("m-{n}")),
                ("x-acemq-type", "orders.new".to_owned()),
                ("x-acemq-error", format!("ValueError: order o-{n} failed")),
            ] {
                properties
                    .headers
                    .insert(name.to_owned(), FieldValue::from(value));
            }
            let publish = OutgoingMessage::new("", self.dlq.as_str(), properties, b"{}".to_vec());
            confirms.push(client.publish(publish).await.unwrap());
        }
        for confirm in confirms {
            confirm.await.unwrap();
        }
        client.close().await.unwrap();
    }
}
