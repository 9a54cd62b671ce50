//! Who may use the mirror: client bearer tokens and signed archive URLs.
//!
//! Authentication is off unless `[auth]` names tokens. When it is on:
//! - every request must carry `Authorization: Bearer <token>` with one of the configured tokens
//!   (the CLI sends the token of a `credentials "mirror.example.com"` block or a `TF_TOKEN_...`
//!   variable). Tokens are compared by their SHA-256 digests in constant time; a missing or wrong
//!   token gets 401 with `WWW-Authenticate: Bearer`;
//! - archive downloads may instead carry a signed, expiring query (`?exp=..&c=..&sig=..`),
//!   because the CLI sends no credentials when it downloads a package. `<version>.json` hands out
//!   such URLs: the signature is an HMAC-SHA256 over the archive's canonical path, the expiry
//!   time and the client the URL was handed to, with `auth.url_signing_key`. A tampered or
//!   expired URL gets 403, and so does one naming no client or a client no longer configured;
//! - `Authorization: Basic` with a token as its password (any user name) counts as that bearer
//!   token, for clients that read credentials from a `.netrc` (the release installers);
//! - `/healthz`, `/readyz`, `/metrics` and the CLIs' releases are open or protected as
//!   `auth.protect_health`, `auth.protect_metrics` and `auth.protect_releases` say.
//!
//! Tokens never appear in logs or error messages.

pub mod jwt;
pub mod login;
pub mod oidc;
pub mod registry_token;
pub mod rules;
pub mod session;
pub mod sso;
pub mod tokens;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// A bad `[auth]` setting: the key at fault and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("config key {key}: {message}")]
pub struct AuthConfigError {
    pub key: String,
    pub message: String,
}

/// `[auth]` as written in the configuration file.
#[derive(Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Client bearer tokens, each at least 16 printable characters; any of them (or of
    /// `token_file`, or of `[[auth.clients]]`) grants access. Clients send them as bearer
    /// tokens (a `credentials` block or `TF_TOKEN_<host>`). None: authentication is off unless
    /// issuers, clients or `cli_login` turn it on.
    pub tokens: Vec<String>,
    /// A file with one token per line (blank lines and `#` comments ignored).
    #[schemars(extend("format" = "path"))]
    pub token_file: Option<PathBuf>,
    /// Key for signing archive URLs (HMAC-SHA256 over the path and an expiry), which the CLIs
    /// fetch without credentials; at least 32 characters. Unset: a random key per process
    /// (URLs then die with the process, and replicas behind one load balancer need the same
    /// key). It also signs the pages' session cookies.
    pub url_signing_key: Option<String>,
    /// A file holding the URL signing key (surrounding whitespace ignored).
    #[schemars(extend("format" = "path"))]
    pub url_signing_key_file: Option<PathBuf>,
    /// How long a signed archive URL stays valid.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub url_ttl: Duration,
    /// Require a token for `/healthz` and `/readyz`.
    pub protect_health: bool,
    /// Require a token for `/metrics`.
    pub protect_metrics: bool,
    /// Require a token for the CLIs' releases (`releases/`): installers send one only as the
    /// password of Basic credentials from a `.netrc` file.
    pub protect_releases: bool,
    /// How long a sign-in to the pages lasts (1m to 30d).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub session_ttl: Duration,
    /// OpenID Connect issuers whose ID tokens clients may present instead of a token (CI
    /// workload identity); an issuer's host may have an `[upstream.hosts]` table without being
    /// an origin.
    pub issuers: Vec<oidc::IssuerConfig>,
    /// Named clients: tokens like `tokens`, each with a name the access log, rules and usage
    /// counts show instead of an anonymous `token:<fingerprint>`.
    pub clients: Vec<ClientConfig>,
    /// What each client may do: rules tried in order, the first whose `clients` patterns match
    /// a client's name deciding. A client no rule matches may do everything,
    /// so end with a `clients = "*"` rule to set a default.
    pub rules: Vec<rules::RuleConfig>,
    /// Single sign-on for the pages: people sign in with an OpenID Connect provider
    /// (authorization code flow with PKCE) instead of a token. Register
    /// `<public URL>-/sign-in/callback` as the redirect URI.
    pub single_sign_on: Option<sso::SsoConfig>,
    /// `terraform login` and `tofu login` through single sign-on: people get tokens of their
    /// own, accepted at every door; its presence turns client authentication on.
    pub cli_login: Option<login::CliLoginConfig>,
}

/// One `[[auth.clients]]` entry: a named client and its token (inline or in a file).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// The client's name in logs, rules and usage: letters, digits, `-`, `_`, `.`, `@` (not
    /// `anonymous` or `-`).
    pub name: String,
    /// The client's token (at least 16 printable characters).
    #[serde(default)]
    pub token: Option<String>,
    /// A file holding the client's token, instead of `token`.
    #[serde(default)]
    #[schemars(extend("format" = "path"))]
    pub token_file: Option<PathBuf>,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("tokens", &format_args!("[{} redacted]", self.tokens.len()))
            .field("token_file", &self.token_file)
            .field(
                "url_signing_key",
                &self.url_signing_key.as_ref().map(|_| "[redacted]"),
            )
            .field("url_signing_key_file", &self.url_signing_key_file)
            .field("url_ttl", &self.url_ttl)
            .field("protect_health", &self.protect_health)
            .field("protect_metrics", &self.protect_metrics)
            .field("protect_releases", &self.protect_releases)
            .field("session_ttl", &self.session_ttl)
            .field("issuers", &self.issuers)
            .field(
                "clients",
                &self.clients.iter().map(|c| &c.name).collect::<Vec<_>>(),
            )
            .field("rules", &self.rules)
            .field(
                "single_sign_on",
                &self
                    .single_sign_on
                    .as_ref()
                    .map(|s| (&s.issuer, &s.client_id)),
            )
            .field("cli_login", &self.cli_login)
            .finish()
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            tokens: Vec::new(),
            token_file: None,
            url_signing_key: None,
            url_signing_key_file: None,
            url_ttl: Duration::from_secs(3600),
            protect_health: false,
            protect_metrics: true,
            protect_releases: true,
            session_ttl: Duration::from_secs(12 * 3600),
            issuers: Vec::new(),
            clients: Vec::new(),
            rules: Vec::new(),
            single_sign_on: None,
            cli_login: None,
        }
    }
}

/// One pattern or several, as written in the configuration (serialised only for the
/// configuration reference's defaults).
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Patterns {
    One(String),
    Many(Vec<String>),
}

impl Patterns {
    /// The patterns as a list.
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            Patterns::One(p) => vec![p.clone()],
            Patterns::Many(ps) => ps.clone(),
        }
    }
}

/// Patterns a text may match, each exact or a glob: `*` matches any run of characters, `/`
/// included, `?` one character, `\` escapes.
#[derive(Debug, Clone)]
pub struct Globs(Vec<globset::GlobMatcher>);

impl Globs {
    /// Compiles `patterns`; an invalid one is reported with its text.
    pub fn new(patterns: &[String]) -> Result<Globs, String> {
        patterns
            .iter()
            .map(|p| {
                globset::GlobBuilder::new(p)
                    .literal_separator(false)
                    .backslash_escape(true)
                    .build()
                    .map(|g| g.compile_matcher())
                    .map_err(|e| format!("pattern {p:?}: {e}"))
            })
            .collect::<Result<_, _>>()
            .map(Globs)
    }

    /// Whether `text` matches one of the patterns.
    pub fn is_match(&self, text: &str) -> bool {
        self.0.iter().any(|g| g.is_match(text))
    }
}

fn invalid(key: &str, message: impl Into<String>) -> AuthConfigError {
    AuthConfigError {
        key: key.to_string(),
        message: message.into(),
    }
}

const MIN_KEY_LEN: usize = 32;

/// The first parts of client names the mirror gives itself (`token:<fingerprint>` for an
/// unnamed token, in logs, rules and session subjects), which no issuer or single sign-on may
/// be named: `token:<sub>` would be taken for one of the mirror's tokens.
pub const RESERVED_PREFIXES: &[&str] = &["token"];

/// The client names the mirror gives itself, which no `[[auth.clients]]` entry may take:
/// `anonymous` (anyone, when authentication is off or a route is open) and `-` (no valid
/// credentials, in the access log).
pub const RESERVED_CLIENTS: &[&str] = &["anonymous", "-"];

impl AuthConfig {
    /// The hosts (`host` or `host:port`) of the configured issuers' URLs (single sign-on's
    /// too).
    pub fn issuer_hosts(&self) -> Vec<String> {
        self.issuers
            .iter()
            .map(|i| &i.issuer)
            .chain(self.single_sign_on.iter().map(|s| &s.issuer))
            .filter_map(|i| url::Url::parse(i).ok())
            .filter_map(|u| crate::address::authority(&u))
            .collect()
    }

    /// Checks the section and loads the token and key files.
    pub fn validate(&self) -> Result<AuthSettings, AuthConfigError> {
        let mut digests = Vec::new();
        for (i, t) in self.tokens.iter().enumerate() {
            check_token(t).map_err(|e| invalid(&format!("auth.tokens[{i}]"), e.to_string()))?;
            digests.push(digest(t.as_bytes()));
        }
        if let Some(path) = &self.token_file {
            for (line, t) in read_token_file(path)? {
                check_token(&t).map_err(|e| {
                    invalid(
                        "auth.token_file",
                        format!("{} line {line}: {e}", path.display()),
                    )
                })?;
                digests.push(digest(t.as_bytes()));
            }
            if digests.is_empty() {
                return Err(invalid(
                    "auth.token_file",
                    format!("{} holds no token", path.display()),
                ));
            }
        }
        let mut names = vec![None; digests.len()];
        for (i, client) in self.clients.iter().enumerate() {
            let key = |field: &str| format!("auth.clients[{i}].{field}");
            let name_ok = !client.name.is_empty()
                && client.name.len() <= 64
                && client
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b));
            if !name_ok {
                return Err(invalid(
                    &key("name"),
                    "must be 1 to 64 letters, digits, -, _, . or @",
                ));
            }
            if RESERVED_CLIENTS.contains(&client.name.as_str()) {
                return Err(invalid(
                    &key("name"),
                    format!(
                        "{:?} is reserved: the mirror names its own clients so",
                        client.name
                    ),
                ));
            }
            if names.iter().flatten().any(|n| n == &client.name) {
                return Err(invalid(
                    &key("name"),
                    format!("{} is named twice", client.name),
                ));
            }
            let token = match (&client.token, &client.token_file) {
                (Some(t), None) => t.clone(),
                (None, Some(path)) => std::fs::read_to_string(path)
                    .map_err(|e| {
                        invalid(
                            &key("token_file"),
                            format!("cannot read {}: {e}", path.display()),
                        )
                    })?
                    .trim()
                    .to_string(),
                _ => {
                    return Err(invalid(&key("token"), "set either token or token_file"));
                }
            };
            check_token(&token).map_err(|e| invalid(&key("token"), e.to_string()))?;
            let d = digest(token.as_bytes());
            if digests.contains(&d) {
                return Err(invalid(&key("token"), "is another client's token too"));
            }
            digests.push(d);
            names.push(Some(client.name.clone()));
        }
        if self.url_ttl.is_zero() || self.url_ttl > Duration::from_secs(7 * 24 * 3600) {
            return Err(invalid(
                "auth.url_ttl",
                "must be longer than zero and at most 7d",
            ));
        }
        if self.session_ttl < Duration::from_secs(60)
            || self.session_ttl > Duration::from_secs(30 * 24 * 3600)
        {
            return Err(invalid(
                "auth.session_ttl",
                "must be at least 1m and at most 30d",
            ));
        }
        let key = match (&self.url_signing_key, &self.url_signing_key_file) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "auth.url_signing_key_file",
                    "set either auth.url_signing_key or auth.url_signing_key_file, not both",
                ));
            }
            (Some(k), None) => Some(check_key("auth.url_signing_key", k.trim())?),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    invalid(
                        "auth.url_signing_key_file",
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                Some(check_key("auth.url_signing_key_file", text.trim())?)
            }
            (None, None) => None,
        };
        let issuers = self
            .issuers
            .iter()
            .enumerate()
            .map(|(i, issuer)| issuer.validate(i))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, issuer) in issuers.iter().enumerate() {
            if let Some(j) = issuers[..i].iter().position(|o| o.name == issuer.name) {
                return Err(invalid(
                    &format!("auth.issuers[{i}].name"),
                    format!(
                        "{} is the name of auth.issuers[{j}] too: their identities would be one",
                        issuer.name
                    ),
                ));
            }
        }
        let rules = rules::Rules::new(&self.rules)?;
        let sso = self
            .single_sign_on
            .as_ref()
            .map(sso::SsoConfig::validate)
            .transpose()?;
        if let Some(sso) = &sso {
            if let Some(j) = issuers.iter().position(|o| o.name == sso.rules.name) {
                return Err(invalid(
                    "auth.single_sign_on.name",
                    format!(
                        "{} is the name of auth.issuers[{j}] too: people and workloads would share names",
                        sso.rules.name
                    ),
                ));
            }
        }
        let cli_login = self
            .cli_login
            .as_ref()
            .map(|c| c.validate(sso.is_some()))
            .transpose()?;
        let clients_known = !digests.is_empty() || !issuers.is_empty() || cli_login.is_some();
        let enabled = clients_known || sso.is_some();
        if !clients_known && !rules.is_empty() {
            return Err(invalid(
                "auth.rules",
                "rules need clients to tell apart: configure tokens, clients, issuers or cli_login",
            ));
        }
        let (signing_key, key_generated) = match key {
            Some(k) => (k, false),
            None if enabled => (random_key()?, true),
            None => (Vec::new(), false),
        };
        Ok(AuthSettings {
            tokens: digests,
            names,
            signing_key,
            key_generated,
            url_ttl: self.url_ttl,
            protect_health: self.protect_health,
            protect_metrics: self.protect_metrics,
            protect_releases: self.protect_releases,
            session_ttl: self.session_ttl,
            issuers,
            rules,
            sso,
            cli_login,
        })
    }
}

/// Why a client token is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum TokenError {
    #[error("must be at least 16 characters")]
    TooShort,
    #[error("may contain only printable ASCII without spaces")]
    NotPrintable,
}

fn check_token(t: &str) -> Result<(), TokenError> {
    if t.len() < 16 {
        return Err(TokenError::TooShort);
    }
    if !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(TokenError::NotPrintable);
    }
    Ok(())
}

fn check_key(key: &str, value: &str) -> Result<Vec<u8>, AuthConfigError> {
    if value.len() < MIN_KEY_LEN {
        return Err(invalid(
            key,
            format!("must be at least {MIN_KEY_LEN} characters"),
        ));
    }
    Ok(value.as_bytes().to_vec())
}

fn read_token_file(path: &Path) -> Result<Vec<(usize, String)>, AuthConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        invalid(
            "auth.token_file",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    Ok(text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .collect())
}

fn random_key() -> Result<Vec<u8>, AuthConfigError> {
    use ring::rand::SecureRandom;
    let mut key = vec![0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| {
            invalid(
                "auth.url_signing_key",
                "not set, and no random key could be generated (the system random source failed)",
            )
        })?;
    Ok(key)
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Equality of two digests in time independent of their contents.
fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// The validated `[auth]` section.
#[derive(Clone, Default)]
pub struct AuthSettings {
    /// SHA-256 digests of the accepted tokens; empty means authentication is off.
    tokens: Vec<[u8; 32]>,
    /// Each token's client name (`[[auth.clients]]`), by the same index.
    names: Vec<Option<String>>,
    signing_key: Vec<u8>,
    /// No key was configured, so one was generated for this process.
    pub key_generated: bool,
    pub url_ttl: Duration,
    pub protect_health: bool,
    pub protect_metrics: bool,
    pub protect_releases: bool,
    /// How long a sign-in to the pages lasts (see [`session`]).
    pub session_ttl: Duration,
    /// The issuers whose ID tokens are accepted (see [`oidc`]).
    pub issuers: Vec<jwt::IssuerRules>,
    /// What each client may do: rules tried in order, the first whose `clients` patterns match
    /// a client's name deciding. A client no rule matches may do everything,
    /// so end with a `clients = "*"` rule to set a default.
    pub rules: rules::Rules,
    /// Single sign-on for the pages: people sign in with an OpenID Connect provider
    /// (authorization code flow with PKCE) instead of a token. Register
    /// `<public URL>-/sign-in/callback` as the redirect URI.
    pub sso: Option<sso::SsoSettings>,
    /// `terraform login` (see [`login`]): people's own tokens.
    pub cli_login: Option<login::CliLoginSettings>,
}

impl std::fmt::Debug for AuthSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthSettings")
            .field("tokens", &format_args!("[{} redacted]", self.tokens.len()))
            .field("signing_key", &"[redacted]")
            .field("key_generated", &self.key_generated)
            .field("url_ttl", &self.url_ttl)
            .field("protect_health", &self.protect_health)
            .field("protect_metrics", &self.protect_metrics)
            .field("protect_releases", &self.protect_releases)
            .field("session_ttl", &self.session_ttl)
            .finish()
    }
}

/// The credentials of an `Authorization` header `value` in the scheme `scheme` (given in
/// lower case; matched in any case, as HTTP says), or `None` when it is another scheme.
pub fn credentials_of<'a>(value: &'a [u8], scheme: &str) -> Option<&'a [u8]> {
    let (name, rest) = value.split_at_checked(scheme.len())?;
    let rest = rest.strip_prefix(b" ")?;
    name.eq_ignore_ascii_case(scheme.as_bytes()).then_some(rest)
}

/// Why a sealed value is not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unsealed {
    Malformed,
    /// Not made with this mirror's key.
    Forged,
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No usable credentials: 401 with `WWW-Authenticate`.
    Unauthorized(String),
    /// A signed URL that is tampered with or expired: 403.
    Forbidden(String),
    /// The credentials cannot be checked now (an issuer's keys cannot be fetched): 503 with
    /// `Retry-After`, not a refusal of the client.
    Unavailable(String),
}

impl Denied {
    /// HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            Denied::Unauthorized(_) => 401,
            Denied::Forbidden(_) => 403,
            Denied::Unavailable(_) => 503,
        }
    }

    /// The JSON error body, shaped like every other error the mirror sends.
    pub fn to_json(&self) -> String {
        let (code, message) = match self {
            Denied::Unauthorized(m) => ("unauthorized", m),
            Denied::Forbidden(m) => ("forbidden", m),
            Denied::Unavailable(m) => ("issuer_unavailable", m),
        };
        serde_json::json!({
            "error": { "status": self.status(), "code": code, "message": message }
        })
        .to_string()
    }

    /// The `WWW-Authenticate` challenge, for 401 answers.
    pub fn challenge(&self) -> Option<&'static str> {
        match self {
            Denied::Unauthorized(_) => Some("Bearer realm=\"provender\""),
            Denied::Forbidden(_) | Denied::Unavailable(_) => None,
        }
    }
}

impl AuthSettings {
    /// Whether clients must authenticate: the mirror has tokens, accepts ID tokens, or gives
    /// people tokens with `terraform login`.
    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty() || !self.issuers.is_empty() || self.cli_login.is_some()
    }

    /// Whether `name` is a person who may hold a token from `terraform login`: login is on and
    /// single sign-on (still) vouches for names like theirs.
    pub fn is_login_person(&self, name: &str) -> bool {
        self.cli_login.is_some() && self.sso.as_ref().is_some_and(|s| s.owns(name))
    }

    /// Whether the pages need a sign-in: client authentication is on, or single sign-on is
    /// configured (which alone leaves the protocols open, as without `[auth]`).
    pub fn pages_need_sign_in(&self) -> bool {
        self.enabled() || self.sso.is_some()
    }

    /// Whether the mirror has tokens of its own (besides ID tokens and single sign-on).
    pub fn has_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Checks the `Authorization` header of a request.
    pub fn check_bearer(&self, authorization: Option<&[u8]>) -> Result<(), Denied> {
        self.bearer_client(authorization).map(drop)
    }

    /// Checks the `Authorization` header of a request, and names its client: the client's
    /// name for a named token, `token:<fingerprint>` for another one, `anonymous` when
    /// authentication is off.
    pub fn bearer_client(&self, authorization: Option<&[u8]>) -> Result<String, Denied> {
        if !self.enabled() {
            return Ok("anonymous".into());
        }
        let Some(value) = authorization else {
            return Err(Denied::Unauthorized(
                "this mirror requires a bearer token (a credentials block for its host in the CLI configuration)".into(),
            ));
        };
        let token = credentials_of(value, "bearer").map(|t| t.trim_ascii());
        let Some(token) = token else {
            return Err(Denied::Unauthorized(
                "the Authorization header is not a bearer token".into(),
            ));
        };
        match self.matching(token) {
            Some(i) => Ok(self.names[i]
                .clone()
                .unwrap_or_else(|| fingerprint(&self.tokens[i]))),
            None => Err(Denied::Unauthorized("the bearer token is not valid".into())),
        }
    }

    /// The index of the configured token `token` is, comparing with every one (in constant
    /// time each, so timing says little about which matched).
    fn matching(&self, token: &[u8]) -> Option<usize> {
        let presented = digest(token);
        let mut matched = None;
        for (i, t) in self.tokens.iter().enumerate() {
            if ct_eq(t, &presented) {
                matched = Some(i);
            }
        }
        matched
    }

    /// The secret an OCI client sends to the token endpoint: the password of `Basic`
    /// credentials (any user name), or a bearer token. The caller checks it like any bearer
    /// token (one of the mirror's tokens, or an ID token); the client then presents it as its
    /// bearer token.
    pub fn token_request_secret(authorization: Option<&[u8]>) -> Result<String, Denied> {
        let basic = authorization
            .and_then(|v| credentials_of(v, "basic"))
            .map(|b| {
                base64::engine::general_purpose::STANDARD
                    .decode(b.trim_ascii())
                    .ok()
                    .and_then(|d| String::from_utf8(d).ok())
                    .and_then(|d| d.split_once(':').map(|(_, password)| password.to_string()))
                    .ok_or_else(|| {
                        Denied::Unauthorized("the Basic credentials are malformed".into())
                    })
            });
        let token = match basic {
            Some(password) => password?,
            None => {
                let value = authorization.ok_or_else(|| {
                    Denied::Unauthorized(
                        "this mirror requires credentials: one of its tokens as the password (oci_credentials)".into(),
                    )
                })?;
                String::from_utf8_lossy(
                    credentials_of(value, "bearer")
                        .unwrap_or(value)
                        .trim_ascii(),
                )
                .into_owned()
            }
        };
        Ok(token)
    }

    /// The query string (`exp=...&sig=...`) that lets an archive at `path` be downloaded
    /// without a token until `now + url_ttl`. `path` is the archive's canonical path below the
    /// base path, e.g. `registry.terraform.io/hashicorp/random/terraform-provider-random_...zip`.
    pub fn sign(&self, path: &str, client: &str, now: SystemTime) -> String {
        let expires = crate::clock::unix_secs(now).saturating_add(self.url_ttl.as_secs());
        let encoded: String = url::form_urlencoded::byte_serialize(client.as_bytes()).collect();
        format!(
            "exp={expires}&c={encoded}&sig={}",
            self.mac(path, expires, client)
        )
    }

    /// `url` with the query [`sign`](Self::sign) makes for `path` and `client` when
    /// authentication is on; `url` itself when it is off.
    pub fn signed_url(&self, url: String, path: &str, client: &str, now: SystemTime) -> String {
        if self.enabled() {
            format!("{url}?{}", self.sign(path, client, now))
        } else {
            url
        }
    }

    /// Checks a signed archive URL's query against its canonical `path`, and returns the
    /// client it was handed to, which must still be one this mirror accepts (a URL outlives
    /// neither its client's token nor its issuer). `Ok(None)`: the query carries no signature
    /// at all.
    pub fn verify_signed(
        &self,
        path: &str,
        query: Option<&str>,
        now: SystemTime,
    ) -> Result<Option<String>, Denied> {
        let mut exp = None;
        let mut sig = None;
        let mut client = None;
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*name {
                "exp" => exp = Some(value.into_owned()),
                "sig" => sig = Some(value.into_owned()),
                "c" => client = Some(value.into_owned()),
                _ => {}
            }
        }
        if exp.is_none() && sig.is_none() {
            return Ok(None);
        }
        let forbidden = |m: &str| {
            Denied::Forbidden(format!(
                "archive URL {m}; fetch its <version>.json again for a fresh one"
            ))
        };
        let (Some(exp), Some(sig)) = (exp, sig) else {
            return Err(forbidden("is incompletely signed"));
        };
        let Some(client) = client else {
            return Err(forbidden(
                "names no client (URLs that name none are no longer accepted)",
            ));
        };
        let expires: u64 = exp
            .parse()
            .map_err(|_| forbidden("has a malformed expiry"))?;
        let expected = self.mac(path, expires, &client);
        if !ct_eq(&digest(expected.as_bytes()), &digest(sig.as_bytes())) {
            return Err(forbidden("has an invalid signature"));
        }
        if crate::clock::unix_secs(now) >= expires {
            return Err(forbidden("has expired"));
        }
        if !self.knows_client(&client) {
            return Err(forbidden(&format!(
                "was handed to {client}, whom this mirror no longer accepts"
            )));
        }
        Ok(Some(client))
    }

    fn mac(&self, path: &str, expires: u64, client: &str) -> String {
        self.mac_of("archive", &format!("{path}\n{expires}\n{client}"))
    }

    /// Whether `client` names a client this mirror accepts as configured now: a named token's
    /// client, an unnamed token's `token:<fingerprint>`, or an identity of a configured issuer.
    fn knows_client(&self, client: &str) -> bool {
        let token = self
            .tokens
            .iter()
            .zip(&self.names)
            .any(|(t, name)| match name {
                Some(name) => name == client,
                None => fingerprint(t) == client,
            });
        token
            || self.issuers.iter().any(|i| is_identity_of(&i.name, client))
            || self.is_login_person(client)
    }

    /// HMAC-SHA256 of `message` with the signing key, in the domain `purpose` (`archive`,
    /// `session`), base64url.
    fn mac_of(&self, purpose: &str, message: &str) -> String {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.signing_key);
        let tag = ring::hmac::sign(&key, format!("provender-{purpose}\n{message}").as_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag.as_ref())
    }

    /// `value` sealed for `purpose`: its JSON in base64url, a dot, and the MAC over that
    /// ([`mac_of`](Self::mac_of)). Anyone can read it; only this mirror's key makes it.
    fn seal(&self, purpose: &str, value: &impl serde::Serialize) -> String {
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(value).expect("sealed values serialise"));
        let mac = self.mac_of(purpose, &claims);
        format!("{claims}.{mac}")
    }

    /// The value [`seal`](Self::seal) made for `purpose`, if its MAC is this key's (compared in
    /// constant time).
    fn unseal<T: serde::de::DeserializeOwned>(
        &self,
        purpose: &str,
        sealed: &str,
    ) -> Result<T, Unsealed> {
        let (claims, mac) = sealed.split_once('.').ok_or(Unsealed::Malformed)?;
        let expected = self.mac_of(purpose, claims);
        if !ct_eq(&digest(expected.as_bytes()), &digest(mac.as_bytes())) {
            return Err(Unsealed::Forged);
        }
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(claims)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or(Unsealed::Malformed)
    }

    /// The session subject of a valid token: `token:` and the first 8 bytes of its SHA-256 in
    /// hex (it names the token without giving it away).
    fn token_subject(&self, token: &str) -> Option<String> {
        self.matching(token.as_bytes())
            .map(|i| fingerprint(&self.tokens[i]))
    }

    /// The client name a session's subject stands for: a named token's `[[auth.clients]]` name
    /// for its `token:<fingerprint>`, else the subject itself (another token, or a person signed
    /// in with single sign-on). `[[auth.rules]]` and approvals know the client by this name.
    pub fn subject_client(&self, subject: &str) -> String {
        self.tokens
            .iter()
            .position(|t| fingerprint(t) == subject)
            .and_then(|i| self.names[i].clone())
            .unwrap_or_else(|| subject.to_string())
    }

    /// Whether a session subject may still be signed in: for `token:`, its token is still one
    /// of the configured ones; for a person signed in with single sign-on, single sign-on is
    /// still configured (with the same name).
    fn knows_subject(&self, subject: &str) -> bool {
        self.tokens.iter().any(|t| fingerprint(t) == subject)
            || self.sso.as_ref().is_some_and(|s| s.owns(subject))
    }
}

/// Whether `name` is `<prefix>:<something>`, an identity an issuer or single sign-on named
/// `prefix` vouches for.
fn is_identity_of(prefix: &str, name: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|rest| !rest.is_empty())
}

/// `token:` and the first 8 bytes of a token's SHA-256 in hex: names a token without giving it
/// away (in logs and session subjects).
fn fingerprint(digest: &[u8; 32]) -> String {
    format!("token:{}", hex::encode(&digest[..8]))
}

/// The canonical path a registry-facade SHA256SUMS URL is signed over.
pub fn sums_path(
    addr: &crate::address::ProviderAddr,
    version: &crate::address::Version,
    index: usize,
    signature: bool,
) -> String {
    let suffix = if signature { ".sig" } else { "" };
    format!("v1/providers/{addr}/{version}/SHA256SUMS/{index}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_read_in_their_scheme_in_any_case() {
        assert_eq!(credentials_of(b"Bearer t0k", "bearer"), Some(&b"t0k"[..]));
        assert_eq!(credentials_of(b"BASIC eDp5", "basic"), Some(&b"eDp5"[..]));
        assert_eq!(credentials_of(b"basic eDp5", "bearer"), None);
        assert_eq!(credentials_of(b"Bearert0k", "bearer"), None);
        assert_eq!(credentials_of(b"Bear", "bearer"), None);
        // Basic credentials in any case give their password.
        let header = format!(
            "BASIC {}",
            base64::engine::general_purpose::STANDARD.encode("ci:the-token")
        );
        assert_eq!(
            AuthSettings::token_request_secret(Some(header.as_bytes())),
            Ok("the-token".to_string())
        );
    }

    fn on() -> AuthSettings {
        AuthConfig {
            tokens: vec!["s3cret-token-for-tests".into()],
            url_signing_key: Some("k".repeat(40)),
            ..AuthConfig::default()
        }
        .validate()
        .unwrap()
    }

    #[test]
    fn named_clients_are_named_and_checked() {
        let config: AuthConfig = toml::from_str(
            "tokens = [\"unnamed-token-0123456789\"]\n\
             [[clients]]\nname = \"platform\"\ntoken = \"platform-token-0123456789\"\n",
        )
        .unwrap();
        let auth = config.validate().unwrap();
        let named = auth.bearer_client(Some(b"Bearer platform-token-0123456789"));
        assert_eq!(named.unwrap(), "platform");
        let unnamed = auth
            .bearer_client(Some(b"Bearer unnamed-token-0123456789"))
            .unwrap();
        assert!(unnamed.starts_with("token:"), "{unnamed}");
        assert!(
            auth.bearer_client(Some(b"Bearer nope-0123456789abcdef"))
                .is_err()
        );
        let refused = |text: &str| {
            toml::from_str::<AuthConfig>(text)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string()
        };
        assert!(
            refused("[[clients]]\nname = \"a b\"\ntoken = \"platform-token-0123456789\"")
                .contains("auth.clients[0].name")
        );
        assert!(refused("[[clients]]\nname = \"a\"").contains("auth.clients[0].token"));
        assert!(
            refused("[[clients]]\nname = \"a\"\ntoken = \"same-token-0123456789\"\n[[clients]]\nname = \"b\"\ntoken = \"same-token-0123456789\"")
                .contains("auth.clients[1].token: is another client's token too")
        );
    }

    #[test]
    fn off_by_default() {
        let a = AuthConfig::default().validate().unwrap();
        assert!(!a.enabled());
        assert_eq!(a.check_bearer(None), Ok(()));
    }

    #[test]
    fn bearer_tokens() {
        let a = on();
        assert_eq!(
            a.check_bearer(Some(b"Bearer s3cret-token-for-tests")),
            Ok(())
        );
        for bad in [
            None,
            Some(&b"Bearer wrong-token-wrong-token"[..]),
            Some(b"Basic czNjcmV0"),
            Some(b"Bearer "),
            Some(b"s3cret-token-for-tests"),
            Some(b"Bearer s3cret-token-for-test"),
        ] {
            let err = a.check_bearer(bad).unwrap_err();
            assert_eq!(err.status(), 401);
            assert!(err.challenge().is_some());
            assert!(!err.to_json().contains("s3cret"), "token never echoed");
        }
    }

    #[test]
    fn signed_urls() {
        // URLs handed to a job with an ID token of this issuer.
        let a: AuthConfig = toml::from_str(&format!(
            "url_signing_key = \"{}\"\n[[issuers]]\nname = \"github\"\n\
             issuer = \"https://token.example\"\naudiences = [\"m\"]\n\
             claims = {{ repository_owner = \"acme\" }}\n",
            "k".repeat(40)
        ))
        .unwrap();
        let a = a.validate().unwrap();
        let path = "registry.terraform.io/acme/foo/terraform-provider-foo_1.0.0_linux_amd64.zip";
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let client = "github:repo:acme/app:ref:refs/heads/main";
        let q = a.sign(path, client, now);
        assert_eq!(
            a.verify_signed(path, Some(&q), now),
            Ok(Some(client.to_string()))
        );
        assert_eq!(a.verify_signed(path, None, now), Ok(None));
        assert_eq!(a.verify_signed(path, Some("x=1"), now), Ok(None));
        // The client is signed too: another name breaks the signature.
        let other_client = q.replace("acme", "evil");
        assert!(a.verify_signed(path, Some(&other_client), now).is_err());
        let no_client = q
            .split('&')
            .filter(|p| !p.starts_with("c="))
            .collect::<Vec<_>>()
            .join("&");
        assert!(a.verify_signed(path, Some(&no_client), now).is_err());
        let later = now + a.url_ttl;
        assert_eq!(
            a.verify_signed(path, Some(&q), later).unwrap_err().status(),
            403
        );
        let other = path.replace("linux_amd64", "darwin_arm64");
        assert!(a.verify_signed(&other, Some(&q), now).is_err());
        let longer = q.replacen("exp=1700", "exp=1800", 1);
        assert!(a.verify_signed(path, Some(&longer), now).is_err());
        let (head, sig) = q.split_once("sig=").unwrap();
        let flipped = format!(
            "{head}sig={}",
            sig.replacen(&sig[..1], if &sig[..1] == "A" { "B" } else { "A" }, 1)
        );
        assert!(a.verify_signed(path, Some(&flipped), now).is_err());
        assert!(a.verify_signed(path, Some("exp=1"), now).is_err());
        assert!(a.verify_signed(path, Some("exp=x&sig=y"), now).is_err());
        let other_key = AuthConfig {
            tokens: vec!["s3cret-token-for-tests".into()],
            url_signing_key: Some("z".repeat(40)),
            ..AuthConfig::default()
        }
        .validate()
        .unwrap();
        assert!(other_key.verify_signed(path, Some(&q), now).is_err());
    }

    #[test]
    fn a_signed_url_is_refused_once_its_client_is_gone_or_when_it_names_none() {
        let config = |clients: &str, issuers: &str| {
            toml::from_str::<AuthConfig>(&format!(
                "url_signing_key = \"{}\"\ntokens = [\"unnamed-token-0123456789\"]\n{clients}{issuers}",
                "k".repeat(40)
            ))
            .unwrap()
            .validate()
            .unwrap()
        };
        let ci = "[[clients]]\nname = \"ci\"\ntoken = \"ci-token-0123456789\"\n";
        let github = "[[issuers]]\nname = \"github\"\nissuer = \"https://token.example\"\n\
                      audiences = [\"m\"]\nclaims = { repository_owner = \"acme\" }\n";
        let before = config(ci, github);
        let path = "registry.terraform.io/acme/foo/terraform-provider-foo_1.0.0_linux_amd64.zip";
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let unnamed = before
            .bearer_client(Some(b"Bearer unnamed-token-0123456789"))
            .unwrap();
        let job = "github:repo:acme/app:ref:refs/heads/main";
        for client in ["ci", unnamed.as_str(), job] {
            let q = before.sign(path, client, now);
            assert_eq!(
                before.verify_signed(path, Some(&q), now),
                Ok(Some(client.to_string()))
            );
        }
        // The client `ci` is removed, and so is the issuer: their URLs die with them.
        let after = config("", "");
        for client in ["ci", job] {
            let q = before.sign(path, client, now);
            let refused = after.verify_signed(path, Some(&q), now).unwrap_err();
            assert_eq!(refused.status(), 403);
            assert!(
                refused.to_json().contains("no longer accepts"),
                "{refused:?}"
            );
        }
        let q = before.sign(path, &unnamed, now);
        assert!(
            after.verify_signed(path, Some(&q), now).is_ok(),
            "still configured"
        );
        // A name that merely starts like a client's, or an issuer's name alone, is no client.
        for client in ["cix", "github", "github:", "token:00"] {
            let q = before.sign(path, client, now);
            assert!(
                before.verify_signed(path, Some(&q), now).is_err(),
                "{client}"
            );
        }
        // A URL signed as URLs were before they named their client.
        let expires = 1_700_000_000 + 600;
        let old = format!(
            "exp={expires}&sig={}",
            before.mac_of("archive", &format!("{path}\n{expires}"))
        );
        let refused = before.verify_signed(path, Some(&old), now).unwrap_err();
        assert_eq!(refused.status(), 403);
        assert!(refused.to_json().contains("names no client"), "{refused:?}");
    }

    #[test]
    fn issuers_and_sign_on_have_names_of_their_own_and_claim_rules() {
        let err = |text: &str| {
            toml::from_str::<AuthConfig>(text)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string()
        };
        let issuer = |name: &str, claims: &str| {
            format!(
                "[[issuers]]\nname = \"{name}\"\nissuer = \"https://{name}.example\"\n\
                 audiences = [\"m\"]\n{claims}\n"
            )
        };
        let owner = "claims = { repository_owner = \"acme\" }";
        let sso = |name: &str, claims: &str| {
            format!(
                "[single_sign_on]\nname = \"{name}\"\nissuer = \"https://login.example\"\n\
                 client_id = \"p\"\n{claims}\n"
            )
        };
        let email = "claims = { email = \"*@acme.example\" }";
        // No claim rule: anyone the issuer vouches for would get in.
        let open = err(&issuer("github", ""));
        assert!(
            open.starts_with("config key auth.issuers[0].claims:")
                && open.contains("auth.issuers[0].allow_any_subject = true"),
            "{open}"
        );
        let open = err(&sso("sso", ""));
        assert!(
            open.starts_with("config key auth.single_sign_on.claims:"),
            "{open}"
        );
        // Unless the operator says so; and not both.
        let any = "allow_any_subject = true";
        for text in [issuer("github", any), sso("sso", any)] {
            toml::from_str::<AuthConfig>(&text)
                .unwrap()
                .validate()
                .unwrap();
        }
        assert!(
            err(&issuer("github", &format!("{owner}\n{any}")))
                .contains("auth.issuers[0].allow_any_subject")
        );
        // `token:<sub>` would be the name of one of the mirror's tokens.
        assert!(err(&issuer("token", owner)).starts_with("config key auth.issuers[0].name:"),);
        assert!(err(&sso("token", email)).starts_with("config key auth.single_sign_on.name:"));
        // Two issuers, or an issuer and single sign-on, may not share a name.
        let twice = err(&format!("{}{}", issuer("ci", owner), issuer("ci", owner)));
        assert!(
            twice.starts_with("config key auth.issuers[1].name:") && twice.contains("issuers[0]"),
            "{twice}"
        );
        let shared = err(&format!("{}{}", issuer("sso", owner), sso("sso", email)));
        assert!(
            shared.starts_with("config key auth.single_sign_on.name:"),
            "{shared}"
        );
        // Named clients may not take the names the mirror gives itself.
        for name in ["anonymous", "-"] {
            let taken = err(&format!(
                "[[clients]]\nname = \"{name}\"\ntoken = \"platform-token-0123456789\"\n"
            ));
            assert!(
                taken.starts_with("config key auth.clients[0].name:"),
                "{taken}"
            );
        }
    }

    #[test]
    fn configuration_errors_name_the_key() {
        let err = |c: AuthConfig| c.validate().unwrap_err().to_string();
        assert!(
            err(AuthConfig {
                tokens: vec!["short".into()],
                ..AuthConfig::default()
            })
            .contains("auth.tokens[0]")
        );
        assert!(
            err(AuthConfig {
                tokens: vec!["s3cret-token-for-tests".into()],
                url_signing_key: Some("short".into()),
                ..AuthConfig::default()
            })
            .contains("auth.url_signing_key")
        );
        assert!(
            err(AuthConfig {
                token_file: Some("/nonexistent/tokens".into()),
                ..AuthConfig::default()
            })
            .contains("auth.token_file")
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(
            &file,
            "# clients\n\nfirst-token-0123456789\nbad token with spaces\n",
        )
        .unwrap();
        let msg = err(AuthConfig {
            token_file: Some(file.clone()),
            ..AuthConfig::default()
        });
        assert!(
            msg.contains("auth.token_file") && msg.contains("line 4"),
            "{msg}"
        );
        std::fs::write(&file, "# clients\nfirst-token-0123456789\n").unwrap();
        let a = AuthConfig {
            token_file: Some(file),
            ..AuthConfig::default()
        }
        .validate()
        .unwrap();
        assert!(a.key_generated);
        assert_eq!(
            a.check_bearer(Some(b"Bearer first-token-0123456789")),
            Ok(())
        );
        assert!(!format!("{a:?}").contains("first-token"));
    }
}
