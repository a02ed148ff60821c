//! AceMQ for Rust.
//!
//! The AceMQ envelope travels in AMQP headers (`x-acemq-*` reserved, `acemq-*` shared); this
//! crate writes and reads it exactly as the Java reference and the Go, Python, Ruby and .NET ports
//! do.
