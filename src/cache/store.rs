//! The archive store: where verified provider archives live.
//!
//! [`ArchiveStore`] is the seam for other backends (object storage): the mirror only ever asks
//! it to open, describe or commit an archive. Downloads are first staged as local files (see
//! [`Staging`]) because hashing needs the whole file; a backend's `commit` takes such a file,
//! already verified and fsynced, and must make it visible atomically.
//!
//! [`DiskStore`] keeps `<archive>.zip` plus a `<archive>.zip.json` sidecar with its hashes. The
//! sidecar is written first and the zip renamed into place last, so a zip that exists always has
//! its description; a zip without a readable sidecar is treated as absent.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use async_trait::async_trait;
use tokio::io::AsyncRead;

use crate::address::{Platform, ProviderAddr, Version};

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
    pub trust: Option<crate::trust::SignatureKind>,
}

/// An open, committed archive.
pub struct StoredArchive {
    pub info: ArchiveInfo,
    pub modified: SystemTime,
    pub body: Pin<Box<dyn AsyncRead + Send + Sync>>,
}

/// One archive found by [`ArchiveStore::list`].
#[derive(Debug, Clone)]
pub struct StoredEntry {
    pub key: ArchiveKey,
    /// `None` when the archive has no readable record (it is then not served).
    pub info: Option<ArchiveInfo>,
    pub size: u64,
    pub modified: SystemTime,
    /// Last time the archive was read, where the backend knows it.
    pub last_used: Option<SystemTime>,
}

/// Storage for verified archives.
#[async_trait]
pub trait ArchiveStore: Send + Sync + 'static {
    /// Opens a committed archive, or `None` when the store does not have it.
    async fn open(&self, key: &ArchiveKey) -> io::Result<Option<StoredArchive>>;
    /// Describes a committed archive without opening its body.
    async fn info(&self, key: &ArchiveKey) -> io::Result<Option<ArchiveInfo>>;
    /// Makes a staged, verified file the archive for `key`, atomically. Consumes the staged file.
    async fn commit(
        &self,
        key: &ArchiveKey,
        staged: StagedFile,
        info: &ArchiveInfo,
    ) -> io::Result<()>;
    /// Every archive in the store (a full scan).
    async fn list(&self) -> io::Result<Vec<StoredEntry>>;
    /// Deletes an archive (eviction). Returns whether it was there.
    async fn remove(&self, key: &ArchiveKey) -> io::Result<bool>;
    /// Records that an archive was just read, where the backend keeps such a thing (used to
    /// order evictions after a restart).
    async fn touch(&self, _key: &ArchiveKey) {}
    /// Takes an archive out of service (e.g. it failed re-verification), keeping its bytes for
    /// inspection. Returns where it went, or `None` if the store did not have it.
    async fn quarantine(&self, key: &ArchiveKey) -> io::Result<Option<String>>;
    /// Checks that the store can be read now (for readiness); the error says what failed.
    async fn probe(&self) -> io::Result<()>;
}

/// Local scratch space for downloads in progress (`<cache.dir>/tmp`).
#[derive(Debug, Clone)]
pub struct Staging {
    dir: PathBuf,
}

static STAGE_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Staging {
    /// Creates the directory and removes what earlier processes left in it (a crash or
    /// `kill -9` mid-download); files of processes still running (another command using the same
    /// cache) are left alone. Returns the number of leftovers removed.
    pub fn open(dir: PathBuf) -> io::Result<(Staging, usize)> {
        std::fs::create_dir_all(&dir)?;
        let mut removed = 0;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.split('-').next().unwrap_or_default();
            if entry.file_type()?.is_file()
                && super::writer_is_gone(pid)
                && std::fs::remove_file(entry.path()).is_ok()
            {
                removed += 1;
            }
        }
        Ok((Staging { dir }, removed))
    }

    /// Checks that a staging file can be created, written and removed now (for readiness).
    pub async fn probe(&self) -> io::Result<()> {
        let path = self.dir.join(format!(
            "{}-probe-{}",
            std::process::id(),
            STAGE_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = tokio::fs::write(&path, b"probe").await;
        let removed = tokio::fs::remove_file(&path).await;
        written
            .and(removed)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.dir.display())))
    }

    /// A new, empty staging file.
    pub async fn create(&self) -> io::Result<(StagedFile, tokio::fs::File)> {
        let name = format!(
            "{}-{}.part",
            std::process::id(),
            STAGE_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = self.dir.join(name);
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .read(true)
            .create_new(true)
            .open(&path)
            .await?;
        Ok((StagedFile { path: Some(path) }, file))
    }
}

/// A file in the staging area; deleted when dropped unless a store took it.
#[derive(Debug)]
pub struct StagedFile {
    path: Option<PathBuf>,
}

impl StagedFile {
    pub fn path(&self) -> &Path {
        self.path
            .as_deref()
            .expect("staged file is present until taken")
    }

    /// Hands the file over; the caller becomes responsible for it.
    pub fn take(mut self) -> PathBuf {
        self.path
            .take()
            .expect("staged file is present until taken")
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Archives as files under `<cache.dir>/archives`; quarantined ones under `<cache.dir>/quarantine`.
#[derive(Debug, Clone)]
pub struct DiskStore {
    root: PathBuf,
    quarantine: PathBuf,
}

impl DiskStore {
    pub fn new(root: PathBuf, quarantine: PathBuf) -> io::Result<DiskStore> {
        std::fs::create_dir_all(&root)?;
        Ok(DiskStore { root, quarantine })
    }

    /// The key an archive path under the root stands for, if it is a well-formed one.
    fn key_of(&self, path: &Path) -> Option<ArchiveKey> {
        let rel = path.strip_prefix(&self.root).ok()?;
        let parts: Vec<&str> = rel.iter().map(|c| c.to_str()).collect::<Option<_>>()?;
        let [host, ns, ty, version, file] = parts.as_slice() else {
            return None;
        };
        match crate::address::MirrorPath::parse(&format!("{host}/{ns}/{ty}/{file}")).ok()? {
            crate::address::MirrorPath::Archive(addr, v, platform) if v.as_str() == *version => {
                Some(ArchiveKey {
                    addr,
                    version: v,
                    platform,
                })
            }
            _ => None,
        }
    }

    fn zip_files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_dir() {
                    stack.push(entry.path());
                } else if entry.file_name().to_string_lossy().ends_with(".zip") {
                    out.push(entry.path());
                }
            }
        }
        out.sort();
        out
    }

    /// `<root>/<host>/<namespace>/<type>/<version>/<filename>`. Every part was validated by the
    /// address types, so none can escape the root.
    pub fn path_of(&self, key: &ArchiveKey) -> PathBuf {
        self.root
            .join(key.addr.hostname.as_str())
            .join(&key.addr.namespace)
            .join(&key.addr.type_)
            .join(key.version.as_str())
            .join(key.filename())
    }

    fn sidecar(zip: &Path) -> PathBuf {
        let mut s = zip.as_os_str().to_owned();
        s.push(".json");
        PathBuf::from(s)
    }

    async fn read_info(&self, zip: &Path) -> io::Result<Option<ArchiveInfo>> {
        match tokio::fs::read(Self::sidecar(zip)).await {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl ArchiveStore for DiskStore {
    async fn open(&self, key: &ArchiveKey) -> io::Result<Option<StoredArchive>> {
        let path = self.path_of(key);
        let file = match tokio::fs::File::open(&path).await {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(info) = self.read_info(&path).await? else {
            return Ok(None);
        };
        let meta = file.metadata().await?;
        if meta.len() != info.size {
            tracing::warn!(archive = %path.display(), "archive size differs from its record; treating it as absent");
            return Ok(None);
        }
        Ok(Some(StoredArchive {
            info,
            modified: meta.modified()?,
            body: Box::pin(file),
        }))
    }

    async fn info(&self, key: &ArchiveKey) -> io::Result<Option<ArchiveInfo>> {
        let path = self.path_of(key);
        if !tokio::fs::try_exists(&path).await? {
            return Ok(None);
        }
        self.read_info(&path).await
    }

    async fn commit(
        &self,
        key: &ArchiveKey,
        staged: StagedFile,
        info: &ArchiveInfo,
    ) -> io::Result<()> {
        let path = self.path_of(key);
        let sidecar = Self::sidecar(&path);
        let json = serde_json::to_vec(info).map_err(io::Error::other)?;
        let staged_path = staged.path().to_path_buf();
        tokio::task::spawn_blocking(move || -> io::Result<()> {
            let dir = path.parent().expect("archive path has a parent");
            std::fs::create_dir_all(dir)?;
            super::write_atomic(&sidecar, &json)?;
            std::fs::rename(&staged_path, &path)?;
            super::sync_dir(dir);
            Ok(())
        })
        .await
        .map_err(io::Error::other)??;
        // The file now lives in the store; don't let the guard delete the new name's old path.
        let _ = staged.take();
        Ok(())
    }

    async fn list(&self) -> io::Result<Vec<StoredEntry>> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for zip in this.zip_files() {
                let Some(key) = this.key_of(&zip) else {
                    tracing::warn!(file = %zip.display(), "ignoring a file that is not a provider archive");
                    continue;
                };
                let Ok(meta) = std::fs::metadata(&zip) else { continue };
                let info = std::fs::read(Self::sidecar(&zip)).ok().and_then(|b| serde_json::from_slice(&b).ok());
                out.push(StoredEntry {
                    key,
                    info,
                    size: meta.len(),
                    modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    last_used: meta.accessed().ok(),
                });
            }
            out
        })
        .await
        .map_err(io::Error::other)
    }

    async fn remove(&self, key: &ArchiveKey) -> io::Result<bool> {
        let path = self.path_of(key);
        tokio::task::spawn_blocking(move || -> io::Result<bool> {
            // The zip first: a sidecar without its zip is ignored, the reverse would be served.
            let removed = match std::fs::remove_file(&path) {
                Ok(()) => true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(e) => return Err(e),
            };
            let _ = std::fs::remove_file(Self::sidecar(&path));
            Ok(removed)
        })
        .await
        .map_err(io::Error::other)?
    }

    async fn touch(&self, key: &ArchiveKey) {
        let path = self.path_of(key);
        let _ = tokio::task::spawn_blocking(move || {
            let file = std::fs::File::options().write(true).open(&path)?;
            file.set_times(std::fs::FileTimes::new().set_accessed(SystemTime::now()))
        })
        .await;
    }

    async fn probe(&self) -> io::Result<()> {
        let mut entries = tokio::fs::read_dir(&self.root)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.root.display())))?;
        entries.next_entry().await.map(|_| ())
    }

    async fn quarantine(&self, key: &ArchiveKey) -> io::Result<Option<String>> {
        let path = self.path_of(key);
        let rel = path
            .strip_prefix(&self.root)
            .expect("archive paths live under the root")
            .to_path_buf();
        let stamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut target = self.quarantine.join(&rel).into_os_string();
        target.push(format!(".{stamp}"));
        let target = PathBuf::from(target);
        tokio::task::spawn_blocking(move || -> io::Result<Option<String>> {
            if !path.exists() {
                return Ok(None);
            }
            std::fs::create_dir_all(target.parent().expect("quarantine path has a parent"))?;
            // Move the zip first: without it the sidecar alone serves nothing.
            std::fs::rename(&path, &target)?;
            let _ = std::fs::rename(Self::sidecar(&path), Self::sidecar(&target));
            Ok(Some(target.display().to_string()))
        })
        .await
        .map_err(io::Error::other)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn key() -> ArchiveKey {
        ArchiveKey {
            addr: ProviderAddr::new("registry.terraform.io", "acme", "foo").unwrap(),
            version: Version::parse("1.0.0").unwrap(),
            platform: Platform::parse("linux_amd64").unwrap(),
        }
    }

    #[tokio::test]
    async fn commit_then_open() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            DiskStore::new(dir.path().join("archives"), dir.path().join("quarantine")).unwrap();
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

        let mut got = store.open(&key()).await.unwrap().unwrap();
        assert_eq!(got.info, info);
        let mut body = Vec::new();
        got.body.read_to_end(&mut body).await.unwrap();
        assert_eq!(body, b"zip bytes");
        let listed = store.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].size, listed[0].info.as_ref()), (9, Some(&info)));
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
            0
        );
    }

    #[tokio::test]
    async fn dropped_staging_files_vanish_and_leftovers_are_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let (staging, _) = Staging::open(dir.path().join("tmp")).unwrap();
        let (staged, _f) = staging.create().await.unwrap();
        let path = staged.path().to_path_buf();
        drop(staged);
        assert!(!path.exists());
        // A process that is gone (pid beyond the kernel's maximum) and one still running (us,
        // but we count as gone for our own files, so use our parent).
        std::fs::write(dir.path().join("tmp/4294967295-0.part"), b"left by a crash").unwrap();
        let parent = std::os::unix::process::parent_id();
        std::fs::write(dir.path().join(format!("tmp/{parent}-0.part")), b"in use").unwrap();
        let (_, removed) = Staging::open(dir.path().join("tmp")).unwrap();
        assert_eq!(removed, 1);
        assert!(
            dir.path().join(format!("tmp/{parent}-0.part")).exists(),
            "a live writer's file stays"
        );
    }

    #[tokio::test]
    async fn a_zip_without_its_record_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            DiskStore::new(dir.path().join("archives"), dir.path().join("quarantine")).unwrap();
        let path = store.path_of(&key());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"orphan").unwrap();
        assert!(store.open(&key()).await.unwrap().is_none());
        assert!(store.info(&key()).await.unwrap().is_none());
    }
}
