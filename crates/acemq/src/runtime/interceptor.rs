//! Interceptors: code that runs around every publish and every handled delivery of a
//! connection, in registration order (the `after` half in reverse).

pub use polyq_runtime::BoxError;

use crate::Envelope;
use crate::runtime::consumer::Outcome;

/// One message about to be published, as a publish interceptor sees it.
#[derive(Debug)]
pub struct PublishContext<'a> {
    pub(crate) exchange: &'a str,
    pub(crate) routing_key: &'a str,
    pub(crate) envelope: Envelope,
}

impl PublishContext<'_> {
    /// The exchange it goes to (`""` is the default exchange).
    pub fn exchange(&self) -> &str {
        self.exchange
    }

    /// Its routing key.
    pub fn routing_key(&self) -> &str {
        self.routing_key
    }

    /// Its envelope, already stamped (id, origin, first seen).
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// Replaces the envelope, for example with one built by
    /// [`Envelope::to_builder`] carrying an extra header.
    pub fn set_envelope(&mut self, envelope: Envelope) {
        self.envelope = envelope;
    }
}

/// Runs before every publish of a connection, before the payload is encoded. Returning an
/// error (or panicking) refuses the publish: `send` fails with
/// [`RuntimeError::Refused`](crate::RuntimeError::Refused) and nothing reaches the broker.
///
/// ```
/// use acemq::interceptor::{BoxError, PublishContext, PublishInterceptor};
///
/// struct Tenant;
///
/// impl PublishInterceptor for Tenant {
///     fn before_publish(&self, publish: &mut PublishContext<'_>) -> Result<(), BoxError> {
///         let stamped = publish.envelope().to_builder().header("x-tenant", "acme").build()?;
///         publish.set_envelope(stamped);
///         Ok(())
///     }
/// }
/// ```
pub trait PublishInterceptor: Send + Sync + 'static {
    /// Sees the message and may replace its envelope, or refuses it.
    fn before_publish(&self, publish: &mut PublishContext<'_>) -> Result<(), BoxError>;
}

/// Runs around every handled delivery of a connection's consumers: `before_handle` in
/// registration order before the handler, `after_handle` in reverse order after it, for every
/// interceptor whose `before_handle` passed, whatever the outcome.
///
/// A failing (or panicking) `before_handle` fails the delivery as a handler error would: the
/// later interceptors and the handler do not run, and the message takes the retry path (retried
/// while the policy allows, then `Q.dlq`).
///
/// `after_handle` observes: a panic there is logged and the next interceptor still runs.
pub trait ConsumeInterceptor: Send + Sync + 'static {
    /// Before the handler; an error fails the delivery.
    fn before_handle(&self, queue: &str, envelope: &Envelope) -> Result<(), BoxError> {
        let _ = (queue, envelope);
        Ok(())
    }

    /// After the handler (or after a failed `before_handle`), with the outcome.
    fn after_handle(&self, queue: &str, envelope: &Envelope, outcome: &Outcome) {
        let _ = (queue, envelope, outcome);
    }
}
