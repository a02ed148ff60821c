//! An AceMQ service on `amqps://`: the real RabbitMQ behind a TLS-terminating proxy that
//! verifies its clients, with a certificate authority made for the test.

use std::time::Duration;

use acemq::{AceMq, Message};
use polyq_amqp::{QueueSpec, TlsOptions};
use polyq_testkit::tls::{TestPki, TlsProxy, amqps_url_through, rabbitmq_addr};
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_service_publishes_and_consumes_over_tls_with_a_client_certificate() {
    let pki = TestPki::new();
    let proxy = TlsProxy::start(rabbitmq_addr(), &pki, true);
    let mq = AceMq::builder()
        .url(amqps_url_through(&proxy))
        .client_name("acemq-tls-test")
        .tls(
            TlsOptions::new()
                .root_certificates(pki.ca_pem.clone())
                .client_certificate(pki.client_cert_pem.clone(), pki.client_key_pem.clone()),
        )
        .connect()
        .await
        .expect("connects over TLS");
    let queue = polyq_testkit::unique_name("acemq.tls");
    mq.client()
        .declare_queue(&QueueSpec {
            durable: false,
            ..QueueSpec::new(queue.clone())
        })
        .await
        .expect("declare");

    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = mq
        .consume(queue.as_str(), move |message: Message<String>| {
            let tx = tx.clone();
            async move {
                tx.send(message.payload().clone()).unwrap();
            }
        })
        .await
        .expect("consumer starts");
    mq.publisher::<String>("", queue.as_str())
        .send(&"over TLS".to_owned())
        .await
        .expect("confirmed");
    let received = tokio::time::timeout(LIMIT, rx.recv())
        .await
        .expect("handled in time")
        .expect("a message");
    assert_eq!(received, "over TLS");
    assert!(consumer.drain(LIMIT).await.is_clean());
    assert_eq!(proxy.sessions(), 1, "one TLS session carried the service");
    // The consumer declared its dead-letter and parking queues beside the queue.
    for name in [
        queue.clone(),
        format!("{queue}.dlq"),
        format!("{queue}.parked"),
    ] {
        mq.client().delete_queue(&name).await.expect("delete");
    }
    mq.close().await.expect("close");
}
