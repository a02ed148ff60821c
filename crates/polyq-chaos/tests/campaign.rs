//! The campaign's short forms, seconds each, on the real brokers: two kills per binding, a
//! network cut and a slow-down through a proxy, a Redis restart with AOF, a memory alarm on a
//! RabbitMQ node of the test's own. Each must lose no confirmed message and keep duplicates
//! within its bound; `scripts/chaos` runs the full sizes.

use polyq_chaos::{Binding, Campaign, Scenario, Settings};

async fn passes(scenario: Scenario) {
    let worker = std::path::PathBuf::from(env!("CARGO_BIN_EXE_polyq-chaos"));
    let mut campaign = Campaign::new(Settings::quick(worker));
    let outcome = campaign.run(scenario).await.expect("the scenario ran");
    println!("{outcome}");
    assert!(outcome.messages > 0, "{outcome}");
    assert_eq!(outcome.lost, 0, "{outcome}");
    assert!(outcome.passed(), "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acemq_consumer_killed_twice_loses_nothing() {
    passes(Scenario::Kill(Binding::AcemqRabbitmq)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn babel_rabbitmq_worker_killed_twice_loses_nothing() {
    passes(Scenario::Kill(Binding::BabelRabbitmq)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn babel_redis_worker_killed_twice_loses_nothing() {
    passes(Scenario::Kill(Binding::BabelRedis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn babel_laravel_worker_killed_twice_loses_nothing() {
    passes(Scenario::Kill(Binding::BabelLaravel)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acemq_through_a_cut_network_loses_nothing() {
    passes(Scenario::Cut(Binding::AcemqRabbitmq)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn babel_redis_through_a_cut_network_loses_nothing() {
    passes(Scenario::Cut(Binding::BabelRedis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn babel_rabbitmq_through_a_slow_network_loses_nothing() {
    passes(Scenario::Slow(Binding::BabelRabbitmq)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn babel_redis_through_a_restart_with_aof_loses_nothing() {
    passes(Scenario::Restart(Binding::BabelRedis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acemq_publishers_wait_out_a_memory_alarm() {
    passes(Scenario::MemoryAlarm(Binding::AcemqRabbitmq)).await;
}
