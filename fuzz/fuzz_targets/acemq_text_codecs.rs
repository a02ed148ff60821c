//! The `acemq_text_codecs` target: [`polyq_fuzz::targets::acemq_text_codecs`], whose checks
//! `fuzz/tests/corpus.rs` also replays over the saved corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| polyq_fuzz::targets::acemq_text_codecs::check(data));
