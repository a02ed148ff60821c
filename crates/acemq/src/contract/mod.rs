//! The contract: what an AceMQ message is, with no I/O and no async.
//!
//! The envelope and its defaults, its wire mapping to AMQP headers and properties, the reserved
//! header names, the lenient readers for what other ports write, body codecs by content type,
//! retry arithmetic and the retry decision, queue naming and the declared topology as data,
//! routing slips and itineraries, provenance. Everything here works on the neutral AMQP types of
//! `polyq-amqp` and is tested against the shared fixtures; the runtime carries its decisions out.

pub mod codec;
pub(crate) mod envelope;
pub mod headers;
pub(crate) mod itinerary;
pub(crate) mod lenient;
pub mod provenance;
pub mod retry;
pub(crate) mod route;
pub mod topology;
pub mod wire;
