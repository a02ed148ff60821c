//! The declared-pipeline routing slip read from headers: never panics, a slip written back to
//! headers reads as itself, and advancing it stays in bounds.

use crate::Delivery;
use acemq::RoutingSlip;
use polyq_amqp::FieldTable;

/// The target's checks on one input: panics when one fails.
pub fn check(data: &[u8]) {
    let Some(delivery) = Delivery::read(data) else {
        return;
    };
    let Some(slip) = RoutingSlip::from_headers(&delivery.headers) else {
        return;
    };
    let mut written = FieldTable::new();
    slip.write_headers(&mut written);
    assert_eq!(
        RoutingSlip::from_headers(&written).as_ref(),
        Some(&slip),
        "a routing slip written to headers reads back different"
    );
    let _ = (slip.current(), slip.next(), slip.is_finished());
    let advanced = slip.advance();
    assert_eq!(advanced.run_id(), slip.run_id());
    let _ = (advanced.current(), advanced.next());
}
