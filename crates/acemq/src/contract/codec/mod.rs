//! Body codecs: JSON (the default, `application/json`), UTF-8 text and raw bytes.
//!
//! A publisher writes with one [`Encode`]; a consumer reads with the first of its [`Decode`]rs
//! that accepts the message's content type, so a producer may change format without the
//! consumer changing. A body no decoder accepts or can read is set aside into `Q.parked` with
//! its original bytes.
//!
//! With the feature `encryption`, [`encrypted::Encrypted`] wraps any of them in AES-GCM
//! (`application/vnd.acemq.encrypted`) with the keys of a [`keyring::KeyRing`].

#[cfg(feature = "encryption")]
pub mod encrypted;
#[cfg(feature = "encryption")]
pub mod keyring;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The content type the JSON codec writes.
pub const JSON_CONTENT_TYPE: &str = "application/json";
/// The content type the text codec writes.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";
/// The content type the raw bytes codec writes.
pub const BYTES_CONTENT_TYPE: &str = "application/octet-stream";

/// Why a body could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(pub String);

/// Turns a payload into a body.
pub trait Encode<T: ?Sized>: Send + Sync + 'static {
    /// The content type written with every body.
    fn content_type(&self) -> &str;
    /// The body for `payload`.
    fn encode(&self, payload: &T) -> Result<Bytes, CodecError>;
}

/// Turns a body back into a payload.
pub trait Decode<T>: Send + Sync + 'static {
    /// Whether this codec reads bodies of `content_type` (`None` when the message has none).
    fn accepts(&self, content_type: Option<&str>) -> bool;
    /// The payload in `body`.
    fn decode(&self, body: &Bytes) -> Result<T, CodecError>;
}

/// JSON through serde. Writes `application/json`; reads `application/json*`, `text/json*`,
/// any `application/*+json`, and bodies with no content type (as the other ports do).
///
/// ```
/// use acemq::codec::{Decode, Encode, Json};
///
/// let body = Encode::<Vec<u32>>::encode(&Json, &vec![1, 2])?;
/// assert_eq!(&body[..], b"[1,2]");
/// assert!(Decode::<Vec<u32>>::accepts(&Json, Some("application/vnd.acme+json")));
/// let back: Vec<u32> = Json.decode(&body)?;
/// assert_eq!(back, [1, 2]);
/// # Ok::<(), acemq::codec::CodecError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl<T: Serialize + ?Sized> Encode<T> for Json {
    fn content_type(&self) -> &str {
        JSON_CONTENT_TYPE
    }

    fn encode(&self, payload: &T) -> Result<Bytes, CodecError> {
        serde_json::to_vec(payload)
            .map(Bytes::from)
            .map_err(|e| CodecError(format!("JSON: {e}")))
    }
}

impl<T: DeserializeOwned> Decode<T> for Json {
    fn accepts(&self, content_type: Option<&str>) -> bool {
        let Some(content_type) = content_type else {
            return true;
        };
        let essence = essence(content_type);
        essence.starts_with("application/json")
            || essence.starts_with("text/json")
            || (essence.starts_with("application/") && essence.ends_with("+json"))
    }

    fn decode(&self, body: &Bytes) -> Result<T, CodecError> {
        serde_json::from_slice(body).map_err(|e| CodecError(format!("invalid JSON: {e}")))
    }
}

/// UTF-8 text. Writes `text/plain; charset=utf-8`; reads any `text/plain`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Text;

impl<T: AsRef<str> + ?Sized> Encode<T> for Text {
    fn content_type(&self) -> &str {
        TEXT_CONTENT_TYPE
    }

    fn encode(&self, payload: &T) -> Result<Bytes, CodecError> {
        Ok(Bytes::copy_from_slice(payload.as_ref().as_bytes()))
    }
}

impl Decode<String> for Text {
    fn accepts(&self, content_type: Option<&str>) -> bool {
        content_type.is_some_and(|c| essence(c).starts_with("text/plain"))
    }

    fn decode(&self, body: &Bytes) -> Result<String, CodecError> {
        String::from_utf8(body.to_vec()).map_err(|e| CodecError(format!("not UTF-8 text: {e}")))
    }
}

/// The body as it is. Writes `application/octet-stream`; reads every body, whatever its
/// content type.
#[derive(Debug, Clone, Copy, Default)]
pub struct Raw;

impl<T: AsRef<[u8]> + ?Sized> Encode<T> for Raw {
    fn content_type(&self) -> &str {
        BYTES_CONTENT_TYPE
    }

    fn encode(&self, payload: &T) -> Result<Bytes, CodecError> {
        Ok(Bytes::copy_from_slice(payload.as_ref()))
    }
}

impl Decode<Bytes> for Raw {
    fn accepts(&self, _content_type: Option<&str>) -> bool {
        true
    }

    fn decode(&self, body: &Bytes) -> Result<Bytes, CodecError> {
        Ok(body.clone())
    }
}

/// The lower-cased media type without parameters and surrounding space.
fn essence(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// The decoders of one consumer, tried in order by content type.
pub(crate) struct Decoders<T> {
    decoders: Vec<Box<dyn Decode<T>>>,
}

impl<T: 'static> Decoders<T> {
    pub(crate) fn new(first: Box<dyn Decode<T>>) -> Self {
        Self {
            decoders: vec![first],
        }
    }

    pub(crate) fn push(&mut self, decoder: Box<dyn Decode<T>>) {
        self.decoders.push(decoder);
    }

    /// The payload, or why it cannot be read: the `x-acemq-error` text after
    /// `could not be decoded: `.
    pub(crate) fn decode(&self, content_type: Option<&str>, body: &Bytes) -> Result<T, String> {
        let decoder = self
            .decoders
            .iter()
            .find(|d| d.accepts(content_type))
            .ok_or_else(|| match content_type {
                Some(c) => format!("no codec reads content type `{c}`"),
                None => "no codec reads a message without a content type".to_owned(),
            })?;
        decoder.decode(body).map_err(|e| e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_reads_its_aliases_and_refuses_others() {
        let json = |c| Decode::<u8>::accepts(&Json, c);
        for accepted in [
            None,
            Some("application/json"),
            Some("Application/JSON; charset=utf-8"),
            Some("text/json"),
            Some("application/cloudevents+json"),
        ] {
            assert!(json(accepted), "{accepted:?}");
        }
        for refused in [Some("text/plain"), Some("application/xml"), Some("")] {
            assert!(!json(refused), "{refused:?}");
        }
    }

    #[test]
    fn decoders_pick_by_content_type_and_explain_misses() {
        let mut decoders: Decoders<String> = Decoders::new(Box::new(Json));
        decoders.push(Box::new(Text));
        let body = Bytes::from_static(b"hello");
        assert_eq!(decoders.decode(Some("text/plain"), &body).unwrap(), "hello");
        assert!(
            decoders
                .decode(None, &body)
                .unwrap_err()
                .starts_with("invalid JSON")
        );
        assert_eq!(
            decoders.decode(Some("application/xml"), &body).unwrap_err(),
            "no codec reads content type `application/xml`"
        );
        let bad = Bytes::from_static(&[0xff]);
        assert!(Text.decode(&bad).is_err());
    }
}
