//! Body codecs: JSON (the default, `application/json`), UTF-8 text and raw bytes; YAML, TOML,
//! XML, Protobuf and Avro (fixed-schema and registered) behind the features `yaml`, `toml`,
//! `xml`, `protobuf` and `avro`.
//!
//! A publisher writes with one [`Encode`]; a consumer reads with a [`Composite`] of
//! [`Decode`]rs, the first that accepts the message's content type, so a producer may change
//! format without the consumer changing. A body no decoder accepts or can read is set aside
//! into `Q.parked` with its original bytes.
//!
//! Which format a content type names is one table, [`Format::of`]: the codecs accept by it and
//! the operator's view ([`inspect`](crate::inspect)) shows bodies by it.
//!
//! The binary formats use the crates their communities maintain for them: `prost` (the Tokio
//! project's Protobuf, whose derive macros give a message type without `protoc` at build time)
//! and `apache-avro` (the Apache Avro project's own Rust library, with schema resolution and
//! serde support).
//!
//! With the feature `encryption`, [`encrypted::Encrypted`] wraps any of them in AES-GCM
//! (`application/vnd.acemq.encrypted`) with the keys of a [`keyring::KeyRing`].

use std::future::Future;
use std::pin::Pin;

#[cfg(feature = "encryption")]
pub mod encrypted;
#[cfg(feature = "encryption")]
pub mod keyring;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

#[cfg(feature = "avro")]
mod avro;
#[cfg(feature = "avro")]
mod avro_registered;
#[cfg(feature = "protobuf")]
mod protobuf;

#[cfg(feature = "avro")]
pub(crate) use avro::schema_name;
#[cfg(feature = "avro")]
pub use avro::{AVRO_CONTENT_TYPE, Avro};
#[cfg(feature = "avro")]
pub(crate) use avro_registered::unknown_schema;
#[cfg(feature = "avro")]
pub use avro_registered::{REGISTERED_AVRO_CONTENT_TYPE, RegisteredAvro, WriterSchemas, frame};
#[cfg(feature = "protobuf")]
pub use protobuf::{PROTOBUF_CONTENT_TYPE, Protobuf};
mod composite;
#[cfg(feature = "toml")]
mod toml;
#[cfg(feature = "xml")]
mod xml;
#[cfg(feature = "yaml")]
mod yaml;

pub use composite::Composite;
#[cfg(feature = "toml")]
pub use toml::Toml;
#[cfg(feature = "xml")]
pub use xml::Xml;
#[cfg(feature = "yaml")]
pub use yaml::Yaml;

/// The content type the JSON codec writes.
pub const JSON_CONTENT_TYPE: &str = "application/json";
/// The content type the text codec writes.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";
/// The content type the raw bytes codec writes.
pub const BYTES_CONTENT_TYPE: &str = "application/octet-stream";
/// The content type the YAML codec writes.
pub const YAML_CONTENT_TYPE: &str = "application/yaml";
/// The content type the TOML codec writes.
pub const TOML_CONTENT_TYPE: &str = "application/toml";
/// The content type the XML codec writes.
pub const XML_CONTENT_TYPE: &str = "application/xml";

/// The body formats of the AceMQ ports, as their content types name them.
///
/// [`Format::of`] is the reference's read table (case and parameters ignored): the codecs
/// accept by it, and the operator's view tells by it how to show a body.
///
/// ```
/// use acemq::codec::Format;
///
/// assert_eq!(Format::of("Text/X-YAML; charset=utf-8"), Some(Format::Yaml));
/// assert_eq!(Format::of("application/vnd.acme+json"), Some(Format::Json));
/// assert_eq!(Format::of("application/vnd.acemq.avro"), Some(Format::AvroRegistered));
/// assert_eq!(Format::of("image/png"), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// `application/json*`, `text/json*`, `application/*+json`.
    Json,
    /// `text/plain*`.
    Text,
    /// `application/octet-stream`.
    Bytes,
    /// `application/yaml`, `application/x-yaml`, `text/yaml`, `text/x-yaml`.
    Yaml,
    /// `application/toml`, `text/toml`.
    Toml,
    /// `application/xml`, `text/xml`.
    Xml,
    /// `application/x-protobuf`, `application/protobuf`, `application/vnd.google.protobuf`,
    /// `*+protobuf`.
    Protobuf,
    /// Avro with a fixed schema: `avro/binary`, `application/avro`, `*+avro`.
    Avro,
    /// Avro with a registered schema, `application/vnd.acemq.avro`: a zero byte, the schema id
    /// (4 bytes, big-endian), then the Avro body.
    AvroRegistered,
    /// `application/vnd.acemq.encrypted`: AES-GCM with the key id in clear.
    Encrypted,
}

impl Format {
    /// The format a content type names, `None` for one no AceMQ codec reads.
    pub fn of(content_type: &str) -> Option<Self> {
        let essence = essence(content_type);
        let essence = essence.as_str();
        let (kind, subtype) = essence.split_once('/')?;
        Some(match (kind, subtype) {
            ("application", "yaml" | "x-yaml") | ("text", "yaml" | "x-yaml") => Self::Yaml,
            ("application" | "text", "toml") => Self::Toml,
            ("application" | "text", "xml") => Self::Xml,
            ("application", "vnd.acemq.avro") => Self::AvroRegistered,
            ("application", "vnd.acemq.encrypted") => Self::Encrypted,
            ("application", "octet-stream") => Self::Bytes,
            ("application", "x-protobuf" | "protobuf" | "vnd.google.protobuf") => Self::Protobuf,
            ("avro", "binary") | ("application", "avro") => Self::Avro,
            ("application", s) if s.starts_with("json") || s.ends_with("+json") => Self::Json,
            ("text", s) if s.starts_with("json") => Self::Json,
            ("text", s) if s.starts_with("plain") => Self::Text,
            (_, s) if s.ends_with("+protobuf") => Self::Protobuf,
            (_, s) if s.ends_with("+avro") => Self::Avro,
            _ => return None,
        })
    }

    /// Whether `content_type` names this format (`false` for a message without one).
    pub fn names(self, content_type: Option<&str>) -> bool {
        content_type.and_then(Self::of) == Some(self)
    }
}

/// Why a body could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(pub String);

impl CodecError {
    /// An error naming the format and what its parser found.
    pub(crate) fn of(format: &str, source: impl std::fmt::Display) -> Self {
        Self(format!("{format}: {source}"))
    }
}

/// Turns a payload into a body.
pub trait Encode<T: ?Sized>: Send + Sync + 'static {
    /// The content type written with every body.
    fn content_type(&self) -> &str;
    /// The body for `payload`.
    fn encode(&self, payload: &T) -> Result<Bytes, CodecError>;
}

/// What a decoder needs fetched before it can read a body, such as a writer's schema from a
/// registry: the consumer awaits it, then decodes. An error sets the message aside with it.
pub type Preparation = Pin<Box<dyn Future<Output = Result<(), CodecError>> + Send + 'static>>;

/// Turns a body back into a payload.
pub trait Decode<T>: Send + Sync + 'static {
    /// Whether this codec reads bodies of `content_type` (`None` when the message has none).
    fn accepts(&self, content_type: Option<&str>) -> bool;
    /// The payload in `body`.
    fn decode(&self, body: &Bytes) -> Result<T, CodecError>;
    /// The payload in `body` of `content_type`. A codec of one format reads the body alone,
    /// as [`decode`](Decode::decode) does; a [`Composite`] picks its decoder by the content type.
    fn decode_for(&self, content_type: Option<&str>, body: &Bytes) -> Result<T, CodecError> {
        let _ = content_type;
        self.decode(body)
    }

    /// What must be fetched before `body` can be decoded, if anything. Decoding stays
    /// synchronous and free of I/O; a codec that reads through a store it only partly holds
    /// (the registered Avro codec, whose writer schemas live in a registry) names here the
    /// work that completes what it holds. Default: nothing.
    fn prepare(&self, body: &Bytes) -> Option<Preparation> {
        let _ = body;
        None
    }

    /// What must be fetched before `body` of `content_type` can be decoded. A codec of one
    /// format answers as [`prepare`](Decode::prepare) does; a [`Composite`] asks the decoder it
    /// picks by the content type.
    fn prepare_for(&self, content_type: Option<&str>, body: &Bytes) -> Option<Preparation> {
        let _ = content_type;
        self.prepare(body)
    }
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
            .map_err(|e| CodecError::of("JSON", e))
    }
}

impl<T: DeserializeOwned> Decode<T> for Json {
    fn accepts(&self, content_type: Option<&str>) -> bool {
        content_type.is_none_or(|c| Format::of(c) == Some(Format::Json))
    }

    fn decode(&self, body: &Bytes) -> Result<T, CodecError> {
        serde_json::from_slice(body).map_err(|e| CodecError::of("invalid JSON", e))
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
        Format::Text.names(content_type)
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
pub(crate) fn essence(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
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
    fn formats_follow_the_reference_read_table() {
        for (content_type, format) in [
            ("application/json", Some(Format::Json)),
            ("application/json; charset=utf-8", Some(Format::Json)),
            ("text/json", Some(Format::Json)),
            ("application/cloudevents+json", Some(Format::Json)),
            ("text/plain; charset=utf-8", Some(Format::Text)),
            ("application/octet-stream", Some(Format::Bytes)),
            ("application/yaml", Some(Format::Yaml)),
            ("application/x-yaml", Some(Format::Yaml)),
            ("TEXT/YAML", Some(Format::Yaml)),
            ("text/x-yaml; charset=utf-8", Some(Format::Yaml)),
            ("application/toml", Some(Format::Toml)),
            (" text/toml ", Some(Format::Toml)),
            ("application/xml", Some(Format::Xml)),
            ("text/xml; charset=UTF-8", Some(Format::Xml)),
            ("application/x-protobuf", Some(Format::Protobuf)),
            ("application/protobuf", Some(Format::Protobuf)),
            ("application/vnd.google.protobuf", Some(Format::Protobuf)),
            (
                "application/vnd.acme.order+protobuf",
                Some(Format::Protobuf),
            ),
            ("avro/binary", Some(Format::Avro)),
            ("application/avro", Some(Format::Avro)),
            ("application/vnd.acme+avro", Some(Format::Avro)),
            ("application/vnd.acemq.avro", Some(Format::AvroRegistered)),
            ("application/vnd.acemq.encrypted", Some(Format::Encrypted)),
            ("application/yaml+xml", None),
            ("text/html", None),
            ("yaml", None),
            ("", None),
        ] {
            assert_eq!(Format::of(content_type), format, "{content_type:?}");
        }
        assert!(Format::Yaml.names(Some("text/yaml")));
        assert!(!Format::Yaml.names(None));
    }

    /// Whatever a body holds, the format decoders read it or say why: never a panic, which
    /// would end the consumer's task instead of parking the message.
    #[cfg(all(feature = "yaml", feature = "toml", feature = "xml"))]
    mod any_bytes {
        use proptest::prelude::*;
        use serde_json::Value;

        use super::super::{Toml, Xml, Yaml};
        use super::*;

        proptest! {
            #[test]
            fn text_formats_read_or_refuse_any_body(body in proptest::collection::vec(any::<u8>(), 0..256)) {
                let body = Bytes::from(body);
                for decoded in [
                    Decode::<Value>::decode(&Yaml, &body),
                    Decode::<Value>::decode(&Toml, &body),
                    Decode::<Value>::decode(&Xml::default(), &body),
                ] {
                    if let Err(error) = decoded {
                        prop_assert!(error.0.starts_with("invalid "), "{}", error);
                    }
                }
            }
        }
    }
}
