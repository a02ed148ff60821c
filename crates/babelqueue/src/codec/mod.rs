//! The envelope contract: building, encoding and decoding BabelQueue bodies.

pub(crate) mod decode;
pub mod envelope;
pub(crate) mod fast_decode;
pub(crate) mod make;
pub(crate) mod payload_scan;
pub(crate) mod raw_json;
pub(crate) mod typed_members;
pub mod whitespace;
