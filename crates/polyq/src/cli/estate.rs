//! What queues of both families a broker has, with their depths: the one survey `polyq dlq list`
//! and the console's overview read.
//!
//! RabbitMQ is asked through its management API (`polyq_amqp::management`; AMQP 0-9-1 cannot
//! list queues), Redis by `SCAN` over the keys of both layouts. Which name is whose is the
//! libraries' naming: `acemq::topology` (`Q.dlq`, `Q.parked`, the rungs `Q.retry.<delay>`) and
//! `babelqueue::transport::redis::RedisOptions` (the dead-letter suffix, the Laravel prefix, the
//! layouts' keys).

use std::collections::BTreeMap;

use acemq::topology::{self as ace, SetAside};
use anyhow::Context as _;
use babelqueue::transport::redis::{RedisOptions, RedisTransport};
use polyq_amqp::TlsOptions;
use polyq_amqp::management::{Management, ManagementOptions, QueueStats};
use serde::Serialize;

use super::dlq::Family;

/// Where RabbitMQ's management API answers: the flag of every command that surveys a broker.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ManagementArgs {
    /// RabbitMQ's management API (default: the AMQP URL's host on port 15672, its
    /// credentials and vhost; credentials in this URL replace the AMQP URL's).
    #[arg(id = "management_url", long = "management-url", value_name = "URL")]
    pub(crate) url: Option<String>,
}

/// Whether `url` is RabbitMQ's (`amqp://`, `amqps://`): the brokers a management API surveys.
pub(crate) fn is_rabbitmq_url(url: &str) -> bool {
    url.starts_with("amqp://") || url.starts_with("amqps://")
}

/// Every queue of both families on one broker (one vhost on RabbitMQ), by name.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Estate {
    /// The broker's URL, credentials redacted.
    pub(crate) broker: String,
    /// One entry per source queue, with its dead-letter and parked queues; a set-aside queue
    /// whose source does not exist has an entry of its own (`exists: false`).
    pub(crate) queues: Vec<QueueOverview>,
}

/// A source queue and its set-aside queues.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct QueueOverview {
    pub(crate) name: String,
    /// `acemq` where the broker shows AceMQ's topology (a parked queue, a rung, or
    /// `acemq.dlx` as the dead-letter exchange), `babelqueue` on Redis; `None` on RabbitMQ
    /// otherwise (both families name the dead-letter queue `Q.dlq`).
    pub(crate) family: Option<Family>,
    /// Whether the source queue itself exists.
    pub(crate) exists: bool,
    /// RabbitMQ: `classic`, `quorum` or `stream`.
    pub(crate) queue_type: Option<String>,
    /// Redis: `default`, `laravel`, or `mixed` when keys of both layouts exist for the name.
    pub(crate) layout: Option<&'static str>,
    /// Ready messages. On RabbitMQ the broker's statistics, which lag by up to 5 s and are
    /// `None` for a queue declared moments ago.
    pub(crate) ready: Option<u64>,
    /// Delivered and not yet acknowledged (Redis: in the processing list or reserved set).
    pub(crate) unacked: Option<u64>,
    /// Consumers (RabbitMQ only).
    pub(crate) consumers: Option<u64>,
    /// Messages per second (RabbitMQ only, once the queue has had traffic).
    pub(crate) rates: Option<QueueRates>,
    /// The queue's `x-dead-letter-exchange` (RabbitMQ).
    pub(crate) dead_letter_exchange: Option<String>,
    /// `Q.dlq`, when it exists.
    pub(crate) dead_letter: Option<SetAsideQueue>,
    /// `Q.parked`, when it exists (AceMQ only).
    pub(crate) parked: Option<SetAsideQueue>,
    /// AceMQ's rungs `Q.retry.<delay>` that exist.
    pub(crate) retry_queues: Vec<String>,
}

/// A dead-letter or parked queue and how many messages it holds.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SetAsideQueue {
    pub(crate) name: String,
    /// Messages in it (ready and unacknowledged on RabbitMQ, as lagging as the statistics).
    pub(crate) depth: Option<u64>,
}

/// Messages per second.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct QueueRates {
    pub(crate) publish: Option<f64>,
    pub(crate) deliver_get: Option<f64>,
    pub(crate) ack: Option<f64>,
}

impl Estate {
    /// The names of every dead-letter and parked queue, sorted.
    pub(crate) fn set_aside_queues(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .queues
            .iter()
            .flat_map(|queue| [&queue.dead_letter, &queue.parked])
            .flatten()
            .map(|set_aside| set_aside.name.clone())
            .collect();
        names.sort();
        names
    }
}

/// Surveys the broker of `url`: on `amqp://` / `amqps://` through the management API
/// (`management`'s, or the one the AMQP URL implies), on `redis://` / `rediss://` by `SCAN`.
///
/// # Errors
/// The embedded broker (`memory://`) cannot be surveyed from another process. A failure of the
/// management API keeps its [`ManagementError`](polyq_amqp::management::ManagementError) as
/// the root cause (`error.downcast_ref::<ManagementError>()`), so a caller can tell an API
/// that does not answer (`is_connection()`) from one that refuses.
pub(crate) async fn survey(
    url: &str,
    management: &ManagementArgs,
    tls: &TlsOptions,
) -> anyhow::Result<Estate> {
    let broker = polyq_amqp::redact_url(url);
    let queues = if url.starts_with("redis://") || url.starts_with("rediss://") {
        redis_queues(url, tls)
            .await
            .with_context(|| format!("--url {broker}"))?
    } else if is_rabbitmq_url(url) {
        rabbitmq_queues(management_api(url, management, tls)?.queues().await?)
    } else {
        anyhow::bail!(
            "--url {broker}: only RabbitMQ (amqp://, amqps://) and Redis (redis://, rediss://) \
             can be surveyed"
        );
    };
    Ok(Estate { broker, queues })
}

/// The management API of RabbitMQ broker `url`, where `management` says it answers.
pub(crate) fn management_api(
    url: &str,
    management: &ManagementArgs,
    tls: &TlsOptions,
) -> anyhow::Result<Management> {
    let mut options = ManagementOptions::new().tls(tls.clone());
    if let Some(management_url) = &management.url {
        options = options.url(management_url);
    }
    Ok(Management::new(url, options)?)
}

/// The queues of a vhost grouped by source: `Q.dlq`, `Q.parked` and the rungs go with `Q`.
fn rabbitmq_queues(listed: Vec<QueueStats>) -> Vec<QueueOverview> {
    let mut overviews: BTreeMap<String, QueueOverview> = BTreeMap::new();
    for queue in &listed {
        // Both families name a dead-letter queue `Q.dlq` (checked by a test below).
        if let Some((source, kind)) = ace::set_aside_source(&queue.name) {
            let overview = overview_of(&mut overviews, source);
            let held = SetAsideQueue {
                name: queue.name.clone(),
                depth: queue
                    .messages_ready
                    .zip(queue.messages_unacknowledged)
                    .map(|(ready, unacked)| ready + unacked),
            };
            match kind {
                SetAside::DeadLetter => overview.dead_letter = Some(held),
                SetAside::Parked => {
                    overview.parked = Some(held);
                    overview.family = Some(Family::Acemq);
                }
            }
        } else if let Some(source) = ace::retry_source(&queue.name) {
            let overview = overview_of(&mut overviews, source);
            overview.retry_queues.push(queue.name.clone());
            overview.family = Some(Family::Acemq);
        } else {
            let overview = overview_of(&mut overviews, &queue.name);
            overview.exists = true;
            overview.queue_type = Some(queue.queue_type().to_owned());
            overview.ready = queue.messages_ready;
            overview.unacked = queue.messages_unacknowledged;
            overview.consumers = queue.consumers;
            overview.rates = Some(QueueRates {
                publish: queue.rates.publish,
                deliver_get: queue.rates.deliver_get,
                ack: queue.rates.ack,
            });
            overview.dead_letter_exchange = queue.dead_letter_exchange().map(str::to_owned);
            if overview.dead_letter_exchange.as_deref() == Some(ace::DEAD_LETTER_EXCHANGE) {
                overview.family = Some(Family::Acemq);
            }
        }
    }
    overviews.into_values().collect()
}

/// The entry of source queue `name`, made on first sight.
fn overview_of<'m>(
    overviews: &'m mut BTreeMap<String, QueueOverview>,
    name: &str,
) -> &'m mut QueueOverview {
    overviews
        .entry(name.to_owned())
        .or_insert_with(|| QueueOverview {
            name: name.to_owned(),
            ..QueueOverview::default()
        })
}

/// The queues of both layouts: the names the layouts' keys belong to, each counted in both.
async fn redis_queues(url: &str, tls: &TlsOptions) -> anyhow::Result<Vec<QueueOverview>> {
    let redis = RedisTransport::connect(url, RedisOptions::new().tls(tls.clone())).await?;
    let options = redis.options().clone();
    let mut names: Vec<String> = redis
        .scan_queue_keys()
        .await?
        .iter()
        .map(|key| options.queue_of_key(key).to_owned())
        .collect();
    names.sort();
    names.dedup();
    let mut overviews: BTreeMap<String, QueueOverview> = BTreeMap::new();
    for name in &names {
        if let Some(source) = options.dead_letter_source(name) {
            let depth =
                redis.key_len(name).await? + redis.key_len(&options.laravel_key(name)).await?;
            let overview = overview_of(&mut overviews, source);
            overview.dead_letter = Some(SetAsideQueue {
                name: name.clone(),
                depth: Some(depth),
            });
            continue;
        }
        let default_keys = options.default_layout_keys(name);
        let laravel_keys = options.laravel_layout_keys(name);
        let (default, laravel) = (
            redis.any_exists(&default_keys).await?,
            redis.any_exists(&laravel_keys).await?,
        );
        let [ready_list, _deadlines, processing] = &default_keys;
        let [_notify, reserved, _delayed, laravel_ready] = &laravel_keys;
        let ready = redis.key_len(ready_list).await? + redis.key_len(laravel_ready).await?;
        let unacked = redis.key_len(processing).await? + redis.key_len(reserved).await?;
        let overview = overview_of(&mut overviews, name);
        overview.exists = true;
        overview.layout = match (default, laravel) {
            (true, true) => Some("mixed"),
            (false, true) => Some("laravel"),
            _ => Some("default"),
        };
        overview.ready = Some(ready);
        overview.unacked = Some(unacked);
    }
    let mut queues: Vec<QueueOverview> = overviews.into_values().collect();
    for queue in &mut queues {
        queue.family = Some(Family::Babelqueue);
    }
    Ok(queues)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_families_name_the_dead_letter_queue_alike() {
        for queue in ["orders", "orders.new", "a:b"] {
            let acemq = ace::dead_letter_queue(queue);
            assert_eq!(
                acemq,
                babelqueue::transport::default_dead_letter_queue(queue)
            );
            assert_eq!(
                babelqueue::transport::default_dead_letter_source(&acemq),
                Some(queue)
            );
        }
    }

    fn listed(name: &str, arguments: serde_json::Value) -> QueueStats {
        serde_json::from_value(serde_json::json!({
            "name": name, "messages_ready": 2, "messages_unacknowledged": 1, "consumers": 0,
            "arguments": arguments,
        }))
        .expect("a queue")
    }

    #[test]
    fn set_aside_queues_and_rungs_go_with_their_source() {
        let queues = rabbitmq_queues(vec![
            listed(
                "orders",
                serde_json::json!({"x-dead-letter-exchange": "acemq.dlx"}),
            ),
            listed("orders.dlq", serde_json::json!({})),
            listed("orders.parked", serde_json::json!({})),
            listed("orders.retry.5m", serde_json::json!({})),
            listed("jobs.dlq", serde_json::json!({})),
            listed("plain", serde_json::json!({})),
        ]);
        let names: Vec<&str> = queues.iter().map(|queue| queue.name.as_str()).collect();
        assert_eq!(names, ["jobs", "orders", "plain"]);
        let orders = &queues[1];
        assert!(orders.exists);
        assert_eq!(orders.family, Some(Family::Acemq));
        assert_eq!(orders.dead_letter.as_ref().and_then(|q| q.depth), Some(3));
        assert_eq!(
            orders.parked.as_ref().map(|q| q.name.as_str()),
            Some("orders.parked")
        );
        assert_eq!(orders.retry_queues, ["orders.retry.5m"]);
        let jobs = &queues[0];
        assert!(!jobs.exists && jobs.family.is_none());
        assert_eq!(
            jobs.dead_letter.as_ref().map(|q| q.name.as_str()),
            Some("jobs.dlq")
        );
        let estate = Estate {
            broker: String::new(),
            queues,
        };
        assert_eq!(
            estate.set_aside_queues(),
            ["jobs.dlq", "orders.dlq", "orders.parked"]
        );
    }

    /// Surveys until `ready` holds for the entry `name` (RabbitMQ's statistics lag by up to
    /// 5 s), failing after a deadline with what was seen.
    async fn surveyed_until(
        url: &str,
        name: &str,
        ready: impl Fn(&QueueOverview) -> bool,
    ) -> QueueOverview {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let estate = survey(url, &ManagementArgs::default(), &TlsOptions::default())
                .await
                .expect("a survey");
            assert!(!estate.broker.contains("guest:guest"), "{}", estate.broker);
            let seen = estate.queues.into_iter().find(|queue| queue.name == name);
            match seen {
                Some(queue) if ready(&queue) => return queue,
                seen if std::time::Instant::now() > deadline => {
                    panic!("{name} never as expected: {seen:?}")
                }
                _ => tokio::time::sleep(std::time::Duration::from_millis(250)).await,
            }
        }
    }

    #[tokio::test]
    async fn rabbitmq_queues_are_surveyed_with_their_set_aside_depths() {
        use polyq_amqp::{Client, OutgoingMessage, Properties, QueueSpec};
        let url = polyq_testkit::amqp_url();
        let client = Client::connect(&url).await.expect("RabbitMQ");
        let queue = polyq_testkit::unique_name("polyq.survey");
        let (dlq, parked) = (ace::dead_letter_queue(&queue), ace::parked_queue(&queue));
        for (name, bodies) in [(&queue, 3), (&dlq, 2), (&parked, 1)] {
            client
                .declare_queue(&QueueSpec::new(name.as_str()))
                .await
                .expect("declare");
            for _ in 0..bodies {
                let message = OutgoingMessage::new("", name.as_str(), Properties::default(), "x");
                client
                    .publish(message)
                    .await
                    .expect("publish")
                    .await
                    .expect("confirm");
            }
        }
        let held = client.get(&queue).await.expect("get").expect("a message");
        // The management API fills a new queue's figures (the consumer count among them) in
        // over its next stats intervals, so the survey is read until all of them are in.
        let seen = surveyed_until(&url, &queue, |seen| {
            seen.ready == Some(2)
                && seen.unacked == Some(1)
                && seen.consumers.is_some()
                && seen.dead_letter.as_ref().and_then(|q| q.depth) == Some(2)
                && seen.parked.as_ref().and_then(|q| q.depth) == Some(1)
        })
        .await;
        assert!(seen.exists);
        assert_eq!(seen.consumers, Some(0));
        assert_eq!(seen.family, Some(Family::Acemq));
        assert_eq!(seen.queue_type.as_deref(), Some("classic"));
        drop(held);
        for name in [&queue, &dlq, &parked] {
            client.delete_queue(name).await.expect("clean up");
        }
        client.close().await.ok();
    }

    #[tokio::test]
    async fn redis_queues_of_both_layouts_are_surveyed() {
        let url = polyq_testkit::redis_url();
        let redis = redis::Client::open(url.as_str()).expect("a Redis URL");
        let mut raw = redis
            .get_multiplexed_async_connection()
            .await
            .expect("Redis");
        let options = RedisOptions::new();
        let default = polyq_testkit::unique_name("polyq-survey-default");
        let laravel = polyq_testkit::unique_name("polyq-survey-laravel");
        let laravel_keys = options.laravel_layout_keys(&laravel);
        let writes: Vec<(String, usize)> = vec![
            (default.clone(), 3),
            (options.processing_key(&default), 1),
            (options.dead_letter_queue(&default), 2),
            (laravel_keys[3].clone(), 4),
            (options.laravel_key(&options.dead_letter_queue(&laravel)), 5),
        ];
        for (key, count) in &writes {
            for n in 0..*count {
                redis::cmd("RPUSH")
                    .arg(key)
                    .arg(n)
                    .query_async::<()>(&mut raw)
                    .await
                    .unwrap();
            }
        }
        redis::cmd("ZADD")
            .arg(&laravel_keys[1])
            .arg(1)
            .arg("reserved")
            .query_async::<()>(&mut raw)
            .await
            .unwrap();

        let estate = survey(&url, &ManagementArgs::default(), &TlsOptions::default())
            .await
            .expect("a survey");
        let find = |name: &str| {
            estate
                .queues
                .iter()
                .find(|queue| queue.name == name)
                .unwrap_or_else(|| panic!("{name} not surveyed"))
                .clone()
        };
        let seen = find(&default);
        assert_eq!((seen.ready, seen.unacked), (Some(3), Some(1)));
        assert_eq!(seen.layout, Some("default"));
        assert_eq!(seen.family, Some(Family::Babelqueue));
        assert_eq!(seen.dead_letter.as_ref().and_then(|q| q.depth), Some(2));
        let seen = find(&laravel);
        assert_eq!((seen.ready, seen.unacked), (Some(4), Some(1)));
        assert_eq!(seen.layout, Some("laravel"));
        assert_eq!(seen.dead_letter.as_ref().and_then(|q| q.depth), Some(5));
        assert!(
            estate
                .set_aside_queues()
                .contains(&options.dead_letter_queue(&laravel))
        );

        let mut keys: Vec<String> = writes.into_iter().map(|(key, _)| key).collect();
        keys.push(laravel_keys[1].clone());
        redis::cmd("DEL")
            .arg(&keys)
            .query_async::<()>(&mut raw)
            .await
            .unwrap();
    }
}
