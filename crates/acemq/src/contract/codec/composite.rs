//! The composite codec: the formats one consumer reads, picked by content type.

use bytes::Bytes;

use super::{CodecError, Decode, Preparation};

/// The decoders a consumer accepts, in the order they are tried: a message is read by the
/// first that accepts its content type, and a content type none of them reads is an error
/// (the consumer parks such a message in `Q.parked` with its bytes unchanged).
///
/// This is the ports' `CompositeCodec` on the reading side; a publisher writes one format, with
/// that format's own [`Encode`](super::Encode). Any [`Decode`] joins, the formats of this crate
/// and codecs of an application's own alike, and a composite is itself a [`Decode`]: it is what
/// [`AceMq::consumer_with`](crate::AceMq::consumer_with) takes to read several formats.
///
/// ```
/// use acemq::codec::{Composite, Decode, Json, Text};
/// use bytes::Bytes;
///
/// let formats = Composite::of(Json).with(Text);
/// let read = |content_type, body: &'static str| {
///     formats.decode_for(content_type, &Bytes::from_static(body.as_bytes()))
/// };
/// assert_eq!(read(Some("application/json"), r#""hi""#)?, "hi");
/// assert_eq!(read(Some("text/plain"), "hi")?, "hi");
/// let refused = read(Some("image/png"), "hi").unwrap_err();
/// assert_eq!(refused.to_string(), "no codec reads content type `image/png`");
/// # Ok::<(), acemq::codec::CodecError>(())
/// ```
pub struct Composite<T> {
    decoders: Vec<Box<dyn Decode<T>>>,
}

impl<T: 'static> Composite<T> {
    /// A composite reading what `first` reads.
    pub fn of(first: impl Decode<T>) -> Self {
        Self {
            decoders: vec![Box::new(first)],
        }
    }

    /// Adds `decoder`, tried after the ones before it.
    #[must_use]
    pub fn with(mut self, decoder: impl Decode<T>) -> Self {
        self.decoders.push(Box::new(decoder));
        self
    }

    /// The decoder for `content_type`: the first that accepts it.
    fn decoder_for(&self, content_type: Option<&str>) -> Option<&dyn Decode<T>> {
        self.decoders
            .iter()
            .map(Box::as_ref)
            .find(|d| d.accepts(content_type))
    }
}

impl<T> std::fmt::Debug for Composite<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Composite")
            .field("decoders", &self.decoders.len())
            .finish()
    }
}

impl<T: 'static> Decode<T> for Composite<T> {
    fn accepts(&self, content_type: Option<&str>) -> bool {
        self.decoder_for(content_type).is_some()
    }

    /// The body read as a message without a content type.
    fn decode(&self, body: &Bytes) -> Result<T, CodecError> {
        self.decode_for(None, body)
    }

    fn decode_for(&self, content_type: Option<&str>, body: &Bytes) -> Result<T, CodecError> {
        let decoder = self.decoder_for(content_type).ok_or_else(|| {
            CodecError(match content_type {
                Some(c) => format!("no codec reads content type `{c}`"),
                None => "no codec reads a message without a content type".to_owned(),
            })
        })?;
        decoder.decode_for(content_type, body)
    }

    fn prepare(&self, body: &Bytes) -> Option<Preparation> {
        self.prepare_for(None, body)
    }

    fn prepare_for(&self, content_type: Option<&str>, body: &Bytes) -> Option<Preparation> {
        self.decoder_for(content_type)?
            .prepare_for(content_type, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Json, Raw, Text};

    #[test]
    fn the_first_decoder_that_accepts_reads() {
        let formats: Composite<String> = Composite::of(Json).with(Text);
        let body = Bytes::from_static(b"hello");
        assert_eq!(
            formats.decode_for(Some("text/plain"), &body).unwrap(),
            "hello"
        );
        assert!(
            formats
                .decode_for(None, &body)
                .unwrap_err()
                .0
                .starts_with("invalid JSON")
        );
        assert!(
            formats
                .decode(&body)
                .unwrap_err()
                .0
                .starts_with("invalid JSON")
        );
        assert!(formats.accepts(Some("text/plain; charset=utf-8")));
        assert!(!formats.accepts(Some("application/xml")));
        assert_eq!(
            formats
                .decode_for(Some("application/xml"), &body)
                .unwrap_err()
                .0,
            "no codec reads content type `application/xml`"
        );
        let text_only: Composite<String> = Composite::of(Text);
        assert_eq!(
            text_only.decode_for(None, &body).unwrap_err().0,
            "no codec reads a message without a content type"
        );
        assert!(Text.decode(&Bytes::from_static(&[0xff])).is_err());
    }

    #[test]
    fn composites_nest_and_pick_by_content_type_inside() {
        let inner: Composite<String> = Composite::of(Json);
        let outer = Composite::of(inner).with(Text);
        let body = Bytes::from_static(br#""hi""#);
        assert_eq!(
            outer.decode_for(Some("application/json"), &body).unwrap(),
            "hi"
        );
        assert_eq!(
            outer.decode_for(Some("text/plain"), &body).unwrap(),
            r#""hi""#
        );
        assert_eq!(format!("{outer:?}"), "Composite { decoders: 2 }");
        let bytes = Composite::of(Raw);
        assert_eq!(bytes.decode_for(Some("image/png"), &body).unwrap(), body);
    }
}
