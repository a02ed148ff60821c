//! Connection health: up after connecting, recovering while the broker refuses to take the
//! client back (counting the failed attempts, their error redacted), up again on a new
//! generation, closed after close; `memory://` is up until closed.
//!
//! The outage is made on the broker's side for this test's own connection only: it connects as
//! a user of its own, whose password is changed before the broker closes that one connection,
//! so every reconnect is refused until the password is changed back. Other tests connected to
//! the broker at the time are not affected, so nothing here needs to run alone.

use std::time::Duration;

use polyq_amqp::{Client, ClientOptions, Health};
use polyq_testkit::rabbitmq::{TestUser, close_connections_named};
use polyq_testkit::unique_name;
use tokio::sync::watch;
use tokio::time::timeout;

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(60);

/// Waits (bounded by [`LIMIT`]) until the health satisfies `wanted`, and returns it.
async fn health_until(
    health: &mut watch::Receiver<Health>,
    what: &str,
    wanted: impl FnMut(&Health) -> bool,
) -> Health {
    timeout(LIMIT, health.wait_for(wanted))
        .await
        .unwrap_or_else(|_| panic!("health never became {what}"))
        .expect("the client is still there")
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_a_lost_connection_through_recovery_to_close() {
    let user = TestUser::create("polyq-health");
    let url = user.url();
    let connection_name = unique_name("polyq-health-test");
    let options = ClientOptions::default()
        .connection_name(connection_name.clone())
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200));
    let client = Client::connect_with(&url, options).await.expect("connects");
    let health = client.health();
    assert!(
        matches!(
            health,
            Health::Up {
                generation: 0,
                blocked: None,
                ..
            }
        ),
        "{health:?}"
    );
    let mut watch = client.health_watch();

    user.change_password("not-the-password");
    assert_eq!(close_connections_named(&connection_name).await, 1);
    let recovering = health_until(
        &mut watch,
        "recovering after a failed attempt",
        |h| matches!(h, Health::Recovering { attempts, .. } if *attempts >= 1),
    )
    .await;
    let Health::Recovering {
        last_error: Some(last_error),
        ..
    } = recovering
    else {
        panic!("a refused reconnect leaves its error: {recovering:?}");
    };
    assert!(!last_error.is_empty());
    assert!(
        !last_error.contains(user.password()),
        "the error shows the password: {last_error}"
    );

    user.change_password(user.password());
    let up = health_until(&mut watch, "up", Health::is_up).await;
    assert!(
        matches!(
            up,
            Health::Up {
                generation: 1,
                blocked: None,
                ..
            }
        ),
        "{up:?}"
    );

    client.close().await.expect("closes");
    assert_eq!(*watch.borrow_and_update(), Health::Closed);
    assert_eq!(client.health(), Health::Closed);
}

#[tokio::test]
async fn memory_is_up_until_closed() {
    let client = Client::connect(&format!("memory://{}", unique_name("health")))
        .await
        .expect("connects");
    let mut watch = client.health_watch();
    assert!(
        matches!(
            *watch.borrow_and_update(),
            Health::Up {
                generation: 0,
                blocked: None,
                ..
            }
        ),
        "{:?}",
        client.health()
    );
    let clone = client.clone();
    clone.close().await.expect("closes");
    let closed = health_until(&mut watch, "closed", |h| *h == Health::Closed).await;
    assert_eq!(closed, client.health());
}
