//! TLS settings that a URL cannot carry: which certificate authorities to trust, and the client's
//! own certificate for brokers that ask for one.

/// TLS settings of an `amqps://` (or, in `babelqueue`, a `rediss://`) connection beyond what its
/// URL says. The default trusts the system's root certificates and presents no client
/// certificate, which is what a broker with a publicly signed certificate needs.
///
/// A broker whose certificate a private authority signed needs that authority here; a broker
/// that verifies its clients (RabbitMQ's `fail_if_no_peer_cert`, Redis's `tls-auth-clients`)
/// needs a client certificate. Setting either on a URL without TLS is refused when connecting,
/// rather than silently connecting in the clear.
///
/// ```
/// use polyq_amqp::{ClientOptions, TlsOptions};
///
/// # let (ca_pem, cert_pem, key_pem) = (String::new(), String::new(), String::new());
/// let options = ClientOptions::default().tls(
///     TlsOptions::new()
///         .root_certificates(ca_pem)
///         .client_certificate(cert_pem, key_pem),
/// );
/// assert!(format!("{options:?}").contains("client_key: \"<redacted>\""));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    root_certificates: Option<String>,
    client_certificate: Option<(String, String)>,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |present: bool| if present { "<set>" } else { "<none>" };
        f.debug_struct("TlsOptions")
            .field("root_certificates", &set(self.root_certificates.is_some()))
            .field(
                "client_certificate",
                &set(self.client_certificate.is_some()),
            )
            .field(
                "client_key",
                &if self.client_certificate.is_some() {
                    "<redacted>"
                } else {
                    "<none>"
                },
            )
            .finish()
    }
}

impl TlsOptions {
    /// The defaults: the system's roots, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the certificate authorities in `pem` (one or more PEM certificates) to sign the
    /// broker's certificate. `amqps://` trusts them beside the system's roots; `rediss://` trusts
    /// only them (the Redis client replaces its trust store).
    pub fn root_certificates(mut self, pem: impl Into<String>) -> Self {
        self.root_certificates = Some(pem.into());
        self
    }

    /// Presents this certificate chain (PEM) and its private key (PKCS#8 PEM) to a broker that
    /// verifies its clients.
    pub fn client_certificate(
        mut self,
        certificate_pem: impl Into<String>,
        key_pem: impl Into<String>,
    ) -> Self {
        self.client_certificate = Some((certificate_pem.into(), key_pem.into()));
        self
    }

    /// The trusted authorities given, in PEM.
    pub fn root_certificates_pem(&self) -> Option<&str> {
        self.root_certificates.as_deref()
    }

    /// The client certificate chain and private key given, both in PEM.
    pub fn client_certificate_pem(&self) -> Option<(&str, &str)> {
        self.client_certificate
            .as_ref()
            .map(|(certificate, key)| (certificate.as_str(), key.as_str()))
    }

    /// Whether anything differs from the defaults.
    pub fn is_set(&self) -> bool {
        *self != Self::default()
    }

    /// Refuses settings that a URL without TLS would silently ignore: with `uses_tls` false and
    /// anything set, the reason to give.
    ///
    /// # Errors
    /// The reason, when anything is set and the URL does not use TLS.
    pub fn check_scheme(&self, uses_tls: bool) -> std::result::Result<(), &'static str> {
        if uses_tls || !self.is_set() {
            return Ok(());
        }
        Err(
            "TLS settings (trusted authorities or a client certificate) were given for a URL \
             without TLS; use amqps:// or rediss://",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fit_every_url_and_settings_need_a_tls_scheme() {
        assert!(!TlsOptions::new().is_set());
        assert!(TlsOptions::new().check_scheme(false).is_ok());
        let set = TlsOptions::new().root_certificates("pem");
        assert!(set.is_set());
        assert!(set.check_scheme(true).is_ok());
        assert!(set.check_scheme(false).unwrap_err().contains("amqps://"));
        let client = TlsOptions::new().client_certificate("cert", "key");
        assert!(client.check_scheme(false).is_err());
    }

    #[test]
    fn debug_never_shows_the_key_or_the_certificates() {
        let shown = format!(
            "{:?}",
            TlsOptions::new()
                .root_certificates("ROOTS")
                .client_certificate("CERT", "SECRET")
        );
        assert!(!shown.contains("SECRET") && !shown.contains("CERT") && !shown.contains("ROOTS"));
        assert!(shown.contains("<redacted>"), "{shown}");
    }
}
