//! Claim check: bodies above a threshold (64 KiB by default) are stored outside the message,
//! which carries a key instead; smaller bodies travel inline. A frame at the start of the body
//! says which, so a reader needs no header and an operator reading a dead-letter queue sees
//! the key ([`key_of`]).
//!
//! The frame is one line of ASCII text, then the content:
//!
//! - `acemq-claim-check:inline\n` followed by the body bytes unchanged;
//! - `acemq-claim-check:stored\n` followed by the key (ASCII letters, digits, `-`, `_`, `.`;
//!   a UUID when this module chose it).
//!
//! Stores: [`MemoryStore`] (one process) and [`FileStore`] (one file per key in a directory).
//! A store's retention must outlive every queue and every replay that may still carry a key.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), acemq::patterns::PatternError> {
//! use acemq::patterns::claim_check::{ClaimCheck, MemoryStore, key_of};
//!
//! let claims = ClaimCheck::new(MemoryStore::default()).threshold(4);
//! let small = claims.encode(b"tiny"[..].into()).await?;
//! assert_eq!(&small[..], b"acemq-claim-check:inline\ntiny");
//! let large = claims.encode(b"larger than four"[..].into()).await?;
//! assert!(key_of(&large).is_some());
//! assert_eq!(&claims.decode(&large).await?[..], b"larger than four");
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{BufMut as _, Bytes, BytesMut};

use super::PatternError;

/// Bodies larger than this many bytes are stored by default (64 KiB).
pub const DEFAULT_THRESHOLD: usize = 64 * 1024;

/// The frame of a body carried inline.
pub const INLINE_FRAME: &[u8] = b"acemq-claim-check:inline\n";

/// The frame of a body stored outside the message; the key follows it.
pub const STORED_FRAME: &[u8] = b"acemq-claim-check:stored\n";

/// Where stored bodies live.
pub trait ClaimStore: Send + Sync + 'static {
    /// Stores `body` under `key`.
    fn put(&self, key: &str, body: Bytes) -> impl Future<Output = Result<(), String>> + Send;
    /// The body stored under `key`.
    fn get(&self, key: &str) -> impl Future<Output = Result<Bytes, String>> + Send;
}

/// Bodies kept in memory, for one process (tests, the embedded broker). Clones share the
/// bodies.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    bodies: Arc<Mutex<HashMap<String, Bytes>>>,
}

impl MemoryStore {
    /// Bodies stored.
    pub fn len(&self) -> usize {
        self.bodies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ClaimStore for MemoryStore {
    async fn put(&self, key: &str, body: Bytes) -> Result<(), String> {
        self.bodies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.to_owned(), body);
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Bytes, String> {
        self.bodies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
            .ok_or_else(|| "no body is stored under this key".to_owned())
    }
}

/// One file per key in a directory (created on first use). Keys are checked before they
/// become file names, so a key from the wire cannot leave the directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// A store in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

impl ClaimStore for FileStore {
    async fn put(&self, key: &str, body: Bytes) -> Result<(), String> {
        let dir = self.dir.clone();
        let path = dir.join(key);
        // File I/O blocks: off the async workers.
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(&path, &body))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))
        })
        .await
        .map_err(|e| e.to_string())?
    }

    async fn get(&self, key: &str) -> Result<Bytes, String> {
        let path = self.dir.join(key);
        tokio::task::spawn_blocking(move || {
            std::fs::read(&path)
                .map(Bytes::from)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

/// Frames bodies, storing the large ones in `S`. Use it around any codec: encode the
/// payload, then [`encode`](ClaimCheck::encode) the bytes; [`decode`](ClaimCheck::decode)
/// before the payload codec on the way in.
#[derive(Debug, Clone)]
pub struct ClaimCheck<S> {
    store: S,
    threshold: usize,
}

impl<S: ClaimStore> ClaimCheck<S> {
    /// A claim check on `store` with the default threshold ([`DEFAULT_THRESHOLD`]).
    pub fn new(store: S) -> Self {
        Self {
            store,
            threshold: DEFAULT_THRESHOLD,
        }
    }

    /// Bodies larger than `bytes` are stored (default [`DEFAULT_THRESHOLD`]).
    #[must_use]
    pub fn threshold(mut self, bytes: usize) -> Self {
        self.threshold = bytes;
        self
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The framed body: inline up to the threshold, otherwise stored under a new key.
    pub async fn encode(&self, body: Bytes) -> Result<Bytes, PatternError> {
        if body.len() <= self.threshold {
            return Ok(frame(INLINE_FRAME, &body));
        }
        let key = uuid::Uuid::new_v4().to_string();
        self.store
            .put(&key, body)
            .await
            .map_err(|reason| PatternError::ClaimStore {
                key: key.clone(),
                reason,
            })?;
        Ok(frame(STORED_FRAME, key.as_bytes()))
    }

    /// The body a framed body stands for, fetched from the store when it was stored.
    pub async fn decode(&self, framed: &[u8]) -> Result<Bytes, PatternError> {
        if let Some(inline) = framed.strip_prefix(INLINE_FRAME) {
            return Ok(Bytes::copy_from_slice(inline));
        }
        let key = key_of(framed).ok_or_else(|| PatternError::ClaimFrame {
            reason: describe_frame(framed),
        })?;
        self.store
            .get(key)
            .await
            .map_err(|reason| PatternError::ClaimStore {
                key: key.to_owned(),
                reason,
            })
    }
}

/// The key a stored body's frame carries, or `None` for an inline body, a body without a
/// frame, or a key with characters a key may not have.
pub fn key_of(framed: &[u8]) -> Option<&str> {
    let key = std::str::from_utf8(framed.strip_prefix(STORED_FRAME)?).ok()?;
    let valid = !key.is_empty()
        && key != "."
        && key != ".."
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    valid.then_some(key)
}

fn frame(header: &[u8], content: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(header.len() + content.len());
    framed.put_slice(header);
    framed.put_slice(content);
    framed.freeze()
}

fn describe_frame(body: &[u8]) -> String {
    if body.starts_with(STORED_FRAME) {
        "the stored frame's key is empty or has characters other than ASCII letters, digits, `-`, `_` and `.`".to_owned()
    } else {
        let start = &body[..body.len().min(32)];
        format!(
            "the body does not start with a claim-check frame (`acemq-claim-check:inline` or `acemq-claim-check:stored` and a newline); it starts with {:?}",
            String::from_utf8_lossy(start)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_from_the_wire_cannot_name_other_files() {
        for bad in [
            &b"acemq-claim-check:stored\n../etc/passwd"[..],
            b"acemq-claim-check:stored\n..",
            b"acemq-claim-check:stored\n",
            b"acemq-claim-check:stored\na/b",
            b"acemq-claim-check:stored\n\xff",
            b"acemq-claim-check:inline\nabc",
            b"plain",
        ] {
            assert_eq!(key_of(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(
            key_of(b"acemq-claim-check:stored\n0b7c-9_a.bin"),
            Some("0b7c-9_a.bin")
        );
    }

    #[tokio::test]
    async fn unframed_bodies_are_refused_by_name() {
        let claims = ClaimCheck::new(MemoryStore::default());
        let err = claims.decode(b"{\"id\":1}").await.unwrap_err();
        assert!(
            err.to_string()
                .contains("does not start with a claim-check frame"),
            "{err}"
        );
        let err = claims
            .decode(b"acemq-claim-check:stored\nmissing")
            .await
            .unwrap_err();
        assert!(matches!(err, PatternError::ClaimStore { ref key, .. } if key == "missing"));
    }

    #[tokio::test]
    async fn the_threshold_is_inclusive() {
        let store = MemoryStore::default();
        let claims = ClaimCheck::new(store.clone()).threshold(3);
        let at = claims.encode(Bytes::from_static(b"abc")).await.unwrap();
        assert!(at.starts_with(INLINE_FRAME));
        let above = claims.encode(Bytes::from_static(b"abcd")).await.unwrap();
        assert!(above.starts_with(STORED_FRAME));
        assert_eq!(store.len(), 1);
    }
}
