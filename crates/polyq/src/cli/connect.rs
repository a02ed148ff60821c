//! What every connecting command takes: the broker's URL, and the TLS settings a URL cannot carry.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
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

/// How a bulk publish rides out a lost RabbitMQ connection.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ResendArgs {
    /// Send a message whose confirm was lost with the connection again once it is back (same
    /// message id and bytes, so consumers can dedupe), for up to this many seconds after it was
    /// first published; 0 fails such a publish at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 120.0)]
    resend_lost: f64,
}

impl ResendArgs {
    /// The deadline as the libraries take it.
    pub(crate) fn within(&self) -> anyhow::Result<Option<Duration>> {
        match Duration::try_from_secs_f64(self.resend_lost) {
            Ok(within) if within.is_zero() => Ok(None),
            Ok(within) => Ok(Some(within)),
            Err(_) => Err(anyhow!(
                "--resend-lost: expected a number of seconds (0 or more), found {}",
                self.resend_lost
            )),
        }
    }
}

/// The URL the `--url` flags name together: one broker, or the nodes of a cluster, listed in
/// one flag (`amqp://u:p@h1:5701,h2:5702/vhost`) or in several.
pub(crate) fn joined_url(urls: &[String]) -> anyhow::Result<String> {
    polyq_amqp::join_addresses(urls).map_err(|reason| anyhow!("--url: {reason}"))
}

/// An AMQP broker (or the embedded one).
#[derive(Debug, clap::Args)]
pub(crate) struct AmqpBroker {
    /// The broker: amqp://, amqps:// or memory://. The nodes of a RabbitMQ cluster are listed
    /// as `amqp://user:pass@host1:5672,host2:5672/vhost`, or with the flag given once per
    /// node: the client connects to any node that answers and fails over to another.
    #[arg(long = "url", required = true)]
    urls: Vec<String>,
    #[command(flatten)]
    pub(crate) tls: TlsArgs,
}

impl AmqpBroker {
    /// The broker's URL, every node of the `--url` flags in one.
    pub(crate) fn url(&self) -> anyhow::Result<String> {
        joined_url(&self.urls)
    }

    /// A client of the broker; errors name the URL with credentials redacted.
    pub(crate) async fn client(&self) -> anyhow::Result<Client> {
        let options = ClientOptions::default().tls(self.tls.options()?);
        let url = self.url()?;
        Client::connect_with(&url, options)
            .await
            .with_context(|| named(&url))
    }

    /// An AceMQ service named `polyq` on the broker.
    pub(crate) async fn acemq(&self) -> anyhow::Result<acemq::AceMq> {
        self.acemq_with(acemq::AceMq::builder()).await
    }

    /// An AceMQ service named `polyq` on the broker, configured from `builder`.
    pub(crate) async fn acemq_with(
        &self,
        builder: acemq::AceMqBuilder,
    ) -> anyhow::Result<acemq::AceMq> {
        let url = self.url()?;
        builder
            .url(url.as_str())
            .client_name("polyq")
            .tls(self.tls.options()?)
            .connect()
            .await
            .with_context(|| named(&url))
    }
}

fn named(url: &str) -> String {
    format!("--url {}", polyq_amqp::redact_url(url))
}
