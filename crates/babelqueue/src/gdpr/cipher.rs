//! The reference cipher of ADR-0030: AES-GCM over RustCrypto's `aes-gcm`.

use std::fmt;

use aes_gcm::aead::{Aead, Generate, KeyInit};
use aes_gcm::aes::Aes192;
use aes_gcm::aes::cipher::consts::U12;
use aes_gcm::{Aes128Gcm, Aes256Gcm, AesGcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;

/// The field-level protection primitive: bytes in, a JSON-safe string out, and back.
///
/// `decrypt` must fail (never return other bytes) for a string it did not produce or one
/// produced under another key; both are called from any thread.
pub trait Cipher: Send + Sync {
    /// Protects the canonical JSON of one field value.
    ///
    /// # Errors
    /// A [`CipherError`] when it cannot.
    fn encrypt(&self, plaintext: &[u8]) -> Result<String, CipherError>;

    /// Gives back the bytes `encrypt` was given.
    ///
    /// # Errors
    /// A [`CipherError`] for anything `encrypt` did not produce under a key it holds.
    fn decrypt(&self, ciphertext: &str) -> Result<Vec<u8>, CipherError>;
}

/// Why the cipher failed. Never carries key material or plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CipherError {
    /// A key of another length than AES takes.
    #[error("an AES-GCM key is 16, 24 or 32 bytes (AES-128, -192, -256), not {0}")]
    KeyLength(usize),
    /// The ciphertext is not standard padded base64.
    #[error("the ciphertext is not standard padded base64")]
    NotBase64,
    /// The decoded ciphertext is too short to hold a nonce and a tag.
    #[error("the ciphertext is {0} bytes, shorter than a 12-byte nonce and a 16-byte tag")]
    TooShort(usize),
    /// No key opens it: another key sealed it, or it was altered.
    #[error("no key opens it (sealed under another key, or altered)")]
    Unauthenticated,
    /// Encryption failed (the plaintext is beyond AES-GCM's limit).
    #[error("AES-GCM refused to encrypt")]
    Encrypt,
}

impl CipherError {
    /// Whether no key authenticates the ciphertext (a wrong key or tampering), as opposed to a
    /// string that is not a ciphertext at all.
    pub fn is_unauthenticated(&self) -> bool {
        matches!(self, CipherError::Unauthenticated)
    }
}

type Aes192Gcm = AesGcm<Aes192, U12>;

/// One AES-GCM key, its size chosen by its length.
enum Key {
    Aes128(Box<Aes128Gcm>),
    Aes192(Box<Aes192Gcm>),
    Aes256(Box<Aes256Gcm>),
}

impl Key {
    fn new(key: &[u8]) -> Result<Self, CipherError> {
        let wrong = |_| CipherError::KeyLength(key.len());
        Ok(match key.len() {
            16 => Key::Aes128(Box::new(Aes128Gcm::new_from_slice(key).map_err(wrong)?)),
            24 => Key::Aes192(Box::new(Aes192Gcm::new_from_slice(key).map_err(wrong)?)),
            32 => Key::Aes256(Box::new(Aes256Gcm::new_from_slice(key).map_err(wrong)?)),
            other => return Err(CipherError::KeyLength(other)),
        })
    }

    fn bits(&self) -> u16 {
        match self {
            Key::Aes128(_) => 128,
            Key::Aes192(_) => 192,
            Key::Aes256(_) => 256,
        }
    }

    fn seal(&self, nonce: &Nonce<U12>, plaintext: &[u8]) -> Result<Vec<u8>, aes_gcm::Error> {
        match self {
            Key::Aes128(k) => k.encrypt(nonce, plaintext),
            Key::Aes192(k) => k.encrypt(nonce, plaintext),
            Key::Aes256(k) => k.encrypt(nonce, plaintext),
        }
    }

    fn open(&self, nonce: &Nonce<U12>, sealed: &[u8]) -> Result<Vec<u8>, aes_gcm::Error> {
        match self {
            Key::Aes128(k) => k.decrypt(nonce, sealed),
            Key::Aes192(k) => k.decrypt(nonce, sealed),
            Key::Aes256(k) => k.decrypt(nonce, sealed),
        }
    }
}

/// The reference cipher: AES-GCM (a 16-, 24- or 32-byte key selects AES-128, -192 or -256), a
/// fresh random 12-byte nonce per value, and the standard padded base64 of
/// `nonce || ciphertext || tag` as the output, which the Go, Java, Node, .NET and PHP SDKs
/// write and the Python SDK documents over `cryptography`.
///
/// A key ring for rotation: the current key encrypts; it and every retired key decrypt, tried
/// in turn until one authenticates the tag. Its [`Debug`](fmt::Debug) shows key sizes only.
///
/// ```
/// use babelqueue::gdpr::{AesGcmCipher, Cipher};
///
/// let old = AesGcmCipher::new(&[1u8; 16])?;
/// let sealed = old.encrypt(br#""alice@example.com""#)?;
/// let rotated = AesGcmCipher::new(&[2u8; 32])?.with_retired_key(&[1u8; 16])?;
/// assert_eq!(rotated.decrypt(&sealed)?, br#""alice@example.com""#);
/// let current_only = AesGcmCipher::new(&[2u8; 32])?;
/// assert!(current_only.decrypt(&sealed).unwrap_err().is_unauthenticated());
/// assert_eq!(format!("{rotated:?}"), "AesGcmCipher { key_bits: [256, 128] }");
/// # Ok::<(), babelqueue::gdpr::CipherError>(())
/// ```
pub struct AesGcmCipher {
    keys: Vec<Key>,
}

impl AesGcmCipher {
    /// A cipher with one key, which encrypts and decrypts.
    ///
    /// # Errors
    /// [`CipherError::KeyLength`] unless the key is 16, 24 or 32 bytes.
    pub fn new(key: &[u8]) -> Result<Self, CipherError> {
        Ok(Self {
            keys: vec![Key::new(key)?],
        })
    }

    /// Adds a retired key: it no longer encrypts, but what it sealed still decrypts.
    ///
    /// # Errors
    /// [`CipherError::KeyLength`] unless the key is 16, 24 or 32 bytes.
    pub fn with_retired_key(mut self, key: &[u8]) -> Result<Self, CipherError> {
        self.keys.push(Key::new(key)?);
        Ok(self)
    }
}

impl fmt::Debug for AesGcmCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits: Vec<u16> = self.keys.iter().map(Key::bits).collect();
        f.debug_struct("AesGcmCipher")
            .field("key_bits", &bits)
            .finish()
    }
}

impl Cipher for AesGcmCipher {
    fn encrypt(&self, plaintext: &[u8]) -> Result<String, CipherError> {
        let nonce = Nonce::<U12>::generate();
        let sealed = self.keys[0]
            .seal(&nonce, plaintext)
            .map_err(|_| CipherError::Encrypt)?;
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok(STANDARD.encode(out))
    }

    fn decrypt(&self, ciphertext: &str) -> Result<Vec<u8>, CipherError> {
        let raw = STANDARD
            .decode(ciphertext)
            .map_err(|_| CipherError::NotBase64)?;
        if raw.len() < NONCE_LEN + TAG_LEN {
            return Err(CipherError::TooShort(raw.len()));
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::<U12>::try_from(nonce).map_err(|_| CipherError::TooShort(raw.len()))?;
        self.keys
            .iter()
            .find_map(|key| key.open(&nonce, sealed).ok())
            .ok_or(CipherError::Unauthenticated)
    }
}
