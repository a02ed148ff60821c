//! AceMQ for Rust.
//!
//! The AceMQ envelope travels in AMQP headers (`x-acemq-*` reserved, `acemq-*` shared); this
//! crate writes and reads it exactly as the Java reference and the Go, Python, Ruby and .NET ports
//! do, and runs publishers, consumers, the retry engine, dead-letter and parking queues, replay,
//! request/reply and pipelines on it, on RabbitMQ and on the embedded broker (`memory://`) alike.
//!
//! ```
//! use acemq::Envelope;
//! use polyq_amqp::Properties;
//!
//! let sent = Envelope::of("order.placed").header("x-tenant", "acme").build()?;
//! let mut properties = Properties::default().with_content_type("application/json");
//! sent.write_properties(&mut properties);
//!
//! let received = Envelope::from_properties(&properties, "orders.new");
//! assert_eq!(received, sent);
//! # Ok::<(), acemq::Error>(())
//! ```
//!
//! `examples/retry_and_replay.rs` runs a consumer whose handler fails into `orders.dlq` and a
//! replay that brings the message back, on `memory://`:
//! `cargo run -p acemq --example retry_and_replay`. `--example publisher` (confirms, a publish
//! and a consume interceptor) and `--example request_reply` (a responder and a requester) run
//! on `memory://` or on the broker URL given as their argument; `--features postgres --example
//! outbox_postgres` records messages in a PostgreSQL transaction and relays them
//! (`POLYQ_POSTGRES_URL`).
//!
//! # Map of the crate
//!
//! Three folders, one per layer; each uses only the ones before it. Every public module and type
//! is re-exported at the root (`acemq::wire`, `acemq::consumer`, [`acemq::Envelope`](Envelope),
//! ...), so the folders do not appear in paths.
//!
//! ## `contract/`: the envelope rules, pure
//!
//! No I/O, no async, and only the neutral AMQP types of `polyq-amqp`
//! ([`FieldValue`](polyq_amqp::FieldValue), [`FieldTable`](polyq_amqp::FieldTable),
//! [`Properties`](polyq_amqp::Properties)). Pinned by the shared fixtures.
//!
//! - [`Envelope`] and [`EnvelopeBuilder`] (`envelope.rs`): the fields, their defaults and
//!   derivations.
//! - [`wire`]: the envelope to and from headers and `message-id` (methods on [`Envelope`]), and
//!   the lenient readers behind it (`lenient.rs`) for what other ports write.
//! - [`headers`]: the reserved and shared header names.
//! - [`codec`]: body codecs chosen by content type (`codec/`: a file per format, the
//!   [`Composite`](codec::Composite) a consumer reads several formats with, and the one table
//!   of content types, [`Format`](codec::Format)): JSON, text, bytes; YAML, TOML, XML, Protobuf
//!   and Avro (fixed-schema and registered) behind features.
//! - [`retry`]: policies, the schedule, jitter, broker waits, and the retry decision
//!   ([`RetryPolicy::decide`](retry::RetryPolicy::decide): retry after a wait, or give up into
//!   `Q.dlq`).
//! - [`topology`]: queue names (`Q.dlq`, `Q.parked`, the rungs), rung arguments and the declared
//!   topology as data.
//! - [`RoutingSlip`] (`route.rs`, declared pipelines) and [`Itinerary`] (`itinerary.rs`, the
//!   carried JSON slip).
//! - [`provenance`]: the origin a publisher stamps.
//!
//! Beside them, pure as well: [`doctor`] (`doctor.rs`) judges a message's reserved headers and a
//! source queue's topology against the contract, as `polyq doctor` reports them; [`inspect`]
//! (`inspect.rs`) maps a message to the operator's view,
//! the envelope and decoded payload beside the wire message, and envelope fields back to a wire
//! message, as `polyq acemq decode`, `encode` and `peek` print them.
//!
//! ## `runtime/`: the contract carried out against a broker
//!
//! Bytes meet the broker in `polyq-amqp`: its [`Client`](polyq_amqp::Client) (reached through
//! [`AceMq::client`]) publishes with confirms, delivers, settles and declares, over lapin for
//! `amqp://`/`amqps://` and in-process for `memory://`; the runtime above it is one code path.
//!
//! - [`AceMq`] and [`AceMqBuilder`] (`connection.rs`): connecting, the client name, the confirm
//!   window, recovery, TLS, interceptors.
//! - [`publisher`]: [`Publisher`], confirms, `mandatory`, provenance and trace context stamped.
//! - [`consumer`]: [`Consumer`], dispatch, the handler's [`Outcome`], pause, resume and drain
//!   (on a [`Shutdown`] signal too, shared with the BabelQueue worker through `polyq-runtime`).
//! - The retry engine (`engine.rs`, internal) carries out the [`retry`] decisions for each
//!   outcome: a consumer wait or a broker rung, then a republish with the attempt raised, or the
//!   set-aside into `Q.dlq` / `Q.parked` with `x-acemq-error`; only then the ack.
//! - [`interceptor`]: hooks around publish and consume.
//! - [`telemetry`]: metrics with the reference's names, `tracing` spans, W3C trace context with
//!   the `otel` feature (`otel.rs`), the Prometheus exposition with `prometheus`.
//! - [`topology_apply`]: a declared [`topology`] applied to the broker.
//!
//! One delivery: the [`wire`] reader takes the envelope off the headers, a [`codec`] decodes the
//! body by content type (undecodable: `Q.parked`), interceptors and the handler run, and its
//! [`Outcome`] goes to the retry engine, which acks, retries, or sets the message aside.
//!
//! ## `patterns/`: built on the runtime
//!
//! [`patterns`]: replaying set-aside messages, request/reply, declared pipelines, carried
//! itineraries and the claim check.
//!
//! ## Stores
//!
//! [`idempotency`]: the idempotent consumer's stores, in memory, on PostgreSQL and on MariaDB or
//! MySQL (the Java port's table layout on both), and on Redis. [`outbox`]: the transactional
//! outbox, on PostgreSQL, on MariaDB or MySQL, and in memory. `schema_registry` (feature
//! `avro`): Avro schemas under ids that never change, for the registered Avro codec, in memory
//! and on PostgreSQL (the Java port's table layout), cached both ways.
//!
//! ## Errors (`error.rs`)
//!
//! [`Error`]: a value handed to the contract that is not valid (building an envelope, a route, a
//! policy). [`RuntimeError`]: what went wrong connecting, publishing or consuming, wrapping the
//! transport's or the contract's error. Both, and
//! [`PatternError`](patterns::PatternError), answer `is_transient()` and `is_connection()`:
//! whether to try again or set the message aside is one call.
//!
//! # Feature flags
//!
//! - `amqp` (default): the RabbitMQ transport (`amqp://`, `amqps://`) through `polyq-amqp`.
//!   Without it only the embedded broker (`memory://`) is available.
//! - `postgres`: the PostgreSQL idempotency store (`idempotency::postgres`) and the
//!   transactional outbox on PostgreSQL through `sqlx` (module `outbox`:
//!   `Outbox::record` in the caller's transaction, the shipped migration; without it the
//!   module has the in-memory `MemoryOutbox` and its `OutboxRelay`).
//! - `mysql`: MariaDB (10.6 and later) or MySQL (8.0 and later) through `sqlx`: the idempotency
//!   store (`idempotency::mysql`) and the transactional outbox (`outbox::MySqlOutbox`,
//!   `OutboxRelay::builder_mysql`), their migrations in `migrations/mysql/`.
//! - `redis`: the Redis idempotency store (`idempotency::redis`).
//! - `yaml`, `toml`, `xml`: the codecs of those formats (`codec::Yaml`, `codec::Toml`,
//!   `codec::Xml`), which a consumer reads alongside JSON through a
//!   [`Composite`](codec::Composite).
//! - `protobuf`: the Protobuf codec (`codec::Protobuf`, `application/x-protobuf`) over
//!   `prost::Message`, through `prost`, the Tokio project's Protobuf crate: a message type
//!   comes from `prost-build` or from its derive macros, with no `protoc` in this crate's build.
//! - `avro`: the Avro codecs, fixed-schema (`codec::Avro`, `avro/binary`) and registered
//!   (`codec::RegisteredAvro`, `application/vnd.acemq.avro`, Confluent framing), and the
//!   `schema_registry` they read writer schemas from, through `apache-avro`, the Apache Avro
//!   project's own Rust implementation (schema resolution, serde). With `postgres` too, the
//!   registry's PostgreSQL store (`schema_registry::postgres`).
//! - `otel`: W3C `traceparent` / `tracestate` written on publish and adopted on consume, through
//!   OpenTelemetry (tracing spans bridged by `tracing-opentelemetry`).
//! - `prometheus`: the metrics in the Prometheus text format
//!   ([`telemetry::prometheus`](crate::telemetry)).
//! - `encryption`: the encrypted codec `application/vnd.acemq.encrypted` (AES-GCM through
//!   RustCrypto's audited `aes-gcm`, the framing of every AceMQ port) wrapping any other codec
//!   (`codec::encrypted`), its key ring read from bytes, a key file or an environment variable
//!   (`codec::keyring`), and the operator's view of encrypted bodies (`inspect::EncryptedView`).
//!
//! # Further reading
//!
//! In the repository:
//! [`docs/acemq-contract.md`][contract] (the contract and where the ports diverge),
//! [`docs/acemq-runtime.md`][runtime] (connecting, publishing, consuming, the retry engine),
//! [`docs/acemq-patterns.md`][patterns-doc] (replay, request/reply, pipelines, claim check),
//! [`docs/INTEROP.md`][interop] (what was proven against which peer) and
//! [`docs/BENCHMARKS.md`][benchmarks] (goals and figures).
//!
//! [contract]: https://example.invalid/polyq/blob/main/docs/acemq-contract.md
//! [runtime]: https://example.invalid/polyq/blob/main/docs/acemq-runtime.md
//! [patterns-doc]: https://example.invalid/polyq/blob/main/docs/acemq-patterns.md
//! [interop]: https://example.invalid/polyq/blob/main/docs/INTEROP.md
//! [benchmarks]: https://example.invalid/polyq/blob/main/docs/BENCHMARKS.md

#![cfg_attr(docsrs, feature(doc_cfg))]

mod contract;
pub mod doctor;
mod error;
pub mod idempotency;
pub mod inspect;
pub mod outbox;
pub mod patterns;
mod runtime;
#[cfg(feature = "avro")]
pub mod schema_registry;

pub use contract::envelope::{Envelope, EnvelopeBuilder, FALLBACK_TYPE};
pub use contract::itinerary::{Itinerary, Stop};
pub use contract::route::RoutingSlip;
pub use contract::{codec, headers, provenance, retry, topology, wire};
pub use error::{Error, Result, RuntimeError};
pub use runtime::connection::{
    AceMq, AceMqBuilder, DEFAULT_MAX_OUTSTANDING_CONFIRMS, DEFAULT_RESEND_LOST, DEFAULT_URL,
};
pub use runtime::consumer::{
    Consumer, ConsumerBuilder, DrainReport, HandlerError, Message, Outcome, Shutdown,
};
pub use runtime::publisher::{PendingConfirm, Publisher};
pub use runtime::{consumer, interceptor, publisher, telemetry, topology_apply};
/// The date-time crate of this API ([`time::OffsetDateTime`] for first-seen and replay times).
pub use time;

/// The README's example, run as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
