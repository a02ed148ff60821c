//! Several brokers in one URL: `amqp://user:pass@host1:5672,host2:5673/vhost?query` names the
//! nodes of one cluster, sharing the credentials, the vhost and the query. The client connects
//! to any node that answers and fails over to another when its node goes away.

/// One URL per node of a URL that lists several (`host1,host2` in its authority), each with the
/// shared scheme, credentials, vhost and query; a URL naming one node comes back as it is.
///
/// ```
/// use polyq_amqp::split_addresses;
///
/// assert_eq!(
///     split_addresses("amqp://u:p@h1:5701,h2:5702/%2f?heartbeat=5"),
///     ["amqp://u:p@h1:5701/%2f?heartbeat=5", "amqp://u:p@h2:5702/%2f?heartbeat=5"]
/// );
/// assert_eq!(split_addresses("amqp://h1/vh"), ["amqp://h1/vh"]);
/// ```
pub fn split_addresses(url: &str) -> Vec<String> {
    match parts(url) {
        Some(parts) if parts.hosts.contains(',') => parts
            .hosts
            .split(',')
            .map(|host| {
                format!(
                    "{}://{}{host}{}",
                    parts.scheme,
                    parts.userinfo.map(|u| format!("{u}@")).unwrap_or_default(),
                    parts.tail
                )
            })
            .collect(),
        _ => vec![url.to_owned()],
    }
}

/// One URL listing the nodes of `urls` (each naming one or several), which must agree on all
/// but their hosts: what several `--url` flags mean. The error says which URL differs; it
/// never shows a password.
///
/// ```
/// use polyq_amqp::join_addresses;
///
/// let joined = join_addresses(&["amqp://u:p@h1:5701/%2f", "amqp://u:p@h2:5702/%2f"]);
/// assert_eq!(joined.unwrap(), "amqp://u:p@h1:5701,h2:5702/%2f");
/// assert!(join_addresses(&["amqp://u:p@h1/a", "amqp://u:p@h2/b"]).is_err());
/// ```
pub fn join_addresses<S: AsRef<str>>(urls: &[S]) -> Result<String, String> {
    let Some((first, others)) = urls.split_first() else {
        return Err("no broker URL given".to_owned());
    };
    let first = first.as_ref();
    if others.is_empty() {
        return Ok(first.to_owned());
    }
    let shared =
        parts(first).ok_or_else(|| format!("`{}` is not a URL", crate::redact_url(first)))?;
    let mut hosts = vec![shared.hosts];
    for url in others {
        let url = url.as_ref();
        match parts(url) {
            Some(p)
                if p.scheme == shared.scheme
                    && p.userinfo == shared.userinfo
                    && p.tail == shared.tail =>
            {
                hosts.push(p.hosts);
            }
            _ => {
                return Err(format!(
                    "`{}` differs from `{}` in more than its host: the nodes of one list share \
                     the scheme, credentials, vhost and query",
                    crate::redact_url(url),
                    crate::redact_url(first)
                ));
            }
        }
    }
    Ok(format!(
        "{}://{}{}{}",
        shared.scheme,
        shared.userinfo.map(|u| format!("{u}@")).unwrap_or_default(),
        hosts.join(","),
        shared.tail
    ))
}

/// `url` with its password hidden, when it lists several nodes; `None` for any other URL.
pub(crate) fn redact_list(url: &str) -> Option<String> {
    let parts = parts(url).filter(|parts| parts.hosts.contains(','))?;
    let userinfo = match parts.userinfo {
        Some(userinfo) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@"),
            None => format!("{userinfo}@"),
        },
        None => String::new(),
    };
    Some(format!(
        "{}://{userinfo}{}{}",
        parts.scheme, parts.hosts, parts.tail
    ))
}

/// Whether `url` names no host at all (`amqp:///vhost`, or an empty entry of a list).
#[cfg(feature = "amqp")]
pub(crate) fn has_empty_host(url: &str) -> bool {
    parts(url).is_some_and(|parts| parts.hosts.is_empty())
}

struct Parts<'a> {
    scheme: &'a str,
    userinfo: Option<&'a str>,
    hosts: &'a str,
    /// The path, query and fragment, from the `/`, `?` or `#` that ends the authority.
    tail: &'a str,
}

fn parts(url: &str) -> Option<Parts<'_>> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    Some(Parts {
        scheme,
        userinfo,
        hosts,
        tail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_shares_credentials_vhost_and_query() {
        assert_eq!(
            split_addresses("amqps://u:p%40ss@a,b:5671,c/vh"),
            [
                "amqps://u:p%40ss@a/vh",
                "amqps://u:p%40ss@b:5671/vh",
                "amqps://u:p%40ss@c/vh"
            ]
        );
        assert_eq!(split_addresses("amqp://a,b"), ["amqp://a", "amqp://b"]);
        assert_eq!(split_addresses("memory://x"), ["memory://x"]);
    }

    #[test]
    fn an_empty_entry_stays_empty_for_the_connect_to_refuse() {
        assert_eq!(split_addresses("amqp://a,/v"), ["amqp://a/v", "amqp:///v"]);
    }

    #[test]
    fn a_list_is_redacted_whole() {
        assert_eq!(
            redact_list("amqp://u:s3cret@h1:5701,h2:5702/%2f").as_deref(),
            Some("amqp://u:***@h1:5701,h2:5702/%2f")
        );
        assert_eq!(redact_list("amqp://h1,h2").as_deref(), Some("amqp://h1,h2"));
        assert_eq!(redact_list("amqp://u:p@h1/v"), None);
    }
}
