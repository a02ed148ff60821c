//! The `message_json` target: [`polyq_fuzz::targets::message_json`], whose checks `fuzz/tests/corpus.rs`
//! also replays over the saved corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| polyq_fuzz::targets::message_json::check(data));
