//! The message JSON shape every `polyq` command shows and takes: any text parses or fails
//! without a panic, and what it writes reads back as the same message; any header table written
//! as JSON reads back with the same types.

use arbitrary::Unstructured;
use polyq_amqp::MessageJson;
use polyq_amqp::message_json::{headers_from_json, headers_to_json};

/// The target's checks on one input: panics when one fails.
pub fn check(data: &[u8]) {
    if let Some(message) = std::str::from_utf8(data)
        .ok()
        .and_then(|text| MessageJson::parse(text).ok())
    {
        let written = message.to_json_pretty();
        let back = MessageJson::parse(&written).expect("its own output parses");
        // Compared as text: a NaN header is never equal to itself.
        assert_eq!(back.to_json_pretty(), written);
    }
    let mut u = Unstructured::new(data);
    if let Ok(table) = crate::arbitrary_table(&mut u) {
        let json = headers_to_json(&table);
        let back = headers_from_json(&json).expect("its own JSON reads back");
        assert_eq!(
            format!("{back:?}"),
            format!("{table:?}"),
            "types changed: {json}"
        );
    }
}
