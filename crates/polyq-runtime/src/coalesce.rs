//! Group commit: calls made at the same time are answered by one batch operation, so a store
//! pays one round trip for many concurrent claims or confirms instead of one each.
//!
//! A call waits no longer than it would alone: when fewer than `concurrency` batches are
//! running, the first call starts a batch at once with whatever else is waiting; calls that
//! arrive while every slot is busy queue up and go together in the next batch. Each caller gets
//! its own answer and returns only once its batch finished, so a confirm still precedes the
//! acknowledgement that waits for it.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot};

/// The batch operation: the items in the order they were submitted, and an answer for each in
/// the same order, or one error for all of them.
pub type BatchFn<I, O, E> =
    Arc<dyn Fn(Vec<I>) -> BoxFuture<'static, Result<Vec<O>, E>> + Send + Sync>;

type Waiting<I, O, E> = (I, oneshot::Sender<Result<O, E>>);

/// Batches concurrent calls into one operation. Clones share the batches.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
/// use polyq_runtime::coalesce::Coalescer;
///
/// let doubled: Coalescer<u32, u32, String> = Coalescer::new(100, 2, Arc::new(|items: Vec<u32>| {
///     Box::pin(async move { Ok(items.into_iter().map(|n| n * 2).collect()) })
/// }));
/// let (a, b) = tokio::join!(doubled.call(1), doubled.call(2));
/// assert_eq!((a, b), (Ok(2), Ok(4)));
/// # }
/// ```
pub struct Coalescer<I, O, E> {
    inner: Arc<Inner<I, O, E>>,
}

struct Inner<I, O, E> {
    run: BatchFn<I, O, E>,
    max_batch: usize,
    concurrency: usize,
    /// Started on the first call, on the runtime that made it.
    sender: OnceLock<mpsc::UnboundedSender<Waiting<I, O, E>>>,
}

impl<I, O, E> Clone for Coalescer<I, O, E> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<I, O, E> std::fmt::Debug for Coalescer<I, O, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("max_batch", &self.inner.max_batch)
            .field("concurrency", &self.inner.concurrency)
            .finish_non_exhaustive()
    }
}

/// Why a call got no answer from its batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoalesceError<E> {
    /// The batch operation failed; every call in the batch gets its error.
    #[error(transparent)]
    Failed(E),
    /// The batch ended without an answer for this call: the runtime that ran the batches shut
    /// down, or the operation returned fewer answers than items.
    #[error("the batch ended without an answer for this call")]
    NoAnswer,
}

impl<I, O, E> Coalescer<I, O, E>
where
    I: Send + 'static,
    O: Send + 'static,
    E: Clone + Send + 'static,
{
    /// Batches of at most `max_batch` items (at least 1), at most `concurrency` of them running
    /// at once (at least 1), each through `run`.
    pub fn new(max_batch: usize, concurrency: usize, run: BatchFn<I, O, E>) -> Self {
        Self {
            inner: Arc::new(Inner {
                run,
                max_batch: max_batch.max(1),
                concurrency: concurrency.max(1),
                sender: OnceLock::new(),
            }),
        }
    }

    /// Submits `item` and waits for its batch's answer.
    ///
    /// # Errors
    /// [`CoalesceError::Failed`] with the batch's error, or [`CoalesceError::NoAnswer`].
    pub async fn call(&self, item: I) -> Result<O, CoalesceError<E>> {
        let (answer, answered) = oneshot::channel();
        let sender = self.inner.sender.get_or_init(|| {
            let (sender, waiting) = mpsc::unbounded_channel();
            tokio::spawn(batches(
                waiting,
                Arc::clone(&self.inner.run),
                self.inner.max_batch,
                self.inner.concurrency,
            ));
            sender
        });
        sender
            .send((item, answer))
            .map_err(|_| CoalesceError::NoAnswer)?;
        match answered.await {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(error)) => Err(CoalesceError::Failed(error)),
            Err(_) => Err(CoalesceError::NoAnswer),
        }
    }
}

/// A batch's keys once each, in sorted order, each with the values it came with folded by
/// `merge`. What a batched upsert binds: PostgreSQL refuses a statement that touches one row
/// twice, and batches that lock rows in one order cannot deadlock each other.
///
/// ```
/// let batch = [("b".to_owned(), 1), ("a".to_owned(), 5), ("b".to_owned(), 3)];
/// let (keys, values) = polyq_runtime::coalesce::distinct_sorted(&batch, i64::max);
/// assert_eq!((keys, values), (vec!["a".to_owned(), "b".to_owned()], vec![5, 3]));
/// ```
pub fn distinct_sorted<V: Copy>(
    batch: &[(String, V)],
    merge: impl Fn(V, V) -> V,
) -> (Vec<String>, Vec<V>) {
    let mut merged: std::collections::BTreeMap<&str, V> = std::collections::BTreeMap::new();
    for (key, value) in batch {
        merged
            .entry(key)
            .and_modify(|held| *held = merge(*held, *value))
            .or_insert(*value);
    }
    merged
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .unzip()
}

/// The batching task: ends when every [`Coalescer`] clone is gone and the batches under way
/// finished.
async fn batches<I, O, E>(
    mut waiting: mpsc::UnboundedReceiver<Waiting<I, O, E>>,
    run: BatchFn<I, O, E>,
    max_batch: usize,
    concurrency: usize,
) where
    E: Clone,
{
    let mut running = FuturesUnordered::new();
    let mut open = true;
    while open || !running.is_empty() {
        tokio::select! {
            next = waiting.recv(), if open && running.len() < concurrency => {
                let Some(first) = next else {
                    open = false;
                    continue;
                };
                let mut batch = vec![first];
                while batch.len() < max_batch {
                    match waiting.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                running.push(answer(batch, &run));
            }
            Some(()) = running.next(), if !running.is_empty() => {}
        }
    }
}

fn answer<I, O, E: Clone>(
    batch: Vec<Waiting<I, O, E>>,
    run: &BatchFn<I, O, E>,
) -> impl Future<Output = ()> + use<I, O, E> {
    let (items, answers): (Vec<I>, Vec<_>) = batch.into_iter().unzip();
    let outputs = run(items);
    async move {
        match outputs.await {
            Ok(outputs) => {
                // A missing answer drops its sender: that caller gets `NoAnswer`.
                for (answer, output) in answers.into_iter().zip(outputs) {
                    let _ = answer.send(Ok(output));
                }
            }
            Err(error) => {
                for answer in answers {
                    let _ = answer.send(Err(error.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn recording(sizes: Arc<Mutex<Vec<usize>>>) -> BatchFn<u32, u32, String> {
        Arc::new(move |items: Vec<u32>| {
            let sizes = Arc::clone(&sizes);
            Box::pin(async move {
                sizes.lock().unwrap().push(items.len());
                tokio::task::yield_now().await;
                if items.contains(&13) {
                    return Err("unlucky".to_owned());
                }
                Ok(items.into_iter().map(|n| n + 1).collect())
            })
        })
    }

    #[tokio::test]
    async fn concurrent_calls_share_batches_and_each_gets_its_answer() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let coalescer = Coalescer::new(8, 1, recording(Arc::clone(&sizes)));
        // Clear of 13, the item that fails its batch.
        let calls: Vec<_> = (100..120).map(|n| coalescer.call(n)).collect();
        let answers = futures_util::future::join_all(calls).await;
        assert_eq!(answers, (101..=120).map(Ok).collect::<Vec<_>>());
        let sizes = sizes.lock().unwrap();
        assert_eq!(sizes.iter().sum::<usize>(), 20);
        assert!(sizes.len() < 20, "batched: {sizes:?}");
        assert!(sizes.iter().all(|&size| size <= 8), "{sizes:?}");
    }

    #[tokio::test]
    async fn a_failed_batch_fails_every_call_in_it_and_only_those() {
        let coalescer = Coalescer::new(100, 1, recording(Arc::default()));
        assert_eq!(
            coalescer.call(13).await,
            Err(CoalesceError::Failed("unlucky".to_owned()))
        );
        assert_eq!(coalescer.call(1).await, Ok(2));
    }

    #[tokio::test]
    async fn too_few_answers_leave_the_rest_unanswered() {
        let short: BatchFn<u32, u32, String> =
            Arc::new(|_items: Vec<u32>| Box::pin(async { Ok(Vec::new()) }));
        let coalescer = Coalescer::new(10, 1, short);
        assert_eq!(coalescer.call(1).await, Err(CoalesceError::NoAnswer));
    }
}
