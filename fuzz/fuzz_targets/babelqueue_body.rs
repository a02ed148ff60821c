//! The `babelqueue_body` target: [`polyq_fuzz::targets::babelqueue_body`], whose checks `fuzz/tests/corpus.rs`
//! also replays over the saved corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| polyq_fuzz::targets::babelqueue_body::check(data));
