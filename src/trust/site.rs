//! Site keys: the chain of custody of a bundle carried across an air gap.
//!
//! `provender keygen` makes an Ed25519 key pair for a site that exports bundles. `export
//! --bundle` signs the bundle's manifest (its exact bytes) with the site's private key
//! (`bundles.signing_key_file`); `import` accepts the bundle as made by a known site only if the
//! signature verifies under one of `bundles.trusted_keys`. The manifest pins every other byte of
//! the bundle by SHA-256, so one signature covers all of it.
//!
//! Formats: the private key is a PKCS#8 document in a PEM `PRIVATE KEY` block; a public key is
//! one line, `ed25519:<base64 of the 32 key bytes>`; its short id is the first 16 hex digits of
//! the SHA-256 of those bytes.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
use serde::{Deserialize, Serialize};

/// The only algorithm site keys use.
pub const ALGORITHM: &str = "ed25519";
const PEM_LABEL: &str = "PRIVATE KEY";

/// A site's public key, as listed in `bundles.trusted_keys`.
#[derive(Clone, PartialEq, Eq)]
pub struct SitePublicKey([u8; 32]);

impl SitePublicKey {
    /// Parses `ed25519:<base64>`.
    pub fn parse(text: &str) -> Result<SitePublicKey, SiteKeyError> {
        let b64 = text
            .trim()
            .strip_prefix("ed25519:")
            .ok_or_else(|| SiteKeyError::NotAPublicKey(text.to_string()))?;
        let bytes = B64
            .decode(b64)
            .map_err(|source| SiteKeyError::PublicKeyNotBase64 {
                text: text.to_string(),
                source,
            })?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|_| SiteKeyError::PublicKeyLength(text.to_string()))?;
        Ok(SitePublicKey(bytes))
    }

    /// The short id shown in messages: 16 hex digits of the key's SHA-256.
    pub fn id(&self) -> String {
        crate::hash::sha256_hex(&self.0)[..16].to_string()
    }

    fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ED25519, &self.0)
            .verify(message, signature)
            .is_ok()
    }
}

impl std::fmt::Display for SitePublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ed25519:{}", B64.encode(self.0))
    }
}

impl std::fmt::Debug for SitePublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SitePublicKey({})", self.id())
    }
}

/// A site's private key (never printed).
pub struct SiteKey(Ed25519KeyPair);

impl SiteKey {
    /// A new key pair: the private key as PEM, and the key.
    pub fn generate() -> Result<(String, SiteKey), SiteKeyError> {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 =
            Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| SiteKeyError::CannotGenerate)?;
        let key = SiteKey::from_pkcs8(pkcs8.as_ref())?;
        Ok((pem(PEM_LABEL, pkcs8.as_ref()), key))
    }

    /// Reads a private key written by [`SiteKey::generate`] (`provender keygen`).
    pub fn from_pem(text: &str) -> Result<SiteKey, SiteKeyError> {
        let der = unpem(PEM_LABEL, text)?;
        SiteKey::from_pkcs8(&der)
    }

    fn from_pkcs8(der: &[u8]) -> Result<SiteKey, SiteKeyError> {
        Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
            .map(SiteKey)
            .map_err(SiteKeyError::NotPkcs8)
    }

    /// The matching public key.
    pub fn public(&self) -> SitePublicKey {
        let bytes: [u8; 32] = self
            .0
            .public_key()
            .as_ref()
            .try_into()
            .expect("Ed25519 public keys have 32 bytes");
        SitePublicKey(bytes)
    }

    /// Signs a manifest's exact bytes.
    pub fn sign(&self, manifest: &[u8]) -> ManifestSignature {
        ManifestSignature {
            algorithm: ALGORITHM.to_string(),
            public_key: self.public().to_string(),
            signature: B64.encode(self.0.sign(manifest).as_ref()),
        }
    }
}

impl std::fmt::Debug for SiteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SiteKey({})", self.public().id())
    }
}

/// Why a site key (public or private) cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SiteKeyError {
    #[error("{0:?} is not a site public key (ed25519:<base64>, from provender keygen)")]
    NotAPublicKey(String),
    #[error("{text:?}: not base64: {source}")]
    PublicKeyNotBase64 {
        text: String,
        source: base64::DecodeError,
    },
    #[error("{0:?}: an Ed25519 public key has 32 bytes")]
    PublicKeyLength(String),
    #[error("cannot generate an Ed25519 key")]
    CannotGenerate,
    /// The PEM wrapping of a private key: the line that is missing.
    #[error("no {0} line")]
    NoPemLine(String),
    #[error("not base64: {0}")]
    PemNotBase64(base64::DecodeError),
    #[error("not an Ed25519 PKCS#8 private key: {0}")]
    NotPkcs8(ring::error::KeyRejected),
}

/// The signature entry of a bundle (`provender-bundle.json.sig`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestSignature {
    pub algorithm: String,
    /// The signer's public key, `ed25519:<base64>`.
    pub public_key: String,
    /// Base64 of the Ed25519 signature over the manifest's bytes.
    pub signature: String,
}

/// Who vouches for a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Custody {
    /// Signed by a site in `bundles.trusted_keys`; the key's id.
    Trusted(String),
    /// No signature, or one by a key this side does not trust (why, for the message).
    Untrusted(String),
}

/// Why a bundle's signature is refused outright.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CustodyError {
    #[error("the manifest's signature is malformed: {0}")]
    Malformed(String),
    #[error(
        "the manifest's signature by trusted site key {0} does not verify: the bundle was altered \
         after it was signed"
    )]
    Altered(String),
}

impl ManifestSignature {
    /// Checks this signature over `manifest` against the trusted keys.
    pub fn custody(
        &self,
        manifest: &[u8],
        trusted: &[SitePublicKey],
    ) -> Result<Custody, CustodyError> {
        if self.algorithm != ALGORITHM {
            return Err(CustodyError::Malformed(format!(
                "algorithm {:?} is not {ALGORITHM}",
                self.algorithm
            )));
        }
        let key = SitePublicKey::parse(&self.public_key)
            .map_err(|e| CustodyError::Malformed(e.to_string()))?;
        let signature = B64
            .decode(&self.signature)
            .map_err(|e| CustodyError::Malformed(format!("signature is not base64: {e}")))?;
        if !trusted.contains(&key) {
            return Ok(Custody::Untrusted(format!(
                "it is signed by site key {}, which is not in bundles.trusted_keys",
                key.id()
            )));
        }
        if key.verify(manifest, &signature) {
            Ok(Custody::Trusted(key.id()))
        } else {
            Err(CustodyError::Altered(key.id()))
        }
    }
}

fn pem(label: &str, der: &[u8]) -> String {
    let body = B64.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn unpem(label: &str, text: &str) -> Result<Vec<u8>, SiteKeyError> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text
        .find(&begin)
        .ok_or_else(|| SiteKeyError::NoPemLine(begin.clone()))?
        + begin.len();
    let stop = text[start..]
        .find(&end)
        .ok_or_else(|| SiteKeyError::NoPemLine(end.clone()))?
        + start;
    let body: String = text[start..stop]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    B64.decode(body).map_err(SiteKeyError::PemNotBase64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_and_verify_round_trip() {
        let (pem, key) = SiteKey::generate().unwrap();
        let again = SiteKey::from_pem(&pem).unwrap();
        assert_eq!(again.public(), key.public());
        let public = SitePublicKey::parse(&key.public().to_string()).unwrap();
        assert_eq!(public, key.public());

        let sig = key.sign(b"manifest");
        assert_eq!(
            sig.custody(b"manifest", std::slice::from_ref(&public)),
            Ok(Custody::Trusted(public.id()))
        );
        assert_eq!(
            sig.custody(b"manifesT", std::slice::from_ref(&public)),
            Err(CustodyError::Altered(public.id()))
        );
        assert!(matches!(
            sig.custody(b"manifest", &[]),
            Ok(Custody::Untrusted(why)) if why.contains(&public.id())
        ));
        let (_, other) = SiteKey::generate().unwrap();
        let mut forged = other.sign(b"manifest");
        forged.public_key = public.to_string();
        assert_eq!(
            forged.custody(b"manifest", &[public]),
            Err(CustodyError::Altered(key.public().id()))
        );
    }

    #[test]
    fn bad_keys_are_named() {
        assert!(
            SitePublicKey::parse("rsa:abc")
                .unwrap_err()
                .to_string()
                .contains("rsa:abc")
        );
        assert!(
            SitePublicKey::parse("ed25519:AAAA")
                .unwrap_err()
                .to_string()
                .contains("32 bytes")
        );
        assert!(SiteKey::from_pem("nothing").is_err());
        let (_, key) = SiteKey::generate().unwrap();
        assert!(!format!("{key:?}").contains("PRIVATE"));
    }
}
