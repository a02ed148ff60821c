//! `BabelQueue::health` on every binding: the embedded broker is up until its client closes,
//! RabbitMQ reports recovery from a lost connection, Redis keeps no connection state.

use std::time::Duration;

use babelqueue::BabelQueue;
use babelqueue::transport::{AmqpOptions, AmqpTransport, AnyTransport, Health};
use polyq_amqp::{Client, ClientOptions};
use polyq_testkit::rabbitmq::TestUser;
use polyq_testkit::unique_name;
use tokio::sync::watch;
use tokio::time::timeout;

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(30);

async fn wait_for(health: &mut watch::Receiver<Health>, what: &str, test: fn(&Health) -> bool) {
    let reached = timeout(LIMIT, health.wait_for(test)).await.is_ok();
    assert!(
        reached,
        "health never became {what}: {:?}",
        *health.borrow()
    );
}

fn amqp_client(queue: &BabelQueue) -> &Client {
    match queue.transport().as_ref() {
        AnyTransport::Amqp(amqp) => amqp.client(),
        other => panic!("expected the AMQP binding, got {other:?}"),
    }
}

#[tokio::test]
async fn memory_is_up_until_its_client_closes() {
    let queue = BabelQueue::connect(&format!("memory://{}", unique_name("health")))
        .await
        .expect("connects");
    assert!(
        matches!(
            queue.health(),
            Some(Health::Up {
                generation: 0,
                blocked: None,
                ..
            })
        ),
        "{:?}",
        queue.health()
    );
    let mut health = queue.health_watch().expect("memory:// has a health watch");
    queue
        .publish("urn:babel:health:probe", &serde_json::json!({"n": 1}))
        .await
        .expect("publishes");
    assert!(queue.health().is_some_and(|h| h.is_up()));

    amqp_client(&queue).close().await.expect("closes");
    wait_for(&mut health, "closed", |h| *h == Health::Closed).await;
    assert_eq!(queue.on_queue("other").health(), Some(Health::Closed));
}

#[cfg(feature = "amqp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_reports_a_lost_connection_and_its_recovery() {
    // A user of this test alone, whose reconnects are refused while its password is changed,
    // so the recovery lasts until the test ends it and the watch cannot skip past it.
    let user = TestUser::create("babelqueue-health");
    let name = unique_name("babelqueue-health");
    let client = Client::connect_with(
        &user.url(),
        ClientOptions::default()
            .connection_name(name.clone())
            .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200)),
    )
    .await
    .expect("connects");
    let queue = BabelQueue::with_transport(
        AnyTransport::Amqp(AmqpTransport::with_client(client, AmqpOptions::default())),
        unique_name("babelqueue.health"),
    );
    let mut health = queue.health_watch().expect("amqp:// has a health watch");
    assert!(matches!(
        queue.health(),
        Some(Health::Up { generation: 0, .. })
    ));

    user.change_password("not-the-password");
    let closed = polyq_testkit::rabbitmq::close_connections_named(&name).await;
    assert_eq!(closed, 1, "the client's one connection was closed");
    wait_for(
        &mut health,
        "recovering",
        |h| matches!(h, Health::Recovering { attempts, .. } if *attempts >= 1),
    )
    .await;
    user.change_password(user.password());
    wait_for(&mut health, "up again", |h| {
        matches!(h, Health::Up { generation: 1, .. })
    })
    .await;
    assert!(matches!(
        queue.health(),
        Some(Health::Up { generation: 1, .. })
    ));

    amqp_client(&queue).close().await.expect("closes");
    assert_eq!(queue.health(), Some(Health::Closed));
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_reports_no_connection_state() {
    let queue = BabelQueue::connect(&polyq_testkit::redis_url())
        .await
        .expect("connects");
    assert_eq!(queue.health(), None);
    assert!(queue.health_watch().is_none());
}
