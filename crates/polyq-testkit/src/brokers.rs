//! One test scenario, run on each broker: the embedded one (`memory://`) and RabbitMQ, and
//! Redis (in either of BabelQueue's key layouts) where the scenario speaks BabelQueue.
//!
//! A scenario is an async function taking a `&'static` fixture. [`run`] sets the fixture up on a
//! fresh broker URL, runs the scenario, and removes what the scenario declared even when it
//! panicked, then lets the panic fail the test. [`both_brokers!`](crate::both_brokers) makes one
//! test per broker for each scenario, named `<scenario>::memory` and `<scenario>::rabbitmq`
//! (and `<scenario>::redis`, `<scenario>::laravel` where asked).
//!
//! ```ignore
//! async fn round_trip(broker: &'static TestBroker) {
//!     let queue = broker.remember_queue(broker.name("orders"));
//!     // ... declare `queue` on `broker.url()` and assert on it ...
//! }
//!
//! polyq_testkit::both_brokers!(round_trip);
//! ```

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;

use futures_util::FutureExt as _;
use polyq_amqp::Client;

/// The broker a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broker {
    /// A fresh embedded broker of its own for each test.
    Memory,
    /// The RabbitMQ of `POLYQ_AMQP_URL` (see [`amqp_url`](crate::amqp_url)), shared with other
    /// tests: scenarios use unique names and remember what they declare.
    RabbitMq,
    /// The Redis of `POLYQ_REDIS_URL` (see [`redis_url`](crate::redis_url)), shared likewise.
    Redis,
    /// The same Redis, for a scenario to use in Laravel's key layout: the scenario's binding
    /// reads [`TestBroker::kind`] to choose the layout, as this crate knows no binding.
    RedisLaravel,
}

impl Broker {
    /// The URL a test connects to: a `memory://` broker no other test uses, or the RabbitMQ or
    /// Redis URL after checking that the server can be reached.
    ///
    /// # Panics
    /// When the server cannot be reached (see [`amqp_url`](crate::amqp_url),
    /// [`redis_url`](crate::redis_url)).
    pub fn url(self) -> String {
        match self {
            Self::Memory => format!("memory://{}", crate::unique_name("polyq-test")),
            Self::RabbitMq => crate::amqp_url(),
            Self::Redis | Self::RedisLaravel => crate::redis_url(),
        }
    }
}

/// One test's broker: its URL, and what the test declared there and opened to it, removed and
/// closed when the test ends, whether it passed or not.
#[derive(Debug)]
pub struct TestBroker {
    kind: Broker,
    url: String,
    queues: Mutex<Vec<String>>,
    exchanges: Mutex<Vec<String>>,
    clients: Mutex<Vec<Client>>,
}

impl TestBroker {
    /// A record for a fresh URL of `kind` (see [`Broker::url`]) with nothing declared yet.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub fn new(kind: Broker) -> Self {
        Self {
            kind,
            url: kind.url(),
            queues: Mutex::default(),
            exchanges: Mutex::default(),
            clients: Mutex::default(),
        }
    }

    /// Which broker this is.
    pub fn kind(&self) -> Broker {
        self.kind
    }

    /// The broker's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A name no other test uses: `<what>.<random>`.
    pub fn name(&self, what: &str) -> String {
        crate::unique_name(what)
    }

    /// Deletes the queue `name` when the test ends (a queue that no longer exists is fine), and
    /// returns the name. On Redis: every key whose name contains it (what a binding keeps for
    /// the queue beside its list).
    pub fn remember_queue(&self, name: impl Into<String>) -> String {
        let name = name.into();
        lock(&self.queues).push(name.clone());
        name
    }

    /// Deletes the exchange `name` when the test ends (one that no longer exists is fine), and
    /// returns the name.
    pub fn remember_exchange(&self, name: impl Into<String>) -> String {
        let name = name.into();
        lock(&self.exchanges).push(name.clone());
        name
    }

    /// Closes `client` when the test ends, before the declared names are removed (exclusive
    /// queues go with their connection).
    pub fn close_at_end(&self, client: Client) {
        lock(&self.clients).push(client);
    }

    /// A new AMQP connection to the broker (`memory://` or RabbitMQ), closed when the test ends.
    ///
    /// # Panics
    /// When the broker refuses the connection.
    pub async fn connect(&self) -> Client {
        let client = Client::connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", polyq_amqp::redact_url(&self.url)));
        self.close_at_end(client.clone());
        client
    }

    /// Closes the remembered clients, then deletes the remembered queues and exchanges over a
    /// connection of its own.
    ///
    /// # Panics
    /// When a client does not close, or the broker refuses a deletion for another reason than
    /// the object being gone already: the next run would find it.
    pub async fn clean_up(&self) {
        let clients = std::mem::take(&mut *lock(&self.clients));
        for client in clients {
            client.close().await.expect("close a client of the test");
        }
        let queues = std::mem::take(&mut *lock(&self.queues));
        let exchanges = std::mem::take(&mut *lock(&self.exchanges));
        delete_declared(&self.url, queues, exchanges).await;
    }
}

/// Deletes its queues when it is dropped, at the end of the test or while a failed test
/// unwinds: for a test on RabbitMQ or Redis that does not run as a [`run`] scenario. A queue
/// that no longer exists is fine; on Redis, every key whose name contains one of the names
/// goes (what a binding keeps for the queue beside its list). For Redis keys that are not a
/// queue's, see [`DeleteRedisKeys`].
#[derive(Debug)]
pub struct DeleteQueues {
    url: String,
    queues: Vec<String>,
}

impl DeleteQueues {
    /// A guard for `queues` on the RabbitMQ or Redis at `url`; make it before the queues, so
    /// that one made before a failure is deleted too.
    pub fn new(url: &str, queues: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            url: url.to_owned(),
            queues: queues.into_iter().map(Into::into).collect(),
        }
    }
}

impl Drop for DeleteQueues {
    fn drop(&mut self) {
        if self.queues.is_empty() {
            return;
        }
        let url = self.url.clone();
        let queues = self.queues.clone();
        crate::guard::clean_up_on_drop(
            &format!("delete the queues {:?}", self.queues),
            move || async move {
                delete_declared(&url, queues, Vec::new()).await;
                Ok(())
            },
        );
    }
}

/// Deletes, when it is dropped, at the end of the test or while a failed test unwinds, every
/// key of the Redis server at `url` whose name contains one of its names (see
/// [`delete_redis_keys`]): for keys that are not a queue's, such as a store's under a unique
/// prefix.
///
/// ```no_run
/// # async fn example() {
/// let url = polyq_testkit::redis_url();
/// let prefix = format!("{}:", polyq_testkit::unique_name("store"));
/// let _keys = polyq_testkit::brokers::DeleteRedisKeys::new(&url, [&prefix]);
/// // ... write keys under `prefix` and assert on them ...
/// # }
/// ```
#[derive(Debug)]
pub struct DeleteRedisKeys {
    url: String,
    names: Vec<String>,
}

impl DeleteRedisKeys {
    /// A guard for the keys containing any of `names` on the Redis at `url`; make it before
    /// the keys, so that those written before a failure are deleted too.
    pub fn new(url: &str, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            url: url.to_owned(),
            names: names.into_iter().map(Into::into).collect(),
        }
    }
}

impl Drop for DeleteRedisKeys {
    fn drop(&mut self) {
        if self.names.is_empty() {
            return;
        }
        let url = self.url.clone();
        let names = self.names.clone();
        crate::guard::clean_up_on_drop(
            &format!("delete the Redis keys containing {:?}", self.names),
            move || async move {
                for name in names {
                    delete_redis_keys(&url, &name).await;
                }
                Ok(())
            },
        );
    }
}

/// Deletes `queues` and `exchanges` at `url` over a connection of its own, those gone already
/// too; on Redis every key whose name contains a queue's.
///
/// # Panics
/// When the broker refuses a deletion for another reason than the object being gone already.
async fn delete_declared(url: &str, queues: Vec<String>, exchanges: Vec<String>) {
    if url.starts_with("redis") {
        for queue in queues {
            delete_redis_keys(url, &queue).await;
        }
        return;
    }
    if queues.is_empty() && exchanges.is_empty() {
        return;
    }
    let cleaner = Client::connect(url).await.expect("connect to clean up");
    for queue in queues {
        match cleaner.delete_queue(&queue).await {
            Ok(_) | Err(polyq_amqp::Error::NotFound { .. }) => {}
            Err(e) => panic!("delete queue {queue}: {e}"),
        }
    }
    for exchange in exchanges {
        match cleaner.delete_exchange(&exchange).await {
            Ok(()) | Err(polyq_amqp::Error::NotFound { .. }) => {}
            Err(e) => panic!("delete exchange {exchange}: {e}"),
        }
    }
    cleaner.close().await.expect("close the cleaning client");
}

/// Every key of the Redis server at `url` whose name contains `name`, found with `SCAN`: it
/// walks the keyspace a page at a time, where `KEYS` would block a server other tests share.
///
/// # Panics
/// When the server cannot be reached or refuses the commands.
pub async fn redis_keys(url: &str, name: &str) -> Vec<String> {
    let mut connection = redis_connection(url).await;
    scan_keys(&mut connection, name).await
}

/// Deletes every key of the Redis server at `url` whose name contains `name` (found as by
/// [`redis_keys`]): what a scenario left behind for its queue `name`.
///
/// # Panics
/// When the server cannot be reached or refuses the commands.
pub async fn delete_redis_keys(url: &str, name: &str) {
    let mut connection = redis_connection(url).await;
    let keys = scan_keys(&mut connection, name).await;
    for batch in keys.chunks(SCAN_COUNT) {
        let _: u64 = redis::AsyncCommands::del(&mut connection, batch)
            .await
            .unwrap_or_else(|e| panic!("delete the keys of {name}: {e}"));
    }
}

/// How many keys one `SCAN` step looks at, and one `DEL` deletes.
const SCAN_COUNT: usize = 1000;

async fn redis_connection(url: &str) -> redis::aio::MultiplexedConnection {
    let shown = polyq_amqp::redact_url(url);
    redis::Client::open(url)
        .unwrap_or_else(|e| panic!("Redis at {shown}: {e}"))
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect to Redis at {shown} to clean up: {e}"))
}

async fn scan_keys(connection: &mut redis::aio::MultiplexedConnection, name: &str) -> Vec<String> {
    let options = redis::ScanOptions::default()
        .with_pattern(format!("*{name}*"))
        .with_count(SCAN_COUNT);
    let mut scan = redis::AsyncCommands::scan_options::<String>(connection, options)
        .await
        .unwrap_or_else(|e| panic!("list the keys of {name}: {e}"));
    let mut keys = Vec::new();
    while let Some(key) = scan.next_item().await {
        keys.push(key.unwrap_or_else(|e| panic!("list the keys of {name}: {e}")));
    }
    keys
}

/// A scenario's cleanup must run after a failed assertion too, so a lock poisoned by one is
/// still used.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a scenario is given: built on one test's broker, torn down after the scenario however
/// it ended.
pub trait Fixture: Sized + Sync + 'static {
    /// Builds the fixture on `broker` (connects, declares what every scenario needs).
    fn set_up(broker: TestBroker) -> impl Future<Output = Self>;

    /// The broker record whose names are removed at the end.
    fn broker(&self) -> &TestBroker;

    /// Closes what [`set_up`](Self::set_up) opened outside the broker record; runs before the
    /// record is cleaned up.
    fn tear_down(&self) -> impl Future<Output = ()> {
        async {}
    }
}

impl Fixture for TestBroker {
    async fn set_up(broker: TestBroker) -> Self {
        broker
    }

    fn broker(&self) -> &TestBroker {
        self
    }
}

/// Runs `scenario` on `broker` with a fixture of its own, then tears the fixture down and removes
/// what the scenario declared, also when the scenario panicked; the panic then fails the test.
///
/// The fixture lives for the rest of the test process, so that handlers and spawned tasks may
/// borrow it: one small value per test.
pub async fn run<Fx, F, Fut>(broker: Broker, scenario: F)
where
    Fx: Fixture,
    F: FnOnce(&'static Fx) -> Fut,
    Fut: Future<Output = ()>,
{
    let fixture: &'static Fx = Box::leak(Box::new(Fx::set_up(TestBroker::new(broker)).await));
    let outcome = AssertUnwindSafe(scenario(fixture)).catch_unwind().await;
    fixture.tear_down().await;
    fixture.broker().clean_up().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Makes, for each scenario `async fn name(fixture: &'static F)` (any [`Fixture`] `F`), the tests
/// `name::memory` and `name::rabbitmq` (and `name::redis`, `name::laravel` when asked), each
/// running it through [`run`](crate::brokers::run).
///
/// - `both_brokers!(a, b)`: multi-threaded tokio tests (two workers, as handlers run beside the
///   scenario).
/// - `both_brokers!(#[tokio::test] a, b)`: the given test attribute instead.
/// - `both_brokers!(#[tokio::test] rabbitmq if feature = "amqp"; a, b)`: the RabbitMQ tests only
///   where the configuration predicate holds.
/// - `both_brokers!(#[tokio::test] rabbitmq only; a, b)`: no embedded-broker test, for scenarios
///   that need a real RabbitMQ (a peer in another language, say).
/// - `both_brokers!(#[tokio::test] and redis if feature = "redis"; a, b)`: a Redis test as
///   well, where the predicate holds, for scenarios that run on any BabelQueue binding.
/// - `both_brokers!(on memory, rabbitmq, redis, laravel; a, b)` (with or without a test
///   attribute first): the tests of the brokers named, any of these four, for scenarios that run
///   on some of BabelQueue's bindings ([`Broker::RedisLaravel`] for `laravel`).
#[macro_export]
macro_rules! both_brokers {
    (@each #[$test:meta] $brokers:tt $($scenario:ident),+) => {$(
        $crate::both_brokers!(@scenario #[$test] $brokers $scenario);
    )+};
    (@scenario #[$test:meta] [$($(#[$cfg:meta])? $broker:ident),+] $scenario:ident) => {
        mod $scenario {
            $(
                $(#[$cfg])?
                #[$test]
                async fn $broker() {
                    $crate::brokers::run($crate::both_brokers!(@kind $broker), super::$scenario)
                        .await;
                }
            )+
        }
    };
    (@kind memory) => { $crate::brokers::Broker::Memory };
    (@kind rabbitmq) => { $crate::brokers::Broker::RabbitMq };
    (@kind redis) => { $crate::brokers::Broker::Redis };
    (@kind laravel) => { $crate::brokers::Broker::RedisLaravel };
    (#[$test:meta] rabbitmq if $cfg:meta; $($scenario:ident),+ $(,)?) => {
        $crate::both_brokers!(@each #[$test] [memory, #[cfg($cfg)] rabbitmq] $($scenario),+);
    };
    (#[$test:meta] rabbitmq only; $($scenario:ident),+ $(,)?) => {
        $crate::both_brokers!(@each #[$test] [rabbitmq] $($scenario),+);
    };
    (#[$test:meta] and redis if $cfg:meta; $($scenario:ident),+ $(,)?) => {
        $crate::both_brokers!(@each #[$test] [memory, rabbitmq, #[cfg($cfg)] redis] $($scenario),+);
    };
    (#[$test:meta] on $($broker:ident),+; $($scenario:ident),+ $(,)?) => {
        $crate::both_brokers!(@each #[$test] [$($broker),+] $($scenario),+);
    };
    (on $($broker:ident),+; $($scenario:ident),+ $(,)?) => {
        $crate::both_brokers!(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            on $($broker),+; $($scenario),+
        );
    };
    (#[$test:meta] $($scenario:ident),+ $(,)?) => {
        $crate::both_brokers!(@each #[$test] [memory, rabbitmq] $($scenario),+);
    };
    ($($scenario:ident),+ $(,)?) => {
        $crate::both_brokers!(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)] $($scenario),+
        );
    };
}
