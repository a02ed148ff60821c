//! A test fixture for broker tests that run against RabbitMQ and the embedded broker alike:
//! unique names, and removal of everything a test declared even when it fails.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt as _;
use polyq_amqp::{Client, ExchangeSpec, QueueInfo, QueueSpec};

/// Upper bound for anything a test awaits; reaching it fails the test.
pub const LIMIT: Duration = Duration::from_secs(10);

/// A fresh embedded broker for one test.
pub fn memory_url() -> String {
    format!("memory://{}", polyq_testkit::unique_name("behaviour"))
}

/// One test's client and the names it declared.
pub struct Fixture {
    pub url: String,
    pub client: Client,
    queues: Mutex<Vec<String>>,
    exchanges: Mutex<Vec<String>>,
    clients: Mutex<Vec<Client>>,
}

impl Fixture {
    /// A name no other test uses.
    pub fn name(&self, what: &str) -> String {
        polyq_testkit::unique_name(&format!("polyq.behaviour.{what}"))
    }

    /// Declares a queue and remembers to delete it. Exclusive queues go with their connection.
    pub async fn queue(&self, spec: QueueSpec) -> QueueInfo {
        let info = self
            .client
            .declare_queue(&spec)
            .await
            .unwrap_or_else(|e| panic!("declare queue {}: {e}", spec.name));
        if !spec.exclusive {
            self.queues.lock().unwrap().push(info.name.clone());
        }
        info
    }

    /// Declares an exchange and remembers to delete it.
    pub async fn exchange(&self, spec: ExchangeSpec) {
        self.client
            .declare_exchange(&spec)
            .await
            .unwrap_or_else(|e| panic!("declare exchange {}: {e}", spec.name));
        self.exchanges.lock().unwrap().push(spec.name);
    }

    /// Another connection to the same broker, closed at the end of the test.
    pub async fn connect(&self) -> Client {
        let client = Client::connect(&self.url).await.expect("connect");
        self.clients.lock().unwrap().push(client.clone());
        client
    }

    async fn cleanup(&self) {
        let clients: Vec<Client> = std::mem::take(&mut *self.clients.lock().unwrap());
        for client in clients.iter().chain([&self.client]) {
            client.close().await.expect("close client");
        }
        let cleaner = Client::connect(&self.url)
            .await
            .expect("connect to clean up");
        let queues: Vec<String> = std::mem::take(&mut *self.queues.lock().unwrap());
        for queue in queues {
            cleaner
                .delete_queue(&queue)
                .await
                .unwrap_or_else(|e| panic!("delete queue {queue}: {e}"));
        }
        let exchanges: Vec<String> = std::mem::take(&mut *self.exchanges.lock().unwrap());
        for exchange in exchanges {
            cleaner
                .delete_exchange(&exchange)
                .await
                .unwrap_or_else(|e| panic!("delete exchange {exchange}: {e}"));
        }
        cleaner.close().await.expect("close cleaner");
    }
}

/// Runs a test body against the broker at `url`, then deletes what it declared, also when the
/// body panicked.
pub async fn run<F, Fut>(url: String, body: F)
where
    F: FnOnce(Arc<Fixture>) -> Fut,
    Fut: Future<Output = ()>,
{
    let client = Client::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", polyq_amqp::redact_url(&url)));
    let fixture = Arc::new(Fixture {
        url,
        client,
        queues: Mutex::default(),
        exchanges: Mutex::default(),
        clients: Mutex::default(),
    });
    let outcome = AssertUnwindSafe(body(Arc::clone(&fixture)))
        .catch_unwind()
        .await;
    fixture.cleanup().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Awaits `future`, failing the test if it takes longer than [`LIMIT`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {LIMIT:?} waiting for {what}"))
}

/// Generates, for each async test body `name(url)`, a test per broker.
macro_rules! on_both_brokers {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    super::common::run(super::common::memory_url(), super::$name).await;
                }
            )*
        }

        #[cfg(feature = "amqp")]
        mod rabbitmq {
            $(
                #[tokio::test]
                async fn $name() {
                    super::common::run(polyq_testkit::amqp_url(), super::$name).await;
                }
            )*
        }
    };
}
