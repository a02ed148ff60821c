//! `rediss://` against a Redis server of the test's own that speaks only TLS and verifies its
//! clients, and `amqps://` against the real RabbitMQ behind a TLS-terminating proxy; each with a
//! certificate authority made for the test.

use std::time::Duration;

use babelqueue::BabelQueue;
#[cfg(feature = "redis")]
use babelqueue::Error;
use babelqueue::transport::{AnyTransport, TlsOptions};
use polyq_testkit::tls::{TestPki, TlsProxy, amqps_url_through, rabbitmq_addr};
use polyq_testkit::unique_name;
use serde_json::json;

fn trusting(pki: &TestPki) -> TlsOptions {
    TlsOptions::new().root_certificates(pki.ca_pem.clone())
}

fn with_client_certificate(pki: &TestPki) -> TlsOptions {
    trusting(pki).client_certificate(pki.client_cert_pem.clone(), pki.client_key_pem.clone())
}

async fn connect(url: &str, queue: &str, tls: TlsOptions) -> babelqueue::Result<BabelQueue> {
    tokio::time::timeout(
        Duration::from_secs(30),
        BabelQueue::builder(url).queue(queue).tls(tls).connect(),
    )
    .await
    .expect("connecting ends within 30 s")
}

/// Publishes a job and has a worker take it.
async fn job_round_trip(queue: &BabelQueue) {
    let published = queue
        .publish("urn:babel:tls:checked", &json!({"over": "tls"}))
        .await
        .expect("publish");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let report = queue
        .worker()
        .handle("urn:babel:tls:checked", move |job| {
            let record = record.clone();
            async move {
                record.lock().unwrap().push((
                    job.meta().and_then(|meta| meta.id()).map(str::to_owned),
                    job.data().map(|data| data.as_str().to_owned()),
                ));
                Ok::<_, std::convert::Infallible>(())
            }
        })
        .consume(1, Duration::from_secs(10))
        .await
        .expect("the worker runs");
    assert_eq!(report.succeeded, 1);
    let id = published
        .meta()
        .and_then(|meta| meta.id())
        .map(str::to_owned);
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(id, Some(r#"{"over":"tls"}"#.to_owned()))]
    );
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_redis_server_that_speaks_only_tls_and_verifies_clients_carries_jobs() {
    use babelqueue::transport::ConnectOptions;
    use babelqueue::transport::redis::RedisOptions;
    use polyq_testkit::tls::RedisTlsServer;

    let pki = TestPki::new();
    let server = RedisTlsServer::start(&pki, true);
    let url = server.url();
    let queue = unique_name("tls");

    let worker = connect(&url, &queue, with_client_certificate(&pki))
        .await
        .expect("connects with the authority trusted and a client certificate");
    job_round_trip(&worker).await;

    // TLS given before Redis options that carry none still applies.
    let options = ConnectOptions::default()
        .tls(with_client_certificate(&pki))
        .redis(RedisOptions::new().prefetch(10));
    let later = tokio::time::timeout(
        Duration::from_secs(30),
        BabelQueue::builder(&url)
            .queue(&queue)
            .options(options)
            .connect(),
    )
    .await
    .expect("connecting ends within 30 s")
    .expect("connects with the TLS given first");
    job_round_trip(&later).await;

    // Refused: the server's authority not trusted (the system's roots only), then no client
    // certificate for a server that requires one.
    for tls in [
        TlsOptions::new()
            .client_certificate(pki.client_cert_pem.clone(), pki.client_key_pem.clone()),
        trusting(&pki),
    ] {
        match connect(&url, &queue, tls).await {
            Err(Error::Redis { operation, .. }) => assert_eq!(operation, "connect"),
            other => panic!("expected a connect error, got {other:?}"),
        }
    }
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn tls_settings_for_a_redis_url_without_tls_are_refused() {
    match connect(
        &polyq_testkit::redis_url(),
        "tls",
        trusting(&TestPki::new()),
    )
    .await
    {
        Err(Error::UnsupportedUrl { reason, .. }) => {
            assert!(reason.contains("rediss://"), "{reason}")
        }
        other => panic!("expected an unsupported URL, got {other:?}"),
    }
}

#[cfg(feature = "amqp")]
#[tokio::test]
async fn rabbitmq_behind_tls_carries_jobs() {
    let pki = TestPki::new();
    let proxy = TlsProxy::start(rabbitmq_addr(), &pki, true);
    let url = amqps_url_through(&proxy);
    let queue_name = unique_name("tls");

    let queue = connect(&url, &queue_name, with_client_certificate(&pki))
        .await
        .expect("connects over TLS with a client certificate");
    job_round_trip(&queue).await;
    assert_eq!(proxy.sessions(), 1);
    match queue.transport().as_ref() {
        AnyTransport::Amqp(amqp) => amqp.client().delete_queue(&queue_name).await.map(drop),
        other => panic!("expected the AMQP binding, got {other:?}"),
    }
    .expect("delete the queue");
}
