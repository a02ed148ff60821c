//! YAML through serde, as the Java (Jackson over SnakeYAML) and Go (`gopkg.in/yaml.v3`) ports
//! write it.
//!
//! The crate is `serde_norway`: the maintained continuation of `serde_yaml`, whose author
//! stopped maintaining it; it keeps `serde_yaml`'s API and its libyaml emitter, which writes
//! block sequences unindented (`items:\n- widget`) exactly as Jackson does, so a Java consumer
//! reads polyq's bytes as its own (`docs/INTEROP.md`).

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{CodecError, Decode, Encode, Format, YAML_CONTENT_TYPE};

/// YAML through serde. Writes `application/yaml`; reads `application/yaml`,
/// `application/x-yaml`, `text/yaml` and `text/x-yaml` (any case, with parameters).
///
/// ```
/// use acemq::codec::{Decode, Encode, Yaml};
/// use std::collections::BTreeMap;
///
/// let order = BTreeMap::from([("items", vec!["widget", "gasket"])]);
/// let body = Encode::<BTreeMap<&str, Vec<&str>>>::encode(&Yaml, &order)?;
/// assert_eq!(&body[..], b"items:\n- widget\n- gasket\n");
/// assert!(Decode::<()>::accepts(&Yaml, Some("text/x-yaml; charset=utf-8")));
/// let back: BTreeMap<String, Vec<String>> = Yaml.decode(&body)?;
/// assert_eq!(back["items"], ["widget", "gasket"]);
/// # Ok::<(), acemq::codec::CodecError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Yaml;

impl<T: Serialize + ?Sized> Encode<T> for Yaml {
    fn content_type(&self) -> &str {
        YAML_CONTENT_TYPE
    }

    fn encode(&self, payload: &T) -> Result<Bytes, CodecError> {
        serde_norway::to_string(payload)
            .map(Bytes::from)
            .map_err(|e| CodecError::of("YAML", e))
    }
}

impl<T: DeserializeOwned> Decode<T> for Yaml {
    fn accepts(&self, content_type: Option<&str>) -> bool {
        Format::Yaml.names(content_type)
    }

    fn decode(&self, body: &Bytes) -> Result<T, CodecError> {
        serde_norway::from_slice(body).map_err(|e| CodecError::of("invalid YAML", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_aliases_and_refuses_others() {
        for accepted in [
            "application/yaml",
            "application/x-yaml",
            "Text/YAML",
            "text/x-yaml; charset=utf-8",
        ] {
            assert!(Decode::<()>::accepts(&Yaml, Some(accepted)), "{accepted}");
        }
        for refused in [None, Some("application/json"), Some("text/plain")] {
            assert!(!Decode::<()>::accepts(&Yaml, refused), "{refused:?}");
        }
    }

    #[test]
    fn bad_bodies_say_what_is_wrong() {
        let error = Decode::<Vec<u32>>::decode(&Yaml, &Bytes::from_static(b"[1, two]"))
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("invalid YAML: "), "{error}");
        let error = Decode::<u32>::decode(&Yaml, &Bytes::from_static(&[0xff, 0xfe]))
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("invalid YAML: "), "{error}");
    }
}
