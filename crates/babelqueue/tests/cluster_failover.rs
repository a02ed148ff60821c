//! BabelQueue's RabbitMQ binding on a three-node cluster (`scripts/rabbitmq-cluster`): the node
//! that the publishers and the consumer are connected to is killed with SIGKILL in the middle
//! of the load. The binding fails over to another node of the URL's list; no confirmed job is
//! lost, a job comes twice only within the prefetch window (or as a publish sent again after
//! its confirm was lost with the node), and consuming resumes. Prints the time from the kill to
//! the first job taken a second time (handed over by the surviving nodes), the figure in
//! docs/RELIABILITY.md.
//!
//! BabelQueue declares plain durable queues, as every SDK does, so the queue survives the loss
//! of its node by a mirroring policy, set here as an operator of a 3.x cluster would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use babelqueue::transport::{AmqpOptions, AmqpTransport, Transport};
use polyq_testkit::rabbitmq_cluster::Cluster;
use tokio::time::{Instant, timeout};

/// Upper bound for anything awaited here; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(40);
const JOBS: usize = 2000;
/// Publishers running at once, each awaiting its confirm before the next publish.
const PUBLISHERS: usize = 4;
const PREFETCH: u16 = 50;
/// Jobs taken before the node is killed.
const BEFORE_KILL: usize = 500;

/// What the consumer took: copies per body, how many in all, and when a job came a second
/// time first: a job the surviving nodes handed over again.
#[derive(Default)]
struct Taken {
    copies: HashMap<String, u32>,
    count: usize,
    first_again: Option<Instant>,
}

fn body(n: usize) -> String {
    format!(
        r#"{{"job":"urn:babel:cluster:test","trace_id":"t-{n}","data":{{"n":{n}}},"meta":{{"schema_version":1,"ts":1}},"attempts":0}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_loses_no_confirmed_job_and_consuming_resumes_on_another() {
    let cluster = tokio::task::spawn_blocking(Cluster::start)
        .await
        .expect("the cluster started");
    let queue = polyq_testkit::unique_name("babel.cluster");
    cluster.ctl(
        2,
        &[
            "set_policy",
            "--apply-to",
            "queues",
            &format!("{queue}-mirrored"),
            &format!("^{}$", queue.replace('.', "\\.")),
            r#"{"ha-mode":"all","ha-sync-mode":"automatic"}"#,
        ],
    );
    let transport =
        AmqpTransport::connect_with(&cluster.url(), AmqpOptions::default().prefetch(PREFETCH))
            .await
            .expect("connect to the cluster");

    let taken = Arc::new(Mutex::new(Taken::default()));
    let consuming = {
        let (transport, queue, taken) = (transport.clone(), queue.clone(), taken.clone());
        tokio::spawn(async move {
            while taken.lock().unwrap().copies.len() < JOBS {
                let Some(reserved) = transport
                    .reserve(&queue, Duration::from_secs(1))
                    .await
                    .expect("reserve")
                else {
                    continue;
                };
                let body = String::from_utf8(reserved.body.to_vec()).expect("UTF-8 body");
                // A receipt of a delivery from the killed node cannot be settled; the job
                // comes again from the queue's new home.
                let _ = transport.ack(&reserved.receipt).await;
                let mut taken = taken.lock().unwrap();
                let copies = taken.copies.entry(body).or_default();
                *copies += 1;
                if *copies > 1 {
                    taken.first_again.get_or_insert_with(Instant::now);
                }
                taken.count += 1;
            }
        })
    };

    let publishing: Vec<_> = (0..PUBLISHERS)
        .map(|publisher| {
            let (transport, queue) = (transport.clone(), queue.clone());
            tokio::spawn(async move {
                for n in (publisher..JOBS).step_by(PUBLISHERS) {
                    transport
                        .publish(&queue, body(n).into(), &[])
                        .await
                        .unwrap_or_else(|error| panic!("job {n} not confirmed: {error}"));
                }
            })
        })
        .collect();

    timeout(LIMIT, async {
        while taken.lock().unwrap().count < BEFORE_KILL {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("jobs taken before the kill");
    // Counted from before the kill, so the figure includes the script's own start.
    let killed_at = Instant::now();
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.kill(1);
        cluster
    })
    .await
    .expect("node 1 killed");

    for publisher in publishing {
        timeout(LIMIT, publisher)
            .await
            .expect("every publish confirmed in time")
            .expect("every publish confirmed");
    }
    timeout(LIMIT, consuming)
        .await
        .expect("every confirmed job taken in time")
        .expect("the consumer ran");

    {
        let taken = taken.lock().unwrap();
        let resumed = taken
            .first_again
            .map(|at| {
                at.saturating_duration_since(killed_at)
                    .as_millis()
                    .to_string()
            })
            .unwrap_or_else(|| "(no job came twice)".to_owned());
        let duplicates: u32 = taken.copies.values().map(|n| n - 1).sum();
        println!(
            "first job taken again from the surviving nodes {resumed} ms after the kill; \
             {duplicates} duplicates"
        );
        assert!(
            (0..JOBS).all(|n| taken.copies.contains_key(&body(n))),
            "no confirmed job lost"
        );
        assert!(
            duplicates <= u32::from(PREFETCH) + PUBLISHERS as u32,
            "{duplicates} duplicates, more than the prefetch window and the publishes in flight"
        );
    }

    transport
        .client()
        .delete_queue(&queue)
        .await
        .expect("delete the queue");
    cluster.ctl(2, &["clear_policy", &format!("{queue}-mirrored")]);
    transport.client().close().await.expect("close");
}
