//! Runtime pieces the two polyq runtimes share.
//!
//! The AceMQ consumer (`acemq`) and the BabelQueue worker (`babelqueue`) differ where their
//! contracts differ: retries, settlement, dead-letter records. What does not depend on a
//! contract is written once, here, so both behave alike:
//!
//! - [`catch_panic`] and [`catch_panic_sync`]: a panic in application code (a handler, an
//!   interceptor) becomes a [`Panic`], the failure of that one message, instead of the end of a
//!   task and a delivery left unsettled. [`panic_message`] is the text of a caught payload.
//! - [`InterceptorChain`]: interceptors in registration order before the handler, in reverse
//!   after it, the `after` call only for those whose `before` passed, every call panic-contained.
//! - [`Shutdown`]: the stop signal a worker or consumer waits on, graceful or immediate, with
//!   [`Shutdown::on_signals`] for SIGINT and SIGTERM.
//! - [`Fingerprint`] and [`group`]: an error with its values taken out, and failures gathered
//!   by it, so the dead-letter tools of both families group alike.
//! - [`Finding`] and [`Severity`]: what the contract doctors of both families report.
//! - `otel` (feature `otel`): W3C `traceparent` / `tracestate` written from a span and adopted
//!   as its parent, over any header carrier.
//! - [`BoxError`]: the error an interceptor or handler returns when its type does not matter.
//!
//! Both crates re-export what their APIs take (`babelqueue::worker::Shutdown`,
//! `acemq::Shutdown`, `BoxError` in each), so an application does not need to depend on this
//! crate.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use polyq_runtime::Shutdown;
//!
//! let shutdown = Shutdown::new();
//! let waiting = tokio::spawn({
//!     let shutdown = shutdown.clone();
//!     async move { shutdown.stopping().await }
//! });
//! shutdown.stop();
//! waiting.await.unwrap();
//! assert!(shutdown.is_stopping());
//! # }
//! ```

mod chain;
pub mod coalesce;
mod finding;
mod fingerprint;
#[cfg(feature = "otel")]
pub mod otel;
pub mod outbox;
mod panic;
mod shutdown;

pub use chain::{Before, InterceptorChain, Refusal};
pub use finding::{Finding, Severity};
pub use fingerprint::{Fingerprint, Group, group};
pub use panic::{Panic, catch_panic, catch_panic_sync, panic_message};
pub use shutdown::Shutdown;

/// The README's example, run as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// An error an interceptor or handler returns when its type does not matter: anything that
/// converts into it (`std` errors, `anyhow::Error` through `Into`, strings) works with `?`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
