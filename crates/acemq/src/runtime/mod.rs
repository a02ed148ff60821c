//! The runtime: the contract carried out against a broker through `polyq-amqp`, the same code
//! path on the embedded broker (`memory://`) and on RabbitMQ.
//!
//! The connection and its builder, the publisher (confirms, `mandatory`, provenance), the
//! consumer (dispatch, handler outcomes, pause, drain), the retry engine that performs the
//! contract's retry decisions (consumer wait, broker rung, republish, set-aside to `.dlq` and
//! `.parked`), interceptors, telemetry (metrics, tracing, optional OpenTelemetry) and applying a
//! declared topology.

pub(crate) mod connection;
pub mod consumer;
mod engine;
pub mod interceptor;
#[cfg(feature = "otel")]
mod otel;
pub mod publisher;
pub mod telemetry;
pub mod topology_apply;
