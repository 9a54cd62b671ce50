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
//!
//! [`Kept`] is that way of holding what an issuer publishes, for whatever it is: the key sets
//! here, and single sign-on's provider endpoints (its discovery document) in the server.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::jwt::{self, ClaimPath, ClaimRule, Identity, IssuerRules, JwtError, KeySet};
use super::{AuthConfigError, Patterns};

/// How long a key set is used before it is fetched again (a failed fetch keeps it).
pub const KEYS_TTL: Duration = Duration::from_secs(3600);

/// The least time between two fetches of one issuer's keys, unless `refetch_interval` says
/// otherwise.
pub const MIN_REFETCH: Duration = Duration::from_secs(30);

/// Something an issuer publishes, held in memory: fetched on first use, again once the caller
/// finds it stale, never more often than once per interval however many callers ask, and kept
/// through failed fetches (an outage). Callers wait for one fetch at a time.
pub struct Kept<T, E> {
    state: tokio::sync::Mutex<KeptState<T, E>>,
}

struct KeptState<T, E> {
    held: Option<Held<T, E>>,
    last_attempt: Option<Instant>,
}

/// What the last fetch left.
enum Held<T, E> {
    /// A value and when it was fetched.
    Value(Arc<T>, Instant),
    /// No value was ever fetched; why the last attempt failed.
    Failed(E),
}

impl<T, E: Clone> Held<T, E> {
    fn answer(&self) -> Result<Arc<T>, E> {
        match self {
            Held::Value(value, _) => Ok(value.clone()),
            Held::Failed(e) => Err(e.clone()),
        }
    }
}

impl<T, E> Default for Kept<T, E> {
    fn default() -> Self {
        Kept {
            state: tokio::sync::Mutex::new(KeptState {
                held: None,
                last_attempt: None,
            }),
        }
    }
}

impl<T, E: Clone> Kept<T, E> {
    /// The value held, fetched with `fetch` first when none is held, or when `stale` (given the
    /// value and its age) says so and the last attempt is at least `interval` old. A failed
    /// fetch keeps the value held; with none, its error is the answer until the next attempt.
    pub async fn get<F, Fut>(
        &self,
        interval: Duration,
        stale: impl FnOnce(&T, Duration) -> bool,
        fetch: F,
    ) -> Result<Arc<T>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut state = self.state.lock().await;
        let may_fetch = state.last_attempt.is_none_or(|at| at.elapsed() >= interval);
        let due = match &state.held {
            None => true,
            Some(Held::Value(value, at)) => may_fetch && stale(value, at.elapsed()),
            Some(Held::Failed(_)) => may_fetch,
        };
        if !due {
            if let Some(held) = &state.held {
                return held.answer();
            }
        }
        state.last_attempt = Some(Instant::now());
        let held = match (fetch().await, state.held.take()) {
            (Ok(value), _) => Held::Value(Arc::new(value), Instant::now()),
            (Err(_), Some(Held::Value(value, at))) => Held::Value(value, at),
            (Err(e), _) => Held::Failed(e),
        };
        let answer = held.answer();
        state.held = Some(held);
        answer
    }
}

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
    issuers: Vec<Issuer>,
}

struct Issuer {
    rules: IssuerRules,
    url: url::Url,
    keys: Kept<KeySet, String>,
}

impl Issuers {
    pub fn new(rules: &[IssuerRules]) -> Issuers {
        Issuers {
            issuers: rules
                .iter()
                .filter_map(|r| {
                    Some(Issuer {
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
        let known = self
            .issuers
            .iter()
            .find(|h| h.rules.issuer == claimed.issuer.trim_end_matches('/'))
            .ok_or(TokenRefused::UnknownIssuer)?;
        let set = known
            .keys
            .get(
                known.rules.refetch_interval,
                |set, age| {
                    age > KEYS_TTL || claimed.kid.as_deref().is_some_and(|kid| !set.has(kid))
                },
                || async {
                    let set = fetch(known.url.clone())
                        .await
                        .and_then(|body| KeySet::from_jwks(&body))
                        .and_then(|set| match set.is_empty() {
                            true => Err("its key set has no usable key".to_string()),
                            false => Ok(set),
                        });
                    if let Err(e) = &set {
                        tracing::warn!(issuer = %known.url, "cannot fetch the issuer's keys: {e}");
                    }
                    set
                },
            )
            .await
            .map_err(|error| TokenRefused::NoKeys {
                issuer: known.rules.issuer.clone(),
                error,
            })?;
        Ok(jwt::verify(token, &known.rules, &set, now)?)
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

    #[tokio::test]
    async fn what_is_kept_is_fetched_once_for_many_callers_and_kept_through_an_outage() {
        let kept: Kept<&str, String> = Kept::default();
        let fetches = AtomicUsize::new(0);
        let interval = Duration::from_millis(50);
        let ok = || async {
            fetches.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>("endpoints")
        };
        let failing = || async {
            fetches.fetch_add(1, Ordering::SeqCst);
            Err::<&str, _>("down".to_string())
        };
        let fresh = |_: &&str, _| false;
        let answers =
            futures_util::future::join_all((0..50).map(|_| kept.get(interval, fresh, ok))).await;
        assert!(answers.iter().all(|a| a.as_deref() == Ok(&"endpoints")));
        assert_eq!(
            fetches.load(Ordering::SeqCst),
            1,
            "one fetch for 50 callers"
        );
        // Stale, the source down: the value held is kept, and asked for again only after the
        // interval.
        tokio::time::sleep(interval).await;
        let stale = |_: &&str, _| true;
        for _ in 0..5 {
            assert_eq!(
                kept.get(interval, stale, failing).await.as_deref(),
                Ok(&"endpoints")
            );
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
        // Nothing held: the failure is the answer, and is not retried before the interval.
        let empty: Kept<&str, String> = Kept::default();
        for _ in 0..5 {
            assert_eq!(
                empty.get(interval, stale, failing).await,
                Err("down".to_string())
            );
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 3);
        tokio::time::sleep(interval).await;
        assert_eq!(
            empty.get(interval, stale, ok).await.as_deref(),
            Ok(&"endpoints")
        );
    }
}
