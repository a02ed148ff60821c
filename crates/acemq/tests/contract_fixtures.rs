//! `contract-fixtures.json`: retry arithmetic, naming, rung arguments and the declared topology,
//! every section driven from the file and every value derived twice (once by the library, once
//! by arithmetic written here), as the upstream conformance tests do.

use std::path::PathBuf;
use std::time::Duration;

use acemq::retry::{RetryDecision, RetryPolicy, WaitPlace};
use acemq::topology::{
    self, DEAD_LETTER_EXCHANGE, DeclaredBy, QueueType, RETRY_EXCHANGE, SourceQueue, Topology,
    TopologyPlan,
};
use polyq_amqp::{ExchangeKind, FieldTable, FieldValue};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::Value;

fn fixtures() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/acemq/contract-fixtures.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("vendored contract fixtures"))
        .expect("contract fixtures are JSON")
}

fn ms(value: &Value) -> Duration {
    Duration::from_millis(value.as_u64().expect("milliseconds"))
}

fn ms_list(value: &Value) -> Vec<Duration> {
    value.as_array().expect("array").iter().map(ms).collect()
}

fn rng() -> StdRng {
    StdRng::seed_from_u64(7)
}

#[test]
fn constants() {
    let f = fixtures();
    assert_eq!(f["generatedBy"], "acemq-java-amqp ContractFixtures");
    assert_eq!(
        ms(&f["defaultBrokerWaitThresholdMillis"]),
        acemq::retry::DEFAULT_BROKER_WAIT_THRESHOLD
    );
    assert_eq!(f["deadLetterExchange"], DEAD_LETTER_EXCHANGE);
    assert_eq!(f["retryExchange"], RETRY_EXCHANGE);
}

#[test]
fn retry_schedules_from_their_policy_text() {
    let f = fixtures();
    let schedules = f["retrySchedules"].as_array().unwrap();
    assert_eq!(schedules.len(), 5);
    let mut rows = 0;
    for entry in schedules {
        let name = entry["name"].as_str().unwrap();
        let policy: RetryPolicy = entry["how"].as_str().unwrap().parse().unwrap();
        let max_attempts = entry["maxAttempts"].as_u64().unwrap() as u32;
        assert_eq!(policy.max_attempts(), max_attempts, "{name}");
        assert_eq!(
            policy.schedule(),
            ms_list(&entry["scheduleMillis"]),
            "{name}"
        );
        assert_eq!(policy.schedule().len() as u32, max_attempts - 1, "{name}");
        assert_eq!(
            policy.jitter_factor(),
            entry["jitterFactor"].as_f64().unwrap(),
            "{name}"
        );
        assert_eq!(
            policy.broker_wait_threshold(),
            ms(&entry["brokerWaitThresholdMillis"]),
            "{name}"
        );
        assert_eq!(
            policy.max_message_age().is_some(),
            entry["hasMaxMessageAge"].as_bool().unwrap(),
            "{name}"
        );
        assert_eq!(
            policy.max_message_age().unwrap_or_default(),
            ms(&entry["maxMessageAgeMillis"]),
            "{name}"
        );
        assert_eq!(
            policy.broker_rungs(),
            ms_list(&entry["brokerRungDelaysMillis"]),
            "{name}"
        );

        // Second derivation: doubling as arithmetic, rungs from the threshold rule.
        if name.starts_with("exponential") {
            let ceiling = *policy.schedule().iter().max().unwrap();
            for pair in policy.schedule().windows(2) {
                assert_eq!(pair[1], (pair[0] * 2).min(ceiling), "{name}");
            }
        }
        let threshold = policy.broker_wait_threshold();
        let mut rungs: Vec<Duration> = Vec::new();
        for &d in policy.schedule() {
            if !threshold.is_zero() && !d.is_zero() && d >= threshold && !rungs.contains(&d) {
                rungs.push(d);
            }
        }
        assert_eq!(rungs, ms_list(&entry["brokerRungDelaysMillis"]), "{name}");

        for row in entry["decisions"].as_array().unwrap() {
            rows += 1;
            let attempt = row["attempt"].as_u64().unwrap() as u32;
            let age = Some(ms(&row["messageAgeMillis"]));
            let retries = row["retries"].as_bool().unwrap();
            assert_eq!(policy.retries(attempt, age), retries, "{name} {row}");
            match policy.decide(attempt, age, &mut rng()) {
                RetryDecision::Retry(wait) => {
                    assert!(retries, "{name} {row}");
                    let index = (attempt as usize - 1).min(policy.schedule().len() - 1);
                    assert_eq!(wait.scheduled(), policy.schedule()[index], "{name} {row}");
                    match wait.place() {
                        WaitPlace::Broker => assert_eq!(wait.delay(), wait.scheduled()),
                        WaitPlace::Consumer => {
                            let (low, high) = policy.jitter_bounds(wait.scheduled());
                            assert!((low..=high).contains(&wait.delay()), "{name} {row}");
                        }
                    }
                }
                RetryDecision::GiveUp(_) => assert!(!retries, "{name} {row}"),
            }
        }
    }
    assert_eq!(rows, 29);
}

#[test]
fn max_message_age() {
    let section = &fixtures()["maxMessageAge"];
    assert_eq!(section["defaultMillis"], 0);
    assert_eq!(section["zeroMeansNoLimit"], true);
    assert!(RetryPolicy::none().max_message_age().is_none());
    for how in ["exponential(5, 1s, 24h)", "fixed(4, 30s)", "none()"] {
        let policy: RetryPolicy = how.parse().unwrap();
        assert_eq!(
            policy.max_message_age(),
            None,
            "{how}: only giveUpAfter sets a limit"
        );
    }
    let base: RetryPolicy = "exponential(5, 1s, 24h)".parse().unwrap();
    let cases = section["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 10);
    for case in cases {
        let limit = ms(&case["maxMessageAgeMillis"]);
        let age = ms(&case["messageAgeMillis"]);
        let policy = base.clone().give_up_after(limit);
        let expected = case["retries"].as_bool().unwrap();
        assert_eq!(policy.retries(1, Some(age)), expected, "{case}");
        // Second derivation: the rule as stated.
        assert_eq!(limit.is_zero() || age < limit, expected, "{case}");
        assert_eq!(
            policy.retries(1, None),
            section["unknownAgeRetries"].as_bool().unwrap()
        );
    }
}

#[test]
fn jitter() {
    let section = &fixtures()["jitter"];
    let policy_name = section["policy"].as_str().unwrap();
    let how = fixtures()["retrySchedules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == policy_name)
        .unwrap()["how"]
        .as_str()
        .unwrap()
        .to_owned();
    let policy: RetryPolicy = how.parse().unwrap();
    let factor = section["factor"].as_f64().unwrap();
    assert_eq!(policy.jitter_factor(), factor);
    assert_eq!(section["appliesInBothDirections"], true);
    let (min_mult, max_mult) = (
        section["minMultiplier"].as_f64().unwrap(),
        section["maxMultiplier"].as_f64().unwrap(),
    );
    assert!((min_mult - (1.0 - factor)).abs() < 1e-9);
    assert!((max_mult - (1.0 + factor)).abs() < 1e-9);
    let floor = ms(&section["flooredAtMillis"]);
    assert_eq!(floor, acemq::retry::MIN_CONSUMER_WAIT);

    let mut rng = rng();
    let (mut below, mut above) = (false, false);
    for &delay in policy.schedule() {
        let (low, high) = policy.jitter_bounds(delay);
        assert_eq!(low, delay.mul_f64(min_mult).max(floor));
        assert_eq!(high, delay.mul_f64(max_mult).max(floor));
        for _ in 0..200 {
            let waited = policy.jittered(delay, &mut rng);
            assert!(
                waited >= low && waited <= high && waited >= floor,
                "{delay:?}: {waited:?}"
            );
            below |= waited < delay;
            above |= waited > delay;
        }
    }
    assert!(below && above, "jitter applies in both directions");
    assert_eq!(policy.jittered(Duration::ZERO, &mut rng), floor);

    // Broker waits are never jittered: they name a rung queue.
    assert_eq!(section["appliesToBrokerWaits"], false);
    let capped: RetryPolicy = "exponential(6, 10s, 1m)".parse().unwrap();
    for attempt in 1..6 {
        if let RetryDecision::Retry(wait) = capped.decide(attempt, None, &mut rng)
            && wait.place() == WaitPlace::Broker
        {
            assert_eq!(wait.delay(), wait.scheduled());
        }
    }
}

#[test]
fn broker_wait_threshold() {
    let section = &fixtures()["brokerWaitThreshold"];
    assert_eq!(
        ms(&section["defaultMillis"]),
        acemq::retry::DEFAULT_BROKER_WAIT_THRESHOLD
    );
    let cases = section["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 30);
    for case in cases {
        let threshold = ms(&case["thresholdMillis"]);
        let delay = ms(&case["delayMillis"]);
        let expected = case["waitsInBroker"].as_bool().unwrap();
        let policy = RetryPolicy::none().wait_in_broker_from(threshold);
        assert_eq!(policy.waits_in_broker(delay), expected, "{case}");
        assert_eq!(
            !threshold.is_zero() && !delay.is_zero() && delay >= threshold,
            expected,
            "{case}"
        );
        // The same rule seen through a whole decision.
        let fixed = RetryPolicy::fixed(2, delay)
            .unwrap()
            .wait_in_broker_from(threshold);
        if let RetryDecision::Retry(wait) = fixed.decide(1, None, &mut rng()) {
            assert_eq!(wait.place() == WaitPlace::Broker, expected, "{case}");
        } else {
            panic!("{case}: fixed(2, d) retries its first attempt");
        }
    }
}

/// Rung suffixes rendered independently of the library: the largest whole unit.
fn second_rendering(delay: Duration) -> String {
    let millis = delay.as_millis();
    if millis >= 3_600_000 && millis.is_multiple_of(3_600_000) {
        format!("{}h", millis / 3_600_000)
    } else if millis >= 60_000 && millis.is_multiple_of(60_000) {
        format!("{}m", millis / 60_000)
    } else if millis >= 1000 && millis.is_multiple_of(1000) {
        format!("{}s", millis / 1000)
    } else {
        format!("{millis}ms")
    }
}

#[test]
fn naming() {
    let section = &fixtures()["naming"];
    let queue = section["queue"].as_str().unwrap();
    assert_eq!(
        topology::dead_letter_queue(queue),
        section["deadLetterQueue"]
    );
    assert_eq!(topology::parked_queue(queue), section["parkedQueue"]);
    let retry = section["retryQueues"].as_array().unwrap();
    assert_eq!(retry.len(), 6);
    for entry in retry {
        let delay = ms(&entry["delayMillis"]);
        assert_eq!(
            topology::retry_queue(queue, delay),
            entry["queue"],
            "{entry}"
        );
        assert_eq!(
            format!("{queue}.retry.{}", second_rendering(delay)),
            entry["queue"],
            "{entry}"
        );
    }
    // The recorded disagreement: Java (followed here) renders 500 ms as `500ms`, where Go,
    // Python and Ruby render `0s`.
    assert!(
        section["subSecondDisagreement"]
            .as_str()
            .unwrap()
            .contains("500ms")
    );
    assert_eq!(
        topology::retry_queue(queue, Duration::from_millis(500)),
        "orders.new.retry.500ms"
    );
    assert_ne!(
        topology::retry_queue(queue, Duration::from_millis(500)),
        "orders.new.retry.0s"
    );
}

fn arguments_json(table: &FieldTable) -> Value {
    Value::Object(
        table
            .iter()
            .filter(|(name, _)| name.as_str() != topology::QUEUE_TYPE_ARGUMENT)
            .map(|(name, value)| {
                let json = match value {
                    FieldValue::LongString(_) => Value::from(value.as_str().unwrap()),
                    other => Value::from(other.as_i64().expect("integer argument")),
                };
                (name.clone(), json)
            })
            .collect(),
    )
}

#[test]
fn rung_arguments() {
    for entry in fixtures()["rungArguments"].as_array().unwrap() {
        let delay = ms(&entry["delayMillis"]);
        let arguments = topology::rung_arguments("orders.new", delay);
        assert_eq!(arguments_json(&arguments), entry["arguments"], "{entry}");
        assert_eq!(arguments.len(), 3);
        assert_eq!(arguments["x-message-ttl"].type_letter(), 'l');
        assert_eq!(topology::retry_queue("orders.new", delay), entry["queue"]);
    }
}

fn fixture_topology_plan() -> TopologyPlan {
    Topology::new()
        .exchange("orders", ExchangeKind::Topic)
        .queue(SourceQueue::new("orders.new").with_dead_letter())
        .bind("orders.new", "orders", "order.*")
        .consumer(
            "orders.new",
            "exponential(6, 10s, 5m)".parse::<RetryPolicy>().unwrap(),
        )
        .plan()
        .unwrap()
}

#[test]
fn declared_topology() {
    let section = &fixtures()["topology"];
    let policy: RetryPolicy = "exponential(6, 10s, 5m)".parse().unwrap();
    assert_eq!(policy.schedule(), ms_list(&section["policyScheduleMillis"]));
    assert_eq!(
        policy.broker_rungs(),
        ms_list(&section["policyRungDelaysMillis"])
    );
    let plan = fixture_topology_plan();

    let exchanges: Vec<Value> = plan
        .exchanges
        .iter()
        .map(|e| {
            serde_json::json!({
                "name": e.item.name,
                "type": e.item.kind.as_str(),
                "durable": e.item.durable,
                "declaredBy": e.declared_by.as_str(),
            })
        })
        .collect();
    assert_eq!(Value::from(exchanges), section["exchanges"]);

    let queues: Vec<Value> = plan
        .queues
        .iter()
        .map(|q| {
            serde_json::json!({
                "name": q.item.name,
                "type": QueueType::of(&q.item).as_str(),
                "durable": q.item.durable,
                "arguments": arguments_json(&q.item.arguments),
                "declaredBy": q.declared_by.as_str(),
            })
        })
        .collect();
    assert_eq!(Value::from(queues), section["queues"]);

    let bindings: Vec<Value> = plan
        .bindings
        .iter()
        .map(|b| {
            serde_json::json!({
                "queue": b.item.queue,
                "exchange": b.item.exchange,
                "routingKey": b.item.routing_key,
                "declaredBy": b.declared_by.as_str(),
            })
        })
        .collect();
    assert_eq!(Value::from(bindings), section["bindings"]);

    // A consumer never declares the source queue.
    let consumer = TopologyPlan::for_consumer("orders.new", &policy);
    assert!(consumer.queues.iter().all(|q| q.item.name != "orders.new"));
    assert!(
        consumer
            .queues
            .iter()
            .all(|q| q.declared_by == DeclaredBy::Consumer)
    );
}

#[test]
fn queue_type_defaults() {
    let section = &fixtures()["queueTypeDefaults"];
    let type_of = |queue: SourceQueue| {
        let plan = Topology::new().queue(queue).plan().unwrap();
        QueueType::of(&plan.queues[0].item).as_str()
    };
    assert_eq!(type_of(SourceQueue::new("q")), section["sourceQueue"]);
    assert_eq!(
        type_of(SourceQueue::new("q").with_dead_letter()),
        section["sourceQueueWithDeadLetter"]
    );
    assert_eq!(
        type_of(SourceQueue::new("q").classic()),
        section["explicitClassicQueue"]
    );
    assert_eq!(
        type_of(SourceQueue::new("q").classic().with_dead_letter()),
        section["explicitClassicQueueWithDeadLetter"]
    );
    let plan = fixture_topology_plan();
    let type_named = |name: &str| {
        let q = plan.queues.iter().find(|q| q.item.name == name).unwrap();
        QueueType::of(&q.item).as_str()
    };
    assert_eq!(type_named("orders.new.dlq"), section["deadLetterQueue"]);
    assert_eq!(type_named("orders.new.parked"), section["parkedQueue"]);
    assert_eq!(type_named("orders.new.retry.40s"), section["retryRung"]);
    assert_eq!(section["durability"]["everyDeclaredQueueIsDurable"], true);
    assert!(
        plan.queues
            .iter()
            .all(|q| q.item.durable && !q.item.exclusive && !q.item.auto_delete)
    );
}
