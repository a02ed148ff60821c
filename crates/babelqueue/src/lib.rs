//! BabelQueue for Rust.
//!
//! The `{job, trace_id, data, meta, attempts}` JSON envelope that the PHP, Go, Python, Node, .NET
//! and Java SDKs produce and consume, written and read byte-compatibly.
