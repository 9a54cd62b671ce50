//! Clients that present an OpenID Connect ID token from a configured issuer (`[[auth.issuers]]`)
//! instead of one of the mirror's tokens: the issuers' settings, and their key sets kept in
//! memory.
//!
//! An issuer's keys are fetched on the first token it issued, then again when a token names a
//! key ID the set lacks (a key rotation), and when they are older than [`KEYS_TTL`]; never more
//! often than once per `refetch_interval` ([`MIN_REFETCH`] unless configured) per issuer,
//! however many tokens arrive, so unknown key
//! IDs cannot make the mirror hammer an issuer. When a fetch fails, the keys already held stay
//! in use: an issuer outage does not lock out clients whose keys are cached. Fetching is the
//! caller's (see [`Issuers::verify`]): the server fetches through the origins' client, with its
//! address policy and proxy.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::jwt::{self, ClaimPath, ClaimRule, Identity, IssuerRules, JwtError, KeySet};
use super::{AuthConfigError, Patterns};

/// How long a key set is used before it is fetched again (a failed fetch keeps it).
pub const KEYS_TTL: Duration = Duration::from_secs(3600);

/// The least time between two fetches of one issuer's keys, unless `refetch_interval` says
/// otherwise.
pub const MIN_REFETCH: Duration = Duration::from_secs(30);

/// One `[[auth.issuers]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// A short name, the first part of the identities it vouches for (`github`).
    pub name: String,
    /// Its URL, as its tokens' `iss` claim has it.
    pub issuer: String,
    /// Accepted audiences (`aud`); at least one.
    pub audiences: Vec<String>,
    /// Claim rules: a claim's name (or a JSON pointer, `/kubernetes.io/namespace`) and the
    /// pattern, or list of patterns, its value must match.
    #[serde(default)]
    pub claims: BTreeMap<String, Patterns>,
    /// The claim that names the identity.
    #[serde(default = "default_name_claim")]
    pub name_claim: String,
    /// The least time between two fetches of its keys (a token naming an unknown key ID
    /// causes one at most this often).
    #[serde(default = "default_refetch", with = "humantime_serde")]
    pub refetch_interval: Duration,
}

fn default_refetch() -> Duration {
    MIN_REFETCH
}

fn default_name_claim() -> String {
    "sub".into()
}

impl IssuerConfig {
    /// Checks one entry (`auth.issuers[i]`).
    pub fn validate(&self, i: usize) -> Result<IssuerRules, AuthConfigError> {
        self.validate_at(&format!("auth.issuers[{i}]"))
    }

    /// Checks an entry written at `at` (its keys are named `<at>.<field>`).
    pub fn validate_at(&self, at: &str) -> Result<IssuerRules, AuthConfigError> {
        let key = |field: &str| format!("{at}.{field}");
        let invalid = |field: &str, message: String| AuthConfigError {
            key: key(field),
            message,
        };
        if self.name.is_empty()
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(invalid("name", "must be letters, digits, - and _".into()));
        }
        let issuer = url::Url::parse(&self.issuer)
            .ok()
            .filter(|u| u.scheme() == "https" && u.host_str().is_some())
            .ok_or_else(|| invalid("issuer", "must be an https URL".into()))?;
        if self.audiences.is_empty() || self.audiences.iter().any(String::is_empty) {
            return Err(invalid(
                "audiences",
                "must name at least one audience".into(),
            ));
        }
        let mut claims = Vec::new();
        for (claim, patterns) in &self.claims {
            let patterns = patterns.to_vec();
            if patterns.is_empty() {
                return Err(invalid(
                    &format!("claims.{claim}"),
                    "needs at least one pattern".into(),
                ));
            }
            claims.push(
                ClaimRule::new(claim, &patterns)
                    .map_err(|e| invalid(&format!("claims.{claim}"), e))?,
            );
        }
        if self.refetch_interval < Duration::from_secs(1) {
            return Err(invalid("refetch_interval", "must be at least 1s".into()));
        }
        Ok(IssuerRules {
            name: self.name.clone(),
            issuer: issuer.as_str().trim_end_matches('/').to_string(),
            audiences: self.audiences.clone(),
            claims,
            name_claim: ClaimPath::new(&self.name_claim),
            refetch_interval: self.refetch_interval,
        })
    }
}

/// Why an ID token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefused {
    #[error("the token's issuer is not one this mirror accepts")]
    UnknownIssuer,
    #[error("{0}")]
    Invalid(#[from] JwtError),
    #[error("the keys of issuer {issuer} cannot be fetched: {error}")]
    NoKeys { issuer: String, error: String },
}

/// The configured issuers and their keys.
pub struct Issuers {
    issuers: Vec<Held>,
}

struct Held {
    rules: IssuerRules,
    url: url::Url,
    keys: tokio::sync::Mutex<Keys>,
}

#[derive(Default)]
struct Keys {
    set: Option<(KeySet, Instant)>,
    last_attempt: Option<Instant>,
    last_error: Option<String>,
}

impl Issuers {
    pub fn new(rules: &[IssuerRules]) -> Issuers {
        Issuers {
            issuers: rules
                .iter()
                .filter_map(|r| {
                    Some(Held {
                        url: url::Url::parse(&r.issuer).ok()?,
                        rules: r.clone(),
                        keys: Default::default(),
                    })
                })
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.issuers.is_empty()
    }

    /// Verifies an ID token at `now` (Unix seconds), fetching its issuer's key set with
    /// `fetch` when it must (see the module's header).
    pub async fn verify<F, Fut>(
        &self,
        token: &str,
        now: u64,
        fetch: F,
    ) -> Result<Identity, TokenRefused>
    where
        F: FnOnce(url::Url) -> Fut,
        Fut: Future<Output = Result<bytes::Bytes, String>>,
    {
        let claimed = jwt::peek(token)?;
        let held = self
            .issuers
            .iter()
            .find(|h| h.rules.issuer == claimed.issuer.trim_end_matches('/'))
            .ok_or(TokenRefused::UnknownIssuer)?;
        let mut keys = held.keys.lock().await;
        let stale = match &keys.set {
            None => true,
            Some((set, fetched)) => {
                fetched.elapsed() > KEYS_TTL
                    || claimed.kid.as_deref().is_some_and(|kid| !set.has(kid))
            }
        };
        let may_fetch = keys
            .last_attempt
            .is_none_or(|at| at.elapsed() >= held.rules.refetch_interval);
        if stale && may_fetch {
            keys.last_attempt = Some(Instant::now());
            let fetched = fetch(held.url.clone())
                .await
                .and_then(|body| KeySet::from_jwks(&body));
            match fetched {
                Ok(set) if !set.is_empty() => {
                    keys.set = Some((set, Instant::now()));
                    keys.last_error = None;
                }
                Ok(_) => keys.last_error = Some("its key set has no usable key".into()),
                Err(e) => {
                    tracing::warn!(issuer = %held.url, "cannot fetch the issuer's keys: {e}");
                    keys.last_error = Some(e);
                }
            }
        }
        let Some((set, _)) = &keys.set else {
            return Err(TokenRefused::NoKeys {
                issuer: held.rules.issuer.clone(),
                error: keys.last_error.clone().unwrap_or_default(),
            });
        };
        Ok(jwt::verify(token, &held.rules, set, now)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const ISSUER: &str = "https://gitlab.example.com";

    fn issuers() -> Issuers {
        let config: IssuerConfig = toml::from_str(&format!(
            "name = \"gitlab\"\nissuer = \"{ISSUER}\"\naudiences = [\"mirror\"]\n\
             claims = {{ namespace_path = \"acme/*\" }}\n"
        ))
        .unwrap();
        Issuers::new(&[config.validate(0).unwrap()])
    }

    #[test]
    fn entries_are_checked_naming_the_key() {
        let bad = |text: &str| {
            let config: IssuerConfig = toml::from_str(text).unwrap();
            config.validate(2).unwrap_err().to_string()
        };
        assert!(
            bad("name = \"x\"\nissuer = \"http://a.example\"\naudiences = [\"m\"]")
                .starts_with("config key auth.issuers[2].issuer:")
        );
        assert!(
            bad("name = \"x\"\nissuer = \"https://a.example\"\naudiences = []")
                .contains("auth.issuers[2].audiences")
        );
        assert!(
            bad("name = \"x y\"\nissuer = \"https://a.example\"\naudiences = [\"m\"]")
                .contains("auth.issuers[2].name")
        );
        assert!(
            bad("name = \"x\"\nissuer = \"https://a.example\"\naudiences = [\"m\"]\nclaims = { ref = [] }")
                .contains("auth.issuers[2].claims.ref")
        );
    }

    #[tokio::test]
    async fn keys_are_fetched_once_kept_through_outages_and_refetched_at_most_every_interval() {
        let issuers = issuers();
        let fetches = AtomicUsize::new(0);
        let failing = |_url: url::Url| {
            fetches.fetch_add(1, Ordering::SeqCst);
            async { Err::<bytes::Bytes, _>("connection refused".to_string()) }
        };
        // A token for an unknown issuer never causes a fetch.
        let other = "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJodHRwczovL290aGVyLmV4YW1wbGUifQ.c2ln";
        assert_eq!(
            issuers.verify(other, 0, failing).await,
            Err(TokenRefused::UnknownIssuer)
        );
        assert_eq!(fetches.load(Ordering::SeqCst), 0);
        // The issuer is down and no keys are held: refused, and asked again only after
        // MIN_REFETCH, however many tokens come.
        let token = "eyJhbGciOiJFUzI1NiIsImtpZCI6ImsxIn0.eyJpc3MiOiJodHRwczovL2dpdGxhYi5leGFtcGxlLmNvbSJ9.c2ln";
        for _ in 0..5 {
            let refused = issuers.verify(token, 0, failing).await.unwrap_err();
            assert!(
                matches!(refused, TokenRefused::NoKeys { .. }),
                "{refused:?}"
            );
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
    }
}
