//! Any bytes as an `acemq-routing-slip` header: parsing never panics, and an itinerary that
//! parses writes out and parses back unchanged.

#![no_main]

use acemq::Itinerary;
use libfuzzer_sys::fuzz_target;
use polyq_amqp::{FieldTable, FieldValue};

fuzz_target!(|data: &[u8]| {
    let mut headers = FieldTable::new();
    headers.insert(
        acemq::headers::ROUTING_SLIP.to_owned(),
        FieldValue::LongString(data.to_vec()),
    );
    if let Ok(Some(itinerary)) = Itinerary::from_headers(&headers) {
        let written = itinerary.to_json();
        assert_eq!(Itinerary::parse(&written).as_ref(), Ok(&itinerary));
        assert_eq!(Itinerary::parse(&written).map(|i| i.to_json()), Ok(written));
    }
});
