//! What a handler receives.

use serde::de::DeserializeOwned;

use crate::envelope::{Envelope, Meta, RawJson};
use crate::transport::Headers;

/// The out-of-band header that marks a deliberate replay (ADR-0027), stamped by a redrive with
/// `bypass`.
pub const REPLAY_BYPASS_HEADER: &str = "bq-replay-bypass";

/// One message handed to a handler: the decoded envelope (its `attempts` reconciled with the
/// broker's count), the out-of-band headers that came with it and the queue it was taken from.
#[derive(Debug, Clone)]
pub struct Job {
    envelope: Envelope,
    headers: Headers,
    queue: String,
}

impl Job {
    pub(crate) fn new(envelope: Envelope, headers: Headers, queue: String) -> Self {
        Self {
            envelope,
            headers,
            queue,
        }
    }

    /// The URN the job was routed on.
    pub fn urn(&self) -> &str {
        self.envelope.urn().unwrap_or_default()
    }

    /// `data` as the producer wrote it.
    pub fn data(&self) -> Option<&RawJson> {
        self.envelope.data()
    }

    /// Deserialises `data`.
    ///
    /// # Errors
    /// [`crate::Error::Json`] when `data` does not match `T`.
    pub fn data_as<T: DeserializeOwned>(&self) -> crate::Result<T> {
        self.envelope.data_as()
    }

    /// The `meta` block.
    pub fn meta(&self) -> Option<&Meta> {
        self.envelope.meta()
    }

    /// The cross-service `trace_id`.
    pub fn trace_id(&self) -> Option<&str> {
        self.envelope.trace_id()
    }

    /// Earlier attempts (0 on the first delivery).
    pub fn attempts(&self) -> i64 {
        self.envelope.attempts().unwrap_or(0)
    }

    /// The whole envelope, unknown keys included.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// The out-of-band headers (`traceparent`, `tracestate`, `bq-replay-bypass`, …).
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// One out-of-band header by exact name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// `true` when this delivery is a deliberate replay (a non-empty `bq-replay-bypass` header):
    /// skip side effects that must not happen twice, such as emails or charges.
    pub fn is_replay(&self) -> bool {
        self.header(REPLAY_BYPASS_HEADER)
            .is_some_and(|value| !value.is_empty())
    }

    /// The queue the job was taken from.
    pub fn queue(&self) -> &str {
        &self.queue
    }
}
