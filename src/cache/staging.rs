//! Local scratch space for downloads and imports in progress (`<cache.dir>/tmp`).
//!
//! Whatever backend keeps the cache, an archive is first written here: hashing needs the whole
//! file, and readers of a download in progress read it back from here. A staged file is deleted
//! when dropped unless a store took it; files left by processes that are gone are removed when
//! the staging area is opened.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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
            if !crate::fsio::writer_is_gone(pid) {
                continue;
            }
            let gone = if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())
            } else {
                std::fs::remove_file(entry.path())
            };
            if gone.is_ok() {
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

    /// A new, empty scratch directory (for unpacking a module package).
    pub fn scratch_dir(&self) -> io::Result<ScratchDir> {
        let path = self.dir.join(format!(
            "{}-{}.dir",
            std::process::id(),
            STAGE_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&path)?;
        Ok(ScratchDir { path })
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

/// A directory in the staging area, removed with everything in it when dropped.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
