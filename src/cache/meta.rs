//! Provider metadata: version lists and per-version download metadata.
//!
//! Records live in two bounded moka caches (the hot path never touches the disk) and are
//! persisted as JSON under `<cache.dir>/metadata`, so a restarted server answers from what it
//! already knew. Both caches are bounded by entry count and evict the least recently used;
//! freshness of version lists is decided by the mirror from each record's `fetched_at`, and
//! version records are immutable.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::address::{Platform, ProviderAddr, Version};
use crate::trust::SignatureKind;
use crate::upstream::{DownloadInfo, ListedVersion, SigningKey};

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

impl From<ListedVersion> for IndexVersion {
    fn from(v: ListedVersion) -> Self {
        IndexVersion {
            version: v.version,
            protocols: v.protocols,
            platforms: v.platforms,
        }
    }
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
        let versions: serde_json::Map<String, serde_json::Value> = self
            .versions
            .iter()
            .map(|v| (v.version.to_string(), serde_json::json!({})))
            .collect();
        serde_json::to_vec(&serde_json::json!({ "versions": versions })).expect("JSON of strings")
    }
}

/// Verified download metadata for one platform's package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

impl From<DownloadInfo> for Package {
    /// A package as the origin describes it, before its archive has been processed.
    fn from(info: DownloadInfo) -> Package {
        Package {
            protocols: info.protocols,
            filename: info.filename,
            download_url: info.download_url,
            shasum: info.shasum,
            shasums_url: info.shasums_url,
            shasums_signature_url: info.shasums_signature_url,
            signing_keys: info.signing_keys,
            h1: None,
        }
    }
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
    pub trust: Option<crate::trust::Trust>,
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

type VersionKey = (ProviderAddr, Version);

/// Metadata caches plus their on-disk copies.
pub struct MetaStore {
    root: PathBuf,
    /// Serialises read-modify-write updates of version records (`set_h1`), which concurrent
    /// downloads of one version's platforms would otherwise race on.
    updates: tokio::sync::Mutex<()>,
    pub indexes: moka::future::Cache<ProviderAddr, Arc<IndexRecord>>,
    pub versions: moka::future::Cache<VersionKey, Arc<VersionRecord>>,
}

impl MetaStore {
    /// `root` is `<cache.dir>/metadata`; `capacity` bounds each in-memory cache's entry count.
    pub fn new(root: PathBuf, capacity: u64) -> io::Result<MetaStore> {
        std::fs::create_dir_all(&root)?;
        Ok(MetaStore {
            root,
            updates: tokio::sync::Mutex::new(()),
            indexes: moka::future::Cache::builder()
                .max_capacity(capacity)
                .build(),
            versions: moka::future::Cache::builder()
                .max_capacity(capacity)
                .build(),
        })
    }

    /// Checks that the metadata directory can be read now (for readiness).
    pub async fn probe(&self) -> io::Result<()> {
        let mut entries = tokio::fs::read_dir(&self.root)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.root.display())))?;
        entries.next_entry().await.map(|_| ())
    }

    fn dir_of(&self, addr: &ProviderAddr) -> PathBuf {
        self.root
            .join(addr.hostname.as_str())
            .join(&addr.namespace)
            .join(&addr.type_)
    }

    fn index_path(&self, addr: &ProviderAddr) -> PathBuf {
        self.dir_of(addr).join("index.json")
    }

    fn version_path(&self, addr: &ProviderAddr, version: &Version) -> PathBuf {
        self.dir_of(addr).join(format!("{version}.json"))
    }

    /// The persisted version list, if any (unreadable files are logged and ignored).
    pub async fn read_index(&self, addr: &ProviderAddr) -> Option<IndexRecord> {
        read_json(self.index_path(addr)).await
    }

    /// Persists a found version list.
    pub async fn write_index(&self, addr: &ProviderAddr, rec: &IndexRecord) -> io::Result<()> {
        write_json(self.index_path(addr), rec).await
    }

    pub async fn read_version(
        &self,
        addr: &ProviderAddr,
        version: &Version,
    ) -> Option<VersionRecord> {
        read_json(self.version_path(addr, version)).await
    }

    pub async fn write_version(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        rec: &VersionRecord,
    ) -> io::Result<()> {
        write_json(self.version_path(addr, version), rec).await
    }

    fn sums_path(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        n: usize,
        signature: bool,
    ) -> PathBuf {
        let suffix = if signature { ".sig" } else { "" };
        self.dir_of(addr)
            .join(format!("{version}.SHA256SUMS.{n}{suffix}"))
    }

    /// Keeps the origin's SHA256SUMS file `n` of a version (or its signature) byte for byte.
    /// Written before the version record that refers to it.
    pub async fn write_sums(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        n: usize,
        signature: bool,
        bytes: Vec<u8>,
    ) -> io::Result<()> {
        let path = self.sums_path(addr, version, n, signature);
        tokio::task::spawn_blocking(move || super::write_atomic(&path, &bytes))
            .await
            .map_err(io::Error::other)?
    }

    /// Reads a kept SHA256SUMS file or signature.
    pub async fn read_sums(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        n: usize,
        signature: bool,
    ) -> io::Result<Option<Vec<u8>>> {
        match tokio::fs::read(self.sums_path(addr, version, n, signature)).await {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Records the `h1:` hash of a committed archive in its version record (memory and disk).
    pub async fn set_h1(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
        h1: &str,
    ) -> io::Result<()> {
        let _serialised = self.updates.lock().await;
        let key = (addr.clone(), version.clone());
        let current = match self.versions.get(&key).await {
            Some(rec) => Some((*rec).clone()),
            None => self.read_version(addr, version).await,
        };
        let Some(mut rec) = current else {
            return Ok(());
        };
        let Some(pkg) = rec.packages.get_mut(platform) else {
            return Ok(());
        };
        if pkg.h1.as_deref() == Some(h1) {
            return Ok(());
        }
        pkg.h1 = Some(h1.to_string());
        self.write_version(addr, version, &rec).await?;
        self.versions.insert(key, Arc::new(rec)).await;
        Ok(())
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(path: PathBuf) -> Option<T> {
    let bytes = match tokio::fs::read(&path).await {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(file = %path.display(), "cannot read cached metadata: {e}");
            return None;
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(file = %path.display(), "ignoring unreadable cached metadata: {e}");
            None
        }
    }
}

async fn write_json<T: Serialize>(path: PathBuf, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    tokio::task::spawn_blocking(move || super::write_atomic(&path, &bytes))
        .await
        .map_err(io::Error::other)?
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

    #[tokio::test]
    async fn version_records_round_trip_through_disk() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::new(dir.path().to_path_buf(), 10).unwrap();
        let addr = ProviderAddr::new("registry.terraform.io", "acme", "foo").unwrap();
        let v = Version::parse("1.0.0+b.1").unwrap();
        let linux = Platform::parse("linux_amd64").unwrap();
        let pkg = Package {
            protocols: vec!["5.0".into()],
            filename: "f.zip".into(),
            download_url: "https://x/f.zip".into(),
            shasum: "0".repeat(64),
            shasums_url: "https://x/S".into(),
            shasums_signature_url: "https://x/S.sig".into(),
            signing_keys: vec![],
            h1: None,
        };
        let rec = VersionRecord {
            fetched_at: 1,
            offered: vec![linux.clone()],
            unavailable: vec![],
            packages: [(linux.clone(), pkg)].into(),
            sums: vec![],
            rendered: Default::default(),
        };
        store.write_version(&addr, &v, &rec).await.unwrap();
        assert_eq!(store.read_version(&addr, &v).await.unwrap(), rec);
        store.set_h1(&addr, &v, &linux, "h1:abc").await.unwrap();
        let back = store.read_version(&addr, &v).await.unwrap();
        assert_eq!(back.packages[&linux].h1.as_deref(), Some("h1:abc"));
        assert!(back.covers(|_| true));
    }
}
