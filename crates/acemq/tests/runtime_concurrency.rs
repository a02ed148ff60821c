//! Concurrency: a consumer with concurrency N runs N handlers at once (proved by a barrier
//! only N handlers together can pass), and never more.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use acemq::Message;
use common::{Env, LIMIT};
use tokio::sync::{Barrier, mpsc};

async fn handlers_run_in_parallel(env: &'static Env) {
    const N: usize = 3;
    let queue = env.queue("concurrency").await;
    let barrier = Arc::new(Barrier::new(N));
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = env
        .mq
        .consumer::<u32>(queue.as_str())
        .concurrency(N)
        .prefetch(10)
        .start({
            let (running, most) = (running.clone(), most.clone());
            move |message: Message<u32>| {
                let (barrier, running, most, tx) =
                    (barrier.clone(), running.clone(), most.clone(), tx.clone());
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // Passes only once N handlers wait here together.
                    barrier.wait().await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    tx.send(*message.payload()).unwrap();
                }
            }
        })
        .await
        .unwrap();
    env.mq
        .publisher::<u32>("", queue.as_str())
        .send_all(0..(2 * N as u32))
        .await
        .unwrap();
    let mut done = Vec::new();
    for _ in 0..2 * N {
        done.push(
            tokio::time::timeout(LIMIT, rx.recv())
                .await
                .expect("N handlers met at the barrier")
                .unwrap(),
        );
    }
    done.sort_unstable();
    assert_eq!(done, (0..2 * N as u32).collect::<Vec<_>>());
    assert_eq!(most.load(Ordering::SeqCst), N, "never more than N at once");
    assert!(consumer.drain(LIMIT).await.is_clean());
}
polyq_testkit::both_brokers!(handlers_run_in_parallel);
