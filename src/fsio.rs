//! Local file primitives every layer that writes files shares: atomic writes (temp file in the
//! same directory, fsync, rename, fsync the directory), temp files named after their writer so
//! start-up clean-up can tell abandoned ones, and that clean-up.

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

/// Writes `bytes` to `path` only if no file is there: `Ok(false)` if one was. The file appears
/// whole (temp file, fsync, then a hard link, which fails rather than replace anything), so this
/// is an exclusive create even on network file systems where `O_EXCL` is not.
pub fn create_new_atomic(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    use std::io::Write as _;
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("path has no parent directory"))?;
    std::fs::create_dir_all(dir)?;
    let (tmp, mut file) = temp_file_in(dir)?;
    let linked = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_dir(dir);
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// A new temporary file in `dir`, named so that start-up clean-up knows its writer.
pub fn temp_file_in(dir: &Path) -> io::Result<(std::path::PathBuf, std::fs::File)> {
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
pub fn writer_is_gone(pid: &str) -> bool {
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

/// Bytes under `dir`, recursively.
pub fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}
