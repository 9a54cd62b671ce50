//! What provender keeps, on top of a [`Storage`](crate::storage::Storage): verified archives
//! with their records ([`Archives`]), provider metadata ([`MetaStore`]: a bounded in-memory LRU
//! in front of the store), the local staging area for downloads in progress ([`Staging`]), the
//! single-flight table that makes concurrent misses share one upstream fetch, and the LRU
//! budget behind `cache.max_size`.
//!
//! Nothing here speaks HTTP or knows about origin registries.
//!
//! Layout in the store (a directory for the disk backend, a bucket prefix for object stores):
//!
//! ```text
//! archives/<host>/<namespace>/<type>/<version>/<archive>.zip        committed, verified archive
//! archives/<host>/<namespace>/<type>/<version>/<archive>.zip.json   its record (the commit point)
//! metadata/<host>/<namespace>/<type>/index.json                     version list + fetch time
//! metadata/<host>/<namespace>/<type>/<version>.json                 download metadata per platform
//! metadata/<host>/<namespace>/<type>/<version>.SHA256SUMS.<n>[.sig]  the origin's checksum files
//! quarantine/<host>/.../<archive>.zip.<unix time>                   archives that failed re-verification
//! modules/<host>/<namespace>/<name>/<system>/...                   module version lists and packages
//! ```
//!
//! and always on local disk, under `cache.dir`: `tmp/` (downloads in progress) and `tls/`
//! (the generated CA and certificate).

mod archives;
mod budget;
mod flight;
mod meta;
mod modules;
mod staging;

pub use archives::{Archives, StoredArchive, StoredEntry, zip_key};
pub use budget::{Budget, Lease};
pub use flight::Flights;
pub use meta::MetaStore;
pub use modules::{ModuleStore, StoredModule, package_key};
pub use staging::{ScratchDir, StagedFile, Staging};

use std::io;
use std::path::Path;

/// Writes `bytes` to `path` atomically: temp file in the same directory, fsync, rename, fsync the
/// directory. Readers see the old content or the new, never a torn file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("path has no parent directory"))?;
    std::fs::create_dir_all(dir)?;
    let mut tmp = temp_file_in(dir)?;
    tmp.1.write_all(bytes)?;
    tmp.1.sync_all()?;
    std::fs::rename(&tmp.0, path)?;
    sync_dir(dir);
    Ok(())
}

/// A new temporary file in `dir`, named so that start-up clean-up knows its writer.
pub(crate) fn temp_file_in(dir: &Path) -> io::Result<(std::path::PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let name = format!(
        ".tmp-{}-{}-{}",
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let path = dir.join(name);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    Ok((path, file))
}

/// Makes a rename in `dir` durable. Best effort: not every platform can fsync a directory.
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Whether a temporary file named after process `pid` may be removed at start-up: its writer is
/// gone. Another live process (an operator command, or a server sharing the cache) keeps its
/// files; a file carrying our own pid is from an earlier process that had the same pid (e.g. pid 1
/// in a container), since this one has written nothing yet. Where liveness cannot be checked, the
/// file is treated as abandoned.
pub(crate) fn writer_is_gone(pid: &str) -> bool {
    let Ok(pid) = pid.parse::<u32>() else {
        return true;
    };
    if pid == std::process::id() {
        return true;
    }
    !cfg!(target_os = "linux") || !Path::new("/proc").join(pid.to_string()).exists()
}

/// Removes leftover temporary files (`.tmp-<pid>-*`) of processes that are gone, under `dir`,
/// recursively. Returns how many.
pub fn remove_temp_files(dir: &Path) -> usize {
    let mut removed = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            removed += remove_temp_files(&path);
        } else {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(".tmp-") else {
                continue;
            };
            let pid = rest.split('-').next().unwrap_or_default();
            if writer_is_gone(pid) && std::fs::remove_file(&path).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
