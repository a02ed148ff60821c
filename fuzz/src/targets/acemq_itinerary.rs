//! The carried itinerary (`acemq-routing-slip`): never panics on any text or header type, and
//! an itinerary written as JSON or to headers reads as itself.

use crate::now;
use acemq::Itinerary;
use acemq::headers::ROUTING_SLIP;
use polyq_amqp::{FieldTable, FieldValue};

/// The target's checks on one input: panics when one fails.
pub fn check(data: &[u8]) {
    let header = |value: FieldValue| {
        let mut table = FieldTable::new();
        table.insert(ROUTING_SLIP.to_owned(), value);
        Itinerary::from_headers(&table)
    };
    // Ports write the header as a long string or a byte array; both read alike.
    let from_header = header(FieldValue::LongString(data.to_vec()));
    assert_eq!(from_header, header(FieldValue::ByteArray(data.to_vec())));
    let Ok(text) = std::str::from_utf8(data) else {
        assert!(from_header.is_err(), "a header that is not UTF-8 was read");
        return;
    };
    let parsed = Itinerary::parse(text);
    assert_eq!(from_header.ok().flatten(), parsed.as_ref().ok().cloned());
    let Ok(itinerary) = parsed else {
        return;
    };
    let json = itinerary.to_json();
    assert_eq!(
        Itinerary::parse(&json).ok().as_ref(),
        Some(&itinerary),
        "an itinerary written as JSON reads back different: {json}"
    );
    assert_eq!(itinerary.to_json(), json, "writing is not a fixed point");
    let mut written = FieldTable::new();
    itinerary.write_headers(&mut written);
    assert_eq!(
        Itinerary::from_headers(&written).ok().flatten().as_ref(),
        Some(&itinerary)
    );
    let _ = itinerary.next();
    let advanced = itinerary.advance(now());
    assert!(advanced.steps().len() <= itinerary.steps().len());
}
