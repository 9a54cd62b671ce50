//! `provender lock`: write or update a `.terraform.lock.hcl` from the cache.
//!
//! Versions: a lock-file input's pin; else the version the existing output file records, if it
//! still meets the constraints (unless `--upgrade`); else the newest version meeting them.
//! Missing archives are fetched through the mirror (unless offline).
//!
//! Hashes, as Terraform records them when it locks from a registry:
//! - `h1:` of each requested platform's package *as installed* ([`crate::hash::h1_installed`]:
//!   extracted, regular files only, names cleaned, the last of duplicate names wins). For a zip
//!   without directory entries or unusual names this equals the zip's own `h1:`, which the cache
//!   already knows;
//! - `zh:` for every line of the origin's SHA256SUMS files (Terraform trusts them all once the
//!   file's signature checks out); without those files, `zh:` of every package the cache's
//!   version record knows.
//!
//! Providers of the existing file that were not asked for are kept as they are; when a
//! provider keeps its version, its old hashes are kept too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use super::inputs::{self, InputError, Wanted};
use super::lockfile::{LockFile, LockedProvider};
use super::seed::{self, Job};
use super::{CommonArgs, OpsError, Outcome, usage};
use crate::address::{Platform, ProviderAddr, Version};
use crate::cache::Staging;
use crate::mirror::{Core, Mirror};
use crate::records::ArchiveKey;

/// `provender lock`
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example: provender lock --platform linux_amd64 --platform darwin_arm64 \
./infra   # writes ./infra/.terraform.lock.hcl"
)]
pub struct LockArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Platform to record an h1: hash for (repeatable). Default: the configuration's
    /// upstream.platforms.
    #[arg(long = "platform", short = 'p', value_parser = Platform::parse)]
    pub platforms: Vec<Platform>,
    /// Which CLI the configurations are for: it decides the registry of short sources
    /// (`hashicorp/aws`) and whether `*.tofu` files are read. Default: configurations.tool.
    #[arg(long, value_enum, value_name = "TOOL")]
    pub tool: Option<crate::config::Tool>,
    /// A provider to lock, as SOURCE[@CONSTRAINT] (repeatable).
    #[arg(long = "provider", value_name = "SOURCE[@CONSTRAINT]")]
    pub providers: Vec<String>,
    /// The lock file to write. Default: .terraform.lock.hcl in the configuration directory given,
    /// else in the current directory.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Choose the newest matching versions even where the lock file already has one.
    #[arg(long)]
    pub upgrade: bool,
    /// How many archives to download at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,
    /// Configuration directories, lock files and provider lists.
    #[arg(value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
}

/// Runs `provender lock`.
pub async fn run(args: LockArgs) -> Result<Outcome, OpsError> {
    let settings = super::load_settings(&args.common)?;
    let platforms = super::select_platforms(&settings, &args.platforms)?;
    if platforms.is_empty() {
        return Err(usage(
            "no platforms: give --platform (repeatable) or set upstream.platforms in the configuration",
        ));
    }
    let output = match &args.output {
        Some(o) => o.clone(),
        None => {
            let dirs: Vec<&PathBuf> = args.inputs.iter().filter(|p| p.is_dir()).collect();
            match dirs.as_slice() {
                [dir] => dir.join(".terraform.lock.hcl"),
                [] => PathBuf::from(".terraform.lock.hcl"),
                _ => {
                    return Err(usage(
                        "several configuration directories given: choose the file with --output",
                    ));
                }
            }
        }
    };
    let existing = match std::fs::read_to_string(&output) {
        Ok(text) => LockFile::parse(&text).map_err(|e| e.in_file(&output))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => LockFile::default(),
        Err(e) => return Err(InputError::new(e).in_file(&output).into()),
    };
    let tool = args.tool.unwrap_or(settings.tool);
    let inputs = inputs::read_all(&args.inputs, &args.providers, &[], tool)?;
    let mut wanted = inputs.providers;
    if wanted.is_empty() && inputs.modules.is_empty() {
        // Re-lock what the file already has, for the requested platforms.
        wanted = existing
            .providers
            .values()
            .map(|p| Wanted {
                addr: p.addr.clone(),
                constraints: p.constraints.clone(),
                locked: Some(p.version.clone()),
                from: output.display().to_string(),
            })
            .collect();
    }
    if wanted.is_empty() && inputs.modules.is_empty() {
        return Err(usage(
            "nothing to lock: give configuration directories, lock files, provider lists or --provider",
        ));
    }
    let (mirror, staging) = super::open_core(settings)?;
    let mut failed = Vec::new();
    // Registry modules that are not installed are read from their packages (fetched through
    // the mirror), so that their providers are locked too.
    let uninstalled: Vec<_> = inputs
        .modules
        .into_iter()
        .filter(|m| m.installed.is_none())
        .collect();
    let (more, _) = seed::fetch_modules(
        &Mirror::over(mirror.clone()),
        uninstalled,
        tool,
        &mut failed,
    )
    .await;
    wanted.extend(more);

    // One entry per provider: constraints combined, a pin if any input pins it.
    let mut combined: BTreeMap<ProviderAddr, Wanted> = BTreeMap::new();
    for w in wanted {
        match combined.get_mut(&w.addr) {
            Some(have) => {
                have.constraints.merge(&w.constraints);
                if have.locked.is_none() {
                    have.locked = w.locked;
                }
            }
            None => {
                combined.insert(w.addr.clone(), w);
            }
        }
    }
    for w in combined.values_mut() {
        if w.locked.is_some() {
            continue;
        }
        if let Some(old) = existing.providers.get(&w.addr) {
            if !args.upgrade && w.constraints.allows(&old.version) {
                w.locked = Some(old.version.clone());
            }
        }
    }

    let all: Vec<Wanted> = combined.values().cloned().collect();
    let jobs = seed::plan(&mirror, &all, &platforms, &mut failed).await;
    let report = seed::ensure_all(&mirror, jobs.clone(), args.concurrency.into(), "fetching").await;
    failed.extend(report.failed);
    if !failed.is_empty() {
        println!("lock: {} not written", output.display());
        super::print_failures(&failed);
        return Ok(Outcome::Failed);
    }

    let mut lock = existing.clone();
    let mut by_version: BTreeMap<(ProviderAddr, Version), Vec<Platform>> = BTreeMap::new();
    for Job {
        addr,
        version,
        platform,
    } in jobs
    {
        by_version
            .entry((addr, version))
            .or_default()
            .push(platform);
    }
    let mut lines = Vec::new();
    for ((addr, version), platforms) in by_version {
        match hashes_for(&mirror, &staging, &addr, &version, &platforms).await {
            Ok(hashes) => {
                let w = &combined[&addr];
                let mut entry = LockedProvider {
                    addr: addr.clone(),
                    version: version.clone(),
                    constraints: w.constraints.clone(),
                    hashes,
                };
                if let Some(old) = existing.providers.get(&addr) {
                    if old.version == version {
                        entry.hashes.extend(old.hashes.iter().cloned());
                    }
                }
                lines.push(format!(
                    "  {addr} {version} ({} hashes; h1: for {})",
                    entry.hashes.len(),
                    platforms
                        .iter()
                        .map(Platform::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                lock.providers.insert(addr, entry);
            }
            Err(e) => failed.push((format!("{addr} {version}"), e.to_string())),
        }
    }
    if !failed.is_empty() {
        println!("lock: {} not written", output.display());
        super::print_failures(&failed);
        return Ok(Outcome::Failed);
    }
    let text = lock.render();
    let unchanged = std::fs::read_to_string(&output).is_ok_and(|old| old == text);
    if !unchanged {
        let path = output.clone();
        tokio::task::spawn_blocking(move || crate::fsio::write_atomic(&path, text.as_bytes()))
            .await
            .map_err(|e| OpsError::Failed(anyhow::anyhow!("writing task failed: {e}")))?
            .map_err(|e| OpsError::Failed(anyhow::anyhow!("{}: {e}", output.display())))?;
    }
    println!(
        "lock: {} {} ({} providers)",
        output.display(),
        if unchanged { "unchanged" } else { "written" },
        lock.providers.len()
    );
    for l in lines {
        println!("{l}");
    }
    Ok(Outcome::Success)
}

/// Why a provider version's hashes could not be gathered.
#[derive(Debug, thiserror::Error)]
enum HashesError {
    /// The mirror could not provide its version record.
    #[error("{0}")]
    Mirror(#[from] crate::error::Error),
    /// The store failed on it: what was read, and why.
    #[error("{what}: {source}")]
    Store {
        what: String,
        source: crate::storage::StorageError,
    },
    #[error("{0} is not in the cache")]
    NotCached(ArchiveKey),
    #[error("{0}")]
    Copy(#[from] super::CopyError),
    #[error("{0}")]
    Damaged(#[from] super::Damaged),
    #[error("{key}: {source}")]
    Hash {
        key: ArchiveKey,
        source: crate::hash::HashError,
    },
}

/// The `h1:` hashes of `platforms` and the `zh:` set of one provider version.
async fn hashes_for(
    mirror: &Arc<Core>,
    staging: &Staging,
    addr: &ProviderAddr,
    version: &Version,
    platforms: &[Platform],
) -> Result<BTreeSet<String>, HashesError> {
    let rec = mirror.version_info(addr, version).await?;
    let mut hashes = BTreeSet::new();
    for platform in platforms {
        let key = ArchiveKey {
            addr: addr.clone(),
            version: version.clone(),
            platform: platform.clone(),
        };
        let info = mirror
            .archives()
            .record(&key)
            .await
            .map_err(|source| HashesError::Store {
                what: key.to_string(),
                source,
            })?
            .ok_or_else(|| HashesError::NotCached(key.clone()))?;
        let (copy, sha, _) = super::local_copy(mirror, staging, &key).await?;
        super::check_recorded_sha256(&key, &sha, &info)?;
        let path = copy.path().to_path_buf();
        let recorded = info.h1.clone();
        let h1 = tokio::task::spawn_blocking(move || {
            let file = std::fs::File::open(&path)?;
            let reader = std::io::BufReader::with_capacity(256 * 1024, file);
            crate::hash::h1_installed(reader, &recorded)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e).into()))
        .map_err(|source| HashesError::Hash {
            key: key.clone(),
            source,
        })?;
        hashes.insert(h1.to_string());
    }
    let mut from_sums = false;
    let used: BTreeSet<&str> = platforms
        .iter()
        .filter_map(|p| rec.packages.get(p))
        .filter_map(|p| p.shasums_url.as_deref())
        .collect();
    for (n, r) in rec.sums.iter().enumerate() {
        if !used.contains(r.url.as_str()) {
            continue;
        }
        let doc = mirror
            .meta()
            .read_sums(addr, version, n, false)
            .await
            .map_err(|source| HashesError::Store {
                what: format!("{addr} {version}: reading SHA256SUMS"),
                source,
            })?;
        if let Some(doc) = doc {
            from_sums = true;
            hashes.extend(sums_hashes(&doc));
        }
    }
    if !from_sums {
        hashes.extend(rec.packages.values().map(|p| crate::hash::zh(&p.shasum)));
    }
    Ok(hashes)
}

/// Every `zh:` hash a SHA256SUMS file vouches for, as Terraform reads it: one per line, and
/// none at all if any line does not look like `<64 hex digits> <name>`.
pub fn sums_hashes(doc: &[u8]) -> Vec<String> {
    let Ok(text) = std::str::from_utf8(doc) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let hash = match crate::hash::Sha256::parse(&fields[0].to_ascii_lowercase()) {
            Ok(hash) if fields.len() >= 2 => hash,
            _ => return Vec::new(),
        };
        out.push(crate::hash::zh(&hash));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_lines_become_zh_hashes() {
        let a = "ab".repeat(32);
        let b = "CD".repeat(32);
        let doc = format!("{a}  x_linux_amd64.zip\n{b}  x_darwin_arm64.zip\n");
        assert_eq!(
            sums_hashes(doc.as_bytes()),
            [format!("zh:{a}"), format!("zh:{}", b.to_lowercase())]
        );
        assert!(sums_hashes(b"nonsense line\n").is_empty());
        assert!(sums_hashes(format!("{a}\n").as_bytes()).is_empty());
    }
}
