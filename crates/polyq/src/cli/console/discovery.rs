//! Which queues a broker has, and their depths: the one place the overview asks, so that
//! RabbitMQ's management API can answer here once it is there. Today it is what `polyq dlq
//! list` uses: Redis `SCAN`, and on RabbitMQ the queues named with `--queue` or `--topology`.

use acemq::topology::{dead_letter_queue, parked_queue};

use super::Broker;
use crate::cli::dlq::store::Depth;

/// A source queue with its dead-letter and parked queues; `None` where one does not exist.
#[derive(Debug, Clone)]
pub(crate) struct QueueSet {
    pub(crate) name: String,
    pub(crate) source: Option<Depth>,
    pub(crate) dlq: Option<Depth>,
    pub(crate) parked: Option<Depth>,
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
}

/// The source queue a queue name belongs to: itself, or the queue it is the dead-letter or
/// parked queue of.
fn source_of(queue: &str) -> &str {
    [dead_letter_queue(""), parked_queue("")]
        .iter()
        .find_map(|suffix| queue.strip_suffix(suffix.as_str()))
        .filter(|source| !source.is_empty())
        .unwrap_or(queue)
}

/// The queues of `broker` with their depths, by name; `named` adds queues the broker cannot
/// list (RabbitMQ over AMQP).
pub(crate) async fn queues(broker: &Broker, named: &[String]) -> anyhow::Result<Vec<QueueSet>> {
    let store = &broker.store;
    let mut sources: Vec<String> = store
        .dead_letter_queues()
        .await?
        .iter()
        .chain(if store.is_redis() { &[][..] } else { named })
        .map(|queue| source_of(queue).to_owned())
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
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::source_of;

    #[test]
    fn set_aside_queues_belong_to_their_source() {
        assert_eq!(source_of("orders.dlq"), "orders");
        assert_eq!(source_of("orders.parked"), "orders");
        assert_eq!(source_of("orders"), "orders");
        assert_eq!(source_of(".dlq"), ".dlq");
    }
}
