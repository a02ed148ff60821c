//! The vhost an AMQP URL names, as the broker and its tools (`rabbitmqctl -p`, the management
//! API) spell it.

use percent_encoding::percent_decode_str;
use url::Url;

/// The vhost of an AMQP URL: its one path segment, percent-decoded; `/` when the path is empty,
/// as AMQP's URI spec reads `amqp://host` and `amqp://host/`.
///
/// ```
/// use polyq_amqp::vhost_of;
/// use url::Url;
///
/// let vhost = |url: &str| vhost_of(&Url::parse(url).unwrap());
/// assert_eq!(vhost("amqp://guest:guest@127.0.0.1:5672/%2f"), "/");
/// assert_eq!(vhost("amqp://127.0.0.1"), "/");
/// assert_eq!(vhost("amqps://rabbit.internal/orders"), "orders");
/// assert_eq!(vhost("amqp://rabbit.internal/v%2Fh"), "v/h");
/// ```
pub fn vhost_of(url: &Url) -> String {
    let path = url.path().strip_prefix('/').unwrap_or(url.path());
    if path.is_empty() {
        "/".to_owned()
    } else {
        percent_decode_str(path).decode_utf8_lossy().into_owned()
    }
}
