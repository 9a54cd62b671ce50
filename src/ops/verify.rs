//! `provender verify`: re-hash every cached archive and module package and take out of service
//! those that no longer match what was recorded when they were admitted.
//!
//! Each object goes through [`reverify::recheck`], the check the periodic re-verification runs:
//! an archive fails when it has no readable record, when its size, SHA-256 or `h1:` differ
//! from its record, or when its SHA-256 differs from the origin's `shasum` in the version
//! record; a module package when it has no readable record or its size or SHA-256 differ from
//! its record. Failures are moved to `quarantine/` (kept for inspection, never served; the
//! next request fetches a fresh copy), unless `--no-quarantine` is given. Version records that
//! name a package for another version or platform (kept before that rule was enforced) are
//! reported and removed, and the archive of such a platform fails its check. What is left here is
//! the command's output and exit code.

use std::sync::Arc;

use futures_util::StreamExt;

use super::{CommonArgs, OpsError, Outcome, human_bytes, progress};
use crate::cache::{ArchiveKind, ModuleKind, ModuleZipKind, ReleaseKind};
use crate::mirror::Core;
use crate::reverify::{self, Recheck};

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

/// What checking every object of one kind found.
struct Checked {
    count: usize,
    bytes: u64,
    /// What failed (sorted), and why and what became of it.
    failed: Vec<(String, String)>,
}

impl Checked {
    /// Prints what was checked, as `<count> <what> checked, ...`; nothing when there were none.
    fn report(&self, what: &str) {
        if self.count > 0 {
            println!(
                "verify: {} {what} checked, {} ok, {} failed",
                self.count,
                self.count - self.failed.len(),
                self.failed.len()
            );
        }
    }
}

/// Re-checks every stored object of kind `K`, `concurrency` at once, quarantining failures
/// unless `no_quarantine`.
async fn check_all<K: Recheck>(
    mirror: &Arc<Core>,
    concurrency: usize,
    no_quarantine: bool,
) -> Result<Checked, OpsError> {
    let entries = K::store(mirror).list().await.map_err(|e| {
        OpsError::Failed(anyhow::anyhow!(
            "listing the {}s in the store: {e}",
            K::NOUN
        ))
    })?;
    let bytes: u64 = entries.iter().map(|e| e.size).sum();
    let bar = progress(bytes, "verifying", true);
    let results = futures_util::stream::iter(entries)
        .map(|entry| {
            let (mirror, bar) = (mirror.clone(), bar.clone());
            async move {
                bar.set_message(entry.key.to_string());
                let result = reverify::recheck(&mirror, &entry).await;
                bar.inc(entry.size);
                (entry, result)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    bar.finish_and_clear();
    let count = results.len();
    let mut failed = Vec::new();
    for (entry, result) in results {
        let Err(why) = result else { continue };
        let outcome = if no_quarantine {
            "left in place (--no-quarantine)".to_string()
        } else {
            match reverify::quarantine(mirror, &entry).await {
                Ok(Some(to)) => format!("quarantined to {to}"),
                Ok(None) => "already gone".to_string(),
                Err(e) => format!("could not quarantine: {e}"),
            }
        };
        failed.push((entry.key.to_string(), format!("{why}; {outcome}")));
    }
    failed.sort();
    Ok(Checked {
        count,
        bytes,
        failed,
    })
}

/// Finds version records that name a package for another version or platform than their own
/// (kept before that rule was enforced) and removes them, unless `no_quarantine`; the next
/// request fetches and verifies the version again. Their archives of the misnamed platform are
/// caught by the archive check.
async fn check_version_records(
    mirror: &Arc<Core>,
    no_quarantine: bool,
) -> Result<Vec<(String, String)>, OpsError> {
    let misnamed = reverify::misnamed_versions(mirror).await.map_err(|e| {
        OpsError::Failed(anyhow::anyhow!(
            "listing the version records in the store: {e}"
        ))
    })?;
    let mut failed = Vec::new();
    for (addr, version, why) in misnamed {
        let outcome = if no_quarantine {
            "left in place (--no-quarantine)".to_string()
        } else {
            match mirror.meta().remove_version(&addr, &version).await {
                Ok(_) => "removed; the next request fetches it again".to_string(),
                Err(e) => format!("could not remove it: {e}"),
            }
        };
        failed.push((
            format!("version record {addr} {version}"),
            format!("{why}; {outcome}"),
        ));
    }
    Ok(failed)
}

/// Runs `provender verify`.
pub async fn run(args: VerifyArgs) -> Result<Outcome, OpsError> {
    let settings = super::load_settings(&args.common)?;
    let (mirror, _) = super::open_core(settings)?;
    let concurrency = args.concurrency.map(usize::from).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    });
    let archives = check_all::<ArchiveKind>(&mirror, concurrency, args.no_quarantine).await?;
    println!(
        "verify: {} archives ({}) checked, {} ok, {} failed",
        archives.count,
        human_bytes(archives.bytes),
        archives.count - archives.failed.len(),
        archives.failed.len()
    );
    let modules = check_all::<ModuleKind>(&mirror, concurrency, args.no_quarantine).await?;
    modules.report("module packages");
    let zips = check_all::<ModuleZipKind>(&mirror, concurrency, args.no_quarantine).await?;
    zips.report("module zips");
    let releases = check_all::<ReleaseKind>(&mirror, concurrency, args.no_quarantine).await?;
    releases.report("release zips");
    let records = check_version_records(&mirror, args.no_quarantine).await?;
    let mut failed = archives.failed;
    failed.extend(modules.failed);
    failed.extend(zips.failed);
    failed.extend(releases.failed);
    failed.extend(records);
    super::print_failures(&failed);
    Ok(Outcome::from_failures(failed.len()))
}
