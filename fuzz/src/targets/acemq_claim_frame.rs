//! The claim-check frame: any body decodes without a panic, a body without a frame comes back
//! unchanged, every body framed (inline or stored) decodes to itself, and a key from the wire
//! never reads a file outside the file store's directory.

use std::sync::LazyLock;

use acemq::patterns::claim_check::{
    ClaimCheck, FileStore, INLINE_FRAME, MemoryStore, STORED_FRAME, key_of,
};
use bytes::Bytes;
use futures_util::FutureExt as _;

/// The file store's reads run on blocking threads, so they need a runtime.
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
});

/// A directory that holds nothing: a read through it can only succeed by leaving it.
static EMPTY_DIR: LazyLock<std::path::PathBuf> =
    LazyLock::new(|| std::env::temp_dir().join("polyq-fuzz-claims-never-written"));

/// The target's checks on one input: panics when one fails.
pub fn check(data: &[u8]) {
    // The memory store answers at once, so its futures complete on first poll.
    let claims = ClaimCheck::new(MemoryStore::default());
    let decoded = claims
        .decode(data)
        .now_or_never()
        .expect("the memory store does not wait");
    if let Some(inline) = data.strip_prefix(INLINE_FRAME) {
        assert_eq!(decoded.expect("an inline body decodes"), inline);
    } else if !data.starts_with(STORED_FRAME) {
        assert_eq!(decoded.expect("a body without a frame decodes"), data);
    } else {
        assert!(decoded.is_err(), "an empty store returned a body");
    }
    if let Some(key) = key_of(data) {
        assert_eq!(&data[STORED_FRAME.len()..], key.as_bytes());
        let files = ClaimCheck::new(FileStore::new(EMPTY_DIR.as_path()));
        assert!(
            RUNTIME.block_on(files.decode(data)).is_err(),
            "a key from the wire read a file: {key:?}"
        );
    }

    let threshold = data.first().map_or(0, |&b| usize::from(b));
    let claims = claims.threshold(threshold);
    let framed = claims
        .encode(Bytes::copy_from_slice(data))
        .now_or_never()
        .expect("the memory store does not wait")
        .expect("the memory store keeps every body");
    let back = claims
        .decode(&framed)
        .now_or_never()
        .expect("the memory store does not wait");
    assert_eq!(back.expect("a framed body decodes"), data);
}
