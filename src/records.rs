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
pub mod publish;
pub mod releases;

use crate::address::{ModuleAddr, Platform, ProviderAddr, Version};
use crate::hash::{H1, Sha256};

/// A stored record or document read from JSON; an error names the field at fault by its path
/// (`packages.linux_amd64.shasum: ...`).
pub fn from_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || inner.is_io() || inner.is_eof() || inner.is_syntax() {
            inner
        } else {
            serde::de::Error::custom(format!("{path}: {inner}"))
        }
    })?;
    de.end()?;
    Ok(value)
}

/// Serde for a URL field where old records write `""` for none: reads `""` as `None`, writes
/// `None` as `""`, so records stay readable by older and newer code alike.
mod url_or_empty {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(url.as_deref().unwrap_or(""))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let url = Option::<String>::deserialize(d)?;
        Ok(url.filter(|u| !u.is_empty()))
    }
}

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
    /// Published to this registry by one of its own publishers and signed with its provider
    /// signing key (a private namespace, `[publishing]`): the organisation's own word, admitted
    /// whatever `upstream.min_trust` says.
    Private,
}

impl SignatureKind {
    /// Every level, weakest first.
    pub const ALL: [SignatureKind; 6] = [
        SignatureKind::Unverified,
        SignatureKind::Unsigned,
        SignatureKind::Community,
        SignatureKind::Partner,
        SignatureKind::Official,
        SignatureKind::Private,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SignatureKind::Unverified => "unverified",
            SignatureKind::Unsigned => "unsigned",
            SignatureKind::Community => "community",
            SignatureKind::Partner => "partner",
            SignatureKind::Official => "official",
            SignatureKind::Private => "private",
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
#[error("{0:?} is not one of unverified, unsigned, community, partner, official, private")]
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
    /// When this mirror first saw each version (for a cooldown, `policy.min_age`).
    #[serde(default, skip_serializing_if = "FirstSeen::is_unset")]
    pub seen: FirstSeen,
    /// `index.json` as served.
    #[serde(skip)]
    pub rendered: Rendered,
}

/// When a mirror first saw the versions of one list: the evidence a cooldown
/// (`policy.min_age`) judges a version's age by.
///
/// `since` is when this mirror first listed the thing at all (0: before lists kept it, as older
/// records have it). A version in that first listing is *baseline*: its age is unknown, and it is
/// taken as old, so a new mirror does not hold back every existing version. A version that
/// appeared in a later listing is in `versions` with the time of that listing, which neither the
/// origin nor a publisher's signature can move.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstSeen {
    #[serde(default)]
    pub since: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versions: BTreeMap<Version, u64>,
}

impl FirstSeen {
    /// Whether nothing is recorded (a list written before first-seen times were kept).
    pub fn is_unset(&self) -> bool {
        self.since == 0 && self.versions.is_empty()
    }

    /// When `version` was first seen, or `None` for a baseline version (listed when the list
    /// was first fetched, or before times were kept).
    pub fn of(&self, version: &Version) -> Option<u64> {
        self.versions.get(version).copied()
    }

    /// The first-seen times of a list fetched at `now` listing `current`, given the list it
    /// replaces (`previous`: its times and its versions), if any: versions the previous list
    /// had keep their time (or stay baseline), new ones are seen `now`, and dropped ones are
    /// forgotten. Without a previous list every version is baseline.
    pub fn carried<'a>(
        previous: Option<(&FirstSeen, &[&'a Version])>,
        current: impl IntoIterator<Item = &'a Version>,
        now: u64,
    ) -> FirstSeen {
        let Some((before, listed)) = previous else {
            return FirstSeen {
                since: now,
                versions: BTreeMap::new(),
            };
        };
        let versions = current
            .into_iter()
            .filter_map(|v| match before.versions.get(v) {
                Some(at) => Some((v.clone(), *at)),
                None if listed.contains(&v) => None,
                None => Some((v.clone(), now)),
            })
            .collect();
        FirstSeen {
            since: before.since,
            versions,
        }
    }
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    #[serde(default)]
    pub protocols: Vec<String>,
    /// The origin's file name (the one its SHA256SUMS lists).
    pub filename: String,
    /// Where the origin serves the archive; none for a package imported without an origin
    /// (stored as `""`).
    #[serde(default, with = "url_or_empty")]
    pub download_url: Option<String>,
    /// Equal to the origin's `shasum` and its SHA256SUMS line.
    pub shasum: Sha256,
    /// The origin's SHA256SUMS and its signature; none for a package imported without them
    /// (stored as `""`).
    #[serde(default, with = "url_or_empty")]
    pub shasums_url: Option<String>,
    #[serde(default, with = "url_or_empty")]
    pub shasums_signature_url: Option<String>,
    #[serde(default)]
    pub signing_keys: Vec<SigningKey>,
    /// `h1:` hash, once provender has processed the archive.
    #[serde(default)]
    pub h1: Option<H1>,
    /// The archive's size in bytes: the stored archive's once there is one, before that what
    /// the origin stated (its registry's `packages` extension, or a `HEAD` of the download
    /// URL). OCI manifests need it before anything is downloaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The `h1:` the origin registry reported in its `packages` extension. Never served as
    /// such: it is compared with the `h1:` computed from the archive once that is hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_h1: Option<H1>,
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

impl Package {
    /// A package known only by its archive (an import without the origin's download
    /// metadata): no origin URLs, no signing keys, no hashes beyond its SHA-256.
    pub fn imported(filename: String, shasum: Sha256, protocols: Vec<String>) -> Package {
        Package {
            protocols,
            filename,
            download_url: None,
            shasum,
            shasums_url: None,
            shasums_signature_url: None,
            signing_keys: Vec::new(),
            h1: None,
            size: None,
            reported_h1: None,
        }
    }
}

/// A package that is not named for what it is recorded as: the one rule every registry puts on
/// publishers, `terraform-provider-<type>_<version>_<os>_<arch>.zip`. A signed SHA256SUMS line
/// for another name vouches for another file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the package for {platform} is named {found}, not {expected}: signed files of another \
     version or platform are not admitted under its name"
)]
pub struct Misnamed {
    pub platform: Platform,
    pub expected: String,
    pub found: String,
}

impl Package {
    /// Whether this package is named for `platform` of `version` of `addr`: the check
    /// `TrustPolicy::verify_sums` makes before admitting it and every reader of a stored
    /// version record makes again.
    pub fn check_name(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
    ) -> Result<(), Misnamed> {
        let expected = addr.archive_filename(version, platform);
        match self.filename == expected {
            true => Ok(()),
            false => Err(Misnamed {
                platform: platform.clone(),
                expected,
                found: self.filename.clone(),
            }),
        }
    }
}

impl VersionRecord {
    /// Every package named for its platform of `version` of `addr` ([`Package::check_name`]),
    /// else the first one that is not.
    pub fn check_names(&self, addr: &ProviderAddr, version: &Version) -> Result<(), Misnamed> {
        self.packages
            .iter()
            .try_for_each(|(platform, pkg)| pkg.check_name(addr, version, platform))
    }

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
            .and_then(|pkg| pkg.shasums_url.as_deref())
            .and_then(|url| self.sums.iter().find(|s| s.url == url))
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
    /// SHA-256 of the zip (the `zh:` hash).
    pub sha256: Sha256,
    /// Terraform's `h1:` hash of the zip's contents.
    pub h1: H1,
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
    /// When this mirror first saw each version (for a cooldown, `policy.min_age`).
    #[serde(default, skip_serializing_if = "FirstSeen::is_unset")]
    pub seen: FirstSeen,
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
    /// Published to this registry (see [`publish::Publication`] for who and when).
    Published,
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
    /// SHA-256 of the archive provender serves (a deterministic `.tar.gz`).
    pub sha256: Sha256,
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
    /// Published to this registry (a private namespace, `[publishing]`) by a publisher whose
    /// rule allowed it.
    Private,
}

impl ModuleTrust {
    pub fn as_str(self) -> &'static str {
        match self {
            ModuleTrust::Unverified => "unverified",
            ModuleTrust::SignedBundle => "signed_bundle",
            ModuleTrust::Origin => "origin",
            ModuleTrust::Private => "private",
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
        /// Messages both CLIs show a person under "Additional provider information from
        /// registry" (the registry's `warnings`, which the protocol leaves undocumented).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub warnings: Vec<String>,
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
        /// OpenTofu's extension (1.12, RFC `20251027-provider-registry-hashes`): every
        /// platform's hashes and archive size, keyed `<os>_<arch>`. Absent unless the
        /// requested platform's own entry can be complete (OpenTofu then requires its
        /// `package_size` and `zh:`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub packages: Option<BTreeMap<String, RegistryPackageHashes>>,
    }

    /// One platform in [`RegistryDownload`]'s `packages`: only hashes provender verified (the
    /// `zh:` of the signed SHA256SUMS, the `h1:` once computed here) and the size of the
    /// archive it stored.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct RegistryPackageHashes {
        pub hashes: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub package_size: Option<u64>,
    }

    impl RegistryPackageHashes {
        /// What provender has verified about `pkg`: its `zh:` always (the signed `shasum`),
        /// its `h1:` and size once its archive was hashed here (the size an origin merely
        /// stated is not given).
        pub fn of(pkg: &super::Package) -> Self {
            let mut hashes = vec![crate::hash::zh(&pkg.shasum)];
            hashes.extend(pkg.h1.iter().map(|h| h.to_string()));
            RegistryPackageHashes {
                hashes,
                package_size: pkg.h1.as_ref().and(pkg.size),
            }
        }
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
    /// With `use_registry_credentials` (OpenTofu 1.12 and later) OpenTofu fetches `location`
    /// itself, sending the registry host's credentials when it is `true`.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct ModuleLocation {
        pub location: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub use_registry_credentials: Option<bool>,
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
            seen: Default::default(),
            rendered: Default::default(),
        };
        assert_eq!(
            String::from_utf8(rec.to_mirror_json().to_vec()).unwrap(),
            r#"{"versions":{"1.0.0":{},"2.0.0-rc.1":{}}}"#
        );
    }

    /// A version record as older builds wrote it: a package imported without an origin has
    /// `""` for its URLs; hashes are plain strings.
    const OLD_VERSION_RECORD: &str = r#"{
  "fetched_at": 1,
  "offered": ["linux_amd64"],
  "packages": {
    "linux_amd64": {
      "protocols": ["5.0"],
      "filename": "terraform-provider-foo_1.0.0_linux_amd64.zip",
      "download_url": "",
      "shasum": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "shasums_url": "",
      "shasums_signature_url": "",
      "signing_keys": [],
      "h1": "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
    }
  }
}"#;

    #[test]
    fn old_records_with_empty_urls_and_string_hashes_still_parse() {
        let rec: VersionRecord = from_json(OLD_VERSION_RECORD.as_bytes()).unwrap();
        let pkg = &rec.packages[&Platform::parse("linux_amd64").unwrap()];
        assert_eq!(pkg.download_url, None);
        assert_eq!(pkg.shasums_url, None);
        assert_eq!(pkg.shasums_signature_url, None);
        assert_eq!(pkg.shasum, Sha256::of(b""));
        assert_eq!(
            pkg.h1.as_ref().map(H1::as_str),
            Some("h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
        );
        assert_eq!(
            rec.trust_of(&Platform::parse("linux_amd64").unwrap()),
            SignatureKind::Unverified
        );
        // Written again, it is what older builds read: `""` for no URL, hashes as strings.
        let again = serde_json::to_value(&rec).unwrap();
        let old: serde_json::Value = serde_json::from_str(OLD_VERSION_RECORD).unwrap();
        for field in [
            "download_url",
            "shasums_url",
            "shasums_signature_url",
            "shasum",
            "h1",
        ] {
            assert_eq!(
                again["packages"]["linux_amd64"][field], old["packages"]["linux_amd64"][field],
                "{field}"
            );
        }
        let back: VersionRecord = from_json(&serde_json::to_vec(&rec).unwrap()).unwrap();
        assert_eq!(back, rec);
    }

    #[test]
    fn urls_round_trip() {
        let mut rec: VersionRecord = from_json(OLD_VERSION_RECORD.as_bytes()).unwrap();
        let pkg = rec.packages.values_mut().next().unwrap();
        pkg.download_url = Some("https://origin.example/f.zip".into());
        pkg.shasums_url = Some("https://origin.example/SHA256SUMS".into());
        let bytes = serde_json::to_vec(&rec).unwrap();
        assert_eq!(from_json::<VersionRecord>(&bytes).unwrap(), rec);
    }

    #[test]
    fn malformed_hashes_are_refused_naming_the_field() {
        let bad_shasum = OLD_VERSION_RECORD.replace("e3b0c442", "E3B0C442");
        let err = from_json::<VersionRecord>(bad_shasum.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("packages.linux_amd64.shasum"), "{err}");
        assert!(err.contains("is not a SHA-256"), "{err}");
        let bad_h1 = OLD_VERSION_RECORD.replace("h1:AAAA", "h1:!AAA");
        let err = from_json::<VersionRecord>(bad_h1.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("packages.linux_amd64.h1"), "{err}");
        assert!(err.contains("is not an h1: hash"), "{err}");

        let info =
            r#"{"sha256":"abc","h1":"h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","size":1}"#;
        let err = from_json::<ArchiveInfo>(info.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("sha256: "), "{err}");
        let module = r#"{"source":{"kind":"archive","url":"https://x/m.tgz"},"sha256":"","size":1,"fetched_at":1}"#;
        let err = from_json::<ModuleRecord>(module.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("sha256: "), "{err}");
        // A syntax error is serde_json's own.
        assert!(from_json::<ArchiveInfo>(b"{").unwrap_err().is_eof());
    }
}
