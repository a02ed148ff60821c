//! Any header table, routing key and message id: reading never panics, never lets a reserved
//! header through, and what it read writes out and reads back unchanged.

#![no_main]

use acemq::Envelope;
use acemq::time::OffsetDateTime;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use polyq_amqp::{FieldTable, FieldValue};

const NAMES: &[&str] = &[
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
    "acemq-replayed-from",
    "acemq-replayed-at",
    "acemq-replay-count",
    "acemq-routing-slip",
];

fn value(u: &mut Unstructured, depth: u8) -> Result<FieldValue> {
    let variants = if depth == 0 { 16 } else { 18 };
    Ok(match u.int_in_range(0..=variants - 1)? {
        0 => FieldValue::Bool(u.arbitrary()?),
        1 => FieldValue::I8(u.arbitrary()?),
        2 => FieldValue::U8(u.arbitrary()?),
        3 => FieldValue::I16(u.arbitrary()?),
        4 => FieldValue::U16(u.arbitrary()?),
        5 => FieldValue::I32(u.arbitrary()?),
        6 => FieldValue::U32(u.arbitrary()?),
        7 => FieldValue::I64(u.arbitrary()?),
        8 => FieldValue::F32(u.arbitrary()?),
        9 => FieldValue::F64(u.arbitrary()?),
        10 => FieldValue::Decimal {
            scale: u.arbitrary()?,
            value: u.arbitrary()?,
        },
        11 => FieldValue::LongString(u.arbitrary()?),
        12 => FieldValue::from(u.arbitrary::<&str>()?),
        13 => FieldValue::Timestamp(u.arbitrary()?),
        14 => FieldValue::ByteArray(u.arbitrary()?),
        15 => FieldValue::Void,
        16 => FieldValue::Array(
            (0..u.int_in_range(0..=3)?)
                .map(|_| value(u, depth - 1))
                .collect::<Result<_>>()?,
        ),
        _ => FieldValue::Table(table(u, depth - 1)?),
    })
}

fn table(u: &mut Unstructured, depth: u8) -> Result<FieldTable> {
    let mut table = FieldTable::new();
    for _ in 0..u.int_in_range(0..=12)? {
        let name = if u.arbitrary()? {
            (*u.choose(NAMES)?).to_owned()
        } else {
            u.arbitrary::<String>()?
        };
        table.insert(name, value(u, depth)?);
    }
    Ok(table)
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let (Ok(headers), Ok(routing_key), Ok(message_id)) = (
        table(&mut u, 2),
        u.arbitrary::<String>(),
        u.arbitrary::<Option<String>>(),
    ) else {
        return;
    };
    let now = OffsetDateTime::UNIX_EPOCH;
    let envelope = Envelope::from_headers_at(&headers, &routing_key, message_id.as_deref(), now);
    assert!(
        envelope
            .headers()
            .keys()
            .all(|name| !acemq::headers::is_ace_header(name))
    );
    let again = Envelope::from_headers_at(&envelope.to_headers(), "", None, now);
    // Compared through Debug, where a NaN header value equals itself.
    assert_eq!(format!("{again:?}"), format!("{envelope:?}"));
    let _ = envelope.itinerary();
});
