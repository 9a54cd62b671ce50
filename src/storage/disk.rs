//! [`DiskStorage`]: objects as files under a directory.
//!
//! A key is a relative path. Every write goes to a temporary file (`.tmp-<pid>-...`) in the
//! target's directory, is fsynced, renamed into place, and the directory fsynced: a crash
//! leaves the old file or the new one, plus at most a temporary file that the next start
//! removes (see [`crate::fsio::remove_temp_files`]).
//!
//! An object's last use is its file's access time, set by [`Storage::touch`]. Reading an object
//! does not change it where the system allows (Linux `O_NOATIME`, for the file's owner), so
//! re-verification, exports and the like do not count as use.

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;

use super::{Key, Object, ObjectMeta, Result, Storage, StorageError};

/// Objects as files under `root`.
#[derive(Debug, Clone)]
pub struct DiskStorage {
    root: PathBuf,
}

impl DiskStorage {
    /// A store rooted at `root`, which is created if needed.
    pub fn new(root: PathBuf) -> io::Result<DiskStorage> {
        std::fs::create_dir_all(&root)?;
        Ok(DiskStorage { root })
    }

    /// The file of `key`; refused if the key is unsafe ([`Key::checked`]).
    pub fn path_of(&self, key: &Key) -> Result<PathBuf> {
        let path = key.checked()?;
        Ok(path.split('/').fold(self.root.clone(), |p, s| p.join(s)))
    }

    fn err(&self, key: impl std::fmt::Display, e: &io::Error) -> StorageError {
        StorageError::io(&self.describe(), key, e)
    }

    fn meta_of(key: Key, meta: &std::fs::Metadata) -> ObjectMeta {
        ObjectMeta {
            key,
            size: meta.len(),
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            last_used: meta.accessed().ok(),
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        key: &Key,
        f: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> Result<T> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| self.err(key, &io::Error::other(e)))?
            .map_err(|e| self.err(key, &e))
    }
}

/// `Ok(None)` for a missing file.
fn absent<T>(r: io::Result<T>) -> io::Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Opens a file for reading without counting the read as a use: its access time is left alone
/// where the system allows that (Linux: `O_NOATIME`, for the file's owner and privileged
/// processes; otherwise the file is opened as usual).
async fn open_unused(path: &Path) -> io::Result<tokio::fs::File> {
    #[cfg(target_os = "linux")]
    {
        let mut options = tokio::fs::OpenOptions::new();
        options.read(true).custom_flags(libc::O_NOATIME);
        match options.open(path).await {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {}
            other => return other,
        }
    }
    tokio::fs::File::open(path).await
}

/// Moves `from` to `to` (same file system), creating `to`'s directory and making the rename
/// durable. Across file systems the bytes are copied to a temporary file beside `to` first.
fn move_into_place(from: &Path, to: &Path) -> io::Result<()> {
    let dir = to.parent().expect("object paths have a parent");
    std::fs::create_dir_all(dir)?;
    match std::fs::rename(from, to) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
            let (tmp, mut out) = crate::fsio::temp_file_in(dir)?;
            let copied = std::fs::File::open(from)
                .and_then(|mut input| io::copy(&mut input, &mut out))
                .and_then(|_| out.sync_all())
                .and_then(|()| std::fs::rename(&tmp, to));
            if copied.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            copied?;
            let _ = std::fs::remove_file(from);
        }
        Err(e) => return Err(e),
    }
    crate::fsio::sync_dir(dir);
    Ok(())
}

#[async_trait]
impl Storage for DiskStorage {
    fn describe(&self) -> String {
        self.root.display().to_string()
    }

    async fn read(&self, key: &Key) -> Result<Option<Bytes>> {
        let path = self.path_of(key)?;
        let read = async {
            let mut file = open_unused(&path).await?;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).await?;
            Ok(bytes)
        };
        absent(read.await)
            .map(|b| b.map(Bytes::from))
            .map_err(|e| self.err(key, &e))
    }

    async fn open(&self, key: &Key) -> Result<Option<Object>> {
        let path = self.path_of(key)?;
        let file = absent(open_unused(&path).await).map_err(|e| self.err(key, &e))?;
        let Some(file) = file else {
            return Ok(None);
        };
        let meta = file.metadata().await.map_err(|e| self.err(key, &e))?;
        if !meta.is_file() {
            return Ok(None);
        }
        Ok(Some(Object {
            meta: Self::meta_of(key.clone(), &meta),
            body: tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024).boxed(),
        }))
    }

    async fn head(&self, key: &Key) -> Result<Option<ObjectMeta>> {
        let path = self.path_of(key)?;
        let meta = absent(tokio::fs::metadata(&path).await).map_err(|e| self.err(key, &e))?;
        Ok(meta
            .filter(|m| m.is_file())
            .map(|m| Self::meta_of(key.clone(), &m)))
    }

    async fn write(&self, key: &Key, bytes: Bytes) -> Result<()> {
        let path = self.path_of(key)?;
        self.blocking(key, move || crate::fsio::write_atomic(&path, &bytes))
            .await
    }

    async fn create(&self, key: &Key, bytes: Bytes) -> Result<bool> {
        let path = self.path_of(key)?;
        self.blocking(key, move || crate::fsio::create_new_atomic(&path, &bytes))
            .await
    }

    async fn put_file(&self, key: &Key, file: &Path) -> Result<()> {
        let (from, to) = (file.to_path_buf(), self.path_of(key)?);
        self.blocking(key, move || move_into_place(&from, &to))
            .await
    }

    async fn delete(&self, key: &Key) -> Result<bool> {
        let path = self.path_of(key)?;
        absent(tokio::fs::remove_file(&path).await)
            .map(|r| r.is_some())
            .map_err(|e| self.err(key, &e))
    }

    async fn rename(&self, from: &Key, to: &Key) -> Result<bool> {
        let (src, dst) = (self.path_of(from)?, self.path_of(to)?);
        self.blocking(from, move || {
            if !src.is_file() {
                return Ok(false);
            }
            move_into_place(&src, &dst).map(|()| true)
        })
        .await
    }

    async fn list(&self, prefix: &Key) -> Result<Vec<ObjectMeta>> {
        let start = self.path_of(prefix)?;
        let root = self.root.clone();
        self.blocking(prefix, move || {
            let mut out = Vec::new();
            let mut stack = vec![start];
            while let Some(dir) = stack.pop() {
                let Some(entries) = absent(std::fs::read_dir(&dir))? else {
                    continue;
                };
                for entry in entries.flatten() {
                    let Ok(kind) = entry.file_type() else {
                        continue;
                    };
                    let path = entry.path();
                    if kind.is_dir() {
                        stack.push(path);
                        continue;
                    }
                    if entry.file_name().to_string_lossy().starts_with(".tmp-") {
                        continue;
                    }
                    let key = path
                        .strip_prefix(&root)
                        .ok()
                        .and_then(|rel| rel.to_str())
                        .and_then(|rel| Key::parse(&rel.replace('\\', "/")));
                    if let (Some(key), Ok(meta)) = (key, entry.metadata()) {
                        out.push(DiskStorage::meta_of(key, &meta));
                    }
                }
            }
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
        .await
    }

    async fn probe(&self) -> Result<()> {
        let key = Key::new([format!(".probe-{}", std::process::id())]);
        let path = self.path_of(&key)?;
        self.blocking(&key, move || {
            std::fs::write(&path, b"probe")?;
            let back = std::fs::read(&path);
            std::fs::remove_file(&path)?;
            back.map(|_| ())
        })
        .await
    }

    async fn touch(&self, key: &Key) {
        let Ok(path) = self.path_of(key) else { return };
        // Setting a time needs the file's owner, not write access: a read-only file works too.
        let set = tokio::task::spawn_blocking(move || {
            std::fs::File::open(&path)?
                .set_times(std::fs::FileTimes::new().set_accessed(SystemTime::now()))
        })
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)));
        if let Err(e) = set {
            tracing::debug!(%key, "cannot record the object's use: {e}");
        }
    }
}
