//! `provender seed`: fill the cache for a set of providers, through the same fetch and
//! verification as `serve` ([`Mirror::ensure_archive`]).
//!
//! Each wanted provider is resolved to one version (a lock file's pin, else the newest version
//! the origin lists that meets the constraint), then every chosen platform's archive is
//! ensured, several at a time. The report lists what was added, what was already there, and
//! what failed and why; any failure makes the exit status non-zero.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::StreamExt;

use super::inputs::{self, Wanted};
use super::{CommonArgs, OpsError, Outcome, human_bytes, progress, usage};
use crate::address::{Platform, ProviderAddr, Version};
use crate::mirror::Mirror;

/// `provender seed`
#[derive(clap::Args, Debug)]
#[command(
    after_help = "INPUT is a configuration directory (its required_providers blocks), a \
*.lock.hcl file (its exact versions), or a *.toml / *.json list:\n\n  [[providers]]\n  source   = \
\"hashicorp/aws\"\n  versions = \"~> 5.0\"\n\nExample: provender seed --config provender.toml \
--platform linux_amd64 --platform darwin_arm64 ./infra .terraform.lock.hcl"
)]
pub struct SeedArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Platform to fetch, e.g. linux_amd64 (repeatable). Default: the configuration's
    /// upstream.platforms, or every platform the origin offers.
    #[arg(long = "platform", short = 'p', value_parser = super::parse_platform)]
    pub platforms: Vec<Platform>,
    /// Which CLI the configurations are for: it decides the registry of short sources
    /// (`hashicorp/aws`) and whether `*.tofu` files are read. Default: configurations.tool.
    #[arg(long, value_enum, value_name = "TOOL")]
    pub tool: Option<crate::config::Tool>,
    /// A provider to seed, as SOURCE[@CONSTRAINT], e.g. "hashicorp/aws@~> 5.0" (repeatable).
    #[arg(long = "provider", value_name = "SOURCE[@CONSTRAINT]")]
    pub providers: Vec<String>,
    /// How many archives to download at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,
    /// Configuration directories, lock files and provider lists.
    #[arg(value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
}

/// Resolves one wanted provider to a version: the lock file's pin, else the newest listed
/// version meeting the constraint.
pub async fn resolve(mirror: &Arc<Mirror>, wanted: &Wanted) -> Result<Version, String> {
    if let Some(v) = &wanted.locked {
        return Ok(v.clone());
    }
    let index = mirror
        .versions(&wanted.addr)
        .await
        .map_err(|e| e.to_string())?;
    let listed: Vec<&Version> = index.versions.iter().map(|v| &v.version).collect();
    wanted
        .constraints
        .newest(listed.iter().copied())
        .cloned()
        .ok_or_else(|| {
            let shown = if wanted.constraints.is_empty() {
                "any version".to_string()
            } else {
                format!("\"{}\"", wanted.constraints)
            };
            format!(
                "no version matches {shown} (listed: {})",
                if listed.is_empty() {
                    "none".to_string()
                } else {
                    listed
                        .iter()
                        .map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )
        })
}

/// How one wanted provider is described in messages.
pub fn describe(w: &Wanted) -> String {
    match (&w.locked, w.constraints.is_empty()) {
        (Some(v), _) => format!("{} {v} (from {})", w.addr, w.from),
        (None, true) => format!("{} (from {})", w.addr, w.from),
        (None, false) => format!("{} \"{}\" (from {})", w.addr, w.constraints, w.from),
    }
}

/// One archive to make sure of.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Job {
    pub addr: ProviderAddr,
    pub version: Version,
    pub platform: Platform,
}

impl std::fmt::Display for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.addr, self.version, self.platform)
    }
}

/// What ensuring a set of archives did.
#[derive(Debug, Default)]
pub struct EnsureReport {
    /// Fetched and verified now, with sizes.
    pub added: Vec<(Job, u64)>,
    /// Already in the cache.
    pub present: Vec<(Job, u64)>,
    pub failed: Vec<(String, String)>,
}

/// Resolves `wanted` into archive jobs for `platforms` (empty: every platform the version has).
/// Failures are added to `failed`.
pub async fn plan(
    mirror: &Arc<Mirror>,
    wanted: &[Wanted],
    platforms: &[Platform],
    failed: &mut Vec<(String, String)>,
) -> BTreeSet<Job> {
    let mut versions: BTreeSet<(ProviderAddr, Version)> = BTreeSet::new();
    for w in wanted {
        match resolve(mirror, w).await {
            Ok(v) => {
                versions.insert((w.addr.clone(), v));
            }
            Err(e) => failed.push((describe(w), e)),
        }
    }
    let mut jobs = BTreeSet::new();
    for (addr, version) in versions {
        let rec = match mirror.version_info(&addr, &version).await {
            Ok(r) => r,
            Err(e) => {
                failed.push((format!("{addr} {version}"), e.to_string()));
                continue;
            }
        };
        let chosen: Vec<Platform> = if platforms.is_empty() {
            rec.packages.keys().cloned().collect()
        } else {
            platforms.to_vec()
        };
        for platform in chosen {
            if !rec.packages.contains_key(&platform) {
                failed.push((
                    format!("{addr} {version} {platform}"),
                    "the origin offers no package for this platform".into(),
                ));
                continue;
            }
            jobs.insert(Job {
                addr: addr.clone(),
                version: version.clone(),
                platform,
            });
        }
    }
    jobs
}

/// Ensures every job's archive is cached, `concurrency` at a time, with a progress bar.
pub async fn ensure_all(
    mirror: &Arc<Mirror>,
    jobs: BTreeSet<Job>,
    concurrency: usize,
    what: &str,
) -> EnsureReport {
    let bar = progress(jobs.len() as u64, what, false);
    let results = futures_util::stream::iter(jobs)
        .map(|job| {
            let (mirror, bar) = (mirror.clone(), bar.clone());
            async move {
                bar.set_message(job.to_string());
                let result = mirror
                    .ensure_archive(&job.addr, &job.version, &job.platform)
                    .await;
                bar.inc(1);
                (job, result)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    bar.finish_and_clear();
    let mut report = EnsureReport::default();
    for (job, result) in results {
        match result {
            Ok((info, true)) => report.added.push((job, info.size)),
            Ok((info, false)) => report.present.push((job, info.size)),
            Err(e) => report.failed.push((job.to_string(), e.to_string())),
        }
    }
    report.added.sort();
    report.present.sort();
    report
}

/// Runs `provender seed`.
pub async fn run(args: SeedArgs) -> Result<Outcome, OpsError> {
    let settings = super::load_settings(&args.common)?;
    let platforms = super::select_platforms(&settings, &args.platforms)?;
    let wanted = inputs::read_all(
        &args.inputs,
        &args.providers,
        args.tool.unwrap_or(settings.tool),
    )
    .map_err(usage)?;
    if wanted.is_empty() {
        return Err(usage(
            "nothing to seed: give configuration directories, lock files, provider lists or --provider",
        ));
    }
    let offline = settings.upstream.offline;
    let (mirror, _) = super::open_mirror(settings)?;
    if offline {
        eprintln!("provender: upstream.offline is set; only checking what the cache already holds");
    }
    let mut failed = Vec::new();
    let jobs = plan(&mirror, &wanted, &platforms, &mut failed).await;
    let mut report = ensure_all(&mirror, jobs, args.concurrency.into(), "seeding").await;
    report.failed.splice(0..0, failed);

    let bytes = |list: &[(Job, u64)]| list.iter().map(|(_, s)| s).sum::<u64>();
    println!(
        "seed: {} added ({}), {} already present, {} failed",
        report.added.len(),
        human_bytes(bytes(&report.added)),
        report.present.len(),
        report.failed.len()
    );
    for (title, list) in [
        ("added", &report.added),
        ("already present", &report.present),
    ] {
        if !list.is_empty() {
            println!("{title} ({}):", list.len());
            for (job, size) in list.iter() {
                println!("  {job} ({})", human_bytes(*size));
            }
        }
    }
    super::print_failures(&report.failed);
    Ok(Outcome::from_failures(report.failed.len()))
}
