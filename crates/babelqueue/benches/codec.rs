//! The envelope's cost over plain JSON: `make` + `encode` + `decode` (and reading `data` back
//! into the payload type) against `serde_json` serialise + parse of the payload alone.
//!
//! `cargo bench -p babelqueue --bench codec` prints criterion's figures for both, then a last line
//! `ratio: R` measured side by side in alternating rounds (goal: at most 1.5).

use std::hint::black_box;
use std::time::{Duration, Instant};

use babelqueue::MakeOptions;
use criterion::{Criterion, criterion_group};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Order {
    order_id: u64,
    amount: f64,
    currency: String,
    note: String,
}

fn order() -> Order {
    Order {
        order_id: 1042,
        amount: 99.9,
        currency: "EUR".into(),
        note: "café ☕".into(),
    }
}

fn envelope_round_trip(payload: &Order) -> Order {
    let envelope = babelqueue::make(
        "urn:babel:orders:created",
        payload,
        MakeOptions::new().queue("orders"),
    )
    .expect("payload is an object");
    let body = envelope.encode().expect("envelope has a URN");
    let decoded = babelqueue::decode(body.as_bytes()).expect("canonical body decodes");
    decoded.envelope.data_as().expect("data is the payload")
}

fn plain_round_trip(payload: &Order) -> Order {
    let body = serde_json::to_string(payload).expect("payload serialises");
    serde_json::from_str(&body).expect("payload parses")
}

fn benches(c: &mut Criterion) {
    let payload = order();
    assert_eq!(envelope_round_trip(&payload), payload);
    let mut group = c.benchmark_group("codec");
    group.bench_function("envelope make+encode+decode", |b| {
        b.iter(|| envelope_round_trip(black_box(&payload)))
    });
    group.bench_function("serde_json payload only", |b| {
        b.iter(|| plain_round_trip(black_box(&payload)))
    });
    group.finish();
}

/// Median over alternating rounds of the per-iteration time ratio envelope / plain.
fn side_by_side_ratio() -> f64 {
    const ROUNDS: usize = 31;
    const ITERATIONS: u32 = 20_000;
    let payload = order();
    let time = |f: fn(&Order) -> Order| -> Duration {
        let start = Instant::now();
        for _ in 0..ITERATIONS {
            black_box(f(black_box(&payload)));
        }
        start.elapsed()
    };
    let mut ratios: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let plain = time(plain_round_trip);
            let envelope = time(envelope_round_trip);
            envelope.as_secs_f64() / plain.as_secs_f64()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[ROUNDS / 2]
}

criterion_group!(codec, benches);

fn main() {
    codec();
    Criterion::default().configure_from_args().final_summary();
    println!("ratio: {:.3}", side_by_side_ratio());
}
