//! `polyq acemq replay` and `polyq acemq peek`: dead-letter tooling over `acemq::patterns`.

use std::io::IsTerminal as _;

use crate::cli::connect::AmqpBroker;
use acemq::inspect::MessageView;
use acemq::patterns::replay::{Replay, Stopped};
use acemq::time::OffsetDateTime;
use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use polyq_amqp::{Client, Delivery, MessageJson};

/// Moves messages from `Q.dlq` (or `Q.parked`) back to `Q`, with a progress bar on standard
/// error (hidden when it is not a terminal) and a summary on standard output.
pub(super) async fn replay(
    broker: &AmqpBroker,
    queue: &str,
    parked: bool,
    limit: Option<u64>,
    dry_run: bool,
) -> anyhow::Result<()> {
    let mq = broker.acemq().await?;
    let mut replay = if parked {
        Replay::parked(&mq, queue)
    } else {
        Replay::dead_letters(&mq, queue)
    }
    .dry_run(dry_run);
    if let Some(limit) = limit {
        replay = replay.limit(limit);
    }
    let pending = replay
        .pending()
        .await
        .with_context(|| format!("--queue {queue}: cannot read {}", replay.source()))?;
    let expected = limit.map_or(u64::from(pending), |n| n.min(u64::from(pending)));
    let bar = progress_bar(expected, replay.source(), dry_run);
    let outcome = replay
        .run_with_progress(|report| bar.set_position(report.moved + report.skipped))
        .await;
    bar.finish_and_clear();
    mq.close().await.ok();
    let report = outcome?;
    let verb = if dry_run { "would move" } else { "moved" };
    let why = match report.stopped {
        Some(Stopped::Limit) => "the limit was reached",
        Some(Stopped::Drained) | None => "the queue was drained",
    };
    println!(
        "{verb} {} message(s) from {} to {} ({why})",
        report.moved,
        replay.source(),
        replay.destination()
    );
    Ok(())
}

fn progress_bar(length: u64, source: &str, dry_run: bool) -> ProgressBar {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(length)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(format!(
        "{} {source}",
        if dry_run { "counting" } else { "replaying" }
    ));
    bar
}

/// Prints up to `count` messages of `queue`, one JSON object per line: the message JSON with
/// `redelivered` and the decoded `envelope` added (so the output is accepted by `decode`).
///
/// Messages are read with `basic.get` and held until the last one is read, then all given back
/// with `nack` and requeue, so none is shown twice and none is lost; the broker marks them
/// redelivered, and a consumer may see them reordered.
pub(super) async fn peek(broker: &AmqpBroker, queue: &str, count: u64) -> anyhow::Result<()> {
    let client = broker.client().await?;
    let mut held: Vec<Delivery> = Vec::new();
    let shown = show(&client, queue, count, &mut held).await;
    let mut given_back = Ok(());
    for delivery in &held {
        if let Err(e) = delivery.nack(true).await {
            given_back = Err(e);
        }
    }
    client.close().await.ok();
    shown?;
    given_back.context("giving a peeked message back (the broker requeues it on close)")?;
    Ok(())
}

async fn show(
    client: &Client,
    queue: &str,
    count: u64,
    held: &mut Vec<Delivery>,
) -> anyhow::Result<()> {
    while (held.len() as u64) < count {
        let Some(delivery) = client
            .get(queue)
            .await
            .with_context(|| format!("--queue {queue}"))?
        else {
            break;
        };
        let message = MessageJson::of_delivery(&delivery);
        let view = MessageView::new(message, delivery.redelivered, OffsetDateTime::now_utc());
        held.push(delivery);
        println!("{}", serde_json::to_string(&view)?);
    }
    Ok(())
}
