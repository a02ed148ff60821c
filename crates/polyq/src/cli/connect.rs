//! What every connecting command takes: the broker's URL, and the TLS settings a URL cannot carry.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use polyq_amqp::{Client, ClientOptions, TlsOptions};

/// Trust and identity for `amqps://` and `rediss://`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct TlsArgs {
    /// PEM file of the certificate authorities that sign the broker's certificate (amqps://
    /// trusts them beside the system's roots, rediss:// instead of them).
    #[arg(long, env = "POLYQ_TLS_CA", value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// PEM file of a client certificate, for a broker that verifies its clients.
    #[arg(long, env = "POLYQ_TLS_CERT", value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM file of that certificate's private key (PKCS#8).
    #[arg(long, env = "POLYQ_TLS_KEY", value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The settings, with the files read.
    pub(crate) fn options(&self) -> anyhow::Result<TlsOptions> {
        fn read(path: &Path, flag: &str) -> anyhow::Result<String> {
            std::fs::read_to_string(path).with_context(|| format!("{flag} {}", path.display()))
        }
        let mut tls = TlsOptions::new();
        if let Some(ca) = &self.tls_ca {
            tls = tls.root_certificates(read(ca, "--tls-ca")?);
        }
        if let (Some(certificate), Some(key)) = (&self.tls_cert, &self.tls_key) {
            tls = tls.client_certificate(read(certificate, "--tls-cert")?, read(key, "--tls-key")?);
        }
        Ok(tls)
    }
}

/// An AMQP broker (or the embedded one).
#[derive(Debug, clap::Args)]
pub(crate) struct AmqpBroker {
    /// The broker: amqp://, amqps:// or memory://.
    #[arg(long)]
    pub(crate) url: String,
    #[command(flatten)]
    pub(crate) tls: TlsArgs,
}

impl AmqpBroker {
    /// A client of the broker; errors name the URL with credentials redacted.
    pub(crate) async fn client(&self) -> anyhow::Result<Client> {
        let options = ClientOptions::default().tls(self.tls.options()?);
        Client::connect_with(&self.url, options)
            .await
            .with_context(|| self.named())
    }

    /// An AceMQ service named `polyq` on the broker.
    pub(crate) async fn acemq(&self) -> anyhow::Result<acemq::AceMq> {
        acemq::AceMq::builder()
            .url(self.url.as_str())
            .client_name("polyq")
            .tls(self.tls.options()?)
            .connect()
            .await
            .with_context(|| self.named())
    }

    fn named(&self) -> String {
        format!("--url {}", polyq_amqp::redact_url(&self.url))
    }
}
