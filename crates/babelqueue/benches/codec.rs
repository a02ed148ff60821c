//! The envelope's cost over plain JSON: `make` + `encode` + `decode` (and reading `data` back into
//! the payload type) against `serde_json` serialise + parse of the payload alone, for the
//! reference payload `{"order_id":1042,"amount":99.9,"currency":"EUR","note":"café ☕"}` held as
//! a typed struct and as a `serde_json::Value`.
//!
//! `cargo bench -p babelqueue --bench codec` prints criterion's figures, then the ratios measured
//! side by side in alternating rounds (goal: at most 1.5), beside the floor: the same ratio for
//! the work every envelope must do and nothing else (`floor_round_trip`). With `POLYQ_PYTHON`
//! set to the peer virtualenv's interpreter (`scripts/python-peer`), the same run also times the
//! Python SDK's codec on the same payload (`scripts/bench-python-codec.py`) and prints the
//! speed-up.

use std::hint::black_box;
use std::time::Instant;

use babelqueue::MakeOptions;
use criterion::{Criterion, criterion_group};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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

fn dynamic() -> Value {
    serde_json::json!({"order_id": 1042, "amount": 99.9, "currency": "EUR", "note": "café ☕"})
}

fn envelope_round_trip<T: Serialize + serde::de::DeserializeOwned>(payload: &T) -> T {
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

/// The work no envelope can avoid, and nothing else: the contract's two new v4 ids and its
/// clock, the payload serialised as on the plain side, the frame written around it into one
/// buffer sized up front, then the bytes checked as UTF-8 (they come off the wire), every quote
/// of the body found with one vector search (the least a reader can do to find its members) and
/// the payload parsed from where the writer put it. It checks no key and no value of the frame,
/// looks for no escape or control character, and builds, copies and drops no envelope: a real
/// codec does all of that on top. Its ratio to the plain round trip is the lowest any envelope
/// can reach on the machine that measures it.
fn floor_round_trip<T: Serialize + serde::de::DeserializeOwned>(payload: &T) -> T {
    let (mut trace_id, mut id) = (uuid::Uuid::encode_buffer(), uuid::Uuid::encode_buffer());
    let trace_id = uuid::Uuid::new_v4()
        .hyphenated()
        .encode_lower(&mut trace_id);
    let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut id);
    let created_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_millis();
    let mut body = Vec::with_capacity(black_box(300));
    body.extend_from_slice(br#"{"job":"urn:babel:orders:created","trace_id":""#);
    body.extend_from_slice(trace_id.as_bytes());
    body.extend_from_slice(br#"","data":"#);
    let data_start = body.len();
    serde_json::to_writer(&mut body, payload).expect("payload serialises");
    let data_end = body.len();
    body.extend_from_slice(br#","meta":{"id":""#);
    body.extend_from_slice(id.as_bytes());
    body.extend_from_slice(br#"","queue":"orders","lang":"rust","schema_version":1,"created_at":"#);
    body.extend_from_slice(itoa::Buffer::new().format(created_at).as_bytes());
    body.extend_from_slice(br#"},"attempts":0}"#);
    let body = black_box(body);
    let text = simdutf8::basic::from_utf8(&body).expect("the body is UTF-8");
    black_box(memchr::memchr_iter(b'"', &body).count());
    serde_json::from_str(&text[data_start..data_end]).expect("payload parses")
}

fn plain_round_trip<T: Serialize + serde::de::DeserializeOwned>(payload: &T) -> T {
    let body = serde_json::to_string(payload).expect("payload serialises");
    serde_json::from_str(&body).expect("payload parses")
}

fn benches(c: &mut Criterion) {
    let (typed, value) = (order(), dynamic());
    assert_eq!(envelope_round_trip(&typed), typed);
    assert_eq!(envelope_round_trip(&value), value);
    let mut group = c.benchmark_group("codec");
    group.bench_function("envelope make+encode+decode, typed payload", |b| {
        b.iter(|| envelope_round_trip(black_box(&typed)))
    });
    group.bench_function("serde_json payload only, typed", |b| {
        b.iter(|| plain_round_trip(black_box(&typed)))
    });
    group.bench_function("envelope make+encode+decode, Value payload", |b| {
        b.iter(|| envelope_round_trip(black_box(&value)))
    });
    group.bench_function("serde_json payload only, Value", |b| {
        b.iter(|| plain_round_trip(black_box(&value)))
    });
    let made = babelqueue::make(
        "urn:babel:orders:created",
        &typed,
        MakeOptions::new().queue("orders"),
    )
    .expect("payload is an object");
    let body = made.encode().expect("envelope has a URN");
    let decoded = babelqueue::decode(body.as_bytes())
        .expect("canonical body decodes")
        .envelope;
    group.bench_function("piece: make", |b| {
        b.iter(|| {
            babelqueue::make(
                "urn:babel:orders:created",
                black_box(&typed),
                MakeOptions::new().queue("orders"),
            )
        })
    });
    group.bench_function("piece: encode", |b| b.iter(|| black_box(&made).encode()));
    group.bench_function("piece: decode", |b| {
        b.iter(|| babelqueue::decode(black_box(body.as_bytes())))
    });
    group.bench_function("piece: data_as", |b| {
        b.iter(|| black_box(&decoded).data_as::<Order>())
    });
    group.bench_function("piece: serde_json body to Value", |b| {
        b.iter(|| serde_json::from_str::<Value>(black_box(&body)))
    });
    group.finish();
}

/// Medians over alternating rounds.
struct SideBySide {
    /// Envelope time / plain time.
    ratio: f64,
    /// Floor time / plain time: the lowest ratio any envelope can reach here.
    floor: f64,
    /// The envelope's microseconds per round trip.
    envelope_us: f64,
}

fn side_by_side<T: Serialize + serde::de::DeserializeOwned>(payload: &T) -> SideBySide {
    const ROUNDS: usize = 31;
    const ITERATIONS: u32 = 20_000;
    let time = |f: fn(&T) -> T| -> f64 {
        let start = Instant::now();
        for _ in 0..ITERATIONS {
            black_box(f(black_box(payload)));
        }
        start.elapsed().as_secs_f64()
    };
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[ROUNDS / 2]
    };
    let (mut ratios, mut floors, mut envelope_us) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let plain = time(plain_round_trip::<T>);
        let envelope = time(envelope_round_trip::<T>);
        let floor = time(floor_round_trip::<T>);
        ratios.push(envelope / plain);
        floors.push(floor / plain);
        envelope_us.push(envelope * 1e6 / f64::from(ITERATIONS));
    }
    SideBySide {
        ratio: median(ratios),
        floor: median(floors),
        envelope_us: median(envelope_us),
    }
}

/// The Python SDK's microseconds per make + encode + decode, when an interpreter is configured.
fn python_envelope_us() -> Option<f64> {
    let python = std::env::var("POLYQ_PYTHON").ok()?;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/bench-python-codec.py"
    );
    let output = std::process::Command::new(python)
        .arg(script)
        .output()
        .ok()?;
    if !output.status.success() {
        eprintln!(
            "python codec benchmark failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        return None;
    }
    let report: Value = serde_json::from_slice(&output.stdout).ok()?;
    println!("python: {}", String::from_utf8_lossy(&output.stdout).trim());
    report["envelope_us"].as_f64()
}

criterion_group!(codec, benches);

/// `codec count <typed|value> <side> <n>` runs `n` times one side and nothing else, for counting
/// instructions under `valgrind --tool=callgrind` (repeatable on a loaded machine): the
/// difference between two counts of different `n`, divided, is the cost of one run. Sides: the
/// round trips `envelope`, `plain` and `floor`; the pieces `make`, `encode`, `decode`; and `parse`,
/// `serde_json` checking the same body without building anything (what a general parser spends).
fn count(args: &[String]) {
    let [payload, side, n] = args else {
        panic!("usage: codec count <typed|value> <side> <n>");
    };
    let n: u32 = n.parse().expect("n is a count");
    fn run<T: Serialize + serde::de::DeserializeOwned>(payload: &T, side: &str, n: u32) {
        let make = || {
            babelqueue::make(
                "urn:babel:orders:created",
                black_box(payload),
                MakeOptions::new().queue("orders"),
            )
            .expect("payload is an object")
        };
        let made = make();
        let body = made.encode().expect("envelope has a URN");
        for _ in 0..n {
            match side {
                "envelope" => drop(black_box(envelope_round_trip(black_box(payload)))),
                "plain" => drop(black_box(plain_round_trip(black_box(payload)))),
                "floor" => drop(black_box(floor_round_trip(black_box(payload)))),
                "make" => drop(black_box(make())),
                "encode" => drop(black_box(black_box(&made).encode())),
                "decode" => drop(black_box(babelqueue::decode(black_box(body.as_bytes())))),
                "parse" => drop(black_box(serde_json::from_str::<serde::de::IgnoredAny>(
                    black_box(&body),
                ))),
                other => panic!("unknown side {other}"),
            }
        }
    }
    match payload.as_str() {
        "typed" => run(&order(), side, n),
        "value" => run(&dynamic(), side, n),
        other => panic!("unknown payload {other}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("count") {
        count(&args[1..]);
        return;
    }
    codec();
    Criterion::default().configure_from_args().final_summary();
    let (typed, value) = (side_by_side(&order()), side_by_side(&dynamic()));
    println!(
        "rust envelope make+encode+decode: {:.3} µs typed, {:.3} µs Value",
        typed.envelope_us, value.envelope_us
    );
    if let Some(python_us) = python_envelope_us() {
        println!(
            "python speed-up: {:.1}x (Value payload, the Python SDK's dict)",
            python_us / value.envelope_us
        );
    }
    println!(
        "floor (the contract's unavoidable work alone): {:.2} typed payload, {:.2} Value payload",
        typed.floor, value.floor
    );
    println!(
        "ratio: {:.2} typed payload, {:.2} Value payload",
        typed.ratio, value.ratio
    );
}
