//! Dead-lettering on the embedded broker: a payment that fails on every attempt, a job whose URN
//! no handler knows, and a body that is not JSON all end up in `payments.dlq`, each with the
//! `dead_letter` block every SDK reads. Runs with no service:
//! `cargo run -p babelqueue --example dead_letter`.

use std::time::Duration;

use babelqueue::transport::Transport;
use babelqueue::worker::{Job, UnknownUrn};
use babelqueue::{BabelQueue, Verdict};
use bytes::Bytes;
use serde_json::json;

const CAPTURE: &str = "urn:babel:payments:capture";
const REFUND: &str = "urn:babel:payments:refund";

/// What the handler fails with; its type name is recorded as the block's `exception`.
#[derive(Debug, thiserror::Error)]
#[error("the card was declined")]
struct CardDeclined;

#[tokio::main(flavor = "current_thread")]
async fn main() -> babelqueue::Result<()> {
    let payments = BabelQueue::builder("memory://example-dead-letter")
        .queue("payments")
        .connect()
        .await?;

    payments.publish(CAPTURE, &json!({"payment_id": 7})).await?;
    println!("published {CAPTURE}, which fails on every attempt");
    payments.publish(REFUND, &json!({"payment_id": 7})).await?;
    println!("published {REFUND}, which no handler knows");
    // Bypasses the envelope on purpose: a producer bug, truncated JSON.
    let poison = Bytes::from_static(br#"{"job":"urn:babel:payments:capture","data":"#);
    payments
        .transport()
        .publish(payments.queue(), poison, &[])
        .await?;
    println!("published a poison body (truncated JSON)");

    let report = payments
        .worker()
        .max_attempts(3)
        .unknown_urn(UnknownUrn::DeadLetter)
        .handle(CAPTURE, |job: Job| async move {
            println!("{} attempts={}: {CardDeclined}", job.urn(), job.attempts());
            Err::<(), _>(CardDeclined)
        })
        // Three attempts of the capture, the refund, the poison body.
        .consume(5, Duration::from_secs(5))
        .await?;
    println!(
        "worker report: {} received, {} retried, {} dead-lettered",
        report.received, report.retried, report.dead_lettered
    );
    assert_eq!((report.retried, report.dead_lettered), (2, 3), "{report:?}");

    let dlq = payments.worker().dead_letter_queue_name();
    let transport = payments.transport();
    for _ in 0..report.dead_lettered {
        let reserved = transport
            .reserve(&dlq, Duration::from_secs(5))
            .await?
            .expect("every dead-lettered message is in the dead-letter queue");
        match babelqueue::classify(&reserved.body) {
            Verdict::Accepted(decoded) => {
                let block = decoded.envelope.dead_letter().unwrap_or_default();
                println!(
                    "in {dlq}: {} reason={} error={:?} exception={:?} attempts={:?}",
                    decoded.envelope.urn().unwrap_or_default(),
                    block.reason.unwrap_or_default(),
                    block.error.unwrap_or_default(),
                    block.exception.unwrap_or_default(),
                    block.attempts.unwrap_or_default(),
                );
            }
            _ => {
                // A poison record keeps the original bytes beside the block, so nothing is lost.
                let record: serde_json::Value = serde_json::from_slice(&reserved.body)?;
                println!(
                    "in {dlq}: poison record reason={} raw={}",
                    record["dead_letter"]["reason"].as_str().unwrap_or_default(),
                    record["raw"]
                );
            }
        }
        transport.ack(&reserved.receipt).await?;
    }
    Ok(())
}
