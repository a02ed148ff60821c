//! `polyq bench acemq`, `polyq bench babel` and `polyq bench idempotency` (both families) on the
//! embedded broker (the last with the real PostgreSQL and Redis as stores), and `polyq bench dlq`
//! on RabbitMQ and Redis, run as the built binary with tiny counts: the output has every figure,
//! and every figure is a number. No timing is asserted.

use std::process::Command;

fn bench(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_polyq"))
        .arg("bench")
        .args(args)
        .env_remove("POLYQ_PYTHON")
        .output()
        .expect("polyq runs");
    assert!(
        output.status.success(),
        "polyq bench {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 stdout")
}

/// The number right after `label` on the line starting with `prefix`.
fn figure(output: &str, prefix: &str, label: &str) -> f64 {
    let line = output
        .lines()
        .find(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{output}"));
    let rest = line
        .split_once(label)
        .unwrap_or_else(|| panic!("no {label:?} in {line:?}"))
        .1;
    let number = rest
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("nothing after {label:?} in {line:?}"));
    number
        .trim_end_matches(',')
        .parse()
        .unwrap_or_else(|e| panic!("{number:?} in {line:?} is not a number: {e}"))
}

#[test]
fn bench_acemq_on_memory_prints_the_acemq_figures() {
    let output = bench(&[
        "acemq",
        "--url",
        "memory://bench-cli-acemq",
        "--messages",
        "300",
        "--slice",
        "100",
        "--latency-messages",
        "50",
    ]);
    assert!(figure(&output, "confirmed publish:", "acemq") > 0.0);
    assert!(figure(&output, "end to end:", "acemq") > 0.0);
    let p50 = figure(&output, "acemq publish-to-handler latency", "p50");
    let p99 = figure(&output, "acemq publish-to-handler latency", "p99");
    assert!(p99 >= p50, "p99 {p99} below p50 {p50}");
    assert!(
        !output.contains("ratio:"),
        "no raw side on memory://, so no ratio:\n{output}"
    );
}

#[test]
fn bench_babel_on_memory_prints_rates_and_the_acemq_ratio() {
    let output = bench(&[
        "babel",
        "--url",
        "memory://bench-cli-babel",
        "--messages",
        "200",
        "--compare-acemq",
    ]);
    for prefix in [
        "publish:",
        "consume:",
        "publish then consume:",
        "end-to-end:",
    ] {
        assert!(figure(&output, prefix, ":") > 0.0, "{prefix} in:\n{output}");
    }
    assert!(figure(&output, "acemq end-to-end:", ":") > 0.0);
    assert!(figure(&output, "ratio vs acemq:", ":") > 0.0);
}

#[test]
fn bench_babel_refuses_an_acemq_comparison_on_redis() {
    let output = Command::new(env!("CARGO_BIN_EXE_polyq"))
        .args([
            "bench",
            "babel",
            "--url",
            "redis://127.0.0.1:1/0",
            "--compare-acemq",
        ])
        .output()
        .expect("polyq runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--compare-acemq needs an AMQP broker"),
        "{stderr}"
    );
}

#[test]
fn bench_idempotency_prints_both_sides_and_the_ratio_for_each_store() {
    let consumers: [&[&str]; 3] = [
        &["--family", "acemq"],
        &["--family", "babelqueue", "--contract", "claiming"],
        &["--family", "babelqueue", "--contract", "seen-set"],
    ];
    for (store, db) in [
        ("postgres", polyq_testkit::postgres_url()),
        ("redis", polyq_testkit::redis_url()),
    ] {
        for consumer in consumers {
            let url = format!("memory://bench-cli-idempotency-{store}-{}", consumer.len());
            let mut args = vec![
                "idempotency",
                "--store",
                store,
                "--db",
                &db,
                "--url",
                &url,
                "--messages",
                "200",
                "--rounds",
                "1",
                "--concurrency",
                "8",
                "--prefetch",
                "50",
            ];
            args.extend_from_slice(consumer);
            let output = bench(&args);
            assert!(
                figure(&output, "round 1:", "plain consume") > 0.0,
                "{consumer:?}: {output}"
            );
            assert!(
                figure(&output, "round 1:", "idempotent") > 0.0,
                "{consumer:?}: {output}"
            );
            assert!(
                figure(&output, "ratio:", "ratio:") > 0.0,
                "{consumer:?}: {output}"
            );
        }
    }
}

#[test]
fn bench_dlq_times_every_step_on_both_brokers() {
    for url in [polyq_testkit::redis_url(), polyq_testkit::amqp_url()] {
        let output = bench(&[
            "dlq",
            "--url",
            &url,
            "--messages",
            "30,60",
            "--messages",
            "45",
            "--page",
            "10",
            "--rounds",
            "1",
        ]);
        for count in ["30", "45", "60"] {
            let row: Vec<f64> = output
                .lines()
                .find(|line| line.split_whitespace().next() == Some(count))
                .unwrap_or_else(|| panic!("no row for {count} messages in:\n{output}"))
                .split_whitespace()
                .map(|figure| {
                    figure
                        .parse()
                        .unwrap_or_else(|e| panic!("{figure:?} is not a number: {e}"))
                })
                .collect();
            // messages, page, read, decode, groups, render, console, console/read, groups,
            // delete, deleted
            assert_eq!(row.len(), 11, "{output}");
            assert!(row[1..8].iter().all(|figure| *figure >= 0.0), "{output}");
            assert_eq!(row[8], 10.0, "ten error patterns, ten groups: {output}");
            assert!(row[9] >= 0.0, "{output}");
            let messages: u64 = count.parse().unwrap();
            let of_one_pattern = (0..messages).filter(|n| n % 10 == 3).count() as f64;
            assert_eq!(
                row[10], of_one_pattern,
                "the messages 3, 13, 23, ... of one pattern deleted: {output}"
            );
        }
    }
}
