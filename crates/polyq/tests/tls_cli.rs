//! The commands on `amqps://` and `rediss://`, with the authority and the client certificate
//! given as files (`--tls-ca`, `--tls-cert`, `--tls-key`, or their environment variables).

use std::path::PathBuf;

use polyq_testkit::tls::{RedisTlsServer, TestPki, TlsProxy, amqps_url_through, rabbitmq_addr};
use polyq_testkit::unique_name;
use serde_json::Value;

mod common;
use common::{command, failure, polyq, success_lines};

/// `pki`'s authority and client certificate as files, removed when dropped.
struct PemFiles {
    dir: PathBuf,
}

impl PemFiles {
    fn new(pki: &TestPki) -> Self {
        let dir = std::env::temp_dir().join(unique_name("polyq-cli-tls"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.pem"), &pki.ca_pem).unwrap();
        std::fs::write(dir.join("client.pem"), &pki.client_cert_pem).unwrap();
        std::fs::write(dir.join("client.key"), &pki.client_key_pem).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for PemFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn babel_publishes_and_consumes_on_a_redis_server_that_verifies_clients() {
    let pki = TestPki::new();
    let server = RedisTlsServer::start(&pki, true);
    let files = PemFiles::new(&pki);
    let (url, queue) = (server.url(), unique_name("cli.tls"));
    let (ca, cert, key) = (
        files.path("ca.pem"),
        files.path("client.pem"),
        files.path("client.key"),
    );
    let publish = [
        "babel",
        "publish",
        "--url",
        &url,
        "--queue",
        &queue,
        "--urn",
        "urn:babel:tls:cli",
        "--data",
        r#"{"n":1}"#,
    ];
    let client_certificate = ["--tls-cert", &cert, "--tls-key", &key];
    let trusted = [&publish[..], &["--tls-ca", &ca], &client_certificate].concat();
    assert_eq!(success_lines(polyq(&trusted), &trusted).len(), 1);

    // Without the authority the server's certificate is not trusted.
    let untrusted = [&publish[..], &client_certificate].concat();
    let refused = failure(&untrusted);
    assert!(refused.contains(&format!("--url {url}")), "{refused}");

    // The same settings from the environment.
    let consume = [
        "babel",
        "consume",
        "--url",
        &url,
        "--queue",
        &queue,
        "--max",
        "1",
        "--timeout",
        "5",
    ];
    let output = command(&consume)
        .env("POLYQ_TLS_CA", &ca)
        .env("POLYQ_TLS_CERT", &cert)
        .env("POLYQ_TLS_KEY", &key)
        .output()
        .unwrap();
    let consumed = success_lines(output, &consume);
    assert_eq!(consumed.len(), 1);
    let report: Value = serde_json::from_str(&consumed[0]).unwrap();
    assert_eq!(report["urn"], "urn:babel:tls:cli", "{report}");
}

#[test]
fn a_client_certificate_needs_its_key() {
    let args = [
        "babel",
        "consume",
        "--url",
        "rediss://127.0.0.1:1",
        "--queue",
        "q",
        "--tls-cert",
        "c",
    ];
    assert!(failure(&args).contains("--tls-key"));
}

#[tokio::test]
async fn acemq_publishes_and_consumes_on_rabbitmq_behind_tls() {
    let pki = TestPki::new();
    let proxy = TlsProxy::start(rabbitmq_addr(), &pki, false);
    let files = PemFiles::new(&pki);
    let (url, ca) = (amqps_url_through(&proxy), files.path("ca.pem"));
    let queue = unique_name("polyq.cli.tls");
    let admin = polyq_amqp::Client::connect(&polyq_testkit::amqp_url())
        .await
        .unwrap();
    admin
        .declare_queue(&polyq_amqp::QueueSpec {
            durable: false,
            ..polyq_amqp::QueueSpec::new(queue.clone())
        })
        .await
        .unwrap();

    let publish = [
        "acemq",
        "publish",
        "--url",
        &url,
        "--routing-key",
        &queue,
        "--json",
        r#"{"n":1}"#,
        "--tls-ca",
        &ca,
    ];
    assert_eq!(success_lines(polyq(&publish), &publish).len(), 1);
    let consume = [
        "acemq", "consume", "--url", &url, "--queue", &queue, "--count", "1", "--tls-ca", &ca,
    ];
    let consumed = success_lines(polyq(&consume), &consume);
    assert_eq!(consumed.len(), 1);
    assert!(consumed[0].contains(r#""n":1"#), "{}", consumed[0]);
    assert_eq!(proxy.sessions(), 2, "each command had its own TLS session");

    admin.delete_queue(&queue).await.unwrap();
    admin.close().await.unwrap();
}
