//! One scenario on every binding a capability exists on: `memory://`, RabbitMQ and both Redis
//! layouts, each reached through `BabelQueue::builder` with a unique queue, and looked at only
//! through the `Transport` trait, so the same assertions hold on all of them.

// Each test binary uses the part it needs.
#![allow(dead_code)]

use std::time::Duration;

use babelqueue::BabelQueue;
use babelqueue::transport::AnyReceipt;
use babelqueue::transport::redis::RedisOptions;
use babelqueue::transport::{AnyTransport, ConnectOptions, RedisLayout, Reserved, Transport};
use polyq_testkit::brokers::Broker;

/// Upper bound for anything awaited in a test.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Declares one `#[tokio::test]` per binding named, in a module named after the scenario, e.g.
/// `on_bindings!(scenario; memory: Memory, rabbitmq: RabbitMq)`.
#[macro_export]
macro_rules! on_bindings {
    ($scenario:ident; $($test:ident: $binding:ident),* $(,)?) => {
        mod $scenario {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$scenario($crate::every_binding::Binding::$binding).await;
                }
            )*
        }
    };
}

/// Where a scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// The embedded broker.
    Memory,
    /// The RabbitMQ of the test environment.
    RabbitMq,
    /// Redis, the SDKs' default layout.
    Redis,
    /// Redis, Laravel's layout.
    Laravel,
}

/// A queue with a unique name on one binding; [`Bound::cleanup`] removes what it left.
pub struct Bound {
    pub queue: BabelQueue,
    url: String,
}

impl Bound {
    /// A fresh queue on `binding` with default options.
    pub async fn new(binding: Binding) -> Self {
        Self::with(binding, ConnectOptions::default()).await
    }

    /// A fresh queue on `binding` with `options` (the Redis layout is set from `binding`).
    pub async fn with(binding: Binding, options: ConnectOptions) -> Self {
        let name = polyq_testkit::unique_name("bq-bind");
        let url = match binding {
            Binding::Memory => Broker::Memory.url(),
            Binding::RabbitMq => Broker::RabbitMq.url(),
            Binding::Redis | Binding::Laravel => Broker::Redis.url(),
        };
        let layout = if binding == Binding::Laravel {
            RedisLayout::Laravel
        } else {
            RedisLayout::Default
        };
        let queue = BabelQueue::builder(&url)
            .queue(name)
            .options(options.redis_layout(layout))
            .connect()
            .await
            .unwrap();
        Self { queue, url }
    }

    /// Options whose Redis dead-letter suffix is `suffix`.
    pub fn dlq_suffix(suffix: &str) -> ConnectOptions {
        ConnectOptions::default().redis(RedisOptions::new().dlq_suffix(suffix))
    }

    pub fn name(&self) -> &str {
        self.queue.queue()
    }

    pub fn transport(&self) -> &AnyTransport {
        self.queue.transport()
    }

    /// Takes the next message of `queue`, waiting up to [`PATIENCE`]; the caller settles it.
    pub async fn take(&self, queue: &str) -> Reserved<AnyReceipt> {
        let taken = self.transport().reserve(queue, PATIENCE).await.unwrap();
        taken.unwrap_or_else(|| panic!("no message arrived on {queue} within {PATIENCE:?}"))
    }

    /// Takes the next message of `queue` and acknowledges it.
    pub async fn take_and_ack(&self, queue: &str) -> Reserved<AnyReceipt> {
        let taken = self.take(queue).await;
        self.transport().ack(&taken.receipt).await.unwrap();
        taken
    }

    /// How many messages `queue` holds ready.
    pub async fn depth(&self, queue: &str) -> u64 {
        self.transport().depth(queue).await.unwrap()
    }

    /// Removes the queues (RabbitMQ) or keys (Redis) named after this queue: `extra` names the
    /// queues beyond the work queue and its dead-letter queue.
    pub async fn cleanup(self, extra: &[String]) {
        let name = self.name().to_owned();
        match self.transport() {
            AnyTransport::Amqp(amqp) => {
                let mut names = vec![name.clone(), amqp.dead_letter_queue(&name)];
                names.extend(extra.iter().cloned());
                for queue in names {
                    let _ = amqp.client().delete_queue(&queue).await;
                }
                let _ = amqp.client().close().await;
            }
            _ => polyq_testkit::brokers::delete_redis_keys(&self.url, &name).await,
        }
    }
}
