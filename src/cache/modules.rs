//! Cached modules: version lists, and per version the package provender serves with its
//! record.
//!
//! ```text
//! modules/<host>/<namespace>/<name>/<system>/versions.json            version list + fetch time
//! modules/<host>/<namespace>/<name>/<system>/<version>/module.tar.gz  the package
//! modules/<host>/<namespace>/<name>/<system>/<version>/module.json    its record (the commit point)
//! ```
//!
//! As for provider archives, the package is stored first and its record last; a package
//! without a record is not served. Records are immutable and kept in memory.

use std::sync::Arc;

use bytes::Bytes;

use super::StagedFile;
use crate::address::{MODULE_ARCHIVE, ModuleAddr, Version};
use crate::records::{ModuleRecord, ModuleVersions};
use crate::storage::{Key, Object, Result, Storage};

/// Modules in a store.
pub struct ModuleStore {
    storage: Arc<dyn Storage>,
    /// Version lists kept in memory.
    pub versions: moka::future::Cache<ModuleAddr, Arc<ModuleVersions>>,
    records: moka::sync::Cache<(ModuleAddr, Version), Arc<ModuleRecord>>,
}

fn base(addr: &ModuleAddr) -> Vec<String> {
    vec![
        "modules".into(),
        addr.hostname.to_string(),
        addr.namespace.clone(),
        addr.name.clone(),
        addr.system.clone(),
    ]
}

fn versions_key(addr: &ModuleAddr) -> Key {
    let mut k = base(addr);
    k.push("versions.json".into());
    Key::new(k)
}

/// The store key of a module version's package.
pub fn package_key(addr: &ModuleAddr, version: &Version) -> Key {
    let mut k = base(addr);
    k.extend([version.to_string(), MODULE_ARCHIVE.to_string()]);
    Key::new(k)
}

fn record_key(addr: &ModuleAddr, version: &Version) -> Key {
    let mut k = base(addr);
    k.extend([version.to_string(), "module.json".to_string()]);
    Key::new(k)
}

/// One module version found by [`ModuleStore::list`].
#[derive(Debug, Clone)]
pub struct StoredModule {
    pub addr: ModuleAddr,
    pub version: Version,
    /// `None` when the package has no readable record (it is then not served).
    pub record: Option<ModuleRecord>,
    pub size: u64,
    pub modified: std::time::SystemTime,
    /// Last time the package was served, where the backend knows it.
    pub last_used: Option<std::time::SystemTime>,
}

impl StoredModule {
    /// When the package was last served or, if later, stored.
    pub fn last_use(&self) -> std::time::SystemTime {
        crate::storage::last_use(self.modified, self.last_used)
    }
}

impl ModuleStore {
    /// The modules in `storage`; `capacity` bounds each in-memory cache.
    pub fn new(storage: Arc<dyn Storage>, capacity: u64) -> ModuleStore {
        ModuleStore {
            storage,
            versions: moka::future::Cache::builder()
                .max_capacity(capacity)
                .build(),
            records: moka::sync::Cache::new(capacity),
        }
    }

    /// The persisted version list, if any (unreadable ones are logged and ignored).
    pub async fn read_versions(&self, addr: &ModuleAddr) -> Option<ModuleVersions> {
        let bytes = match self.storage.read(&versions_key(addr)).await {
            Ok(found) => found?,
            Err(e) => {
                tracing::warn!(module = %addr, "cannot read the cached version list: {e}");
                return None;
            }
        };
        serde_json::from_slice(&bytes)
            .map_err(|e| tracing::warn!(module = %addr, "ignoring an unreadable version list: {e}"))
            .ok()
    }

    /// Persists a found version list.
    pub async fn write_versions(&self, addr: &ModuleAddr, rec: &ModuleVersions) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(rec).expect("records serialise");
        self.storage
            .write(&versions_key(addr), Bytes::from(bytes))
            .await
    }

    /// The record of a cached module version.
    pub async fn record(
        &self,
        addr: &ModuleAddr,
        version: &Version,
    ) -> Result<Option<ModuleRecord>> {
        let key = (addr.clone(), version.clone());
        if let Some(rec) = self.records.get(&key) {
            return Ok(Some((*rec).clone()));
        }
        let Some(bytes) = self.storage.read(&record_key(addr, version)).await? else {
            return Ok(None);
        };
        match serde_json::from_slice::<ModuleRecord>(&bytes) {
            Ok(rec) => {
                self.records.insert(key, Arc::new(rec.clone()));
                Ok(Some(rec))
            }
            Err(e) => {
                tracing::warn!(module = %addr, %version, "ignoring an unreadable module record: {e}");
                Ok(None)
            }
        }
    }

    /// Opens a cached package with its record; `None` when there is none (or its size differs
    /// from the record's).
    pub async fn open(
        &self,
        addr: &ModuleAddr,
        version: &Version,
    ) -> Result<Option<(ModuleRecord, Object)>> {
        let Some(rec) = self.record(addr, version).await? else {
            return Ok(None);
        };
        let Some(object) = self.storage.open(&package_key(addr, version)).await? else {
            self.records.invalidate(&(addr.clone(), version.clone()));
            return Ok(None);
        };
        if object.meta.size != rec.size {
            self.records.invalidate(&(addr.clone(), version.clone()));
            return Ok(None);
        }
        Ok(Some((rec, object)))
    }

    /// Makes a staged package the one for `addr` `version`: the package, then its record.
    pub async fn commit(
        &self,
        addr: &ModuleAddr,
        version: &Version,
        staged: StagedFile,
        rec: &ModuleRecord,
    ) -> Result<()> {
        self.storage
            .put_file(&package_key(addr, version), staged.path())
            .await?;
        drop(staged);
        let bytes = serde_json::to_vec_pretty(rec).expect("records serialise");
        self.storage
            .write(&record_key(addr, version), Bytes::from(bytes))
            .await?;
        self.records
            .insert((addr.clone(), version.clone()), Arc::new(rec.clone()));
        Ok(())
    }

    /// Every cached module version (a full scan), with its record.
    pub async fn list(&self) -> Result<Vec<StoredModule>> {
        let mut out = Vec::new();
        for o in self.storage.list(&Key::new(["modules"])).await? {
            let parts: Vec<&str> = o.key.segments().collect();
            let ["modules", host, ns, name, system, version, file] = parts.as_slice() else {
                continue;
            };
            if *file != MODULE_ARCHIVE {
                continue;
            }
            let (Ok(addr), Ok(version)) = (
                ModuleAddr::new(host, ns, name, system),
                Version::parse_lenient(version),
            ) else {
                continue;
            };
            let record = self.record(&addr, &version).await?;
            out.push(StoredModule {
                addr,
                version,
                record,
                size: o.size,
                modified: o.modified,
                last_used: o.last_used,
            });
        }
        Ok(out)
    }

    /// Takes a module version out of service, keeping its package for inspection under
    /// `quarantine/modules/`. Returns where it went, or `None` if it was not there.
    pub async fn quarantine(&self, addr: &ModuleAddr, version: &Version) -> Result<Option<String>> {
        self.records.invalidate(&(addr.clone(), version.clone()));
        let stamp = format!(".{}", crate::clock::now_secs());
        let moved = |k: &Key| {
            let segments = std::iter::once("quarantine").chain(k.segments());
            Key::new(segments).with_suffix(&stamp)
        };
        let record = record_key(addr, version);
        self.storage.rename(&record, &moved(&record)).await?;
        let package = package_key(addr, version);
        let target = moved(&package);
        if !self.storage.rename(&package, &target).await? {
            return Ok(None);
        }
        Ok(Some(format!(
            "{}/{target}",
            self.storage.describe().trim_end_matches('/')
        )))
    }

    /// Takes a module version out of service, record first. Returns whether it was there.
    pub async fn remove(&self, addr: &ModuleAddr, version: &Version) -> Result<bool> {
        self.records.invalidate(&(addr.clone(), version.clone()));
        self.storage.delete(&record_key(addr, version)).await?;
        self.storage.delete(&package_key(addr, version)).await
    }

    /// Drops a version from the module's cached version list (deleting the list when none is
    /// left), for a mirror that serves only what it holds. Returns whether it was listed.
    pub async fn unlist(&self, addr: &ModuleAddr, version: &Version) -> Result<bool> {
        self.versions.invalidate(addr).await;
        let Some(mut rec) = self.read_versions(addr).await else {
            return Ok(false);
        };
        let before = rec.versions.len();
        rec.versions.retain(|v| v != version);
        if rec.versions.len() == before {
            return Ok(false);
        }
        if rec.versions.is_empty() {
            self.storage.delete(&versions_key(addr)).await?;
        } else {
            self.write_versions(addr, &rec).await?;
        }
        Ok(true)
    }

    /// Records that a module version's package was just served.
    pub async fn touch(&self, addr: &ModuleAddr, version: &Version) {
        self.storage.touch(&package_key(addr, version)).await
    }
}
