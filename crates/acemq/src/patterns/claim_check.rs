//! Claim check: bodies of 64 KiB or more (by default) are stored outside the message, which
//! carries a key instead; smaller bodies travel inline. Three bytes at the start of the body say
//! which, so a reader needs no header and an operator reading a dead-letter queue finds the key
//! with [`key_of`].
//!
//! The frame is the AceMQ family's, byte for byte as Java's `ClaimCheckCodec` writes it (and the
//! Go, Python, Ruby and .NET ports after it):
//!
//! | body | meaning |
//! |---|---|
//! | `0xAC 0x01 0x00` + the body unchanged | inline ([`INLINE_FRAME`]) |
//! | `0xAC 0x01 0x01` + the key, bare UTF-8 | stored ([`STORED_FRAME`]) |
//!
//! `0xAC` marks the frame, `0x01` is its version, the third byte says which. The key is the
//! store's key and nothing else (no scheme, no length), so a service in another language
//! pointed at the same store reads a body this module stored, and the reverse. A body that does
//! not start with one of the two frames (one written before a claim check was introduced, or by
//! a publisher without one) is not a claim check: [`ClaimCheck::decode`] returns it unchanged,
//! which is what lets a claim check be added in front of a live queue.
//!
//! No header is written (`x-acemq-claim` is the application's), and a framed body keeps its
//! payload's content type: publish it with [`FramedBody`] so a consumer in another language
//! picks the payload's codec for it.
//!
//! Stores: [`MemoryStore`] (one process) and [`FileStore`] (one file per key in a directory,
//! laid out as the other ports' filesystem stores lay theirs out). A store's retention must
//! outlive every queue and every replay that may still carry a key.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), acemq::patterns::PatternError> {
//! use acemq::patterns::claim_check::{ClaimCheck, MemoryStore, key_of};
//!
//! let claims = ClaimCheck::new(MemoryStore::default()).threshold(5);
//! let small = claims.encode(b"tiny"[..].into()).await?;
//! assert_eq!(&small[..], b"\xAC\x01\x00tiny");
//! assert_eq!(key_of(&small), None);
//! let large = claims.encode(b"large enough"[..].into()).await?;
//! assert!(key_of(&large).is_some());
//! assert_eq!(&claims.decode(&large).await?[..], b"large enough");
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{BufMut as _, Bytes, BytesMut};

use super::PatternError;
use crate::codec::{CodecError, Encode};

/// Bodies of at least this many bytes are stored by default (64 KiB, the other ports' default).
pub const DEFAULT_THRESHOLD: usize = 64 * 1024;

/// The frame of a body carried inline: the body follows it unchanged.
pub const INLINE_FRAME: &[u8] = &[0xAC, 0x01, 0x00];

/// The frame of a body stored outside the message: the key follows it, as UTF-8.
pub const STORED_FRAME: &[u8] = &[0xAC, 0x01, 0x01];

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

/// One file per key in a directory (created on first use), named by the key alone, as the
/// other ports' filesystem stores name theirs: a service in another language sharing the
/// directory reads what this one stored. A key from the wire becomes a file name only when it
/// is one those stores accept too (an ASCII letter or digit, then up to 127 letters, digits,
/// `.`, `_` or `-`), so it cannot leave the directory.
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

    fn path_of(&self, key: &str) -> Result<PathBuf, String> {
        let mut bytes = key.bytes();
        let valid = key.len() <= 128
            && bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
            && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if valid {
            Ok(self.dir.join(key))
        } else {
            Err(
                "the key is not a file store key (an ASCII letter or digit, then up to 127 \
                 letters, digits, `.`, `_` or `-`); it was not written by a file store"
                    .to_owned(),
            )
        }
    }
}

impl ClaimStore for FileStore {
    async fn put(&self, key: &str, body: Bytes) -> Result<(), String> {
        let dir = self.dir.clone();
        let path = self.path_of(key)?;
        // Written aside and renamed into place, so a reader on the same directory (in any
        // language) finds the whole body or none, never a partial one.
        let staging = dir.join(format!("{key}.partial"));
        // File I/O blocks: off the async workers.
        tokio::task::spawn_blocking(move || {
            let written = std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(&staging, &body))
                .and_then(|()| std::fs::rename(&staging, &path));
            if written.is_err() {
                let _ = std::fs::remove_file(&staging);
            }
            written.map_err(|e| format!("cannot write {}: {e}", path.display()))
        })
        .await
        .map_err(|e| e.to_string())?
    }

    async fn get(&self, key: &str) -> Result<Bytes, String> {
        let path = self.path_of(key)?;
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
/// payload, then [`encode`](ClaimCheck::encode) the bytes and publish them with
/// [`FramedBody`]; [`decode`](ClaimCheck::decode) before the payload codec on the way in.
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

    /// Bodies of at least `bytes` bytes are stored, smaller ones travel inline (default
    /// [`DEFAULT_THRESHOLD`]); zero stores every body. The other ports compare the same way,
    /// so a body exactly at the threshold is stored whichever language writes it.
    #[must_use]
    pub fn threshold(mut self, bytes: usize) -> Self {
        self.threshold = bytes;
        self
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The framed body: inline below the threshold, otherwise stored under a new key (a
    /// UUID, as the other ports' stores issue).
    pub async fn encode(&self, body: Bytes) -> Result<Bytes, PatternError> {
        if body.len() < self.threshold {
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

    /// The body a framed body stands for, fetched from the store when it was stored. A body
    /// without a frame comes back unchanged.
    pub async fn decode(&self, framed: &[u8]) -> Result<Bytes, PatternError> {
        if let Some(inline) = framed.strip_prefix(INLINE_FRAME) {
            return Ok(Bytes::copy_from_slice(inline));
        }
        let Some(key) = framed.strip_prefix(STORED_FRAME) else {
            return Ok(Bytes::copy_from_slice(framed));
        };
        let key = std::str::from_utf8(key).map_err(|_| PatternError::ClaimFrame {
            reason: "the stored frame's key is not UTF-8".to_owned(),
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

/// The key a stored body's frame carries, as it is (the store decides whether it is one of
/// its keys), or `None` for an inline body, a body without a frame, or a key that is not UTF-8.
pub fn key_of(framed: &[u8]) -> Option<&str> {
    std::str::from_utf8(framed.strip_prefix(STORED_FRAME)?).ok()
}

fn frame(header: &[u8], content: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(header.len() + content.len());
    framed.put_slice(header);
    framed.put_slice(content);
    framed.freeze()
}

/// Publishes a framed body as it is, under its payload's content type. A claim-checked
/// document is still that document: the other ports keep the payload codec's content type and
/// pick a consumer's codec by it, so a JSON document sent as `application/octet-stream` would
/// not be read as JSON.
///
/// ```
/// use acemq::codec::{Encode, JSON_CONTENT_TYPE};
/// use acemq::patterns::claim_check::FramedBody;
///
/// let framed = FramedBody::new(JSON_CONTENT_TYPE);
/// let body = Encode::<[u8]>::encode(&framed, b"\xAC\x01\x00{}")?;
/// assert_eq!(&body[..], b"\xAC\x01\x00{}");
/// assert_eq!(Encode::<[u8]>::content_type(&framed), "application/json");
/// # Ok::<(), acemq::codec::CodecError>(())
/// ```
#[derive(Debug, Clone)]
pub struct FramedBody {
    content_type: String,
}

impl FramedBody {
    /// Framed bodies whose payloads are `content_type` (the payload codec's).
    pub fn new(content_type: impl Into<String>) -> Self {
        Self {
            content_type: content_type.into(),
        }
    }
}

impl<T: AsRef<[u8]> + ?Sized> Encode<T> for FramedBody {
    fn content_type(&self) -> &str {
        &self.content_type
    }

    fn encode(&self, framed: &T) -> Result<Bytes, CodecError> {
        Ok(Bytes::copy_from_slice(framed.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_are_the_bytes_the_other_ports_write() {
        let store = MemoryStore::default();
        let claims = ClaimCheck::new(store.clone());
        // The inline frame the Ruby port's spec pins for this payload
        // (AceMQ-Company/acemq-ruby-amqp, spec/patterns/claim_check_spec.rb), read from
        // Java's ClaimCheckCodec.
        let inline = claims
            .encode(Bytes::from_static(br#"{"id":"A-1"}"#))
            .await
            .unwrap();
        assert_eq!(&inline[..], b"\xAC\x01\x00{\"id\":\"A-1\"}");

        let stored = claims
            .threshold(0)
            .encode(Bytes::from_static(br#"{"id":"A-1"}"#))
            .await
            .unwrap();
        assert_eq!(&stored[..3], b"\xAC\x01\x01");
        // The key is bare after the three bytes: a UUID, as the other ports' stores issue.
        let key = std::str::from_utf8(&stored[3..]).unwrap();
        assert_eq!(uuid::Uuid::parse_str(key).unwrap().to_string(), key);
        assert_eq!(key_of(&stored), Some(key));
        assert_eq!(&store.get(key).await.unwrap()[..], br#"{"id":"A-1"}"#);
    }

    #[tokio::test]
    async fn frames_another_port_wrote_are_read() {
        let store = MemoryStore::default();
        store
            .put("0b7c-9_a.bin", Bytes::from_static(b"from java"))
            .await
            .unwrap();
        let claims = ClaimCheck::new(store);
        // Built by hand, as Java's frame(CHECKED, key) and frame(INLINE, payload) write them.
        let stored = claims.decode(b"\xAC\x01\x010b7c-9_a.bin").await.unwrap();
        assert_eq!(&stored[..], b"from java");
        let inline = claims
            .decode(b"\xAC\x01\x00{\"scan\":\"small\"}")
            .await
            .unwrap();
        assert_eq!(&inline[..], b"{\"scan\":\"small\"}");
        assert_eq!(&claims.decode(b"\xAC\x01\x00").await.unwrap()[..], b"");
    }

    #[tokio::test]
    async fn the_threshold_is_the_first_stored_size() {
        // Strictly below travels inline, as in every port (the Go port's
        // TestTheThresholdIsComparedTheWayTheFamilyComparesIt: 99 inline, 100 and 101 stored).
        let store = MemoryStore::default();
        let claims = ClaimCheck::new(store.clone()).threshold(100);
        for (len, stored) in [(99, false), (100, true), (101, true)] {
            let framed = claims.encode(vec![b'x'; len].into()).await.unwrap();
            assert_eq!(key_of(&framed).is_some(), stored, "{len} bytes");
            assert_eq!(framed.starts_with(INLINE_FRAME), !stored, "{len} bytes");
        }
        assert_eq!(store.len(), 2);
        let everything = ClaimCheck::new(store.clone()).threshold(0);
        let empty = everything.encode(Bytes::new()).await.unwrap();
        assert!(empty.starts_with(STORED_FRAME));
        assert_eq!(store.len(), 3);
    }

    #[tokio::test]
    async fn bodies_without_a_frame_come_back_unchanged() {
        let claims = ClaimCheck::new(MemoryStore::default());
        for body in [
            &b"{\"id\":1}"[..],
            // The magic and version, but no kind a frame has: a payload, not a frame.
            b"\xAC\x01\x07\x42",
            b"\xAC\x02\x00abc",
            b"\xAC\x01",
            b"\xAC",
            b"",
        ] {
            assert_eq!(&claims.decode(body).await.unwrap()[..], body);
            assert_eq!(key_of(body), None);
        }
    }

    #[tokio::test]
    async fn the_key_is_read_as_the_frame_carries_it() {
        assert_eq!(key_of(b"\xAC\x01\x00abc"), None);
        // A key another port's store issued (an object store's path) is shown as it is.
        assert_eq!(
            key_of(b"\xAC\x01\x01policies/o-1.pdf"),
            Some("policies/o-1.pdf")
        );
        assert_eq!(key_of(b"\xAC\x01\x01"), Some(""));
        assert_eq!(key_of(b"\xAC\x01\x01\xff"), None);
        let claims = ClaimCheck::new(MemoryStore::default());
        let err = claims.decode(b"\xAC\x01\x01\xff").await.unwrap_err();
        assert!(matches!(err, PatternError::ClaimFrame { .. }), "{err}");
        let err = claims.decode(b"\xAC\x01\x01missing").await.unwrap_err();
        assert!(matches!(err, PatternError::ClaimStore { ref key, .. } if key == "missing"));
    }

    #[tokio::test]
    async fn keys_from_the_wire_cannot_name_other_files() {
        let root = std::env::temp_dir().join(polyq_testkit::unique_name("acemq-claim-keys"));
        let store = FileStore::new(root.join("claims"));
        std::fs::create_dir_all(root.join("claims")).unwrap();
        std::fs::write(root.join("outside"), b"secret").unwrap();
        let too_long = "a".repeat(129);
        for bad in [
            "../outside",
            "..",
            ".",
            "",
            ".hidden",
            "-dash",
            "a/b",
            "a\\b",
            "é",
            too_long.as_str(),
        ] {
            assert!(store.get(bad).await.is_err(), "{bad:?}");
            assert!(store.put(bad, Bytes::new()).await.is_err(), "{bad:?}");
        }
        assert_eq!(std::fs::read(root.join("outside")).unwrap(), b"secret");
        let longest = "a".repeat(128);
        for good in ["0b7c-9_a.bin", longest.as_str()] {
            store.put(good, Bytes::from_static(b"kept")).await.unwrap();
            assert_eq!(&store.get(good).await.unwrap()[..], b"kept");
        }
        // Renamed into place: no staging file is left beside the bodies.
        let mut names: Vec<_> = std::fs::read_dir(store.dir())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["0b7c-9_a.bin", longest.as_str()]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
