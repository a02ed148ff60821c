//! Redrive progress on standard error, observed at the binding: the dead-letter queue's depth
//! when the redrive starts (at most `--limit`) is the length of the bar, every job settled
//! (acknowledged once redriven, or moved to the end of the dead-letter queue) advances it. The
//! bar is hidden when standard error is not a terminal.

use std::io::IsTerminal as _;
use std::time::Duration;

use babelqueue::transport::{Capabilities, Reserved, Transport};
use bytes::Bytes;
use indicatif::{ProgressBar, ProgressStyle};

/// A binding that forwards every call to `inner` and counts what a redrive of `dlq` does.
pub(crate) struct Counted<T> {
    inner: T,
    dlq: String,
    limit: u64,
    bar: ProgressBar,
}

impl<T: Transport> Counted<T> {
    /// Wraps `inner`, showing a bar for the redrive of at most `limit` jobs (0: all) of `dlq`.
    pub(crate) fn new(inner: T, dlq: &str, limit: usize) -> Self {
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::new(0)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} settled")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_message(format!("redrive {dlq}"));
        bar.enable_steady_tick(Duration::from_millis(120));
        Self {
            inner,
            dlq: dlq.to_owned(),
            limit: u64::try_from(limit).unwrap_or(u64::MAX),
            bar,
        }
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl<T: Transport> Transport for Counted<T> {
    type Receipt = T::Receipt;

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn publish(
        &self,
        queue: &str,
        body: Bytes,
        headers: &[(String, String)],
    ) -> babelqueue::Result<()> {
        self.inner.publish(queue, body, headers).await
    }

    async fn reserve(
        &self,
        queue: &str,
        wait: Duration,
    ) -> babelqueue::Result<Option<Reserved<T::Receipt>>> {
        self.inner.reserve(queue, wait).await
    }

    async fn ack(&self, receipt: &T::Receipt) -> babelqueue::Result<()> {
        let acked = self.inner.ack(receipt).await;
        self.bar.inc(1);
        acked
    }

    async fn retry(
        &self,
        receipt: &T::Receipt,
        queue: &str,
        body: Bytes,
        headers: &[(String, String)],
        delay: Duration,
    ) -> babelqueue::Result<()> {
        self.inner.retry(receipt, queue, body, headers, delay).await
    }

    async fn release(&self, receipt: &T::Receipt, delay: Duration) -> babelqueue::Result<()> {
        self.inner.release(receipt, delay).await
    }

    async fn move_to_end(&self, receipt: &T::Receipt) -> babelqueue::Result<()> {
        let moved = self.inner.move_to_end(receipt).await;
        self.bar.inc(1);
        moved
    }

    async fn move_all_to_end(&self, receipts: &[&T::Receipt]) -> Vec<babelqueue::Result<()>> {
        let moved = self.inner.move_all_to_end(receipts).await;
        self.bar.inc(u64::try_from(moved.len()).unwrap_or(u64::MAX));
        moved
    }

    async fn depth(&self, queue: &str) -> babelqueue::Result<u64> {
        let depth = self.inner.depth(queue).await?;
        if queue == self.dlq {
            self.bar.set_length(if self.limit == 0 {
                depth
            } else {
                depth.min(self.limit)
            });
        }
        Ok(depth)
    }

    async fn dead_letter(
        &self,
        receipt: &T::Receipt,
        dlq: &str,
        body: Bytes,
    ) -> babelqueue::Result<()> {
        self.inner.dead_letter(receipt, dlq, body).await
    }

    fn dead_letter_queue(&self, queue: &str) -> String {
        self.inner.dead_letter_queue(queue)
    }

    fn schema_version(&self, receipt: &T::Receipt) -> Option<String> {
        self.inner.schema_version(receipt)
    }

    fn reservation_limit(&self) -> Option<usize> {
        self.inner.reservation_limit()
    }

    async fn unsubscribe(&self, queue: &str) -> babelqueue::Result<()> {
        self.inner.unsubscribe(queue).await
    }
}
