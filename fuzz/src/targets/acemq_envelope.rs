//! The AceMQ envelope read from a delivery's headers: never panics, lets no reserved header
//! through to the application headers, and an envelope written back to headers reads as itself.

use crate::{Delivery, now};
use acemq::Envelope;
use acemq::headers::is_ace_header;

/// The target's checks on one input: panics when one fails.
pub fn check(data: &[u8]) {
    let Some(delivery) = Delivery::read(data) else {
        return;
    };
    let envelope = Envelope::from_headers_at(
        &delivery.headers,
        &delivery.routing_key,
        delivery.message_id.as_deref(),
        now(),
    );
    assert!(
        envelope.headers().keys().all(|name| !is_ace_header(name)),
        "a reserved header reached the application headers"
    );
    let again = Envelope::from_headers_at(
        &envelope.to_headers(),
        &delivery.routing_key,
        Some(envelope.id()),
        now(),
    );
    // Compared as text: a NaN header is never equal to itself.
    assert_eq!(
        format!("{envelope:?}"),
        format!("{again:?}"),
        "an envelope written to headers reads back different"
    );
    let _ = envelope.itinerary();
    let _ = envelope.age_at(now());
    let _ = envelope.next_attempt();
}
