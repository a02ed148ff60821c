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
use polyq_testkit::rabbitmq::{close_connections_named, rabbitmqctl};
use polyq_testkit::{amqp_url, unique_name};
use tokio::sync::watch;
use tokio::time::timeout;

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(60);

/// A broker user of this test alone, with every permission on the test vhost; deleted when
/// dropped.
struct User {
    name: String,
    password: String,
}

impl User {
    fn create(vhost: &str) -> Self {
        let user = Self {
            name: unique_name("polyq-health"),
            password: unique_name("s3cret"),
        };
        rabbitmqctl(&["add_user", &user.name, &user.password]);
        rabbitmqctl(&["set_permissions", "-p", vhost, &user.name, ".*", ".*", ".*"]);
        user
    }

    fn change_password(&self, password: &str) {
        rabbitmqctl(&["change_password", &self.name, password]);
    }
}

impl Drop for User {
    fn drop(&mut self) {
        // Not `rabbitmqctl`, which panics: this also runs while a failed test unwinds.
        let _ = std::process::Command::new("rabbitmqctl")
            .args(["delete_user", &self.name])
            .output();
    }
}

/// The test broker's URL for `user`, and its vhost.
fn url_of(user: Option<&User>) -> (String, String) {
    let mut url = url::Url::parse(&amqp_url()).expect("the test broker URL parses");
    let vhost = match url.path().trim_start_matches('/') {
        "" | "%2f" | "%2F" => "/".to_owned(),
        other => other.to_owned(),
    };
    if let Some(user) = user {
        url.set_username(&user.name).expect("URL takes a user");
        url.set_password(Some(&user.password))
            .expect("URL takes a password");
    }
    (url.to_string(), vhost)
}

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
    let (_, vhost) = url_of(None);
    let user = User::create(&vhost);
    let (url, _) = url_of(Some(&user));
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
        !last_error.contains(&user.password),
        "the error shows the password: {last_error}"
    );

    user.change_password(&user.password);
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
