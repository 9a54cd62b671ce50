//! `provender seed`: fill the cache for a set of providers and modules, through the same fetch
//! and verification as `serve` ([`Core::ensure_archive`], [`ModuleRegistry::module_record`](crate::mirror::ModuleRegistry::module_record)).
//!
//! Registry modules come first: each is resolved to one version (the one `terraform init`
//! installed, else the newest the origin lists that meets the call's constraint) and fetched;
//! a module not installed locally is read from its package, so the providers it needs and the
//! registry modules it calls are seeded too. Then each wanted provider is resolved to one
//! version (a lock file's pin, else the newest version the origin lists that meets the
//! constraint), and every chosen platform's archive is ensured, several at a time. The report
//! lists what was added, what was already there, and what failed and why; any failure makes
//! the exit status non-zero.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::StreamExt;

use super::configuration::WantedModule;
use super::inputs::{self, InputError, Wanted};
use super::{CommonArgs, OpsError, Outcome, human_bytes, progress, usage};
use crate::address::{ModuleAddr, Platform, ProviderAddr, Version};
use crate::config::Tool;
use crate::constraints::Constraints;
use crate::mirror::{Core, Mirror, Reach};

/// `provender seed`
#[derive(clap::Args, Debug)]
#[command(
    after_help = "INPUT is a configuration directory (its required_providers blocks, and the \
registry and git module sources its module blocks call, followed into the modules they call), a \
*.lock.hcl file (its exact versions), or a *.toml / *.json list:\n\n  [[providers]]\n  source   = \
\"hashicorp/aws\"\n  versions = \"~> 5.0\"\n\nExample: provender seed --config provender.toml \
--platform linux_amd64 --platform darwin_arm64 ./infra .terraform.lock.hcl"
)]
pub struct SeedArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Platform to fetch, e.g. linux_amd64 (repeatable). Default: the configuration's
    /// upstream.platforms, or every platform the origin offers.
    #[arg(long = "platform", short = 'p', value_parser = Platform::parse)]
    pub platforms: Vec<Platform>,
    /// Which CLI the configurations are for: it decides the registry of short sources
    /// (`hashicorp/aws`) and whether `*.tofu` files are read. Default: configurations.tool.
    #[arg(long, value_enum, value_name = "TOOL")]
    pub tool: Option<crate::config::Tool>,
    /// A provider to seed, as SOURCE[@CONSTRAINT], e.g. "hashicorp/aws@~> 5.0" (repeatable).
    #[arg(long = "provider", value_name = "SOURCE[@CONSTRAINT]")]
    pub providers: Vec<String>,
    /// A registry module to seed, as SOURCE[@CONSTRAINT], e.g.
    /// "terraform-aws-modules/vpc/aws@~> 5.0" (repeatable).
    #[arg(long = "module", value_name = "SOURCE[@CONSTRAINT]")]
    pub modules: Vec<String>,
    /// A CLI release to seed, as terraform|tofu[@CONSTRAINT], e.g. "terraform@~> 1.11"
    /// (repeatable; needs `[releases] enabled`): the newest release that matches, every platform
    /// (or those of --platform / upstream.platforms).
    #[arg(long = "cli", value_name = "CLI[@CONSTRAINT]")]
    pub clis: Vec<String>,
    /// Fill from another provender (a site's centre) instead of the origins: its registry
    /// facade, module registry and release mirror are asked for every origin host, and what it
    /// sends is verified as the origins' own (signed SHA256SUMS, pinned keys, trust levels).
    #[arg(long, value_name = "URL")]
    pub from: Option<String>,
    /// A file holding the bearer token for --from (read for every request, so a rotating
    /// workload identity token works); else `TF_TOKEN_<centre host>`.
    #[arg(long, value_name = "FILE", requires = "from")]
    pub from_token_file: Option<PathBuf>,
    /// How many archives to download at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,
    /// Configuration directories, lock files and provider lists.
    #[arg(value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
}

/// `--from`: every origin host (registries and release hosts) asked through `from`, unless the
/// configuration already names a centre for it.
fn fill_from(
    settings: &mut crate::config::Settings,
    from: &str,
    token_file: Option<&std::path::Path>,
) -> Result<(), OpsError> {
    let centre =
        crate::config::parse_via("--from", None, from, None).map_err(|e| usage(e.to_string()))?;
    let r = &settings.releases;
    let release_hosts: Vec<crate::address::Hostname> =
        [&r.hashicorp_url, &r.opentofu_url, &r.opentofu_index_url]
            .into_iter()
            .filter_map(|u| crate::address::Hostname::parse(u.host_str()?).ok())
            .collect();
    settings.upstream.fill_from(&centre, &release_hosts);
    if let Some(path) = token_file {
        if let Err(e) = std::fs::metadata(path) {
            return Err(usage(format!("--from-token-file {}: {e}", path.display())));
        }
        let hs = settings
            .upstream
            .hosts
            .entry(centre.host.clone())
            .or_default();
        hs.token = None;
        hs.token_file = Some(path.to_path_buf());
    }
    Ok(())
}

/// Seeds the newest release of each CLI that its constraints allow: every platform's zip (or
/// those of `platforms`), through the same fetch and checks as serving them. Prints what was
/// added; failures go to `failed`.
async fn seed_releases(
    registries: &Mirror,
    clis: &[(
        crate::records::releases::Product,
        crate::constraints::Constraints,
    )],
    platforms: &[Platform],
    failed: &mut Vec<(String, String)>,
) {
    let releases = &registries.releases;
    for (product, constraints) in clis {
        let list = match releases.list(*product, &crate::mirror::Reach::Origin).await {
            Ok(list) => list,
            Err(e) => {
                failed.push((format!("{product} releases"), e.to_string()));
                continue;
            }
        };
        let Some(version) = constraints.newest(list.releases.iter().map(|r| &r.version)) else {
            failed.push((
                format!("{product} {}", shown_constraints(constraints)),
                "no release matches".to_string(),
            ));
            continue;
        };
        let record = match releases
            .release(*product, version, &crate::mirror::Reach::Origin)
            .await
        {
            Ok(record) => record,
            Err(e) => {
                failed.push((format!("{product} {version}"), e.to_string()));
                continue;
            }
        };
        for (key, _) in record.all_builds() {
            if !platforms.is_empty() && !platforms.contains(&key.platform) {
                continue;
            }
            let what = key.to_string();
            match releases.ensure_build(&key).await {
                Ok((size, true)) => println!("release {what}: added ({})", human_bytes(size)),
                Ok((size, false)) => {
                    println!("release {what}: already present ({})", human_bytes(size))
                }
                Err(e) => failed.push((what, e.to_string())),
            }
        }
    }
}

/// Why a wanted provider or module could not be seeded (reported per item; the command goes
/// on).
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    /// The mirror could not provide it (an origin, the store, a policy), as a client would be
    /// told.
    #[error("{0}")]
    Mirror(#[from] crate::error::Error),
    /// The origin lists no version that meets the constraints.
    #[error("no version matches {} (listed: {})", shown_constraints(.constraints), shown_versions(.listed))]
    NoMatch {
        constraints: Constraints,
        listed: Vec<Version>,
    },
    /// A local file operation on a module's package: what it was for, and why it failed.
    #[error("{doing}: {source}")]
    Local {
        doing: String,
        source: std::io::Error,
    },
    #[error("reading the module's configuration: {0}")]
    ModuleConfiguration(InputError),
}

fn shown_constraints(c: &Constraints) -> String {
    if c.is_empty() {
        "any version".to_string()
    } else {
        format!("\"{c}\"")
    }
}

fn shown_versions(listed: &[Version]) -> String {
    if listed.is_empty() {
        return "none".to_string();
    }
    let names: Vec<&str> = listed.iter().map(Version::as_str).collect();
    names.join(", ")
}

/// Resolves one wanted provider to a version: the lock file's pin, else the newest listed
/// version meeting the constraint.
pub async fn resolve(mirror: &Arc<Core>, wanted: &Wanted) -> Result<Version, SeedError> {
    if let Some(v) = &wanted.locked {
        return Ok(v.clone());
    }
    let index = mirror.versions(&wanted.addr, &Reach::Origin).await?;
    let listed = index.versions.iter().map(|v| &v.version);
    match wanted.constraints.newest(listed.clone()) {
        Some(v) => Ok(v.clone()),
        None => Err(SeedError::NoMatch {
            constraints: wanted.constraints.clone(),
            listed: listed.cloned().collect(),
        }),
    }
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
    mirror: &Arc<Core>,
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
            Err(e) => failed.push((describe(w), e.to_string())),
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
    mirror: &Arc<Core>,
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

/// What fetching modules did: module versions added and already present, with sizes.
#[derive(Debug, Default)]
pub struct ModuleReport {
    pub added: Vec<(String, u64)>,
    pub present: Vec<(String, u64)>,
}

/// Fetches every wanted registry module through the mirror, then reads the configuration of
/// each one that was not installed locally: the providers it needs are returned, and the
/// registry modules it calls are fetched in turn. Failures are added to `failed`.
pub async fn fetch_modules(
    mirror: &Mirror,
    wanted: Vec<WantedModule>,
    tool: Tool,
    failed: &mut Vec<(String, String)>,
) -> (Vec<Wanted>, ModuleReport) {
    let mut providers = Vec::new();
    let mut report = ModuleReport::default();
    let mut done: BTreeSet<(ModuleAddr, Version)> = BTreeSet::new();
    let mut queue = wanted;
    while let Some(w) = queue.pop() {
        let what = format!("module {}", w.addr);
        let version = match &w.installed {
            Some(v) => v.clone(),
            None => match mirror
                .modules
                .version_numbers(&w.addr, &crate::mirror::Reach::Origin)
                .await
            {
                Ok(versions) => match w.constraints.newest(versions.iter()) {
                    Some(v) => v.clone(),
                    None => {
                        let detail = if w.constraints.is_empty() {
                            "the origin lists no version".to_string()
                        } else {
                            format!("no version matches {}", w.constraints)
                        };
                        failed.push((format!("{what} (from {})", w.from), detail));
                        continue;
                    }
                },
                Err(e) => {
                    failed.push((format!("{what} (from {})", w.from), e.to_string()));
                    continue;
                }
            },
        };
        if !done.insert((w.addr.clone(), version.clone())) {
            continue;
        }
        let label = format!("{} {version}", w.addr);
        let cached = matches!(
            mirror.modules.module_cached(&w.addr, &version).await,
            Ok(true)
        );
        let rec = match mirror
            .modules
            .module_record(&w.addr, &version, &Reach::Origin)
            .await
        {
            Ok(rec) => rec,
            Err(e) => {
                failed.push((format!("module {label}"), e.to_string()));
                continue;
            }
        };
        let list = if cached {
            &mut report.present
        } else {
            &mut report.added
        };
        list.push((label.clone(), rec.size));
        if w.installed.is_some() {
            continue; // read in place by the configuration reader
        }
        match read_package(mirror, &w.addr, &version, rec.subdir.as_deref(), tool).await {
            Ok(config) => {
                providers.extend(config.providers);
                queue.extend(config.modules);
            }
            Err(e) => failed.push((format!("module {label}"), e.to_string())),
        }
    }
    report.added.sort();
    report.present.sort();
    (providers, report)
}

/// Unpacks a cached module package into a scratch directory and reads its configuration.
pub(super) async fn read_package(
    mirror: &Mirror,
    addr: &ModuleAddr,
    version: &Version,
    subdir: Option<&str>,
    tool: Tool,
) -> Result<super::configuration::Configuration, SeedError> {
    let local = |doing: &dyn std::fmt::Display| {
        let doing = doing.to_string();
        move |source| SeedError::Local { doing, source }
    };
    let package = mirror
        .modules
        .module_package(addr, version, &Reach::Origin)
        .await?;
    let scratch = mirror
        .core()
        .scratch_dir()
        .map_err(local(&"creating a scratch directory"))?;
    let archive = scratch.path().join("module.tar.gz");
    let mut out = tokio::fs::File::create(&archive)
        .await
        .map_err(local(&archive.display()))?;
    let mut reader = tokio_util::io::StreamReader::new(package.body);
    tokio::io::copy(&mut reader, &mut out)
        .await
        .map_err(local(&"reading the cached package"))?;
    drop(out);
    let root = scratch.path().join("module");
    let (from, into) = (archive.clone(), root.clone());
    tokio::task::spawn_blocking(move || {
        let file = std::fs::File::open(&from)?;
        tar::Archive::new(flate2::read::GzDecoder::new(file)).unpack(&into)
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e)))
    .map_err(local(&"unpacking the cached package"))?;
    let dir = match subdir {
        Some(sub) => root.join(sub),
        None => root.clone(),
    };
    super::configuration::read_configuration_with(
        &dir,
        std::path::Path::new(".terraform"),
        Some(&root),
        tool,
    )
    .map_err(SeedError::ModuleConfiguration)
}

/// Brings the git cache's copy of each repository the configurations call modules from up to
/// date (as a client's `info/refs` would), and checks that each call's `ref` is in it. Returns
/// a line per repository; failures, naming the call, go to `failed`.
async fn seed_git(
    mirror: &Mirror,
    wanted: &[super::configuration::WantedGit],
    failed: &mut Vec<(String, String)>,
) -> Vec<String> {
    let mut done = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for w in wanted {
        let what = format!(
            "git repository {}{} ({})",
            w.repo,
            w.reference
                .as_deref()
                .map_or(String::new(), |r| format!(" ref {r}")),
            w.from
        );
        let ready = match mirror
            .git
            .ready(&w.repo, &crate::mirror::Reach::Origin)
            .await
        {
            Ok(ready) => ready,
            Err(e) => {
                failed.push((what, e.to_string()));
                continue;
            }
        };
        match mirror.git.resolve(&ready, w.reference.as_deref()).await {
            Ok(commit) => {
                if seen.insert(w.repo.clone()) {
                    done.push(format!(
                        "{} ({} at {})",
                        w.repo,
                        w.reference.as_deref().unwrap_or("HEAD"),
                        &commit[..12.min(commit.len())]
                    ));
                }
            }
            Err(e) => failed.push((what, e.to_string())),
        }
    }
    done
}

/// Runs `provender seed`.
pub async fn run(args: SeedArgs) -> Result<Outcome, OpsError> {
    let mut settings = super::load_settings(&args.common)?;
    if let Some(from) = &args.from {
        fill_from(&mut settings, from, args.from_token_file.as_deref())?;
    }
    let platforms = super::select_platforms(&settings, &args.platforms)?;
    let tool = args.tool.unwrap_or(settings.tool);
    let inputs = inputs::read_all(&args.inputs, &args.providers, &args.modules, tool)?;
    let clis = args
        .clis
        .iter()
        .map(|c| super::parse_cli(c))
        .collect::<Result<Vec<_>, _>>()?;
    if !clis.is_empty() && !settings.releases.enabled {
        return Err(usage(
            "--cli needs the release mirror: set [releases] enabled = true in the configuration",
        ));
    }
    if inputs.providers.is_empty()
        && inputs.modules.is_empty()
        && inputs.git.is_empty()
        && clis.is_empty()
    {
        return Err(usage(
            "nothing to seed: give configuration directories, lock files, provider lists, \
             --provider, --module or --cli",
        ));
    }
    let offline = settings.upstream.offline;
    let (mirror, _) = super::open_core(settings)?;
    super::load_approvals(&mirror).await?;
    let registries = Mirror::over(mirror.clone());
    if offline {
        eprintln!("provender: upstream.offline is set; only checking what the cache already holds");
    }
    let mut failed = Vec::new();
    let (more, modules) = fetch_modules(&registries, inputs.modules, tool, &mut failed).await;
    let git = seed_git(&registries, &inputs.git, &mut failed).await;
    let mut wanted = inputs.providers;
    wanted.extend(more);
    seed_releases(&registries, &clis, &platforms, &mut failed).await;
    let jobs = plan(&mirror, &wanted, &platforms, &mut failed).await;
    let mut report = ensure_all(&mirror, jobs, args.concurrency.into(), "seeding").await;
    report.failed.splice(0..0, failed);

    if !modules.added.is_empty() || !modules.present.is_empty() {
        let sum = |list: &[(String, u64)]| list.iter().map(|(_, s)| s).sum::<u64>();
        println!(
            "modules: {} added ({}), {} already present",
            modules.added.len(),
            human_bytes(sum(&modules.added)),
            modules.present.len()
        );
        for (title, list) in [
            ("added", &modules.added),
            ("already present", &modules.present),
        ] {
            if !list.is_empty() {
                println!("{title} ({}):", list.len());
                for (label, size) in list.iter() {
                    println!("  module {label} ({})", human_bytes(*size));
                }
            }
        }
    }
    if !git.is_empty() {
        println!("git repositories: {} up to date", git.len());
        for line in &git {
            println!("  {line}");
        }
    }
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
