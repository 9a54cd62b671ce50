//! What provender keeps: archives behind the [`ArchiveStore`] trait, provider metadata in
//! [`MetaStore`] (a bounded in-memory LRU in front of JSON files), and the single-flight table
//! that makes concurrent misses share one upstream fetch.
//!
//! Nothing here speaks HTTP or knows about origin registries.
//!
//! Disk layout under `cache.dir`:
//!
//! ```text
//! archives/<host>/<namespace>/<type>/<version>/<archive>.zip        committed, verified archive
//! archives/<host>/<namespace>/<type>/<version>/<archive>.zip.json   its sha256, h1 and size
//! metadata/<host>/<namespace>/<type>/index.json                     version list + fetch time
//! metadata/<host>/<namespace>/<type>/<version>.json                 download metadata per platform
//! metadata/<host>/<namespace>/<type>/<version>.SHA256SUMS.<n>[.sig]  the origin's checksum files
//! quarantine/<host>/.../<archive>.zip.<unix time>                   archives that failed re-verification
//! tmp/                                                              downloads in progress
//! tls/                                                              generated CA and certificate
//! ```

mod budget;
mod flight;
mod meta;
mod store;

pub use budget::{Budget, Lease};
pub use flight::Flights;
pub use meta::{IndexRecord, IndexVersion, MetaStore, Package, SumsRef, VersionRecord};
pub use store::{
    ArchiveInfo, ArchiveKey, ArchiveStore, DiskStore, StagedFile, Staging, StoredArchive,
    StoredEntry, Usage,
};

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
    let mut tmp = tempfile_in(dir)?;
    tmp.1.write_all(bytes)?;
    tmp.1.sync_all()?;
    std::fs::rename(&tmp.0, path)?;
    sync_dir(dir);
    Ok(())
}

fn tempfile_in(dir: &Path) -> io::Result<(std::path::PathBuf, std::fs::File)> {
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

/// Removes leftover temporary files (`.tmp-*`) under `dir`, recursively. Returns how many.
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
        } else if entry.file_name().to_string_lossy().starts_with(".tmp-")
            && std::fs::remove_file(&path).is_ok()
        {
            removed += 1;
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
