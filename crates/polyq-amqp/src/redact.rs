//! Credentials never reach logs or errors: every URL shown goes through [`redact_url`].

/// The URL with its password replaced by `***`, for logs and error messages.
///
/// Text that does not parse as a URL is returned with everything before the last `@` of its
/// authority hidden, so a malformed URL cannot leak a password either.
///
/// ```
/// use polyq_amqp::redact_url;
///
/// assert_eq!(
///     redact_url("amqp://guest:secret@127.0.0.1:5672/%2f"),
///     "amqp://guest:***@127.0.0.1:5672/%2f"
/// );
/// assert_eq!(
///     redact_url("amqp://guest:secret@h1:5701,h2:5702/%2f"),
///     "amqp://guest:***@h1:5701,h2:5702/%2f"
/// );
/// assert_eq!(redact_url("memory://"), "memory://");
/// ```
pub fn redact_url(raw: &str) -> String {
    // A list of nodes is no URL to the parser; its credentials are those of every node.
    if let Some(redacted) = crate::addresses::redact_list(raw) {
        return redacted;
    }
    // Only text with an authority is treated as a URL: `user:pass@host` would otherwise parse
    // as the scheme `user` with an opaque path and keep its password.
    let parsed = raw
        .contains("://")
        .then(|| url::Url::parse(raw).ok())
        .flatten();
    match parsed {
        Some(mut parsed) => {
            if parsed.password().is_some() {
                // Setting a password only fails for URLs that cannot have one, which cannot be
                // the case when one was parsed.
                let _ = parsed.set_password(Some("***"));
            }
            parsed.to_string()
        }
        None => match raw.split_once("://") {
            Some((scheme, rest)) => match rest.rsplit_once('@') {
                Some((_, tail)) => format!("{scheme}://***@{tail}"),
                None => raw.to_owned(),
            },
            None if raw.contains('@') => "***".to_owned(),
            None => raw.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact_url("amqps://user:p%40ss@rabbit.example:5671/vh"),
            "amqps://user:***@rabbit.example:5671/vh"
        );
        assert_eq!(
            redact_url("redis://:token@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
    }

    #[test]
    fn unparseable_urls_hide_userinfo() {
        assert_eq!(redact_url("amqp://u:p@[bad"), "amqp://***@[bad");
        assert_eq!(redact_url("u:p@host"), "***");
    }
}
