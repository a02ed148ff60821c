//! `polyq babel redrive` that stops part-way still prints the report of what it settled, run as
//! the built binary against Redis.

mod common;
use common::{polyq, success_lines};
use polyq_testkit::brokers::DeleteRedisKeys;

/// Every publish to a target that is a Redis string fails (WRONGTYPE): each job is restored,
/// reported as failed, and the command fails with the cause after printing the report.
#[tokio::test]
async fn a_stopped_redrive_prints_its_report_and_fails() {
    let url = polyq_testkit::redis_url();
    let queue = polyq_testkit::unique_name("polyq.cli.redrive-stopped");
    let dlq = format!("{queue}.dlq");
    let target = format!("{queue}.string");
    let _keys = DeleteRedisKeys::new(&url, [&queue]);
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("SET")
        .arg(&target)
        .arg("not a list")
        .query_async::<()>(&mut connection)
        .await
        .unwrap();
    let publish = [
        "babel",
        "publish",
        "--url",
        &url,
        "--queue",
        &dlq,
        "--urn",
        "urn:babel:orders:created",
        "--data",
        "{}",
        "--count",
        "3",
    ];
    success_lines(polyq(&publish), &publish);

    let redrive = [
        "babel", "redrive", "--url", &url, "--dlq", &dlq, "--to", &target,
    ];
    let output = polyq(&redrive);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("stopped after 0 redriven, 0 restored and 3 failed")
            && stderr.contains("WRONGTYPE"),
        "the cause follows the summary: {stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (&report["redriven"], &report["skipped"], &report["failed"]),
        (&0.into(), &0.into(), &3.into()),
        "{report}"
    );
    assert!(
        report["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|item| item["action"] == "failed" && item["redriven"] == false),
        "{report}"
    );
    let depth: i64 = redis::cmd("LLEN")
        .arg(&dlq)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(depth, 3, "every job restored");
}
