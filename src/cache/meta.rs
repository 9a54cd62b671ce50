//! Provider metadata: per-version download metadata (version records), the origin's SHA256SUMS
//! copies, and the OCI documents rendered from them. Version lists are kept by
//! [`Listings`](super::Listings).
//!
//! Records live in bounded moka caches (the hot path never touches the store) and are
//! persisted as JSON in the store (`metadata/`, `oci/`), so a restarted server (or another
//! replica sharing the store) answers from what is already known. The caches are bounded by
//! entry count and evict the least recently used; version records are immutable.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use super::Changes;
use crate::address::{ModuleAddr, Platform, ProviderAddr, Version};
use crate::records::oci::{BlobLink, Document, ModuleDigest};
use crate::records::{Package, VersionRecord};
use crate::storage::{Key, Result, Storage};

type VersionKey = (ProviderAddr, Version);

/// Metadata caches plus their persisted copies.
pub struct MetaStore {
    storage: Arc<dyn Storage>,
    /// Serialises read-modify-write updates of version records (`set_h1`), which concurrent
    /// downloads of one version's platforms would otherwise race on.
    updates: tokio::sync::Mutex<()>,
    pub versions: moka::future::Cache<VersionKey, Arc<VersionRecord>>,
    /// OCI manifests by their SHA-256 (immutable: a digest names one content).
    oci_manifests: moka::future::Cache<(ProviderAddr, String), Document>,
    /// Counts writes and removals (see [`Changes`]).
    changes: Changes,
}

/// The key of a provider's metadata directory.
fn key_of_provider(addr: &ProviderAddr) -> Key {
    Key::new([
        "metadata",
        addr.hostname.as_str(),
        &addr.namespace,
        &addr.type_,
    ])
}

/// The key of a provider's metadata file `name`.
fn key_of(addr: &ProviderAddr, name: &str) -> Key {
    Key::new([
        "metadata",
        addr.hostname.as_str(),
        &addr.namespace,
        &addr.type_,
        name,
    ])
}

/// The key of a provider's OCI object `name`.
fn oci_key(addr: &ProviderAddr, name: &str) -> Key {
    Key::new([
        "oci",
        addr.hostname.as_str(),
        &addr.namespace,
        &addr.type_,
        name,
    ])
}

/// The key of a module's OCI digest link (`digest-<sha256>.json`, a manifest's or a layer's).
fn module_digest_key(addr: &ModuleAddr, sha256: &str) -> Key {
    Key::new([
        "oci",
        addr.hostname.as_str(),
        "modules",
        &addr.namespace,
        &addr.name,
        &addr.system,
        &format!("digest-{sha256}.json"),
    ])
}

impl MetaStore {
    /// Metadata under `metadata/` in `storage`; `capacity` bounds each in-memory cache's entry
    /// count.
    pub fn new(storage: Arc<dyn Storage>, capacity: u64) -> MetaStore {
        MetaStore {
            storage,
            updates: tokio::sync::Mutex::new(()),
            versions: moka::future::Cache::builder()
                .max_capacity(capacity)
                .build(),
            oci_manifests: moka::future::Cache::builder()
                .max_capacity(capacity)
                .build(),
            changes: Default::default(),
        }
    }

    /// How many writes and removals this process has made (see [`Changes`]).
    pub fn changes(&self) -> u64 {
        self.changes.count()
    }

    /// Keeps an OCI manifest or index under its digest, so that a request by digest finds it
    /// on any replica and after a restart. Written before anything that names it is served.
    pub async fn write_oci_manifest(&self, addr: &ProviderAddr, doc: &Document) -> Result<()> {
        let key = oci_key(addr, &format!("manifest-{}.json", doc.sha256));
        if self.storage.head(&key).await?.is_none() {
            self.storage.write(&key, doc.bytes.clone()).await?;
        }
        self.oci_manifests
            .insert((addr.clone(), doc.sha256.to_string()), doc.clone())
            .await;
        Ok(())
    }

    /// The OCI manifest or index whose SHA-256 is `sha256`, if one was kept (and still has
    /// that digest).
    pub async fn read_oci_manifest(&self, addr: &ProviderAddr, sha256: &str) -> Option<Document> {
        let key = (addr.clone(), sha256.to_string());
        if let Some(doc) = self.oci_manifests.get(&key).await {
            return Some(doc);
        }
        let stored = oci_key(addr, &format!("manifest-{sha256}.json"));
        let bytes = match self.storage.read(&stored).await {
            Ok(found) => found?,
            Err(e) => {
                tracing::warn!("cannot read a kept OCI manifest: {e}");
                return None;
            }
        };
        let doc = Document::parse(bytes).filter(|d| d.sha256 == sha256);
        if doc.is_none() {
            tracing::warn!(key = %stored, "ignoring a kept OCI manifest that is not what its name says");
        }
        let doc = doc?;
        self.oci_manifests.insert(key, doc.clone()).await;
        Some(doc)
    }

    /// Records which archive the layer digest `sha256` is.
    pub async fn write_oci_blob(
        &self,
        addr: &ProviderAddr,
        sha256: &str,
        link: &BlobLink,
    ) -> Result<()> {
        self.write_json(oci_key(addr, &format!("blob-{sha256}.json")), link)
            .await
    }

    /// Which archive the layer digest `sha256` is, if recorded.
    pub async fn read_oci_blob(&self, addr: &ProviderAddr, sha256: &str) -> Option<BlobLink> {
        self.read_json(oci_key(addr, &format!("blob-{sha256}.json")))
            .await
    }

    /// Records which version of a module the OCI digest `sha256` (its manifest's or its zip's)
    /// was made for: the digest index of module repositories.
    pub async fn write_module_digest(
        &self,
        addr: &ModuleAddr,
        sha256: &str,
        link: &ModuleDigest,
    ) -> Result<()> {
        self.write_json(module_digest_key(addr, sha256), link).await
    }

    /// Which version of a module the OCI digest `sha256` was made for, if recorded (one read;
    /// the caller checks that the version's zip still has that digest).
    pub async fn read_module_digest(
        &self,
        addr: &ModuleAddr,
        sha256: &str,
    ) -> Option<ModuleDigest> {
        self.read_json(module_digest_key(addr, sha256)).await
    }

    /// The stored record of `version`, if there is one and every package in it is named for
    /// it ([`VersionRecord::check_names`]). A record kept before that rule was enforced, naming
    /// another file, is ignored (and logged): the version is fetched and verified again, and
    /// `provender verify` removes the record.
    pub async fn read_version(
        &self,
        addr: &ProviderAddr,
        version: &Version,
    ) -> Option<VersionRecord> {
        let rec = self.read_version_as_stored(addr, version).await?;
        match rec.check_names(addr, version) {
            Ok(()) => Some(rec),
            Err(misnamed) => {
                tracing::warn!(provider = %addr, %version, "ignoring a kept version record: {misnamed}");
                None
            }
        }
    }

    /// The stored record of `version` as it is, whatever it names: for the checks that judge
    /// it (re-verification, `provender verify`).
    pub async fn read_version_as_stored(
        &self,
        addr: &ProviderAddr,
        version: &Version,
    ) -> Option<VersionRecord> {
        self.read_json(key_of(addr, &format!("{version}.json")))
            .await
    }

    /// When each stored version record was last written, and its size (one listing, no reads):
    /// a record whose stamp has not moved need not be read again.
    pub async fn version_stamps(
        &self,
    ) -> Result<std::collections::HashMap<VersionKey, (std::time::SystemTime, u64)>> {
        let listed = self.storage.list(&Key::new(["metadata"])).await?;
        let mut out = std::collections::HashMap::new();
        for o in listed {
            let segments: Vec<&str> = o.key.segments().collect();
            let [_, host, namespace, type_, file] = segments.as_slice() else {
                continue;
            };
            let Some(version) = file.strip_suffix(".json") else {
                continue;
            };
            let (Ok(addr), Ok(version)) = (
                ProviderAddr::new(host, namespace, type_),
                Version::parse(version),
            ) else {
                continue;
            };
            out.insert((addr, version), (o.modified, o.size));
        }
        Ok(out)
    }

    pub async fn write_version(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        rec: &VersionRecord,
    ) -> Result<()> {
        self.write_json(key_of(addr, &format!("{version}.json")), rec)
            .await
    }

    /// Deletes a version's record, then the SHA256SUMS copies it refers to (the reverse of the
    /// order they were written in). Returns whether there was a record.
    pub async fn remove_version(&self, addr: &ProviderAddr, version: &Version) -> Result<bool> {
        let _serialised = self.updates.lock().await;
        self.versions
            .invalidate(&(addr.clone(), version.clone()))
            .await;
        let had = self
            .storage
            .delete(&key_of(addr, &format!("{version}.json")))
            .await?;
        let sums = format!("{version}.SHA256SUMS.");
        for o in self.storage.list(&key_of_provider(addr)).await? {
            if o.key
                .segments()
                .last()
                .is_some_and(|name| name.starts_with(&sums))
            {
                self.changes.note();
                self.storage.delete(&o.key).await?;
            }
        }
        Ok(had)
    }

    fn sums_key(addr: &ProviderAddr, version: &Version, n: usize, signature: bool) -> Key {
        let suffix = if signature { ".sig" } else { "" };
        key_of(addr, &format!("{version}.SHA256SUMS.{n}{suffix}"))
    }

    /// Keeps the origin's SHA256SUMS file `n` of a version (or its signature) byte for byte.
    /// Written before the version record that refers to it.
    pub async fn write_sums(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        n: usize,
        signature: bool,
        bytes: Bytes,
    ) -> Result<()> {
        self.storage
            .write(&Self::sums_key(addr, version, n, signature), bytes)
            .await
    }

    /// Reads a kept SHA256SUMS file or signature.
    pub async fn read_sums(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        n: usize,
        signature: bool,
    ) -> Result<Option<Bytes>> {
        self.storage
            .read(&Self::sums_key(addr, version, n, signature))
            .await
    }

    /// Records what a committed archive showed, its `h1:` hash and its size, in its version
    /// record (memory and store), if the record's package for `platform` is that archive: its
    /// `shasum` is the archive's `sha256`. Returns whether it is (an archive stored under the
    /// package's name with other bytes is not the package, and vouches for nothing in it).
    pub async fn set_archive_facts(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
        sha256: &crate::hash::Sha256,
        h1: &crate::hash::H1,
        size: u64,
    ) -> Result<bool> {
        let mut is_package = false;
        self.update_packages(addr, version, |packages| {
            let Some(pkg) = packages.get_mut(platform).filter(|p| p.shasum == *sha256) else {
                return false;
            };
            is_package = true;
            if pkg.h1.as_ref() == Some(h1) && pkg.size == Some(size) {
                return false;
            }
            pkg.h1 = Some(h1.clone());
            pkg.size = Some(size);
            true
        })
        .await?;
        Ok(is_package)
    }

    /// Records archive sizes the origin stated, for packages whose size is not known yet.
    pub async fn set_stated_sizes(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        sizes: &[(Platform, u64)],
    ) -> Result<()> {
        self.update_packages(addr, version, |packages| {
            let mut changed = false;
            for (platform, size) in sizes {
                if let Some(pkg) = packages.get_mut(platform).filter(|p| p.size.is_none()) {
                    pkg.size = Some(*size);
                    changed = true;
                }
            }
            changed
        })
        .await
    }

    /// Changes a version record's packages with `change` (which says whether it changed
    /// anything), one update at a time, and stores the new record.
    async fn update_packages(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        change: impl FnOnce(&mut BTreeMap<Platform, Package>) -> bool,
    ) -> Result<()> {
        let _serialised = self.updates.lock().await;
        let key = (addr.clone(), version.clone());
        let current = match self.versions.get(&key).await {
            Some(rec) => Some((*rec).clone()),
            None => self.read_version(addr, version).await,
        };
        let Some(mut rec) = current else {
            return Ok(());
        };
        if !change(&mut rec.packages) {
            return Ok(());
        }
        self.write_version(addr, version, &rec).await?;
        self.versions.insert(key, Arc::new(rec)).await;
        Ok(())
    }

    async fn read_json<T: serde::de::DeserializeOwned>(&self, key: Key) -> Option<T> {
        let bytes = match self.storage.read(&key).await {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!("cannot read cached metadata: {e}");
                return None;
            }
        };
        match crate::records::from_json(&bytes) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(key = %key, "ignoring unreadable cached metadata: {e}");
                None
            }
        }
    }

    async fn write_json<T: serde::Serialize>(&self, key: Key, value: &T) -> Result<()> {
        self.changes.note();
        let bytes = serde_json::to_vec_pretty(value).expect("records serialise");
        self.storage.write(&key, Bytes::from(bytes)).await
    }
}

/// What `provender import` admits, merged into the records through the store's own write path.
impl MetaStore {
    /// Merges imported packages (their checksum files first, each kept once: reference,
    /// document, signature) into a version's record, made if missing. A package already
    /// recorded stays as it is, only gaining an `h1:` it lacked; each imported platform becomes
    /// offered and available.
    pub async fn merge_imported_version(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        packages: BTreeMap<Platform, Package>,
        sums: Vec<(crate::records::SumsRef, Bytes, Bytes)>,
    ) -> Result<()> {
        let _serialised = self.updates.lock().await;
        let existing = self.read_version(addr, version).await;
        let mut rec = existing.clone().unwrap_or_else(|| VersionRecord {
            fetched_at: crate::clock::now_secs(),
            offered: Vec::new(),
            unavailable: Vec::new(),
            packages: BTreeMap::new(),
            sums: Vec::new(),
            rendered: Default::default(),
        });
        for (reference, doc, sig) in sums {
            if rec.sums_index(&reference.url).is_some() {
                continue;
            }
            let n = rec.sums.len();
            self.write_sums(addr, version, n, false, doc).await?;
            self.write_sums(addr, version, n, true, sig).await?;
            rec.sums.push(reference);
        }
        for (platform, pkg) in packages {
            match rec.packages.get_mut(&platform) {
                Some(have) => {
                    if have.h1.is_none() {
                        have.h1 = pkg.h1;
                        have.size = pkg.size;
                    }
                }
                None => {
                    rec.packages.insert(platform.clone(), pkg);
                }
            }
            if !rec.offered.contains(&platform) {
                rec.offered.push(platform.clone());
            }
            rec.unavailable.retain(|p| p != &platform);
        }
        rec.offered.sort();
        if existing.as_ref() != Some(&rec) {
            self.write_version(addr, version, &rec).await?;
            self.versions
                .insert((addr.clone(), version.clone()), Arc::new(rec))
                .await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Package;

    #[tokio::test]
    async fn version_records_round_trip_through_disk() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Arc::new(crate::storage::DiskStorage::new(dir.path().to_path_buf()).unwrap());
        let store = MetaStore::new(storage, 10);
        let addr = ProviderAddr::new("registry.terraform.io", "acme", "foo").unwrap();
        let v = Version::parse("1.0.0+b.1").unwrap();
        let linux = Platform::parse("linux_amd64").unwrap();
        let pkg = Package {
            protocols: vec!["5.0".into()],
            filename: addr.archive_filename(&v, &linux),
            download_url: Some("https://x/f.zip".into()),
            shasum: crate::hash::Sha256::of(b"f"),
            shasums_url: Some("https://x/S".into()),
            shasums_signature_url: Some("https://x/S.sig".into()),
            signing_keys: vec![],
            h1: None,
            size: None,
            reported_h1: None,
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
        // An archive with other bytes than the package's vouches for nothing in its record.
        let other = crate::hash::Sha256::of(b"other");
        let (h1, other_h1) = (crate::hash::test_h1(1), crate::hash::test_h1(2));
        let set = store.set_archive_facts(&addr, &v, &linux, &other, &other_h1, 9);
        assert!(!set.await.unwrap());
        assert_eq!(store.read_version(&addr, &v).await.unwrap(), rec);
        let sha256 = crate::hash::Sha256::of(b"f");
        let set = store.set_archive_facts(&addr, &v, &linux, &sha256, &h1, 7);
        assert!(set.await.unwrap());
        let back = store.read_version(&addr, &v).await.unwrap();
        assert_eq!(back.packages[&linux].h1, Some(crate::hash::test_h1(1)));
        assert!(back.covers(|_| true));

        // A record whose package is named for another platform is read as absent, except by
        // the checks that judge it.
        let mut misnamed = back.clone();
        let pkg = misnamed.packages.get_mut(&linux).unwrap();
        pkg.filename = addr.archive_filename(&v, &Platform::parse("darwin_arm64").unwrap());
        store.write_version(&addr, &v, &misnamed).await.unwrap();
        assert_eq!(store.read_version(&addr, &v).await, None);
        assert_eq!(
            store.read_version_as_stored(&addr, &v).await,
            Some(misnamed)
        );
    }
}
