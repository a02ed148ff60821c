//! Applying and validating a topology plan on a broker: create-only, drift with the broker's
//! words, bindings left unchecked.

mod common;

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use acemq::retry::RetryPolicy;
use acemq::topology::{
    SourceQueue, Topology, TopologyPlan, dead_letter_queue, parked_queue, retry_queue,
};
use acemq::topology_apply::{self, Applied, Checked, Item, ObjectKind};
use common::Env;
use futures_util::FutureExt as _;
use polyq_amqp::{Client, ExchangeKind, ExchangeSpec, QueueSpec};

/// One test's topology: a quorum source queue dead-lettering into `.dlq`, its own topic
/// exchange bound to it, and a consumer whose one-second waits are held on a broker rung.
struct Names {
    queue: String,
    exchange: String,
}

impl Names {
    fn new() -> Self {
        Self {
            queue: polyq_testkit::unique_name("acemq.rt.topology"),
            exchange: polyq_testkit::unique_name("acemq.rt.topology.x"),
        }
    }

    fn plan(&self) -> TopologyPlan {
        let policy = RetryPolicy::fixed(3, Duration::from_secs(1))
            .unwrap()
            .wait_in_broker_from(Duration::from_secs(1));
        Topology::new()
            .exchange(&self.exchange, ExchangeKind::Topic)
            .queue(SourceQueue::new(&self.queue).with_dead_letter())
            .bind(&self.queue, &self.exchange, "order.*")
            .consumer(&self.queue, policy)
            .plan()
            .unwrap()
    }

    fn queues(&self) -> [String; 4] {
        [
            self.queue.clone(),
            dead_letter_queue(&self.queue),
            parked_queue(&self.queue),
            retry_queue(&self.queue, Duration::from_secs(1)),
        ]
    }

    /// Runs `body`, then deletes this topology's queues and its exchange, also when the body
    /// panicked. `acemq.dlx` and `acemq.retry` are shared and stay.
    async fn run<F: Future<Output = ()>>(&self, env: &Env, body: F) {
        let outcome = AssertUnwindSafe(body).catch_unwind().await;
        let cleaner = Client::connect(&env.url)
            .await
            .expect("connect to clean up");
        for queue in self.queues() {
            match cleaner.delete_queue(&queue).await {
                Ok(_) | Err(polyq_amqp::Error::NotFound { .. }) => {}
                Err(e) => panic!("delete {queue}: {e}"),
            }
        }
        cleaner
            .delete_exchange(&self.exchange)
            .await
            .unwrap_or_else(|e| panic!("delete {}: {e}", self.exchange));
        cleaner.close().await.expect("close cleaner");
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }
}

fn item<'a, S>(items: &'a [Item<S>], name: &str) -> &'a Item<S> {
    items
        .iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("{name} is in the report"))
}

fn states<S: Copy>(items: &[Item<S>], kind: ObjectKind) -> Vec<S> {
    items
        .iter()
        .filter(|i| i.kind == kind)
        .map(|i| i.state)
        .collect()
}

polyq_testkit::both_brokers!(apply_creates_what_is_missing_once_and_validate_follows);
async fn apply_creates_what_is_missing_once_and_validate_follows(env: &'static Env) {
    let names = Names::new();
    let plan = names.plan();
    names
        .run(env, async {
            let fresh = topology_apply::validate(env.client(), &plan).await.unwrap();
            assert_eq!(
                states(&fresh.items, ObjectKind::Queue),
                [Checked::Missing; 4]
            );
            assert_eq!(item(&fresh.items, &names.exchange).state, Checked::Missing);
            if env.url.starts_with("memory://") {
                // A broker of its own: the shared exchanges are missing too.
                assert_eq!(
                    states(&fresh.items, ObjectKind::Exchange),
                    [Checked::Missing; 3]
                );
                assert_eq!(fresh.drift, 7);
            }
            for name in names.queues() {
                assert!(
                    env.client().inspect_queue(&name).await.is_err(),
                    "validate created nothing: {name}"
                );
            }

            let applied = topology_apply::apply(env.client(), &plan).await.unwrap();
            assert!(applied.is_clean(), "{applied:?}");
            assert_eq!(
                states(&applied.items, ObjectKind::Queue),
                [Applied::Created; 4]
            );
            assert_eq!(
                item(&applied.items, &names.exchange).state,
                Applied::Created
            );
            assert_eq!(
                states(&applied.items, ObjectKind::Binding),
                [Applied::Declared; 4]
            );
            for name in names.queues() {
                env.client()
                    .inspect_queue(&name)
                    .await
                    .unwrap_or_else(|e| panic!("{name} was created: {e}"));
            }
            env.client()
                .inspect_exchange(&names.exchange)
                .await
                .unwrap();

            let again = topology_apply::apply(env.client(), &plan).await.unwrap();
            assert!(again.is_clean(), "{again:?}");
            assert!(
                again
                    .items
                    .iter()
                    .filter(|i| i.kind != ObjectKind::Binding)
                    .all(|i| i.state == Applied::Exists),
                "a second apply creates nothing: {again:?}"
            );

            let after = topology_apply::validate(env.client(), &plan).await.unwrap();
            assert!(after.is_clean(), "{after:?}");
            assert_eq!(states(&after.items, ObjectKind::Queue), [Checked::Ok; 4]);
            assert_eq!(states(&after.items, ObjectKind::Exchange), [Checked::Ok; 3]);
            for binding in after.items.iter().filter(|i| i.kind == ObjectKind::Binding) {
                assert_eq!(binding.state, Checked::Unchecked);
                assert!(
                    binding.reason.as_deref().unwrap().contains("not checkable"),
                    "{binding:?}"
                );
            }
        })
        .await;
}

polyq_testkit::both_brokers!(what_exists_otherwise_is_drift_and_apply_leaves_it_alone);
async fn what_exists_otherwise_is_drift_and_apply_leaves_it_alone(env: &'static Env) {
    let names = Names::new();
    let plan = names.plan();
    names
        .run(env, async {
            // Someone declared the source queue classic (otherwise alike), and the exchange as
            // fanout.
            let classic = QueueSpec::new(&names.queue)
                .argument("x-dead-letter-exchange", "acemq.dlx".into())
                .argument(
                    "x-dead-letter-routing-key",
                    dead_letter_queue(&names.queue).into(),
                );
            env.client().declare_queue(&classic).await.unwrap();
            let fanout = ExchangeSpec::new(&names.exchange, ExchangeKind::Fanout);
            env.client().declare_exchange(&fanout).await.unwrap();

            let report = topology_apply::validate(env.client(), &plan).await.unwrap();
            let queue = item(&report.items, &names.queue);
            assert_eq!(queue.state, Checked::Differs);
            let reason = queue.reason.as_deref().unwrap();
            assert!(
                reason.contains("x-queue-type"),
                "the broker's words: {reason}"
            );
            let exchange = item(&report.items, &names.exchange);
            assert_eq!(exchange.state, Checked::Differs);
            assert!(
                exchange.reason.as_deref().unwrap().contains("type"),
                "{exchange:?}"
            );

            let applied = topology_apply::apply(env.client(), &plan).await.unwrap();
            assert_eq!(applied.conflicts, 2, "{applied:?}");
            assert!(!applied.is_clean());
            assert_eq!(item(&applied.items, &names.queue).state, Applied::Conflict);
            assert_eq!(
                item(&applied.items, &names.exchange).state,
                Applied::Conflict
            );
            assert_eq!(
                item(&applied.items, &dead_letter_queue(&names.queue)).state,
                Applied::Created
            );
            // Both still stand as they were declared: their own declarations are accepted again.
            env.client()
                .declare_queue(&classic)
                .await
                .expect("the queue is still classic");
            env.client()
                .declare_exchange(&fanout)
                .await
                .expect("the exchange is still fanout");

            let after = topology_apply::validate(env.client(), &plan).await.unwrap();
            assert_eq!(after.drift, 2, "{after:?}");
        })
        .await;
}

polyq_testkit::both_brokers!(a_missing_exchange_is_reported);
async fn a_missing_exchange_is_reported(env: &'static Env) {
    let names = Names::new();
    let plan = names.plan();
    names
        .run(env, async {
            let applied = topology_apply::apply(env.client(), &plan).await.unwrap();
            assert!(applied.is_clean(), "{applied:?}");
            env.client().delete_exchange(&names.exchange).await.unwrap();

            let report = topology_apply::validate(env.client(), &plan).await.unwrap();
            assert_eq!(report.drift, 1, "{report:?}");
            let missing: Vec<_> = report
                .items
                .iter()
                .filter(|i| i.state == Checked::Missing)
                .map(|i| (i.kind, i.name.as_str()))
                .collect();
            assert_eq!(missing, [(ObjectKind::Exchange, names.exchange.as_str())]);
            assert!(
                env.client()
                    .inspect_exchange(&names.exchange)
                    .await
                    .is_err(),
                "validate did not declare it"
            );
        })
        .await;
}
