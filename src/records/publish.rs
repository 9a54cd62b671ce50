//! What a publication is: the record kept for every provider or module version published to
//! this registry (a private namespace, `[publishing]`), which says who published it, when,
//! and exactly what (its files and their SHA-256), and whether it was withdrawn since.
//!
//! A publication is claimed before anything else is written (a conditional create of its
//! record, `pending`), then its archives or package, then the version's records, then the
//! publication is marked `published`: that last write is what lists it. Publishing the same
//! version again is a no-op when its digest is the same, and a conflict otherwise, so a
//! published version never changes.

use serde::{Deserialize, Serialize};

use crate::address::{ModuleAddr, Platform, ProviderAddr, Version};
use crate::hash::Sha256;

/// One file of a publication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedFile {
    pub name: String,
    pub sha256: Sha256,
    pub size: u64,
}

/// How far a publication got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Claimed; its files may not all be stored yet. Never listed.
    Pending,
    /// Stored and listed (unless yanked).
    Published,
}

/// A version withdrawn from the version lists (still served to whoever names it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Yank {
    pub by: String,
    pub at: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The record of one published version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publication {
    /// `provider` or `module`.
    pub kind: PublishedKind,
    /// `host/namespace/type` or `host/namespace/name/system`.
    pub address: String,
    pub version: Version,
    pub state: State,
    /// The SHA-256 of what was published ([`digest_of`] its files), which a second
    /// publication of the version must equal.
    pub digest: Sha256,
    pub files: Vec<PublishedFile>,
    /// Provider platforms, sorted (none for modules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub platforms: Vec<Platform>,
    /// Provider plugin protocols (from the release's manifest, else `5.0`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protocols: Vec<String>,
    /// The client that published it, as the mirror named it (`<issuer>:<name claim>`, a named
    /// token, `token:<fingerprint>`).
    pub published_by: String,
    /// Unix seconds.
    pub published_at: u64,
    /// The long key ID of the publisher's own signature over SHA256SUMS, when one was given
    /// (checked against the namespace's keys; kept beside the registry's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publisher_key: Option<String>,
    /// That signature itself (base64 of the binary `SHA256SUMS.sig`), kept so that anyone can
    /// check it again against the publisher's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publisher_signature: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yanked: Option<Yank>,
    /// The token of the publisher's claim, on a store that does not enforce conditional
    /// creates (see `cache::Publications::claim`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub claim: String,
}

/// What was published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PublishedKind {
    Provider,
    Module,
}

impl PublishedKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PublishedKind::Provider => "provider",
            PublishedKind::Module => "module",
        }
    }
}

impl Publication {
    /// Whether version lists offer it.
    pub fn listed(&self) -> bool {
        self.state == State::Published && self.yanked.is_none()
    }

    /// The provider it publishes, if it is a provider's.
    pub fn provider(&self) -> Option<ProviderAddr> {
        (self.kind == PublishedKind::Provider && self.address.split('/').count() == 3)
            .then(|| ProviderAddr::parse(&self.address).ok())
            .flatten()
    }

    /// The module it publishes, if it is a module's.
    pub fn module(&self) -> Option<ModuleAddr> {
        (self.kind == PublishedKind::Module && self.address.split('/').count() == 4)
            .then(|| ModuleAddr::parse_in(&self.address, "-").ok())
            .flatten()
    }
}

/// The digest of a set of files: the SHA-256 of their sorted `<sha256>  <name>` lines, so
/// the same files make the same digest however their SHA256SUMS was laid out.
pub fn digest_of(files: &[PublishedFile]) -> Sha256 {
    let mut lines: Vec<String> = files
        .iter()
        .map(|f| format!("{}  {}\n", f.sha256, f.name))
        .collect();
    lines.sort();
    Sha256::of(lines.concat().as_bytes())
}

/// Why a publication is refused: the file or line at fault, and the HTTP status a client gets.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PublishError {
    #[error("{namespace} is not a private namespace of this registry (publishing.namespaces)")]
    NotPrivate { namespace: String },
    #[error("{name}: not a file of a provider release (expected {expected})")]
    UnexpectedFile { name: String, expected: String },
    #[error("{name} is named for another provider, version or platform than {expected}")]
    WrongName { name: String, expected: String },
    #[error("{name} appears twice in the upload")]
    Duplicate { name: String },
    #[error("the upload has no {0}")]
    Missing(String),
    #[error("SHA256SUMS line {line}: {problem}")]
    SumsLine { line: usize, problem: String },
    #[error("SHA256SUMS lists {name}, which is not a file of this release upload")]
    SumsListsOther { name: String },
    #[error("SHA256SUMS does not list {name}")]
    NotListed { name: String },
    #[error("{name}: SHA-256 is {found}, SHA256SUMS lists {listed}")]
    SumsMismatch {
        name: String,
        listed: String,
        found: String,
    },
    #[error("{name}: {reason}")]
    Unusable { name: String, reason: String },
    #[error("{name}: {reason}")]
    Manifest { name: String, reason: String },
    #[error("publisher signature: {0}")]
    Signature(String),
    #[error("the upload is not a tar stream of the release files: {0}")]
    Tar(String),
    #[error("the module archive {0}")]
    Package(String),
    #[error("the upload is larger than publishing.max_upload_size ({limit} bytes)")]
    TooLarge { limit: u64 },
    #[error(
        "{what} is already published with other files (digest {have}; this upload's is {new}): a \
         published version never changes; publish a new version"
    )]
    Conflict {
        what: String,
        have: String,
        new: String,
    },
    #[error("{0} is not published here")]
    NotPublished(String),
    #[error(
        "{what}: {have} is published, and versions that differ only in build metadata are one \
         version to Terraform's and OpenTofu's constraints: a published version never changes; \
         publish a new version"
    )]
    SameVersion { what: String, have: String },
    #[error("refused by this registry's trust policy: {0}")]
    Refused(String),
}

impl PublishError {
    /// The HTTP status a client gets.
    pub fn status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            PublishError::NotPrivate { .. } | PublishError::NotPublished(_) => S::NOT_FOUND,
            PublishError::TooLarge { .. } => S::PAYLOAD_TOO_LARGE,
            PublishError::Conflict { .. } | PublishError::SameVersion { .. } => S::CONFLICT,
            PublishError::Refused(_) => S::UNPROCESSABLE_ENTITY,
            _ => S::BAD_REQUEST,
        }
    }

    /// A stable short code for the JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            PublishError::NotPrivate { .. } | PublishError::NotPublished(_) => "not_found",
            PublishError::TooLarge { .. } => "payload_too_large",
            PublishError::Conflict { .. } | PublishError::SameVersion { .. } => "conflict",
            PublishError::Refused(_) => "refused",
            _ => "bad_publication",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, byte: u8) -> PublishedFile {
        PublishedFile {
            name: name.into(),
            sha256: Sha256::parse(&hex::encode([byte; 32])).unwrap(),
            size: 1,
        }
    }

    #[test]
    fn the_digest_does_not_depend_on_order_but_on_every_byte() {
        let a = [file("a.zip", 1), file("b.zip", 2)];
        let b = [file("b.zip", 2), file("a.zip", 1)];
        assert_eq!(digest_of(&a), digest_of(&b));
        assert_ne!(
            digest_of(&a),
            digest_of(&[file("a.zip", 1), file("b.zip", 3)])
        );
        assert_ne!(digest_of(&a), digest_of(&[file("a.zip", 1)]));
    }
}
