//! TOML through serde, as the Java (Jackson's TOML module) and Go (`BurntSushi/toml`) ports
//! write it.
//!
//! The crate is `toml`, the toml-rs project's serde implementation that Cargo itself reads its
//! manifests with (TOML 1.1). It writes strings as basic (double-quoted) strings and arrays
//! inline, byte for byte as the Go port does (`docs/INTEROP.md`).

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{CodecError, Decode, Encode, Format, TOML_CONTENT_TYPE};

/// TOML through serde. Writes `application/toml`; reads `application/toml` and `text/toml`
/// (any case, with parameters). A TOML document is a table, so payloads are structs or maps.
///
/// ```
/// use acemq::codec::{Decode, Encode, Toml};
/// use std::collections::BTreeMap;
///
/// let order = BTreeMap::from([("items", vec!["widget", "gasket"])]);
/// let body = Encode::<BTreeMap<&str, Vec<&str>>>::encode(&Toml, &order)?;
/// assert_eq!(&body[..], b"items = [\"widget\", \"gasket\"]\n");
/// assert!(Decode::<()>::accepts(&Toml, Some("text/toml")));
/// let back: BTreeMap<String, Vec<String>> = Toml.decode(&body)?;
/// assert_eq!(back["items"], ["widget", "gasket"]);
/// # Ok::<(), acemq::codec::CodecError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Toml;

impl<T: Serialize + ?Sized> Encode<T> for Toml {
    fn content_type(&self) -> &str {
        TOML_CONTENT_TYPE
    }

    fn encode(&self, payload: &T) -> Result<Bytes, CodecError> {
        toml::to_string(payload)
            .map(Bytes::from)
            .map_err(|e| CodecError::of("TOML", e))
    }
}

impl<T: DeserializeOwned> Decode<T> for Toml {
    fn accepts(&self, content_type: Option<&str>) -> bool {
        Format::Toml.names(content_type)
    }

    fn decode(&self, body: &Bytes) -> Result<T, CodecError> {
        let text = std::str::from_utf8(body).map_err(|e| CodecError::of("invalid TOML", e))?;
        toml::from_str(text).map_err(|e| CodecError::of("invalid TOML", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_aliases_and_refuses_others() {
        for accepted in ["application/toml", "TEXT/TOML; charset=utf-8"] {
            assert!(Decode::<()>::accepts(&Toml, Some(accepted)), "{accepted}");
        }
        for refused in [None, Some("application/json"), Some("application/x-toml")] {
            assert!(!Decode::<()>::accepts(&Toml, refused), "{refused:?}");
        }
    }

    #[test]
    fn bad_payloads_and_bodies_say_what_is_wrong() {
        let error = Encode::<Vec<u32>>::encode(&Toml, &vec![1])
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("TOML: "), "{error}");
        for body in [&b"a = "[..], &[0xff, 0xfe]] {
            let error = Decode::<std::collections::BTreeMap<String, u32>>::decode(
                &Toml,
                &Bytes::copy_from_slice(body),
            )
            .unwrap_err()
            .to_string();
            assert!(error.starts_with("invalid TOML: "), "{error}");
        }
    }
}
