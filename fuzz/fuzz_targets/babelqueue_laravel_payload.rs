//! The `babelqueue_laravel_payload` target: [`polyq_fuzz::targets::babelqueue_laravel_payload`], whose checks `fuzz/tests/corpus.rs`
//! also replays over the saved corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(
    |data: &[u8]| polyq_fuzz::targets::babelqueue_laravel_payload::check(data)
);
