//! Broker-side actions on the local RabbitMQ through `rabbitmqctl`, for recovery tests that must
//! affect their own connections only.

use std::process::Command;
use std::time::{Duration, Instant};

/// Runs `rabbitmqctl` with `args` and returns what it printed.
///
/// # Panics
/// When `rabbitmqctl` cannot run or reports a failure: the test cannot do what it set out to.
pub fn rabbitmqctl(args: &[&str]) -> String {
    let output = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .expect("rabbitmqctl runs (it is installed with the broker)");
    assert!(
        output.status.success(),
        "rabbitmqctl {} failed: {}",
        args.first().copied().unwrap_or_default(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Closes, from the broker's side, every connection the client named `connection_name` (the
/// connection name shown by the management tools), and returns how many it closed. Unlike
/// `rabbitmqctl close_all_connections`, other tests connected at the time are not touched.
///
/// RabbitMQ lists a new connection a moment after the client has it, later still on a loaded
/// machine, so the listing is repeated until the name shows up, for up to ten seconds.
pub async fn close_connections_named(connection_name: &str) -> usize {
    let connection_name = connection_name.to_owned();
    // rabbitmqctl is run and waited for off the runtime's worker threads.
    tokio::task::spawn_blocking(move || close_named(&connection_name))
        .await
        .expect("rabbitmqctl ran")
}

fn close_named(connection_name: &str) -> usize {
    // rabbitmqctl prints client properties as `{"connection_name","<name>"}`.
    let wanted = format!("{{\"connection_name\",\"{connection_name}\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let pids = loop {
        let listed = rabbitmqctl(&[
            "list_connections",
            "--quiet",
            "--no-table-headers",
            "pid",
            "client_properties",
        ]);
        let pids: Vec<String> = listed
            .lines()
            .filter(|line| line.contains(&wanted))
            .filter_map(|line| line.split('\t').next())
            .map(str::to_owned)
            .collect();
        if !pids.is_empty() || Instant::now() >= deadline {
            break pids;
        }
    };
    for pid in &pids {
        rabbitmqctl(&[
            "close_connection",
            pid.as_str(),
            "closed by a polyq recovery test",
        ]);
    }
    pids.len()
}

/// A broker user of one test alone, with every permission on the test broker's vhost, so a test
/// can refuse that user's reconnects (by changing its password) without touching other tests'
/// connections. Deleted when dropped, also while a failed test unwinds.
#[derive(Debug)]
pub struct TestUser {
    name: String,
    password: String,
}

impl TestUser {
    /// Creates the user on the test broker's vhost ([`crate::amqp_url`]).
    ///
    /// # Panics
    /// When `rabbitmqctl` fails.
    pub fn create(prefix: &str) -> Self {
        let user = Self {
            name: crate::unique_name(prefix),
            password: crate::unique_name("s3cret"),
        };
        rabbitmqctl(&["add_user", &user.name, &user.password]);
        let url = url::Url::parse(&crate::amqp_url()).expect("the test broker URL parses");
        let vhost = polyq_amqp::vhost_of(&url);
        rabbitmqctl(&[
            "set_permissions",
            "-p",
            &vhost,
            &user.name,
            ".*",
            ".*",
            ".*",
        ]);
        user
    }

    /// The test broker's URL with this user's name and password.
    pub fn url(&self) -> String {
        let mut url = url::Url::parse(&crate::amqp_url()).expect("the test broker URL parses");
        url.set_username(&self.name).expect("URL takes a user");
        url.set_password(Some(&self.password))
            .expect("URL takes a password");
        url.to_string()
    }

    /// The user's name, as RabbitMQ checks the `user_id` property of its publishes against it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The password the user was created with.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// Changes the user's password on the broker: a reconnect with [`TestUser::url`] is refused
    /// until it is changed back to [`TestUser::password`].
    ///
    /// # Panics
    /// When `rabbitmqctl` fails.
    pub fn change_password(&self, password: &str) {
        rabbitmqctl(&["change_password", &self.name, password]);
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        // Not `rabbitmqctl`, which panics: this also runs while a failed test unwinds.
        let _ = Command::new("rabbitmqctl")
            .args(["delete_user", &self.name])
            .output();
    }
}
