//! One module per command family; each parses its arguments and calls the library crates.

pub(crate) mod acemq;
pub(crate) mod babel;
pub(crate) mod bench;
pub(crate) mod connect;
pub(crate) mod console;
pub(crate) mod demo;
pub(crate) mod dlq;
pub(crate) mod doctor;
pub(crate) mod estate;
pub(crate) mod idempotency;
pub(crate) mod keys;
pub(crate) mod outbox;
pub(crate) mod payload;
