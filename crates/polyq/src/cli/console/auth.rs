//! Who may do what. The actions need the token: as `Authorization: Bearer <token>`, or from a
//! browser that logged in with it, as the session cookie (`SameSite=Strict`, `HttpOnly`)
//! together with the form field [`CSRF_FIELD`], whose value only pages served to that session
//! carry. Beyond loopback every page but `/login` and `/health` needs the one or the other.

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};

/// The session cookie's name.
pub(crate) const COOKIE_NAME: &str = "polyq_console";

/// The hidden form field of every action form.
pub(crate) const CSRF_FIELD: &str = "csrf";

/// The console's secrets.
pub(crate) struct Auth {
    token: String,
    session: String,
    csrf: String,
    /// Whether reading needs the token too (bound beyond loopback).
    pub(crate) guards_reads: bool,
}

/// 244 random bits (two v4 UUIDs from the operating system's generator), as 64 hex digits.
fn secret() -> String {
    uuid::Uuid::new_v4().simple().to_string() + &uuid::Uuid::new_v4().simple().to_string()
}

impl Auth {
    /// The secrets, with `token` or a generated one (also returned, to be shown once).
    pub(crate) fn new(
        token: Option<String>,
        guards_reads: bool,
    ) -> anyhow::Result<(Self, Option<String>)> {
        if let Some(token) = &token {
            anyhow::ensure!(
                token.len() >= 16,
                "--token (or POLYQ_CONSOLE_TOKEN): use at least 16 characters"
            );
        }
        let generated = token.is_none().then(secret);
        let auth = Self {
            token: token.or_else(|| generated.clone()).unwrap_or_default(),
            session: secret(),
            csrf: secret(),
            guards_reads,
        };
        Ok((auth, generated))
    }

    /// Whether `given` is the token.
    pub(crate) fn is_token(&self, given: &str) -> bool {
        constant_time_eq(given.as_bytes(), self.token.as_bytes())
    }

    /// The session cookie a login with the token sets.
    pub(crate) fn session_cookie(&self) -> String {
        format!(
            "{COOKIE_NAME}={}; HttpOnly; SameSite=Strict; Path=/",
            self.session
        )
    }

    /// Whether the request carries the token or the session.
    pub(crate) fn knows(&self, headers: &HeaderMap) -> bool {
        self.bearer(headers) || self.in_session(headers)
    }

    /// The form field value for a page served to `headers`: only a session gets one.
    pub(crate) fn csrf_for(&self, headers: &HeaderMap) -> Option<&str> {
        self.in_session(headers).then_some(self.csrf.as_str())
    }

    /// Whether an action may run: the token in the header, or the session with its form field.
    pub(crate) fn may_act(&self, headers: &HeaderMap, csrf: Option<&str>) -> bool {
        self.bearer(headers)
            || (self.in_session(headers)
                && csrf
                    .is_some_and(|given| constant_time_eq(given.as_bytes(), self.csrf.as_bytes())))
    }

    fn bearer(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(AUTHORIZATION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .filter_map(|value| value.strip_prefix("Bearer "))
            .any(|given| self.is_token(given.trim()))
    }

    fn in_session(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| {
                name == COOKIE_NAME && constant_time_eq(value.as_bytes(), self.session.as_bytes())
            })
    }
}

/// Compares without stopping at the first difference, so timing tells nothing of the secret.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn auth() -> Auth {
        Auth::new(Some("a-token-of-sixteen".to_owned()), false)
            .unwrap()
            .0
    }

    #[test]
    fn a_short_token_is_refused() {
        assert!(Auth::new(Some("short".to_owned()), false).is_err());
    }

    #[test]
    fn a_generated_token_is_returned_once_and_accepted() {
        let (auth, generated) = Auth::new(None, false).unwrap();
        let token = generated.expect("generated");
        assert_eq!(token.len(), 64);
        assert!(auth.is_token(&token));
    }

    #[test]
    fn actions_need_the_bearer_token_or_the_session_with_its_field() {
        let auth = auth();
        let mut headers = HeaderMap::new();
        assert!(!auth.may_act(&headers, None));
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Bearer wrong-token-xxxxx"),
        );
        assert!(!auth.may_act(&headers, None));
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Bearer a-token-of-sixteen"),
        );
        assert!(auth.may_act(&headers, None));

        let mut browser = HeaderMap::new();
        let cookie = auth.session_cookie();
        let pair = cookie.split(';').next().unwrap().to_owned();
        browser.insert(COOKIE, HeaderValue::from_str(&pair).unwrap());
        let csrf = auth
            .csrf_for(&browser)
            .expect("a session gets the field")
            .to_owned();
        assert!(
            !auth.may_act(&browser, None),
            "the cookie alone is not enough"
        );
        assert!(!auth.may_act(&browser, Some("forged")));
        assert!(auth.may_act(&browser, Some(&csrf)));
        assert!(auth.csrf_for(&HeaderMap::new()).is_none());
    }
}
