//! `terraform login` and `tofu login` (`[auth.cli_login]`): the login protocol's `login.v1`
//! service, an OAuth 2.0 authorization-code flow with PKCE between the CLI and this mirror,
//! brokered through single sign-on.
//!
//! 1. The CLI reads `login.v1` from the discovery document, listens on `127.0.0.1:<port>`, and
//!    opens the person's browser at the authorization endpoint (`-/login/authorize`) with its
//!    redirect URI `http://localhost:<port>/login`, a `state` and an S256 code challenge.
//!    [`AuthzRequest::parse`] checks them: the redirect URI must be the CLI's own listener on
//!    this computer (a loopback `http` URL), so a code never travels anywhere else.
//! 2. The person signs in with single sign-on (the same provider and claim rules as the pages)
//!    and confirms; the mirror then sends the browser to the redirect URI with a code. The code
//!    is sealed ([`seal_code`]): the person, the redirect URI and the challenge, an expiry
//!    ([`CODE_TTL`]) and a random ID, MACed with the URL signing key, so any replica that shares
//!    the key can redeem it and nothing about it is stored.
//! 3. The CLI trades the code at the token endpoint (`-/login/token`) with its verifier
//!    ([`Exchange::parse`], [`open_code`]): the MAC, the expiry, the redirect URI and the
//!    verifier must all match, and a code is redeemed once ([`UsedCodes`]; the verifier, which
//!    only the CLI holds, guards the short window in which another replica could be asked).
//!    The answer is a person token of this mirror (see [`super::tokens`]).

use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{AuthConfigError, AuthSettings, ct_eq, digest};

/// The client ID the CLIs are given in `login.v1` and must send back.
pub const CLIENT_ID: &str = "terraform-cli";

/// How long a code may wait to be traded.
pub const CODE_TTL: u64 = 120;

/// The longest `state`, code or verifier looked at.
const MAX_FIELD: usize = 1024;

/// `[auth.cli_login]` as written: its presence turns `terraform login` on.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CliLoginConfig {
    /// How long a token that `terraform login` obtains lasts.
    #[serde(default = "default_token_ttl", with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub token_ttl: Duration,
}

fn default_token_ttl() -> Duration {
    Duration::from_secs(24 * 3600)
}

/// `[auth.cli_login]`, checked.
#[derive(Debug, Clone)]
pub struct CliLoginSettings {
    pub token_ttl: Duration,
}

impl CliLoginConfig {
    pub fn validate(&self, sso_configured: bool) -> Result<CliLoginSettings, AuthConfigError> {
        if !sso_configured {
            return Err(AuthConfigError {
                key: "auth.cli_login".into(),
                message: "terraform login signs people in with single sign-on: configure \
                          [auth.single_sign_on] too"
                    .into(),
            });
        }
        if self.token_ttl < Duration::from_secs(60)
            || self.token_ttl > Duration::from_secs(90 * 24 * 3600)
        {
            return Err(AuthConfigError {
                key: "auth.cli_login.token_ttl".into(),
                message: "must be at least 1m and at most 90d".into(),
            });
        }
        Ok(CliLoginSettings {
            token_ttl: self.token_ttl,
        })
    }
}

/// Why a login step is refused, with the OAuth error code the CLI is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoginError {
    /// A malformed or unacceptable request (`invalid_request`).
    #[error("{0}")]
    InvalidRequest(String),
    /// A code that is not (or no longer) good for this exchange (`invalid_grant`).
    #[error("{0}")]
    InvalidGrant(String),
}

impl LoginError {
    /// The OAuth 2.0 error code (RFC 6749, section 5.2).
    pub fn code(&self) -> &'static str {
        match self {
            LoginError::InvalidRequest(_) => "invalid_request",
            LoginError::InvalidGrant(_) => "invalid_grant",
        }
    }

    /// The token endpoint's error body.
    pub fn to_json(&self) -> String {
        serde_json::json!({ "error": self.code(), "error_description": self.to_string() })
            .to_string()
    }
}

fn bad(message: impl Into<String>) -> LoginError {
    LoginError::InvalidRequest(message.into())
}

/// What the CLI asks for at the authorization endpoint, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthzRequest {
    /// The CLI's listener, `http://localhost:<port>/login` (or `127.0.0.1`, `[::1]`).
    pub redirect_uri: String,
    /// Handed back with the code, as it came.
    pub state: String,
    /// base64url SHA-256 of the CLI's verifier.
    pub challenge: String,
}

impl AuthzRequest {
    /// Reads the authorization request from its query (or the consent form's fields).
    pub fn parse<'a>(
        pairs: impl Iterator<Item = (std::borrow::Cow<'a, str>, std::borrow::Cow<'a, str>)>,
    ) -> Result<AuthzRequest, LoginError> {
        let mut fields = std::collections::HashMap::new();
        for (k, v) in pairs {
            if fields
                .insert(k.clone().into_owned(), v.into_owned())
                .is_some()
            {
                return Err(bad(format!("{k} is given twice")));
            }
        }
        let field = |name: &str| -> Result<&str, LoginError> {
            let value = fields
                .get(name)
                .map(String::as_str)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| bad(format!("{name} is missing")))?;
            if value.len() > MAX_FIELD {
                return Err(bad(format!("{name} is too long")));
            }
            Ok(value)
        };
        let redirect_uri = field("redirect_uri")?;
        check_redirect(redirect_uri)?;
        if field("response_type")? != "code" {
            return Err(bad("response_type must be code"));
        }
        if field("client_id")? != CLIENT_ID {
            return Err(bad(format!(
                "client_id must be {CLIENT_ID}, as this mirror's login.v1 says"
            )));
        }
        if field("code_challenge_method")? != "S256" {
            return Err(bad("code_challenge_method must be S256 (PKCE)"));
        }
        let challenge = field("code_challenge")?;
        let decodes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(challenge)
            .is_ok_and(|d| d.len() == 32);
        if !decodes {
            return Err(bad("code_challenge must be a base64url SHA-256 digest"));
        }
        Ok(AuthzRequest {
            redirect_uri: redirect_uri.to_string(),
            state: field("state")?.to_string(),
            challenge: challenge.to_string(),
        })
    }

    /// The fields to carry through a form, as [`parse`](Self::parse) reads them back.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("response_type", "code".into()),
            ("client_id", CLIENT_ID.into()),
            ("redirect_uri", self.redirect_uri.clone()),
            ("state", self.state.clone()),
            ("code_challenge", self.challenge.clone()),
            ("code_challenge_method", "S256".into()),
        ]
    }

    /// The port the CLI listens on, for the consent page.
    pub fn port(&self) -> u16 {
        url::Url::parse(&self.redirect_uri)
            .ok()
            .and_then(|u| u.port())
            .unwrap_or_default()
    }

    /// Where the browser goes with a code.
    pub fn redirect_with_code(&self, code: &str) -> String {
        let mut url = url::Url::parse(&self.redirect_uri).expect("checked at parse");
        url.query_pairs_mut()
            .append_pair("code", code)
            .append_pair("state", &self.state);
        url.into()
    }
}

/// A redirect URI must be the CLI's own listener: `http`, a loopback host, an explicit port,
/// the path `/login`, nothing else. Any other would send the code off this computer.
fn check_redirect(uri: &str) -> Result<(), LoginError> {
    let refused = || {
        bad(format!(
            "redirect_uri {uri:?} is not a CLI's own listener (http://localhost:<port>/login)"
        ))
    };
    let url = url::Url::parse(uri).map_err(|_| refused())?;
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    let ok = url.scheme() == "http"
        && loopback
        && url.port().is_some()
        && url.path() == "/login"
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none();
    if ok { Ok(()) } else { Err(refused()) }
}

/// What a code stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Code {
    /// Random: a code is redeemed once.
    pub id: String,
    /// The person it signs in, as the session named them (`sso:alice@example.com`).
    pub person: String,
    pub redirect_uri: String,
    pub challenge: String,
    /// Unix seconds after which it is void.
    pub expires: u64,
}

/// A code for `person` answering `request`, valid until `now + CODE_TTL`.
pub fn seal_code(auth: &AuthSettings, person: &str, request: &AuthzRequest, now: u64) -> String {
    let code = Code {
        id: random_hex(16),
        person: person.to_string(),
        redirect_uri: request.redirect_uri.clone(),
        challenge: request.challenge.clone(),
        expires: now + CODE_TTL,
    };
    auth.seal("login-code", &code)
}

/// The code's contents, if its MAC is this mirror's and it has not expired.
pub fn open_code(auth: &AuthSettings, sealed: &str, now: u64) -> Result<Code, LoginError> {
    let refused = |m: &str| LoginError::InvalidGrant(format!("the code {m}"));
    let code: Code = auth.unseal("login-code", sealed).map_err(|e| match e {
        super::Unsealed::Forged => refused("was not issued by this mirror"),
        super::Unsealed::Malformed => refused("is malformed"),
    })?;
    if now >= code.expires {
        return Err(refused("has expired: run the login again"));
    }
    Ok(code)
}

/// The token request (`application/x-www-form-urlencoded`), checked.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub code: String,
    pub redirect_uri: String,
    pub verifier: String,
}

impl Exchange {
    pub fn parse(form: &[u8]) -> Result<Exchange, LoginError> {
        let mut fields = std::collections::HashMap::new();
        for (k, v) in url::form_urlencoded::parse(form) {
            if fields
                .insert(k.clone().into_owned(), v.into_owned())
                .is_some()
            {
                return Err(bad(format!("{k} is given twice")));
            }
        }
        let field = |name: &str| -> Result<String, LoginError> {
            fields
                .get(name)
                .filter(|v| !v.is_empty() && v.len() <= MAX_FIELD)
                .cloned()
                .ok_or_else(|| bad(format!("{name} is missing")))
        };
        if field("grant_type")? != "authorization_code" {
            return Err(LoginError::InvalidRequest(
                "grant_type must be authorization_code".into(),
            ));
        }
        if field("client_id")? != CLIENT_ID {
            return Err(bad(format!("client_id must be {CLIENT_ID}")));
        }
        Ok(Exchange {
            code: field("code")?,
            redirect_uri: field("redirect_uri")?,
            verifier: field("code_verifier")?,
        })
    }

    /// Checks the exchange against the code it presents: the same redirect URI, and a
    /// verifier whose S256 challenge is the code's.
    pub fn matches(&self, code: &Code) -> Result<(), LoginError> {
        if self.redirect_uri != code.redirect_uri {
            return Err(LoginError::InvalidGrant(
                "redirect_uri is not the one the code was issued for".into(),
            ));
        }
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(Sha256::digest(self.verifier.as_bytes()));
        if !ct_eq(
            &digest(challenge.as_bytes()),
            &digest(code.challenge.as_bytes()),
        ) {
            return Err(LoginError::InvalidGrant(
                "code_verifier does not match the code's challenge".into(),
            ));
        }
        Ok(())
    }
}

/// Codes already redeemed on this replica, each remembered until it would have expired.
pub struct UsedCodes(moka::sync::Cache<String, ()>);

impl Default for UsedCodes {
    fn default() -> Self {
        UsedCodes(
            moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(CODE_TTL))
                .build(),
        )
    }
}

impl UsedCodes {
    /// Marks `code` redeemed; refused if it already was.
    pub fn redeem(&self, code: &Code) -> Result<(), LoginError> {
        let entry = self.0.entry(code.id.clone()).or_insert(());
        if entry.is_fresh() {
            Ok(())
        } else {
            Err(LoginError::InvalidGrant(
                "the code was already used: run the login again".into(),
            ))
        }
    }
}

/// `n` random bytes in hex.
pub(super) fn random_hex(n: usize) -> String {
    use ring::rand::SecureRandom;
    let mut bytes = vec![0u8; n];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system random source works");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> AuthSettings {
        AuthSettings {
            signing_key: b"k".repeat(40),
            ..Default::default()
        }
    }

    fn request(redirect: &str) -> Result<AuthzRequest, LoginError> {
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(Sha256::digest(b"verifier-0123456789"));
        let query = format!(
            "response_type=code&client_id=terraform-cli&redirect_uri={}&state=s1&\
             code_challenge={challenge}&code_challenge_method=S256",
            url::form_urlencoded::byte_serialize(redirect.as_bytes()).collect::<String>()
        );
        AuthzRequest::parse(url::form_urlencoded::parse(query.as_bytes()))
    }

    #[test]
    fn only_the_cli_s_own_listener_is_a_redirect() {
        for ok in [
            "http://localhost:10000/login",
            "http://127.0.0.1:1024/login",
            "http://[::1]:65000/login",
        ] {
            assert!(request(ok).is_ok(), "{ok}");
        }
        for refused in [
            "https://localhost:10000/login",
            "http://evil.example:10000/login",
            "http://localhost/login",
            "http://localhost:10000/other",
            "http://localhost:10000/login?x=1",
            "http://user@localhost:10000/login",
            "http://localhost.evil.example:1/login",
            "http://10.0.0.1:10000/login",
        ] {
            assert!(request(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn a_code_is_good_once_for_its_verifier_and_redirect() {
        let auth = settings();
        let req = request("http://localhost:10001/login").unwrap();
        let sealed = seal_code(&auth, "sso:alice@example.com", &req, 1000);
        let code = open_code(&auth, &sealed, 1000 + CODE_TTL - 1).unwrap();
        assert_eq!(code.person, "sso:alice@example.com");
        let exchange = |verifier: &str, redirect: &str| Exchange {
            code: sealed.clone(),
            redirect_uri: redirect.into(),
            verifier: verifier.into(),
        };
        exchange("verifier-0123456789", "http://localhost:10001/login")
            .matches(&code)
            .unwrap();
        assert!(
            exchange("another", "http://localhost:10001/login")
                .matches(&code)
                .is_err()
        );
        assert!(
            exchange("verifier-0123456789", "http://localhost:10002/login")
                .matches(&code)
                .is_err()
        );
        let used = UsedCodes::default();
        used.redeem(&code).unwrap();
        assert!(used.redeem(&code).is_err());
        assert!(open_code(&auth, &sealed, 1000 + CODE_TTL).is_err());
        let other = AuthSettings {
            signing_key: b"o".repeat(40),
            ..Default::default()
        };
        assert!(open_code(&other, &sealed, 1000).is_err());
        let mut tampered = sealed.clone();
        tampered.insert(3, 'x');
        assert!(open_code(&auth, &tampered, 1000).is_err());
    }
}
