//! The family and binding a scenario runs on: how its messages are published, how its worker
//! consumes them, and what is removed afterwards. Each worker is the library's own (an AceMQ
//! consumer, a BabelQueue worker) with a handler that only records the message.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use acemq::{AceMq, Envelope, Message};
use anyhow::Context;
use babelqueue::BabelQueue;
use babelqueue::transport::redis::{LaravelTransport, RedisOptions, RedisTransport};
use babelqueue::transport::{ConnectOptions, RedisLayout};
use babelqueue::worker::{Job, Shutdown};
use futures_util::{StreamExt, TryStreamExt};
use polyq_amqp::{FieldValue, QueueSpec};

use crate::ledger::Ledger;

/// The URN of every BabelQueue message of the campaign.
const URN: &str = "urn:babel:chaos:seq";
/// Messages an AMQP worker holds unsettled at once, the most a kill can make it process twice.
const AMQP_PREFETCH: u16 = 50;
/// Messages a Redis worker reserves ahead of its handler.
const REDIS_PREFETCH: usize = 10;
/// How long a reservation of a killed Redis worker stays out before the next reserve returns
/// it: short, so that a kill loop does not wait on it, and far above one message's handling.
const REDIS_RESERVATION: Duration = Duration::from_secs(2);
/// The longest one publish may wait for its confirm before it counts as refused; beyond the
/// libraries' own bounds, so that it only ends a publish they would leave waiting.
const SEND_LIMIT: Duration = Duration::from_secs(60);
/// Publishes in flight at once when a scenario fills a queue up front.
const FILL_CONCURRENCY: usize = 64;

/// A family on one of its bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// An AceMQ publisher and consumer on RabbitMQ (a quorum source queue).
    AcemqRabbitmq,
    /// BabelQueue on RabbitMQ.
    BabelRabbitmq,
    /// BabelQueue on Redis, the default layout (`Q`, `Q:processing`).
    BabelRedis,
    /// BabelQueue on Redis, Laravel's layout (`queues:Q`, `:reserved`).
    BabelLaravel,
}

impl Binding {
    /// Every binding, in the campaign's order.
    pub const ALL: [Binding; 4] = [
        Binding::AcemqRabbitmq,
        Binding::BabelRabbitmq,
        Binding::BabelRedis,
        Binding::BabelLaravel,
    ];

    /// Its name on the command line and in scenario names.
    pub fn name(self) -> &'static str {
        match self {
            Binding::AcemqRabbitmq => "acemq-rabbitmq",
            Binding::BabelRabbitmq => "babel-rabbitmq",
            Binding::BabelRedis => "babel-redis",
            Binding::BabelLaravel => "babel-laravel",
        }
    }

    /// Whether it runs on Redis (else on RabbitMQ).
    pub fn is_redis(self) -> bool {
        matches!(self, Binding::BabelRedis | Binding::BabelLaravel)
    }

    /// The most messages one worker holds unsettled, so the most one kill can duplicate.
    pub fn window(self) -> u64 {
        if self.is_redis() {
            // The prefetched reservations and the one in the handler.
            REDIS_PREFETCH as u64 + 1
        } else {
            u64::from(AMQP_PREFETCH)
        }
    }

    /// The suite's broker for it (`POLYQ_AMQP_URL` or `POLYQ_REDIS_URL`), checked reachable.
    pub fn shared_url(self) -> String {
        if self.is_redis() {
            polyq_testkit::redis_url()
        } else {
            polyq_testkit::amqp_url()
        }
    }

    /// Declares what publishing needs before any consumer runs: AceMQ's quorum source queue
    /// (its consumers never declare it); the other bindings declare their own.
    ///
    /// # Errors
    /// When the broker refuses.
    pub async fn prepare(self, url: &str, queue: &str) -> anyhow::Result<()> {
        if self == Binding::AcemqRabbitmq {
            let client = polyq_amqp::Client::connect(url).await?;
            client
                .declare_queue(
                    &QueueSpec::new(queue).argument("x-queue-type", FieldValue::from("quorum")),
                )
                .await?;
            client.close().await?;
        }
        Ok(())
    }

    /// A publisher of sequence numbers to `queue`.
    ///
    /// # Errors
    /// When it cannot connect.
    pub async fn publisher(self, url: &str, queue: &str) -> anyhow::Result<Publisher> {
        Ok(match self {
            Binding::AcemqRabbitmq => {
                let mq = AceMq::builder()
                    .url(url)
                    .client_name("polyq-chaos-publisher")
                    // An alarm scenario holds publishers blocked longer than the default bound.
                    .blocked_timeout(Duration::from_secs(300))
                    .connect()
                    .await?;
                let publisher = mq.publisher::<u64>("", queue);
                Publisher::Acemq(mq, publisher)
            }
            _ => Publisher::Babel(self.connect_babel(url, queue).await?),
        })
    }

    /// Publishes `seqs` with up to `FILL_CONCURRENCY` in flight, every one confirmed.
    ///
    /// # Errors
    /// The first publish that failed.
    pub async fn fill(
        self,
        url: &str,
        queue: &str,
        seqs: std::ops::Range<u64>,
    ) -> anyhow::Result<()> {
        let publisher = self.publisher(url, queue).await?;
        futures_util::stream::iter(seqs)
            .map(|seq| publisher.send(seq))
            .buffer_unordered(FILL_CONCURRENCY)
            .try_collect::<()>()
            .await?;
        publisher.close().await
    }

    /// Runs the family's worker on `queue`, recording every message in `ledger`, until
    /// `shutdown` is stopped.
    ///
    /// # Errors
    /// When it cannot connect, or the worker ends with an error.
    pub async fn work(
        self,
        url: &str,
        queue: &str,
        ledger: Ledger,
        shutdown: &Shutdown,
    ) -> anyhow::Result<()> {
        match self {
            Binding::AcemqRabbitmq => {
                let mq = AceMq::builder()
                    .url(url)
                    .client_name("polyq-chaos-worker")
                    .connect()
                    .await?;
                let consumer = mq
                    .consumer::<u64>(queue)
                    .prefetch(AMQP_PREFETCH)
                    .start(move |message: Message<u64>| {
                        ledger.record(*message.payload());
                        async {}
                    })
                    .await?;
                consumer.drain_on(shutdown, Duration::from_secs(5)).await;
                mq.close().await?;
            }
            _ => {
                self.connect_babel(url, queue)
                    .await?
                    .worker()
                    .handle(URN, move |job: Job| {
                        let recorded = job
                            .data_as::<Seq>()
                            .map(|data| ledger.record(data.seq))
                            .map_err(|error| error.to_string());
                        async move { recorded }
                    })
                    .run(shutdown)
                    .await?;
            }
        }
        Ok(())
    }

    /// Messages still held by the broker for `queue`: ready, reserved or delayed (Redis), or
    /// ready and unacknowledged (RabbitMQ).
    ///
    /// # Errors
    /// When the broker cannot be reached.
    pub async fn pending(self, url: &str, queue: &str) -> anyhow::Result<u64> {
        if self.is_redis() {
            // Both layouts share one connection, so the default layout's transport counts either.
            let redis = RedisTransport::connect(url, RedisOptions::new()).await?;
            let options = redis.options();
            // The deadline set mirrors the in-flight list and `:notify` holds wake-up tokens,
            // not messages: neither is counted.
            let keys = if self == Binding::BabelLaravel {
                let [_notify, reserved, delayed, ready] = options.laravel_layout_keys(queue);
                vec![ready, reserved, delayed]
            } else {
                let [ready, _deadlines, processing] = options.default_layout_keys(queue);
                vec![ready, processing]
            };
            let mut pending = 0;
            for key in &keys {
                pending += redis.key_len(key).await?;
            }
            Ok(pending)
        } else {
            let client = polyq_amqp::Client::connect(url).await?;
            let info = client.inspect_queue(queue).await?;
            client.close().await?;
            Ok(u64::from(info.message_count))
        }
    }

    /// Removes every queue or key of `queue` the scenario made.
    ///
    /// # Errors
    /// When the broker cannot be reached.
    pub async fn remove(self, url: &str, queue: &str) -> anyhow::Result<()> {
        if !(url.starts_with("redis://") || url.starts_with("amqp://")) {
            // A Sentinel or Cluster setup (a URL of several nodes) is removed whole by the
            // script that started it.
            return Ok(());
        }
        if self == Binding::BabelLaravel {
            LaravelTransport::connect(url, RedisOptions::new())
                .await?
                .delete_queue(queue)
                .await?;
        } else if self.is_redis() {
            RedisTransport::connect(url, RedisOptions::new())
                .await?
                .delete_queue(queue)
                .await?;
        } else {
            let client = polyq_amqp::Client::connect(url).await?;
            for name in [
                queue.to_owned(),
                format!("{queue}.dlq"),
                format!("{queue}.parked"),
            ] {
                match client.delete_queue(&name).await {
                    Ok(_) | Err(polyq_amqp::Error::NotFound { .. }) => {}
                    Err(error) => return Err(error).with_context(|| format!("delete {name}")),
                }
            }
            client.close().await?;
        }
        Ok(())
    }

    async fn connect_babel(self, url: &str, queue: &str) -> anyhow::Result<BabelQueue> {
        let redis = RedisOptions::new()
            .prefetch(REDIS_PREFETCH)
            .reservation_deadline(Some(REDIS_RESERVATION))
            .retry_after(Some(REDIS_RESERVATION));
        let layout = if self == Binding::BabelLaravel {
            RedisLayout::Laravel
        } else {
            RedisLayout::Default
        };
        Ok(BabelQueue::builder(url)
            .queue(queue)
            .options(
                ConnectOptions::default()
                    .prefetch(AMQP_PREFETCH)
                    .redis_layout(layout)
                    .redis(redis),
            )
            .connect()
            .await?)
    }
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Binding {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        Binding::ALL
            .into_iter()
            .find(|binding| binding.name() == name)
            .ok_or_else(|| {
                let known: Vec<_> = Binding::ALL.iter().map(|b| b.name()).collect();
                format!("unknown binding `{name}`: one of {}", known.join(", "))
            })
    }
}

/// The data of a BabelQueue message of the campaign.
#[derive(serde::Serialize, serde::Deserialize)]
struct Seq {
    seq: u64,
}

/// Publishes sequence numbers on one binding, each confirmed by the broker.
#[derive(Debug)]
pub enum Publisher {
    /// AceMQ: the sequence number is the JSON body, `seq-<n>` the message id.
    Acemq(AceMq, acemq::Publisher<u64>),
    /// BabelQueue: `{"seq": n}` as `data`.
    Babel(BabelQueue),
}

impl Publisher {
    /// Publishes `seq` and waits for the broker to confirm it.
    ///
    /// # Errors
    /// When it is not confirmed.
    pub async fn send(&self, seq: u64) -> anyhow::Result<()> {
        tokio::time::timeout(SEND_LIMIT, self.send_unbounded(seq))
            .await
            .map_err(|_| anyhow::anyhow!("no confirm within {SEND_LIMIT:?}"))?
    }

    async fn send_unbounded(&self, seq: u64) -> anyhow::Result<()> {
        match self {
            Publisher::Acemq(_, publisher) => {
                // One id per sequence number: a message sent again is the same message.
                let envelope = Envelope::of("chaos.seq").id(format!("seq-{seq}")).build()?;
                publisher.send_with(&seq, envelope).await?;
            }
            Publisher::Babel(queue) => {
                queue.publish(URN, &Seq { seq }).await?;
            }
        }
        Ok(())
    }

    /// Whether the broker is blocking this publisher's connection (a resource alarm).
    pub fn blocked(&self) -> bool {
        match self {
            Publisher::Acemq(mq, _) => mq.health().blocked().is_some(),
            Publisher::Babel(queue) => queue
                .health()
                .is_some_and(|health| health.blocked().is_some()),
        }
    }

    /// Closes the connection.
    ///
    /// # Errors
    /// When closing fails.
    pub async fn close(self) -> anyhow::Result<()> {
        if let Publisher::Acemq(mq, _) = self {
            mq.close().await?;
        }
        Ok(())
    }
}
