//! OpenPGP verification of an origin's SHA256SUMS, and the signature's trust level.
//!
//! A network mirror's `hashes` are the only thing the CLI checks a package against, so the
//! mirror must do what the CLI does when it installs straight from a registry: verify the
//! origin's detached signature over SHA256SUMS before trusting any line of it. The rules follow
//! Terraform's `signatureAuthentication`:
//!
//! - the signature is a *binary* detached OpenPGP signature over the SHA256SUMS bytes;
//! - each key in the download metadata's `signing_keys` is tried in turn: a key that did not
//!   issue the signature is skipped; a key that did but does not verify it is a failure;
//! - key expiry is not checked (old releases stay valid after their key expires, as in the CLI);
//! - a signature that also verifies under HashiCorp's own key (pinned in this binary, never
//!   taken from the origin) is **official**; otherwise a signing key carrying a
//!   `trust_signature` that verifies under HashiCorp's partners key is **partner**; any other
//!   verified signature is **community**.
//!
//! One rule is stricter than the CLI: a `hashicorp/*` provider on `registry.terraform.io` must be
//! signed by the pinned HashiCorp key, so a compromised or impersonated origin cannot pass off
//! its own key for HashiCorp's providers.
//!
//! Origins that list no signing keys (OpenTofu's registry may not) are refused unless
//! `upstream.require_signature` is off for their host; such versions are recorded as
//! [`SignatureKind::Unsigned`]. Archives that come with no origin signature at all (a plain
//! mirror directory imported on an operator's say-so) are [`SignatureKind::Unverified`].
//!
//! [`TrustPolicy::verify_sums`] is the one check every way into the cache goes through: `serve`
//! (and with it `seed` and `lock`) when it builds a version record, and `import` for every
//! bundle. [`TrustPolicy::admit`] applies the operator's rules to a classified archive (the
//! HashiCorp pin, `upstream.min_trust`), wherever an archive is admitted or served.

pub mod site;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::packet::SignatureType;
use pgp::types::PublicKeyTrait;
use serde::{Deserialize, Serialize};

use crate::address::{Hostname, ProviderAddr};
use crate::records::{Package, SigningKey};

/// HashiCorp's public key, as published at hashicorp.com/security.
const HASHICORP_KEY: &str = include_str!("trust/hashicorp.asc");
/// HashiCorp's key for trust signatures on partner providers' signing keys.
const HASHICORP_PARTNERS_KEY: &str = include_str!("trust/hashicorp-partners.asc");

/// Largest `ascii_armor` or `trust_signature` accepted from an origin.
const MAX_ARMOR_LEN: usize = 256 * 1024;
/// Most signing keys tried for one SHA256SUMS.
const MAX_KEYS: usize = 16;

/// How an archive's origin signature was classified; the trust levels, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SignatureKind {
    /// No origin signature came with it: imported from a source that carries none, on the
    /// operator's explicit say-so (`import --allow-unverified`).
    Unverified,
    /// The origin listed no signing keys and `require_signature` is off for its host.
    Unsigned,
    /// Signed by a key the origin vouches for, without a HashiCorp trust signature.
    Community,
    /// Signed by a key that carries a trust signature from HashiCorp's partners key.
    Partner,
    /// Signed by HashiCorp's own key.
    Official,
}

impl SignatureKind {
    /// Every level, weakest first.
    pub const ALL: [SignatureKind; 5] = [
        SignatureKind::Unverified,
        SignatureKind::Unsigned,
        SignatureKind::Community,
        SignatureKind::Partner,
        SignatureKind::Official,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SignatureKind::Unverified => "unverified",
            SignatureKind::Unsigned => "unsigned",
            SignatureKind::Community => "community",
            SignatureKind::Partner => "partner",
            SignatureKind::Official => "official",
        }
    }
}

impl std::fmt::Display for SignatureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SignatureKind {
    type Err = UnknownTrustLevel;

    fn from_str(s: &str) -> Result<SignatureKind, UnknownTrustLevel> {
        SignatureKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownTrustLevel(s.to_string()))
    }
}

/// A trust level's name that is none of [`SignatureKind`]'s (e.g. in `upstream.min_trust`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not one of unverified, unsigned, community, partner, official")]
pub struct UnknownTrustLevel(pub String);

/// The verified signature of one version (the weakest, if its packages use several SHA256SUMS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trust {
    pub kind: SignatureKind,
    /// Long ID (16 uppercase hex digits) of the primary key that signed; none when unsigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

/// Why a SHA256SUMS signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    #[error("the origin lists no signing keys for this version")]
    NoKeys,
    #[error("the SHA256SUMS signature file is not a binary OpenPGP signature: {0}")]
    MalformedSignature(String),
    #[error("signing key #{index} from the origin is unusable: {reason}")]
    BadSigningKey { index: usize, reason: KeyError },
    #[error("the SHA256SUMS signature does not verify under key {key_id}: {reason}")]
    BadSignature { key_id: String, reason: String },
    #[error("SHA256SUMS is signed by key {issuer}, which is not among the origin's signing keys")]
    UnknownIssuer { issuer: String },
    #[error(
        "the trust signature on key {key_id} does not verify under HashiCorp's partners key: {reason}"
    )]
    BadTrustSignature { key_id: String, reason: String },
    #[error(
        "{addr} is a HashiCorp provider but its SHA256SUMS is signed by key {key_id}, not HashiCorp's"
    )]
    NotHashicorp { addr: String, key_id: String },
}

impl TrustError {
    /// The `reason` label of `provender_verification_failures_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            TrustError::NoKeys => "signature_missing_keys",
            TrustError::MalformedSignature(_) => "signature_malformed",
            TrustError::BadSigningKey { .. } => "signing_key_invalid",
            TrustError::BadSignature { .. } => "signature_invalid",
            TrustError::UnknownIssuer { .. } => "signature_unknown_key",
            TrustError::BadTrustSignature { .. } => "trust_signature_invalid",
            TrustError::NotHashicorp { .. } => "signature_not_hashicorp",
        }
    }
}

/// Public keys parsed from armored text.
struct Keyring {
    keys: Vec<SignedPublicKey>,
}

/// What checking a signature against a keyring found.
enum Check {
    /// Verified; the long ID of the primary key.
    Verified(String),
    /// No key in the ring issued the signature.
    UnknownIssuer,
    /// A key in the ring issued it, but it does not verify.
    Invalid(String, String),
}

/// Why armored text is not a usable set of OpenPGP public keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("larger than {MAX_ARMOR_LEN} bytes")]
    TooLarge,
    /// The OpenPGP parser's complaint (kept as text: [`TrustError`] is cloned to every waiting
    /// client, and the parser's error cannot be).
    #[error("not an OpenPGP key: {0}")]
    NotAKey(String),
    #[error("holds no public key")]
    Empty,
}

impl Keyring {
    fn parse(armor: &str) -> Result<Keyring, KeyError> {
        if armor.len() > MAX_ARMOR_LEN {
            return Err(KeyError::TooLarge);
        }
        let not_a_key = |e: pgp::errors::Error| KeyError::NotAKey(e.to_string());
        let (keys, _) = SignedPublicKey::from_string_many(armor).map_err(not_a_key)?;
        let keys: Vec<SignedPublicKey> = keys.collect::<Result<_, _>>().map_err(not_a_key)?;
        if keys.is_empty() {
            return Err(KeyError::Empty);
        }
        Ok(Keyring { keys })
    }

    /// Verifies a signature with whichever key (primary or bound subkey) issued it.
    fn check(&self, sig: &DetachedSignature, data: &[u8]) -> Check {
        let issuers = sig.signature.issuer();
        let fingerprints = sig.signature.issuer_fingerprint();
        for key in &self.keys {
            let key_id = long_id(&key.primary_key);
            let issued = |k: &dyn PublicKeyTrait| {
                issuers.iter().any(|i| **i == k.key_id())
                    || fingerprints.iter().any(|f| **f == k.fingerprint())
            };
            if issued(&key.primary_key) {
                return match sig.verify(&key.primary_key, data) {
                    Ok(()) => Check::Verified(key_id),
                    Err(e) => Check::Invalid(key_id, e.to_string()),
                };
            }
            for sub in &key.public_subkeys {
                if !issued(sub) {
                    continue;
                }
                // A subkey counts only if its owner really bound it.
                if let Err(e) = sub.verify(&key.primary_key) {
                    return Check::Invalid(key_id, format!("subkey binding does not verify: {e}"));
                }
                return match sig.verify(sub, data) {
                    Ok(()) => Check::Verified(key_id),
                    Err(e) => Check::Invalid(key_id, e.to_string()),
                };
            }
        }
        Check::UnknownIssuer
    }
}

fn long_id(key: &impl PublicKeyTrait) -> String {
    hex::encode_upper(key.key_id().as_ref())
}

/// Verifies SHA256SUMS signatures and classifies them.
pub struct Verifier {
    official: Keyring,
    partners: Keyring,
}

impl Verifier {
    /// The verifier with HashiCorp's pinned keys.
    pub fn hashicorp() -> &'static Verifier {
        static V: OnceLock<Verifier> = OnceLock::new();
        V.get_or_init(|| {
            Verifier::new(HASHICORP_KEY, HASHICORP_PARTNERS_KEY)
                .expect("the HashiCorp keys built into provender parse")
        })
    }

    /// A verifier with other official and partner keys (tests use throw-away ones).
    pub fn new(official_armor: &str, partners_armor: &str) -> Result<Verifier, KeyError> {
        Ok(Verifier {
            official: Keyring::parse(official_armor)?,
            partners: Keyring::parse(partners_armor)?,
        })
    }

    /// Verifies `signature` over `sums` with the origin's `keys` and classifies it.
    pub fn verify(
        &self,
        addr: &ProviderAddr,
        sums: &[u8],
        signature: &[u8],
        keys: &[SigningKey],
    ) -> Result<Trust, TrustError> {
        if keys.is_empty() {
            return Err(TrustError::NoKeys);
        }
        let sig = DetachedSignature::from_bytes(signature)
            .map_err(|e| TrustError::MalformedSignature(e.to_string()))?;
        if !matches!(
            sig.signature.typ(),
            Some(SignatureType::Binary | SignatureType::Text)
        ) {
            return Err(TrustError::MalformedSignature(
                "not a signature over a document".into(),
            ));
        }
        if sig.signature.issuer().is_empty() && sig.signature.issuer_fingerprint().is_empty() {
            return Err(TrustError::MalformedSignature(
                "the signature names no issuer".into(),
            ));
        }
        let mut signer = None;
        for (index, key) in keys.iter().take(MAX_KEYS).enumerate() {
            let ring = Keyring::parse(&key.ascii_armor)
                .map_err(|reason| TrustError::BadSigningKey { index, reason })?;
            match ring.check(&sig, sums) {
                Check::Verified(key_id) => {
                    signer = Some((key, key_id));
                    break;
                }
                Check::UnknownIssuer => continue,
                Check::Invalid(key_id, reason) => {
                    return Err(TrustError::BadSignature { key_id, reason });
                }
            }
        }
        let Some((key, key_id)) = signer else {
            let issuer = sig
                .signature
                .issuer()
                .first()
                .map(|i| hex::encode_upper(i.as_ref()))
                .or_else(|| {
                    sig.signature
                        .issuer_fingerprint()
                        .first()
                        .map(|f| format!("{f:X}"))
                })
                .unwrap_or_default();
            return Err(TrustError::UnknownIssuer { issuer });
        };

        if matches!(self.official.check(&sig, sums), Check::Verified(_)) {
            return Ok(Trust {
                kind: SignatureKind::Official,
                key_id: Some(key_id),
            });
        }
        if is_hashicorp_provider(addr) {
            return Err(TrustError::NotHashicorp {
                addr: addr.to_string(),
                key_id,
            });
        }
        if !key.trust_signature.trim().is_empty() {
            self.check_trust_signature(key, &key_id)?;
            return Ok(Trust {
                kind: SignatureKind::Partner,
                key_id: Some(key_id),
            });
        }
        Ok(Trust {
            kind: SignatureKind::Community,
            key_id: Some(key_id),
        })
    }

    /// A partner's key carries HashiCorp's detached signature over the key's binary form.
    fn check_trust_signature(&self, key: &SigningKey, key_id: &str) -> Result<(), TrustError> {
        let bad = |reason: String| TrustError::BadTrustSignature {
            key_id: key_id.to_string(),
            reason,
        };
        if key.trust_signature.len() > MAX_ARMOR_LEN {
            return Err(bad(format!("larger than {MAX_ARMOR_LEN} bytes")));
        }
        let author = dearmor(&key.ascii_armor)
            .map_err(|e| bad(format!("cannot decode the signing key's armor: {e}")))?;
        let (sig, _) = DetachedSignature::from_string(&key.trust_signature)
            .map_err(|e| bad(format!("not an armored OpenPGP signature: {e}")))?;
        match self.partners.check(&sig, &author) {
            Check::Verified(_) => Ok(()),
            Check::UnknownIssuer => Err(bad("it was not made by the partners key".into())),
            Check::Invalid(_, reason) => Err(bad(reason)),
        }
    }
}

/// The operator's trust rules, from the configuration: `upstream.require_signature` (with its
/// per-host overrides) and `upstream.min_trust`.
#[derive(Debug, Clone)]
pub struct TrustPolicy {
    /// Refuse versions whose origin lists no signing keys.
    pub require_signature: bool,
    /// Per-host overrides of `require_signature`.
    pub require_signature_for: BTreeMap<Hostname, bool>,
    /// The weakest level admitted or served; `None`: every level.
    pub min_trust: Option<SignatureKind>,
}

impl Default for TrustPolicy {
    fn default() -> Self {
        TrustPolicy {
            require_signature: true,
            require_signature_for: BTreeMap::new(),
            min_trust: None,
        }
    }
}

/// Why a provider version or archive is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0}")]
    Signature(TrustError),
    #[error(
        "the origin lists no signing keys, so SHA256SUMS cannot be verified (upstream.require_signature)"
    )]
    NoKeys,
    #[error("SHA256SUMS lists {listed} for {filename} but the download metadata says {claimed}")]
    ShasumsMismatch {
        filename: String,
        listed: String,
        claimed: String,
    },
    #[error("SHA256SUMS has no line for {filename}")]
    ShasumsMissing { filename: String },
    #[error(
        "{addr} is a HashiCorp provider: only archives signed with HashiCorp's key are admitted, \
         and this one is {kind}"
    )]
    NotHashicorpSigned { addr: String, kind: SignatureKind },
    #[error("{addr} is {kind}, below the configured upstream.min_trust ({min})")]
    BelowMinTrust {
        addr: String,
        kind: SignatureKind,
        min: SignatureKind,
    },
}

impl Refusal {
    /// The `reason` label of `provender_verification_failures_total`, or for a policy refusal
    /// the `rule` label of `provender_policy_refusals_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Signature(e) => e.reason(),
            Refusal::NoKeys => TrustError::NoKeys.reason(),
            Refusal::ShasumsMismatch { .. } => "shasums_mismatch",
            Refusal::ShasumsMissing { .. } => "shasums_missing",
            Refusal::NotHashicorpSigned { .. } => "signature_not_hashicorp",
            Refusal::BelowMinTrust { .. } => "min_trust",
        }
    }

    /// Whether this is the operator's policy (a refusal, not a failed check of the origin).
    pub fn is_policy(&self) -> bool {
        matches!(self, Refusal::BelowMinTrust { .. })
    }
}

impl TrustPolicy {
    /// Whether versions from this registry host must carry a verifiable signature.
    pub fn signature_required(&self, host: &Hostname) -> bool {
        self.require_signature_for
            .get(host)
            .copied()
            .unwrap_or(self.require_signature)
    }

    /// Whether an archive of `addr` whose origin signature is `kind` may be admitted or served:
    /// a `hashicorp/*` provider of `registry.terraform.io` only with HashiCorp's signature,
    /// anything only at `upstream.min_trust` or above.
    pub fn admit(&self, addr: &ProviderAddr, kind: SignatureKind) -> Result<(), Refusal> {
        if is_hashicorp_provider(addr) && kind != SignatureKind::Official {
            return Err(Refusal::NotHashicorpSigned {
                addr: addr.to_string(),
                kind,
            });
        }
        match self.min_trust {
            Some(min) if kind < min => Err(Refusal::BelowMinTrust {
                addr: addr.to_string(),
                kind,
                min,
            }),
            _ => Ok(()),
        }
    }

    /// Verifies one SHA256SUMS file of a provider version: its detached signature under the
    /// signing keys of the `packages` that refer to it (or, without keys, the
    /// `require_signature` rule), then that it lists every package's `shasum` for its file
    /// name, then [`TrustPolicy::admit`]. Returns how the signature was classified.
    pub fn verify_sums<'a>(
        &self,
        verifier: &Verifier,
        addr: &ProviderAddr,
        sums: &[u8],
        signature: &[u8],
        packages: impl IntoIterator<Item = &'a Package> + Clone,
    ) -> Result<Trust, Refusal> {
        let mut keys: Vec<SigningKey> = Vec::new();
        for pkg in packages.clone() {
            for key in &pkg.signing_keys {
                if !keys.contains(key) {
                    keys.push(key.clone());
                }
            }
        }
        let trust = match verifier.verify(addr, sums, signature, &keys) {
            Ok(trust) => trust,
            Err(TrustError::NoKeys) if self.signature_required(&addr.hostname) => {
                return Err(Refusal::NoKeys);
            }
            Err(TrustError::NoKeys) => Trust {
                kind: SignatureKind::Unsigned,
                key_id: None,
            },
            Err(e) => return Err(Refusal::Signature(e)),
        };
        for pkg in packages {
            match sums_lookup(sums, &pkg.filename) {
                Some(listed) if listed == pkg.shasum => {}
                Some(listed) => {
                    return Err(Refusal::ShasumsMismatch {
                        filename: pkg.filename.clone(),
                        listed,
                        claimed: pkg.shasum.clone(),
                    });
                }
                None => {
                    return Err(Refusal::ShasumsMissing {
                        filename: pkg.filename.clone(),
                    });
                }
            }
        }
        self.admit(addr, trust.kind)?;
        Ok(trust)
    }
}

/// Finds the SHA-256 (lowercase hex) that a SHA256SUMS file lists for `filename`.
/// Lines are `<hex>  <name>` or `<hex> *<name>`; blank and malformed lines are ignored.
pub fn sums_lookup(sums: &[u8], filename: &str) -> Option<String> {
    let text = std::str::from_utf8(sums).ok()?;
    text.lines().find_map(|line| {
        let line = line.trim_end_matches('\r');
        let (hash, rest) = line.split_once(' ')?;
        let name = rest.strip_prefix(' ').or_else(|| rest.strip_prefix('*'))?;
        (name == filename && hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| hash.to_ascii_lowercase())
    })
}

/// The binary body of the first armored block in `armor`.
fn dearmor(armor: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    pgp::armor::Dearmor::new(armor.as_bytes())
        .take(MAX_ARMOR_LEN as u64)
        .read_to_end(&mut out)?;
    Ok(out)
}

/// `registry.terraform.io/hashicorp/*`: providers that must carry HashiCorp's signature.
pub fn is_hashicorp_provider(addr: &ProviderAddr) -> bool {
    addr.hostname.as_str() == "registry.terraform.io" && addr.namespace == "hashicorp"
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMS: &[u8] = include_bytes!("trust/testdata/sums");

    fn key(name: &str) -> SigningKey {
        let armor = match name {
            "author" => include_str!("trust/testdata/author.asc"),
            "partners" => include_str!("trust/testdata/partners.asc"),
            "unlisted" => include_str!("trust/testdata/unlisted.asc"),
            "expired" => include_str!("trust/testdata/expired.asc"),
            "subkey" => include_str!("trust/testdata/subkey.asc"),
            _ => unreachable!("{name}"),
        };
        SigningKey {
            key_id: String::new(),
            ascii_armor: armor.to_string(),
            trust_signature: String::new(),
        }
    }

    fn sig(name: &str) -> &'static [u8] {
        match name {
            "author" => include_bytes!("trust/testdata/author.sig"),
            "unlisted" => include_bytes!("trust/testdata/unlisted.sig"),
            "expired" => include_bytes!("trust/testdata/expired.sig"),
            "subkey" => include_bytes!("trust/testdata/subkey.sig"),
            "armored" => include_bytes!("trust/testdata/armored.asc"),
            _ => unreachable!("{name}"),
        }
    }

    fn acme() -> ProviderAddr {
        ProviderAddr::parse("registry.terraform.io/acme/x").unwrap()
    }

    /// Official = `unlisted` (a stand-in for HashiCorp's key), partners = `partners`.
    fn verifier() -> Verifier {
        Verifier::new(&key("unlisted").ascii_armor, &key("partners").ascii_armor).unwrap()
    }

    #[test]
    fn community_signature_verifies() {
        let t = verifier()
            .verify(&acme(), SUMS, sig("author"), &[key("author")])
            .unwrap();
        assert_eq!(t.kind, SignatureKind::Community);
        assert_eq!(t.key_id.as_deref(), Some("B60F7901FDC5AC9E"));
    }

    #[test]
    fn keys_are_tried_in_turn() {
        let t = verifier()
            .verify(
                &acme(),
                SUMS,
                sig("author"),
                &[key("partners"), key("expired"), key("author")],
            )
            .unwrap();
        assert_eq!(t.key_id.as_deref(), Some("B60F7901FDC5AC9E"));
    }

    #[test]
    fn altered_document_is_refused() {
        let mut altered = SUMS.to_vec();
        altered.extend_from_slice(
            b"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb  evil.zip\n",
        );
        let err = verifier()
            .verify(&acme(), &altered, sig("author"), &[key("author")])
            .unwrap_err();
        assert_eq!(err.reason(), "signature_invalid", "{err}");
        let mut flipped = SUMS.to_vec();
        flipped[0] = b'b';
        assert!(
            verifier()
                .verify(&acme(), &flipped, sig("author"), &[key("author")])
                .is_err()
        );
    }

    #[test]
    fn signature_by_an_unlisted_key_is_refused() {
        let err = verifier()
            .verify(
                &acme(),
                SUMS,
                sig("unlisted"),
                &[key("author"), key("partners")],
            )
            .unwrap_err();
        assert_eq!(err.reason(), "signature_unknown_key");
        assert!(err.to_string().contains("EE72F7B74F8DAC8B"), "{err}");
    }

    #[test]
    fn expired_keys_are_tolerated() {
        let t = verifier()
            .verify(&acme(), SUMS, sig("expired"), &[key("expired")])
            .unwrap();
        assert_eq!(t.kind, SignatureKind::Community);
        assert_eq!(t.key_id.as_deref(), Some("DE8B20D784930EDC"));
    }

    #[test]
    fn signing_subkeys_count_for_their_primary_key() {
        let t = verifier()
            .verify(&acme(), SUMS, sig("subkey"), &[key("subkey")])
            .unwrap();
        assert_eq!(t.key_id.as_deref(), Some("1554D55FF5905D29"));
    }

    #[test]
    fn partner_and_official_classification() {
        let mut author = key("author");
        author.trust_signature = include_str!("trust/testdata/author.trust.asc").to_string();
        let t = verifier()
            .verify(&acme(), SUMS, sig("author"), std::slice::from_ref(&author))
            .unwrap();
        assert_eq!(t.kind, SignatureKind::Partner);

        // A trust signature by anyone but the partners key is an error, as in the CLI.
        let by_other =
            Verifier::new(&key("unlisted").ascii_armor, &key("expired").ascii_armor).unwrap();
        let err = by_other
            .verify(&acme(), SUMS, sig("author"), &[author])
            .unwrap_err();
        assert_eq!(err.reason(), "trust_signature_invalid");

        let t = verifier()
            .verify(&acme(), SUMS, sig("unlisted"), &[key("unlisted")])
            .unwrap();
        assert_eq!(t.kind, SignatureKind::Official);
        let hashicorp = ProviderAddr::parse("hashicorp/random").unwrap();
        let t = verifier()
            .verify(&hashicorp, SUMS, sig("unlisted"), &[key("unlisted")])
            .unwrap();
        assert_eq!(t.kind, SignatureKind::Official);
    }

    #[test]
    fn hashicorp_providers_need_hashicorps_key() {
        let hashicorp = ProviderAddr::parse("hashicorp/random").unwrap();
        let err = verifier()
            .verify(&hashicorp, SUMS, sig("author"), &[key("author")])
            .unwrap_err();
        assert_eq!(err.reason(), "signature_not_hashicorp");
        // Elsewhere the namespace means nothing.
        let elsewhere = ProviderAddr::parse("registry.opentofu.org/hashicorp/random").unwrap();
        assert!(
            verifier()
                .verify(&elsewhere, SUMS, sig("author"), &[key("author")])
                .is_ok()
        );
    }

    #[test]
    fn hostile_inputs_are_errors() {
        let v = verifier();
        assert_eq!(
            v.verify(&acme(), SUMS, sig("author"), &[]).unwrap_err(),
            TrustError::NoKeys
        );
        for bad_sig in [&b""[..], b"garbage", sig("armored"), &sig("author")[..20]] {
            let err = v
                .verify(&acme(), SUMS, bad_sig, &[key("author")])
                .unwrap_err();
            assert_eq!(err.reason(), "signature_malformed", "{err}");
        }
        let mut junk = key("author");
        junk.ascii_armor = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnonsense\n-----END PGP PUBLIC KEY BLOCK-----\n".into();
        let err = v.verify(&acme(), SUMS, sig("author"), &[junk]).unwrap_err();
        assert_eq!(err.reason(), "signing_key_invalid", "{err}");
        let mut huge = key("author");
        huge.ascii_armor = "A".repeat(MAX_ARMOR_LEN + 1);
        assert!(v.verify(&acme(), SUMS, sig("author"), &[huge]).is_err());
    }

    #[test]
    fn the_pinned_hashicorp_keys_parse() {
        let v = Verifier::hashicorp();
        let ids: Vec<String> = v
            .official
            .keys
            .iter()
            .map(|k| long_id(&k.primary_key))
            .collect();
        assert!(ids.contains(&"34365D9472D7468F".to_string()), "{ids:?}");
        assert!(!v.partners.keys.is_empty());
    }

    #[test]
    fn sums_lookup_finds_the_line() {
        let h = "0123456789abcdef".repeat(4);
        let sums = format!(
            "{h}  a.zip\n\n{}  b.zip\r\nnonsense\n{h} *c.zip\n",
            "f".repeat(64)
        );
        assert_eq!(sums_lookup(sums.as_bytes(), "a.zip"), Some(h.clone()));
        assert_eq!(sums_lookup(sums.as_bytes(), "b.zip"), Some("f".repeat(64)));
        assert_eq!(sums_lookup(sums.as_bytes(), "c.zip"), Some(h));
        assert_eq!(sums_lookup(sums.as_bytes(), "d.zip"), None);
        assert_eq!(sums_lookup(b"\xff\xfe", "a.zip"), None);
    }
}
