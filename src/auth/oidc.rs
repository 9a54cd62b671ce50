//! Clients that present an OpenID Connect ID token from a configured issuer (`[[auth.issuers]]`)
//! instead of one of the mirror's tokens: the issuers' settings, and their key sets kept in
//! memory.
//!
//! An issuer's keys are fetched on the first token it issued, then again when a token names a
//! key ID the set lacks (a key rotation), and when they are older than [`KEYS_TTL`]; never more
//! often than once per `refetch_interval` ([`MIN_REFETCH`] unless configured) per issuer,
//! however many tokens arrive, so unknown key IDs cannot make the mirror hammer an issuer. When
//! a fetch fails, the keys already held stay in use: an issuer outage does not lock out clients
//! whose keys are cached. Fetching is the caller's (see [`Issuers::verify`]): the server fetches
//! through the origins' client, with its address policy and proxy.
//!
//! [`Kept`] is that way of holding what an issuer publishes, for whatever it is: the key sets
//! here, and single sign-on's provider endpoints (its discovery document) in the server. A
//! fetch holds no lock: it is one flight (`cache::Flights`), joined only by callers that cannot
//! do with what is held, while the others are answered at once. So a token with a made-up key ID
//! during a slow answer from the issuer delays only itself and the tokens that need the new
//! keys.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
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

/// How a caller judges the value a [`Kept`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    /// It will do.
    Fresh,
    /// It will do, but it is due for a fetch: one starts in the background (if the interval
    /// allows), and the caller is answered with the value held.
    Old,
    /// It will not do for this caller (a token naming a key the set lacks): the caller waits
    /// for a fetch (if the interval allows, or one is under way), then gets what is held.
    Unusable,
}

/// Something an issuer publishes, held in memory: fetched on first use, again when a caller
/// judges it [`Judged::Old`] or [`Judged::Unusable`], never more often than once per interval
/// however many callers ask, and kept through failed fetches (an outage). The state is locked
/// only to read or record it, never across a fetch; a fetch is one flight, which only callers
/// that cannot do with what is held wait for.
pub struct Kept<T, E> {
    state: Arc<std::sync::Mutex<KeptState<T, E>>>,
    fetch: Flights<(), (), Aborted>,
}

struct KeptState<T, E> {
    held: Option<Held<T, E>>,
    last_attempt: Option<Instant>,
    /// Why the last fetch failed, while no fetch since has succeeded (a value may still be
    /// held from before).
    failing: Option<E>,
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
            state: Arc::new(std::sync::Mutex::new(KeptState {
                held: None,
                last_attempt: None,
                failing: None,
            })),
            fetch: Flights::default(),
        }
    }
}

impl<T, E> Kept<T, E>
where
    T: Send + Sync + 'static,
    E: From<Aborted> + Clone + Send + Sync + 'static,
{
    /// The value held, after the fetch `judge` (given the value and its age) calls for: none
    /// for [`Judged::Fresh`], one in the background for [`Judged::Old`], one waited for when
    /// nothing is held or for [`Judged::Unusable`]; a fetch starts only if the last attempt is
    /// at least `interval` old, else one under way is joined or the value held is the answer.
    /// A failed fetch keeps the value held; with none, its error is the answer until the next
    /// attempt.
    pub async fn get<Fut>(
        &self,
        interval: Duration,
        judge: impl FnOnce(&T, Duration) -> Judged,
        fetch: impl FnOnce() -> Fut,
    ) -> Result<Arc<T>, E>
    where
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let waited = {
            let mut state = self.state.lock().expect("kept state lock");
            let judged = match &state.held {
                Some(Held::Value(value, at)) => judge(value, at.elapsed()),
                Some(Held::Failed(_)) | None => Judged::Unusable,
            };
            let may_fetch = state.last_attempt.is_none_or(|at| at.elapsed() >= interval);
            let flight = match self.fetch.join(&()) {
                Some(flight) => Some(flight),
                None if judged != Judged::Fresh && may_fetch => {
                    state.last_attempt = Some(Instant::now());
                    let work = Self::record(self.state.clone(), fetch());
                    Some(self.fetch.begin((), || work).0)
                }
                None => None,
            };
            flight.filter(|_| judged == Judged::Unusable || state.held.is_none())
        };
        let died = match waited {
            // Whatever the fetch came to is held now, unless its task died.
            Some(flight) => flight.await.err(),
            None => None,
        };
        let state = self.state.lock().expect("kept state lock");
        match (&state.held, died) {
            (Some(held), _) => held.answer(),
            // Nothing was ever held and the fetch died, or ended as this caller arrived.
            (None, died) => Err(E::from(died.unwrap_or(Aborted::Cancelled))),
        }
    }

    /// Why the last fetch failed, while no fetch since has succeeded.
    pub fn failing(&self) -> Option<E> {
        self.state.lock().expect("kept state lock").failing.clone()
    }

    /// One fetch: awaits `fetched` and holds its value, or keeps the value held (else the
    /// error) when it failed.
    async fn record(
        state: Arc<std::sync::Mutex<KeptState<T, E>>>,
        fetched: impl Future<Output = Result<T, E>> + Send + 'static,
    ) -> Result<(), Aborted> {
        let fetched = fetched.await;
        let mut state = state.lock().expect("kept state lock");
        state.failing = fetched.as_ref().err().cloned();
        let held = match (fetched, state.held.take()) {
            (Ok(value), _) => Held::Value(Arc::new(value), Instant::now()),
            (Err(_), Some(Held::Value(value, at))) => Held::Value(value, at),
            (Err(e), _) => Held::Failed(e),
        };
        state.held = Some(held);
        Ok(())
    }
}

/// One `[[auth.issuers]]` entry as written.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
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
    #[schemars(with = "String", extend("format" = "duration"))]
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

/// Why an issuer's key set could not be fetched; `transient` when the issuer did not answer
/// (a timeout, no connection, a 5xx, its circuit open), so asking again later may succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct KeysUnavailable {
    pub message: String,
    pub transient: bool,
}

impl KeysUnavailable {
    /// The issuer did not answer (usefully) for now.
    pub fn transient(message: impl Into<String>) -> KeysUnavailable {
        KeysUnavailable {
            message: message.into(),
            transient: true,
        }
    }

    /// What the issuer answered, or where it points, cannot be used.
    pub fn lasting(message: impl Into<String>) -> KeysUnavailable {
        KeysUnavailable {
            message: message.into(),
            transient: false,
        }
    }
}

impl From<Aborted> for KeysUnavailable {
    fn from(aborted: Aborted) -> Self {
        KeysUnavailable::transient(aborted.to_string())
    }
}

/// Why an ID token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefused {
    #[error("the token's issuer is not one this mirror accepts")]
    UnknownIssuer,
    #[error("{0}")]
    Invalid(#[from] JwtError),
    /// `transient`: the issuer did not answer, rather than answered something unusable.
    #[error("the keys of issuer {issuer} cannot be fetched: {error}")]
    NoKeys {
        issuer: String,
        error: String,
        transient: bool,
    },
}

/// The configured issuers and their keys.
pub struct Issuers {
    issuers: Vec<Issuer>,
}

struct Issuer {
    rules: IssuerRules,
    url: url::Url,
    keys: Kept<KeySet, KeysUnavailable>,
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
        Fut: Future<Output = Result<bytes::Bytes, KeysUnavailable>> + Send + 'static,
    {
        let claimed = jwt::peek(token)?;
        let known = self
            .issuers
            .iter()
            .find(|h| h.rules.issuer == claimed.issuer.trim_end_matches('/'))
            .ok_or(TokenRefused::UnknownIssuer)?;
        let judge = |set: &KeySet, age| match claimed.kid.as_deref() {
            Some(kid) if !set.has(kid) => Judged::Unusable,
            _ if age > KEYS_TTL => Judged::Old,
            _ => Judged::Fresh,
        };
        let url = known.url.clone();
        let fetch = || {
            let fetched = fetch(url.clone());
            async move {
                let set = fetched
                    .await
                    .and_then(|body| KeySet::from_jwks(&body).map_err(KeysUnavailable::lasting))
                    .and_then(|set| match set.is_empty() {
                        true => Err(KeysUnavailable::lasting("its key set has no usable key")),
                        false => Ok(set),
                    });
                if let Err(e) = &set {
                    tracing::warn!(issuer = %url, "cannot fetch the issuer's keys: {e}");
                }
                set
            }
        };
        let set = known
            .keys
            .get(known.rules.refetch_interval, judge, fetch)
            .await
            .map_err(|e| TokenRefused::NoKeys {
                issuer: known.rules.issuer.clone(),
                error: e.message,
                transient: e.transient,
            })?;
        let verified = jwt::verify(token, &known.rules, &set, now);
        // A key the set lacks, and the issuer did not answer when asked for it: the token
        // cannot be checked now, which is not a refusal.
        if let Err(JwtError::UnknownKey(_)) = &verified {
            if let Some(e) = known.keys.failing().filter(|e| e.transient) {
                return Err(TokenRefused::NoKeys {
                    issuer: known.rules.issuer.clone(),
                    error: e.message,
                    transient: true,
                });
            }
        }
        Ok(verified?)
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
            async { Err::<bytes::Bytes, _>(KeysUnavailable::transient("connection refused")) }
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
        let kept: Kept<&str, KeysUnavailable> = Kept::default();
        let fetches = Arc::new(AtomicUsize::new(0));
        let interval = Duration::from_millis(50);
        let answer = |result: Result<&'static str, &'static str>| {
            let fetches = fetches.clone();
            move || async move {
                fetches.fetch_add(1, Ordering::SeqCst);
                result.map_err(KeysUnavailable::transient)
            }
        };
        let (ok, failing) = (Ok("endpoints"), Err("down"));
        let judged = |j: Judged| move |_: &&str, _| j;
        let answers = futures_util::future::join_all(
            (0..50).map(|_| kept.get(interval, judged(Judged::Fresh), answer(ok))),
        )
        .await;
        assert!(answers.iter().all(|a| a.as_deref() == Ok(&"endpoints")));
        assert_eq!(
            fetches.load(Ordering::SeqCst),
            1,
            "one fetch for 50 callers"
        );
        // Unusable, the source down: the value held is kept, and asked for again only after
        // the interval.
        tokio::time::sleep(interval).await;
        for _ in 0..5 {
            let got = kept.get(interval, judged(Judged::Unusable), answer(failing));
            assert_eq!(got.await.as_deref(), Ok(&"endpoints"));
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
        // Nothing held: the failure is the answer, and is not retried before the interval.
        let empty: Kept<&str, KeysUnavailable> = Kept::default();
        for _ in 0..5 {
            let got = empty.get(interval, judged(Judged::Unusable), answer(failing));
            assert_eq!(got.await, Err(KeysUnavailable::transient("down")));
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 3);
        tokio::time::sleep(interval).await;
        let got = empty.get(interval, judged(Judged::Fresh), answer(ok));
        assert_eq!(got.await.as_deref(), Ok(&"endpoints"));
        assert_eq!(fetches.load(Ordering::SeqCst), 4);

        // Old: answered at once with the value held while a slow fetch runs in the
        // background, which an unusable caller waits for.
        tokio::time::sleep(interval).await;
        let gate = Arc::new(tokio::sync::Notify::new());
        let slow = {
            let (gate, fetches) = (gate.clone(), fetches.clone());
            move || async move {
                fetches.fetch_add(1, Ordering::SeqCst);
                gate.notified().await;
                Ok::<_, KeysUnavailable>("rotated")
            }
        };
        let got = empty.get(interval, judged(Judged::Old), slow);
        assert_eq!(got.await.as_deref(), Ok(&"endpoints"));
        let waiting = empty.get(interval, judged(Judged::Unusable), answer(ok));
        tokio::pin!(waiting);
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        let fresh = empty.get(interval, judged(Judged::Fresh), answer(ok));
        assert_eq!(fresh.await.as_deref(), Ok(&"endpoints"), "not held up");
        gate.notify_one();
        assert_eq!(waiting.await.as_deref(), Ok(&"rotated"));
        assert_eq!(fetches.load(Ordering::SeqCst), 5, "one fetch, joined");
    }
}
