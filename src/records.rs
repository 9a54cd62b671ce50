//! The typed records provender keeps and the protocol documents it renders, in one place.
//!
//! **Records** are what the cache persists and every layer passes around: a provider's version
//! list ([`IndexRecord`]), everything known about one version ([`VersionRecord`], with a
//! [`Package`] per platform and the [`SumsRef`]s of its checksum files), and the description of
//! a stored archive ([`ArchiveInfo`], keyed by [`ArchiveKey`]); for modules, a version list
//! ([`ModuleVersions`]) and a stored package's description ([`ModuleRecord`], keyed by
//! [`ModuleKey`]). `upstream` produces them from what origins send, `cache` stores them,
//! `mirror` and `ops` read them.
//!
//! **Documents** are the JSON a client is served, rendered from records by the types in
//! [`docs`]: the network mirror protocol's `index.json` and `<version>.json` (also written by
//! `export`, read by `import`) and the registry facade's version list and download metadata;
//! and in [`oci`], a provider version as the OCI documents OpenTofu's `oci_mirror` reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub mod oci;

use crate::address::{ModuleAddr, Platform, ProviderAddr, Version};

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

/// A provider's version list as last fetched from its origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexRecord {
    /// Unix seconds when the origin answered.
    pub fetched_at: u64,
    /// `false`: the origin said it has no such provider (kept only in memory, briefly).
    pub found: bool,
    pub versions: Vec<IndexVersion>,
    /// `index.json` as served.
    #[serde(skip)]
    pub rendered: Rendered,
}

impl IndexRecord {
    /// Adds versions (an import's): a version already listed gains the platforms it lacked,
    /// and its protocols if it had none. Returns whether anything changed.
    pub fn add_versions(&mut self, versions: Vec<IndexVersion>) -> bool {
        let before = self.versions.clone();
        for v in versions {
            match self.versions.iter_mut().find(|x| x.version == v.version) {
                Some(have) => {
                    for p in v.platforms {
                        if !have.platforms.contains(&p) {
                            have.platforms.push(p);
                        }
                    }
                    if have.protocols.is_empty() {
                        have.protocols = v.protocols;
                    }
                }
                None => self.versions.push(v),
            }
        }
        self.versions != before
    }
}

/// A rendering of a record, kept with it. Records are immutable once shared (an update builds a
/// new record), so the memo never goes stale; a clone, which is about to be changed, starts
/// without it, and it takes no part in comparisons or persistence.
#[derive(Default)]
pub struct Rendered(std::sync::OnceLock<bytes::Bytes>);

impl Rendered {
    /// The kept rendering, made by `render` the first time.
    pub fn get_or_init(&self, render: impl FnOnce() -> bytes::Bytes) -> bytes::Bytes {
        self.0.get_or_init(render).clone()
    }
}

impl Clone for Rendered {
    fn clone(&self) -> Rendered {
        Rendered::default()
    }
}

impl PartialEq for Rendered {
    fn eq(&self, _: &Rendered) -> bool {
        true
    }
}

impl Eq for Rendered {}

impl std::fmt::Debug for Rendered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rendered")
    }
}

/// One version in an [`IndexRecord`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexVersion {
    pub version: Version,
    #[serde(default)]
    pub protocols: Vec<String>,
    pub platforms: Vec<Platform>,
}

impl IndexRecord {
    /// The platforms the origin lists for `version`, or `None` if it doesn't list the version.
    pub fn platforms_of(&self, version: &Version) -> Option<&[Platform]> {
        self.versions
            .iter()
            .find(|v| &v.version == version)
            .map(|v| v.platforms.as_slice())
    }

    /// The `index.json` document: `{"versions":{"1.0.0":{},...}}` (rendered once per record).
    pub fn to_mirror_json(&self) -> bytes::Bytes {
        self.rendered
            .get_or_init(|| bytes::Bytes::from(self.render_mirror_json()))
    }

    fn render_mirror_json(&self) -> Vec<u8> {
        docs::to_bytes(&docs::MirrorIndex::of(
            self.versions.iter().map(|v| &v.version),
        ))
        .to_vec()
    }
}

/// Verified download metadata for one platform's package.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    #[serde(default)]
    pub protocols: Vec<String>,
    /// The origin's file name (the one its SHA256SUMS lists).
    pub filename: String,
    pub download_url: String,
    /// Lowercase hex SHA-256, equal to the origin's `shasum` and its SHA256SUMS line.
    pub shasum: String,
    pub shasums_url: String,
    pub shasums_signature_url: String,
    #[serde(default)]
    pub signing_keys: Vec<SigningKey>,
    /// `h1:` hash, once provender has processed the archive.
    #[serde(default)]
    pub h1: Option<String>,
    /// The archive's size in bytes: the stored archive's once there is one, before that what
    /// the origin stated (its registry's `packages` extension, or a `HEAD` of the download
    /// URL). OCI manifests need it before anything is downloaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The `h1:` the origin registry reported in its `packages` extension. Never served as
    /// such: it is compared with the `h1:` computed from the archive once that is hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_h1: Option<String>,
}

/// Everything the mirror knows about one provider version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRecord {
    pub fetched_at: u64,
    /// Platforms the origin lists for this version.
    pub offered: Vec<Platform>,
    /// Listed platforms whose download metadata the origin answered with 404.
    #[serde(default)]
    pub unavailable: Vec<Platform>,
    pub packages: BTreeMap<Platform, Package>,
    /// The distinct SHA256SUMS files the packages refer to, in the order their copies are stored
    /// (`<version>.SHA256SUMS.<n>` and `<version>.SHA256SUMS.<n>.sig`, byte for byte).
    #[serde(default)]
    pub sums: Vec<SumsRef>,
    /// `<version>.json` as served (without per-request signed URLs).
    #[serde(skip)]
    pub rendered: Rendered,
}

/// One SHA256SUMS file and its signature, as published by the origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SumsRef {
    pub url: String,
    pub signature_url: String,
    /// How the signature over this SHA256SUMS verified (absent in records written before
    /// signatures were checked).
    #[serde(default)]
    pub trust: Option<Trust>,
}

impl VersionRecord {
    /// The position of `url` in [`VersionRecord::sums`].
    pub fn sums_index(&self, url: &str) -> Option<usize> {
        self.sums.iter().position(|s| s.url == url)
    }

    /// The trust level of one platform's package: how the SHA256SUMS it is listed in verified.
    /// A package without origin checksums (imported from a mirror directory), or whose
    /// checksums were recorded before levels were kept, is [`SignatureKind::Unverified`].
    pub fn trust_of(&self, platform: &Platform) -> SignatureKind {
        self.packages
            .get(platform)
            .and_then(|pkg| self.sums.iter().find(|s| s.url == pkg.shasums_url))
            .and_then(|s| s.trust.as_ref())
            .map_or(SignatureKind::Unverified, |t| t.kind)
    }

    /// The weakest trust level among the version's packages.
    pub fn weakest_trust(&self) -> SignatureKind {
        self.packages
            .keys()
            .map(|p| self.trust_of(p))
            .min()
            .unwrap_or(SignatureKind::Unverified)
    }

    /// Whether every offered platform that passes `allowed` has been looked up.
    pub fn covers(&self, allowed: impl Fn(&Platform) -> bool) -> bool {
        self.offered
            .iter()
            .filter(|p| allowed(p))
            .all(|p| self.packages.contains_key(p) || self.unavailable.contains(p))
    }
}

/// Identifies one archive: a provider version for one platform.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArchiveKey {
    pub addr: ProviderAddr,
    pub version: Version,
    pub platform: Platform,
}

impl ArchiveKey {
    /// The canonical file name, `terraform-provider-<type>_<version>_<os>_<arch>.zip`.
    pub fn filename(&self) -> String {
        self.addr.archive_filename(&self.version, &self.platform)
    }
}

impl std::fmt::Display for ArchiveKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.addr, self.version, self.platform)
    }
}

/// What the store knows about a committed archive.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ArchiveInfo {
    /// Lowercase hex SHA-256 of the zip (the `zh:` hash).
    pub sha256: String,
    /// Terraform's `h1:` hash of the zip's contents.
    pub h1: String,
    pub size: u64,
    /// How the origin's signature over the archive's SHA256SUMS was classified when the archive
    /// was admitted (absent in records written before levels were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<SignatureKind>,
}

/// A signing key offered in download metadata.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SigningKey {
    #[serde(default)]
    pub key_id: String,
    pub ascii_armor: String,
    #[serde(default)]
    pub trust_signature: String,
}

/// A module's version list as last fetched from its origin registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleVersions {
    /// Unix seconds when the origin answered.
    pub fetched_at: u64,
    /// `false`: the origin said it has no such module (kept only in memory, briefly).
    pub found: bool,
    pub versions: Vec<Version>,
}

impl ModuleVersions {
    /// Adds a version (an import's), keeping the list sorted. Returns whether it was new.
    pub fn add_version(&mut self, version: &Version) -> bool {
        if self.versions.contains(version) {
            return false;
        }
        self.versions.push(version.clone());
        self.versions.sort();
        true
    }
}

/// Where a cached module version came from: what the origin's download answer named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ModuleSource {
    /// An archive fetched over HTTPS (the URL after redirects is not kept; this is the one the
    /// origin named, made absolute).
    Archive { url: String },
    /// A git repository fetched at `reference` (a tag, branch or commit), which resolved to
    /// `commit` when it was fetched; later moves of the reference do not change the cache.
    Git {
        url: String,
        reference: Option<String>,
        commit: String,
    },
}

/// Identifies one cached module version: its package and its record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleKey {
    pub addr: ModuleAddr,
    pub version: Version,
}

impl ModuleKey {
    pub fn new(addr: &ModuleAddr, version: &Version) -> ModuleKey {
        ModuleKey {
            addr: addr.clone(),
            version: version.clone(),
        }
    }
}

impl std::fmt::Display for ModuleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "module {} {}", self.addr, self.version)
    }
}

/// A cached module version: where it came from and the archive provender serves for it. The
/// record is written after the archive and is the commit point, as for provider archives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleRecord {
    pub source: ModuleSource,
    /// The subdirectory of the package the module lives in (the origin's `//subdir`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdir: Option<String>,
    /// Lowercase hex SHA-256 of the archive provender serves (a deterministic `.tar.gz`).
    pub sha256: String,
    pub size: u64,
    /// Unix seconds when it was fetched.
    pub fetched_at: u64,
    /// How the package entered this cache (records without it were fetched from an origin).
    #[serde(default)]
    pub trust: ModuleTrust,
}

/// How a module package entered the cache. Module packages carry no signatures: the origin
/// registry's answer over TLS (and, for archives, its `?checksum=` where it gave one) is as far
/// as one can be checked, so the levels say whose word it rests on.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ModuleTrust {
    /// Imported from an unsigned bundle, or one signed by an untrusted key, with
    /// `import --allow-unverified`; or from a signed bundle whose site had it so.
    Unverified,
    /// Imported from a bundle signed by a key in `bundles.trusted_keys`.
    SignedBundle,
    /// Fetched by this mirror from the origin registry's download answer.
    #[default]
    Origin,
}

impl ModuleTrust {
    pub fn as_str(self) -> &'static str {
        match self {
            ModuleTrust::Unverified => "unverified",
            ModuleTrust::SignedBundle => "signed_bundle",
            ModuleTrust::Origin => "origin",
        }
    }
}

impl std::fmt::Display for ModuleTrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The JSON documents provender serves and writes.
pub mod docs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};

    use super::SigningKey;

    impl MirrorIndex {
        /// The index of these versions.
        pub fn of<'a>(versions: impl IntoIterator<Item = &'a crate::address::Version>) -> Self {
            MirrorIndex {
                versions: versions
                    .into_iter()
                    .map(|v| (v.to_string(), Empty {}))
                    .collect(),
            }
        }
    }

    /// An empty JSON object (`{}`), as the mirror protocol's version entries are.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Empty {}

    /// The network mirror protocol's `index.json`: `{"versions":{"1.2.0":{}}}`.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct MirrorIndex {
        pub versions: BTreeMap<String, Empty>,
    }

    /// The network mirror protocol's `<version>.json`: per platform, the archive's URL and its
    /// hashes.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct MirrorVersion {
        pub archives: BTreeMap<String, MirrorArchive>,
    }

    /// One platform's entry in [`MirrorVersion`] (keys in the order Terraform writes them).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct MirrorArchive {
        #[serde(default)]
        pub hashes: Vec<String>,
        pub url: String,
    }

    /// The registry protocol's version list (`:namespace/:type/versions`).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct RegistryVersions {
        pub versions: Vec<RegistryVersion>,
    }

    /// One version in [`RegistryVersions`].
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct RegistryVersion {
        pub version: String,
        pub protocols: Vec<String>,
        pub platforms: Vec<RegistryPlatform>,
    }

    /// An `{"os": ..., "arch": ...}` pair.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct RegistryPlatform {
        pub os: String,
        pub arch: String,
    }

    /// The registry protocol's download metadata (`:namespace/:type/:version/download/:os/:arch`).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct RegistryDownload {
        pub protocols: Vec<String>,
        pub os: String,
        pub arch: String,
        pub filename: String,
        pub download_url: String,
        pub shasums_url: String,
        pub shasums_signature_url: String,
        pub shasum: String,
        pub signing_keys: RegistrySigningKeys,
    }

    /// `signing_keys` of [`RegistryDownload`].
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct RegistrySigningKeys {
        pub gpg_public_keys: Vec<SigningKey>,
    }

    /// The module registry protocol's version list (`:namespace/:name/:system/versions`).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct ModuleVersionsDoc {
        pub modules: Vec<ModuleVersionsEntry>,
    }

    /// One module in [`ModuleVersionsDoc`].
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct ModuleVersionsEntry {
        pub versions: Vec<ModuleVersionDoc>,
    }

    /// One version in [`ModuleVersionsEntry`].
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct ModuleVersionDoc {
        pub version: String,
    }

    /// The JSON body of a module download answer (`{"location": ...}`), which OpenTofu reads.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct ModuleLocation {
        pub location: String,
    }

    /// Compact JSON, as served.
    pub fn to_bytes(doc: &impl Serialize) -> bytes::Bytes {
        bytes::Bytes::from(serde_json::to_vec(doc).expect("documents serialise"))
    }

    /// JSON as `terraform providers mirror` writes it: two-space indent, a final newline.
    pub fn to_pretty(doc: &impl Serialize) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(doc).expect("documents serialise");
        out.push(b'\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_json_shape() {
        let rec = IndexRecord {
            fetched_at: 0,
            found: true,
            versions: vec![
                IndexVersion {
                    version: Version::parse("1.0.0").unwrap(),
                    protocols: vec![],
                    platforms: vec![],
                },
                IndexVersion {
                    version: Version::parse("2.0.0-rc.1").unwrap(),
                    protocols: vec![],
                    platforms: vec![],
                },
            ],
            rendered: Default::default(),
        };
        assert_eq!(
            String::from_utf8(rec.to_mirror_json().to_vec()).unwrap(),
            r#"{"versions":{"1.0.0":{},"2.0.0-rc.1":{}}}"#
        );
    }
}
