//! The `acemq_envelope` target: [`polyq_fuzz::targets::acemq_envelope`], whose checks `fuzz/tests/corpus.rs`
//! also replays over the saved corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| polyq_fuzz::targets::acemq_envelope::check(data));
