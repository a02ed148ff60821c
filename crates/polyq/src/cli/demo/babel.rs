//! The BabelQueue part: a job whose handler fails once then succeeds, an unknown URN
//! dead-lettered, a poison body recorded, and a redrive that brings the unknown-URN job back
//! once its handler exists.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use babelqueue::redrive::{RedriveAction, RedriveOptions};
use babelqueue::transport::{AnyTransport, ConnectOptions, Transport};
use babelqueue::worker::{Job, UnknownUrn};
use babelqueue::{BabelQueue, Verdict};
use bytes::Bytes;
use serde_json::{Value, json};

use super::{Timeline, unique};
use crate::cli::babel::{Layout, connect};

const PART: &str = "babel";
const CREATED: &str = "urn:babel:orders:created";
const REFUNDED: &str = "urn:babel:orders:refunded";
/// The upper bound on any one step's wait for a message.
const STEP: Duration = Duration::from_secs(10);

/// Runs the BabelQueue part on `url`.
pub(crate) async fn run(url: &str, layout: Layout, timeline: &Timeline) -> anyhow::Result<()> {
    let transport =
        Arc::new(connect(url, ConnectOptions::default().redis_layout(layout.into())).await?);
    timeline.event(PART, "connected", polyq_amqp::redact_url(url));
    let jobs = BabelQueue::with_shared_transport(transport.clone(), unique("jobs"));
    let outcome = steps(&jobs, timeline).await;
    remove(&transport, jobs.queue()).await;
    outcome
}

async fn steps(jobs: &BabelQueue, timeline: &Timeline) -> anyhow::Result<()> {
    let queue = jobs.queue().to_owned();
    let dlq = jobs.transport().dead_letter_queue(&queue);

    let sent = jobs
        .publish(CREATED, &json!({"order_id": 1042, "amount": 99.9}))
        .await?;
    timeline.event(
        PART,
        "produced",
        format!(
            "{CREATED} on {queue} (trace {})",
            sent.trace_id().unwrap_or_default()
        ),
    );
    let report = worker(jobs, *timeline, false).consume(2, STEP).await?;
    expect(
        report.succeeded == 1 && report.retried == 1,
        "one retry, then success",
        &report,
    )?;

    jobs.publish(REFUNDED, &json!({"order_id": 1042})).await?;
    timeline.event(
        PART,
        "produced",
        format!("{REFUNDED}, which no handler knows yet"),
    );
    let poison = Bytes::from_static(br#"{"job": "urn:babel:orders:created", "data": "#);
    jobs.transport()
        .publish(&queue, poison.clone(), &[])
        .await?;
    timeline.event(
        PART,
        "produced",
        format!("a poison body ({} bytes, truncated JSON)", poison.len()),
    );
    let report = worker(jobs, *timeline, false)
        .unknown_urn(UnknownUrn::DeadLetter)
        .consume(2, STEP)
        .await?;
    expect(report.dead_lettered == 2, "two dead-letters", &report)?;
    show_dead_letters(jobs.transport(), &dlq, timeline).await?;

    // The bypass stamp travels as a header, which the Laravel layout has no room for: there the
    // redrive goes without it, as an operator's would.
    let redrive = RedriveOptions::new()
        .bypass(jobs.transport().capabilities().headers)
        .limit(2)
        .wait(STEP);
    let mut report =
        babelqueue::redrive::redrive(jobs.transport().as_ref(), &dlq, &redrive).await?;
    report
        .items
        .sort_by_key(|item| item.action != RedriveAction::Redriven);
    for item in &report.items {
        match item.action {
            RedriveAction::Redriven => timeline.event(
                PART,
                "redriven",
                format!(
                    "{} from {} to {} (attempts reset, bypass stamped: {})",
                    item.urn, item.from, item.to, item.bypassed
                ),
            ),
            other => timeline.event(
                PART,
                "kept",
                format!(
                    "the poison record stays in {} ({})",
                    item.from,
                    serde_json::to_value(other)?.as_str().unwrap_or_default()
                ),
            ),
        }
    }
    timeline.event(PART, "deployed", format!("a handler for {REFUNDED}"));
    let report = worker(jobs, *timeline, true).consume(1, STEP).await?;
    expect(report.succeeded == 1, "the redriven job handled", &report)?;
    Ok(())
}

/// A worker with the demo's handlers: `orders:created` fails on its first attempt, and
/// `orders:refunded` is known only once `refunds` is set.
fn worker(
    jobs: &BabelQueue,
    timeline: Timeline,
    refunds: bool,
) -> babelqueue::worker::Worker<AnyTransport> {
    let worker = jobs.worker().handle(CREATED, move |job: Job| async move {
        if job.attempts() == 0 {
            timeline.event(
                PART,
                "failed",
                format!(
                    "{} attempts={}: inventory service unavailable",
                    job.urn(),
                    job.attempts()
                ),
            );
            return Err("inventory service unavailable");
        }
        timeline.event(
            PART,
            "handled",
            format!("{} attempts={}: succeeded", job.urn(), job.attempts()),
        );
        Ok(())
    });
    if !refunds {
        return worker;
    }
    worker.handle(REFUNDED, move |job: Job| async move {
        timeline.event(
            PART,
            "handled",
            format!(
                "{} attempts={} replay={}: succeeded",
                job.urn(),
                job.attempts(),
                job.is_replay()
            ),
        );
        Ok::<_, std::convert::Infallible>(())
    })
}

fn expect(ok: bool, what: &str, report: &babelqueue::worker::WorkerReport) -> anyhow::Result<()> {
    if ok {
        Ok(())
    } else {
        bail!(
            "expected {what}, the worker reported {}",
            serde_json::to_string(report)?
        )
    }
}

/// Shows the two dead-letter records (the unknown-URN job, then the poison record) and puts
/// them back unchanged.
async fn show_dead_letters(
    transport: &AnyTransport,
    dlq: &str,
    timeline: &Timeline,
) -> anyhow::Result<()> {
    let mut held = Vec::new();
    for _ in 0..2 {
        match transport.reserve(dlq, STEP).await? {
            Some(reserved) => held.push(reserved),
            None => bail!("{dlq} holds fewer than the two dead-letters"),
        }
    }
    for reserved in &held {
        match babelqueue::classify(&reserved.body) {
            Verdict::Accepted(decoded) => {
                let block = decoded.envelope.dead_letter().unwrap_or_default();
                timeline.event(
                    PART,
                    "dead-lettered",
                    format!(
                        "{} in {dlq}: reason {}",
                        decoded.envelope.urn().unwrap_or_default(),
                        block.reason.unwrap_or_default()
                    ),
                );
            }
            _ => {
                let record: Value = serde_json::from_slice(&reserved.body).unwrap_or_default();
                timeline.event(
                    PART,
                    "poison",
                    format!(
                        "recorded in {dlq}: reason {}, original bytes kept in \"raw\": {}",
                        record["dead_letter"]["reason"].as_str().unwrap_or_default(),
                        record["raw"]
                    ),
                );
            }
        }
    }
    for reserved in held {
        transport.release(&reserved.receipt, Duration::ZERO).await?;
    }
    transport.unsubscribe(dlq).await?;
    Ok(())
}

/// Removes what the demo made on a real broker: the queues on RabbitMQ, every key of the queue
/// and of its dead-letter queue on Redis.
async fn remove(transport: &AnyTransport, queue: &str) {
    let removed = match transport {
        AnyTransport::Amqp(amqp) => {
            for name in [queue.to_owned(), amqp.dead_letter_queue(queue)] {
                amqp.client().delete_queue(&name).await.ok();
            }
            return;
        }
        AnyTransport::Redis(redis) => redis.delete_queue(queue).await,
        AnyTransport::Laravel(laravel) => laravel.delete_queue(queue).await,
        _ => return,
    };
    if let Err(error) = removed {
        tracing::warn!(%error, "could not remove the demo's Redis keys");
    }
}
