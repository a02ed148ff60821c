//! Property tests: write-then-read is the identity for any envelope, and reading never panics
//! on any header table.

use acemq::{Envelope, Itinerary, RoutingSlip};
use polyq_amqp::{FieldTable, FieldValue, Properties};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
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
    fn itinerary_parsing_never_panics(text in ".{0,64}") {
        let _ = Itinerary::parse(&text);
    }
}
