//! XML through serde, as the Java (Jackson's `XmlMapper`) and Go (`encoding/xml`) ports write
//! it: no declaration, the root element named after the payload's type, a field per element,
//! a list as the field's element repeated.
//!
//! The crate is `quick-xml` (its `serialize` feature), the maintained XML reader and writer
//! with serde support that most of the ecosystem uses; its serializer follows the same mapping
//! as Jackson and Go, byte for byte on the shared fixtures (`docs/INTEROP.md`).

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{CodecError, Decode, Encode, Format, XML_CONTENT_TYPE};

/// XML through serde. Writes `application/xml`; reads `application/xml` and `text/xml` (any
/// case, with parameters).
///
/// The root element is the payload type's name (a struct `OrderPlaced` is
/// `<OrderPlaced>...</OrderPlaced>`, as Java and Go write it); [`Xml::with_root`] names it for
/// payloads that have no name of their own, such as maps. XML has no numbers: a number is
/// text, which decodes into a numeric field or into a string.
///
/// ```
/// use acemq::codec::{Decode, Encode, Xml};
///
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct OrderPlaced {
///     #[serde(rename = "orderId")]
///     order_id: String,
///     items: Vec<String>,
/// }
///
/// let order = OrderPlaced { order_id: "o-1".into(), items: vec!["widget".into(), "gasket".into()] };
/// let body = Xml::default().encode(&order)?;
/// assert_eq!(
///     &body[..],
///     &b"<OrderPlaced><orderId>o-1</orderId><items>widget</items><items>gasket</items></OrderPlaced>"[..]
/// );
/// assert!(Decode::<OrderPlaced>::accepts(&Xml::default(), Some("text/xml")));
/// let back: OrderPlaced = Xml::default().decode(&body)?;
/// assert_eq!(back, order);
/// # Ok::<(), acemq::codec::CodecError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Xml {
    root: Option<String>,
}

impl Xml {
    /// Writes `root` as the root element's name, for payloads whose type has no name of its
    /// own (maps, [`serde_json::Value`]). Default: the type's name.
    pub fn with_root(root: impl Into<String>) -> Self {
        Self {
            root: Some(root.into()),
        }
    }
}

impl<T: Serialize + ?Sized> Encode<T> for Xml {
    fn content_type(&self) -> &str {
        XML_CONTENT_TYPE
    }

    fn encode(&self, payload: &T) -> Result<Bytes, CodecError> {
        match &self.root {
            None => quick_xml::se::to_string(payload),
            Some(root) => quick_xml::se::to_string_with_root(root, payload),
        }
        .map(Bytes::from)
        .map_err(|e| CodecError::of("XML", e))
    }
}

impl<T: DeserializeOwned> Decode<T> for Xml {
    fn accepts(&self, content_type: Option<&str>) -> bool {
        Format::Xml.names(content_type)
    }

    fn decode(&self, body: &Bytes) -> Result<T, CodecError> {
        quick_xml::de::from_reader(&body[..]).map_err(|e| CodecError::of("invalid XML", e))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn reads_its_aliases_and_refuses_others() {
        let xml = Xml::default();
        for accepted in ["application/xml", "Text/XML; charset=UTF-8"] {
            assert!(Decode::<()>::accepts(&xml, Some(accepted)), "{accepted}");
        }
        for refused in [None, Some("application/json"), Some("text/html")] {
            assert!(!Decode::<()>::accepts(&xml, refused), "{refused:?}");
        }
    }

    #[test]
    fn maps_take_the_root_they_are_given() {
        let order = BTreeMap::from([("orderId", "o-1")]);
        let body = Xml::with_root("OrderPlaced").encode(&order).unwrap();
        assert_eq!(
            &body[..],
            b"<OrderPlaced><orderId>o-1</orderId></OrderPlaced>"
        );
        let error = Xml::default().encode(&order).unwrap_err().to_string();
        assert!(error.starts_with("XML: "), "{error}");
        let back: BTreeMap<String, String> = Xml::default().decode(&body).unwrap();
        assert_eq!(back["orderId"], "o-1");
    }

    #[test]
    fn bad_bodies_say_what_is_wrong() {
        for body in [&b"<a><b></a>"[..], &b"not xml"[..], &[0xff, 0xfe]] {
            let error = Decode::<BTreeMap<String, String>>::decode(
                &Xml::default(),
                &Bytes::copy_from_slice(body),
            );
            let error = error.unwrap_err().to_string();
            assert!(error.starts_with("invalid XML: "), "{error}");
        }
    }
}
