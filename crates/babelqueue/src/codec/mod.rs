//! The envelope contract: pure functions and types, no I/O, no async. Everything that decides
//! what a BabelQueue body is lives here, and every other layer calls it.
//!
//! - `envelope`: [`Envelope`](crate::Envelope), [`Meta`](crate::Meta),
//!   [`RawJson`](crate::RawJson) and the contract's key lists (core, known, forbidden).
//! - `make`: the producer side, [`make`](crate::make) and [`Message`](crate::Message).
//! - `encode`: [`Envelope::encode`](crate::Envelope::encode), the canonical bytes.
//! - `decode`: [`decode`](crate::decode), identity resolution, forbidden keys dropped with
//!   [`Warning`](crate::Warning)s, unknown keys kept; `fast_decode` reads bodies in the canonical
//!   shape in one pass and leaves the rest to it; `typed_members` is its serde pass.
//! - `verdict`: [`Envelope::accepts`](crate::Envelope::accepts) and
//!   [`classify`](crate::classify), the consumer verdict (accepted, rejected or poison).
//! - `raw_json`: byte-level work on JSON text (compacting, strictness, escaping), and
//!   `payload_scan`, which refuses non-finite numbers before `serde_json` writes them as `null`.
//! - [`whitespace`](crate::whitespace): the closed ASCII whitespace set every SDK trims with.

pub(crate) mod decode;
pub(crate) mod encode;
pub mod envelope;
pub(crate) mod fast_decode;
pub(crate) mod make;
pub(crate) mod payload_scan;
pub(crate) mod raw_json;
pub(crate) mod typed_members;
pub(crate) mod verdict;
pub mod whitespace;
