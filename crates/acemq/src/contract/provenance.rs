//! Provenance: the origin a publisher stamps, `<client name>@<hostname>`.

use crate::contract::envelope::Envelope;

/// The client name of a connection that was not given one.
pub const DEFAULT_CLIENT_NAME: &str = "acemq";

/// The host part of the origin when the hostname cannot be resolved.
pub const UNKNOWN_HOST: &str = "unknown-host";

/// This machine's hostname, or [`UNKNOWN_HOST`] when it cannot be read or is not text.
pub fn hostname() -> String {
    gethostname::gethostname()
        .into_string()
        .ok()
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| UNKNOWN_HOST.to_owned())
}

/// `<client_name>@<hostname>`; an empty client name is [`DEFAULT_CLIENT_NAME`].
///
/// ```
/// let origin = acemq::provenance::origin("checkout");
/// assert!(origin.starts_with("checkout@"));
/// assert!(acemq::provenance::origin("").starts_with("acemq@"));
/// ```
pub fn origin(client_name: &str) -> String {
    origin_on(client_name, &hostname())
}

/// `<client_name>@<host>`, for a caller that resolved the host once.
pub fn origin_on(client_name: &str, host: &str) -> String {
    let client = if client_name.is_empty() {
        DEFAULT_CLIENT_NAME
    } else {
        client_name
    };
    let host = if host.is_empty() { UNKNOWN_HOST } else { host };
    format!("{client}@{host}")
}

/// The envelope with `origin` stamped, unless the caller already set one: provenance is the
/// engine's job at publish, and an origin the application chose is left alone.
///
/// ```
/// use acemq::Envelope;
/// use acemq::provenance::stamp;
///
/// let unstamped = Envelope::of("t").build()?;
/// assert_eq!(stamp(unstamped, "acemq@app-7").origin(), Some("acemq@app-7"));
/// let chosen = Envelope::of("t").origin("checkout@app-1").build()?;
/// assert_eq!(stamp(chosen, "acemq@app-7").origin(), Some("checkout@app-1"));
/// # Ok::<(), acemq::Error>(())
/// ```
pub fn stamp(envelope: Envelope, origin: &str) -> Envelope {
    if envelope.origin().is_some() || origin.is_empty() {
        return envelope;
    }
    let first_seen = envelope.first_seen();
    // Rebuilding an existing envelope cannot fail: its counters were checked when it was built.
    envelope.to_builder().origin(origin).assemble(first_seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_parts_take_their_defaults() {
        assert_eq!(origin_on("", ""), "acemq@unknown-host");
        assert_eq!(origin_on("orders", "host-7"), "orders@host-7");
        assert!(!hostname().is_empty());
    }
}
