//! The patterns the envelope's fields exist for, built on the runtime: replaying set-aside
//! messages ([`replay`]), request/reply ([`request_reply`]), declared pipelines
//! ([`pipeline`]), carried itineraries ([`itinerary_follower`]) and the claim check
//! ([`claim_check`]).
//!
//! Behaviour follows the Java reference; where the ports differ, each module says which side
//! it takes (and `docs/acemq-patterns.md` lists every choice).

pub mod claim_check;
mod error;
pub mod itinerary_follower;
pub mod pipeline;
pub mod replay;
pub mod request_reply;

pub use error::PatternError;
