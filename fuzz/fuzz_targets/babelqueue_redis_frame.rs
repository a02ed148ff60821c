//! The `babelqueue_redis_frame` target: [`polyq_fuzz::targets::babelqueue_redis_frame`], whose checks `fuzz/tests/corpus.rs`
//! also replays over the saved corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| polyq_fuzz::targets::babelqueue_redis_frame::check(data));
