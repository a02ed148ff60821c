//! The baseline: lapin used directly, the way a careful application would.

use std::time::{Duration, Instant};

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Confirmation, Connection, ConnectionProperties};

use super::phases::{Settings, Side};

/// One raw lapin connection with a confirm-mode publishing channel.
pub(super) struct Raw {
    connection: Connection,
    publisher: Channel,
}

impl Raw {
    pub(super) async fn connect(url: &str) -> anyhow::Result<Self> {
        let connection = Connection::connect(
            url,
            ConnectionProperties::default().with_connection_name("polyq-bench-raw".into()),
        )
        .await?;
        let publisher = connection.create_channel().await?;
        publisher
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Self {
            connection,
            publisher,
        })
    }

    /// Publishes `count` mandatory transient messages with `window` confirms outstanding,
    /// until the last confirm, as `side` publishes ([`Side::Raw`] or [`Side::RawQueued`]).
    pub(super) async fn publish(
        &self,
        side: Side,
        queue: &str,
        count: u32,
        settings: &Settings,
    ) -> anyhow::Result<Duration> {
        let options = BasicPublishOptions {
            mandatory: true,
            immediate: false,
        };
        let (publisher, body) = (&self.publisher, &settings.body[..]);
        let started = Instant::now();
        if side == Side::RawQueued {
            in_window(count, settings.window, async move || {
                let mut publish = Box::pin(publisher.basic_publish(
                    "".into(),
                    queue.into(),
                    options,
                    body,
                    settings.raw_properties.clone(),
                ));
                // The first poll queues the frames; the write is awaited with the confirm.
                let queued = (&mut publish).now_or_never();
                Ok(async move {
                    let confirm = match queued {
                        Some(written) => written?,
                        None => publish.await?,
                    };
                    check(confirm.await)
                })
            })
            .await?;
        } else {
            in_window(count, settings.window, async move || {
                let confirm = publisher
                    .basic_publish(
                        "".into(),
                        queue.into(),
                        options,
                        body,
                        settings.raw_properties.clone(),
                    )
                    .await?;
                Ok(confirm.map(check))
            })
            .await?;
        }
        Ok(started.elapsed())
    }

    /// Consumes and acks `count` messages on a new channel with the prefetch applied; the time
    /// runs from opening the channel to the last ack. Cancelling and closing afterwards returns
    /// what it had prefetched to the queue.
    pub(super) async fn consume(
        &self,
        queue: &str,
        count: u32,
        settings: &Settings,
    ) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let channel = self.connection.create_channel().await?;
        channel
            .basic_qos(settings.prefetch, BasicQosOptions { global: false })
            .await?;
        let mut consumer = channel
            .basic_consume(
                queue.into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        for _ in 0..count {
            let delivery = consumer
                .next()
                .await
                .ok_or_else(|| anyhow::anyhow!("raw consumer ended early"))??;
            delivery.ack(BasicAckOptions::default()).await?;
        }
        let elapsed = started.elapsed();
        channel
            .basic_cancel(consumer.tag(), BasicCancelOptions::default())
            .await?;
        channel.close(200, "done".into()).await?;
        Ok(elapsed)
    }

    /// Closes the connection. lapin can miss the close-ok when a channel is closing at the same
    /// moment, so the wait is bounded; the connection goes with `self` either way.
    pub(super) async fn close(&self) -> anyhow::Result<()> {
        let closing = self.connection.close(200, "done".into());
        if let Ok(result) = tokio::time::timeout(Duration::from_secs(5), closing).await {
            result?;
        }
        Ok(())
    }
}

/// Runs `count` publishes with at most `window` unsettled: `publish` hands one to lapin and
/// returns what settles it.
async fn in_window<P, S>(count: u32, window: usize, mut publish: P) -> anyhow::Result<()>
where
    P: AsyncFnMut() -> anyhow::Result<S>,
    S: Future<Output = anyhow::Result<()>>,
{
    let mut in_flight = FuturesUnordered::new();
    for _ in 0..count {
        if in_flight.len() >= window
            && let Some(settled) = in_flight.next().await
        {
            settled?;
        }
        in_flight.push(publish().await?);
    }
    while let Some(settled) = in_flight.next().await {
        settled?;
    }
    Ok(())
}

fn check(confirmation: lapin::Result<Confirmation>) -> anyhow::Result<()> {
    match confirmation? {
        Confirmation::Ack(None) => Ok(()),
        other => anyhow::bail!("raw publish not acked: {other:?}"),
    }
}
