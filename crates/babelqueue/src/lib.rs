//! BabelQueue for Rust.
//!
//! The `{job, trace_id, data, meta, attempts}` JSON envelope that the PHP, Go, Python, Node, .NET
//! and Java SDKs produce and consume, written and read byte-compatibly, and a worker runtime
//! (URN routing, retries, dead-letter, poison) with redrive on the embedded broker (`memory://`),
//! RabbitMQ and Redis alike.
//!
//! ```
//! use serde_json::json;
//!
//! let envelope = babelqueue::make(
//!     "urn:babel:orders:created",
//!     &json!({"order_id": 1042, "note": "café ☕"}),
//!     babelqueue::MakeOptions::new().queue("orders"),
//! )?;
//! let body = envelope.encode()?;
//! let decoded = babelqueue::decode(body.as_bytes())?;
//! assert_eq!(decoded.envelope, envelope);
//! assert_eq!(decoded.envelope.accepts(), Ok(()));
//! # Ok::<(), babelqueue::Error>(())
//! ```
//!
//! Three examples run on `memory://` with no service, each printing what happens to every
//! message: `cargo run -p babelqueue --example worker` (a handler that fails once and is
//! retried), `--example dead_letter` (a failing job, an unknown URN and a poison body in
//! `<queue>.dlq`) and `--example redrive` (a dead-lettered job sent back and handled).
//! `--example redis_worker` needs Redis (`POLYQ_REDIS_URL`): a worker handling a job pushed with
//! the exact bytes the Python SDK writes.
//!
//! # Map of the crate
//!
//! Three layers, each using only the ones before it. The folders do not appear in paths: the
//! envelope types and functions are re-exported at the root ([`babelqueue::decode`](decode),
//! [`Envelope`], [`make`], ...), and the modules named below are public as they are.
//!
//! ## The contract: what a body is (pure, no I/O, no async)
//!
//! - `codec/`: the envelope rules. [`Envelope`], [`Meta`] and [`RawJson`] with the key lists
//!   ([`envelope`]); [`make`] builds an envelope and [`Envelope::encode`] writes the canonical
//!   bytes (`encode.rs`); [`decode`] reads strict JSON, resolves identity, drops forbidden keys
//!   with [`Warning`]s and keeps unknown keys (`decode.rs`, with a one-pass reader for bodies in
//!   the canonical shape in `fast_decode.rs`); [`Envelope::accepts`] and [`classify`] give the
//!   consumer verdict, accepted, rejected or poison (`verdict.rs`); [`whitespace`] is the closed
//!   ASCII set every SDK trims with.
//! - [`dead_letter`]: the `dead_letter` block a dead-lettered envelope carries, and the poison
//!   record that keeps an unreadable body's bytes.
//! - [`projection`]: what each broker carries beside the body, one file per broker: the RabbitMQ
//!   properties and the Redis header frame the transports use, the SQS, Azure Service Bus,
//!   Pulsar, Kafka and Artemis bindings the conformance suite checks, and the schema-version
//!   gates.
//! - [`inspect`]: the operator's view of a job, the consumer verdict beside the envelope and
//!   its `dead_letter` block, as `polyq babel decode` prints it.
//! - [`doctor`]: a stored job and a queue's keys judged against the contract, as `polyq doctor`
//!   reports them.
//! - The optional helpers: [`idempotency`] (dedupe on `meta.id`, a worker option, with
//!   in-memory, Redis and PostgreSQL stores, and a seen-set on MariaDB or MySQL), [`schema`]
//!   (payload schemas per URN, enforced by the worker's `validate_payloads` and the client's
//!   option of the same name, the `x-gdpr-sensitive` inventory and masking), `gdpr` (field
//!   encryption, feature `gdpr`), [`urn`] (the recommended URN form, a lint).
//!
//! ## The transports: where bytes meet each broker
//!
//! [`transport`]: one [`Transport`](transport::Transport) trait (publish, reserve, ack, retry,
//! release, dead-letter, ...) and its bindings, which move bytes and settle reservations and
//! decide nothing: `transport/amqp.rs` for `memory://`, `amqp://` and `amqps://` (through
//! `polyq-amqp`), `transport/redis/` for both Redis layouts (feature `redis`), and
//! [`AnyTransport`](transport::AnyTransport), the binding chosen by URL.
//!
//! ## The runtime: where retry and dead-letter are decided
//!
//! Written once, generic over the transport, so every broker runs the same code.
//!
//! - [`BabelQueue`]: a queue on a broker named by URL; publishes, hands out workers, redrives.
//! - [`worker`]: the URN → handler registry and the run loop. One message goes
//!   schema-version gate → decode (poison check) → URN lookup (unknown-URN strategy) →
//!   interceptors and handler → ack, a retry with `attempts+1` while below `max_attempts`
//!   ([`worker::Backoff`] says how long it waits), or the dead-letter queue with the block; that
//!   decision is `worker/dispatch.rs`.
//! - [`redrive`]: moving dead-lettered messages back to their queue, `attempts` reset.
//! - [`telemetry`]: the `publish <urn>` and `process <urn>` spans of §4.9, and with the `otel`
//!   feature the trace carried across hops (`otel`: `traceparent` headers, the `trace_id`
//!   mapping and its synthetic parent).
//!
//! ## Errors and conformance
//!
//! [`Error`] is every failure of the crate; [`PoisonCause`] says why a body is not an envelope.
//! [`conformance`] runs the cross-SDK conformance suite (`manifest.json` and fixtures) against
//! this crate.
//!
//! # Feature flags
//!
//! - `amqp` (default): the RabbitMQ transport (`amqp://`, `amqps://`) through `polyq-amqp`.
//!   `memory://` is always available.
//! - `redis` (default): the Redis transport (`redis://`, `rediss://`), both layouts, its error
//!   (`Error::Redis`, whose kind is `transport::redis::RedisErrorKind`), and the conformance
//!   runner's `redis` section.
//! - `postgres`: the transactional outbox of ADR-0029 on PostgreSQL through `sqlx` (module
//!   `outbox`: `Outbox::write` in the caller's transaction, `PgOutboxStore`; without it the
//!   module has the in-memory `MemoryOutboxStore` and the `OutboxRelay`), and the PostgreSQL
//!   idempotency stores.
//! - `mysql`: the seen-set idempotency store on MariaDB or MySQL (`idempotency::MySqlStore`) and
//!   the conformance runner's `idempotency/mysql` sequences; no claiming store and no outbox on
//!   MariaDB.
//! - `gdpr`: GDPR field encryption of ADR-0030 (module `gdpr`: `protect`, `unprotect`, the
//!   reference AES-GCM cipher with retired keys for rotation), the worker's
//!   `unprotect_payloads` and the client's `protect_payloads`, and `Error::Gdpr`. Payload
//!   schemas need no feature: the validator, the registry, the sensitive-path inventory and
//!   masking are plain JSON code with no dependency of their own.
//! - `otel`: OpenTelemetry trace context (ADR-0025 v0.1, ADR-0028 v0.2; module `otel`): the
//!   publish span's TraceID as the envelope's `trace_id`, W3C `traceparent` / `tracestate`
//!   transport headers on every binding with a header channel, and the worker's
//!   `process <urn>` span as the child of the producer's span, else of the synthetic parent its
//!   `trace_id` names. The spans are `tracing` spans: install a `tracing_opentelemetry` layer.
//!
//! # Further reading
//!
//! In the repository:
//! [`docs/babelqueue-contract.md`][contract] (the envelope, the codec's choices, the conformance
//! runner, fuzzing), [`docs/babelqueue-runtime.md`][runtime] (dispatch, backoff, the bindings,
//! concurrency and shutdown, interceptors, redrive), [`docs/INTEROP.md`][interop] (what was
//! proven against which peer) and [`docs/BENCHMARKS.md`][benchmarks] (goals and figures).
//!
//! [contract]: https://example.invalid/polyq/blob/main/docs/babelqueue-contract.md
//! [runtime]: https://example.invalid/polyq/blob/main/docs/babelqueue-runtime.md
//! [interop]: https://example.invalid/polyq/blob/main/docs/INTEROP.md
//! [benchmarks]: https://example.invalid/polyq/blob/main/docs/BENCHMARKS.md

mod client;
mod codec;
pub mod conformance;
pub mod dead_letter;
pub mod doctor;
mod error;
#[cfg(feature = "gdpr")]
pub mod gdpr;
pub mod idempotency;
pub mod inspect;
#[cfg(feature = "otel")]
pub mod otel;
pub mod outbox;
mod payload;
pub mod projection;
pub mod redrive;
pub mod schema;
pub mod telemetry;
pub mod transport;
pub mod urn;
pub mod worker;

pub use client::{BabelQueue, BabelQueueBuilder};
pub use codec::{envelope, whitespace};

pub use codec::decode::{Decoded, Warning, WarningHook, decode, set_warning_hook};
pub use codec::envelope::{Envelope, Meta, RawJson, SCHEMA_VERSION, SOURCE_LANG};
pub use codec::make::{MakeOptions, Message, make};
pub use codec::verdict::{Reason, Verdict, classify};
pub use dead_letter::{DeadLetter, DeadLetterInfo, DeadLetterReason, poison_record};
pub use error::{Error, PoisonCause, Result};
pub use payload::SharedProvider;

/// The two body readers behind [`decode`], each on its own, for the differential fuzz target in
/// `fuzz/` (they must agree on every body the fast one takes). Built only by `cargo fuzz`, which
/// compiles with `--cfg fuzzing`.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    use crate::{Decoded, PoisonCause};

    /// The one-pass reader of canonical bodies: `None` for anything it leaves to the full one.
    pub fn fast_decode(text: &str) -> Option<Decoded> {
        crate::codec::fast_decode::decode(text)
    }

    /// The full reader, which decides every body the fast one leaves.
    pub fn full_decode(text: &str) -> Result<Decoded, PoisonCause> {
        crate::codec::decode::decode_any(text)
    }
}

/// The README's example, run as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
