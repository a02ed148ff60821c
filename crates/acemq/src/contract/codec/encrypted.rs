//! The encrypted codec `application/vnd.acemq.encrypted`: AES-GCM over whatever another codec
//! wrote, in the framing every AceMQ port writes and reads (Java's `EncryptedCodec`, Python's
//! `codecs.encrypted`, Go's `crypto`):
//!
//! ```text
//! 0xAE | 0x01 | key id length (1 byte) | key id (UTF-8) | nonce (12 bytes) | ciphertext + tag (16 bytes)
//! ```
//!
//! The whole header, `0xAE` through the key id, is GCM's associated data, so an altered key id
//! fails to decrypt rather than decrypting as something else. The key id travels in clear so
//! that a reader knows which key of its [`KeyRing`] a message needs: keys rotate without
//! downtime, and an operator can tell which key a message needs without holding any
//! ([`key_id_of`]). The nonce is drawn from the operating system for every message.
//!
//! The inner codec's content type is not on the wire, as in Java and Python: the message says
//! only `application/vnd.acemq.encrypted`, and the consumer knows from its own configuration
//! what the plaintext is ([`Encrypted`] wraps the codec that reads it).
//!
//! The cipher is RustCrypto's `aes-gcm` (audited, constant-time AES and GHASH); nothing here is
//! cryptography by hand. No key and no plaintext ever reaches an error, a log or `Debug`; errors
//! name the key id.

use std::sync::Arc;

use aes_gcm::Nonce;
use aes_gcm::aead::Generate as _;
use aes_gcm::aes::cipher::consts::U12;
use bytes::Bytes;

use super::keyring::KeyRing;
use super::{CodecError, Decode, Encode, Format};

/// The content type the encrypted codec writes, whatever the plaintext is: deliberately not
/// `+json`, so that no JSON reader volunteers for ciphertext.
pub const ENCRYPTED_CONTENT_TYPE: &str = "application/vnd.acemq.encrypted";

/// The first byte of the framing.
pub const MAGIC: u8 = 0xAE;
/// The framing version this codec writes and reads.
pub const VERSION: u8 = 0x01;
/// The nonce length, in bytes.
pub const NONCE_LEN: usize = 12;
/// The authentication tag length, in bytes.
pub const TAG_LEN: usize = 16;

/// Why a body could not be encrypted or decrypted. Names the key id, never the key or the
/// plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncryptionError {
    /// The body does not start with the framing (`0xAE 0x01`, a non-empty UTF-8 key id).
    #[error(
        "not an encrypted AceMQ body: it does not start with 0xAE 0x01 and a key id, so a \
         consumer configured to decrypt was given a message that was not encrypted"
    )]
    NotEncrypted,
    /// The body ends before its nonce and tag.
    #[error(
        "encrypted with key `{key_id}` but truncated: {length} bytes cannot hold the header, the \
         12-byte nonce and the 16-byte tag"
    )]
    Truncated {
        /// The key id the header names.
        key_id: String,
        /// The body's length.
        length: usize,
    },
    /// The key id is not in the ring.
    #[error(
        "encrypted with key `{key_id}`, which is not in the key ring (it holds {}): either the \
         key was retired while messages written with it were still queued, or the message came \
         from a service with another key ring",
        held.join(", ")
    )]
    UnknownKey {
        /// The key id the header names.
        key_id: String,
        /// The key ids the ring holds.
        held: Vec<String>,
    },
    /// The tag does not verify: a wrong key under a known id, or a body altered after it was
    /// written (header, nonce, ciphertext or tag). GCM cannot tell these apart, and neither
    /// does this error.
    #[error(
        "did not decrypt with key `{key_id}`: either that is not the key it was written with, or \
         the message was altered after it was written"
    )]
    NotAuthentic {
        /// The key id the header names.
        key_id: String,
    },
    /// The plaintext is too long for one AES-GCM message (64 GiB).
    #[error("could not encrypt with key `{key_id}`: the plaintext is too long for AES-GCM")]
    TooLong {
        /// The current key's id.
        key_id: String,
    },
    /// The operating system's random source failed to give a nonce.
    #[error("could not draw a nonce from the operating system's random source")]
    Random,
}

impl EncryptionError {
    /// Whether the body is not this framing at all, or cut short.
    pub fn is_malformed(&self) -> bool {
        matches!(self, Self::NotEncrypted | Self::Truncated { .. })
    }

    /// Whether the message needs a key the ring does not hold.
    pub fn is_unknown_key(&self) -> bool {
        matches!(self, Self::UnknownKey { .. })
    }

    /// Whether the authentication tag did not verify.
    pub fn is_not_authentic(&self) -> bool {
        matches!(self, Self::NotAuthentic { .. })
    }

    /// The key id the message (or, encrypting, the ring) names, when there is one.
    pub fn key_id(&self) -> Option<&str> {
        match self {
            Self::Truncated { key_id, .. }
            | Self::UnknownKey { key_id, .. }
            | Self::NotAuthentic { key_id }
            | Self::TooLong { key_id } => Some(key_id),
            Self::NotEncrypted | Self::Random => None,
        }
    }
}

impl From<EncryptionError> for CodecError {
    fn from(error: EncryptionError) -> Self {
        Self(error.to_string())
    }
}

/// The key id an encrypted body needs, read from its clear header without any key; `None` when
/// the body is not the framing.
///
/// ```
/// use acemq::codec::encrypted::key_id_of;
///
/// assert_eq!(key_id_of(b"\xAE\x01\x02k1 nonce and ciphertext"), Some("k1"));
/// assert_eq!(key_id_of(b"{\"json\": true}"), None);
/// ```
pub fn key_id_of(body: &[u8]) -> Option<&str> {
    match body {
        [MAGIC, VERSION, length, rest @ ..] if *length > 0 => {
            std::str::from_utf8(rest.get(..usize::from(*length))?).ok()
        }
        _ => None,
    }
}

/// `plaintext` encrypted with the ring's current key, framed.
pub fn seal(keys: &KeyRing, plaintext: &[u8]) -> Result<Vec<u8>, EncryptionError> {
    let key = keys.current();
    let header = key.header();
    let mut body = Vec::with_capacity(header.len() + NONCE_LEN + plaintext.len() + TAG_LEN);
    body.extend_from_slice(header);
    // A fresh random nonce per message: a nonce reused under one key forfeits GCM's secrecy,
    // and a counter would restart with the process.
    let nonce = Nonce::<U12>::try_generate().map_err(|_| EncryptionError::Random)?;
    let sealed = key
        .seal(&nonce, plaintext, &body)
        .ok_or_else(|| EncryptionError::TooLong {
            key_id: key.id().to_owned(),
        })?;
    body.extend_from_slice(&nonce);
    body.extend_from_slice(&sealed);
    Ok(body)
}

/// The plaintext of an encrypted body, decrypted with the key its header names.
pub fn open(keys: &KeyRing, body: &[u8]) -> Result<Vec<u8>, EncryptionError> {
    let key_id = key_id_of(body).ok_or(EncryptionError::NotEncrypted)?;
    // `key_id_of` read the whole key id, so the header is within the body.
    let (aad, rest) = body.split_at(3 + key_id.len());
    let (nonce, sealed) = rest
        .split_first_chunk::<NONCE_LEN>()
        .filter(|(_, sealed)| sealed.len() >= TAG_LEN)
        .ok_or_else(|| EncryptionError::Truncated {
            key_id: key_id.to_owned(),
            length: body.len(),
        })?;
    let key = keys
        .key(key_id)
        .ok_or_else(|| EncryptionError::UnknownKey {
            key_id: key_id.to_owned(),
            held: keys.key_ids().map(str::to_owned).collect(),
        })?;
    key.open(&Nonce::<U12>::from(*nonce), sealed, aad)
        .ok_or_else(|| EncryptionError::NotAuthentic {
            key_id: key_id.to_owned(),
        })
}

/// A codec that encrypts what `C` writes and decrypts before `C` reads: encrypted JSON is
/// `Encrypted<Json>`. Writes `application/vnd.acemq.encrypted`; reads that content type only
/// (never a message without one, never plaintext).
///
/// A body whose key id the ring does not hold, or whose tag does not verify, fails to decode,
/// so a consumer parks it in `Q.parked` with its bytes and an error naming the key id.
///
/// ```
/// use acemq::codec::encrypted::{Encrypted, key_id_of};
/// use acemq::codec::keyring::KeyRing;
/// use acemq::codec::{Decode, Encode, Json};
///
/// let codec = Encrypted::new(Json, KeyRing::new("orders-2026-09", &[7; 32])?);
/// let body = Encode::<Vec<u32>>::encode(&codec, &vec![1, 2])?;
/// assert_eq!(key_id_of(&body), Some("orders-2026-09"));
/// assert!(Decode::<Vec<u32>>::accepts(&codec, Some("application/vnd.acemq.encrypted")));
/// let back: Vec<u32> = codec.decode(&body)?;
/// assert_eq!(back, [1, 2]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Encrypted<C> {
    inner: C,
    keys: Arc<KeyRing>,
}

impl<C> Encrypted<C> {
    /// `inner`'s bodies, encrypted with `keys`.
    pub fn new(inner: C, keys: impl Into<Arc<KeyRing>>) -> Self {
        Self {
            inner,
            keys: keys.into(),
        }
    }

    /// The wrapped codec, whose bodies are what gets encrypted.
    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// The key ring.
    pub fn keys(&self) -> &KeyRing {
        &self.keys
    }
}

impl<T: ?Sized, C: Encode<T>> Encode<T> for Encrypted<C> {
    fn content_type(&self) -> &str {
        ENCRYPTED_CONTENT_TYPE
    }

    fn encode(&self, payload: &T) -> Result<Bytes, CodecError> {
        let plaintext = self.inner.encode(payload)?;
        Ok(seal(&self.keys, &plaintext)?.into())
    }
}

impl<T, C: Decode<T>> Decode<T> for Encrypted<C> {
    fn accepts(&self, content_type: Option<&str>) -> bool {
        Format::Encrypted.names(content_type)
    }

    fn decode(&self, body: &Bytes) -> Result<T, CodecError> {
        let plaintext = open(&self.keys, body)?;
        self.inner.decode(&Bytes::from(plaintext))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Json, Raw};

    fn ring() -> KeyRing {
        KeyRing::new("k1", &[1; 32]).unwrap()
    }

    #[test]
    fn the_framing_is_the_references() {
        let body = seal(&ring(), b"{}").unwrap();
        assert_eq!(&body[..5], b"\xAE\x01\x02k1");
        assert_eq!(body.len(), 5 + NONCE_LEN + 2 + TAG_LEN);
        assert_eq!(open(&ring(), &body).unwrap(), b"{}");
        let again = seal(&ring(), b"{}").unwrap();
        assert_ne!(body[5..17], again[5..17], "a fresh nonce per message");
    }

    #[test]
    fn every_aes_key_size_round_trips() {
        for length in crate::codec::keyring::KEY_LENGTHS {
            let keys = KeyRing::new("k", &vec![3; length]).unwrap();
            let body = seal(&keys, b"payload").unwrap();
            assert_eq!(open(&keys, &body).unwrap(), b"payload");
        }
    }

    #[test]
    fn refusals_are_typed_and_name_the_key_id_only() {
        let keys = ring();
        let body = seal(&keys, b"secret plaintext").unwrap();
        let other = KeyRing::new("k2", &[2; 32]).unwrap();
        let unknown = open(&other, &body).unwrap_err();
        assert!(unknown.is_unknown_key());
        assert_eq!(unknown.key_id(), Some("k1"));
        assert!(unknown.to_string().contains("it holds k2"), "{unknown}");
        let wrong_key = KeyRing::new("k1", &[9; 32]).unwrap();
        assert!(open(&wrong_key, &body).unwrap_err().is_not_authentic());
        for at in 0..body.len() {
            let mut flipped = body.clone();
            flipped[at] ^= 0x01;
            let error = open(&keys, &flipped).unwrap_err();
            assert!(
                error.is_not_authentic() || error.is_malformed() || error.is_unknown_key(),
                "byte {at}: {error}"
            );
            let text = error.to_string();
            assert!(!text.contains("secret"), "{text}");
        }
        assert!(
            open(&keys, &body[..body.len() - 1])
                .unwrap_err()
                .is_not_authentic()
        );
        assert!(matches!(
            open(&keys, &body[..5 + NONCE_LEN + TAG_LEN - 1]),
            Err(EncryptionError::Truncated { length: 32, .. })
        ));
        for not_framed in [
            &b""[..],
            b"\xAE",
            b"\xAE\x01",
            b"\xAE\x01\x00abc",
            b"\xAE\x02\x01k",
            b"{}",
            b"\xAE\x01\x05k1",
        ] {
            assert_eq!(open(&keys, not_framed), Err(EncryptionError::NotEncrypted));
        }
        assert_eq!(key_id_of(b"\xAE\x01\x02\xff\xfe rest"), None, "not UTF-8");
    }

    #[test]
    fn the_codec_wraps_another_and_reads_only_its_content_type() {
        let codec = Encrypted::new(Json, ring());
        assert_eq!(Encode::<u8>::content_type(&codec), ENCRYPTED_CONTENT_TYPE);
        let accepts = |c| Decode::<u8>::accepts(&codec, c);
        assert!(accepts(Some("application/vnd.acemq.encrypted")));
        assert!(accepts(Some("Application/VND.AceMQ.Encrypted; v=1")));
        for refused in [
            None,
            Some("application/json"),
            Some("application/octet-stream"),
        ] {
            assert!(!accepts(refused), "{refused:?}");
        }
        let body = Encode::<str>::encode(&codec, "hi").unwrap();
        assert_eq!(Decode::<String>::decode(&codec, &body).unwrap(), "hi");
        let raw = Encrypted::new(Raw, ring());
        let bytes = Encode::<[u8]>::encode(&raw, &[0, 1, 2][..]).unwrap();
        assert_eq!(&raw.decode(&bytes).unwrap()[..], [0, 1, 2]);
        let refused =
            Decode::<String>::decode(&codec, &Bytes::from_static(b"\"plain\"")).unwrap_err();
        assert!(
            refused.0.starts_with("not an encrypted AceMQ body"),
            "{refused}"
        );
        assert!(format!("{codec:?}").contains("k1"));
    }
}
