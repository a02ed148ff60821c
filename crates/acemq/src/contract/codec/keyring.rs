//! The AES keys an encrypted codec writes and reads with, each named by the key id that travels
//! in clear in front of every ciphertext (see [`super::encrypted`]).
//!
//! A service writes with one key, the current one, and reads with every key a message still in
//! flight may have been written with: rotating is adding the new key everywhere, then making it
//! current, and retiring the old one only once nothing written with it is left.
//!
//! Keys are AES-128, AES-192 or AES-256 (16, 24 or 32 bytes, as the Java and Python ports
//! accept). They never appear in `Debug`, in an error or in a log: a [`KeyRing`] shows its key
//! ids only, and key material is wiped from memory when the ring is dropped (the ciphers'
//! `zeroize` support, and [`Zeroizing`] buffers while a key is being read).
//!
//! # The key file
//!
//! [`KeyRing::from_file`], [`KeyRing::from_env`] and [`KeyRing::parse`] read one format:
//!
//! ```text
//! # comments and blank lines are ignored
//! orders-2026-09 = 3q2+7wABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGho=
//! orders-2026-06 = hex:000102030405060708090a0b0c0d0e0f
//! ```
//!
//! One key per line, `KEY-ID = KEY`: the key in standard Base64 (padded or not), or in hex
//! after `hex:`. **The first key is the current one**; the others are read with only. A key id
//! is 1 to 255 bytes of UTF-8 without `=`, `;`, `#`, whitespace or control characters. Entries may also be separated by `;`, so that a whole
//! ring fits in one environment variable (`ACEMQ_KEYS="k2 = ...; k1 = ..."`).

use std::fmt;
use std::path::Path;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::aes::Aes192;
use aes_gcm::aes::cipher::consts::U12;
use aes_gcm::{Aes128Gcm, Aes256Gcm, AesGcm, Nonce};
use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use zeroize::Zeroizing;

use super::encrypted::{MAGIC, VERSION};

/// The longest key id, in bytes: the framing gives it one length byte.
pub const MAX_KEY_ID_LEN: usize = 255;

/// Why a key id over [`MAX_KEY_ID_LEN`] bytes is refused.
const TOO_LONG: &str = "a key id is at most 255 bytes of UTF-8: it travels behind one length byte in front of every \
     message";

/// The key lengths AES takes, in bytes.
pub const KEY_LENGTHS: [usize; 3] = [16, 24, 32];

/// Standard Base64, with or without its padding.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Why a key ring could not be built or read. Never quotes key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyRingError {
    /// A key id the framing cannot carry or a key file cannot hold.
    #[error("key id `{key_id}`: {reason}")]
    KeyId {
        /// The key id as given (ids are public: they travel in clear).
        key_id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Key material that is not an AES key.
    #[error(
        "key `{key_id}`: an AES key is 16, 24 or 32 bytes and this one is {length}; a passphrase \
         needs a key derivation function (PBKDF2, scrypt, Argon2) rather than being used as it \
         stands"
    )]
    KeyLength {
        /// The key's id.
        key_id: String,
        /// Its length in bytes.
        length: usize,
    },
    /// A key that is neither Base64 nor `hex:` hex.
    #[error("key `{key_id}`: {encoding}")]
    KeyEncoding {
        /// The key's id.
        key_id: String,
        /// What was expected (never the value).
        encoding: &'static str,
    },
    /// An entry of a key file that is not `KEY-ID = KEY` with a valid key id. The entry is
    /// not quoted: it may be a key.
    #[error("{source_name}, entry {entry}: expected `KEY-ID = KEY`: {reason}")]
    Syntax {
        /// The file or variable read.
        source_name: String,
        /// The 1-based entry (line, or `;`-separated entry).
        entry: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A key of the file, named by its entry.
    #[error("{source_name}, entry {entry}")]
    Entry {
        /// The file or variable read.
        source_name: String,
        /// The 1-based entry.
        entry: usize,
        /// What is wrong with it.
        #[source]
        source: Box<KeyRingError>,
    },
    /// The same key id twice in one file.
    #[error("{source_name}: key id `{key_id}` is given twice")]
    Duplicate {
        /// The file or variable read.
        source_name: String,
        /// The repeated id.
        key_id: String,
    },
    /// A key file or variable without a key.
    #[error("{source_name} holds no key: give at least one `KEY-ID = KEY` line")]
    Empty {
        /// The file or variable read.
        source_name: String,
    },
    /// The key file cannot be read.
    #[error("cannot read the key file {path}")]
    Io {
        /// The path given.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The environment variable is not set or not UTF-8.
    #[error(
        "environment variable {name} is not set (or not UTF-8): it should hold `KEY-ID = KEY` entries"
    )]
    Env {
        /// The variable.
        name: String,
    },
    /// [`KeyRing::use_key`] named a key the ring does not hold.
    #[error("there is no key `{key_id}` in the key ring")]
    NoSuchKey {
        /// The id asked for.
        key_id: String,
    },
}

impl KeyRingError {
    /// Whether the error is about a key id (empty, too long, or with characters a key file
    /// cannot hold).
    pub fn is_key_id(&self) -> bool {
        matches!(self.innermost(), Self::KeyId { .. })
    }

    /// Whether the error is about key material (wrong length or encoding).
    pub fn is_key_material(&self) -> bool {
        matches!(
            self.innermost(),
            Self::KeyLength { .. } | Self::KeyEncoding { .. }
        )
    }

    /// Whether the key file or variable could not be read or parsed as a whole.
    pub fn is_source(&self) -> bool {
        matches!(
            self,
            Self::Syntax { .. }
                | Self::Duplicate { .. }
                | Self::Empty { .. }
                | Self::Io { .. }
                | Self::Env { .. }
        )
    }

    fn innermost(&self) -> &Self {
        match self {
            Self::Entry { source, .. } => source.innermost(),
            other => other,
        }
    }
}

/// One AES-GCM cipher, its key schedule expanded once.
enum Cipher {
    Aes128(Box<Aes128Gcm>),
    Aes192(Box<AesGcm<Aes192, U12>>),
    Aes256(Box<Aes256Gcm>),
}

impl Cipher {
    fn new(key: &[u8]) -> Option<Self> {
        Some(match key.len() {
            16 => Self::Aes128(Box::new(Aes128Gcm::new_from_slice(key).ok()?)),
            24 => Self::Aes192(Box::new(AesGcm::new_from_slice(key).ok()?)),
            32 => Self::Aes256(Box::new(Aes256Gcm::new_from_slice(key).ok()?)),
            _ => return None,
        })
    }

    fn encrypt(&self, nonce: &Nonce<U12>, payload: Payload<'_, '_>) -> Option<Vec<u8>> {
        match self {
            Self::Aes128(c) => c.encrypt(nonce, payload),
            Self::Aes192(c) => c.encrypt(nonce, payload),
            Self::Aes256(c) => c.encrypt(nonce, payload),
        }
        .ok()
    }

    fn decrypt(&self, nonce: &Nonce<U12>, payload: Payload<'_, '_>) -> Option<Vec<u8>> {
        match self {
            Self::Aes128(c) => c.decrypt(nonce, payload),
            Self::Aes192(c) => c.decrypt(nonce, payload),
            Self::Aes256(c) => c.decrypt(nonce, payload),
        }
        .ok()
    }
}

/// A key of the ring: its id, the framing's header that names it, and its cipher.
pub(super) struct RingKey {
    id: String,
    header: Vec<u8>,
    cipher: Cipher,
}

impl RingKey {
    /// The key id.
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// `0xAE 0x01`, the key id's length and the key id: the clear header of every body this key
    /// encrypts, built once.
    pub(super) fn header(&self) -> &[u8] {
        &self.header
    }

    /// `msg` sealed under `nonce` with `aad` authenticated: ciphertext and tag.
    pub(super) fn seal(&self, nonce: &Nonce<U12>, msg: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
        self.cipher.encrypt(nonce, Payload { msg, aad })
    }

    /// The plaintext of `msg` (ciphertext and tag), `None` when it does not authenticate.
    pub(super) fn open(&self, nonce: &Nonce<U12>, msg: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
        self.cipher.decrypt(nonce, Payload { msg, aad })
    }
}

/// The keys to encrypt with (the current one) and to decrypt with (all of them), by key id.
///
/// `Debug` shows the key ids only.
///
/// ```
/// use acemq::codec::keyring::KeyRing;
///
/// let june = [7u8; 32];
/// let september = [9u8; 32];
/// // Rotation: the new key is current, the old one still reads what is queued.
/// let ring = KeyRing::new("orders-2026-09", &september)?.with_key("orders-2026-06", &june)?;
/// assert_eq!(ring.current_key_id(), "orders-2026-09");
/// assert_eq!(ring.key_ids().collect::<Vec<_>>(), ["orders-2026-09", "orders-2026-06"]);
/// assert!(!format!("{ring:?}").contains("9, 9"));
///
/// let same = KeyRing::parse(
///     "orders-2026-09 = hex:0909090909090909090909090909090909090909090909090909090909090909\n\
///      orders-2026-06 = BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=",
///     "keys",
/// )?;
/// assert_eq!(same.key_ids().collect::<Vec<_>>(), ["orders-2026-09", "orders-2026-06"]);
/// # Ok::<(), acemq::codec::keyring::KeyRingError>(())
/// ```
pub struct KeyRing {
    keys: Vec<RingKey>,
    current: usize,
}

impl KeyRing {
    /// A ring of one key, current.
    pub fn new(key_id: &str, key: &[u8]) -> Result<Self, KeyRingError> {
        Ok(Self {
            keys: vec![ring_key(key_id, key)?],
            current: 0,
        })
    }

    /// The ring with `key` added for reading (replacing a key of the same id); the current key
    /// stays the current one.
    pub fn with_key(mut self, key_id: &str, key: &[u8]) -> Result<Self, KeyRingError> {
        let key = ring_key(key_id, key)?;
        match self.position(key_id) {
            Some(at) => self.keys[at] = key,
            None => self.keys.push(key),
        }
        Ok(self)
    }

    /// The ring with `key_id`, a key it holds, as the one to encrypt with.
    pub fn use_key(mut self, key_id: &str) -> Result<Self, KeyRingError> {
        self.current = self
            .position(key_id)
            .ok_or_else(|| KeyRingError::NoSuchKey {
                key_id: key_id.to_owned(),
            })?;
        Ok(self)
    }

    /// The ring in a key file (see the [module docs](self)); `source_name` names it in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, KeyRingError> {
        let mut ring: Option<Self> = None;
        let entries = text
            .split(['\n', ';'])
            .map(|line| line.trim_end_matches('\r').trim())
            .enumerate()
            .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'));
        for (index, line) in entries {
            let entry = index + 1;
            let syntax = |reason| KeyRingError::Syntax {
                source_name: source_name.to_owned(),
                entry,
                reason,
            };
            let (key_id, value) = line
                .split_once('=')
                .ok_or_else(|| syntax("there is no `=`"))?;
            let key_id = key_id.trim();
            // Checked before the key is read, and reported without quoting the id: a line
            // that lost its `KEY-ID =` would otherwise show the key as an id.
            if let Some(reason) = key_id_problem(key_id) {
                return Err(syntax(reason));
            }
            let in_entry = |source| KeyRingError::Entry {
                source_name: source_name.to_owned(),
                entry,
                source: Box::new(source),
            };
            let key = decode_key(key_id, value.trim()).map_err(in_entry)?;
            ring = Some(match ring {
                None => Self::new(key_id, &key).map_err(in_entry)?,
                Some(ring) if ring.position(key_id).is_some() => {
                    return Err(KeyRingError::Duplicate {
                        source_name: source_name.to_owned(),
                        key_id: key_id.to_owned(),
                    });
                }
                Some(ring) => ring.with_key(key_id, &key).map_err(in_entry)?,
            });
        }
        ring.ok_or_else(|| KeyRingError::Empty {
            source_name: source_name.to_owned(),
        })
    }

    /// The ring in the key file at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, KeyRingError> {
        let path = path.as_ref();
        let text =
            Zeroizing::new(
                std::fs::read_to_string(path).map_err(|source| KeyRingError::Io {
                    path: path.display().to_string(),
                    source,
                })?,
            );
        Self::parse(&text, &path.display().to_string())
    }

    /// The ring in the environment variable `name`, in the key file format (entries separated
    /// by newlines or `;`).
    pub fn from_env(name: &str) -> Result<Self, KeyRingError> {
        let text = Zeroizing::new(std::env::var(name).map_err(|_| KeyRingError::Env {
            name: name.to_owned(),
        })?);
        Self::parse(&text, &format!("environment variable {name}"))
    }

    /// The id of the key new messages are encrypted with.
    pub fn current_key_id(&self) -> &str {
        self.current().id()
    }

    /// Every key id, in the order the keys were added (never the keys).
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(RingKey::id)
    }

    /// Whether the ring holds a key named `key_id`.
    pub fn contains(&self, key_id: &str) -> bool {
        self.position(key_id).is_some()
    }

    pub(super) fn current(&self) -> &RingKey {
        &self.keys[self.current]
    }

    pub(super) fn key(&self, key_id: &str) -> Option<&RingKey> {
        self.position(key_id).map(|at| &self.keys[at])
    }

    fn position(&self, key_id: &str) -> Option<usize> {
        self.keys.iter().position(|key| key.id == key_id)
    }
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("current", &self.current_key_id())
            .field("key_ids", &self.key_ids().collect::<Vec<_>>())
            .finish()
    }
}

fn ring_key(key_id: &str, key: &[u8]) -> Result<RingKey, KeyRingError> {
    let length = length_byte(key_id)?;
    let mut header = vec![MAGIC, VERSION, length];
    header.extend_from_slice(key_id.as_bytes());
    let cipher = Cipher::new(key).ok_or_else(|| KeyRingError::KeyLength {
        key_id: key_id.to_owned(),
        length: key.len(),
    })?;
    Ok(RingKey {
        id: key_id.to_owned(),
        header,
        cipher,
    })
}

/// Why a key id cannot be used: the framing cannot carry it (empty, over 255 bytes) or a key
/// file cannot hold it.
fn key_id_problem(key_id: &str) -> Option<&'static str> {
    Some(if key_id.is_empty() {
        "a key id cannot be empty: it is what a reader looks the key up by"
    } else if key_id.len() > MAX_KEY_ID_LEN {
        TOO_LONG
    } else if key_id.contains(['=', ';', '#']) || key_id.chars().any(char::is_whitespace) {
        "a key id has no `=`, `;`, `#` or whitespace"
    } else if key_id.chars().any(char::is_control) {
        "a key id has no control characters"
    } else {
        return None;
    })
}

/// The length byte of a key id, or why the key id cannot be used ([`key_id_problem`]).
fn length_byte(key_id: &str) -> Result<u8, KeyRingError> {
    let reason = match (key_id_problem(key_id), u8::try_from(key_id.len())) {
        (None, Ok(length)) => return Ok(length),
        (Some(reason), _) => reason,
        (None, Err(_)) => TOO_LONG,
    };
    let shown: String = key_id.chars().take(64).collect();
    let shown = if shown.len() < key_id.len() {
        format!("{shown}... ({} bytes)", key_id.len())
    } else {
        shown
    };
    Err(KeyRingError::KeyId {
        key_id: shown,
        reason,
    })
}

/// The key material of a key file value: `hex:` hex, or Base64.
fn decode_key(key_id: &str, value: &str) -> Result<Zeroizing<Vec<u8>>, KeyRingError> {
    let (decoded, encoding) = match value.strip_prefix("hex:") {
        Some(hex) => (
            hex::decode(hex.trim()).ok(),
            "not hex: after `hex:` come two hex digits per byte",
        ),
        None => (
            BASE64.decode(value).ok(),
            "not Base64 (standard alphabet); prefix hex keys with `hex:`",
        ),
    };
    decoded
        .map(Zeroizing::new)
        .ok_or_else(|| KeyRingError::KeyEncoding {
            key_id: key_id.to_owned(),
            encoding,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    #[test]
    fn keys_of_every_aes_size_are_taken_and_others_refused() {
        for length in KEY_LENGTHS {
            KeyRing::new("k", &vec![1; length]).unwrap();
        }
        for length in [0, 15, 17, 31, 33, 64] {
            let error = KeyRing::new("k", &vec![1; length]).unwrap_err();
            assert!(error.is_key_material(), "{error}");
            assert!(error.to_string().contains(&format!("this one is {length}")));
        }
    }

    #[test]
    fn key_ids_are_refused_when_the_framing_or_the_file_cannot_carry_them() {
        KeyRing::new(&"k".repeat(255), &[1; 32]).unwrap();
        KeyRing::new("é-2026", &[1; 32]).unwrap();
        for bad in [
            String::new(),
            "k".repeat(256),
            "é".repeat(128),
            " k".into(),
            "a b".into(),
            "a=b".into(),
            "a;b".into(),
            "a#b".into(),
            "a\nb".into(),
        ] {
            let error = KeyRing::new(&bad, &[1; 32]).unwrap_err();
            assert!(error.is_key_id(), "{bad:?}: {error}");
        }
        let long = KeyRing::new(&"k".repeat(256), &[1; 32]).unwrap_err();
        assert!(long.to_string().contains("(256 bytes)"), "{long}");
    }

    #[test]
    fn rotation_keeps_old_keys_readable() {
        let ring = KeyRing::new("old", &[1; 16])
            .unwrap()
            .with_key("new", &[2; 32])
            .unwrap()
            .use_key("new")
            .unwrap();
        assert_eq!(ring.current_key_id(), "new");
        assert!(ring.contains("old") && ring.contains("new") && !ring.contains("other"));
        assert!(matches!(
            KeyRing::new("a", &[1; 16]).unwrap().use_key("b"),
            Err(KeyRingError::NoSuchKey { .. })
        ));
    }

    #[test]
    fn the_key_file_format() {
        let text = format!(
            "# keys\n\n  current = {KEY}\r\nold=hex:{}\n# trailing comment\n",
            "ab".repeat(24)
        );
        let ring = KeyRing::parse(&text, "keys.txt").unwrap();
        assert_eq!(ring.key_ids().collect::<Vec<_>>(), ["current", "old"]);
        assert_eq!(ring.current_key_id(), "current");
        let unpadded = KeyRing::parse(&format!("k = {}", KEY.trim_end_matches('=')), "x").unwrap();
        assert_eq!(unpadded.current_key_id(), "k");
        let one_line = KeyRing::parse(&format!("a = {KEY}; b = {KEY}"), "VAR").unwrap();
        assert_eq!(one_line.key_ids().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn key_file_errors_say_where_and_never_quote_the_key() {
        let secret = "c2VjcmV0LXNlY3JldC1zZWNyZXQ=";
        let cases: [(String, &str); 7] = [
            (
                format!("k = {secret}"),
                "keys.txt, entry 1: key `k`: an AES key is 16, 24 or 32 bytes and this one is 20",
            ),
            (
                format!("a = {KEY}\nk = hex:zz{secret}"),
                "keys.txt, entry 2: key `k`: not hex",
            ),
            (
                format!("k = *{secret}"),
                "keys.txt, entry 1: key `k`: not Base64",
            ),
            (
                format!("a = {KEY}\nno equals sign {secret}"),
                "keys.txt, entry 2: expected `KEY-ID = KEY`: a key id has no",
            ),
            (
                format!("a = {KEY}\nc2VjcmV0LXNlY3JldC1zZWNyZXQ"),
                "keys.txt, entry 2: expected `KEY-ID = KEY`: there is no `=`",
            ),
            (
                format!("a = {KEY}\na = {KEY}"),
                "keys.txt: key id `a` is given twice",
            ),
            ("# nothing\n".into(), "keys.txt holds no key"),
        ];
        for (text, expected) in cases {
            let error = KeyRing::parse(&text, "keys.txt").unwrap_err();
            let chain = polyq_amqp::error_chain(&error);
            assert!(chain.starts_with(expected), "{chain}");
            assert!(!chain.contains(secret) && !chain.contains(KEY), "{chain}");
        }
        let missing = KeyRing::from_file("/nonexistent/keys.txt").unwrap_err();
        assert!(missing.is_source() && missing.to_string().contains("/nonexistent/keys.txt"));
        let unset = KeyRing::from_env("ACEMQ_TEST_KEYS_THAT_ARE_NOT_SET").unwrap_err();
        assert!(unset.is_source(), "{unset}");
    }

    #[test]
    fn debug_shows_ids_only() {
        let ring = KeyRing::new("k1", &[0xAB; 32]).unwrap();
        let shown = format!("{ring:?}");
        assert_eq!(shown, r#"KeyRing { current: "k1", key_ids: ["k1"] }"#);
    }
}
