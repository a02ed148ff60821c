//! GDPR field encryption (ADR-0030, feature `gdpr`): the producer encrypts each property its
//! URN's schema marks `x-gdpr-sensitive`, the consumer decrypts it before validation and the
//! handler. Only values inside `data` change: the envelope frame, `trace_id` and
//! `meta.schema_version` are never touched, and a protected `data` is still plain JSON any SDK
//! carries without the key.
//!
//! [`protect`] and [`unprotect`] are pure (no I/O); the [`Cipher`] is the caller's, and
//! [`AesGcmCipher`] is the reference one every SDK shares (AES-GCM, a fresh 12-byte nonce, the
//! standard padded base64 of `nonce || ciphertext || tag`), with retired keys for rotation. The
//! worker decrypts with [`Worker::unprotect_payloads`](crate::worker::Worker::unprotect_payloads)
//! and [`BabelQueue::protect_payloads`](crate::BabelQueue::protect_payloads) encrypts on publish.
//!
//! ```
//! use babelqueue::gdpr::{AesGcmCipher, protect, unprotect};
//! use serde_json::json;
//!
//! let schema = json!({"type": "object", "properties": {
//!     "email": {"type": "string", "x-gdpr-sensitive": true},
//!     "order_id": {"type": "integer"},
//! }});
//! let cipher = AesGcmCipher::new(&[7u8; 32])?;
//! let mut data = json!({"order_id": 1042, "email": "alice@example.com"});
//! protect(&mut data, &schema, &cipher)?;
//! assert_eq!(data["order_id"], 1042);
//! assert_ne!(data["email"], "alice@example.com");
//! unprotect(&mut data, &schema, &cipher)?;
//! assert_eq!(data, json!({"order_id": 1042, "email": "alice@example.com"}));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cipher;

use serde_json::Value;

pub use cipher::{AesGcmCipher, Cipher, CipherError};

use crate::schema::{protected_paths, visit_path};

/// Why a field could not be protected or unprotected. Its text names the field (an RFC 6901
/// pointer into `data`), never its value or a key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The cipher refused to encrypt a field.
    #[error("cannot encrypt the sensitive field {pointer}")]
    Encrypt {
        /// Where the field is in `data`.
        pointer: String,
        /// The cipher's error.
        #[source]
        source: CipherError,
    },
    /// A protected field does not open: not a ciphertext, a wrong key, or tampered.
    #[error("cannot decrypt the protected field {pointer}")]
    Decrypt {
        /// Where the field is in `data`.
        pointer: String,
        /// The cipher's error.
        #[source]
        source: CipherError,
    },
    /// A protected field opened, but its plaintext is not JSON.
    #[error("the protected field {pointer} decrypts to text that is not JSON")]
    NotJson {
        /// Where the field is in `data`.
        pointer: String,
        /// The JSON reader's error.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// Whether a consumer could not read a protected field back ([`Error::Decrypt`],
    /// [`Error::NotJson`]): the message is retried, then dead-lettered.
    pub fn is_decrypt(&self) -> bool {
        matches!(self, Error::Decrypt { .. } | Error::NotJson { .. })
    }

    /// The RFC 6901 pointer of the field at fault.
    pub fn pointer(&self) -> &str {
        match self {
            Error::Encrypt { pointer, .. }
            | Error::Decrypt { pointer, .. }
            | Error::NotJson { pointer, .. } => pointer,
        }
    }
}

/// Encrypts, in place, each value of `data` at a path `schema` marks `x-gdpr-sensitive`: the
/// value's canonical JSON (sorted keys, compact) becomes `cipher`'s string. A marked container
/// is encrypted whole; a mark on the root, and marks under a marked container, add nothing; an
/// absent field is skipped. Returns how many values were encrypted.
///
/// Run it after validation: a schema constraining a sensitive field would reject ciphertext.
///
/// # Errors
/// [`Error::Encrypt`] when the cipher fails; `data` is then partly protected and must not be
/// published.
pub fn protect(data: &mut Value, schema: &Value, cipher: &dyn Cipher) -> Result<usize, Error> {
    let mut changed = 0;
    for path in protected_paths(schema) {
        visit_path(data, &path.steps, &mut |value, pointer| {
            let plaintext = canonical_json(value);
            let sealed = cipher
                .encrypt(plaintext.as_bytes())
                .map_err(|source| Error::Encrypt {
                    pointer: pointer.to_owned(),
                    source,
                })?;
            *value = Value::String(sealed);
            changed += 1;
            Ok(())
        })?;
    }
    Ok(changed)
}

/// Decrypts, in place, each string at a path `schema` marks `x-gdpr-sensitive` and puts back the
/// JSON value it holds: the inverse of [`protect`]. A value that is not a string (never
/// protected, or already decrypted) is left as it is, so a second run changes nothing; an absent
/// field is skipped. Returns how many values were decrypted.
///
/// # Errors
/// [`Error::Decrypt`] or [`Error::NotJson`] for the first field that does not read back.
pub fn unprotect(data: &mut Value, schema: &Value, cipher: &dyn Cipher) -> Result<usize, Error> {
    let mut changed = 0;
    for path in protected_paths(schema) {
        visit_path(data, &path.steps, &mut |value, pointer| {
            let Value::String(sealed) = value else {
                return Ok(());
            };
            let plaintext = cipher.decrypt(sealed).map_err(|source| Error::Decrypt {
                pointer: pointer.to_owned(),
                source,
            })?;
            *value = serde_json::from_slice(&plaintext).map_err(|source| Error::NotJson {
                pointer: pointer.to_owned(),
                source,
            })?;
            changed += 1;
            Ok(())
        })?;
    }
    Ok(changed)
}

/// Sorted keys, no whitespace. `serde_json`'s map is ordered by key (the crate's
/// `preserve_order` feature is not enabled in this workspace, and a test holds that), and
/// serialising a `Value` cannot fail.
fn canonical_json(value: &Value) -> String {
    value.to_string()
}

#[cfg(test)]
mod tests;
