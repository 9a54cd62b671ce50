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
//! Two rules are stricter than the CLI:
//!
//! - **Pinned namespaces.** A `hashicorp/*` provider on `registry.terraform.io` must be signed by
//!   the pinned HashiCorp key; `hashicorp/*` and `opentofu/*` on `registry.opentofu.org` (which
//!   rebuilds HashiCorp's providers from OpenTofu's forks and signs them with OpenTofu's provider
//!   key, `0C0AF313E5FD9F80`) must be signed by that pinned OpenTofu key. A compromised or
//!   impersonated origin cannot pass off its own key for them. A signature by the OpenTofu key
//!   counts as official on `registry.opentofu.org` only.
//! - **A signed line names its package.** Every package's file name must be
//!   `terraform-provider-<type>_<version>_<os>_<arch>.zip`, the name every registry requires of
//!   publishers, so that genuinely signed files of another version (a rollback) or another
//!   platform (a relabel) cannot be admitted under this one's name.
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
//!
//! **Private namespaces** (`[publishing]`, [`PrivateNamespaces`]) are the organisation's own:
//! their versions are published to this registry, never fetched, and their SHA256SUMS is signed
//! with the registry's provider signing key ([`signer::RegistryKey`]). A verified signature over
//! a private provider's SHA256SUMS is classified [`SignatureKind::Private`], and only that level
//! is admitted for a private namespace, nor anywhere else.

pub mod signer;
pub mod site;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::packet::SignatureType;
use pgp::types::PublicKeyTrait;

use crate::address::{Hostname, ModuleAddr, Platform, ProviderAddr, Version};
use crate::records::{ModuleTrust, Package, SigningKey};
pub use crate::records::{SignatureKind, Trust, UnknownTrustLevel};

/// HashiCorp's public key, as published at hashicorp.com/security.
const HASHICORP_KEY: &str = include_str!("trust/hashicorp.asc");
/// HashiCorp's key for trust signatures on partner providers' signing keys.
const HASHICORP_PARTNERS_KEY: &str = include_str!("trust/hashicorp-partners.asc");
/// OpenTofu's provider signing key (`E3E6E43D84CB852EADB0051D0C0AF313E5FD9F80`), the key the
/// OpenTofu registry lists for its `hashicorp` and `opentofu` namespaces (`keys/o/opentofu/` in
/// its public registry repository).
const OPENTOFU_KEY: &str = include_str!("trust/opentofu.asc");

/// Largest `ascii_armor` or `trust_signature` accepted from an origin.
const MAX_ARMOR_LEN: usize = 256 * 1024;
/// Most signing keys tried for one SHA256SUMS.
const MAX_KEYS: usize = 16;

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
        "{addr} must be signed by {owner}'s pinned key, but its SHA256SUMS is signed by key {key_id}"
    )]
    NotPinned {
        addr: String,
        owner: Owner,
        key_id: String,
    },
    #[error(
        "a release's SHA256SUMS must be signed by {owner}'s pinned key, but it is signed by key {issuer}"
    )]
    ReleaseNotPinned { owner: Owner, issuer: String },
}

/// Checks that armored text holds at least one usable OpenPGP public key.
pub fn check_keys(armor: &str) -> Result<(), KeyError> {
    Keyring::parse(armor).map(|_| ())
}

/// Checks a detached signature over `data` against a set of armored public keys (a private
/// namespace's publishers' keys, `publishing.namespaces.<ns>.keys`). Returns the long ID of the
/// key that signed.
pub fn check_detached(
    armored_keys: &str,
    data: &[u8],
    signature: &[u8],
) -> Result<String, TrustError> {
    let ring = Keyring::parse(armored_keys)
        .map_err(|reason| TrustError::BadSigningKey { index: 0, reason })?;
    let sig = parse_detached(signature)?;
    match ring.check(&sig, data) {
        Check::Verified(key_id) => Ok(key_id),
        Check::Invalid(key_id, reason) => Err(TrustError::BadSignature { key_id, reason }),
        Check::UnknownIssuer => Err(TrustError::UnknownIssuer {
            issuer: issuer_of(&sig),
        }),
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

/// A binary detached signature over a document that names its issuer.
fn parse_detached(signature: &[u8]) -> Result<DetachedSignature, TrustError> {
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
    Ok(sig)
}

/// The issuer a signature names: its key ID, else its fingerprint.
fn issuer_of(sig: &DetachedSignature) -> String {
    sig.signature
        .issuer()
        .first()
        .map(|i| hex::encode_upper(i.as_ref()))
        .or_else(|| {
            sig.signature
                .issuer_fingerprint()
                .first()
                .map(|f| format!("{f:X}"))
        })
        .unwrap_or_default()
}

/// Whose key a pinned namespace must be signed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Hashicorp,
    Opentofu,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Owner::Hashicorp => "HashiCorp",
            Owner::Opentofu => "OpenTofu",
        })
    }
}

/// The key a provider address is pinned to, if any: `registry.terraform.io/hashicorp/*` to
/// HashiCorp's, `registry.opentofu.org/{hashicorp,opentofu}/*` to OpenTofu's.
pub fn pinned_owner(addr: &ProviderAddr) -> Option<Owner> {
    match (addr.hostname.as_str(), addr.namespace.as_str()) {
        ("registry.terraform.io", "hashicorp") => Some(Owner::Hashicorp),
        ("registry.opentofu.org", "hashicorp" | "opentofu") => Some(Owner::Opentofu),
        _ => None,
    }
}

/// Verifies SHA256SUMS signatures and classifies them.
pub struct Verifier {
    official: Keyring,
    opentofu: Keyring,
    partners: Keyring,
}

impl Verifier {
    /// The verifier with the pinned HashiCorp and OpenTofu keys.
    pub fn hashicorp() -> &'static Verifier {
        static V: OnceLock<Verifier> = OnceLock::new();
        V.get_or_init(|| {
            Verifier::with_opentofu(HASHICORP_KEY, HASHICORP_PARTNERS_KEY, OPENTOFU_KEY)
                .expect("the keys built into provender parse")
        })
    }

    /// The verifier of CLI releases: the built-in HashiCorp and OpenTofu keys, or the armored
    /// keys an operator put in their place.
    pub fn for_releases(
        hashicorp: Option<&str>,
        opentofu: Option<&str>,
    ) -> Result<Verifier, KeyError> {
        Verifier::with_opentofu(
            hashicorp.unwrap_or(HASHICORP_KEY),
            HASHICORP_PARTNERS_KEY,
            opentofu.unwrap_or(OPENTOFU_KEY),
        )
    }

    /// A verifier with other official and partner keys (tests use throw-away ones), and the
    /// built-in OpenTofu key.
    pub fn new(official_armor: &str, partners_armor: &str) -> Result<Verifier, KeyError> {
        Verifier::with_opentofu(official_armor, partners_armor, OPENTOFU_KEY)
    }

    /// A verifier with other official, partner and OpenTofu keys.
    pub fn with_opentofu(
        official_armor: &str,
        partners_armor: &str,
        opentofu_armor: &str,
    ) -> Result<Verifier, KeyError> {
        Ok(Verifier {
            official: Keyring::parse(official_armor)?,
            opentofu: Keyring::parse(opentofu_armor)?,
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
        let sig = parse_detached(signature)?;
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
            return Err(TrustError::UnknownIssuer {
                issuer: issuer_of(&sig),
            });
        };

        let owner = pinned_owner(addr);
        let by_opentofu = || {
            addr.hostname.as_str() == "registry.opentofu.org"
                && matches!(self.opentofu.check(&sig, sums), Check::Verified(_))
        };
        let official = match owner {
            Some(Owner::Opentofu) => by_opentofu(),
            Some(Owner::Hashicorp) => matches!(self.official.check(&sig, sums), Check::Verified(_)),
            None => matches!(self.official.check(&sig, sums), Check::Verified(_)) || by_opentofu(),
        };
        if official {
            return Ok(Trust {
                kind: SignatureKind::Official,
                key_id: Some(key_id),
            });
        }
        if let Some(owner) = owner {
            return Err(TrustError::NotPinned {
                addr: addr.to_string(),
                owner,
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

    /// Verifies the SHA256SUMS signature of a CLI release against its vendor's pinned key alone
    /// (HashiCorp's for Terraform, OpenTofu's for tofu): no other key counts, whatever an
    /// origin offers. Returns the long ID of the key that signed.
    pub fn verify_release(
        &self,
        owner: Owner,
        sums: &[u8],
        signature: &[u8],
    ) -> Result<String, TrustError> {
        let sig = parse_detached(signature)?;
        let ring = match owner {
            Owner::Hashicorp => &self.official,
            Owner::Opentofu => &self.opentofu,
        };
        match ring.check(&sig, sums) {
            Check::Verified(key_id) => Ok(key_id),
            Check::Invalid(key_id, reason) => Err(TrustError::BadSignature { key_id, reason }),
            Check::UnknownIssuer => Err(TrustError::ReleaseNotPinned {
                owner,
                issuer: issuer_of(&sig),
            }),
        }
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
    /// The namespaces published here rather than fetched.
    pub private: PrivateNamespaces,
}

/// The namespaces of this registry's own hostname that are published here (`[publishing]`):
/// the organisation's own providers and modules, never fetched from an origin.
#[derive(Debug, Clone, Default)]
pub struct PrivateNamespaces {
    /// The hostname sources name them under (`publishing.hostname`).
    pub hostname: Option<Hostname>,
    /// Lowercase namespace names.
    pub namespaces: std::collections::BTreeSet<String>,
}

impl PrivateNamespaces {
    /// Whether `namespace` under `hostname` is private.
    pub fn contains(&self, hostname: &Hostname, namespace: &str) -> bool {
        self.hostname.as_ref() == Some(hostname)
            && self.namespaces.contains(&namespace.to_ascii_lowercase())
    }

    /// Whether a provider is in a private namespace.
    pub fn has_provider(&self, addr: &ProviderAddr) -> bool {
        self.contains(&addr.hostname, &addr.namespace)
    }

    /// Whether a module is in a private namespace.
    pub fn has_module(&self, addr: &ModuleAddr) -> bool {
        self.contains(&addr.hostname, &addr.namespace)
    }
}

impl Default for TrustPolicy {
    fn default() -> Self {
        TrustPolicy {
            require_signature: true,
            require_signature_for: BTreeMap::new(),
            min_trust: None,
            private: PrivateNamespaces::default(),
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
        "{addr} is pinned to {owner}'s key: only archives signed with it are admitted, and this \
         one is {kind}"
    )]
    NotPinnedSigned {
        addr: String,
        owner: Owner,
        kind: SignatureKind,
    },
    #[error(
        "the download metadata names the file {found}, but this package is {expected}: \
         signed files of another version or platform are not admitted under its name"
    )]
    WrongFilename { expected: String, found: String },
    #[error("{addr} is {kind}, below the configured upstream.min_trust ({min})")]
    BelowMinTrust {
        addr: String,
        kind: SignatureKind,
        min: SignatureKind,
    },
    #[error(
        "module {addr} was imported unverified, and upstream.min_trust ({min}) admits no \
         unverified module packages"
    )]
    UnverifiedModule { addr: String, min: SignatureKind },
    #[error(
        "{addr} is in a private namespace (publishing.namespaces): only what was published here \
         and signed with the registry's key is admitted, and this is {kind}"
    )]
    NotPublished { addr: String, kind: String },
    #[error(
        "{addr} is recorded as published here, but its namespace is not private \
         (publishing.namespaces)"
    )]
    NotPrivate { addr: String },
}

impl Refusal {
    /// Whether this is the operator's policy (a refusal, not a failed check of the origin).
    pub fn is_policy(&self) -> bool {
        matches!(
            self,
            Refusal::BelowMinTrust { .. }
                | Refusal::UnverifiedModule { .. }
                | Refusal::NotPublished { .. }
                | Refusal::NotPrivate { .. }
        )
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
    /// a provider of a pinned namespace ([`pinned_owner`]) only with its owner's signature,
    /// anything only at `upstream.min_trust` or above.
    pub fn admit(&self, addr: &ProviderAddr, kind: SignatureKind) -> Result<(), Refusal> {
        let private = self.private.has_provider(addr);
        if let Some(decided) = private_rule(private, kind == SignatureKind::Private, addr, &kind) {
            return decided;
        }
        if let Some(owner) = pinned_owner(addr)
            && kind != SignatureKind::Official
        {
            return Err(Refusal::NotPinnedSigned {
                addr: addr.to_string(),
                owner,
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

    /// Whether a module package obtained as `trust` may be admitted or served. Module packages
    /// carry no signatures, so `upstream.min_trust` (any level above `unverified`) refuses only
    /// those imported unverified.
    pub fn admit_module(&self, addr: &ModuleAddr, trust: ModuleTrust) -> Result<(), Refusal> {
        let private = self.private.has_module(addr);
        if let Some(decided) = private_rule(private, trust == ModuleTrust::Private, addr, &trust) {
            return decided;
        }
        match self.min_trust {
            Some(min) if min > SignatureKind::Unverified && trust == ModuleTrust::Unverified => {
                Err(Refusal::UnverifiedModule {
                    addr: addr.to_string(),
                    min,
                })
            }
            _ => Ok(()),
        }
    }

    /// Verifies one SHA256SUMS file of `version` of a provider: that each of the `packages`
    /// that refer to it is named for it (`terraform-provider-<type>_<version>_<os>_<arch>.zip`, as every registry
    /// requires of publishers), the detached
    /// signature under their signing keys (or, without keys, the `require_signature` rule),
    /// then that it lists every package's `shasum` for its file name, then
    /// [`TrustPolicy::admit`]. Returns how the signature was classified.
    pub fn verify_sums<'a>(
        &self,
        verifier: &Verifier,
        addr: &ProviderAddr,
        version: &Version,
        sums: &[u8],
        signature: &[u8],
        packages: impl IntoIterator<Item = (&'a Platform, &'a Package)> + Clone,
    ) -> Result<Trust, Refusal> {
        for (platform, pkg) in packages.clone() {
            pkg.check_name(addr, version, platform)
                .map_err(|m| Refusal::WrongFilename {
                    expected: m.expected,
                    found: m.found,
                })?;
        }
        let mut keys: Vec<SigningKey> = Vec::new();
        for (_, pkg) in packages.clone() {
            for key in &pkg.signing_keys {
                if !keys.contains(key) {
                    keys.push(key.clone());
                }
            }
        }
        let trust = match verifier.verify(addr, sums, signature, &keys) {
            // What the registry itself signed for a private namespace: the one level admitted
            // there (`admit`). Its keys are the registry's own (publishing writes them), or a
            // trusted site's for what `import` carries over an air gap.
            Ok(trust) if self.private.has_provider(addr) => Trust {
                kind: SignatureKind::Private,
                key_id: trust.key_id,
            },
            Ok(trust) => trust,
            Err(TrustError::NoKeys) if self.private.has_provider(addr) => {
                return Err(Refusal::NoKeys);
            }
            Err(TrustError::NoKeys) if self.signature_required(&addr.hostname) => {
                return Err(Refusal::NoKeys);
            }
            Err(TrustError::NoKeys) => Trust {
                kind: SignatureKind::Unsigned,
                key_id: None,
            },
            Err(e) => return Err(Refusal::Signature(e)),
        };
        for (_, pkg) in packages {
            match sums_lookup(sums, &pkg.filename) {
                Some(listed) if listed == pkg.shasum => {}
                Some(listed) => {
                    return Err(Refusal::ShasumsMismatch {
                        filename: pkg.filename.clone(),
                        listed,
                        claimed: pkg.shasum.to_string(),
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

/// The rule of private namespaces, which decides alone where it applies: a private namespace
/// admits only what was published there, and what was published is admitted nowhere else.
/// `None` when neither is the case.
fn private_rule(
    in_private_namespace: bool,
    published: bool,
    addr: &dyn std::fmt::Display,
    kind: &dyn std::fmt::Display,
) -> Option<Result<(), Refusal>> {
    match (in_private_namespace, published) {
        (true, true) => Some(Ok(())),
        (true, false) => Some(Err(Refusal::NotPublished {
            addr: addr.to_string(),
            kind: kind.to_string(),
        })),
        (false, true) => Some(Err(Refusal::NotPrivate {
            addr: addr.to_string(),
        })),
        (false, false) => None,
    }
}

/// Finds the SHA-256 (lowercase hex) that a SHA256SUMS file lists for `filename`.
/// Lines are `<hex>  <name>` or `<hex> *<name>`; blank and malformed lines are ignored.
pub fn sums_lookup(sums: &[u8], filename: &str) -> Option<String> {
    let text = std::str::from_utf8(sums).ok()?;
    text.lines().find_map(|line| {
        let (hash, name) = sums_line(line)?;
        (name == filename && hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| hash.to_ascii_lowercase())
    })
}

/// One SHA256SUMS line split into its hash and file name (`<hash>  <name>` or
/// `<hash> *<name>`, a trailing CR ignored); `None` for a line of another shape. The hash is
/// not checked here.
pub fn sums_line(line: &str) -> Option<(&str, &str)> {
    let line = line.trim_end_matches('\r');
    let (hash, rest) = line.split_once(' ')?;
    let name = rest.strip_prefix(' ').or_else(|| rest.strip_prefix('*'))?;
    Some((hash, name))
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

    #[test]
    fn a_private_namespace_admits_what_was_published_and_nothing_else() {
        let policy = TrustPolicy {
            min_trust: Some(SignatureKind::Official),
            private: PrivateNamespaces {
                hostname: Some(Hostname::parse("mirror.example.com").unwrap()),
                namespaces: ["acme".to_string()].into(),
            },
            ..TrustPolicy::default()
        };
        let private = ProviderAddr::new("mirror.example.com", "ACME", "foo").unwrap();
        let mirrored = ProviderAddr::new("registry.terraform.io", "acme", "foo").unwrap();
        let other_ns = ProviderAddr::new("mirror.example.com", "other", "foo").unwrap();
        assert_eq!(policy.admit(&private, SignatureKind::Private), Ok(()));
        assert!(matches!(
            policy.admit(&private, SignatureKind::Official),
            Err(Refusal::NotPublished { .. })
        ));
        assert!(matches!(
            policy.admit(&mirrored, SignatureKind::Private),
            Err(Refusal::NotPrivate { .. })
        ));
        assert!(matches!(
            policy.admit(&other_ns, SignatureKind::Private),
            Err(Refusal::NotPrivate { .. })
        ));
        // min_trust does not apply to what was published; it still does elsewhere.
        assert!(matches!(
            policy.admit(&mirrored, SignatureKind::Partner),
            Err(Refusal::BelowMinTrust { .. })
        ));
        let module = ModuleAddr::new("mirror.example.com", "acme", "vpc", "aws").unwrap();
        assert_eq!(policy.admit_module(&module, ModuleTrust::Private), Ok(()));
        assert!(policy.admit_module(&module, ModuleTrust::Origin).is_err());
    }

    fn acme() -> ProviderAddr {
        ProviderAddr::parse("registry.terraform.io/acme/x").unwrap()
    }

    /// Official = `unlisted` (a stand-in for HashiCorp's key), partners = `partners`.
    fn verifier() -> Verifier {
        Verifier::new(&key("unlisted").ascii_armor, &key("partners").ascii_armor).unwrap()
    }

    #[test]
    fn a_release_verifies_only_under_its_vendors_pinned_key() {
        // Stand-ins: `unlisted` as HashiCorp's key, `author` as OpenTofu's.
        let pins = Verifier::with_opentofu(
            &key("unlisted").ascii_armor,
            &key("partners").ascii_armor,
            &key("author").ascii_armor,
        )
        .unwrap();
        let signer = pins
            .verify_release(Owner::Hashicorp, SUMS, sig("unlisted"))
            .unwrap();
        assert!(signer.len() == 16 && signer.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(
            pins.verify_release(Owner::Opentofu, SUMS, sig("author")),
            Ok("B60F7901FDC5AC9E".to_string())
        );
        // Each vendor's releases only under its own key.
        let err = pins
            .verify_release(Owner::Hashicorp, SUMS, sig("author"))
            .unwrap_err();
        assert!(
            matches!(
                err,
                TrustError::ReleaseNotPinned {
                    owner: Owner::Hashicorp,
                    ..
                }
            ),
            "{err}"
        );
        assert!(matches!(
            pins.verify_release(Owner::Opentofu, SUMS, sig("unlisted")),
            Err(TrustError::ReleaseNotPinned { .. })
        ));
        // An altered document fails under the right key.
        let mut altered = SUMS.to_vec();
        altered[0] ^= 1;
        assert!(matches!(
            pins.verify_release(Owner::Hashicorp, &altered, sig("unlisted")),
            Err(TrustError::BadSignature { .. })
        ));
    }

    #[test]
    fn the_real_pins_refuse_a_release_signed_by_any_other_key() {
        let real = Verifier::hashicorp();
        for owner in [Owner::Hashicorp, Owner::Opentofu] {
            for signer in ["author", "unlisted", "expired", "subkey"] {
                let err = real.verify_release(owner, SUMS, sig(signer)).unwrap_err();
                assert!(
                    matches!(err, TrustError::ReleaseNotPinned { .. }),
                    "{owner} release signed by {signer}: {err}"
                );
            }
        }
        assert!(matches!(
            real.verify_release(Owner::Hashicorp, SUMS, b"not a signature"),
            Err(TrustError::MalformedSignature(_))
        ));
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
        assert!(matches!(err, TrustError::BadSignature { .. }), "{err}");
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
        assert!(matches!(err, TrustError::UnknownIssuer { .. }), "{err}");
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
        assert!(matches!(err, TrustError::BadTrustSignature { .. }), "{err}");

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
    fn pinned_namespaces_need_their_owners_key() {
        let hashicorp = ProviderAddr::parse("hashicorp/random").unwrap();
        let err = verifier()
            .verify(&hashicorp, SUMS, sig("author"), &[key("author")])
            .unwrap_err();
        assert!(
            matches!(
                err,
                TrustError::NotPinned {
                    owner: Owner::Hashicorp,
                    ..
                }
            ),
            "{err}"
        );
        // OpenTofu's registry: its own key (`expired` stands in for it here), nobody else's,
        // not even HashiCorp's.
        let tofu = Verifier::with_opentofu(
            &key("unlisted").ascii_armor,
            &key("partners").ascii_armor,
            &key("expired").ascii_armor,
        )
        .unwrap();
        for ns in ["hashicorp", "opentofu"] {
            let addr = ProviderAddr::parse(&format!("registry.opentofu.org/{ns}/random")).unwrap();
            let t = tofu
                .verify(&addr, SUMS, sig("expired"), &[key("expired")])
                .unwrap();
            assert_eq!(t.kind, SignatureKind::Official, "{addr}");
            for other in ["author", "unlisted"] {
                let err = tofu
                    .verify(&addr, SUMS, sig(other), &[key(other)])
                    .unwrap_err();
                assert!(
                    matches!(
                        err,
                        TrustError::NotPinned {
                            owner: Owner::Opentofu,
                            ..
                        }
                    ),
                    "{addr} by {other}: {err}"
                );
            }
        }
        // OpenTofu's key is official only on OpenTofu's registry; other namespaces there are
        // not pinned.
        let t = tofu
            .verify(&acme(), SUMS, sig("expired"), &[key("expired")])
            .unwrap();
        assert_eq!(t.kind, SignatureKind::Community);
        let other = ProviderAddr::parse("registry.opentofu.org/acme/random").unwrap();
        let t = tofu
            .verify(&other, SUMS, sig("author"), &[key("author")])
            .unwrap();
        assert_eq!(t.kind, SignatureKind::Community);
    }

    #[test]
    fn signed_lines_must_name_their_package() {
        let policy = TrustPolicy::default();
        let addr = ProviderAddr::parse("registry.terraform.io/acme/x").unwrap();
        let version = Version::parse("1.0.0").unwrap();
        let linux = Platform::new("linux", "amd64").unwrap();
        let pkg = Package {
            filename: "terraform-provider-x_1.0.0_linux_amd64.zip".into(),
            shasum: crate::hash::Sha256::parse(&"a".repeat(64)).unwrap(),
            signing_keys: vec![key("author")],
            protocols: Vec::new(),
            download_url: None,
            shasums_url: None,
            shasums_signature_url: None,
            h1: None,
            size: None,
            reported_h1: None,
        };
        let ok = policy.verify_sums(
            &verifier(),
            &addr,
            &version,
            SUMS,
            sig("author"),
            [(&linux, &pkg)],
        );
        assert_eq!(ok.unwrap().kind, SignatureKind::Community);
        // The same genuinely signed line, offered for another version or another platform.
        let newer = Version::parse("2.0.0").unwrap();
        let darwin = Platform::new("darwin", "arm64").unwrap();
        for (version, platform, expected) in [
            (&newer, &linux, "terraform-provider-x_2.0.0_linux_amd64.zip"),
            (
                &version,
                &darwin,
                "terraform-provider-x_1.0.0_darwin_arm64.zip",
            ),
        ] {
            let err = policy
                .verify_sums(
                    &verifier(),
                    &addr,
                    version,
                    SUMS,
                    sig("author"),
                    [(platform, &pkg)],
                )
                .unwrap_err();
            assert_eq!(
                err,
                Refusal::WrongFilename {
                    expected: expected.into(),
                    found: pkg.filename.clone()
                }
            );
        }
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
            assert!(matches!(err, TrustError::MalformedSignature(_)), "{err}");
        }
        let mut junk = key("author");
        junk.ascii_armor = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnonsense\n-----END PGP PUBLIC KEY BLOCK-----\n".into();
        let err = v.verify(&acme(), SUMS, sig("author"), &[junk]).unwrap_err();
        assert!(matches!(err, TrustError::BadSigningKey { .. }), "{err}");
        let mut huge = key("author");
        huge.ascii_armor = "A".repeat(MAX_ARMOR_LEN + 1);
        assert!(v.verify(&acme(), SUMS, sig("author"), &[huge]).is_err());
    }

    #[test]
    fn the_pinned_keys_parse() {
        let v = Verifier::hashicorp();
        let ids: Vec<String> = v
            .official
            .keys
            .iter()
            .map(|k| long_id(&k.primary_key))
            .collect();
        assert!(ids.contains(&"34365D9472D7468F".to_string()), "{ids:?}");
        assert!(!v.partners.keys.is_empty());
        let tofu = long_id(&v.opentofu.keys[0].primary_key);
        assert_eq!(tofu, "0C0AF313E5FD9F80");
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
