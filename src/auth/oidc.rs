//! Clients that present an OpenID Connect ID token from a configured issuer (`[[auth.issuers]]`)
//! instead of one of the mirror's tokens: the issuers' settings, and their key sets kept in
//! memory.
//!
//! An issuer's keys are fetched on the first token it issued, then again when a token names a
//! key ID the set lacks (a key rotation), and when they are older than [`KEYS_TTL`]; never more
//! often than once per `refetch_interval` ([`MIN_REFETCH`] unless configured) per issuer,
//! however many tokens arrive, so unknown key
//! IDs cannot make the mirror hammer an issuer. When a fetch fails, the keys already held stay
//! in use: an issuer outage does not lock out clients whose keys are cached.
//!
//! A fetch holds no lock: it is one flight per issuer (`cache::Flights`), which every token
//! that needs new keys joins, while tokens whose key is held are verified at once with the keys
//! held. So a token with a made-up key ID during a slow answer from the issuer delays only
//! itself and others that need the new keys. Fetching is the caller's (see
//! [`Issuers::verify`]): the server fetches through the origins' client, with its address policy
//! and proxy.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::jwt::{self, ClaimPath, ClaimRule, Identity, IssuerRules, JwtError, KeySet};
use super::{AuthConfigError, Patterns};
use crate::cache::{Aborted, Flights};

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
    /// Accept every subject the issuer vouches for, without claim rules: an explicit choice,
    /// since anyone who can have the issuer mint a token for the audience gets in.
    #[serde(default)]
    pub allow_any_subject: bool,
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
        if super::RESERVED_PREFIXES.contains(&self.name.as_str()) {
            return Err(invalid(
                "name",
                format!(
                    "{:?} is reserved: the mirror names its own clients {}:...",
                    self.name, self.name
                ),
            ));
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
        match (claims.is_empty(), self.allow_any_subject) {
            (true, false) => {
                return Err(invalid(
                    "claims",
                    format!(
                        "no claim rule restricts who is accepted, so anyone the issuer vouches \
                         for would get in (for GitHub Actions, any repository; for a public \
                         identity provider, anyone with an account); add claims, or set {} = \
                         true to accept every subject",
                        key("allow_any_subject")
                    ),
                ));
            }
            (false, true) => {
                return Err(invalid(
                    "allow_any_subject",
                    format!("contradicts {}: set one or the other", key("claims")),
                ));
            }
            _ => {}
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
    /// Key-set fetches in progress, by the issuer's index: one at a time per issuer, shared by
    /// every token that waits for it.
    fetches: Flights<usize, (), Aborted>,
}

struct Held {
    rules: IssuerRules,
    url: url::Url,
    /// Locked only to read or record, never across a fetch.
    keys: Arc<Mutex<Keys>>,
}

#[derive(Default)]
struct Keys {
    set: Option<(Arc<KeySet>, Instant)>,
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
            fetches: Flights::default(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.issuers.is_empty()
    }

    /// Verifies an ID token at `now` (Unix seconds), fetching its issuer's key set with
    /// `fetch` when it must (see the module's header).
    ///
    /// A token whose key is held is verified at once, even while a fetch is under way (one
    /// due because the set is old starts in the background). A token that needs new keys (an
    /// unknown key ID, or none held yet) waits for the fetch under way, or starts one if the
    /// issuer may be asked again, and is then verified with whatever keys are held.
    pub async fn verify<F, Fut>(
        &self,
        token: &str,
        now: u64,
        fetch: F,
    ) -> Result<Identity, TokenRefused>
    where
        F: FnOnce(url::Url) -> Fut,
        Fut: Future<Output = Result<bytes::Bytes, String>> + Send + 'static,
    {
        let claimed = jwt::peek(token)?;
        let (index, held) = self
            .issuers
            .iter()
            .enumerate()
            .find(|(_, h)| h.rules.issuer == claimed.issuer.trim_end_matches('/'))
            .ok_or(TokenRefused::UnknownIssuer)?;
        let pending = {
            let mut keys = held.keys.lock().expect("key set lock");
            let known = keys
                .set
                .as_ref()
                .is_some_and(|(set, _)| claimed.kid.as_deref().is_none_or(|kid| set.has(kid)));
            let old = keys
                .set
                .as_ref()
                .is_some_and(|(_, fetched)| fetched.elapsed() > KEYS_TTL);
            let may_fetch = keys
                .last_attempt
                .is_none_or(|at| at.elapsed() >= held.rules.refetch_interval);
            let flight = match self.fetches.join(&index) {
                Some(flight) => Some(flight),
                None if (!known || old) && may_fetch => {
                    keys.last_attempt = Some(Instant::now());
                    let work = Self::fetch_into(held, fetch(held.url.clone()));
                    Some(self.fetches.begin(index, || work).0)
                }
                None => None,
            };
            // Only a token that the keys held cannot verify waits.
            flight.filter(|_| !known)
        };
        if let Some(flight) = pending {
            // Whatever the fetch came to is in `keys` now (a task that died changed nothing).
            let _ = flight.await;
        }
        let set = {
            let keys = held.keys.lock().expect("key set lock");
            match &keys.set {
                Some((set, _)) => set.clone(),
                None => {
                    return Err(TokenRefused::NoKeys {
                        issuer: held.rules.issuer.clone(),
                        error: keys.last_error.clone().unwrap_or_default(),
                    });
                }
            }
        };
        Ok(jwt::verify(token, &held.rules, &set, now)?)
    }

    /// The work of one fetch of `held`'s key set: awaits `fetched` and records the set, or
    /// the error (keeping the keys already held).
    fn fetch_into<Fut>(
        held: &Held,
        fetched: Fut,
    ) -> impl Future<Output = Result<(), Aborted>> + Send + 'static
    where
        Fut: Future<Output = Result<bytes::Bytes, String>> + Send + 'static,
    {
        let keys = held.keys.clone();
        let url = held.url.clone();
        async move {
            let fetched = fetched.await.and_then(|body| KeySet::from_jwks(&body));
            let mut keys = keys.lock().expect("key set lock");
            match fetched {
                Ok(set) if !set.is_empty() => {
                    keys.set = Some((Arc::new(set), Instant::now()));
                    keys.last_error = None;
                }
                Ok(_) => keys.last_error = Some("its key set has no usable key".into()),
                Err(e) => {
                    tracing::warn!(issuer = %url, "cannot fetch the issuer's keys: {e}");
                    keys.last_error = Some(e);
                }
            }
            Ok(())
        }
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
    async fn a_slow_fetch_for_new_keys_delays_no_token_whose_key_is_held_and_is_shared() {
        use crate::auth::jwt::tests::{ec_key, sign};
        use std::sync::Arc;
        let (key1, jwk1) = ec_key("k1");
        let (key2, jwk2) = ec_key("k2");
        let config: IssuerConfig = toml::from_str(&format!(
            "name = \"gitlab\"\nissuer = \"{ISSUER}\"\naudiences = [\"mirror\"]\n\
             claims = {{ namespace_path = \"acme/*\" }}\n"
        ))
        .unwrap();
        // Any token may cause a fetch at once (no refetch interval), so only the flight limits
        // them.
        let mut rules = config.validate(0).unwrap();
        rules.refetch_interval = Duration::ZERO;
        let issuers = Arc::new(Issuers::new(&[rules]));
        let claims = serde_json::json!({
            "iss": ISSUER, "aud": "mirror", "sub": "job", "namespace_path": "acme/app",
            "exp": 2_000_000_000u64,
        });
        let old = sign(&key1, Some("k1"), &claims);
        let new = sign(&key2, Some("k2"), &claims);
        let jwks = |keys: &[&serde_json::Value]| {
            bytes::Bytes::from(serde_json::json!({ "keys": keys }).to_string())
        };
        let fetches = Arc::new(AtomicUsize::new(0));
        let counting = |body: bytes::Bytes, gate: Option<Arc<tokio::sync::Notify>>| {
            let fetches = fetches.clone();
            move |_url: url::Url| {
                fetches.fetch_add(1, Ordering::SeqCst);
                async move {
                    if let Some(gate) = gate {
                        gate.notified().await;
                    }
                    Ok::<_, String>(body)
                }
            }
        };
        let now = 1_900_000_000;
        let first = issuers.verify(&old, now, counting(jwks(&[&jwk1]), None));
        assert_eq!(first.await.unwrap().name, "gitlab:job");

        // A token naming a key the set lacks: the issuer is slow to answer.
        let gate = Arc::new(tokio::sync::Notify::new());
        let rotated = jwks(&[&jwk1, &jwk2]);
        let waiting = {
            let (issuers, new) = (issuers.clone(), new.clone());
            let fetch = counting(rotated.clone(), Some(gate.clone()));
            tokio::spawn(async move { issuers.verify(&new, now, fetch).await })
        };
        while fetches.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        // Meanwhile a token whose key is held is answered at once, without a fetch.
        let held = issuers.verify(&old, now, counting(jwks(&[]), None));
        let held = tokio::time::timeout(Duration::from_secs(5), held).await;
        assert_eq!(
            held.expect("not held up by the fetch").unwrap().name,
            "gitlab:job"
        );
        // Another token that needs the new keys joins the fetch under way.
        let mut joined = Box::pin(issuers.verify(&new, now, counting(rotated, None)));
        let pending = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(joined.as_mut().poll(cx).is_pending())
        })
        .await;
        assert!(pending, "it waits for the fetch under way");
        assert_eq!(fetches.load(Ordering::SeqCst), 2, "one fetch for both");
        gate.notify_one();
        assert_eq!(joined.await.unwrap().name, "gitlab:job");
        assert_eq!(waiting.await.unwrap().unwrap().name, "gitlab:job");
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
    }
}
