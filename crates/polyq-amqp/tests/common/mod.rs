//! The fixture of the behavioural suite: a client on the test's broker, and declarations that
//! are removed at the end of the test (see `polyq_testkit::brokers`).

use std::time::Duration;

use polyq_amqp::{Client, ExchangeSpec, QueueInfo, QueueSpec};
use polyq_testkit::brokers::{Fixture as BrokerFixture, TestBroker};

/// Upper bound for anything a test awaits; reaching it fails the test.
pub const LIMIT: Duration = Duration::from_secs(10);

/// One test's client and the names it declared.
pub struct Fixture {
    broker: TestBroker,
    pub client: Client,
}

impl BrokerFixture for Fixture {
    async fn set_up(broker: TestBroker) -> Self {
        let client = broker.connect().await;
        Self { broker, client }
    }

    fn broker(&self) -> &TestBroker {
        &self.broker
    }
}

impl Fixture {
    /// A name no other test uses.
    pub fn name(&self, what: &str) -> String {
        self.broker.name(&format!("polyq.behaviour.{what}"))
    }

    /// Declares a queue and remembers to delete it. Exclusive queues go with their connection.
    pub async fn queue(&self, spec: QueueSpec) -> QueueInfo {
        let info = self
            .client
            .declare_queue(&spec)
            .await
            .unwrap_or_else(|e| panic!("declare queue {}: {e}", spec.name));
        if !spec.exclusive {
            self.broker.remember_queue(info.name.clone());
        }
        info
    }

    /// Declares an exchange and remembers to delete it.
    pub async fn exchange(&self, spec: ExchangeSpec) {
        self.client
            .declare_exchange(&spec)
            .await
            .unwrap_or_else(|e| panic!("declare exchange {}: {e}", spec.name));
        self.broker.remember_exchange(spec.name);
    }

    /// Another connection to the same broker, closed at the end of the test.
    pub async fn connect(&self) -> Client {
        self.broker.connect().await
    }
}

/// Awaits `future`, failing the test if it takes longer than [`LIMIT`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {LIMIT:?} waiting for {what}"))
}
