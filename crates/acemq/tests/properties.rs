//! Property tests: write-then-read is the identity for any envelope, reading never panics on
//! any header table, carried itineraries of every shape (well formed, of wrong types,
//! truncated) read as the Java reader reads them, and any delivery whose handler fails ends in
//! `.dlq` or `.parked` with its original bytes, on `memory://`, within a bounded time.

use acemq::{Envelope, Itinerary, RoutingSlip};
use polyq_amqp::{FieldTable, FieldValue, Properties};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use serde_json::{Map, Value};
use time::OffsetDateTime;

const NOW: OffsetDateTime = time::macros::datetime!(2026-03-04 05:06:07.089 UTC);

fn text() -> impl Strategy<Value = String> {
    // Any Unicode, empty included (empty means "not set").
    ".{0,12}"
}

fn instant() -> impl Strategy<Value = OffsetDateTime> {
    // Years 0001..9999, the range RFC 3339 can write, at any nanosecond.
    (-62_135_596_800_i64..253_402_300_799, 0..1_000_000_000_i64).prop_map(|(s, n)| {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(s) * 1_000_000_000 + i128::from(n))
            .expect("in range")
    })
}

fn step() -> impl Strategy<Value = String> {
    "[A-Za-z0-9.-]{1,8}"
}

fn route() -> impl Strategy<Value = RoutingSlip> {
    (vec(step(), 1..5), 0..8_u32, "[a-z0-9-]{1,36}")
        .prop_map(|(steps, position, run)| RoutingSlip::new(steps, position, run).expect("valid"))
}

fn scalar() -> impl Strategy<Value = FieldValue> {
    prop_oneof![
        any::<bool>().prop_map(FieldValue::Bool),
        any::<i8>().prop_map(FieldValue::I8),
        any::<u8>().prop_map(FieldValue::U8),
        any::<i16>().prop_map(FieldValue::I16),
        any::<u16>().prop_map(FieldValue::U16),
        any::<i32>().prop_map(FieldValue::I32),
        any::<u32>().prop_map(FieldValue::U32),
        any::<i64>().prop_map(FieldValue::I64),
        prop::num::f32::ANY.prop_map(FieldValue::F32),
        prop::num::f64::ANY.prop_map(FieldValue::F64),
        (any::<u8>(), any::<u32>()).prop_map(|(scale, value)| FieldValue::Decimal { scale, value }),
        vec(any::<u8>(), 0..12).prop_map(FieldValue::LongString),
        text().prop_map(FieldValue::from),
        "-?[0-9]{1,12}".prop_map(FieldValue::from),
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})"
            .prop_map(FieldValue::from),
        any::<u64>().prop_map(FieldValue::Timestamp),
        vec(any::<u8>(), 0..12).prop_map(FieldValue::ByteArray),
        Just(FieldValue::Void),
    ]
}

fn field_value() -> impl Strategy<Value = FieldValue> {
    scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(FieldValue::Array),
            btree_map(".{0,6}", inner, 0..4).prop_map(FieldValue::Table),
        ]
    })
}

fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,10}",
        prop::sample::select(vec![
            "x-acemq-id",
            "x-acemq-type",
            "x-acemq-version",
            "x-acemq-correlation",
            "x-acemq-causation",
            "x-acemq-attempt",
            "x-acemq-first-seen",
            "x-acemq-origin",
            "x-acemq-error",
            "x-acemq-claim",
            "x-acemq-route",
            "x-acemq-route-position",
            "x-acemq-route-id",
            "x-acemq-unknown",
            "acemq-replayed-from",
            "acemq-replayed-at",
            "acemq-replay-count",
            "acemq-routing-slip",
        ])
        .prop_map(str::to_owned),
    ]
}

fn header_table() -> impl Strategy<Value = FieldTable> {
    btree_map(header_name(), field_value(), 0..12)
}

fn envelope() -> impl Strategy<Value = Envelope> {
    let identity = (
        text(),
        text(),
        1..=i32::MAX as u32,
        text(),
        option::of(text()),
        1..=i32::MAX as u32,
        instant(),
    );
    let provenance = (
        option::of(text()),
        option::of(text()),
        option::of(text()),
        option::of(route()),
        option::of(text()),
        option::of(instant()),
        0..=i32::MAX as u32,
        btree_map(".{0,10}", field_value(), 0..6),
    );
    (identity, provenance).prop_map(
        |(
            (id, kind, version, correlation, causation, attempt, first_seen),
            (origin, error, claim, route, replayed_from, replayed_at, replay_count, headers),
        )| {
            let mut builder = Envelope::of(kind)
                .id(id)
                .version(version)
                .correlation_id(correlation)
                .attempt(attempt)
                .first_seen(first_seen)
                .route(route)
                .replay_count(replay_count)
                .headers(headers);
            for (value, set) in [
                (
                    causation,
                    acemq::EnvelopeBuilder::causation_id as fn(_, String) -> _,
                ),
                (origin, acemq::EnvelopeBuilder::origin),
                (error, acemq::EnvelopeBuilder::error),
                (claim, acemq::EnvelopeBuilder::claim),
                (replayed_from, acemq::EnvelopeBuilder::replayed_from),
            ] {
                if let Some(value) = value {
                    builder = set(builder, value);
                }
            }
            if let Some(at) = replayed_at {
                builder = builder.replayed_at(at);
            }
            builder.build_at(NOW).expect("valid envelope")
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn write_then_read_is_the_identity(envelope in envelope(), routing_key in text()) {
        let mut properties = Properties::default();
        envelope.write_properties(&mut properties);
        let read = Envelope::from_headers_at(
            &properties.headers,
            &routing_key,
            properties.message_id.as_deref(),
            NOW,
        );
        // Compared through Debug, where a NaN header value equals itself.
        prop_assert_eq!(format!("{read:?}"), format!("{envelope:?}"));
    }

    #[test]
    fn reading_never_panics_and_strips_every_reserved_header(
        table in header_table(),
        routing_key in text(),
        message_id in option::of(text()),
    ) {
        let envelope = Envelope::from_headers_at(&table, &routing_key, message_id.as_deref(), NOW);
        prop_assert!(envelope.headers().keys().all(|k| !acemq::headers::is_ace_header(k)));
        prop_assert!(envelope.version() >= 1 && envelope.attempt() >= 1);
        prop_assert!(!envelope.id().is_empty() && !envelope.message_type().is_empty());
        // Whatever was read writes out and reads back unchanged.
        let again = Envelope::from_headers_at(&envelope.to_headers(), "", None, NOW);
        prop_assert_eq!(format!("{again:?}"), format!("{envelope:?}"));
        let _ = envelope.itinerary();
    }

    #[test]
    fn a_well_formed_slip_reads_its_stops(slip in well_formed_slip(), spaced in any::<bool>()) {
        let text = render(&slip, spaced);
        let parsed = Itinerary::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        prop_assert_eq!(readable(&parsed), expected_stops(&slip).expect("well formed"));
        // What polyq writes reads back as the same itinerary.
        prop_assert_eq!(Itinerary::parse(&parsed.to_json()).unwrap(), parsed);
    }

    #[test]
    fn a_slip_of_any_shape_reads_as_java_reads_it(slip in any_slip(), spaced in any::<bool>()) {
        let text = render(&slip, spaced);
        match (Itinerary::parse(&text), expected_stops(&slip)) {
            (Ok(parsed), Some(expected)) => prop_assert_eq!(readable(&parsed), expected),
            (Err(acemq::Error::InvalidItinerary { .. }), None) => {}
            (got, expected) => prop_assert!(false, "{text}: read {got:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn a_truncated_slip_is_refused(
        slip in well_formed_slip(),
        spaced in any::<bool>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let text = render(&slip, spaced);
        // Every strict prefix of a JSON object is unfinished JSON.
        let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        let prefix = &text[..boundaries[cut.index(boundaries.len())]];
        prop_assert!(
            matches!(Itinerary::parse(prefix), Err(acemq::Error::InvalidItinerary { .. })),
            "{prefix}"
        );
    }
}

/// The four fields of a stop, as the reader gives them.
type StopFields = [String; 4];

const STOP_FIELDS: [&str; 4] = ["exchange", "routingKey", "name", "completedAt"];

/// A JSON value of any kind, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        // Binary fractions only: they print and parse back to the same number.
        (-1_000_000_i32..1_000_000).prop_map(|n| Value::from(f64::from(n) / 8.0)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..3).prop_map(Value::Array),
            btree_map("[a-zA-Z]{1,10}", inner, 0..3)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// A stop with string fields, each present or not, as every port writes one.
fn well_formed_stop() -> impl Strategy<Value = Value> {
    vec(option::of(text()), 4).prop_map(|fields| {
        let mut stop = Map::new();
        for (key, value) in STOP_FIELDS.iter().zip(fields) {
            if let Some(value) = value {
                stop.insert((*key).to_owned(), Value::String(value));
            }
        }
        Value::Object(stop)
    })
}

/// A stop whose fields are of any type, missing or null, beside keys no port writes; or not an
/// object at all.
fn any_stop() -> impl Strategy<Value = Value> {
    let field = prop_oneof![json_value(), "[a-zA-Z]{1,10}".prop_map(Value::String),];
    prop_oneof![
        4 => (vec(option::of(field), 4), btree_map("[a-z]{1,6}", json_value(), 0..2))
            .prop_map(|(fields, extra)| {
                let mut stop: Map<String, Value> = extra.into_iter().collect();
                for (key, value) in STOP_FIELDS.iter().zip(fields) {
                    if let Some(value) = value {
                        stop.insert((*key).to_owned(), value);
                    }
                }
                Value::Object(stop)
            }),
        1 => json_value(),
    ]
}

/// `{"steps": [...], "done": [...]}` with each list present or not.
fn well_formed_slip() -> impl Strategy<Value = Value> {
    (
        option::of(vec(well_formed_stop(), 0..4)),
        option::of(vec(well_formed_stop(), 0..4)),
    )
        .prop_map(|(steps, done)| slip_of(steps.map(Value::Array), done.map(Value::Array)))
}

/// A slip whose lists are arrays of stops of any shape, null, missing, or of a wrong type; or
/// a root that is not an object.
fn any_slip() -> impl Strategy<Value = Value> {
    let list = prop_oneof![
        3 => vec(any_stop(), 0..4).prop_map(Value::Array),
        1 => json_value(),
    ];
    prop_oneof![
        6 => (option::of(list.clone()), option::of(list))
            .prop_map(|(steps, done)| slip_of(steps, done)),
        1 => json_value(),
    ]
}

fn slip_of(steps: Option<Value>, done: Option<Value>) -> Value {
    let mut slip = Map::new();
    for (key, list) in [("steps", steps), ("done", done)] {
        if let Some(list) = list {
            slip.insert(key.to_owned(), list);
        }
    }
    Value::Object(slip)
}

fn render(slip: &Value, spaced: bool) -> String {
    if spaced {
        serde_json::to_string_pretty(slip).unwrap()
    } else {
        slip.to_string()
    }
}

/// What the Java reader makes of `slip` (steps, done), or `None` where it refuses it: the root
/// is not an object, or a list is neither an array nor null. A stop's field reads as its text
/// when it is a string, number or boolean, and as empty otherwise.
fn expected_stops(slip: &Value) -> Option<(Vec<StopFields>, Vec<StopFields>)> {
    let root = slip.as_object()?;
    let list = |key: &str| match root.get(key) {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Array(stops)) => Some(stops.iter().map(expected_stop).collect()),
        Some(_) => None,
    };
    Some((list("steps")?, list("done")?))
}

fn expected_stop(stop: &Value) -> StopFields {
    STOP_FIELDS.map(|field| match stop.get(field) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) => number.to_string(),
        Some(Value::Bool(flag)) => flag.to_string(),
        _ => String::new(),
    })
}

fn readable(itinerary: &Itinerary) -> (Vec<StopFields>, Vec<StopFields>) {
    let fields = |stops: &[acemq::Stop]| -> Vec<StopFields> {
        stops
            .iter()
            .map(|stop| {
                [
                    stop.exchange().to_owned(),
                    stop.routing_key().to_owned(),
                    stop.name().to_owned(),
                    stop.completed_at().to_owned(),
                ]
            })
            .collect()
    };
    (fields(itinerary.steps()), fields(itinerary.done()))
}

/// A body of any bytes: empty, not UTF-8, long text, or JSON.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        vec(any::<u8>(), 0..64),
        ".{0,400}".prop_map(String::into_bytes),
        json_value().prop_map(|value| serde_json::to_vec(&value).expect("JSON writes")),
    ]
}

/// A header table as any producer may send it: every AMQP field type, reserved names with
/// values of any type, text values longer than a short string holds, and often an
/// `x-acemq-id` of that length (which `message-id` cannot mirror).
fn delivered_headers() -> impl Strategy<Value = FieldTable> {
    let value = prop_oneof![
        4 => field_value(),
        1 => long_text(),
    ];
    (
        btree_map(header_name(), value, 0..12),
        option::of(long_text()),
    )
        .prop_map(|(mut headers, long_id)| {
            if let Some(id) = long_id {
                headers.insert("x-acemq-id".to_owned(), id);
            }
            headers
        })
}

fn long_text() -> impl Strategy<Value = FieldValue> {
    (256..700_usize).prop_map(|n| FieldValue::from("v".repeat(n).as_str()))
}

fn content_type() -> impl Strategy<Value = Option<String>> {
    option::of(
        prop::sample::select(vec![
            "application/json",
            "application/vnd.a+json",
            "text/plain",
            "application/octet-stream",
            "application/xml",
        ])
        .prop_map(str::to_owned),
    )
}

/// Publishes one delivery to a consumer whose handler always fails, and answers the queue it
/// ended in and its body.
async fn fail_once_and_set_aside(
    headers: FieldTable,
    content_type: Option<String>,
    body: Vec<u8>,
) -> (String, bytes::Bytes) {
    use acemq::retry::RetryPolicy;
    use futures_util::StreamExt as _;
    use polyq_amqp::{ConsumeOptions, OutgoingMessage, QueueSpec};

    let limit = std::time::Duration::from_secs(20);
    let mq = acemq::AceMq::connect(&format!(
        "memory://{}",
        polyq_testkit::unique_name("acemq-prop")
    ))
    .await
    .expect("memory:// connects");
    let queue = "orders";
    mq.client()
        .declare_queue(&QueueSpec::new(queue))
        .await
        .expect("declare");
    let consumer = mq
        .consumer::<Value>(queue)
        .retry(RetryPolicy::fixed(3, std::time::Duration::from_millis(1)).expect("a policy"))
        .start(|_| async { Err::<(), _>("always fails") })
        .await
        .expect("the consumer starts");
    let properties = Properties {
        content_type,
        headers,
        ..Properties::default()
    };
    mq.client()
        .publish(OutgoingMessage::new("", queue, properties, body))
        .await
        .expect("published")
        .await
        .expect("confirmed");
    let options = ConsumeOptions::default();
    let mut dlq = mq
        .client()
        .consume("orders.dlq", &options)
        .await
        .expect("consume .dlq");
    let mut parked = mq
        .client()
        .consume("orders.parked", &options)
        .await
        .expect("consume .parked");
    let ended = tokio::time::timeout(limit, async {
        tokio::select! {
            Some(delivery) = dlq.next() => ("orders.dlq", delivery),
            Some(delivery) = parked.next() => ("orders.parked", delivery),
        }
    })
    .await
    .expect("set aside within the limit");
    let (target, delivery) = (ended.0.to_owned(), ended.1.expect("a delivery"));
    assert!(consumer.drain(limit).await.is_clean());
    assert_eq!(
        mq.client()
            .inspect_queue(queue)
            .await
            .expect("inspect")
            .message_count,
        0,
        "nothing left behind in the source queue"
    );
    mq.close().await.expect("close");
    (target, delivery.body)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_failing_delivery_ends_set_aside_with_its_bytes(
        headers in delivered_headers(),
        content_type in content_type(),
        body in body(),
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let (target, set_aside) =
            runtime.block_on(fail_once_and_set_aside(headers, content_type, body.clone()));
        prop_assert_eq!(&set_aside[..], &body[..], "set aside into {} with its bytes", target);
    }
}
