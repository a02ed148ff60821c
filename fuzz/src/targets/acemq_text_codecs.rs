//! The YAML, TOML and XML codecs: any body decodes or is refused with a reason, never a panic
//! (a consumer parks what its decoder refuses), and what decodes as YAML or TOML re-encodes into
//! a body that decodes to the same value.

use acemq::codec::{Decode, Encode, Toml, Xml, Yaml};
use bytes::Bytes;
use serde_json::Value;

/// The target's checks on one input: panics when one fails.
pub fn check(data: &[u8]) {
    let body = Bytes::copy_from_slice(data);
    for format in ["yaml", "toml"] {
        let decoded: Result<Value, _> = match format {
            "yaml" => Yaml.decode(&body),
            _ => Toml.decode(&body),
        };
        let Ok(value) = decoded else {
            continue;
        };
        // A value the format has no text for (TOML: a top-level that is not a table) may be
        // refused on the way out; one that is written reads back as itself.
        let again = match format {
            "yaml" => Yaml.encode(&value),
            _ => Toml.encode(&value),
        };
        if let Ok(again) = again {
            let back: Value = match format {
                "yaml" => Yaml.decode(&again),
                _ => Toml.decode(&again),
            }
            .expect("polyq's own output decodes");
            assert_eq!(back, value, "{format} round trip");
        }
    }
    if let Err(error) = Decode::<Value>::decode(&Xml::default(), &body) {
        assert!(error.0.starts_with("invalid XML: "), "{error}");
    }
}
