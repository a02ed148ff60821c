//! `amqps://` against the real RabbitMQ behind a TLS-terminating proxy (the shape of a TLS load
//! balancer in front of a cluster), with a certificate authority made for each test: the broker's
//! certificate is checked against the trusted authorities, and a client certificate is presented
//! to a broker that asks for one.
#![cfg(feature = "amqp")]

use std::time::Duration;

use polyq_amqp::{
    Client, ClientOptions, Error, OutgoingMessage, Properties, PublishOutcome, QueueSpec,
    TlsOptions,
};
use polyq_testkit::tls::{TestPki, TlsProxy, amqps_url_through, rabbitmq_addr};

fn trusting(pki: &TestPki) -> TlsOptions {
    TlsOptions::new().root_certificates(pki.ca_pem.clone())
}

async fn connect(url: &str, tls: TlsOptions) -> polyq_amqp::Result<Client> {
    let options = ClientOptions::default()
        .connection_name("polyq-tls-test")
        .tls(tls);
    tokio::time::timeout(Duration::from_secs(30), Client::connect_with(url, options))
        .await
        .expect("connecting ends within 30 s")
}

/// Publishes one message to a new queue and reads it back.
async fn round_trip(client: &Client) {
    let queue = polyq_testkit::unique_name("polyq.tls");
    let spec = QueueSpec {
        durable: false,
        ..QueueSpec::new(queue.clone())
    };
    client.declare_queue(&spec).await.expect("declare");
    let confirm = client
        .publish(OutgoingMessage::new(
            "",
            queue.clone(),
            Properties::default(),
            &b"over TLS"[..],
        ))
        .await
        .expect("publish");
    assert_eq!(confirm.await.expect("confirm"), PublishOutcome::Acked);
    let delivery = client
        .get(&queue)
        .await
        .expect("basic.get")
        .expect("the message is there");
    assert_eq!(&delivery.body[..], b"over TLS");
    client.delete_queue(&queue).await.expect("delete");
}

#[tokio::test]
async fn a_broker_signed_by_a_trusted_authority_is_used_over_tls() {
    let pki = TestPki::new();
    let proxy = TlsProxy::start(rabbitmq_addr(), &pki, false);
    let client = connect(&amqps_url_through(&proxy), trusting(&pki))
        .await
        .expect("connects over TLS");
    round_trip(&client).await;
    assert_eq!(
        proxy.sessions(),
        1,
        "one TLS session carried the connection"
    );
    client.close().await.expect("close");
}

#[tokio::test]
async fn a_broker_certificate_no_trusted_authority_signed_is_refused() {
    let pki = TestPki::new();
    let proxy = TlsProxy::start(rabbitmq_addr(), &pki, false);
    let url = amqps_url_through(&proxy);
    // The system's roots do not include the test's authority, and another authority does not
    // vouch for the broker either.
    for tls in [TlsOptions::new(), trusting(&TestPki::new())] {
        match connect(&url, tls).await {
            Err(Error::Connect { url: shown, source }) => {
                let reason = source.to_string();
                assert!(reason.contains("certificate"), "{reason}");
                assert!(!shown.contains(":guest@"), "{shown}");
            }
            other => panic!("expected a connect error, got {other:?}"),
        }
    }
    assert_eq!(proxy.sessions(), 0, "no TLS session was established");
}

#[tokio::test]
async fn a_broker_that_verifies_clients_takes_the_client_certificate() {
    let pki = TestPki::new();
    let proxy = TlsProxy::start(rabbitmq_addr(), &pki, true);
    let url = amqps_url_through(&proxy);
    match connect(&url, trusting(&pki)).await {
        Err(Error::Connect { .. }) => {}
        other => panic!("expected a connect error without a client certificate, got {other:?}"),
    }
    let client = connect(
        &url,
        trusting(&pki).client_certificate(pki.client_cert_pem.clone(), pki.client_key_pem.clone()),
    )
    .await
    .expect("connects with the client certificate");
    round_trip(&client).await;
    assert_eq!(proxy.sessions(), 1);
    client.close().await.expect("close");
}

#[tokio::test]
async fn tls_settings_for_a_url_without_tls_are_refused() {
    let tls = TlsOptions::new().root_certificates("-----BEGIN CERTIFICATE-----");
    for url in [polyq_testkit::amqp_url(), "memory://tls-refused".to_owned()] {
        match connect(&url, tls.clone()).await {
            Err(Error::InvalidUrl { reason, .. }) => assert!(reason.contains("amqps://")),
            other => panic!("expected an invalid URL for {url}, got {other:?}"),
        }
    }
}
