//! Where a dead-letter queue lives: RabbitMQ (or the embedded broker) or Redis in either layout,
//! behind the few operations the `dlq` verbs need. Each is the library's own: a non-consuming
//! read, a removal of a selection, a purge, a byte-exact push.

use anyhow::Context as _;
use babelqueue::transport::Transport as _;
use babelqueue::transport::redis::{LaravelTransport, RedisOptions, RedisTransport};
use polyq_amqp::browse::{browse, sweep};
use polyq_amqp::{Client, ClientOptions, MessageJson, OutgoingMessage, Properties, PublishOutcome};

use crate::cli::babel::Layout;
use crate::cli::connect::TlsArgs;

/// The broker of a `dlq` command.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BrokerArgs {
    /// The broker: amqp://, amqps://, memory://, redis://, rediss://, redis+sentinel://
    /// (host:port,host:port/service) or redis+cluster:// (host:port,host:port).
    #[arg(long)]
    pub(crate) url: String,
    /// The Redis key layout.
    #[arg(long, value_enum, default_value_t = Layout::Default)]
    layout: Layout,
    #[command(flatten)]
    tls: TlsArgs,
}

/// One message as it sits in its queue.
pub(crate) struct Stored {
    /// In the message JSON shape; on Redis the body is the stored value (frame and all) and the
    /// routing key the queue.
    pub(crate) message: MessageJson,
    /// Whether it had been delivered before (AMQP).
    pub(crate) redelivered: bool,
}

/// An open broker.
pub(crate) enum Store {
    Amqp { url: String, options: ClientOptions },
    Redis(RedisList),
}

/// A Redis server in one of the two key layouts.
pub(crate) enum RedisList {
    Default(RedisTransport),
    Laravel(LaravelTransport),
}

impl RedisList {
    async fn dead_letter_queues(&self) -> babelqueue::Result<Vec<String>> {
        match self {
            Self::Default(redis) => redis.dead_letter_queues().await,
            Self::Laravel(laravel) => laravel.dead_letter_queues().await,
        }
    }

    async fn browse(
        &self,
        queue: &str,
        limit: Option<u64>,
    ) -> babelqueue::Result<Vec<bytes::Bytes>> {
        match self {
            Self::Default(redis) => redis.browse(queue, limit).await,
            Self::Laravel(laravel) => laravel.browse(queue, limit).await,
        }
    }

    async fn remove_all(&self, queue: &str, stored: &[bytes::Bytes]) -> babelqueue::Result<u64> {
        match self {
            Self::Default(redis) => redis.remove_all(queue, stored).await,
            Self::Laravel(laravel) => laravel.remove_all(queue, stored).await,
        }
    }

    /// Ready jobs, and jobs taken but not settled (the default layout's processing list;
    /// Laravel's reserved set is not counted).
    async fn depth(&self, queue: &str) -> babelqueue::Result<(u64, Option<u64>)> {
        match self {
            Self::Default(redis) => Ok((
                redis.depth(queue).await?,
                Some(redis.depth(&redis.processing_key(queue)).await?),
            )),
            Self::Laravel(laravel) => Ok((laravel.depth(queue).await?, None)),
        }
    }

    async fn purge(&self, queue: &str) -> babelqueue::Result<u64> {
        match self {
            Self::Default(redis) => redis.purge(queue).await,
            Self::Laravel(laravel) => laravel.purge(queue).await,
        }
    }

    /// Appends a stored value as it was read: the default layout's value may be a header
    /// frame, kept whole; Laravel's is the job itself.
    async fn push(&self, queue: &str, stored: &bytes::Bytes) -> babelqueue::Result<()> {
        match self {
            Self::Default(redis) => redis.push_stored(queue, stored).await,
            Self::Laravel(laravel) => laravel.publish(queue, stored.clone(), &[]).await,
        }
    }
}

/// What a broker says of one queue without reading its messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Depth {
    pub(crate) ready: u64,
    /// Delivered and not yet settled, where the broker says so cheaply.
    pub(crate) unacked: Option<u64>,
    pub(crate) consumers: Option<u64>,
}

impl BrokerArgs {
    /// The broker at `url`, Redis keys in `layout`.
    pub(crate) fn new(url: String, layout: Layout, tls: TlsArgs) -> Self {
        Self { url, layout, tls }
    }

    /// An AceMQ service named `polyq` on the broker.
    pub(crate) async fn acemq(&self) -> anyhow::Result<acemq::AceMq> {
        acemq::AceMq::builder()
            .url(self.url.as_str())
            .client_name("polyq")
            .tls(self.tls.options()?)
            .connect()
            .await
            .with_context(|| format!("--url {}", polyq_amqp::redact_url(&self.url)))
    }

    /// The Redis key layout.
    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// The TLS settings the flags give.
    pub(crate) fn tls_options(&self) -> anyhow::Result<polyq_amqp::TlsOptions> {
        self.tls.options()
    }
}

impl Store {
    /// Connects to the broker the flags name.
    pub(crate) async fn open(args: &BrokerArgs) -> anyhow::Result<Self> {
        let named = || format!("--url {}", polyq_amqp::redact_url(&args.url));
        let tls = args.tls.options()?;
        if babelqueue::transport::redis::is_redis_url(&args.url) {
            let options = RedisOptions::new().tls(tls);
            let list = match args.layout {
                Layout::Default => RedisList::Default(
                    RedisTransport::connect(&args.url, options)
                        .await
                        .with_context(named)?,
                ),
                Layout::Laravel => RedisList::Laravel(
                    LaravelTransport::connect(&args.url, options)
                        .await
                        .with_context(named)?,
                ),
            };
            Ok(Self::Redis(list))
        } else {
            let options = ClientOptions::default().tls(tls);
            // Fail here on a wrong URL rather than at the first read.
            Client::connect_with(&args.url, options.clone())
                .await
                .with_context(named)?
                .close()
                .await
                .ok();
            Ok(Self::Amqp {
                url: args.url.clone(),
                options,
            })
        }
    }

    /// Whether the queues hold BabelQueue jobs only (Redis).
    pub(crate) fn is_redis(&self) -> bool {
        matches!(self, Self::Redis(_))
    }

    /// The dead-letter queues the broker itself can list (Redis, by `SCAN`); RabbitMQ's are the
    /// ones named on the command line.
    pub(crate) async fn dead_letter_queues(&self) -> anyhow::Result<Vec<String>> {
        Ok(match self {
            Self::Amqp { .. } => Vec::new(),
            Self::Redis(list) => list.dead_letter_queues().await?,
        })
    }

    /// The depth of each of `queues` that exists, in their order; a missing one is `None`.
    pub(crate) async fn depths(&self, queues: &[String]) -> anyhow::Result<Vec<Option<Depth>>> {
        match self {
            Self::Amqp { url, options } => {
                let client = Client::connect_with(url, options.clone()).await?;
                let mut depths = Vec::with_capacity(queues.len());
                for queue in queues {
                    depths.push(match client.inspect_queue(queue).await {
                        Ok(info) => Some(Depth {
                            ready: u64::from(info.message_count),
                            unacked: None,
                            consumers: Some(u64::from(info.consumer_count)),
                        }),
                        Err(polyq_amqp::Error::NotFound { .. }) => None,
                        Err(error) => {
                            client.close().await.ok();
                            return Err(error).with_context(|| format!("queue {queue}"));
                        }
                    });
                }
                client.close().await.ok();
                Ok(depths)
            }
            Self::Redis(list) => {
                let mut depths = Vec::with_capacity(queues.len());
                for queue in queues {
                    let (ready, unacked) = list
                        .depth(queue)
                        .await
                        .with_context(|| format!("queue {queue}"))?;
                    // Redis has no empty lists: an absent key is an empty queue.
                    depths.push(Some(Depth {
                        ready,
                        unacked,
                        consumers: None,
                    }));
                }
                Ok(depths)
            }
        }
    }

    /// The first `limit` messages of `queue` (all with `None`), in order, none consumed. Redis
    /// reads only those (`LRANGE`); RabbitMQ takes and holds only those, but a message further
    /// down cannot be reached without taking every one before it.
    pub(crate) async fn read(
        &self,
        queue: &str,
        limit: Option<u64>,
    ) -> anyhow::Result<Vec<Stored>> {
        let context = || format!("--queue {queue}: cannot read it");
        Ok(match self {
            Self::Amqp { url, options } => browse(url, options.clone(), queue, limit)
                .await
                .with_context(context)?
                .into_iter()
                .map(|swept| Stored {
                    message: swept.message,
                    redelivered: swept.redelivered,
                })
                .collect(),
            Self::Redis(list) => list
                .browse(queue, limit)
                .await
                .with_context(context)?
                .into_iter()
                .map(|body| Stored {
                    message: MessageJson::new("", queue, Properties::default(), body),
                    redelivered: false,
                })
                .collect(),
        })
    }

    /// Removes the messages of `queue` that `select` picks; answers how many went.
    pub(crate) async fn remove(
        &self,
        queue: &str,
        mut select: impl FnMut(&MessageJson) -> bool,
    ) -> anyhow::Result<u64> {
        let context = || format!("--queue {queue}: cannot remove from it");
        match self {
            Self::Amqp { url, options } => {
                let swept = sweep(url, options.clone(), queue, None, select)
                    .await
                    .with_context(context)?;
                Ok(swept.iter().filter(|swept| swept.taken).count() as u64)
            }
            Self::Redis(list) => {
                // One pass over the list for the whole selection, each value removed once.
                let selected: Vec<bytes::Bytes> = self
                    .read(queue, None)
                    .await?
                    .into_iter()
                    .filter(|stored| select(&stored.message))
                    .map(|stored| stored.message.body)
                    .collect();
                list.remove_all(queue, &selected)
                    .await
                    .with_context(context)
            }
        }
    }

    /// Removes every message of `queue`; answers how many there were.
    pub(crate) async fn purge(&self, queue: &str) -> anyhow::Result<u64> {
        let context = || format!("--queue {queue}: cannot purge it");
        Ok(match self {
            Self::Amqp { url, options } => {
                let client = Client::connect_with(url, options.clone()).await?;
                let purged = client.purge_queue(queue).await.with_context(context);
                client.close().await.ok();
                u64::from(purged?)
            }
            Self::Redis(list) => list.purge(queue).await.with_context(context)?,
        })
    }

    /// Puts `messages` on the tail of `queue` byte for byte, each confirmed before the next.
    pub(crate) async fn push(
        &self,
        queue: &str,
        messages: &[MessageJson],
        mut progress: impl FnMut(),
    ) -> anyhow::Result<()> {
        let context = || format!("--queue {queue}: cannot publish to it");
        match self {
            Self::Amqp { url, options } => {
                let client = Client::connect_with(url, options.clone()).await?;
                let outcome = async {
                    for message in messages {
                        // Mandatory: a missing queue comes back as a return, not a silent drop.
                        let outgoing = OutgoingMessage::new(
                            "",
                            queue,
                            message.properties.clone(),
                            message.body.clone(),
                        );
                        // The outcome is named, never printed: a returned message holds the
                        // body and headers.
                        match client.publish(outgoing).await?.await? {
                            PublishOutcome::Acked => progress(),
                            PublishOutcome::Returned(_) => {
                                anyhow::bail!("the queue does not exist; declare it first")
                            }
                            _ => anyhow::bail!("the broker refused a message (nacked)"),
                        }
                    }
                    Ok(())
                }
                .await;
                client.close().await.ok();
                outcome.with_context(context)
            }
            Self::Redis(list) => {
                for message in messages {
                    list.push(queue, &message.body)
                        .await
                        .with_context(context)?;
                    progress();
                }
                Ok(())
            }
        }
    }
}
