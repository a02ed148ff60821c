//! The same work through polyq-amqp's client.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use polyq_amqp::{
    Client, ClientOptions, ConsumeOptions, FieldValue, OutgoingMessage, Properties, PublishOutcome,
    QueueSpec,
};

use super::phases::Settings;

/// A polyq-amqp client.
pub(super) struct Polyq {
    client: Client,
}

impl Polyq {
    pub(super) async fn connect(url: &str) -> anyhow::Result<Self> {
        let client = Client::connect_with(
            url,
            ClientOptions::default().connection_name("polyq-bench-polyq"),
        )
        .await?;
        Ok(Self { client })
    }

    pub(super) fn client(&self) -> &Client {
        &self.client
    }

    /// A fresh transient queue: non-durable, with a unique name, and expiring after five unused
    /// minutes should this run die before deleting it.
    pub(super) async fn declare_queue(&self) -> anyhow::Result<String> {
        let mut spec = QueueSpec::new(format!("polyq.bench.{}", uuid_like()))
            .argument("x-expires", FieldValue::I32(300_000));
        spec.durable = false;
        Ok(self.client.declare_queue(&spec).await?.name)
    }

    pub(super) async fn delete_queue(&self, queue: &str) -> anyhow::Result<()> {
        self.client.delete_queue(queue).await?;
        Ok(())
    }

    /// Publishes `count` mandatory transient messages with `window` confirms outstanding,
    /// until the last confirm.
    pub(super) async fn publish(
        &self,
        queue: &str,
        count: u32,
        settings: &Settings,
    ) -> anyhow::Result<Duration> {
        let started = Instant::now();
        publish(&self.client, queue, count, settings).await?;
        Ok(started.elapsed())
    }

    /// Consumes and acks `count` messages with the prefetch applied; the time runs from the
    /// consume request to the last ack, as on the raw side.
    pub(super) async fn consume(
        &self,
        queue: &str,
        count: u32,
        settings: &Settings,
    ) -> anyhow::Result<Duration> {
        consume(&self.client, queue, count, settings).await
    }

    pub(super) async fn close(&self) -> anyhow::Result<()> {
        self.client.close().await?;
        Ok(())
    }
}

/// Publishes with a window of outstanding confirms; every confirm must be `Acked`.
pub(super) async fn publish(
    client: &Client,
    queue: &str,
    count: u32,
    settings: &Settings,
) -> anyhow::Result<()> {
    let mut in_flight = FuturesUnordered::new();
    for _ in 0..count {
        if in_flight.len() >= settings.window
            && let Some(outcome) = in_flight.next().await
        {
            check(outcome)?;
        }
        let message = OutgoingMessage::new("", queue, Properties::default(), settings.body.clone());
        in_flight.push(client.publish(message).await?);
    }
    while let Some(outcome) = in_flight.next().await {
        check(outcome)?;
    }
    Ok(())
}

/// Consumes and acks `count` messages, then cancels the consumer; what it had prefetched goes
/// back to the queue. Returns the time from the consume request to the last ack.
pub(super) async fn consume(
    client: &Client,
    queue: &str,
    count: u32,
    settings: &Settings,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut consumer = client
        .consume(
            queue,
            &ConsumeOptions::default().prefetch(settings.prefetch),
        )
        .await?;
    for _ in 0..count {
        let delivery = consumer
            .next()
            .await
            .ok_or_else(|| anyhow::anyhow!("polyq consumer ended early"))??;
        delivery.ack().await?;
    }
    let elapsed = started.elapsed();
    consumer.cancel().await?;
    Ok(elapsed)
}

fn check(outcome: polyq_amqp::Result<PublishOutcome>) -> anyhow::Result<()> {
    match outcome? {
        PublishOutcome::Acked => Ok(()),
        other => anyhow::bail!("polyq publish not acked: {other:?}"),
    }
}

/// A name suffix unique enough for one machine: the clock's nanoseconds and the process id.
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}.{nanos}", std::process::id())
}
