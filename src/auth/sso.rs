//! Single sign-on for people (`[auth.single_sign_on]`): the pages sign people in with an
//! OpenID Connect provider, by the authorization code flow with PKCE.
//!
//! 1. `-/sign-in/sso` makes a random `state`, `nonce` and PKCE verifier, keeps them in a
//!    short-lived cookie sealed with the URL signing key ([`Pending`]), and sends the browser to
//!    the provider's authorization endpoint with the verifier's S256 challenge.
//! 2. The provider sends the browser back to `-/sign-in/callback` with a code and the state.
//!    The state must equal the cookie's; the code is traded for an ID token at the provider's
//!    token endpoint (with the verifier, and the client secret when one is configured), through
//!    the origins' client and its address policy.
//! 3. The ID token is checked as any ID token (`auth::jwt`: signature by the provider's keys,
//!    issuer, audience = the client ID, times, the claim rules) and its `nonce` must be the
//!    cookie's. The person then gets a session (`auth::session`) whose subject is
//!    `<name>:<name claim>`, e.g. `sso:alice@example.com`. Where the claim rules or the name
//!    claim use `email`, the token's `email_verified` must be `true`.
//!
//! Anyone may start a sign-in, so [`SignIns`] keeps anonymous visitors from making this server
//! hammer the provider: starts and callbacks are rate-limited (for everyone together and per
//! client address), and a pending sign-in comes back once: its callback reaches the token
//! endpoint only the first time, so a replayed cookie and state trade nothing. The provider's
//! endpoints are fetched once and kept (see `auth::oidc::Kept`), not once per start.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::jwt::IssuerRules;
use super::oidc::{IssuerConfig, MIN_REFETCH};
use super::{AuthConfigError, AuthSettings, Patterns, ct_eq, digest};

/// The cookie that carries a sign-in in progress.
pub const COOKIE: &str = "provender_sso";

/// How long a person has to finish signing in at the provider.
pub const PENDING_TTL: Duration = Duration::from_secs(600);

/// How long the provider's endpoints (its discovery document) are used before they are fetched
/// again; a failed fetch keeps them.
pub const ENDPOINTS_TTL: Duration = Duration::from_secs(3600);

/// `[auth.single_sign_on]` as written.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SsoConfig {
    /// The first part of the names of people signed in this way (`sso:alice@example.com`).
    #[serde(default = "default_name")]
    pub name: String,
    /// The provider's issuer URL, as its ID tokens' `iss` has it.
    pub issuer: String,
    /// This mirror's client ID at the provider (the ID tokens' audience).
    pub client_id: String,
    /// The client secret, when the provider gave this mirror one (else PKCE alone).
    #[serde(default)]
    pub client_secret: Option<String>,
    /// A file holding the client secret, instead of `client_secret`.
    #[serde(default)]
    #[schemars(extend("format" = "path"))]
    pub client_secret_file: Option<PathBuf>,
    /// Scopes asked for; `openid` is always among them.
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// Claim rules, as for `[[auth.issuers]]`: who may sign in.
    #[serde(default)]
    pub claims: BTreeMap<String, Patterns>,
    /// Accept everyone the provider signs in, without claim rules (as for `[[auth.issuers]]`).
    #[serde(default)]
    pub allow_any_subject: bool,
    /// The claim that names a person.
    #[serde(default = "default_name_claim")]
    pub name_claim: String,
    /// The sign-in button's words.
    #[serde(default = "default_label")]
    pub label: String,
}

fn default_name() -> String {
    "sso".into()
}

fn default_scopes() -> Vec<String> {
    vec!["openid".into(), "email".into(), "profile".into()]
}

fn default_name_claim() -> String {
    "email".into()
}

fn default_label() -> String {
    "Sign in with single sign-on".into()
}

/// `[auth.single_sign_on]`, checked.
#[derive(Clone)]
pub struct SsoSettings {
    /// What the ID tokens must satisfy (the audience is the client ID).
    pub rules: IssuerRules,
    pub client_id: String,
    client_secret: Option<String>,
    pub scopes: Vec<String>,
    pub label: String,
}

impl std::fmt::Debug for SsoSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SsoSettings")
            .field("issuer", &self.rules.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[redacted]"),
            )
            .field("scopes", &self.scopes)
            .finish()
    }
}

impl SsoConfig {
    pub fn validate(&self) -> Result<SsoSettings, AuthConfigError> {
        const AT: &str = "auth.single_sign_on";
        let invalid = |field: &str, message: &str| AuthConfigError {
            key: format!("{AT}.{field}"),
            message: message.into(),
        };
        if self.client_id.is_empty() {
            return Err(invalid("client_id", "must not be empty"));
        }
        let client_secret = match (&self.client_secret, &self.client_secret_file) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "client_secret_file",
                    "set either client_secret or client_secret_file, not both",
                ));
            }
            (Some(s), None) => Some(s.trim().to_string()),
            (None, Some(path)) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| AuthConfigError {
                        key: format!("{AT}.client_secret_file"),
                        message: format!("cannot read {}: {e}", path.display()),
                    })?
                    .trim()
                    .to_string(),
            ),
            (None, None) => None,
        };
        let mut scopes = self.scopes.clone();
        if !scopes.iter().any(|s| s == "openid") {
            scopes.insert(0, "openid".into());
        }
        if scopes.iter().any(|s| s.is_empty() || s.contains(' ')) {
            return Err(invalid("scopes", "a scope is one word"));
        }
        let rules = IssuerConfig {
            name: self.name.clone(),
            issuer: self.issuer.clone(),
            audiences: vec![self.client_id.clone()],
            claims: self.claims.clone(),
            allow_any_subject: self.allow_any_subject,
            name_claim: self.name_claim.clone(),
            refetch_interval: MIN_REFETCH,
        }
        .validate_at(AT)?;
        Ok(SsoSettings {
            rules,
            client_id: self.client_id.clone(),
            client_secret,
            scopes,
            label: self.label.clone(),
        })
    }
}

impl SsoSettings {
    /// The issuer's URL.
    pub fn issuer(&self) -> url::Url {
        url::Url::parse(&self.rules.issuer).expect("checked when configured")
    }

    /// Whether a session subject is a person signed in this way.
    pub fn owns(&self, subject: &str) -> bool {
        super::is_identity_of(&self.rules.name, subject)
    }

    /// Where to send the browser to sign in.
    pub fn authorization_url(
        &self,
        endpoint: &url::Url,
        redirect_uri: &str,
        pending: &Pending,
    ) -> url::Url {
        let mut url = endpoint.clone();
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", &self.scopes.join(" "))
            .append_pair("state", &pending.state)
            .append_pair("nonce", &pending.nonce)
            .append_pair("code_challenge", &pending.challenge())
            .append_pair("code_challenge_method", "S256");
        url
    }

    /// The form that trades `code` for tokens.
    pub fn token_form<'a>(
        &'a self,
        code: &'a str,
        redirect_uri: &'a str,
        pending: &'a Pending,
    ) -> Vec<(&'a str, &'a str)> {
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("client_id", self.client_id.as_str()),
            ("code_verifier", pending.verifier.as_str()),
        ];
        if let Some(secret) = &self.client_secret {
            form.push(("client_secret", secret));
        }
        form
    }
}

/// A sign-in in progress, kept in the browser in a sealed cookie.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub state: String,
    pub nonce: String,
    /// The PKCE code verifier (43 characters).
    pub verifier: String,
    /// Where to go once signed in.
    pub next: String,
    /// Unix seconds after which it is void.
    pub expires: u64,
}

fn random() -> Option<String> {
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).ok()?;
    Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

impl Pending {
    /// A new sign-in that returns to `next`; `None` if the system random source failed.
    pub fn new(next: String, now: u64) -> Option<Pending> {
        Some(Pending {
            state: random()?,
            nonce: random()?,
            verifier: random()?,
            next,
            expires: now + PENDING_TTL.as_secs(),
        })
    }

    /// The PKCE S256 challenge: base64url(SHA-256(verifier)).
    pub fn challenge(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(Sha256::digest(self.verifier.as_bytes()))
    }

    /// Whether `state` is this sign-in's (compared in constant time).
    pub fn state_is(&self, state: &str) -> bool {
        ct_eq(&digest(self.state.as_bytes()), &digest(state.as_bytes()))
    }

    /// Whether an ID token's `nonce` is this sign-in's (compared in constant time).
    pub fn nonce_is(&self, nonce: &str) -> bool {
        ct_eq(&digest(self.nonce.as_bytes()), &digest(nonce.as_bytes()))
    }
}

/// Sign-in steps (starts and callbacks together) every client address may take at once, and
/// how often it gets one more. A person's sign-in takes two.
pub const PER_ADDRESS_BURST: u32 = 20;
pub const PER_ADDRESS_EVERY: Duration = Duration::from_secs(3);

/// Sign-in steps all clients together may take at once, and how many more each second.
pub const EVERYONE_BURST: u32 = 100;
pub const EVERYONE_PER_SECOND: u32 = 10;

/// Client addresses remembered before the ones back at a full allowance are forgotten.
const ADDRESSES_KEPT: usize = 10_000;

/// The most returned sign-ins remembered (each for [`PENDING_TTL`], longer than it can live).
const MAX_RETURNED: u64 = 100_000;

/// A sign-in step refused for its rate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("too many sign-ins {from}; try again in {}s", retry_after.as_secs().max(1))]
pub struct TooManySignIns {
    /// `from this address` or `at once`.
    pub from: &'static str,
    /// When one more step is allowed.
    pub retry_after: Duration,
}

/// Sign-ins as this server sees them: how fast they may start and come back (for everyone, and
/// per client address: an IPv4 address, or an IPv6 address's /64, which one subscriber holds
/// whole), and which have come back already.
pub struct SignIns {
    everyone: governor::DefaultDirectRateLimiter,
    per_address: governor::DefaultKeyedRateLimiter<IpAddr>,
    /// Digests of the states of sign-ins that came back, until they could have expired.
    returned: moka::sync::Cache<[u8; 32], ()>,
}

impl Default for SignIns {
    fn default() -> Self {
        let per_address = governor::Quota::with_period(PER_ADDRESS_EVERY)
            .expect("a period above zero")
            .allow_burst(NonZeroU32::new(PER_ADDRESS_BURST).expect("above zero"));
        let everyone =
            governor::Quota::per_second(NonZeroU32::new(EVERYONE_PER_SECOND).expect("above zero"))
                .allow_burst(NonZeroU32::new(EVERYONE_BURST).expect("above zero"));
        SignIns {
            everyone: governor::RateLimiter::direct(everyone),
            per_address: governor::RateLimiter::keyed(per_address),
            returned: moka::sync::Cache::builder()
                .max_capacity(MAX_RETURNED)
                .time_to_live(PENDING_TTL)
                .build(),
        }
    }
}

impl SignIns {
    /// Takes a turn for one sign-in step (a start or a callback) from `peer`: its address's
    /// allowance first, so one busy address cannot use up everyone's, then everyone's.
    pub fn admit(&self, peer: IpAddr) -> Result<(), TooManySignIns> {
        use governor::clock::Clock as _;
        if self.per_address.len() > ADDRESSES_KEPT {
            self.per_address.retain_recent();
            self.per_address.shrink_to_fit();
        }
        self.per_address
            .check_key(&address_of(peer))
            .map_err(|not_until| TooManySignIns {
                from: "from this address",
                retry_after: not_until.wait_time_from(self.per_address.clock().now()),
            })?;
        self.everyone.check().map_err(|not_until| TooManySignIns {
            from: "at once",
            retry_after: not_until.wait_time_from(self.everyone.clock().now()),
        })
    }

    /// Whether `pending` comes back for the first time; every later return is refused, so a
    /// sign-in's code is traded once whatever is replayed.
    pub fn first_return(&self, pending: &Pending) -> bool {
        self.returned
            .entry(digest(pending.state.as_bytes()))
            .or_insert(())
            .is_fresh()
    }
}

/// The address a client's allowance belongs to: an IPv4 address (also when mapped into IPv6),
/// or the /64 of an IPv6 one.
fn address_of(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !(u128::from(u64::MAX))).into()),
        },
        v4 => v4,
    }
}

impl AuthSettings {
    /// The cookie value carrying `pending`: its JSON, base64url, and a MAC with the URL
    /// signing key.
    pub fn seal_pending(&self, pending: &Pending) -> String {
        self.seal("sso", pending)
    }

    /// The sign-in a cookie value carries, if genuine and not expired.
    pub fn unseal_pending(&self, cookie: &str, now: u64) -> Option<Pending> {
        if cookie.len() > 2048 {
            return None;
        }
        let pending: Pending = self.unseal("sso", cookie).ok()?;
        (now < pending.expires).then_some(pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::AuthConfig;

    fn settings() -> AuthSettings {
        let config: AuthConfig = toml::from_str(&format!(
            "url_signing_key = \"{}\"\n[single_sign_on]\nissuer = \"https://login.example.com\"\nclient_id = \"provender\"\nclient_secret = \"s3cret\"\nclaims = {{ email = \"*@example.com\" }}\n",
            "k".repeat(40)
        ))
        .unwrap();
        config.validate().unwrap()
    }

    #[test]
    fn the_authorization_url_carries_an_s256_challenge_of_the_verifier() {
        let auth = settings();
        assert!(
            auth.pages_need_sign_in(),
            "single sign-on protects the pages"
        );
        assert!(!auth.enabled(), "but alone leaves the protocols open");
        let sso = auth.sso.as_ref().unwrap();
        let pending = Pending::new("/-/providers".into(), 1_000).unwrap();
        assert_eq!(pending.verifier.len(), 43);
        let endpoint = url::Url::parse("https://login.example.com/authorize").unwrap();
        let url = sso.authorization_url(&endpoint, "https://m/-/sign-in/callback", &pending);
        let query: BTreeMap<String, String> = url.query_pairs().into_owned().collect();
        assert_eq!(query["code_challenge_method"], "S256");
        assert_eq!(query["scope"], "openid email profile");
        assert_eq!(query["state"], pending.state);
        assert_ne!(query["code_challenge"], pending.verifier);
        // RFC 7636's example.
        let known = Pending {
            verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".into(),
            ..pending.clone()
        };
        assert_eq!(
            known.challenge(),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let form = sso.token_form("the-code", "https://m/-/sign-in/callback", &pending);
        assert!(form.contains(&("code_verifier", pending.verifier.as_str())));
        assert!(form.contains(&("client_secret", "s3cret")));
        assert!(!format!("{sso:?}").contains("s3cret"));
        assert!(sso.owns("sso:alice@example.com"));
        assert!(!sso.owns("sso:") && !sso.owns("token:00") && !sso.owns("ssox:a"));
    }

    #[test]
    fn pending_sign_ins_are_sealed() {
        let auth = settings();
        let pending = Pending::new("/-/status".into(), 1_000).unwrap();
        let cookie = auth.seal_pending(&pending);
        assert_eq!(auth.unseal_pending(&cookie, 1_001), Some(pending.clone()));
        assert!(pending.state_is(&pending.state) && !pending.state_is("other"));
        assert_eq!(
            auth.unseal_pending(&cookie, 1_000 + PENDING_TTL.as_secs()),
            None
        );
        let (claims, mac) = cookie.split_once('.').unwrap();
        let mut forged = pending.clone();
        forged.next = "https://evil.example/".into();
        let forged_claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&forged).unwrap());
        assert_eq!(
            auth.unseal_pending(&format!("{forged_claims}.{mac}"), 1_001),
            None
        );
        assert_eq!(
            auth.unseal_pending(&format!("{claims}.x{mac}"), 1_001),
            None
        );
    }

    #[test]
    fn sign_ins_are_bounded_per_address_and_come_back_once() {
        let sign_ins = SignIns::default();
        let one: IpAddr = "192.0.2.7".parse().unwrap();
        for _ in 0..PER_ADDRESS_BURST {
            sign_ins.admit(one).unwrap();
        }
        let refused = sign_ins.admit(one).unwrap_err();
        assert_eq!(refused.from, "from this address");
        assert!(
            refused.retry_after > Duration::ZERO && refused.retry_after <= PER_ADDRESS_EVERY,
            "{refused:?}"
        );
        assert!(
            refused
                .to_string()
                .starts_with("too many sign-ins from this address")
        );
        assert!(sign_ins.admit("192.0.2.8".parse().unwrap()).is_ok());
        // The same address mapped into IPv6 is the same client; so is one IPv6 /64.
        assert!(sign_ins.admit("::ffff:192.0.2.7".parse().unwrap()).is_err());
        for _ in 0..PER_ADDRESS_BURST {
            sign_ins.admit("2001:db8:1:2::1".parse().unwrap()).unwrap();
        }
        assert!(
            sign_ins
                .admit("2001:db8:1:2:ffff::9".parse().unwrap())
                .is_err()
        );
        assert!(sign_ins.admit("2001:db8:1:3::1".parse().unwrap()).is_ok());
        // Everyone together: many addresses use up the shared allowance.
        let everyone = SignIns::default();
        let refused = (0..=EVERYONE_BURST)
            .map(|i| everyone.admit(IpAddr::from([10, 0, (i / 256) as u8, (i % 256) as u8])))
            .find_map(Result::err)
            .expect("the shared allowance runs out");
        assert_eq!(refused.from, "at once");

        let pending = Pending::new("/".into(), 1_000).unwrap();
        assert!(sign_ins.first_return(&pending));
        assert!(
            !sign_ins.first_return(&pending),
            "a sign-in comes back once"
        );
        assert!(sign_ins.first_return(&Pending::new("/".into(), 1_000).unwrap()));
    }

    #[test]
    fn bad_settings_name_their_key() {
        let err = |extra: &str| {
            toml::from_str::<AuthConfig>(&format!(
                "[single_sign_on]\nissuer = \"https://login.example.com\"\nclient_id = \"p\"\n{extra}"
            ))
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string()
        };
        assert!(err("name = \"token\"").contains("auth.single_sign_on.name"));
        assert!(
            err("client_secret = \"a\"\nclient_secret_file = \"/x\"")
                .contains("client_secret_file")
        );
        assert!(err("claims = { email = \"[\" }").contains("auth.single_sign_on.claims.email"));
        let plain = toml::from_str::<AuthConfig>(
            "[single_sign_on]\nissuer = \"http://login.example.com\"\nclient_id = \"p\"",
        )
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
        assert!(plain.contains("auth.single_sign_on.issuer"), "{plain}");
    }
}
