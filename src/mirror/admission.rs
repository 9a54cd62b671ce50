//! Admission: how bytes from outside become a cached provider archive or module package.
//!
//! Every way in (an archive fill, a module package download or repack, `provender import`)
//! takes the same steps, written once here:
//!
//! 1. **stage**: the bytes are copied into a [`StagedFile`] while one [`Hashing`] computes their
//!    SHA-256 and counts them, optionally refusing more than a cap; the file is fsynced
//!    ([`stage_stream`] from an async byte stream such as an origin's response, [`stage_read`]
//!    from a reader such as a bundle entry or a local file, [`StageWriter`] for a producer such as
//!    a repack);
//! 2. **verify**: the digest must be what was promised ([`Expected::check`]: size, then the
//!    signed or manifest SHA-256), and a provider archive must be a zip Terraform can hash and
//!    install ([`h1_of_file`], on a blocking thread within [`HashLimits`]); [`verify_archive`] does
//!    both;
//! 3. **commit**: the bytes, then the record, through the stores
//!    ([`VerifiedArchive::commit`], [`commit_module`]): the record is the commit point.
//!
//! What fails is an [`AdmitError`], which tells a checksum mismatch from an unusable zip. The
//! archive fill streams to its readers while it stages (see [`super::fill`]), so it takes the
//! steps one by one, with the same [`Hashing`], the same [`Expected::check`] and the same
//! [`h1_of_file`].
//!
//! This module uses only `cache`, `hash`, `records` and `storage`; nothing of the mirror or of
//! what a client is answered.

use std::io::{self, Read, Write};
use std::path::Path;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::io::AsyncWriteExt;

use crate::address::{ModuleAddr, Version};
use crate::cache::{Archives, ModuleZips, Modules, StagedFile, Staging};
use crate::hash::{Digest, H1, HashError, HashLimits, Hashing, Sha256, TooLarge};
use crate::records::oci::ModuleZip;
use crate::records::{ArchiveInfo, ArchiveKey, ModuleKey, ModuleRecord};

/// The buffer between a source and a staging file.
const BUFFER: usize = 256 * 1024;

/// Why bytes were not admitted.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    /// A local file operation: what it was for, and why it failed.
    #[error("{doing}: {source}")]
    Local {
        doing: &'static str,
        source: io::Error,
    },
    /// The source failed while it was read (a broken download, an unreadable entry).
    #[error("{0}")]
    Source(io::Error),
    /// The source gave more bytes than allowed.
    #[error("{0}")]
    TooLarge(#[from] TooLarge),
    /// The size is not the promised one.
    #[error("size is {found} bytes, expected {expected}")]
    Size { found: u64, expected: u64 },
    /// The SHA-256 is not the promised (signed, listed) one.
    #[error("SHA-256 is {found}, expected {expected}")]
    Checksum { found: Sha256, expected: Sha256 },
    /// Not a zip Terraform could hash and install.
    #[error("{0}")]
    UnusableZip(#[from] HashError),
}

impl AdmitError {
    fn local(doing: &'static str) -> impl FnOnce(io::Error) -> AdmitError {
        move |source| match TooLarge::in_io(&source) {
            Some(too_large) => AdmitError::TooLarge(too_large),
            None => AdmitError::Local { doing, source },
        }
    }
}

/// Bytes in the staging area, with their digest.
#[derive(Debug)]
pub struct Staged {
    pub file: StagedFile,
    pub digest: Digest,
}

/// What staged bytes must be: the SHA-256 some authority published for them (an origin's
/// signed checksums, a bundle's manifest) and, when it is known, the size.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    pub sha256: &'a Sha256,
    pub size: Option<u64>,
}

impl Expected<'_> {
    /// `Err` unless `digest` is what is expected: the size first, then the SHA-256.
    pub fn check(&self, digest: &Digest) -> Result<(), AdmitError> {
        if let Some(expected) = self.size.filter(|s| *s != digest.size) {
            return Err(AdmitError::Size {
                found: digest.size,
                expected,
            });
        }
        if digest.sha256 != *self.sha256 {
            return Err(AdmitError::Checksum {
                found: digest.sha256.clone(),
                expected: self.sha256.clone(),
            });
        }
        Ok(())
    }
}

/// A staging file being written by a producer (`std::io::Write`), hashed and counted as it is
/// written. Blocking: use it on a blocking thread.
pub struct StageWriter {
    file: StagedFile,
    out: Hashing<io::BufWriter<std::fs::File>>,
}

impl StageWriter {
    /// A new staging file, refusing more than `cap` bytes when one is given.
    pub async fn create(staging: &Staging, cap: Option<u64>) -> Result<StageWriter, AdmitError> {
        let (file, out) = staging
            .create()
            .await
            .map_err(AdmitError::local("creating a staging file"))?;
        let out = io::BufWriter::with_capacity(BUFFER, out.into_std().await);
        let mut out = Hashing::new(out);
        if let Some(cap) = cap {
            out = out.capped(cap);
        }
        Ok(StageWriter { file, out })
    }

    /// Flushes and fsyncs the file; returns it with the digest of what was written.
    pub fn finish(self) -> Result<Staged, AdmitError> {
        let (digest, out) = self.out.into_parts();
        let file = out
            .into_inner()
            .map_err(|e| AdmitError::local("writing a staging file")(e.into_error()))?;
        file.sync_all()
            .map_err(AdmitError::local("syncing a staging file"))?;
        Ok(Staged {
            file: self.file,
            digest,
        })
    }
}

impl Write for StageWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Stages what `reader` yields, refusing more than `cap` bytes when one is given. Blocking (the
/// staging file is created through `runtime`): call it on a blocking thread.
pub fn stage_read(
    runtime: &tokio::runtime::Handle,
    staging: &Staging,
    reader: &mut dyn Read,
    cap: Option<u64>,
) -> Result<Staged, AdmitError> {
    let mut writer = runtime.block_on(StageWriter::create(staging, cap))?;
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(AdmitError::Source(e)),
        };
        writer
            .write_all(&buf[..n])
            .map_err(AdmitError::local("writing a staging file"))?;
    }
    writer.finish()
}

/// Stages an async byte stream (an origin's response body), refusing more than `cap` bytes when
/// one is given. A failing stream ends staging with its error, as `E`; staging's own failures
/// are `AdmitError`s converted into `E`.
pub async fn stage_stream<E: From<AdmitError>>(
    staging: &Staging,
    mut body: BoxStream<'static, Result<Bytes, E>>,
    cap: Option<u64>,
) -> Result<Staged, E> {
    let (file, out) = staging
        .create()
        .await
        .map_err(AdmitError::local("creating a staging file"))?;
    let mut out = tokio::io::BufWriter::with_capacity(BUFFER, out);
    let mut hashing = Hashing::bare();
    if let Some(cap) = cap {
        hashing = hashing.capped(cap);
    }
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        hashing.update(&chunk).map_err(AdmitError::from)?;
        out.write_all(&chunk)
            .await
            .map_err(AdmitError::local("writing a staging file"))?;
    }
    out.flush()
        .await
        .map_err(AdmitError::local("writing a staging file"))?;
    out.into_inner()
        .sync_all()
        .await
        .map_err(AdmitError::local("syncing a staging file"))?;
    Ok(Staged {
        file,
        digest: hashing.digest(),
    })
}

/// The `h1:` of a zip file (a staged archive, or a local copy of a stored one), computed on a
/// blocking thread within `limits`: the one place an archive's `h1:` is computed from a file.
pub async fn h1_of_file(path: &Path, limits: HashLimits) -> Result<H1, HashError> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let file = std::fs::File::open(&path)?;
        crate::hash::h1_zip(io::BufReader::with_capacity(BUFFER, file), limits)
    })
    .await
    .unwrap_or_else(|e| Err(io::Error::other(format!("hashing task failed: {e}")).into()))
}

/// A provider archive that passed every check, waiting in the staging area.
#[derive(Debug)]
pub struct VerifiedArchive {
    pub file: StagedFile,
    /// Its SHA-256, `h1:` and size; its trust level as the caller classified it.
    pub info: ArchiveInfo,
}

/// Checks a staged provider archive: its digest against `expected`, then its `h1:` (see
/// [`h1_of_file`]). The record's trust level is left for the caller to set.
pub async fn verify_archive(
    staged: Staged,
    expected: Expected<'_>,
    limits: HashLimits,
) -> Result<VerifiedArchive, AdmitError> {
    expected.check(&staged.digest)?;
    let h1 = h1_of_file(staged.file.path(), limits).await?;
    Ok(VerifiedArchive {
        file: staged.file,
        info: ArchiveInfo {
            sha256: staged.digest.sha256,
            h1,
            size: staged.digest.size,
            trust: None,
        },
    })
}

impl VerifiedArchive {
    /// Makes it the archive for `key`: the zip, then its record.
    pub async fn commit(self, store: &Archives, key: &ArchiveKey) -> crate::storage::Result<()> {
        store.commit(key, self.file, &self.info).await
    }
}

/// Makes a staged, checked module package the package of `addr` `version`: the package, then
/// its record.
pub async fn commit_module(
    store: &Modules,
    addr: &ModuleAddr,
    version: &Version,
    file: StagedFile,
    rec: &ModuleRecord,
) -> crate::storage::Result<()> {
    store
        .commit(&ModuleKey::new(addr, version), file, rec)
        .await
}

/// Commits a module package's zip (made here from the stored package), record last.
pub async fn commit_module_zip(
    store: &ModuleZips,
    addr: &ModuleAddr,
    version: &Version,
    file: StagedFile,
    zip: &ModuleZip,
) -> crate::storage::Result<()> {
    store
        .commit(&ModuleKey::new(addr, version), file, zip)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staging() -> (tempfile::TempDir, Staging) {
        let dir = tempfile::tempdir().unwrap();
        let (staging, _) = Staging::open(dir.path().join("tmp")).unwrap();
        (dir, staging)
    }

    #[tokio::test]
    async fn a_stream_is_staged_hashed_and_counted() {
        let (_dir, staging) = staging();
        let chunks: Vec<Result<Bytes, AdmitError>> = vec![
            Ok(Bytes::from_static(b"hello ")),
            Ok(Bytes::from_static(b"world")),
        ];
        let staged = stage_stream(&staging, futures_util::stream::iter(chunks).boxed(), None)
            .await
            .unwrap();
        assert_eq!(std::fs::read(staged.file.path()).unwrap(), b"hello world");
        assert_eq!(staged.digest.size, 11);
        assert_eq!(
            staged.digest.sha256,
            crate::hash::sha256_hex(b"hello world")
        );
        let expected = Expected {
            sha256: &staged.digest.sha256,
            size: Some(11),
        };
        expected.check(&staged.digest).unwrap();
        let wrong = Expected {
            sha256: &Sha256::of(b"something else"),
            size: None,
        };
        assert!(matches!(
            wrong.check(&staged.digest),
            Err(AdmitError::Checksum { .. })
        ));
    }

    #[tokio::test]
    async fn a_cap_is_a_typed_error_sync_and_async() {
        let (_dir, staging) = staging();
        let chunks: Vec<Result<Bytes, AdmitError>> = vec![Ok(Bytes::from_static(b"123456"))];
        let err = stage_stream(
            &staging,
            futures_util::stream::iter(chunks).boxed(),
            Some(5),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, AdmitError::TooLarge(TooLarge { limit: 5 })));
        let runtime = tokio::runtime::Handle::current();
        let err = tokio::task::spawn_blocking(move || {
            stage_read(&runtime, &staging, &mut &b"123456"[..], Some(5)).unwrap_err()
        })
        .await
        .unwrap();
        assert!(matches!(err, AdmitError::TooLarge(TooLarge { limit: 5 })));
    }

    #[tokio::test]
    async fn a_staged_file_that_is_no_zip_is_unusable_not_a_mismatch() {
        let (_dir, staging) = staging();
        let runtime = tokio::runtime::Handle::current();
        let staged = tokio::task::spawn_blocking(move || {
            let s = stage_read(&runtime, &staging, &mut &b"not a zip"[..], None).unwrap();
            (staging, s)
        })
        .await
        .unwrap()
        .1;
        let sha = staged.digest.sha256.clone();
        let err = verify_archive(
            staged,
            Expected {
                sha256: &sha,
                size: Some(9),
            },
            HashLimits::default(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, AdmitError::UnusableZip(_)), "{err}");
    }
}
