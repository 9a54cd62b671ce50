//! Provider metadata: version lists and per-version download metadata.
//!
//! Records live in two bounded moka caches (the hot path never touches the store) and are
//! persisted as JSON under `metadata/` in the store, so a restarted server (or another replica
//! sharing the store) answers from what is already known. Both caches are bounded by entry count and evict the least recently used;
//! freshness of version lists is decided by the mirror from each record's `fetched_at`, and
//! version records are immutable.

use std::sync::Arc;

use bytes::Bytes;

use crate::address::{Platform, ProviderAddr, Version};
use crate::records::{IndexRecord, VersionRecord};
use crate::storage::{Key, Result, Storage};

type VersionKey = (ProviderAddr, Version);

/// Metadata caches plus their persisted copies.
pub struct MetaStore {
    storage: Arc<dyn Storage>,
    /// Serialises read-modify-write updates of version records (`set_h1`), which concurrent
    /// downloads of one version's platforms would otherwise race on.
    updates: tokio::sync::Mutex<()>,
    pub indexes: moka::future::Cache<ProviderAddr, Arc<IndexRecord>>,
    pub versions: moka::future::Cache<VersionKey, Arc<VersionRecord>>,
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

impl MetaStore {
    /// Metadata under `metadata/` in `storage`; `capacity` bounds each in-memory cache's entry
    /// count.
    pub fn new(storage: Arc<dyn Storage>, capacity: u64) -> MetaStore {
        MetaStore {
            storage,
            updates: tokio::sync::Mutex::new(()),
            indexes: moka::future::Cache::builder()
                .max_capacity(capacity)
                .build(),
            versions: moka::future::Cache::builder()
                .max_capacity(capacity)
                .build(),
        }
    }

    /// The persisted version list, if any (unreadable records are logged and ignored).
    pub async fn read_index(&self, addr: &ProviderAddr) -> Option<IndexRecord> {
        self.read_json(key_of(addr, "index.json")).await
    }

    /// Persists a found version list.
    pub async fn write_index(&self, addr: &ProviderAddr, rec: &IndexRecord) -> Result<()> {
        self.write_json(key_of(addr, "index.json"), rec).await
    }

    pub async fn read_version(
        &self,
        addr: &ProviderAddr,
        version: &Version,
    ) -> Option<VersionRecord> {
        self.read_json(key_of(addr, &format!("{version}.json")))
            .await
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

    /// Records the `h1:` hash of a committed archive in its version record (memory and store).
    pub async fn set_h1(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
        h1: &str,
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

    async fn read_json<T: serde::de::DeserializeOwned>(&self, key: Key) -> Option<T> {
        let bytes = match self.storage.read(&key).await {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!("cannot read cached metadata: {e}");
                return None;
            }
        };
        match serde_json::from_slice(&bytes) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(key = %key, "ignoring unreadable cached metadata: {e}");
                None
            }
        }
    }

    async fn write_json<T: serde::Serialize>(&self, key: Key, value: &T) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(value).expect("records serialise");
        self.storage.write(&key, Bytes::from(bytes)).await
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
