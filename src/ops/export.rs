//! `provender export`: the cache as a static network mirror directory, or as one bundle file.
//!
//! Only the cache is read; no origin is contacted. Every archive's SHA-256 is recomputed while
//! it is copied and must equal its record, so an export never carries a damaged archive. Files
//! are written to temporary names and renamed into place; a bundle appears under its name only
//! once complete.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::bundle::{
    self, BundleArchive, BundleBuild, BundleError, BundleRelease, BundleSums, BundleVersion,
    Manifest, MirrorEntry,
};
use super::{CommonArgs, OpsError, Outcome, human_bytes, progress, usage};
use crate::address::{Platform, ProviderAddr, Version};
use crate::cache::{ArchiveKind, Listed, ModuleKind, Opened};
use crate::constraints::Constraints;
use crate::mirror::Core;
use crate::mirror::stored_checksums;
use crate::records::publish::PublishedKind;
use crate::records::releases::{
    Product, ReleaseKey, ReleaseZip, signature_filename, sums_filename,
};
use crate::records::{ArchiveInfo, ArchiveKey, ModuleKey};
use crate::storage::StorageError;
use crate::trust::site::SiteKey;

/// `provender export`
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  provender export ./mirror            # serve ./mirror with any \
static web server (HTTPS), or use it as a filesystem_mirror\n  provender export --bundle \
providers.tar"
)]
pub struct ExportArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Export only these providers, as SOURCE[@CONSTRAINT] (repeatable; default: everything).
    #[arg(long = "provider", value_name = "SOURCE[@CONSTRAINT]")]
    pub providers: Vec<String>,
    /// Bundles only: export only these modules, as SOURCE[@CONSTRAINT] (repeatable; default:
    /// every cached module when no --provider or --cli is given either, else none).
    #[arg(
        long = "module",
        value_name = "SOURCE[@CONSTRAINT]",
        requires = "bundle"
    )]
    pub modules: Vec<String>,
    /// Bundles only: export the cached releases of these CLIs, as terraform|tofu[@CONSTRAINT]
    /// (repeatable; default: every cached release when no --provider or --module is given
    /// either, else none).
    #[arg(long = "cli", value_name = "CLI[@CONSTRAINT]", requires = "bundle")]
    pub clis: Vec<String>,
    /// Bundles only: export these repositories of the git cache, as HOST/PATH (repeatable;
    /// default: every cached repository when no --provider, --module or --cli is given either,
    /// else none).
    #[arg(long = "git", value_name = "HOST/PATH", requires = "bundle", value_parser = crate::address::GitRepo::parse)]
    pub git: Vec<crate::address::GitRepo>,
    /// Export only these platforms (repeatable; default: every cached platform).
    #[arg(long = "platform", short = 'p', value_parser = Platform::parse)]
    pub platforms: Vec<Platform>,
    /// Write one bundle file (tar with a manifest of every hash) instead of a directory.
    #[arg(long, value_name = "FILE", conflicts_with = "dir")]
    pub bundle: Option<PathBuf>,
    /// Sign the bundle's manifest with this site key (default: bundles.signing_key_file; make
    /// one with `provender keygen`).
    #[arg(long, value_name = "KEY_FILE", requires = "bundle")]
    pub signing_key: Option<PathBuf>,
    /// The mirror directory to write (created if needed; existing files are replaced).
    #[arg(value_name = "DIR", required_unless_present = "bundle")]
    pub dir: Option<PathBuf>,
}

/// Why an export, or one archive or package of it, failed.
#[derive(Debug, thiserror::Error)]
enum ExportError {
    /// The store failed on an object: what was being done, and why.
    #[error("{what}: {source}")]
    Store { what: String, source: StorageError },
    #[error("{0} vanished from the cache")]
    Vanished(String),
    /// A local file, or copying into one: where or what, and why.
    #[error("{at}: {source}")]
    Io { at: String, source: std::io::Error },
    #[error("{0}")]
    Damaged(#[from] super::Damaged),
    /// The manifest this export built does not hold together (a bug).
    #[error("{0}")]
    Bundle(#[from] BundleError),
    #[error("{}: not a file name", .0.display())]
    NotAFileName(PathBuf),
    /// A release or git repository could not be read from the cache: which, and why.
    #[error("{what}: {problem}")]
    Release { what: String, problem: String },
}

impl ExportError {
    /// A local I/O failure, named by where or what.
    fn io(at: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> ExportError {
        let at = at.to_string();
        move |source| ExportError::Io { at, source }
    }

    /// A store failure, named by what was being done.
    fn store(what: impl std::fmt::Display) -> impl FnOnce(StorageError) -> ExportError {
        let what = what.to_string();
        move |source| ExportError::Store { what, source }
    }
}

/// One cached archive chosen for export.
struct Chosen {
    key: ArchiveKey,
    info: ArchiveInfo,
}

/// Everything chosen for export, grouped by provider version.
type Selection = BTreeMap<(ProviderAddr, Version), Vec<Chosen>>;

async fn select(
    mirror: &Arc<Core>,
    filters: &[(ProviderAddr, Constraints)],
    platforms: &[Platform],
    failed: &mut Vec<(String, String)>,
) -> Result<Selection, OpsError> {
    let entries = mirror
        .archives()
        .list()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("listing the archive store: {e}")))?;
    let mut out: Selection = BTreeMap::new();
    for entry in entries {
        let key = &entry.key;
        if !filters.is_empty()
            && !filters
                .iter()
                .any(|(a, c)| a == &key.addr && c.selects(&key.version))
        {
            continue;
        }
        if !platforms.is_empty() && !platforms.contains(&key.platform) {
            continue;
        }
        let Some(info) = entry.record else {
            failed.push((
                key.to_string(),
                "cached archive has no readable record (run provender verify)".into(),
            ));
            continue;
        };
        out.entry((key.addr.clone(), key.version.clone()))
            .or_default()
            .push(Chosen {
                key: key.clone(),
                info,
            });
    }
    Ok(out)
}

/// The cached module versions a bundle carries: those matching `filters` (every one without).
async fn select_modules(
    mirror: &Arc<Core>,
    filters: &[(crate::address::ModuleAddr, Constraints)],
    failed: &mut Vec<(String, String)>,
) -> Result<Vec<Listed<ModuleKind>>, OpsError> {
    let listed = mirror
        .modules()
        .list()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("listing the module store: {e}")))?;
    let mut out = Vec::new();
    for m in listed {
        let wanted = filters.is_empty()
            || filters
                .iter()
                .any(|(a, c)| a == &m.key.addr && c.selects(&m.key.version));
        if !wanted {
            continue;
        }
        if m.record.is_none() {
            failed.push((
                m.key.to_string(),
                "cached package has no readable record (run provender verify)".into(),
            ));
            continue;
        }
        out.push(m);
    }
    Ok(out)
}

/// One cached release chosen for a bundle: its zips with their records.
struct ChosenRelease {
    cli: Product,
    version: Version,
    zips: Vec<(ReleaseKey, ReleaseZip)>,
}

/// The cached release zips a bundle carries: those of the CLIs and versions `clis` name (every
/// one when empty) and of `platforms` (every one when empty), grouped by release.
async fn select_releases(
    mirror: &Arc<Core>,
    clis: &[(Product, Constraints)],
    platforms: &[Platform],
    failed: &mut Vec<(String, String)>,
) -> Result<Vec<ChosenRelease>, OpsError> {
    let listed = mirror
        .releases()
        .list()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("listing the release store: {e}")))?;
    let mut out: BTreeMap<(Product, Version), Vec<(ReleaseKey, ReleaseZip)>> = BTreeMap::new();
    for r in listed {
        let key = r.key;
        let wanted = clis.is_empty()
            || clis
                .iter()
                .any(|(p, c)| *p == key.product && c.selects(&key.version));
        if !wanted || (!platforms.is_empty() && !platforms.contains(&key.platform)) {
            continue;
        }
        let Some(record) = r.record else {
            failed.push((
                format!("release zip {key}"),
                "cached zip has no readable record (run provender verify)".into(),
            ));
            continue;
        };
        out.entry((key.product, key.version.clone()))
            .or_default()
            .push((key, record));
    }
    Ok(out
        .into_iter()
        .map(|((cli, version), zips)| ChosenRelease { cli, version, zips })
        .collect())
}

/// Runs `provender export`.
pub async fn run(args: ExportArgs) -> Result<Outcome, OpsError> {
    let settings = super::load_settings(&args.common)?;
    let mut filters = Vec::new();
    for p in &args.providers {
        let w = super::inputs::parse_provider_arg(p, settings.tool)?;
        filters.push((w.addr, w.constraints));
    }
    let key_file = args
        .signing_key
        .clone()
        .or_else(|| settings.bundles.signing_key_file.clone());
    let site_key = match (&args.bundle, &key_file) {
        (Some(_), Some(path)) => {
            let unusable =
                |e: &dyn std::fmt::Display| usage(format!("site key {}: {e}", path.display()));
            let pem = std::fs::read_to_string(path).map_err(|e| unusable(&e))?;
            Some(SiteKey::from_pem(&pem).map_err(|e| unusable(&e))?)
        }
        _ => None,
    };
    let mut module_filters = Vec::new();
    for m in &args.modules {
        let w = super::inputs::parse_module_arg(m, settings.tool)?;
        module_filters.push((w.addr, w.constraints));
    }
    let clis = args
        .clis
        .iter()
        .map(|c| super::parse_cli(c))
        .collect::<Result<Vec<_>, _>>()?;
    let (mirror, _) = super::open_core(settings)?;
    super::load_approvals(&mirror).await?;
    let mut failed = Vec::new();
    // Without any filter, everything the cache holds; with some, what they name.
    let everything =
        filters.is_empty() && module_filters.is_empty() && clis.is_empty() && args.git.is_empty();
    let bundle = args.bundle.is_some();
    let selection = if everything || !filters.is_empty() {
        select(&mirror, &filters, &args.platforms, &mut failed).await?
    } else {
        Selection::new()
    };
    let modules = if bundle && (everything || !module_filters.is_empty()) {
        select_modules(&mirror, &module_filters, &mut failed).await?
    } else {
        Vec::new()
    };
    let releases = if bundle && (everything || !clis.is_empty()) {
        select_releases(&mirror, &clis, &args.platforms, &mut failed).await?
    } else {
        Vec::new()
    };
    let git = crate::mirror::GitMirror::new(mirror.clone());
    let repos: Vec<crate::mirror::CachedRepo> = if bundle && (everything || !args.git.is_empty()) {
        let cached = git.cached();
        for wanted in &args.git {
            if !cached.iter().any(|c| &c.repo == wanted) {
                failed.push((
                    format!("git repository {wanted}"),
                    "not in the git cache".into(),
                ));
            }
        }
        cached
            .into_iter()
            .filter(|c| everything || args.git.contains(&c.repo))
            .collect()
    } else {
        Vec::new()
    };
    // A bundle carries nothing the version policy refuses here.
    let (selection, modules, releases, repos) =
        sift(&mirror, selection, modules, releases, repos).await;
    if selection.is_empty()
        && modules.is_empty()
        && releases.is_empty()
        && repos.is_empty()
        && failed.is_empty()
    {
        return Err(usage(
            "nothing to export: the cache holds no archive matching the filters",
        ));
    }
    let (count, bytes) = selection
        .values()
        .flatten()
        .fold((0, 0), |(n, b), c| (n + 1, b + c.info.size));
    let written = match (&args.bundle, &args.dir) {
        (Some(file), _) => {
            let site_key = site_key.as_ref();
            let chosen = Contents {
                selection: &selection,
                modules: &modules,
                releases: &releases,
                git: (&git, &repos),
            };
            write_bundle(&mirror, chosen, file, bytes, site_key).await
        }
        (None, Some(dir)) => write_dir(&mirror, &selection, dir, bytes, &mut failed).await,
        (None, None) => return Err(usage("give a directory or --bundle FILE")),
    };
    match written {
        Ok(target) => {
            println!(
                "export: {count} archives ({}) of {} provider versions written to {target}",
                human_bytes(bytes),
                selection.len()
            );
            if args.bundle.is_some() {
                match &site_key {
                    Some(key) => println!("signed with site key {}", key.public().id()),
                    None => eprintln!(
                        "warning: the bundle is unsigned (no bundles.signing_key_file or \
                         --signing-key): importers must pass --allow-unverified. Make a site \
                         key with `provender keygen`."
                    ),
                }
            }
            if !modules.is_empty() {
                println!("  and {} module versions:", modules.len());
                for m in &modules {
                    println!("  {}", m.key);
                }
            }
            if !repos.is_empty() {
                println!("  and {} git repositories:", repos.len());
                for r in &repos {
                    println!("  {}", r.repo);
                }
            }
            if !releases.is_empty() {
                println!("  and {} CLI releases:", releases.len());
                for r in &releases {
                    let platforms: Vec<String> =
                        r.zips.iter().map(|(k, _)| k.build_name()).collect();
                    println!("  {} {}: {}", r.cli, r.version, platforms.join(", "));
                }
            }
            for ((addr, version), chosen) in &selection {
                let platforms: Vec<String> =
                    chosen.iter().map(|c| c.key.platform.to_string()).collect();
                println!("  {addr} {version}: {}", platforms.join(", "));
            }
        }
        Err(e) => failed.push(("export".into(), e.to_string())),
    }
    super::print_failures(&failed);
    Ok(Outcome::from_failures(failed.len()))
}

/// What the version policy admits of a selection; each version it refuses is named on stderr
/// with the rule (left out, not a failure).
async fn sift(
    mirror: &Arc<Core>,
    selection: Selection,
    modules: Vec<Listed<ModuleKind>>,
    releases: Vec<ChosenRelease>,
    repos: Vec<crate::mirror::CachedRepo>,
) -> (
    Selection,
    Vec<Listed<ModuleKind>>,
    Vec<ChosenRelease>,
    Vec<crate::mirror::CachedRepo>,
) {
    let refused = |r: crate::error::Result<()>| match r {
        Err(crate::error::Error::NotAdmitted(r)) => {
            eprintln!("left out by the version policy: {r}");
            false
        }
        _ => true,
    };
    let mut kept = Selection::new();
    for ((addr, version), chosen) in selection {
        if refused(mirror.judge_provider(&addr, &version).await) {
            kept.insert((addr, version), chosen);
        }
    }
    let registry = crate::mirror::ModuleRegistry::new(mirror.clone());
    let mut kept_modules = Vec::new();
    for m in modules {
        if refused(registry.judge_module(&m.key.addr, &m.key.version).await) {
            kept_modules.push(m);
        }
    }
    let release_mirror = crate::mirror::ReleaseMirror::new(mirror.clone());
    let mut kept_releases = Vec::new();
    for r in releases {
        if refused(release_mirror.judge(r.cli, &r.version).await) {
            kept_releases.push(r);
        }
    }
    let repos = repos
        .into_iter()
        .filter(|r| {
            refused(mirror.judge_unversioned(crate::policy::Kind::Git, &r.repo.to_string()))
        })
        .collect();
    (kept, kept_modules, kept_releases, repos)
}

/// Opens a chosen archive in the store.
async fn open_chosen(
    mirror: &Arc<Core>,
    key: &ArchiveKey,
) -> Result<Opened<ArchiveKind>, ExportError> {
    mirror
        .archives()
        .open(key)
        .await
        .map_err(ExportError::store(format_args!("opening {key}")))?
        .ok_or_else(|| ExportError::Vanished(key.to_string()))
}

/// Copies one archive out of the store into `out`, checking its SHA-256 on the way.
async fn copy_archive(
    mirror: &Arc<Core>,
    key: &ArchiveKey,
    info: &ArchiveInfo,
    out: &mut (impl tokio::io::AsyncWrite + Unpin),
) -> Result<(), ExportError> {
    let stored = open_chosen(mirror, key).await?;
    let mut hashing = crate::hash::Hashing::new(stored.into_reader());
    tokio::io::copy(&mut hashing, out)
        .await
        .map_err(ExportError::io(format_args!("copying {key}")))?;
    Ok(super::check_recorded_sha256(key, &hashing.finish(), info)?)
}

async fn write_dir(
    mirror: &Arc<Core>,
    selection: &Selection,
    root: &Path,
    bytes: u64,
    failed: &mut Vec<(String, String)>,
) -> Result<String, ExportError> {
    std::fs::create_dir_all(root).map_err(ExportError::io(root.display()))?;
    let bar = progress(bytes, "exporting", true);
    let mut exported: BTreeMap<ProviderAddr, Vec<Version>> = BTreeMap::new();
    for ((addr, version), chosen) in selection {
        let mut entries = Vec::new();
        for c in chosen {
            bar.set_message(c.key.to_string());
            let target = root.join(addr.archive_path(version, &c.key.platform));
            match export_archive(mirror, &c.key, &c.info, &target).await {
                Ok(()) => entries.push(c),
                Err(e) => failed.push((c.key.to_string(), e.to_string())),
            }
            bar.inc(c.info.size);
        }
        if entries.is_empty() {
            continue;
        }
        let doc = bundle::version_json(entries.iter().map(|c| MirrorEntry {
            platform: &c.key.platform,
            filename: c.key.filename(),
            h1: &c.info.h1,
            sha256: &c.info.sha256,
        }));
        let path = root.join(bundle::version_path(addr, version));
        write_small(&path, doc).await?;
        exported
            .entry(addr.clone())
            .or_default()
            .push(version.clone());
    }
    bar.finish_and_clear();
    for (addr, mut versions) in exported {
        // Keep versions an earlier export left in the same directory.
        let index = root.join(bundle::index_path(&addr));
        if let Ok(old) = std::fs::read(&index) {
            if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&old) {
                for v in doc["versions"]
                    .as_object()
                    .into_iter()
                    .flat_map(|m| m.keys())
                {
                    if let Ok(v) = Version::parse(v) {
                        if !versions.contains(&v)
                            && root.join(bundle::version_path(&addr, &v)).exists()
                        {
                            versions.push(v);
                        }
                    }
                }
            }
        }
        versions.sort();
        write_small(&index, bundle::index_json(&versions)).await?;
    }
    Ok(root.display().to_string())
}

/// What a bundle carries.
struct Contents<'a> {
    selection: &'a Selection,
    modules: &'a [Listed<ModuleKind>],
    releases: &'a [ChosenRelease],
    /// The git cache, and the repositories of it to carry.
    git: (
        &'a crate::mirror::GitMirror,
        &'a [crate::mirror::CachedRepo],
    ),
}

async fn write_bundle(
    mirror: &Arc<Core>,
    chosen: Contents<'_>,
    file: &Path,
    bytes: u64,
    site_key: Option<&SiteKey>,
) -> Result<String, ExportError> {
    let Contents {
        selection,
        modules,
        releases,
        git: (git, repos),
    } = chosen;
    // The manifest comes first, so gather everything it says before writing any archive.
    let mut manifest = Manifest {
        format: bundle::FORMAT.into(),
        format_version: bundle::FORMAT_VERSION,
        created_at: crate::clock::now_secs(),
        versions: Vec::new(),
        publications: Vec::new(),
        modules: modules
            .iter()
            .filter_map(|m| {
                let record = m.record.clone()?;
                Some(bundle::BundleModule {
                    source: m.key.addr.to_string(),
                    version: m.key.version.clone(),
                    path: bundle::module_path(&m.key.addr, &m.key.version),
                    size: record.size,
                    sha256: record.sha256.clone(),
                    record,
                })
            })
            .collect(),
        releases: Vec::new(),
        git: Vec::new(),
        contents: None,
    };
    // Each git repository as one `git bundle`, made first: the manifest pins its bytes.
    let scratch = mirror
        .scratch_dir()
        .map_err(ExportError::io("a scratch directory"))?;
    let mut git_files = Vec::new();
    for (n, cached) in repos.iter().enumerate() {
        let file = scratch.path().join(format!("{n}.bundle"));
        let bundled = git
            .bundle_to(cached, &file)
            .await
            .map_err(|e| ExportError::Release {
                what: format!("git repository {}", cached.repo),
                problem: e.to_string(),
            })?;
        let Some(bundled) = bundled else { continue };
        let entry = bundle::BundleGit {
            repo: cached.repo.to_string(),
            path: bundle::git_path(&cached.repo),
            size: bundled.size,
            sha256: bundled.sha256,
            head: bundled.head,
            refs: bundled.refs,
        };
        git_files.push((entry.clone(), file));
        manifest.git.push(entry);
    }
    let mut sums_files: Vec<(String, Vec<u8>)> = Vec::new();
    for ((addr, version), chosen) in selection {
        let record = mirror.meta().read_version(addr, version).await;
        let protocols = match mirror.provider_lists().stored(addr).await {
            Some(index) => index
                .versions
                .iter()
                .find(|v| &v.version == version)
                .map(|v| v.protocols.clone())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let mut archives = Vec::new();
        for c in chosen {
            let origin = record
                .as_ref()
                .and_then(|r| r.packages.get(&c.key.platform))
                .filter(|p| p.shasum == c.info.sha256)
                .map(|p| {
                    let mut p = p.clone();
                    p.h1 = Some(c.info.h1.clone());
                    p
                });
            archives.push(BundleArchive {
                platform: c.key.platform.clone(),
                path: addr.archive_path(version, &c.key.platform),
                size: c.info.size,
                sha256: c.info.sha256.clone(),
                h1: c.info.h1.clone(),
                origin,
            });
        }
        let mut sums = Vec::new();
        if let Some(rec) = &record {
            let used: Vec<String> = archives
                .iter()
                .filter_map(|a| a.origin.as_ref()?.shasums_url.clone())
                .collect();
            for (n, r) in rec.sums.iter().enumerate() {
                if !used.contains(&r.url) {
                    continue;
                }
                let read = |sig| mirror.meta().read_sums(addr, version, n, sig);
                let (Ok(Some(doc)), Ok(Some(sig))) = (read(false).await, read(true).await) else {
                    // Without the checksum file the origin metadata cannot be checked on import.
                    for a in archives.iter_mut() {
                        if a.origin
                            .as_ref()
                            .is_some_and(|p| p.shasums_url.as_deref() == Some(r.url.as_str()))
                        {
                            a.origin = None;
                        }
                    }
                    continue;
                };
                let k = sums.len();
                let entry = BundleSums {
                    reference: r.clone(),
                    path: bundle::sums_path(addr, version, k, false),
                    sha256: crate::hash::Sha256::of(&doc),
                    signature_path: bundle::sums_path(addr, version, k, true),
                    signature_sha256: crate::hash::Sha256::of(&sig),
                };
                sums_files.push((entry.path.clone(), doc.to_vec()));
                sums_files.push((entry.signature_path.clone(), sig.to_vec()));
                sums.push(entry);
            }
        }
        manifest.versions.push(BundleVersion {
            source: addr.to_string(),
            version: version.clone(),
            protocols,
            archives,
            sums,
        });
    }
    // Each release with the vendor's signed SHA256SUMS, which is what vouches for its zips.
    let mut release_files: Vec<(String, Bytes)> = Vec::new();
    for r in releases {
        let (cli, version) = (r.cli, &r.version);
        let what = format!("{cli} {version}");
        let storage = mirror.releases().storage().as_ref();
        let (sums, signature) = stored_checksums(storage, cli, version)
            .await
            .map_err(|e| ExportError::Release {
                what: what.clone(),
                problem: e.to_string(),
            })?
            .ok_or_else(|| ExportError::Vanished(format!("the SHA256SUMS of {what}")))?;
        let entry = BundleRelease {
            cli,
            version: version.clone(),
            sums_path: bundle::release_path(cli, version, &sums_filename(cli, version)),
            sums_sha256: crate::hash::Sha256::of(&sums),
            signature_path: bundle::release_path(cli, version, &signature_filename(cli, version)),
            signature_sha256: crate::hash::Sha256::of(&signature),
            builds: r
                .zips
                .iter()
                .map(|(key, zip)| BundleBuild {
                    platform: key.platform.clone(),
                    packing: key.packing,
                    path: bundle::release_path(cli, version, &key.filename()),
                    size: zip.size,
                    sha256: zip.sha256.clone(),
                })
                .collect(),
        };
        release_files.push((entry.sums_path.clone(), sums));
        release_files.push((entry.signature_path.clone(), signature));
        manifest.releases.push(entry);
    }
    // The publication of each published version it carries, so that the importing registry
    // lists and shows it as this one does.
    let carried: Vec<(PublishedKind, String, Version)> = manifest
        .versions
        .iter()
        .map(|v| (PublishedKind::Provider, v.source.clone(), v.version.clone()))
        .chain(
            manifest
                .modules
                .iter()
                .map(|m| (PublishedKind::Module, m.source.clone(), m.version.clone())),
        )
        .collect();
    for (kind, address, version) in carried {
        let found = mirror
            .publications()
            .get(kind, &address, &version)
            .await
            .map_err(ExportError::store(format_args!(
                "reading the publication of {address} {version}"
            )))?;
        if let Some(p) = found.filter(|p| p.state == crate::records::publish::State::Published) {
            manifest.publications.push(p);
        }
    }
    // What it carries, in brief: the importing site's configuration is read off it.
    manifest.contents = Some(bundle::Contents::of(&manifest));
    let documents = manifest.mirror_documents()?;
    let manifest_bytes = serde_json::to_vec_pretty(&manifest).expect("manifest serialises");

    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = file
        .file_name()
        .ok_or_else(|| ExportError::NotAFileName(file.to_path_buf()))?
        .to_string_lossy()
        .to_string();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = async {
        let out = tokio::fs::File::create(&tmp)
            .await
            .map_err(ExportError::io(tmp.display()))?;
        let mut tar = bundle::TarWriter::new(tokio::io::BufWriter::with_capacity(256 * 1024, out));
        let io = |e| ExportError::io(file.display())(e);
        tar.append_bytes(bundle::MANIFEST_NAME, &manifest_bytes)
            .await
            .map_err(io)?;
        if let Some(key) = site_key {
            let signature = serde_json::to_vec_pretty(&key.sign(&manifest_bytes))
                .expect("signature serialises");
            tar.append_bytes(bundle::SIGNATURE_NAME, &signature)
                .await
                .map_err(io)?;
        }
        for (path, doc) in &documents {
            tar.append_bytes(path, doc).await.map_err(io)?;
        }
        let bar = progress(bytes, "bundling", true);
        for ((addr, version), chosen) in selection {
            for c in chosen {
                let key = &c.key;
                bar.set_message(key.to_string());
                let stored = open_chosen(mirror, key).await?;
                let path = addr.archive_path(version, &key.platform);
                let sha = tar
                    .append(&path, c.info.size, &mut stored.into_reader())
                    .await
                    .map_err(ExportError::io(key))?;
                super::check_recorded_sha256(key, &sha, &c.info)?;
                bar.inc(c.info.size);
            }
        }
        bar.finish_and_clear();
        for m in &manifest.modules {
            let addr = bundle::parse_module_source(&m.source)?;
            let what = format!("module {} {}", m.source, m.version);
            let object = mirror
                .modules()
                .open(&ModuleKey::new(&addr, &m.version))
                .await;
            let entry = Entry {
                path: &m.path,
                size: m.size,
                sha256: &m.sha256,
                kind: "package",
            };
            append_checked(&mut tar, entry, object, what).await?;
        }
        for (entry, file) in &git_files {
            let mut reader = tokio::fs::File::open(file)
                .await
                .map_err(ExportError::io(file.display()))?;
            let sha = tar
                .append(&entry.path, entry.size, &mut reader)
                .await
                .map_err(ExportError::io(&entry.repo))?;
            if sha != entry.sha256 {
                return Err(ExportError::Vanished(format!(
                    "the git bundle of {} changed while it was written",
                    entry.repo
                )));
            }
        }
        for (path, doc) in &sums_files {
            tar.append_bytes(path, doc).await.map_err(io)?;
        }
        for (path, doc) in &release_files {
            tar.append_bytes(path, doc).await.map_err(io)?;
        }
        for r in releases {
            for (key, build) in &r.zips {
                let object = mirror.releases().open(key).await;
                let entry = Entry {
                    path: &bundle::release_path(r.cli, &r.version, &key.filename()),
                    size: build.size,
                    sha256: &build.sha256,
                    kind: "release build",
                };
                append_checked(&mut tar, entry, object, format!("release {key}")).await?;
            }
        }
        let out = tar.finish().await.map_err(io)?.into_inner();
        out.sync_all().await.map_err(io)?;
        drop(out);
        tokio::fs::rename(&tmp, file).await.map_err(io)?;
        crate::fsio::sync_dir(&dir);
        Ok(file.display().to_string())
    }
    .await;
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A stored object as a bundle entry: where it goes, and what its record says.
struct Entry<'a> {
    path: &'a str,
    size: u64,
    sha256: &'a crate::hash::Sha256,
    /// What it is, for a damage report ("package", "release build").
    kind: &'static str,
}

/// Appends a stored object (`opened`, called `what`) to a bundle, checking on the way that it
/// still has the SHA-256 its record says.
async fn append_checked<W, K>(
    tar: &mut bundle::TarWriter<W>,
    entry: Entry<'_>,
    opened: Result<Option<Opened<K>>, StorageError>,
    what: String,
) -> Result<(), ExportError>
where
    W: tokio::io::AsyncWrite + Unpin,
    K: crate::cache::Kind,
{
    let object = opened
        .map_err(ExportError::store(&what))?
        .ok_or_else(|| ExportError::Vanished(what.clone()))?;
    let sha256 = tar
        .append(entry.path, entry.size, &mut object.into_reader())
        .await
        .map_err(ExportError::io(&what))?;
    if &sha256 != entry.sha256 {
        return Err(super::Damaged {
            what,
            kind: entry.kind,
            sha256,
            recorded: entry.sha256.clone(),
        }
        .into());
    }
    Ok(())
}

/// Copies an archive to `target` through a temporary file in the same directory, renamed into
/// place once complete and synced.
async fn export_archive(
    mirror: &Arc<Core>,
    key: &ArchiveKey,
    info: &ArchiveInfo,
    target: &Path,
) -> Result<(), ExportError> {
    let dir = target.parent().expect("mirror paths have a parent");
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(ExportError::io(dir.display()))?;
    let name = target
        .file_name()
        .expect("mirror paths have a file name")
        .to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = async {
        let mut file = tokio::fs::File::create(&tmp)
            .await
            .map_err(ExportError::io(tmp.display()))?;
        copy_archive(mirror, key, info, &mut file).await?;
        file.sync_all()
            .await
            .map_err(ExportError::io(tmp.display()))?;
        drop(file);
        tokio::fs::rename(&tmp, target)
            .await
            .map_err(ExportError::io(target.display()))
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}

async fn write_small(path: &Path, bytes: Vec<u8>) -> Result<(), ExportError> {
    let path_owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || crate::fsio::write_atomic(&path_owned, &bytes))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
        .map_err(ExportError::io(path.display()))
}
