//! The checks of every fuzz target, one module per target named as the target: each `check`
//! runs one input through a decoder and asserts what the target asserts. The targets in
//! `fuzz_targets/` call them under libFuzzer; `tests/corpus.rs` replays the saved corpus through
//! them as an ordinary test, so an input that once failed stays fixed.

pub mod acemq_claim_frame;
pub mod acemq_envelope;
pub mod acemq_itinerary;
pub mod acemq_route;
pub mod acemq_text_codecs;
pub mod babelqueue_body;
pub mod babelqueue_laravel_payload;
pub mod babelqueue_redis_frame;
pub mod message_json;
