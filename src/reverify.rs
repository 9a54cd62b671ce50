//! Re-verification of stored objects: the periodic pass, and [`recheck`], the one check of a
//! stored object that the pass and `provender verify` share.
//!
//! Disks rot and people edit files: an archive that was verified when it was admitted is not
//! guaranteed to be the same bytes a month later. Every `cache.reverify_interval` the server
//! re-hashes each object in the store. An archive fails when it has no readable record, when
//! its size, SHA-256 or `h1:` differ from its record, or when its SHA-256 differs from the
//! origin's `shasum` in the version record; a module package when it has no readable record or
//! its size or SHA-256 differ from its record. A failure is taken out of service with
//! [`Objects::quarantine`](crate::cache::Objects::quarantine): its bytes are kept for
//! inspection, it is never served again, and the next request fetches and verifies a fresh
//! copy. Each one is logged as an error and counted in
//! `provender_verification_failures_total{reason="cached_archive_mismatch"}` (archives) or
//! `reason="cached_module_mismatch"` (module packages). An object that cannot be read is left
//! for the next pass.
//!
//! `provender verify` runs the same check on demand.

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::cache::{
    ArchiveKind, Kind, Listed, ModuleKind, ModuleZipKind, Objects, Opened, ReleaseKind, StagedFile,
    Staging,
};
use futures_util::StreamExt;

use crate::address::{ProviderAddr, Version};
use crate::hash::{HashError, Sha256};
use crate::metrics::{Metrics, VerificationReason};
use crate::mirror::Core;
use crate::mirror::admission::{self, AdmitError};
use crate::records::{ArchiveInfo, ArchiveKey, Misnamed, ModuleKey, ModuleRecord};
use crate::storage::StorageError;

/// What one pass found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub checked: usize,
    pub quarantined: usize,
}

/// Why a stored object fails re-verification.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    #[error("no readable record beside it")]
    NoRecord,
    /// It could not be read (the store, or the local copy): nothing is known about its bytes.
    #[error("cannot read it: {0}")]
    Unreadable(String),
    /// It differs from its record: in what, as found, as recorded.
    #[error("{what} is {found}, its record says {recorded}")]
    Differs {
        what: &'static str,
        found: String,
        recorded: String,
    },
    #[error("unusable zip: {0}")]
    UnusableZip(#[from] HashError),
    /// Its version record names another file for its platform: the signed line it was
    /// checked against vouches for that file, not for this archive.
    #[error("its version record is unusable: {0}")]
    Misnamed(#[from] Misnamed),
    /// Its SHA-256 is not the `shasum` its origin published (as the version record has it).
    #[error("SHA-256 is {sha256}, the origin published {published}")]
    Origin { sha256: String, published: String },
}

impl Problem {
    /// Whether the object's bytes or record were found wanting, rather than unreadable.
    pub fn is_mismatch(&self) -> bool {
        !matches!(self, Problem::Unreadable(_))
    }
}

/// What re-verification does with each kind of stored object beyond comparing its size and
/// SHA-256 with its record.
pub trait Recheck: Kind + Sized {
    /// The `provender_verification_failures_total` reason a failure is counted under.
    const REASON: VerificationReason;

    /// The mirror's store of this kind.
    fn store(mirror: &Core) -> &Objects<Self>;

    /// Further checks of `copy`, a local copy of the object whose size and SHA-256 (`sha256`)
    /// match `record`; none unless a kind has some.
    fn further(
        _mirror: &Core,
        _key: &Self::Key,
        _record: &Self::Record,
        _sha256: &Sha256,
        _copy: &Path,
    ) -> impl Future<Output = Result<(), Problem>> + Send {
        async { Ok(()) }
    }

    /// The mirror's bookkeeping once an object left the store.
    fn left_store(_mirror: &Core, _entry: &Listed<Self>) {}
}

impl Recheck for ArchiveKind {
    const REASON: VerificationReason = VerificationReason::CachedArchiveMismatch;

    fn store(mirror: &Core) -> &Objects<Self> {
        mirror.archives()
    }

    /// Its `h1:` (within the configured zip limits, as when it was fetched), then the origin's
    /// `shasum`.
    async fn further(
        mirror: &Core,
        key: &ArchiveKey,
        record: &ArchiveInfo,
        sha256: &Sha256,
        copy: &Path,
    ) -> Result<(), Problem> {
        let limits = mirror.settings().upstream.hash_limits();
        let h1 = crate::mirror::admission::h1_of_file(copy, limits).await?;
        if h1 != record.h1 {
            return Err(Problem::Differs {
                what: "h1",
                found: h1.to_string(),
                recorded: record.h1.to_string(),
            });
        }
        let meta = mirror.meta();
        let Some(rec) = meta.read_version_as_stored(&key.addr, &key.version).await else {
            return Ok(());
        };
        let Some(pkg) = rec.packages.get(&key.platform) else {
            return Ok(());
        };
        pkg.check_name(&key.addr, &key.version, &key.platform)?;
        match pkg.shasum != *sha256 {
            true => Err(Problem::Origin {
                sha256: sha256.to_string(),
                published: pkg.shasum.to_string(),
            }),
            false => Ok(()),
        }
    }

    fn left_store(mirror: &Core, entry: &Listed<Self>) {
        mirror.archive_removed(&entry.key, entry.size);
    }
}

impl Recheck for ModuleKind {
    const REASON: VerificationReason = VerificationReason::CachedModuleMismatch;

    fn store(mirror: &Core) -> &Objects<Self> {
        mirror.modules()
    }

    /// Nothing: a package is what provender packed, and its record says all there is.
    async fn further(
        _mirror: &Core,
        _key: &ModuleKey,
        _record: &ModuleRecord,
        _sha256: &Sha256,
        _copy: &Path,
    ) -> Result<(), Problem> {
        Ok(())
    }
}

/// A module package's zip: its own size and SHA-256, as for the package it was made from (a zip
/// whose package changed is made again when it is asked for).
impl Recheck for ModuleZipKind {
    const REASON: VerificationReason = VerificationReason::CachedModuleMismatch;

    fn store(mirror: &Core) -> &Objects<Self> {
        mirror.module_zips()
    }

    fn left_store(mirror: &Core, entry: &Listed<Self>) {
        mirror.module_zip_removed(&entry.key);
    }
}

impl Recheck for ReleaseKind {
    const REASON: VerificationReason = VerificationReason::CachedReleaseMismatch;

    fn store(mirror: &Core) -> &Objects<Self> {
        mirror.releases()
    }

    fn left_store(mirror: &Core, entry: &Listed<Self>) {
        mirror.release_removed(&entry.key);
    }
}

/// Checks one stored object, as listed with its record, against that record (and what else
/// [`Recheck::further`] checks). `Ok` too when it left the store since it was listed.
pub async fn recheck<K: Recheck>(mirror: &Core, entry: &Listed<K>) -> Result<(), Problem> {
    let Some(record) = &entry.record else {
        return Err(Problem::NoRecord);
    };
    let recorded = K::size(record);
    let size_differs = |size: u64| Problem::Differs {
        what: "size",
        found: format!("{size} bytes"),
        recorded: format!("{recorded} bytes"),
    };
    let opened = K::store(mirror)
        .open(&entry.key)
        .await
        .map_err(|e| Problem::Unreadable(e.to_string()))?;
    let Some(opened) = opened else {
        // Not served: bytes of another size than the record's, or gone since the listing.
        return match entry.size == recorded {
            true => Ok(()),
            false => Err(size_differs(entry.size)),
        };
    };
    let (copy, sha256, size) = copy_out(mirror.staging(), opened).await?;
    if size != recorded {
        return Err(size_differs(size));
    }
    if sha256 != *K::sha256(record) {
        return Err(Problem::Differs {
            what: "SHA-256",
            found: sha256.to_string(),
            recorded: K::sha256(record).to_string(),
        });
    }
    K::further(mirror, &entry.key, record, &sha256, copy.path()).await
}

/// Every stored version record that names a package for another version or platform than its
/// own ([`VersionRecord::check_names`](crate::records::VersionRecord::check_names)): records
/// kept before that rule was enforced. Readers already ignore them; `provender verify` reports
/// and removes them.
pub async fn misnamed_versions(
    mirror: &Core,
) -> Result<Vec<(ProviderAddr, Version, Misnamed)>, StorageError> {
    let meta = mirror.meta();
    let mut out = Vec::new();
    let mut stored: Vec<_> = meta.version_stamps().await?.into_keys().collect();
    stored.sort();
    for (addr, version) in stored {
        let Some(rec) = meta.read_version_as_stored(&addr, &version).await else {
            continue;
        };
        if let Err(misnamed) = rec.check_names(&addr, &version) {
            out.push((addr, version, misnamed));
        }
    }
    Ok(out)
}

/// Copies an opened object into a staging file through the admission path (some checks need a
/// seekable local file), returning the file and the SHA-256 and size of what was copied.
async fn copy_out<K: Kind>(
    staging: &Staging,
    opened: Opened<K>,
) -> Result<(StagedFile, Sha256, u64), Problem> {
    let body = opened
        .body
        .map(|chunk| chunk.map_err(AdmitError::Source))
        .boxed();
    let staged = admission::stage_stream::<AdmitError>(staging, body, None)
        .await
        .map_err(|e| Problem::Unreadable(e.to_string()))?;
    Ok((staged.file, staged.digest.sha256, staged.digest.size))
}

/// Takes a listed object out of service (see [`Objects::quarantine`]) and does the mirror's
/// bookkeeping. Returns where it went, or `None` if it was not there.
pub async fn quarantine<K: Recheck>(
    mirror: &Core,
    entry: &Listed<K>,
) -> Result<Option<String>, StorageError> {
    let to = K::store(mirror).quarantine(&entry.key).await?;
    if to.is_some() {
        K::left_store(mirror, entry);
    }
    Ok(to)
}

/// Starts the periodic task (nothing when `every` is zero). It holds the mirror weakly and ends
/// once the server that owns the mirror is gone.
pub fn spawn(mirror: &Arc<Core>, metrics: Arc<Metrics>, every: Duration) {
    if every.is_zero() {
        return;
    }
    let weak: Weak<Core> = Arc::downgrade(mirror);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(mirror) = weak.upgrade() else { return };
            match pass(&mirror, &metrics).await {
                Ok(r) if r.quarantined > 0 => tracing::warn!(
                    checked = r.checked,
                    quarantined = r.quarantined,
                    "re-verification took objects out of service"
                ),
                Ok(r) => tracing::debug!(checked = r.checked, "re-verification found no mismatch"),
                Err(e) => tracing::warn!("re-verification could not list the store: {e}"),
            }
        }
    });
}

/// Re-checks every archive, module package and release zip in the store once, quarantining those that no
/// longer match.
pub async fn pass(mirror: &Arc<Core>, metrics: &Metrics) -> Result<Report, StorageError> {
    let mut report = Report::default();
    pass_over::<ArchiveKind>(mirror, metrics, &mut report).await?;
    pass_over::<ModuleKind>(mirror, metrics, &mut report).await?;
    pass_over::<ModuleZipKind>(mirror, metrics, &mut report).await?;
    pass_over::<ReleaseKind>(mirror, metrics, &mut report).await?;
    Ok(report)
}

async fn pass_over<K: Recheck>(
    mirror: &Core,
    metrics: &Metrics,
    report: &mut Report,
) -> Result<(), StorageError> {
    for entry in K::store(mirror).list().await? {
        report.checked += 1;
        let problem = match recheck(mirror, &entry).await {
            Ok(()) => continue,
            Err(problem) if !problem.is_mismatch() => {
                tracing::warn!(object = %entry.key, "cannot re-verify: {problem}");
                continue;
            }
            Err(problem) => problem,
        };
        let noun = K::NOUN;
        match quarantine(mirror, &entry).await {
            Ok(Some(to)) => {
                report.quarantined += 1;
                tracing::error!(object = %entry.key, "cached {noun} failed re-verification ({problem}); quarantined to {to}");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(object = %entry.key, "cached {noun} failed re-verification ({problem}) and could not be quarantined: {e}")
            }
        }
        // Counted once it is out of service, so that whoever sees the count sees it gone.
        metrics.verification_failed(K::REASON);
    }
    Ok(())
}
