//! RabbitMQ's management HTTP API, for what AMQP 0-9-1 cannot say: which queues a vhost has,
//! with their depths, consumers, rates and arguments (feature `management`).
//!
//! The API is the `rabbitmq_management` plugin (`rabbitmq-plugins enable
//! rabbitmq_management`). [`Management::new`] derives its URL from the broker's AMQP URL:
//! the same host, `http://` on port 15672 (`https://` on 15671 for `amqps://`), the AMQP
//! URL's user and password (`guest`/`guest` when it has none, as AMQP does) and its vhost.
//! [`ManagementOptions::url`] names another (a proxy, another port, a path prefix); its own
//! credentials, when it has some, replace the AMQP URL's. Credentials travel in the
//! `Authorization` header only: every URL an error or [`Debug`] shows has none.
//!
//! ```
//! use polyq_amqp::management::{Management, ManagementOptions};
//!
//! let api = Management::new(
//!     "amqp://app:secret@rabbit.internal:5672/orders",
//!     ManagementOptions::new(),
//! )?;
//! assert_eq!(api.url(), "http://rabbit.internal:15672/api/");
//! assert_eq!(api.vhost(), "orders");
//! assert!(!format!("{api:?}").contains("secret"));
//!
//! let api = Management::new(
//!     "amqps://app:secret@rabbit.internal/%2f",
//!     ManagementOptions::new().url("https://ops:other@mgmt.internal/rabbitmq/"),
//! )?;
//! assert_eq!(api.url(), "https://mgmt.internal/rabbitmq/api/");
//! assert_eq!(api.vhost(), "/");
//! # Ok::<(), polyq_amqp::management::ManagementError>(())
//! ```
//!
//! Listing the queues of the default broker (the tests' `POLYQ_AMQP_URL`):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use polyq_amqp::management::{Management, ManagementOptions};
//!
//! let url = std::env::var("POLYQ_AMQP_URL")
//!     .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
//! let api = Management::new(&url, ManagementOptions::new())?;
//! for queue in api.queues().await? {
//!     println!("{} ready={:?} type={}", queue.name, queue.messages_ready, queue.queue_type());
//! }
//! # Ok(())
//! # }
//! ```

mod error;
mod queue;

use std::time::Duration;

use percent_encoding::percent_decode_str;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use url::Url;

pub use error::ManagementError;
pub use queue::{QueueStats, Rates};

use crate::{TlsOptions, redact_url};

/// The management API's port for `amqp://` brokers.
pub const HTTP_PORT: u16 = 15672;
/// The management API's port for `amqps://` brokers (RabbitMQ's conventional TLS listener).
pub const HTTPS_PORT: u16 = 15671;
/// Queues asked for per request: the API's largest page.
const PAGE_SIZE: u32 = 500;

type Result<T> = std::result::Result<T, ManagementError>;

/// How to reach the management API beyond what the AMQP URL says.
///
/// ```
/// use std::time::Duration;
/// use polyq_amqp::management::ManagementOptions;
///
/// let options = ManagementOptions::new()
///     .url("http://127.0.0.1:15672")
///     .timeout(Duration::from_secs(3));
/// # drop(options);
/// ```
#[derive(Debug, Clone)]
pub struct ManagementOptions {
    url: Option<String>,
    tls: TlsOptions,
    timeout: Duration,
}

impl Default for ManagementOptions {
    fn default() -> Self {
        Self {
            url: None,
            tls: TlsOptions::default(),
            timeout: Duration::from_secs(10),
        }
    }
}

impl ManagementOptions {
    /// The defaults: the URL derived from the AMQP URL, the system's roots, 10 s per request.
    pub fn new() -> Self {
        Self::default()
    }

    /// The API's URL (`http://` or `https://`, optionally with credentials and a path prefix)
    /// instead of the one derived from the AMQP URL.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// TLS settings of an `https://` API: authorities trusted beside the system's roots, and a
    /// client certificate. Refused for `http://`.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// How long one request may take, connecting included. Default 10 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// A client of one vhost's view of the management API. Cheap to clone.
#[derive(Clone)]
pub struct Management {
    http: reqwest::Client,
    /// The API root (`.../api/`), without credentials.
    api: Url,
    user: String,
    password: String,
    vhost: String,
}

impl std::fmt::Debug for Management {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Management")
            .field("api", &self.api.as_str())
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("vhost", &self.vhost)
            .finish()
    }
}

/// A page of `GET /api/queues/{vhost}?page=N`.
#[derive(Deserialize)]
struct Page<T> {
    items: Vec<T>,
    #[serde(default)]
    page_count: u64,
}

/// The API's explanation of a refusal.
#[derive(Deserialize)]
struct Refusal {
    #[serde(default)]
    reason: Option<String>,
}

impl Management {
    /// A client for the vhost of `amqp_url` (see the [module](self) for how the API's URL is
    /// found). Nothing is sent yet.
    ///
    /// # Errors
    /// [`ManagementError::InvalidUrl`] when a URL does not parse or is not RabbitMQ's
    /// (`memory://` has no management API), [`ManagementError::Tls`] for TLS settings that
    /// cannot be used.
    pub fn new(amqp_url: &str, options: ManagementOptions) -> Result<Self> {
        let invalid = |url: &str, reason: &str| ManagementError::InvalidUrl {
            url: redact_url(url),
            reason: reason.to_owned(),
        };
        let amqp = Url::parse(amqp_url).map_err(|error| invalid(amqp_url, &error.to_string()))?;
        let https = match amqp.scheme() {
            "amqp" => false,
            "amqps" => true,
            _ => {
                return Err(invalid(
                    amqp_url,
                    "the management API belongs to RabbitMQ: give an amqp:// or amqps:// URL",
                ));
            }
        };
        let host = amqp
            .host_str()
            .ok_or_else(|| invalid(amqp_url, "the URL has no host"))?;
        let vhost = crate::vhost_of(&amqp);
        let (mut user, mut password) = credentials_of(&amqp);
        let mut api = match &options.url {
            Some(given) => {
                let url = Url::parse(given).map_err(|error| invalid(given, &error.to_string()))?;
                if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                    return Err(invalid(
                        given,
                        "expected an http:// or https:// URL with a host",
                    ));
                }
                if !url.username().is_empty() {
                    (user, password) = credentials_of(&url);
                }
                url
            }
            None => {
                let (scheme, port) = if https {
                    ("https", HTTPS_PORT)
                } else {
                    ("http", HTTP_PORT)
                };
                // `host_str` keeps an IPv6 address in its brackets.
                Url::parse(&format!("{scheme}://{host}:{port}/"))
                    .map_err(|error| invalid(amqp_url, &error.to_string()))?
            }
        };
        // Credentials go in a header, never in a URL something could print.
        let _ = api.set_username("");
        let _ = api.set_password(None);
        api.set_query(None);
        api.set_fragment(None);
        let prefix = api.path().trim_end_matches('/').to_owned();
        if prefix.ends_with("/api") {
            api.set_path(&format!("{prefix}/"));
        } else {
            api.set_path(&format!("{prefix}/api/"));
        }
        let http = client(&api, &options)?;
        Ok(Self {
            http,
            api,
            user,
            password,
            vhost,
        })
    }

    /// The API's root URL, without credentials.
    pub fn url(&self) -> &str {
        self.api.as_str()
    }

    /// The vhost this client asks about.
    pub fn vhost(&self) -> &str {
        &self.vhost
    }

    /// Every queue of the vhost, by name, read a page of 500 at a time. A queue declared or
    /// deleted while the pages are read may be missed or seen once more than it exists; each
    /// name is reported once.
    ///
    /// # Errors
    /// [`ManagementError`]: unreachable, refused, a vhost that does not exist, or an answer
    /// that does not read.
    pub async fn queues(&self) -> Result<Vec<QueueStats>> {
        let mut queues: Vec<QueueStats> = Vec::new();
        let mut page = 1;
        loop {
            let query = format!("page={page}&page_size={PAGE_SIZE}&sort=name");
            let read: Page<QueueStats> = self
                .get(&["queues", &self.vhost], Some(&query), "list the queues")
                .await?;
            queues.extend(read.items);
            if page >= read.page_count {
                break;
            }
            page += 1;
        }
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        queues.dedup_by(|a, b| a.name == b.name);
        Ok(queues)
    }

    /// One queue of the vhost; `None` when it does not exist.
    ///
    /// # Errors
    /// As [`queues`](Self::queues).
    pub async fn queue(&self, name: &str) -> Result<Option<QueueStats>> {
        match self
            .get(&["queues", &self.vhost, name], None, "describe a queue")
            .await
        {
            Ok(queue) => Ok(Some(queue)),
            Err(ManagementError::NotFound { .. }) => {
                // A missing vhost is an error, a missing queue an answer.
                self.get::<serde_json::Value>(&["vhosts", &self.vhost], None, "find the vhost")
                    .await?;
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// The routing keys of the bindings from exchange `exchange` to queue `queue`, sorted;
    /// empty when there is none, or when the exchange or the queue does not exist (AMQP 0-9-1
    /// can check that they exist, not what binds them).
    ///
    /// # Errors
    /// As [`queues`](Self::queues), but a vhost that does not exist reads as no binding.
    pub async fn binding_keys(&self, exchange: &str, queue: &str) -> Result<Vec<String>> {
        /// One binding of `GET /api/bindings/{vhost}/e/{exchange}/q/{queue}`.
        #[derive(Deserialize)]
        struct Bound {
            routing_key: String,
        }
        let path = ["bindings", &self.vhost, "e", exchange, "q", queue];
        match self
            .get::<Vec<Bound>>(&path, None, "list the bindings of a queue")
            .await
        {
            Ok(bound) => {
                let mut keys: Vec<String> = bound.into_iter().map(|b| b.routing_key).collect();
                keys.sort();
                Ok(keys)
            }
            Err(ManagementError::NotFound { .. }) => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    /// `GET` of the path `segments` under the API root, each segment escaped (a vhost `/`
    /// becomes `%2F`).
    async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: Option<&str>,
        operation: &str,
    ) -> Result<T> {
        let mut url = self.api.clone();
        url.path_segments_mut()
            .map_err(|()| ManagementError::InvalidUrl {
                url: self.api.to_string(),
                reason: "the URL cannot have a path".to_owned(),
            })?
            .pop_if_empty()
            .extend(segments);
        url.set_query(query);
        let shown = || self.api.to_string();
        let unreachable = |error: reqwest::Error| ManagementError::Unreachable {
            url: shown(),
            source: Box::new(error.without_url()),
        };
        let response = self
            .http
            .get(url)
            .basic_auth(&self.user, Some(&self.password))
            .send()
            .await
            .map_err(unreachable)?;
        let status = response.status();
        let body = response.bytes().await.map_err(unreachable)?;
        if status.is_success() {
            return serde_json::from_slice(&body).map_err(|error| ManagementError::Decode {
                url: shown(),
                operation: operation.to_owned(),
                source: Box::new(error),
            });
        }
        Err(match status.as_u16() {
            401 | 403 => ManagementError::Refused {
                url: shown(),
                user: self.user.clone(),
                status: status.as_u16(),
            },
            404 => ManagementError::NotFound {
                url: shown(),
                what: match segments {
                    [_, vhost] => format!("vhost `{vhost}`"),
                    [kind, vhost, name] => {
                        format!("{} `{name}` in vhost `{vhost}`", kind.trim_end_matches('s'))
                    }
                    _ => segments.join("/"),
                },
            },
            code => ManagementError::Status {
                url: shown(),
                operation: operation.to_owned(),
                status: code,
                reason: serde_json::from_slice::<Refusal>(&body)
                    .ok()
                    .and_then(|refusal| refusal.reason)
                    .map(|reason| reason.chars().take(200).collect())
                    .unwrap_or_default(),
            },
        })
    }
}

/// The decoded user and password of `url`; AMQP's `guest`/`guest` for what it leaves out.
fn credentials_of(url: &Url) -> (String, String) {
    let decode = |text: &str| percent_decode_str(text).decode_utf8_lossy().into_owned();
    let user = match url.username() {
        "" => "guest".to_owned(),
        user => decode(user),
    };
    let password = url.password().map_or_else(|| "guest".to_owned(), decode);
    (user, password)
}

fn client(api: &Url, options: &ManagementOptions) -> Result<reqwest::Client> {
    let tls_error = |reason: &str, source: Option<reqwest::Error>| ManagementError::Tls {
        url: api.to_string(),
        reason: reason.to_owned(),
        source: source.map(|error| Box::new(error) as crate::SourceError),
    };
    options
        .tls
        .check_scheme(api.scheme() == "https")
        .map_err(|reason| tls_error(reason, None))?;
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .timeout(options.timeout)
        .connect_timeout(options.timeout)
        // Credentials are not to follow a redirect anywhere.
        .redirect(reqwest::redirect::Policy::none());
    if let Some(pem) = options.tls.root_certificates_pem() {
        let roots = reqwest::Certificate::from_pem_bundle(pem.as_bytes()).map_err(|error| {
            tls_error("the trusted authorities do not read as PEM", Some(error))
        })?;
        for root in roots {
            builder = builder.add_root_certificate(root);
        }
    }
    if let Some((certificate, key)) = options.tls.client_certificate_pem() {
        let identity = reqwest::Identity::from_pem(format!("{certificate}\n{key}").as_bytes())
            .map_err(|error| {
                tls_error(
                    "the client certificate and key do not read as PEM",
                    Some(error),
                )
            })?;
        builder = builder.identity(identity);
    }
    builder
        .build()
        .map_err(|error| tls_error("the HTTP client cannot be built", Some(error)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(amqp: &str, options: ManagementOptions) -> Management {
        Management::new(amqp, options).expect("a valid URL")
    }

    #[test]
    fn the_url_is_derived_from_the_amqp_url() {
        let derived = api(
            "amqp://u:p%40ss@10.0.0.5:5673/v%2Fh",
            ManagementOptions::new(),
        );
        assert_eq!(derived.url(), "http://10.0.0.5:15672/api/");
        assert_eq!(derived.vhost(), "v/h");
        assert_eq!(
            (derived.user.as_str(), derived.password.as_str()),
            ("u", "p@ss")
        );
        let tls = api("amqps://rabbit.example", ManagementOptions::new());
        assert_eq!(tls.url(), "https://rabbit.example:15671/api/");
        assert_eq!(tls.vhost(), "/");
        assert_eq!(
            (tls.user.as_str(), tls.password.as_str()),
            ("guest", "guest")
        );
        let v6 = api("amqp://[::1]:5672/%2f", ManagementOptions::new());
        assert_eq!(v6.url(), "http://[::1]:15672/api/");
        assert_eq!(v6.vhost(), "/");
    }

    #[test]
    fn a_given_url_keeps_its_prefix_and_may_bring_credentials() {
        let given = api(
            "amqp://app:one@h/vh",
            ManagementOptions::new().url("http://ops:two@m:8080/rabbit?x=1#f"),
        );
        assert_eq!(given.url(), "http://m:8080/rabbit/api/");
        assert_eq!(
            (given.user.as_str(), given.password.as_str()),
            ("ops", "two")
        );
        assert_eq!(given.vhost(), "vh");
        let bare = api(
            "amqp://app:one@h/vh",
            ManagementOptions::new().url("http://m:15672/api"),
        );
        assert_eq!(bare.url(), "http://m:15672/api/");
        assert_eq!((bare.user.as_str(), bare.password.as_str()), ("app", "one"));
    }

    #[test]
    fn urls_that_name_no_api_are_refused_without_their_password() {
        for (amqp, options) in [
            ("memory://x", ManagementOptions::new()),
            ("redis://:secret@h", ManagementOptions::new()),
            (
                "amqp://u:secret@h",
                ManagementOptions::new().url("ftp://u:secret@h"),
            ),
        ] {
            let error = Management::new(amqp, options).expect_err("refused");
            assert!(
                matches!(error, ManagementError::InvalidUrl { .. }),
                "{error}"
            );
            assert!(!error.to_string().contains("secret"), "{error}");
        }
    }

    #[test]
    fn tls_settings_need_https() {
        let error = Management::new(
            "amqp://h",
            ManagementOptions::new().tls(TlsOptions::new().root_certificates("pem")),
        )
        .expect_err("refused");
        assert!(matches!(error, ManagementError::Tls { .. }), "{error}");
    }
}
