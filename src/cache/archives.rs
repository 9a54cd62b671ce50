//! Verified provider archives in the store, each with its record.
//!
//! An archive lives at `archives/<host>/<namespace>/<type>/<version>/<file>.zip` with its
//! [`ArchiveInfo`] (SHA-256, `h1:`, size, trust level) beside it as `<file>.zip.json`. The zip
//! is uploaded first and the record written last: **the record is the commit point**. A zip
//! without a record (a crash in between) is not served and is overwritten by the next fill; a
//! record whose zip has another size is treated as absent. Removal goes the other way, record
//! first. Records are immutable once written (a fresh fill of the same archive writes the same
//! record), so they are also kept in memory, and a hit reads only the zip.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

use super::StagedFile;
use crate::address::MirrorPath;
use crate::records::{ArchiveInfo, ArchiveKey};
use crate::storage::{Key, Result, Storage, StorageError};

/// An open, committed archive.
pub struct StoredArchive {
    pub info: ArchiveInfo,
    pub modified: SystemTime,
    pub body: BoxStream<'static, std::io::Result<Bytes>>,
}

impl StoredArchive {
    /// The body as an `AsyncRead`, for code that copies or hashes it.
    pub fn into_reader(self) -> impl tokio::io::AsyncRead + Send + Unpin {
        tokio_util::io::StreamReader::new(self.body)
    }
}

/// One archive found by [`Archives::list`].
#[derive(Debug, Clone)]
pub struct StoredEntry {
    pub key: ArchiveKey,
    /// `None` when the archive has no readable record (it is then not served).
    pub info: Option<ArchiveInfo>,
    pub size: u64,
    pub modified: SystemTime,
    /// Last time the archive was served, where the backend knows it.
    pub last_used: Option<SystemTime>,
}

impl StoredEntry {
    /// When the archive was last served or, if later, stored.
    pub fn last_use(&self) -> SystemTime {
        crate::storage::last_use(self.modified, self.last_used)
    }
}

/// The archives in a store.
pub struct Archives {
    storage: Arc<dyn Storage>,
    records: moka::sync::Cache<ArchiveKey, Arc<ArchiveInfo>>,
}

/// The store key of an archive's zip.
pub fn zip_key(key: &ArchiveKey) -> Key {
    Key::new([
        "archives",
        key.addr.hostname.as_str(),
        &key.addr.namespace,
        &key.addr.type_,
        key.version.as_str(),
        &key.filename(),
    ])
}

fn record_key(key: &ArchiveKey) -> Key {
    zip_key(key).with_suffix(".json")
}

/// The archive a zip key stands for, if it is a well-formed one.
fn archive_of(key: &Key) -> Option<ArchiveKey> {
    let parts: Vec<&str> = key.segments().collect();
    let ["archives", host, ns, ty, version, file] = parts.as_slice() else {
        return None;
    };
    match MirrorPath::parse(&format!("{host}/{ns}/{ty}/{file}")).ok()? {
        MirrorPath::Archive(addr, v, platform) if v.as_str() == *version => Some(ArchiveKey {
            addr,
            version: v,
            platform,
        }),
        _ => None,
    }
}

impl Archives {
    /// The archives in `storage`; up to `capacity` records are kept in memory.
    pub fn new(storage: Arc<dyn Storage>, capacity: u64) -> Archives {
        Archives {
            storage,
            records: moka::sync::Cache::new(capacity),
        }
    }

    /// The store they live in.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    fn bad_record(&self, key: &ArchiveKey, e: impl std::fmt::Display) -> StorageError {
        StorageError::Failed {
            store: self.storage.describe(),
            key: record_key(key).to_string(),
            message: format!("unreadable archive record: {e}"),
        }
    }

    /// The record of a committed archive, without opening the archive.
    pub async fn info(&self, key: &ArchiveKey) -> Result<Option<ArchiveInfo>> {
        if let Some(info) = self.records.get(key) {
            return Ok(Some((*info).clone()));
        }
        let Some(bytes) = self.storage.read(&record_key(key)).await? else {
            return Ok(None);
        };
        let info: ArchiveInfo = match serde_json::from_slice(&bytes) {
            Ok(info) => info,
            Err(e) => {
                tracing::warn!(archive = %key, "{}", self.bad_record(key, e));
                return Ok(None);
            }
        };
        self.records.insert(key.clone(), Arc::new(info.clone()));
        Ok(Some(info))
    }

    /// Opens a committed archive, or `None` when there is none (or its zip does not match its
    /// record's size).
    pub async fn open(&self, key: &ArchiveKey) -> Result<Option<StoredArchive>> {
        let Some(info) = self.info(key).await? else {
            return Ok(None);
        };
        let Some(object) = self.storage.open(&zip_key(key)).await? else {
            self.records.invalidate(key);
            return Ok(None);
        };
        if object.meta.size != info.size {
            tracing::warn!(archive = %key, size = object.meta.size, recorded = info.size, "archive size differs from its record; treating it as absent");
            self.records.invalidate(key);
            return Ok(None);
        }
        Ok(Some(StoredArchive {
            info,
            modified: object.meta.modified,
            body: object.body,
        }))
    }

    /// Makes a staged, verified file the archive for `key`: the zip first, then its record.
    pub async fn commit(
        &self,
        key: &ArchiveKey,
        staged: StagedFile,
        info: &ArchiveInfo,
    ) -> Result<()> {
        let record = serde_json::to_vec(info).expect("records serialise");
        self.storage.put_file(&zip_key(key), staged.path()).await?;
        // Taken by the store (or copied from; then the guard removes the local copy).
        drop(staged);
        self.storage
            .write(&record_key(key), Bytes::from(record))
            .await?;
        self.records.insert(key.clone(), Arc::new(info.clone()));
        Ok(())
    }

    /// Every archive in the store, with its record (a full scan).
    pub async fn list(&self) -> Result<Vec<StoredEntry>> {
        let mut entries = self.scan().await?;
        let keys: Vec<ArchiveKey> = entries.iter().map(|e| e.key.clone()).collect();
        let infos = futures_util::stream::iter(keys)
            .map(|key| async move { self.info(&key).await })
            .buffered(16)
            .collect::<Vec<_>>()
            .await;
        for (entry, info) in entries.iter_mut().zip(infos) {
            entry.info = info?;
        }
        Ok(entries)
    }

    /// Every archive in the store with its size and times, without reading records.
    pub async fn scan(&self) -> Result<Vec<StoredEntry>> {
        let objects = self.storage.list(&Key::new(["archives"])).await?;
        let mut out = Vec::new();
        for o in objects {
            if !o.key.as_str().ends_with(".zip") {
                continue;
            }
            let Some(key) = archive_of(&o.key) else {
                tracing::warn!(key = %o.key, "ignoring an object that is not a provider archive");
                continue;
            };
            out.push(StoredEntry {
                key,
                info: None,
                size: o.size,
                modified: o.modified,
                last_used: o.last_used,
            });
        }
        Ok(out)
    }

    /// Deletes an archive (eviction, `provender prune`). Returns whether it was there.
    pub async fn remove(&self, key: &ArchiveKey) -> Result<bool> {
        self.records.invalidate(key);
        // The record first: without it the zip is not served.
        self.storage.delete(&record_key(key)).await?;
        self.storage.delete(&zip_key(key)).await
    }

    /// Takes an archive out of service (it failed re-verification), keeping its bytes for
    /// inspection under `quarantine/`. Returns where it went, or `None` if it was not there.
    pub async fn quarantine(&self, key: &ArchiveKey) -> Result<Option<String>> {
        self.records.invalidate(key);
        let stamp = format!(".{}", crate::clock::now_secs());
        let zip = zip_key(key);
        let moved = |k: &Key| {
            let mut segments: Vec<String> = k.segments().map(str::to_string).collect();
            segments[0] = "quarantine".into();
            Key::new(segments).with_suffix(&stamp)
        };
        let record = record_key(key);
        self.storage.rename(&record, &moved(&record)).await?;
        let target = moved(&zip);
        if !self.storage.rename(&zip, &target).await? {
            return Ok(None);
        }
        Ok(Some(format!(
            "{}/{target}",
            self.storage.describe().trim_end_matches('/')
        )))
    }

    /// Records that an archive was just served (orders evictions after a restart; what
    /// `provender prune` goes by).
    pub async fn touch(&self, key: &ArchiveKey) {
        self.storage.touch(&zip_key(key)).await
    }

    /// A URL the client may fetch the archive from directly, where the store can sign one.
    pub async fn signed_url(
        &self,
        key: &ArchiveKey,
        ttl: std::time::Duration,
    ) -> Result<Option<url::Url>> {
        self.storage.signed_url(&zip_key(key), ttl).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::{Platform, ProviderAddr, Version};
    use crate::cache::Staging;
    use crate::storage::DiskStorage;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn key() -> ArchiveKey {
        ArchiveKey {
            addr: ProviderAddr::new("registry.terraform.io", "acme", "foo").unwrap(),
            version: Version::parse("1.0.0").unwrap(),
            platform: Platform::parse("linux_amd64").unwrap(),
        }
    }

    fn archives(dir: &std::path::Path) -> Archives {
        let storage = Arc::new(DiskStorage::new(dir.to_path_buf()).unwrap());
        Archives::new(storage, 100)
    }

    #[tokio::test]
    async fn commit_then_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = archives(dir.path());
        let (staging, _) = Staging::open(dir.path().join("tmp")).unwrap();
        assert!(store.open(&key()).await.unwrap().is_none());

        let (staged, mut file) = staging.create().await.unwrap();
        file.write_all(b"zip bytes").await.unwrap();
        file.sync_all().await.unwrap();
        let info = ArchiveInfo {
            sha256: "00".repeat(32),
            h1: "h1:x".into(),
            size: 9,
            trust: None,
        };
        store.commit(&key(), staged, &info).await.unwrap();

        let got = store.open(&key()).await.unwrap().unwrap();
        assert_eq!(got.info, info);
        let mut body = Vec::new();
        got.into_reader().read_to_end(&mut body).await.unwrap();
        assert_eq!(body, b"zip bytes");
        let listed = store.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].size, listed[0].info.as_ref()), (9, Some(&info)));
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
            0
        );
        // Quarantined: gone from service, kept for inspection.
        let to = store.quarantine(&key()).await.unwrap().unwrap();
        assert!(
            to.contains("quarantine/registry.terraform.io/acme/foo/1.0.0/"),
            "{to}"
        );
        assert!(store.open(&key()).await.unwrap().is_none());
        assert!(store.list().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_zip_without_its_record_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        let store = archives(dir.path());
        let path = dir.path().join(zip_key(&key()).as_str());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"orphan").unwrap();
        assert!(store.open(&key()).await.unwrap().is_none());
        assert!(store.info(&key()).await.unwrap().is_none());
        let listed = store.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].info.is_none(), "listed, but without a record");
    }
}
