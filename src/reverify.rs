//! Periodic re-verification of cached archives.
//!
//! Disks rot and people edit files: an archive that was verified when it was admitted is not
//! guaranteed to be the same bytes a month later. Every `cache.reverify_interval` the server
//! re-hashes each archive in the store and compares its SHA-256 with the record written when it
//! was admitted and with the origin's `shasum` in the version record. A mismatch (or an archive
//! without a readable record) is taken out of service with [`Archives::quarantine`]: its
//! bytes are kept for inspection, it is never served again, and the next request fetches and
//! verifies a fresh copy. Each one is logged as an error and counted in
//! `provender_verification_failures_total{reason="cached_archive_mismatch"}`.
//!
//! Module packages are re-hashed the same way against their records
//! (`reason="cached_module_mismatch"`).
//!
//! `provender verify` does the same on demand (and also re-computes `h1:`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::cache::{Archives, StoredModule};
use crate::hash::HashingReader;
use crate::metrics::{Metrics, VerificationReason};
use crate::mirror::Mirror;
use crate::records::{ArchiveInfo, ArchiveKey};
use crate::storage::StorageError;

/// What one pass found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub checked: usize,
    pub quarantined: usize,
}

/// Starts the periodic task (nothing when `every` is zero). It holds the mirror weakly and ends
/// once the server that owns the mirror is gone.
pub fn spawn(mirror: &Arc<Mirror>, metrics: Arc<Metrics>, every: Duration) {
    if every.is_zero() {
        return;
    }
    let weak: Weak<Mirror> = Arc::downgrade(mirror);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(mirror) = weak.upgrade() else { return };
            match pass(&mirror, &metrics).await {
                Ok(r) if r.quarantined > 0 => tracing::warn!(
                    checked = r.checked,
                    quarantined = r.quarantined,
                    "re-verification took archives out of service"
                ),
                Ok(r) => tracing::debug!(checked = r.checked, "re-verification found no mismatch"),
                Err(e) => tracing::warn!("re-verification could not list the archive store: {e}"),
            }
        }
    });
}

/// Re-hashes every archive in the store once, quarantining those that no longer match.
pub async fn pass(mirror: &Arc<Mirror>, metrics: &Metrics) -> Result<Report, StorageError> {
    let store = mirror.store();
    let mut report = Report::default();
    for entry in store.list().await? {
        report.checked += 1;
        let problem = match check(mirror, store, &entry.key, entry.info.as_ref()).await {
            Ok(None) => continue,
            Ok(Some(problem)) => problem,
            Err(e) => {
                tracing::warn!(archive = %entry.key, "cannot re-verify: {e}");
                continue;
            }
        };
        match store.quarantine(&entry.key).await {
            Ok(Some(to)) => {
                report.quarantined += 1;
                mirror.archive_removed(&entry.key, entry.size);
                tracing::error!(archive = %entry.key, provider = %entry.key.addr, "cached archive failed re-verification ({problem}); quarantined to {to}");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(archive = %entry.key, provider = %entry.key.addr, "cached archive failed re-verification ({problem}) and could not be quarantined: {e}")
            }
        }
        // Counted once it is out of service, so that whoever sees the count sees it gone.
        metrics.verification_failed(VerificationReason::CachedArchiveMismatch);
    }
    for module in mirror.module_store().list().await? {
        report.checked += 1;
        let Some(problem) = module_problem(mirror, &module).await else {
            continue;
        };
        match mirror
            .module_store()
            .quarantine(&module.addr, &module.version)
            .await
        {
            Ok(Some(to)) => {
                report.quarantined += 1;
                tracing::error!(module = %module.addr, version = %module.version, "cached module package failed re-verification ({problem}); quarantined to {to}");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(module = %module.addr, version = %module.version, "cached module package failed re-verification ({problem}) and could not be quarantined: {e}")
            }
        }
        metrics.verification_failed(VerificationReason::CachedModuleMismatch);
    }
    Ok(report)
}

/// Why a cached module package no longer matches its record, or `None` when it does.
pub async fn module_problem(mirror: &Mirror, module: &StoredModule) -> Option<String> {
    let Some(rec) = &module.record else {
        return Some("no readable record beside the package".into());
    };
    let object = match mirror
        .module_store()
        .open(&module.addr, &module.version)
        .await
    {
        Ok(Some((_, object))) => object,
        Ok(None) => {
            return Some(format!(
                "{} bytes, its record says {}",
                module.size, rec.size
            ));
        }
        Err(e) => return Some(format!("cannot read it: {e}")),
    };
    let mut hashing = HashingReader::new(object.into_reader());
    if let Err(e) = tokio::io::copy(&mut hashing, &mut tokio::io::sink()).await {
        return Some(format!("cannot read it: {e}"));
    }
    let sha = hashing.finish();
    (sha != rec.sha256).then(|| format!("SHA-256 is {sha}, its record says {}", rec.sha256))
}

/// `Ok(Some(why))` when the archive no longer matches `info` (its record, as listed) or the
/// origin's `shasum`; `Ok(None)` when it does (or is gone).
async fn check(
    mirror: &Mirror,
    store: &Archives,
    key: &ArchiveKey,
    info: Option<&ArchiveInfo>,
) -> Result<Option<String>, StorageError> {
    let Some(info) = info else {
        return Ok(Some("no readable record beside it".into()));
    };
    let Some(archive) = store.open(key).await? else {
        return Ok(None);
    };
    let mut hashing = HashingReader::new(archive.into_reader());
    let size = tokio::io::copy(&mut hashing, &mut tokio::io::sink())
        .await
        .map_err(|e| StorageError::io(&store.storage().describe(), key, &e))?;
    let sha = hashing.finish();
    if sha != info.sha256 || size != info.size {
        return Ok(Some(format!(
            "SHA-256 {sha} and {size} bytes, its record says {} and {} bytes",
            info.sha256, info.size
        )));
    }
    Ok(mirror.origin_disagrees(key, &sha).await)
}
