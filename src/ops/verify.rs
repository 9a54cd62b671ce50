//! `provender verify`: re-hash every cached archive and module package and take out of service
//! those that no longer match what was recorded when they were admitted.
//!
//! An archive fails when it has no readable record, when its size, SHA-256 or `h1:` differ
//! from its record, or when its SHA-256 differs from the origin's `shasum` in the version
//! record. A module package fails when it has no readable record or its size or SHA-256 differ
//! from its record. Failures are moved to `quarantine/` (kept for inspection, never served; the
//! next request fetches a fresh copy), unless `--no-quarantine` is given.

use std::sync::Arc;

use futures_util::StreamExt;

use super::{CommonArgs, OpsError, Outcome, human_bytes, progress};
use crate::cache::Staging;
use crate::mirror::Mirror;
use crate::records::{ArchiveInfo, ArchiveKey};

/// `provender verify`
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Only report mismatches; leave the archives where they are.
    #[arg(long)]
    pub no_quarantine: bool,
    /// How many archives to hash at once (default: the number of CPUs).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: Option<u16>,
}

/// Why a cached archive fails verification.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("no readable record (.zip.json) beside the archive")]
    NoRecord,
    #[error("{0}")]
    Unreadable(#[from] super::CopyError),
    /// It differs from its record: in what, as found, as recorded.
    #[error("{what} is {found}, its record says {recorded}")]
    Differs {
        what: &'static str,
        found: String,
        recorded: String,
    },
    #[error("unusable zip: {0}")]
    UnusableZip(#[from] crate::hash::HashError),
    /// Its SHA-256 is not the `shasum` its origin published, in the mirror's words.
    #[error("{0}")]
    Origin(String),
}

/// Checks one archive; `Err` says why it no longer matches.
async fn check(
    mirror: &Mirror,
    staging: &Staging,
    key: &ArchiveKey,
    info: Option<&ArchiveInfo>,
) -> Result<(), Failure> {
    let Some(info) = info else {
        return Err(Failure::NoRecord);
    };
    let (copy, sha, size) = super::local_copy(mirror, staging, key).await?;
    if size != info.size {
        return Err(Failure::Differs {
            what: "size",
            found: format!("{size} bytes"),
            recorded: format!("{} bytes", info.size),
        });
    }
    if sha != info.sha256 {
        return Err(Failure::Differs {
            what: "SHA-256",
            found: sha,
            recorded: info.sha256.clone(),
        });
    }
    let path = copy.path().to_path_buf();
    let limits = mirror.settings().upstream.hash_limits();
    let h1 = crate::mirror::admission::h1_of_file(&path, limits).await?;
    drop(copy);
    if h1 != info.h1 {
        return Err(Failure::Differs {
            what: "h1",
            found: h1,
            recorded: info.h1.clone(),
        });
    }
    match mirror.origin_disagrees(key, &sha).await {
        Some(problem) => Err(Failure::Origin(problem)),
        None => Ok(()),
    }
}

/// Re-hashes every cached module package; returns how many were checked and the failures.
async fn verify_modules(
    mirror: &Arc<Mirror>,
    no_quarantine: bool,
) -> Result<(usize, Vec<(String, String)>), OpsError> {
    let listed = mirror
        .module_store()
        .list()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("listing the module store: {e}")))?;
    let mut failed = Vec::new();
    for m in &listed {
        let what = format!("module {} {}", m.addr, m.version);
        let problem = crate::reverify::module_problem(mirror, m).await;
        let Some(why) = problem else { continue };
        let outcome = if no_quarantine {
            "left in place (--no-quarantine)".to_string()
        } else {
            match mirror.module_store().quarantine(&m.addr, &m.version).await {
                Ok(Some(to)) => format!("quarantined to {to}"),
                Ok(None) => "already gone".to_string(),
                Err(e) => format!("could not quarantine: {e}"),
            }
        };
        failed.push((what, format!("{why}; {outcome}")));
    }
    Ok((listed.len(), failed))
}

/// Runs `provender verify`.
pub async fn run(args: VerifyArgs) -> Result<Outcome, OpsError> {
    let settings = super::load_settings(&args.common)?;
    let (mirror, staging) = super::open_mirror(settings)?;
    let entries = mirror
        .store()
        .list()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("listing the archive store: {e}")))?;
    let total: u64 = entries.iter().map(|e| e.size).sum();
    let concurrency = args.concurrency.map(usize::from).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    });
    let bar = progress(total, "verifying", true);
    let staging = Arc::new(staging);
    let results = futures_util::stream::iter(entries)
        .map(|entry| {
            let (mirror, staging, bar) = (mirror.clone(), staging.clone(), bar.clone());
            async move {
                bar.set_message(entry.key.to_string());
                let result = check(&mirror, &staging, &entry.key, entry.info.as_ref()).await;
                bar.inc(entry.size);
                (entry, result)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    bar.finish_and_clear();
    let checked = results.len();
    let mut failed = Vec::new();
    for (entry, result) in results {
        let Err(why) = result else { continue };
        let outcome = if args.no_quarantine {
            "left in place (--no-quarantine)".to_string()
        } else {
            match mirror.store().quarantine(&entry.key).await {
                Ok(Some(to)) => format!("quarantined to {to}"),
                Ok(None) => "already gone".to_string(),
                Err(e) => format!("could not quarantine: {e}"),
            }
        };
        failed.push((entry.key.to_string(), format!("{why}; {outcome}")));
    }
    failed.sort();
    println!(
        "verify: {checked} archives ({}) checked, {} ok, {} failed",
        human_bytes(total),
        checked - failed.len(),
        failed.len()
    );
    let (modules_checked, module_failures) = verify_modules(&mirror, args.no_quarantine).await?;
    if modules_checked > 0 {
        println!(
            "verify: {modules_checked} module packages checked, {} ok, {} failed",
            modules_checked - module_failures.len(),
            module_failures.len()
        );
    }
    failed.extend(module_failures);
    super::print_failures(&failed);
    Ok(Outcome::from_failures(failed.len()))
}
