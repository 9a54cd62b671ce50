//! `provender prune`: remove the provider versions, module versions, CLI releases and git
//! repositories the cache has not used for a while, keeping whatever given lock files, configurations, lists or
//! `--keep-cli` pin.
//!
//! - **Used** means served to a client, or stored (fetched from an origin, or imported). Every
//!   archive and module package has a last use: the later of when it was stored and when it was
//!   last served, as the store records it (see [`crate::storage`]: the disk backend in the
//!   file's access time, which provender's own reads leave alone; an object store in a
//!   `<key>.used` marker, written at most once an hour per object and replica). `seed`,
//!   `lock`, `export`, `verify` and re-verification read the cache without using it, and a
//!   `seed` or `import` that finds a version already cached leaves its last use as it was.
//! - **A provider version** goes only as a whole: when none of its cached archives (every
//!   platform) was used within `--unused-for`. A module version goes when its package was not.
//!   A CLI release goes like a provider version, by its zips, unless `--keep-cli` pins it;
//!   its record and SHA256SUMS copies go with its last zip.
//! - **Pins** come from `--keep` inputs, read by the same readers as `seed`
//!   ([`super::inputs`]): a lock file keeps exactly the versions it records; a configuration
//!   directory or a provider list keeps every cached version its constraints allow (what
//!   `terraform init` could still choose), and a configuration's registry modules likewise
//!   (the installed version, else every cached version the call allows), with the providers and
//!   modules the kept cached modules need in turn. A pinned version keeps every platform.
//! - **Removal** goes through the stores the server uses: each archive record first, then its
//!   zip ([`crate::cache::Objects::remove`]), so no reader finds half an archive; then the
//!   version's record (`<version>.json`) and its SHA256SUMS copies, which the mirror rebuilds
//!   from the origin if the version is asked for again. With `upstream.offline`, where the
//!   cache is all there is, the version also leaves the cached version list (`index.json`,
//!   or a module's `versions.json`), so that the mirror stops offering it; with an origin, the
//!   list is the origin's and is left to its own refresh.
//!   The OCI documents under `oci/` stay: they are small, and describe what the origin
//!   published rather than what the cache holds.
//! - **A git repository** goes when no client fetched from it, and it was neither refreshed
//!   nor imported, within `--unused-for` (its `provender-used` and `provender-refreshed`
//!   files), unless a `--keep` configuration calls a module from it. Its `provender-refreshed`
//!   goes first, so no client is served half of it. A repository directory a stopped first
//!   fetch left (never served) goes once it is as old as `--unused-for`.
//! - `--dry-run` decides the same way, prints the same table marked as a dry run, and changes
//!   nothing.
//! - `--unused-for` must be longer than zero (a typo must not empty the cache); a bad or
//!   missing value is a usage error (exit code 78, as for a bad input of the other commands).
//!
//! A server running on the same cache keeps working: a request for a removed archive finds no
//! record and fetches it again (or, offline, answers 404). Until it restarts it may still offer
//! removed versions from the lists and records it holds in memory. A version served between
//! the scan and its removal is removed all the same; its next request fetches it again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::configuration::WantedModule;
use super::inputs::{self, Wanted};
use super::{CommonArgs, OpsError, Outcome, human_bytes, usage};
use crate::address::{ModuleAddr, ProviderAddr, Version};
use crate::cache::{ArchiveKind, Listed, ModuleKind, ReleaseKind};
use crate::config::Tool;
use crate::constraints::Constraints;
use crate::mirror::{Core, Mirror, ReleaseMirror};
use crate::records::releases::Product;

/// `provender prune`
#[derive(clap::Args, Debug)]
#[command(after_help = "\
A provider version is removed when none of its cached archives was used (served to a client, \
fetched or imported) within --unused-for; a module version when its package was not. On disk \
the last use is the file's access time, which provender sets when it serves an archive; on an \
object store it is a marker object provender writes beside it (at most hourly).\n\n\
--keep INPUT pins versions: a *.lock.hcl file keeps exactly its versions; a configuration \
directory or a *.toml / *.json provider list keeps every cached version its constraints allow. \
A pinned version keeps every platform.\n\n\
A removed version's record and SHA256SUMS copies go too; with upstream.offline it also leaves \
the cached version list. A server running on the same cache fetches a removed archive again \
when asked (offline: 404) and may offer removed versions until it restarts.\n\n\
Example: provender prune --config provender.toml --unused-for 90d --keep ./infra \
--keep other/.terraform.lock.hcl --dry-run")]
pub struct PruneArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Remove what has not been used for this long, e.g. 90d, 12w, 2160h (required).
    #[arg(long, value_name = "DURATION")]
    pub unused_for: Option<String>,
    /// Keep what this input pins: a lock file, a configuration directory, or a provider list
    /// (repeatable).
    #[arg(long = "keep", value_name = "INPUT")]
    pub keep: Vec<PathBuf>,
    /// Which CLI the configurations are for: it decides the registry of short sources
    /// (`hashicorp/aws`) and whether `*.tofu` files are read. Default: configurations.tool.
    #[arg(long, value_enum, value_name = "TOOL")]
    pub tool: Option<Tool>,
    /// Keep the cached releases of this CLI that the constraint allows, as
    /// terraform|tofu[@CONSTRAINT] (repeatable).
    #[arg(long = "keep-cli", value_name = "CLI[@CONSTRAINT]")]
    pub keep_clis: Vec<String>,
    /// List what would be removed, and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What the `--keep` inputs and `--keep-cli` pin.
#[derive(Default)]
struct Pins {
    providers: Vec<Wanted>,
    modules: Vec<WantedModule>,
    clis: Vec<(Product, Constraints)>,
}

impl Pins {
    fn keeps_provider(&self, addr: &ProviderAddr, version: &Version) -> bool {
        self.providers.iter().any(|w| {
            &w.addr == addr
                && match &w.locked {
                    Some(locked) => locked == version,
                    None => w.constraints.allows(version),
                }
        })
    }

    fn keeps_release(&self, cli: Product, version: &Version) -> bool {
        self.clis
            .iter()
            .any(|(p, c)| *p == cli && c.selects(version))
    }

    fn keeps_module(&self, addr: &ModuleAddr, version: &Version) -> bool {
        self.modules.iter().any(|m| {
            &m.addr == addr
                && match &m.installed {
                    Some(installed) => installed == version,
                    None => m.constraints.allows(version),
                }
        })
    }
}

/// A version unused for the period that a `--keep` input pins.
enum Pinned {
    Provider(ProviderAddr, Version),
    Module(ModuleAddr, Version),
    Release(Product, Version),
    Git(crate::address::GitRepo),
}

impl std::fmt::Display for Pinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pinned::Provider(addr, version) => write!(f, "{addr} {version}"),
            Pinned::Module(addr, version) => write!(f, "module {addr} {version}"),
            Pinned::Release(cli, version) => write!(f, "{cli} {version} (CLI release)"),
            Pinned::Git(repo) => write!(f, "git repository {repo}"),
        }
    }
}

impl Pinned {
    fn to_json(&self) -> serde_json::Value {
        match self {
            Pinned::Provider(addr, version) => serde_json::json!({
                "kind": "provider",
                "provider": addr.to_string(),
                "version": version.to_string(),
            }),
            Pinned::Module(addr, version) => serde_json::json!({
                "kind": "module",
                "module": addr.to_string(),
                "version": version.to_string(),
            }),
            Pinned::Release(cli, version) => serde_json::json!({
                "kind": "release",
                "cli": cli.as_str(),
                "version": version.to_string(),
            }),
            Pinned::Git(repo) => serde_json::json!({
                "kind": "git",
                "repository": repo.to_string(),
            }),
        }
    }
}

/// One thing to remove.
enum Removal {
    /// A provider version, with every cached archive of it.
    Provider {
        addr: ProviderAddr,
        version: Version,
        archives: Vec<Listed<ArchiveKind>>,
    },
    /// A module version's package.
    Module(Listed<ModuleKind>),
    /// A CLI release, with every cached zip of it.
    Release {
        cli: Product,
        version: Version,
        zips: Vec<Listed<ReleaseKind>>,
    },
    /// A repository of the git cache.
    Git(crate::mirror::CachedRepo),
}

impl Removal {
    fn size(&self) -> u64 {
        match self {
            Removal::Provider { archives, .. } => archives.iter().map(|a| a.size).sum(),
            Removal::Module(m) => m.size,
            Removal::Release { zips, .. } => zips.iter().map(|z| z.size).sum(),
            Removal::Git(r) => r.size,
        }
    }
}

/// Runs `provender prune`.
pub async fn run(args: PruneArgs) -> Result<Outcome, OpsError> {
    let unused_for = parse_unused_for(args.unused_for.as_deref())?;
    let settings = super::load_settings(&args.common)?;
    let tool = args.tool.unwrap_or(settings.tool);
    let keep = inputs::read_all(&args.keep, &[], &[], tool)?;
    let keep_clis = args
        .keep_clis
        .iter()
        .map(|c| super::parse_cli(c))
        .collect::<Result<Vec<_>, _>>()?;
    let offline = settings.upstream.offline;
    let (mirror, _) = super::open_core(settings)?;
    let cutoff = SystemTime::now()
        .checked_sub(unused_for)
        .unwrap_or(SystemTime::UNIX_EPOCH);

    let archives = mirror
        .archives()
        .scan()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("listing the archive store: {e}")))?;
    let modules = mirror
        .modules()
        .list()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("listing the module store: {e}")))?;
    let zips = mirror
        .releases()
        .list()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("listing the release store: {e}")))?;
    let mut pins = Pins {
        providers: keep.providers,
        modules: Vec::new(),
        clis: keep_clis,
    };
    pin_modules(&mirror, &modules, keep.modules, tool, &mut pins).await?;

    // Published versions are the organisation's own: only `unpublish` removes them.
    let published: std::collections::HashSet<(String, Version)> = mirror
        .publications()
        .all()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("listing the publications: {e}")))?
        .into_iter()
        .map(|p| (p.address, p.version))
        .collect();
    let is_published =
        |address: String, version: &Version| published.contains(&(address, version.clone()));
    let mut versions: BTreeMap<(ProviderAddr, Version), Vec<Listed<ArchiveKind>>> = BTreeMap::new();
    for a in archives {
        versions
            .entry((a.key.addr.clone(), a.key.version.clone()))
            .or_default()
            .push(a);
    }
    let mut plan = Vec::new();
    let mut pinned = Vec::new();
    for ((addr, version), mut archives) in versions {
        let last_use = archives.iter().map(Listed::last_use).max();
        if last_use.is_none_or(|used| used >= cutoff) || is_published(addr.to_string(), &version) {
            continue;
        }
        if pins.keeps_provider(&addr, &version) {
            pinned.push(Pinned::Provider(addr, version));
            continue;
        }
        archives.sort_by(|a, b| a.key.platform.cmp(&b.key.platform));
        plan.push(Removal::Provider {
            addr,
            version,
            archives,
        });
    }
    let mut modules = modules;
    modules.sort_by(|a, b| a.key.cmp(&b.key));
    for m in modules {
        if m.last_use() >= cutoff || is_published(m.key.addr.to_string(), &m.key.version) {
            continue;
        }
        if pins.keeps_module(&m.key.addr, &m.key.version) {
            pinned.push(Pinned::Module(m.key.addr, m.key.version));
            continue;
        }
        plan.push(Removal::Module(m));
    }
    let mut releases: BTreeMap<(Product, Version), Vec<Listed<ReleaseKind>>> = BTreeMap::new();
    for z in zips {
        releases
            .entry((z.key.product, z.key.version.clone()))
            .or_default()
            .push(z);
    }
    // A release goes as a whole, like a provider version.
    for ((cli, version), mut zips) in releases {
        if zips.iter().map(Listed::last_use).max() >= Some(cutoff) {
            continue;
        }
        if pins.keeps_release(cli, &version) {
            pinned.push(Pinned::Release(cli, version));
            continue;
        }
        zips.sort_by(|a, b| a.key.cmp(&b.key));
        plan.push(Removal::Release { cli, version, zips });
    }

    // A git repository goes when no client fetched from it (and it was neither refreshed nor
    // imported) within --unused-for, unless a kept configuration calls a module from it.
    let git = crate::mirror::GitMirror::new(mirror.clone());
    let cutoff_secs = cutoff
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for r in git.cached() {
        if r.last_used >= cutoff_secs {
            continue;
        }
        if keep.git.iter().any(|w| w.repo == r.repo) {
            pinned.push(Pinned::Git(r.repo));
            continue;
        }
        plan.push(Removal::Git(r));
    }

    // What a stopped first fetch left (never served) goes too, when it is as old.
    let unfinished = if args.dry_run {
        Vec::new()
    } else {
        git.unfinished(cutoff)
    };
    for dir in &unfinished {
        if let Err(e) = git.remove_unfinished(dir).await {
            tracing::warn!("{}: {e}", dir.display());
        }
    }

    // Who used what is about to go, as far as the servers' usage counts go back.
    let used_by = if args.dry_run {
        super::usage::read(&mirror, None).await?
    } else {
        Vec::new()
    };
    let mut failed = Vec::new();
    let removed = if args.dry_run {
        plan
    } else {
        remove(&mirror, plan, offline, &mut failed).await
    };
    let report = Report {
        dry_run: args.dry_run,
        unused_for: args.unused_for.as_deref().unwrap_or_default(),
        cutoff,
        removed: &removed,
        pinned: &pinned,
        failed: &failed,
        used_by: &used_by,
    };
    if args.json {
        report.print_json();
    } else {
        report.print_table();
    }
    Ok(Outcome::from_failures(failed.len()))
}

/// Reads `--unused-for`: a duration longer than zero, in humantime's notation (`90d`, `12w`,
/// `2160h`, `3months`).
fn parse_unused_for(text: Option<&str>) -> Result<Duration, OpsError> {
    let Some(text) = text else {
        return Err(usage(
            "give --unused-for DURATION (e.g. 90d): what has not been used for that long is \
             removed",
        ));
    };
    let duration = humantime::parse_duration(text).map_err(|e| {
        usage(format!(
            "--unused-for {text:?}: {e}; expected a duration such as 90d, 12w or 2160h"
        ))
    })?;
    if duration.is_zero() {
        return Err(usage(format!(
            "--unused-for {text:?}: must be longer than zero (to keep only what --keep pins, \
             give a short time such as 1s)"
        )));
    }
    Ok(duration)
}

/// Adds to `pins` the module versions the `--keep` inputs pin, and what the cached ones among
/// them need in turn (read from their packages, as `seed` reads a module it fetched).
async fn pin_modules(
    mirror: &Arc<Core>,
    cached: &[Listed<ModuleKind>],
    wanted: Vec<WantedModule>,
    tool: Tool,
    pins: &mut Pins,
) -> Result<(), OpsError> {
    let registries = Mirror::over(mirror.clone());
    let mut read: BTreeSet<(ModuleAddr, Version)> = BTreeSet::new();
    let mut queue = wanted;
    while let Some(w) = queue.pop() {
        let needs_reading: Vec<&Listed<ModuleKind>> = if w.installed.is_some() {
            // Installed: its providers and modules were read in place with the configuration.
            Vec::new()
        } else {
            cached
                .iter()
                .filter(|m| m.key.addr == w.addr && w.constraints.allows(&m.key.version))
                .collect()
        };
        pins.modules.push(w);
        for m in needs_reading {
            let Some(record) = &m.record else { continue };
            if !read.insert((m.key.addr.clone(), m.key.version.clone())) {
                continue;
            }
            let config = super::seed::read_package(
                &registries,
                &m.key.addr,
                &m.key.version,
                record.subdir.as_deref(),
                tool,
            )
            .await
            .map_err(|e| {
                OpsError::Failed(anyhow::anyhow!(
                    "module {} {} is kept, but what it needs cannot be told: {e}; nothing was \
                     removed",
                    m.key.addr,
                    m.key.version
                ))
            })?;
            pins.providers.extend(config.providers);
            queue.extend(config.modules);
        }
    }
    Ok(())
}

/// Removes what `plan` lists; returns what was removed, and adds what could not be to `failed`.
async fn remove(
    mirror: &Arc<Core>,
    plan: Vec<Removal>,
    offline: bool,
    failed: &mut Vec<(String, String)>,
) -> Vec<Removal> {
    let mut removed = Vec::new();
    let releases = ReleaseMirror::new(mirror.clone());
    let git = crate::mirror::GitMirror::new(mirror.clone());
    for item in plan {
        match item {
            Removal::Provider {
                addr,
                version,
                archives,
            } => {
                let (mut gone, mut left) = (Vec::new(), 0);
                for a in archives {
                    match mirror.archives().remove(&a.key).await {
                        Ok(_) => gone.push(a),
                        Err(e) => {
                            failed.push((a.key.to_string(), e.to_string()));
                            left += 1;
                        }
                    }
                }
                // Metadata goes only with the last archive it describes.
                if left == 0 {
                    let what = format!("{addr} {version}");
                    if let Err(e) = mirror.meta().remove_version(&addr, &version).await {
                        failed.push((what.clone(), format!("removing the version record: {e}")));
                    }
                    if offline {
                        if let Err(e) = mirror.provider_lists().unlist(&addr, &version).await {
                            failed.push((what, format!("updating the version list: {e}")));
                        }
                    }
                }
                if !gone.is_empty() {
                    removed.push(Removal::Provider {
                        addr,
                        version,
                        archives: gone,
                    });
                }
            }
            Removal::Git(r) => match git.remove(&r).await {
                Ok(()) => removed.push(Removal::Git(r)),
                Err(e) => failed.push((format!("git repository {}", r.repo), e.to_string())),
            },
            Removal::Module(m) => {
                let what = m.key.to_string();
                if let Err(e) = mirror.modules().remove(&m.key).await {
                    failed.push((what, e.to_string()));
                    continue;
                }
                // Its zip (an OCI artifact's layer) was made from it and goes with it.
                if let Err(e) = mirror.module_zips().remove(&m.key).await {
                    failed.push((what, format!("removing its zip: {e}")));
                    continue;
                }
                if offline {
                    if let Err(e) = mirror
                        .module_lists()
                        .unlist(&m.key.addr, &m.key.version)
                        .await
                    {
                        failed.push((what, format!("updating the version list: {e}")));
                    }
                }
                removed.push(Removal::Module(m));
            }
            Removal::Release { cli, version, zips } => {
                let (mut gone, mut left) = (Vec::new(), 0);
                for z in zips {
                    match mirror.releases().remove(&z.key).await {
                        Ok(_) => gone.push(z),
                        Err(e) => {
                            failed.push((format!("release zip {}", z.key), e.to_string()));
                            left += 1;
                        }
                    }
                }
                // The release's record and SHA256SUMS go only with its last build, also one a
                // server stored since the scan.
                let what = format!("{cli} {version}");
                let dir = [cli.as_str(), version.as_str()];
                let remaining = match mirror.releases().committed_under(&dir).await {
                    Ok(builds) => builds.len(),
                    Err(e) => {
                        failed.push((what.clone(), format!("listing its builds: {e}")));
                        1
                    }
                };
                if left == 0 && remaining == 0 {
                    if let Err(e) = releases.remove_release(cli, &version, offline).await {
                        failed.push((what, e.to_string()));
                    }
                }
                if !gone.is_empty() {
                    removed.push(Removal::Release {
                        cli,
                        version,
                        zips: gone,
                    });
                }
            }
        }
    }
    removed
}

/// What a run removed (or, dry, would remove), for people or machines.
struct Report<'a> {
    dry_run: bool,
    unused_for: &'a str,
    cutoff: SystemTime,
    removed: &'a [Removal],
    /// Versions unused for the period that a `--keep` input pins.
    pinned: &'a [Pinned],
    failed: &'a [(String, String)],
    /// The usage counts, on a dry run (see `provender usage`).
    used_by: &'a [crate::usage::Row],
}

fn when(t: SystemTime) -> String {
    if t > SystemTime::UNIX_EPOCH {
        humantime::format_rfc3339_seconds(t).to_string()
    } else {
        "-".into()
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl Report<'_> {
    /// The clients that used a version, by the usage counts.
    fn users(
        &self,
        kind: crate::usage::Kind,
        address: &str,
        version: &Version,
    ) -> Vec<&crate::usage::Row> {
        let version = version.to_string();
        self.used_by
            .iter()
            .filter(|r| r.kind == kind && r.address == address && r.version == version)
            .collect()
    }

    /// `client (uses, last day)` for each client that used a version; `-` for none.
    fn users_text(&self, kind: crate::usage::Kind, address: &str, version: &Version) -> String {
        let users = self.users(kind, address, version);
        if users.is_empty() {
            return "-".into();
        }
        users
            .iter()
            .map(|r| format!("{} ({}, last {})", r.client, r.count, r.last))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn freed(&self) -> u64 {
        self.removed.iter().map(Removal::size).sum()
    }

    /// One table row per archive and per module version.
    fn rows(&self) -> Vec<[String; 6]> {
        let mut rows = Vec::new();
        for item in self.removed {
            match item {
                Removal::Provider {
                    addr,
                    version,
                    archives,
                } => rows.extend(archives.iter().map(|a| {
                    [
                        addr.to_string(),
                        version.to_string(),
                        a.key.platform.to_string(),
                        human_bytes(a.size),
                        when(a.last_use()),
                        self.users_text(crate::usage::Kind::Provider, &addr.to_string(), version),
                    ]
                })),
                Removal::Release { cli, version, zips } => rows.extend(zips.iter().map(|z| {
                    [
                        format!("{cli} (CLI)"),
                        version.to_string(),
                        z.key.filename(),
                        human_bytes(z.size),
                        when(z.last_use()),
                        "-".into(),
                    ]
                })),
                Removal::Git(r) => rows.push([
                    format!("git {}", r.repo),
                    "-".into(),
                    "-".into(),
                    human_bytes(r.size),
                    when(SystemTime::UNIX_EPOCH + Duration::from_secs(r.last_used)),
                    "-".into(),
                ]),
                Removal::Module(m) => rows.push([
                    format!("module {}", m.key.addr),
                    m.key.version.to_string(),
                    "-".into(),
                    human_bytes(m.size),
                    when(m.last_use()),
                    self.users_text(
                        crate::usage::Kind::Module,
                        &m.key.addr.to_string(),
                        &m.key.version,
                    ),
                ]),
            }
        }
        rows
    }

    fn print_table(&self) {
        let (title, verb) = if self.dry_run {
            ("prune (dry run)", "would be removed")
        } else {
            ("prune", "removed")
        };
        if self.dry_run {
            println!("{title}: nothing is changed; a run would remove what is listed");
        }
        let rows = self.rows();
        let header = [
            "PROVIDER / MODULE",
            "VERSION",
            "PLATFORM",
            "SIZE",
            "LAST USED",
            "USED BY",
        ]
        .map(String::from);
        if !rows.is_empty() && self.dry_run {
            super::ls::print_table(&header, &rows);
        } else if !rows.is_empty() {
            // Who used what is known only on a dry run: a real run leaves the column out.
            let [a, b, c, d, e, _] = header;
            let rows: Vec<[String; 5]> = rows
                .into_iter()
                .map(|[a, b, c, d, e, _]| [a, b, c, d, e])
                .collect();
            super::ls::print_table(&[a, b, c, d, e], &rows);
        }
        let count = |kind: fn(&Removal) -> bool| self.removed.iter().filter(|r| kind(r)).count();
        let versions = count(|r| matches!(r, Removal::Provider { .. }));
        let modules = count(|r| matches!(r, Removal::Module(_)));
        let releases = count(|r| matches!(r, Removal::Release { .. }));
        let archives: usize = self
            .removed
            .iter()
            .map(|r| match r {
                Removal::Provider { archives, .. } => archives.len(),
                Removal::Module(_) | Removal::Release { .. } | Removal::Git(_) => 0,
            })
            .sum();
        let freed = if self.dry_run {
            format!("{} would be freed", human_bytes(self.freed()))
        } else {
            format!("{} freed", human_bytes(self.freed()))
        };
        // CLI releases are named only where a cache has them.
        let releases = match releases {
            0 => String::new(),
            n => format!(" and {}", plural(n, "CLI release", "CLI releases")),
        };
        // Git repositories likewise.
        let releases = match count(|r| matches!(r, Removal::Git(_))) {
            0 => releases,
            n => format!(
                "{releases} and {}",
                plural(n, "git repository", "git repositories")
            ),
        };
        println!(
            "{title}: {} of {} and {}{releases} unused for {} {verb}, {freed}",
            plural(archives, "archive", "archives"),
            plural(versions, "provider version", "provider versions"),
            plural(modules, "module version", "module versions"),
            self.unused_for,
        );
        if !self.pinned.is_empty() {
            println!(
                "kept by --keep, though unused for {} ({}):",
                self.unused_for,
                self.pinned.len()
            );
            for p in self.pinned {
                println!("  {p}");
            }
        }
        super::print_failures(self.failed);
    }

    fn print_json(&self) {
        let removed: Vec<serde_json::Value> = self
            .removed
            .iter()
            .flat_map(|item| match item {
                Removal::Provider {
                    addr,
                    version,
                    archives,
                } => archives
                    .iter()
                    .map(|a| {
                        serde_json::json!({
                            "kind": "provider",
                            "provider": addr.to_string(),
                            "version": version.to_string(),
                            "platform": a.key.platform.to_string(),
                            "size": a.size,
                            "last_used": when(a.last_use()),
                            "used_by": self.users(crate::usage::Kind::Provider, &addr.to_string(), version),
                        })
                    })
                    .collect::<Vec<_>>(),
                Removal::Release { cli, version, zips } => zips
                    .iter()
                    .map(|z| {
                        serde_json::json!({
                            "kind": "release",
                            "cli": cli.as_str(),
                            "version": version.to_string(),
                            "platform": z.key.platform.to_string(),
                            "file": z.key.filename(),
                            "size": z.size,
                            "last_used": when(z.last_use()),
                        })
                    })
                    .collect(),
                Removal::Git(r) => vec![serde_json::json!({
                    "kind": "git",
                    "repository": r.repo.to_string(),
                    "size": r.size,
                    "last_used": when(SystemTime::UNIX_EPOCH + Duration::from_secs(r.last_used)),
                })],
                Removal::Module(m) => vec![serde_json::json!({
                    "kind": "module",
                    "module": m.key.addr.to_string(),
                    "version": m.key.version.to_string(),
                    "size": m.size,
                    "last_used": when(m.last_use()),
                    "used_by": self.users(crate::usage::Kind::Module, &m.key.addr.to_string(), &m.key.version),
                })],
            })
            .collect();
        let failed: Vec<serde_json::Value> = self
            .failed
            .iter()
            .map(|(what, why)| serde_json::json!({ "what": what, "why": why }))
            .collect();
        let doc = serde_json::json!({
            "dry_run": self.dry_run,
            "unused_for": self.unused_for,
            "cutoff": when(self.cutoff),
            "removed": removed,
            "bytes_freed": self.freed(),
            "kept": self.pinned.iter().map(Pinned::to_json).collect::<Vec<_>>(),
            "failed": failed,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("JSON of strings and numbers")
        );
    }
}
