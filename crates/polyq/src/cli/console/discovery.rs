//! Which queues a broker has, and their depths: the one place the overview asks. On RabbitMQ
//! that is the management API's survey (`estate::survey`, as `polyq dlq list` finds its
//! queues), with unacked messages and rates; when the API does not answer, or queues are named
//! with `--queue` or `--topology`, the named queues are read over AMQP. On Redis, `SCAN`.

use acemq::topology::{dead_letter_queue, parked_queue, set_aside_source};
use polyq_amqp::management::ManagementError;

use super::Broker;
use crate::cli::dlq::store::Depth;
use crate::cli::estate::{self, QueueOverview, QueueRates};

/// A source queue with its dead-letter and parked queues; `None` where one does not exist.
#[derive(Debug, Clone)]
pub(crate) struct QueueSet {
    pub(crate) name: String,
    pub(crate) source: Option<Depth>,
    pub(crate) dlq: Option<Depth>,
    pub(crate) parked: Option<Depth>,
    /// The source queue's messages per second, where the management API gives them.
    pub(crate) rates: Option<QueueRates>,
}

impl QueueSet {
    /// The dead-letter queue's name.
    pub(crate) fn dlq_name(&self) -> String {
        dead_letter_queue(&self.name)
    }

    /// The parked queue's name.
    pub(crate) fn parked_name(&self) -> String {
        parked_queue(&self.name)
    }

    /// The set of a surveyed queue, `None` for a queue of neither family's topology (no
    /// set-aside queue, nothing AceMQ's): the overview shows the queues that can fail.
    fn surveyed(queue: QueueOverview) -> Option<Self> {
        let set_aside = |depth: Option<u64>| Depth {
            ready: depth.unwrap_or_default(),
            unacked: None,
            consumers: None,
        };
        if queue.dead_letter.is_none() && queue.parked.is_none() && queue.family.is_none() {
            return None;
        }
        Some(Self {
            source: queue.exists.then(|| Depth {
                ready: queue.ready.unwrap_or_default(),
                unacked: queue.unacked,
                consumers: queue.consumers,
            }),
            dlq: queue.dead_letter.map(|dlq| set_aside(dlq.depth)),
            parked: queue.parked.map(|parked| set_aside(parked.depth)),
            rates: queue.rates,
            name: queue.name,
        })
    }
}

/// The queues of `broker` with their depths, by name; `named` are the RabbitMQ queues given
/// with `--queue` or `--topology`, read instead of asking the management API.
pub(crate) async fn queues(broker: &Broker, named: &[String]) -> anyhow::Result<Vec<QueueSet>> {
    let url = &broker.args.url;
    if estate::is_rabbitmq_url(url) && named.is_empty() {
        match estate::survey(url, &broker.management, &broker.args.tls_options()?).await {
            Ok(estate) => {
                return Ok(estate
                    .queues
                    .into_iter()
                    .filter_map(QueueSet::surveyed)
                    .collect());
            }
            // An API that does not answer leaves the queues named (none); one that refuses
            // is shown as the broker's error.
            Err(error)
                if error
                    .downcast_ref::<ManagementError>()
                    .is_some_and(ManagementError::is_connection) => {}
            Err(error) => return Err(error),
        }
    }
    named_queues(broker, named).await
}

/// The queues Redis lists, or those `named` on RabbitMQ, with the depths the store reads.
async fn named_queues(broker: &Broker, named: &[String]) -> anyhow::Result<Vec<QueueSet>> {
    let store = &broker.store;
    let mut sources: Vec<String> = store
        .dead_letter_queues()
        .await?
        .iter()
        .chain(if store.is_redis() { &[][..] } else { named })
        .map(|queue| {
            set_aside_source(queue)
                .map_or(queue.as_str(), |(source, _)| source)
                .to_owned()
        })
        .collect();
    sources.sort();
    sources.dedup();
    let redis = store.is_redis();
    let mut names = Vec::with_capacity(sources.len() * 3);
    for source in &sources {
        names.push(source.clone());
        names.push(dead_letter_queue(source));
        // BabelQueue parks nothing: Redis has no parked queues.
        if !redis {
            names.push(parked_queue(source));
        }
    }
    let mut depths = store.depths(&names).await?.into_iter();
    Ok(sources
        .into_iter()
        .map(|name| QueueSet {
            name,
            source: depths.next().flatten(),
            dlq: depths.next().flatten(),
            parked: if redis { None } else { depths.next().flatten() },
            rates: None,
        })
        .collect())
}
