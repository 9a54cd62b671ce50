//! Workload identity: OpenID Connect ID tokens (JWTs) that CI systems hand their jobs (GitHub
//! Actions, GitLab CI `id_tokens`, Kubernetes service-account tokens), checked against one
//! configured issuer's keys and rules.
//!
//! What is checked, in this order, before any claim is believed:
//! - the token is at most [`MAX_TOKEN`] bytes and three base64url parts;
//! - its `alg` is one of [`ALGORITHMS`] (asymmetric only: `none` and every HMAC algorithm are
//!   refused, so a token "signed" with the issuer's public key as an HMAC secret gets nowhere);
//! - a key of the issuer's set signs it: the key its `kid` names, or the only key when it names
//!   none; the key's type must fit the algorithm, and a key set's symmetric keys are ignored;
//! - `iss` is the issuer's URL exactly; `aud` (a string or a list) holds one of its audiences;
//! - `exp` is present and not passed, `nbf` and `iat` are not in the future, each within
//!   [`LEEWAY`] of this server's clock;
//! - when a claim rule or the name claim is `email`, `email_verified` is `true` (a JSON
//!   boolean; absent counts as not verified), so an address the issuer never checked names
//!   nobody;
//! - every claim rule holds (see [`ClaimRule`]).
//!
//! Only then does the token name an [`Identity`]: the issuer's name and the value of its name
//! claim (`sub` unless configured).

use std::collections::HashSet;

use base64::Engine as _;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

/// The signature algorithms accepted: asymmetric ones only.
pub const ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// How far `exp`, `nbf` and `iat` may be off this server's clock, in seconds.
pub const LEEWAY: u64 = 60;

/// The longest token looked at, in bytes (GitHub's and GitLab's are around 1 to 2 KiB).
pub const MAX_TOKEN: usize = 8 * 1024;

/// Why a token is refused. The messages name the check, never the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("the token is longer than {MAX_TOKEN} bytes")]
    TooLarge,
    #[error("the token is not a well-formed JWT: {0}")]
    Malformed(String),
    #[error("the token's algorithm {0} is not accepted (only asymmetric signatures are)")]
    Algorithm(String),
    #[error("no key of the issuer has key ID {0:?}")]
    UnknownKey(String),
    #[error("the token names no key ID, and the issuer has more than one key")]
    AmbiguousKey,
    #[error("the token's signature does not verify")]
    Signature,
    #[error("the token was issued by {0:?}, not by this issuer")]
    Issuer(String),
    #[error("the token is not meant for this mirror (its audience is none of the configured ones)")]
    Audience,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet")]
    NotYetValid,
    #[error("the token has no {0} claim")]
    MissingClaim(String),
    #[error("claim {claim}: {value} is not allowed")]
    Rule { claim: String, value: String },
    #[error(
        "the token's email is not verified by the issuer (email_verified must be true; absent \
         counts as not verified)"
    )]
    EmailNotVerified,
}

/// Where a claim is: a top-level claim's name (`repository_owner`), or a JSON pointer into
/// nested ones (`/kubernetes.io/namespace`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPath(String);

impl ClaimPath {
    pub fn new(path: &str) -> ClaimPath {
        ClaimPath(path.to_string())
    }

    /// Whether this is the `email` claim, by name or by pointer.
    fn is_email(&self) -> bool {
        self.0 == "email" || self.0 == "/email"
    }

    fn find<'a>(&self, claims: &'a Value) -> Option<&'a Value> {
        if self.0.starts_with('/') {
            claims.pointer(&self.0)
        } else {
            claims.get(&self.0)
        }
    }
}

impl std::fmt::Display for ClaimPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A claim that must be present with an allowed value: one of `patterns`, each exact or a glob
/// (`*` matches any run of characters, `/` included; `?` one character). A claim that is a
/// list passes when one of its members does; numbers and booleans are compared as text.
#[derive(Debug, Clone)]
pub struct ClaimRule {
    pub claim: ClaimPath,
    patterns: super::Globs,
}

impl ClaimRule {
    /// A rule over `claim`; an invalid pattern is reported with its text.
    pub fn new(claim: &str, patterns: &[String]) -> Result<ClaimRule, String> {
        Ok(ClaimRule {
            claim: ClaimPath::new(claim),
            patterns: super::Globs::new(patterns)?,
        })
    }

    fn check(&self, claims: &Value) -> Result<(), JwtError> {
        let value = self
            .claim
            .find(claims)
            .ok_or_else(|| JwtError::MissingClaim(self.claim.to_string()))?;
        let values: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        let allowed = values
            .iter()
            .filter_map(|v| as_text(v))
            .any(|text| self.patterns.is_match(&text));
        if allowed {
            Ok(())
        } else {
            Err(JwtError::Rule {
                claim: self.claim.to_string(),
                value: shorten(&value.to_string()),
            })
        }
    }
}

/// What one issuer's tokens must satisfy.
#[derive(Debug, Clone)]
pub struct IssuerRules {
    /// The issuer's short name, the first part of its identities (`github`).
    pub name: String,
    /// `iss`, exactly (`https://token.actions.githubusercontent.com`).
    pub issuer: String,
    /// `aud` must hold one of these.
    pub audiences: Vec<String>,
    /// Every one must hold.
    pub claims: Vec<ClaimRule>,
    /// The claim that names the identity (`sub` by default).
    pub name_claim: ClaimPath,
    /// The least time between two fetches of its keys.
    pub refetch_interval: std::time::Duration,
}

/// Who a verified token says its bearer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `<issuer name>:<name claim>`, e.g. `github:repo:acme/infra:ref:refs/heads/main`.
    pub name: String,
    /// The token's claims, for the rules that decide what it may do.
    pub claims: Value,
}

/// An issuer's verification keys (its JWKS, asymmetric keys only).
#[derive(Clone, Default)]
pub struct KeySet {
    keys: Vec<(Option<String>, DecodingKey)>,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().filter_map(|(k, _)| k.as_deref()).collect();
        f.debug_struct("KeySet").field("kids", &ids).finish()
    }
}

impl KeySet {
    /// The usable keys of a JWKS document: RSA, EC and OKP keys for signing; symmetric keys,
    /// encryption keys and keys that do not parse are left out.
    pub fn from_jwks(document: &[u8]) -> Result<KeySet, String> {
        let set: JwkSet =
            serde_json::from_slice(document).map_err(|e| format!("not a JWK set: {e}"))?;
        let mut keys = Vec::new();
        for jwk in &set.keys {
            if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
                continue;
            }
            let for_signing = jwk
                .common
                .public_key_use
                .as_ref()
                .is_none_or(|u| matches!(u, jsonwebtoken::jwk::PublicKeyUse::Signature));
            if !for_signing {
                continue;
            }
            if let Ok(key) = DecodingKey::from_jwk(jwk) {
                keys.push((jwk.common.key_id.clone(), key));
            }
        }
        Ok(KeySet { keys })
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether a key has this ID.
    pub fn has(&self, kid: &str) -> bool {
        self.keys.iter().any(|(k, _)| k.as_deref() == Some(kid))
    }

    fn key(&self, kid: Option<&str>) -> Result<&DecodingKey, JwtError> {
        match kid {
            Some(kid) => self
                .keys
                .iter()
                .find(|(k, _)| k.as_deref() == Some(kid))
                .map(|(_, key)| key)
                .ok_or_else(|| JwtError::UnknownKey(kid.to_string())),
            None => match self.keys.as_slice() {
                [(_, key)] => Ok(key),
                _ => Err(JwtError::AmbiguousKey),
            },
        }
    }
}

/// What a token says about itself before anything is verified: its issuer (to pick the
/// issuer's rules) and its key ID (to know whether the key set must be fetched again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unverified {
    pub issuer: String,
    pub kid: Option<String>,
}

/// Whether a bearer token looks like a JWT at all (three base64url parts); static tokens never
/// do, so they never reach the JWT checks.
pub fn looks_like_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3
        && parts[..2].iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Reads the issuer and key ID of a token, checking only its size, shape and algorithm.
pub fn peek(token: &str) -> Result<Unverified, JwtError> {
    if token.len() > MAX_TOKEN {
        return Err(JwtError::TooLarge);
    }
    let header = header_of(token)?;
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| JwtError::Malformed("no payload".into()))?;
    let claims: Value = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or_else(|| JwtError::Malformed("the payload is not base64url JSON".into()))?;
    let issuer = claims["iss"]
        .as_str()
        .ok_or_else(|| JwtError::MissingClaim("iss".into()))?
        .to_string();
    Ok(Unverified {
        issuer,
        kid: header.kid,
    })
}

/// The header, with its algorithm checked against [`ALGORITHMS`].
fn header_of(token: &str) -> Result<jsonwebtoken::Header, JwtError> {
    let raw = token
        .split('.')
        .next()
        .and_then(|h| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(h)
                .ok()
        })
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .ok_or_else(|| JwtError::Malformed("the header is not base64url JSON".into()))?;
    let alg = raw["alg"].as_str().unwrap_or_default();
    if !ALGORITHMS.iter().any(|a| format!("{a:?}") == alg) {
        return Err(JwtError::Algorithm(shorten(&format!("{alg:?}"))));
    }
    jsonwebtoken::decode_header(token).map_err(|e| JwtError::Malformed(e.to_string()))
}

/// Verifies `token` against an issuer's keys and rules at `now` (Unix seconds).
pub fn verify(
    token: &str,
    rules: &IssuerRules,
    keys: &KeySet,
    now: u64,
) -> Result<Identity, JwtError> {
    if token.len() > MAX_TOKEN {
        return Err(JwtError::TooLarge);
    }
    let header = header_of(token)?;
    let key = keys.key(header.kid.as_deref())?;
    // The signature and the algorithm only: the claims are checked below, against `now`.
    let mut validation = Validation::new(header.alg);
    validation.required_spec_claims = HashSet::new();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    let claims = jsonwebtoken::decode::<Value>(token, key, &validation)
        .map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => {
                JwtError::Algorithm(format!("{:?} with this key", header.alg))
            }
            jsonwebtoken::errors::ErrorKind::InvalidSignature => JwtError::Signature,
            _ => JwtError::Malformed(e.to_string()),
        })?
        .claims;
    let issuer = claims["iss"]
        .as_str()
        .ok_or_else(|| JwtError::MissingClaim("iss".into()))?;
    if issuer != rules.issuer {
        return Err(JwtError::Issuer(shorten(issuer)));
    }
    let audiences: Vec<&str> = match &claims["aud"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        Value::Null => return Err(JwtError::MissingClaim("aud".into())),
        _ => Vec::new(),
    };
    if !audiences
        .iter()
        .any(|a| rules.audiences.iter().any(|wanted| wanted == a))
    {
        return Err(JwtError::Audience);
    }
    let time = |name: &str| claims[name].as_u64();
    let exp = time("exp").ok_or_else(|| JwtError::MissingClaim("exp".into()))?;
    if now > exp.saturating_add(LEEWAY) {
        return Err(JwtError::Expired);
    }
    for not_before in [time("nbf"), time("iat")].into_iter().flatten() {
        if not_before > now.saturating_add(LEEWAY) {
            return Err(JwtError::NotYetValid);
        }
    }
    let uses_email =
        rules.name_claim.is_email() || rules.claims.iter().any(|rule| rule.claim.is_email());
    if uses_email && claims["email_verified"] != Value::Bool(true) {
        return Err(JwtError::EmailNotVerified);
    }
    for rule in &rules.claims {
        rule.check(&claims)?;
    }
    let name = rules
        .name_claim
        .find(&claims)
        .and_then(as_text)
        .ok_or_else(|| JwtError::MissingClaim(rules.name_claim.to_string()))?;
    Ok(Identity {
        name: format!("{}:{name}", rules.name),
        claims,
    })
}

/// A claim value as text, when it is a string, a number or a boolean.
fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// At most 200 characters of a value from a token, for messages.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};
    use ring::signature::KeyPair as _;
    use serde_json::json;

    const ISSUER: &str = "https://token.actions.githubusercontent.com";
    const NOW: u64 = 1_800_000_000;

    /// A fresh P-256 key: its encoding key and its JWK (with `kid`).
    pub(in crate::auth) fn ec_key(kid: &str) -> (EncodingKey, Value) {
        let rng = ring::rand::SystemRandom::new();
        let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let pair = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": b64(&point[1..33]), "y": b64(&point[33..65]),
        });
        (EncodingKey::from_ec_der(pkcs8.as_ref()), jwk)
    }

    fn keys(jwks: &[&Value]) -> KeySet {
        KeySet::from_jwks(json!({ "keys": jwks }).to_string().as_bytes()).unwrap()
    }

    /// A GitHub Actions token's claims (its real claim set, trimmed).
    fn github_claims() -> Value {
        json!({
            "iss": ISSUER,
            "aud": "https://mirror.example.com",
            "sub": "repo:acme/infra:ref:refs/heads/main",
            "repository": "acme/infra",
            "repository_owner": "acme",
            "repository_owner_id": "1234",
            "ref": "refs/heads/main",
            "ref_type": "branch",
            "workflow": "deploy",
            "run_id": "42",
            "iat": NOW - 10,
            "nbf": NOW - 10,
            "exp": NOW + 290,
        })
    }

    fn rules(claims: &[(&str, &[&str])]) -> IssuerRules {
        IssuerRules {
            name: "github".into(),
            issuer: ISSUER.into(),
            audiences: vec!["https://mirror.example.com".into()],
            claims: claims
                .iter()
                .map(|(c, p)| {
                    ClaimRule::new(c, &p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
                })
                .collect(),
            name_claim: ClaimPath::new("sub"),
            refetch_interval: std::time::Duration::from_secs(30),
        }
    }

    pub(in crate::auth) fn sign(key: &EncodingKey, kid: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = kid.map(str::to_string);
        jsonwebtoken::encode(&header, claims, key).unwrap()
    }

    #[test]
    fn a_github_token_names_its_workflow_and_passes_its_rules() {
        let (key, jwk) = ec_key("k1");
        let token = sign(&key, Some("k1"), &github_claims());
        assert!(looks_like_jwt(&token));
        assert!(!looks_like_jwt("a-static-token-0123456789"));
        let peeked = peek(&token).unwrap();
        assert_eq!(peeked.issuer, ISSUER);
        assert_eq!(peeked.kid.as_deref(), Some("k1"));
        let rules = rules(&[("repository_owner", &["acme"]), ("ref", &["refs/heads/*"])]);
        let identity = verify(&token, &rules, &keys(&[&jwk]), NOW).unwrap();
        assert_eq!(identity.name, "github:repo:acme/infra:ref:refs/heads/main");
        assert_eq!(identity.claims["repository"], "acme/infra");
    }

    #[test]
    fn claim_rules_match_exactly_by_glob_in_lists_and_nested() {
        let (key, jwk) = ec_key("k1");
        let keys = keys(&[&jwk]);
        let claims = json!({
            "iss": ISSUER, "aud": ["https://mirror.example.com", "other"], "exp": NOW + 60,
            "sub": "system:serviceaccount:ci:runner",
            "kubernetes.io": { "namespace": "ci", "serviceaccount": { "name": "runner" } },
            "ref_protected": "true", "runner_id": 17,
        });
        let token = sign(&key, Some("k1"), &claims);
        for (rule, ok) in [
            (("/kubernetes.io/namespace", &["ci"][..]), true),
            (("/kubernetes.io/namespace", &["c?"][..]), true),
            (
                ("/kubernetes.io/namespace", &["prod", "staging"][..]),
                false,
            ),
            (("/kubernetes.io/serviceaccount/name", &["run*"][..]), true),
            (("runner_id", &["17"][..]), true),
            (("aud", &["other"][..]), true),
            (("missing", &["*"][..]), false),
            (("sub", &["system:serviceaccount:ci:*"][..]), true),
            (("sub", &["system:serviceaccount:prod:*"][..]), false),
        ] {
            let result = verify(&token, &rules(&[rule]), &keys, NOW);
            assert_eq!(result.is_ok(), ok, "{rule:?}: {result:?}");
        }
        let refused = verify(&token, &rules(&[("sub", &["x"])]), &keys, NOW).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "claim sub: \"system:serviceaccount:ci:runner\" is not allowed"
        );
    }

    #[test]
    fn the_issuer_audience_and_times_are_checked_within_the_leeway() {
        let (key, jwk) = ec_key("k1");
        let keys = keys(&[&jwk]);
        let rules = rules(&[]);
        let with = |change: &dyn Fn(&mut Value)| {
            let mut claims = github_claims();
            change(&mut claims);
            verify(&sign(&key, Some("k1"), &claims), &rules, &keys, NOW)
        };
        assert_eq!(
            with(&|c| c["iss"] = json!("https://gitlab.example.com")),
            Err(JwtError::Issuer("https://gitlab.example.com".into()))
        );
        assert_eq!(
            with(&|c| c["aud"] = json!("https://github.com/acme")),
            Err(JwtError::Audience)
        );
        assert_eq!(
            with(&|c| {
                c.as_object_mut().unwrap().remove("aud");
            }),
            Err(JwtError::MissingClaim("aud".into()))
        );
        assert_eq!(
            with(&|c| {
                c.as_object_mut().unwrap().remove("exp");
            }),
            Err(JwtError::MissingClaim("exp".into()))
        );
        // At the edges of the leeway: just inside passes, just outside fails.
        assert!(with(&|c| c["exp"] = json!(NOW - LEEWAY)).is_ok());
        assert_eq!(
            with(&|c| c["exp"] = json!(NOW - LEEWAY - 1)),
            Err(JwtError::Expired)
        );
        assert!(with(&|c| c["nbf"] = json!(NOW + LEEWAY)).is_ok());
        assert_eq!(
            with(&|c| c["nbf"] = json!(NOW + LEEWAY + 1)),
            Err(JwtError::NotYetValid)
        );
        assert_eq!(
            with(&|c| c["iat"] = json!(NOW + LEEWAY + 1)),
            Err(JwtError::NotYetValid)
        );
    }

    #[test]
    fn hostile_tokens_are_refused() {
        let (key, jwk) = ec_key("k1");
        let (other, other_jwk) = ec_key("k2");
        let keys = keys(&[&jwk]);
        let rules = rules(&[]);
        let claims = github_claims();
        let b64 = |v: &Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string().as_bytes())
        };
        // alg: none, with and without a signature part.
        for none in ["none", "None", "NONE"] {
            let token = format!(
                "{}.{}.",
                b64(&json!({ "alg": none, "typ": "JWT" })),
                b64(&claims)
            );
            assert!(matches!(
                verify(&token, &rules, &keys, NOW),
                Err(JwtError::Algorithm(_))
            ));
            assert!(matches!(peek(&token), Err(JwtError::Algorithm(_))));
        }
        // HS256 "signed" with the issuer's public key as the HMAC secret.
        let public = jwk.to_string();
        for secret in [public.as_bytes(), jwk["x"].as_str().unwrap().as_bytes()] {
            let forged = jsonwebtoken::encode(
                &Header::new(Algorithm::HS256),
                &claims,
                &EncodingKey::from_secret(secret),
            )
            .unwrap();
            assert!(matches!(
                verify(&forged, &rules, &keys, NOW),
                Err(JwtError::Algorithm(_))
            ));
        }
        // A symmetric key in the issuer's set is never used.
        let with_oct = KeySet::from_jwks(
            json!({ "keys": [{ "kty": "oct", "k": "c2VjcmV0", "kid": "s" }] })
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        assert!(with_oct.is_empty());
        // Another key, an unknown key ID, no key ID with several keys.
        assert_eq!(
            verify(&sign(&other, Some("k1"), &claims), &rules, &keys, NOW),
            Err(JwtError::Signature)
        );
        assert_eq!(
            verify(&sign(&key, Some("k9"), &claims), &rules, &keys, NOW),
            Err(JwtError::UnknownKey("k9".into()))
        );
        let two = self::keys(&[&jwk, &other_jwk]);
        assert_eq!(
            verify(&sign(&key, None, &claims), &rules, &two, NOW),
            Err(JwtError::AmbiguousKey)
        );
        assert!(
            verify(&sign(&key, None, &claims), &rules, &keys, NOW).is_ok(),
            "one key"
        );
        // A tampered payload.
        let token = sign(&key, Some("k1"), &claims);
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        let mut changed = claims.clone();
        changed["repository_owner"] = json!("evil");
        parts[1] = b64(&changed);
        assert_eq!(
            verify(&parts.join("."), &rules, &keys, NOW),
            Err(JwtError::Signature)
        );
        // Oversized.
        let mut big = claims.clone();
        big["padding"] = json!("x".repeat(MAX_TOKEN));
        let token = sign(&key, Some("k1"), &big);
        assert_eq!(verify(&token, &rules, &keys, NOW), Err(JwtError::TooLarge));
        assert_eq!(peek(&token), Err(JwtError::TooLarge));
        // Garbage.
        assert!(matches!(
            verify("a.b.c", &rules, &keys, NOW),
            Err(JwtError::Malformed(_))
        ));
    }

    #[test]
    fn an_email_names_nobody_unless_the_issuer_verified_it() {
        let (key, jwk) = ec_key("k1");
        let keys = keys(&[&jwk]);
        let person = |verified: Option<Value>| {
            let mut claims = github_claims();
            claims["email"] = json!("alice@acme.example");
            if let Some(v) = verified {
                claims["email_verified"] = v;
            }
            sign(&key, Some("k1"), &claims)
        };
        let by_rule = rules(&[("email", &["*@acme.example"])]);
        let by_pointer = rules(&[("/email", &["*@acme.example"])]);
        let mut by_name = rules(&[]);
        by_name.name_claim = ClaimPath::new("email");
        for rules in [&by_rule, &by_pointer, &by_name] {
            assert!(verify(&person(Some(json!(true))), rules, &keys, NOW).is_ok());
            for unverified in [
                None,
                Some(json!(false)),
                Some(json!("true")),
                Some(json!(1)),
            ] {
                assert_eq!(
                    verify(&person(unverified.clone()), rules, &keys, NOW),
                    Err(JwtError::EmailNotVerified),
                    "{unverified:?}"
                );
            }
        }
        assert_eq!(
            verify(&person(Some(json!(true))), &by_name, &keys, NOW)
                .unwrap()
                .name,
            "github:alice@acme.example"
        );
        // Rules that do not use the address do not ask for its verification.
        assert!(verify(&person(None), &rules(&[]), &keys, NOW).is_ok());
        let message = JwtError::EmailNotVerified.to_string();
        assert!(message.contains("email_verified") && message.contains("absent"));
    }
}
