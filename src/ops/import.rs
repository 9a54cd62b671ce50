//! `provender import`: admit a bundle, an exported directory, or any `terraform providers
//! mirror` directory into the cache.
//!
//! Two phases, so that a failure leaves the cache exactly as it was:
//!
//! 1. **Verify everything.** A bundle must be signed by a site in `bundles.trusted_keys` (its
//!    manifest's signature; see [`crate::trust::site`]); a directory carries no signature at
//!    all. Either is refused unless the operator passes `--allow-unverified`. Then each archive
//!    is copied into the cache's staging area while its SHA-256 is computed, then its `h1:` is
//!    computed, and both are compared with what the source promises: the bundle manifest's
//!    hashes, or a mirror directory's `<version>.json` hashes (every `h1:` and `zh:` listed must
//!    match, and at least one must be listed). The origin's SHA256SUMS in a bundle go through
//!    the same [`TrustPolicy::verify_sums`] as when `serve` fetches them (signature, the
//!    `require_signature` rule, the HashiCorp pin, every `shasum` listed), and every archive
//!    through [`TrustPolicy::admit`] (the HashiCorp pin, `upstream.min_trust`). An archive with no
//!    origin signature is recorded as `unverified`, as is an unsigned origin's archive in a bundle
//!    no trusted site vouches for. A bundle entry the manifest does not name, or a named entry
//!    that is missing, is an error. An archive the cache already holds with different bytes is
//!    an error too.
//! 2. **Admit.** Only when nothing failed: archives are committed (each atomically), then the
//!    origin's checksum files, then version records, then version lists, so metadata never
//!    describes an archive that is not there. Archives already present are left alone, so
//!    importing the same source twice changes nothing.
//!
//! Records made from a mirror directory have no origin behind them: their download, SHA256SUMS
//! and signature URLs are empty strings. A server with `[upstream] offline = true` serves them
//! through the mirror protocol; the registry facade has no origin signature to offer for them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::bundle::{self, Head, SumsFiles};
use super::{CommonArgs, OpsError, Outcome, human_bytes, progress, usage};
use crate::address::{Platform, ProviderAddr, Version};
use crate::cache::{StagedFile, Staging};
use crate::hash::{H1, HashError, HashLimits, Hashing, Sha256};
use crate::mirror::admission::{self, AdmitError, Expected, Staged, VerifiedArchive};
use crate::mirror::{Core, ReleaseMirror, store_release, stored_record, verify_release_sums};
use crate::records::publish::{Publication, PublishedKind};
use crate::records::releases::{ReleaseKey, ReleaseRecord, ReleaseZip, sums_filename};
use crate::records::{
    ArchiveInfo, ArchiveKey, IndexVersion, ModuleKey, ModuleTrust, Package, SumsRef, docs,
};
use crate::trust::site::{Custody, CustodyError, SitePublicKey};
use crate::trust::{Refusal, SignatureKind, Trust, TrustPolicy, Verifier};

/// `provender import`
#[derive(clap::Args, Debug)]
#[command(
    after_help = "SOURCE is a bundle made by `provender export --bundle`, a directory made \
by `provender export`, or a directory made by `terraform providers mirror`.\nNothing is admitted \
unless every archive checks out; importing the same source again changes nothing.\nA bundle must \
be signed by a site in bundles.trusted_keys; anything else needs --allow-unverified.\nWhat this \
site has no configuration to serve (published versions without their [publishing] namespace, \
git repositories of hosts outside git.allowed_hosts, CLI releases without releases.enabled) is \
left out and named with the settings that would admit it; the rest is admitted.\n`--check` \
verifies the same and admits nothing, and prints the configuration that admits all of it.\n\
Exit status: 0 all admitted (with --check: would be), 1 nothing admitted (a check failed), 3 \
admitted in part (some parts left out, named), 78 a bad configuration or argument."
)]
pub struct ImportArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Admit a source no trusted site vouches for (an unsigned bundle, a mirror directory);
    /// what no origin signature covers is recorded as `unverified`. HashiCorp's providers are
    /// never admitted without HashiCorp's signature.
    #[arg(long)]
    pub allow_unverified: bool,
    /// Verify everything and report what would be admitted, what would be left out and why,
    /// and the configuration this site needs to admit all of it; admit nothing.
    #[arg(long)]
    pub check: bool,
    /// The bundle file or mirror directory to import.
    #[arg(value_name = "SOURCE")]
    pub source: PathBuf,
}

/// A part of a source this site has no configuration to serve: left out (the rest is
/// admitted), and named with the settings that would admit it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LeftOut {
    /// What it is: `published provider <address> <version>`, `git repository <repo>`, ...
    what: String,
    /// Why this site cannot serve it.
    why: String,
    /// The configuration (TOML) that would admit it.
    settings: String,
}

/// One archive that passed every check, waiting in the staging area.
struct Verified {
    key: ArchiveKey,
    archive: VerifiedArchive,
    origin: Option<Package>,
}

/// Everything verified for one provider version.
struct VersionImport {
    addr: ProviderAddr,
    version: Version,
    protocols: Vec<String>,
    archives: Vec<Verified>,
    /// The origin's checksum files: reference, document, signature.
    sums: Vec<(SumsRef, Vec<u8>, Vec<u8>)>,
}

type Failures = Vec<(String, String)>;

/// Why a source, or an archive or module package in it, is not admitted; or, once everything
/// was verified, why admitting stopped.
#[derive(Debug, thiserror::Error)]
enum ImportError {
    /// A local file operation: what it was for, and why it failed.
    #[error("{doing}: {source}")]
    Local {
        doing: String,
        source: std::io::Error,
    },
    /// What the source holds is not what its manifest promises: what, as found, as promised.
    #[error("{what} is {found}, the manifest says {promised}")]
    Mismatch {
        what: &'static str,
        found: String,
        promised: String,
    },
    #[error("unusable zip: {0}")]
    UnusableZip(#[from] HashError),
    /// A git repository's bundle that git would not admit as the manifest describes it.
    #[error("{0}")]
    Git(String),
    /// What is already in the cache says otherwise (a version published with other files).
    #[error("{0}")]
    Conflict(String),
    #[error("the package {0}")]
    Package(#[from] crate::package::PackError),
    #[error("the package is not in the canonical form (packed again it is {repacked})")]
    NotCanonical { repacked: Sha256 },
    /// A mirror directory's `<version>.json` lists no hash for an archive.
    #[error("no hashes are listed for it, so it cannot be checked")]
    NothingListed,
    #[error("listed hash {0:?} is of an unknown kind")]
    UnknownHashKind(String),
    #[error("listed hash {listed} does not match (the archive's are {h1} and zh:{sha256})")]
    ListedMismatch {
        listed: String,
        h1: H1,
        sha256: Sha256,
    },
    /// The trust policy refuses it, as `serve` would.
    #[error("{0}")]
    Policy(#[from] Refusal),
    #[error(
        "no origin signature covers it and no trusted site vouches for it; pass \
         --allow-unverified to admit it as unverified"
    )]
    Unvouched,
    /// The bundle's signature by a trusted site does not verify: refused even with
    /// `--allow-unverified`.
    #[error("{0}")]
    Custody(#[from] CustodyError),
    /// No trusted site signed the bundle (why), and `--allow-unverified` was not given.
    #[error(
        "{0}: only bundles signed by a site in bundles.trusted_keys are imported (pass \
         --allow-unverified to import it anyway)"
    )]
    UntrustedBundle(String),
    /// A release could not be stored or listed while admitting: which, and why.
    #[error("{what}: {problem}")]
    Release { what: String, problem: String },
    /// The store failed while admitting: on what, and why.
    #[error("{what}: {source}")]
    Store {
        what: String,
        source: crate::storage::StorageError,
    },
}

impl ImportError {
    /// A local file operation's failure, named by what it was for.
    fn local(doing: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> ImportError {
        let doing = doing.to_string();
        move |source| ImportError::Local { doing, source }
    }

    /// A store failure while admitting, named by what was being done.
    fn store(
        what: impl std::fmt::Display,
    ) -> impl FnOnce(crate::storage::StorageError) -> ImportError {
        let what = what.to_string();
        move |source| ImportError::Store { what, source }
    }
}

/// What the source holds, measured while it was staged and checked, against what it promises.
impl From<AdmitError> for ImportError {
    fn from(e: AdmitError) -> ImportError {
        match e {
            AdmitError::Local { doing, source } => ImportError::Local {
                doing: doing.to_string(),
                source,
            },
            AdmitError::Source(source) => ImportError::Local {
                doing: "reading".into(),
                source,
            },
            AdmitError::TooLarge(t) => ImportError::Mismatch {
                what: "size",
                found: format!("more than {} bytes", t.limit),
                promised: format!("{} bytes", t.limit),
            },
            AdmitError::Size { found, expected } => ImportError::Mismatch {
                what: "size",
                found: format!("{found} bytes"),
                promised: format!("{expected} bytes"),
            },
            AdmitError::Checksum { found, expected } => ImportError::Mismatch {
                what: "SHA-256",
                found: found.to_string(),
                promised: expected.to_string(),
            },
            AdmitError::UnusableZip(e) => ImportError::UnusableZip(e),
        }
    }
}

/// Runs `provender import`.
pub async fn run(args: ImportArgs) -> Result<Outcome, OpsError> {
    let settings = super::load_settings(&args.common)?;
    let meta = std::fs::metadata(&args.source)
        .map_err(|e| usage(format!("{}: {e}", args.source.display())))?;
    let limits = settings.upstream.hash_limits();
    let module_limits = settings.modules.limits;
    let rules = Rules {
        trust: settings.trust.clone(),
        trusted_sites: settings.bundles.trusted_site_keys.clone(),
        allow_unverified: args.allow_unverified,
        releases: settings.releases.verifier(),
    };
    let (mirror, staging) = super::open_core(settings)?;
    super::load_approvals(&mirror).await?;
    let source = args.source.clone();
    let total = if meta.is_dir() {
        zip_bytes(&args.source)
    } else {
        meta.len()
    };
    let bar = progress(total, "verifying", true);
    let bar2 = bar.clone();
    let handle = tokio::runtime::Handle::current();
    let (found, custody, mut failed) = tokio::task::spawn_blocking(move || {
        let checker = Checker {
            handle: &handle,
            staging: &staging,
            bar: &bar2,
            limits,
            module_limits,
            rules: &rules,
        };
        let mut failed = Failures::new();
        let (found, custody) = if meta.is_dir() {
            let versions = from_dir(&checker, &source, &mut failed);
            (
                Found {
                    versions,
                    ..Found::default()
                },
                None,
            )
        } else {
            from_bundle(&checker, &source, &mut failed)
        };
        (found, custody, failed)
    })
    .await
    .map_err(|e| OpsError::Failed(anyhow::anyhow!("verification task failed: {e}")))?;
    bar.finish_and_clear();
    let Found {
        versions: imports,
        modules,
        releases,
        git,
        publications,
        mut left_out,
        contents,
        signer,
    } = found;
    let shown = args.source.display();
    if failed.is_empty()
        && imports.is_empty()
        && modules.is_empty()
        && releases.is_empty()
        && git.is_empty()
        && left_out.is_empty()
    {
        failed.push((shown.to_string(), "holds no provider archive".into()));
    }
    // What this site has no configuration to serve is left out, named; the rest goes on.
    let (releases, git) = unserved_kinds(mirror.settings(), releases, git, &mut left_out);
    if failed.is_empty() {
        failed.extend(conflicts(&mirror, &imports).await);
        failed.extend(module_conflicts(&mirror, &modules).await);
        failed.extend(release_conflicts(&mirror, &releases).await);
        failed.extend(publication_conflicts(&mirror, &publications).await);
    }
    if !failed.is_empty() {
        println!("import: nothing imported from {shown}; the cache is unchanged");
        super::print_failures(&failed);
        return Ok(Outcome::Failed);
    }
    let partly = if left_out.is_empty() {
        Outcome::Success
    } else {
        Outcome::Partial
    };
    // This site's own version policy: what it refuses is left out (named, not a failure). An
    // imported version's age is the exporting site's business: its cooldown is not applied
    // again here (a bundle carries nothing that site's policy refused).
    let (imports, modules, releases, git) = sift(&mirror, imports, modules, releases, git);
    let warnings = unserved(mirror.settings(), &imports, &modules);
    if args.check {
        let would = Would {
            archives: imports.iter().map(|v| v.archives.len()).sum(),
            versions: imports.len(),
            modules: modules.len(),
            release_builds: releases.iter().map(|r| r.zips.len()).sum(),
            git: git.len(),
            publications: publications.len(),
        };
        report_check(
            &shown.to_string(),
            custody.as_ref(),
            &would,
            &left_out,
            &warnings,
        );
        if let Some(contents) = &contents {
            println!(
                "\nThe configuration a sealed site needs to admit and serve all of it (merge into \
                 its configuration file):\n"
            );
            print!("{}", sealed_settings(contents, signer.as_deref()));
        }
        return Ok(partly);
    }
    let mut levels: BTreeMap<SignatureKind, usize> = BTreeMap::new();
    for a in imports.iter().flat_map(|v| &v.archives) {
        *levels
            .entry(a.archive.info.trust.unwrap_or(SignatureKind::Unverified))
            .or_default() += 1;
    }
    // The published versions are claimed before any record is written, as publishing
    // claims them: a publisher of one of them meanwhile either finds the claim (409) or
    // made its own first, and then this import writes nothing.
    let claimed = match claim_publications(&mirror, &publications).await {
        Ok(claimed) => claimed,
        Err(e) => {
            println!("import: nothing imported from {shown}; the cache is unchanged");
            super::print_failures(&[(shown.to_string(), e.to_string())]);
            return Ok(Outcome::Failed);
        }
    };
    let admitted = async {
        let archives = admit(&mirror, imports).await?;
        let modules = admit_modules(&mirror, modules).await?;
        let releases = admit_releases(&mirror, releases).await?;
        let repos = admit_git(&mirror, git).await?;
        let published = finish_publications(&mirror, claimed).await?;
        if published > 0 {
            println!("publications recorded: {published}");
        }
        Ok::<_, ImportError>((archives, modules, releases, repos))
    }
    .await;
    let (
        (added, present),
        (modules_added, modules_present),
        (releases_added, releases_present),
        repos,
    ) = match admitted {
        Ok(r) => r,
        Err(e) => {
            println!("import from {shown} stopped: {e}");
            println!(
                "archives admitted before the failure are complete; run the import again to finish"
            );
            return Ok(Outcome::Failed);
        }
    };
    let bytes: u64 = added.iter().map(|(_, s)| s).sum();
    println!(
        "import: {} added ({}), {} already present, from {shown}",
        added.len(),
        human_bytes(bytes),
        present.len()
    );
    match custody {
        Some(Custody::Trusted(id)) => println!("signed by trusted site key {id}"),
        Some(Custody::Untrusted(why)) => {
            println!("not vouched for by a trusted site ({why}); admitted with --allow-unverified")
        }
        None => {
            println!("a mirror directory carries no signature; admitted with --allow-unverified")
        }
    }
    let levels: Vec<String> = levels.iter().map(|(k, n)| format!("{n} {k}")).collect();
    println!("trust levels: {}", levels.join(", "));
    for (title, list) in [("added", &added), ("already present", &present)] {
        if !list.is_empty() {
            println!("{title} ({}):", list.len());
            for (key, size) in list.iter() {
                println!("  {key} ({})", human_bytes(*size));
            }
        }
    }
    if !modules_added.is_empty() || !modules_present.is_empty() {
        println!(
            "modules: {} added, {} already present",
            modules_added.len(),
            modules_present.len()
        );
        for m in &modules_added {
            println!("  module {m}");
        }
    }
    if !releases_added.is_empty() || !releases_present.is_empty() {
        println!(
            "CLI release zips: {} added, {} already present",
            releases_added.len(),
            releases_present.len()
        );
        for r in &releases_added {
            println!("  {r}");
        }
    }
    if !repos.is_empty() {
        println!("git repositories: {}", repos.len());
        for r in &repos {
            println!("  {r}");
        }
    }
    print_left_out(&left_out);
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
    Ok(partly)
}

/// What `--check` found would be admitted.
struct Would {
    archives: usize,
    versions: usize,
    modules: usize,
    release_builds: usize,
    git: usize,
    publications: usize,
}

/// `import --check`'s report: who vouches for the source, what would be admitted, and what
/// would be left out and why.
fn report_check(
    shown: &str,
    custody: Option<&Custody>,
    would: &Would,
    left_out: &[LeftOut],
    warnings: &[String],
) {
    println!("import --check: {shown} verified; nothing was admitted");
    match custody {
        Some(Custody::Trusted(id)) => println!("signed by trusted site key {id}"),
        Some(Custody::Untrusted(why)) => {
            println!(
                "not vouched for by a trusted site ({why}); would be admitted with --allow-unverified"
            )
        }
        None => println!(
            "a mirror directory carries no signature; would be admitted with --allow-unverified"
        ),
    }
    println!(
        "would admit: provider archives {} (of {} versions), module versions {}, CLI release \
         builds {}, git repositories {}, publications {}",
        would.archives,
        would.versions,
        would.modules,
        would.release_builds,
        would.git,
        would.publications
    );
    if left_out.is_empty() {
        println!("would leave out: nothing");
    } else {
        println!("would leave out ({}):", left_out.len());
        print_parts(left_out);
    }
    for warning in warnings {
        println!("warning: {warning}");
    }
}

/// Names each part left out, why, and the settings that would admit it.
fn print_left_out(left_out: &[LeftOut]) {
    if left_out.is_empty() {
        return;
    }
    println!(
        "left out ({}): this site has no configuration to serve them; the rest is admitted",
        left_out.len()
    );
    print_parts(left_out);
    println!(
        "add those settings and import the same bundle again to admit them (`provender import \
         --check` prints the whole configuration it needs)"
    );
}

fn print_parts(left_out: &[LeftOut]) {
    for part in left_out {
        println!("  {}: {}; to admit it:", part.what, part.why);
        for line in part.settings.lines() {
            if line.is_empty() {
                println!();
            } else {
                println!("      {line}");
            }
        }
    }
}

/// The CLI releases and git repositories this site has no configuration to serve: left out
/// (added to `left_out`, each with the settings that would admit it). Returns the rest.
fn unserved_kinds(
    settings: &crate::config::Settings,
    releases: Vec<VerifiedRelease>,
    git: Vec<StagedGit>,
    left_out: &mut Vec<LeftOut>,
) -> (Vec<VerifiedRelease>, Vec<StagedGit>) {
    let releases = if settings.releases.enabled {
        releases
    } else {
        for r in &releases {
            left_out.push(LeftOut {
                what: format!("CLI release {} {}", r.record.product, r.record.version),
                why: "releases.enabled is off here".into(),
                settings: "[releases]\nenabled = true".into(),
            });
        }
        Vec::new()
    };
    let (served, unserved): (Vec<StagedGit>, Vec<StagedGit>) = git.into_iter().partition(|r| {
        bundle::parse_git_repo(&r.entry.repo)
            .is_ok_and(|repo| settings.git.host_allowed(&repo.host))
    });
    for r in &unserved {
        let host = bundle::parse_git_repo(&r.entry.repo)
            .map(|repo| repo.host.to_string())
            .unwrap_or_default();
        let why = if settings.git.allowed_hosts.is_empty() {
            "the git door is closed here (git.allowed_hosts is empty)".to_string()
        } else {
            format!("{host} is not in git.allowed_hosts here")
        };
        let mut hosts: Vec<String> = settings
            .git
            .allowed_hosts
            .iter()
            .map(ToString::to_string)
            .collect();
        hosts.push(host);
        left_out.push(LeftOut {
            what: format!("git repository {}", r.entry.repo),
            why,
            settings: format!("[git]\nallowed_hosts = {}", toml_strings(&hosts)),
        });
    }
    (releases, served)
}

/// A TOML array of strings.
fn toml_strings<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let quoted: Vec<String> = items
        .into_iter()
        .map(|s| format!("{:?}", s.as_ref()))
        .collect();
    format!("[{}]", quoted.join(", "))
}

/// The configuration a sealed site needs to admit and serve everything a bundle carries, from
/// its manifest's contents: a TOML fragment to merge into that site's configuration file.
fn sealed_settings(contents: &bundle::Contents, signer: Option<&str>) -> String {
    let mut out = String::from("[upstream]\noffline = true\n");
    if !contents.registry_hosts.is_empty() {
        out.push_str(&format!(
            "allowed_hosts = {}\n",
            toml_strings(&contents.registry_hosts)
        ));
    }
    out.push_str("\n[bundles]\n");
    match signer {
        Some(key) => out.push_str(&format!(
            "trusted_keys = [{key:?}]   # the key that signed it: check it with the exporting site\n"
        )),
        None => out.push_str("# the bundle is not signed: trusted_keys cannot admit it\n"),
    }
    if !contents.git_hosts.is_empty() {
        out.push_str(&format!(
            "\n[git]\nallowed_hosts = {}\n",
            toml_strings(&contents.git_hosts)
        ));
    }
    if contents.release_versions > 0 {
        out.push_str("\n[releases]\nenabled = true\n");
    }
    let mut published = contents.published.iter();
    if let Some((host, namespaces)) = published.next() {
        out.push_str(&format!(
            "\n[publishing]\nhostname = {host:?}\nsigning_key = \"...\"   # this site's own key: \
             provender keygen --provider-signing\n"
        ));
        for ns in namespaces {
            out.push_str(&format!("\n[publishing.namespaces.{ns}]\n"));
        }
    }
    for (host, namespaces) in published {
        let namespaces: Vec<&str> = namespaces.iter().map(String::as_str).collect();
        out.push_str(&format!(
            "# also published under {host} ({}): a site publishes under one hostname, so those \
             cannot be admitted here too\n",
            namespaces.join(", ")
        ));
    }
    out
}

/// What this site's version policy admits of what a bundle carries; each version it refuses
/// is named on stderr with the rule.
fn sift(
    mirror: &Arc<Core>,
    imports: Vec<VersionImport>,
    modules: Vec<VerifiedModule>,
    releases: Vec<VerifiedRelease>,
    git: Vec<StagedGit>,
) -> (
    Vec<VersionImport>,
    Vec<VerifiedModule>,
    Vec<VerifiedRelease>,
    Vec<StagedGit>,
) {
    use crate::policy::Kind;
    let admitted = |r: crate::error::Result<()>| match r {
        Err(crate::error::Error::NotAdmitted(r)) => {
            eprintln!("left out by the version policy: {r}");
            false
        }
        _ => true,
    };
    let imports = imports
        .into_iter()
        .filter(|v| admitted(mirror.judge(Kind::Provider, &v.addr.to_string(), &v.version, None)))
        .collect();
    let modules = modules
        .into_iter()
        .filter(|m| admitted(mirror.judge(Kind::Module, &m.addr.to_string(), &m.version, None)))
        .collect();
    let releases = releases
        .into_iter()
        .filter(|r| {
            admitted(mirror.judge(
                Kind::Release,
                r.record.product.as_str(),
                &r.record.version,
                None,
            ))
        })
        .collect();
    let git = git
        .into_iter()
        .filter(|r| match bundle::parse_git_repo(&r.entry.repo) {
            Ok(repo) => admitted(mirror.judge_unversioned(Kind::Git, &repo.to_string())),
            Err(_) => true,
        })
        .collect();
    (imports, modules, releases, git)
}

/// Admits each git repository from its checked `git bundle` (`GitMirror::admit_bundle`: git
/// verifies the objects, the references must be the manifest's).
async fn admit_git(
    mirror: &Arc<Core>,
    repos: Vec<StagedGit>,
) -> Result<Vec<crate::address::GitRepo>, ImportError> {
    let git = crate::mirror::GitMirror::new(mirror.clone());
    let mut admitted = Vec::new();
    for r in repos {
        let repo = bundle::parse_git_repo(&r.entry.repo).expect("checked by Manifest::parse");
        git.admit_bundle(
            &repo,
            r.staged.path(),
            r.entry.head.as_deref(),
            &r.entry.refs,
        )
        .await
        .map_err(|e| ImportError::Git(format!("git repository {repo}: {e}")))?;
        admitted.push(repo);
    }
    Ok(admitted)
}

/// One module package that passed every check, waiting in the staging area.
struct VerifiedModule {
    addr: crate::address::ModuleAddr,
    version: Version,
    staged: StagedFile,
    record: crate::records::ModuleRecord,
}

/// Stages a module package and checks it: size and SHA-256 against the manifest, then unpacked
/// and packed again under the same rules as when `serve` fetches a module (hostile entries,
/// links out of the tree, bombs), which must give back the very same bytes.
fn check_module(
    checker: &Checker,
    reader: &mut dyn Read,
    meta: &bundle::BundleModule,
) -> Result<StagedFile, ImportError> {
    let staged = stage(checker, reader, Some(meta.size))?;
    Expected {
        sha256: &meta.sha256,
        size: Some(meta.size),
    }
    .check(&staged.digest)?;
    let scratch = checker
        .staging
        .scratch_dir()
        .map_err(ImportError::local("creating a scratch directory"))?;
    let unpacked = scratch.path().join("unpacked");
    std::fs::create_dir(&unpacked).map_err(ImportError::local("creating a scratch directory"))?;
    let mut hasher = Hashing::new(std::io::sink());
    crate::package::repack(
        staged.file.path(),
        crate::package::Format::TarGz,
        &unpacked,
        false,
        meta.record.subdir.as_deref(),
        checker.module_limits,
        &mut hasher,
    )?;
    let again = hasher.finish();
    if again != staged.digest.sha256 {
        return Err(ImportError::NotCanonical { repacked: again });
    }
    Ok(staged.file)
}

/// Module versions the cache already holds with another package: refused before anything is
/// admitted.
async fn module_conflicts(mirror: &Arc<Core>, modules: &[VerifiedModule]) -> Failures {
    let mut out = Vec::new();
    for m in modules {
        let what = format!("module {} {}", m.addr, m.version);
        match mirror
            .modules()
            .record(&ModuleKey::new(&m.addr, &m.version))
            .await
        {
            Ok(Some(have)) if have.sha256 != m.record.sha256 => out.push((
                what,
                format!(
                    "the cache holds another package (SHA-256 {}) than the import ({})",
                    have.sha256, m.record.sha256
                ),
            )),
            Ok(_) => {}
            Err(e) => out.push((what, format!("reading the cache: {e}"))),
        }
    }
    out
}

/// Commits verified module packages not already cached; returns those added and those present.
async fn admit_modules(
    mirror: &Arc<Core>,
    modules: Vec<VerifiedModule>,
) -> Result<(Vec<String>, Vec<String>), ImportError> {
    let (mut added, mut present) = (Vec::new(), Vec::new());
    for m in modules {
        let what = format!("{} {}", m.addr, m.version);
        let store = mirror.modules();
        if store
            .record(&ModuleKey::new(&m.addr, &m.version))
            .await
            .map_err(ImportError::store(format_args!("module {what}")))?
            .is_some()
        {
            present.push(what);
            continue;
        }
        admission::commit_module(store, &m.addr, &m.version, m.staged, &m.record)
            .await
            .map_err(ImportError::store(format_args!("storing module {what}")))?;
        mirror
            .module_lists()
            .update(&m.addr, |list| list.add_version(&m.version))
            .await
            .map_err(ImportError::store(format_args!(
                "module {what}: writing the version list"
            )))?;
        added.push(what);
    }
    Ok((added, present))
}

/// What this cache takes but its server will not serve: providers and modules of registry
/// hosts outside `upstream.allowed_hosts`, and platforms outside `upstream.platforms`.
fn unserved(
    settings: &crate::config::Settings,
    imports: &[VersionImport],
    modules: &[VerifiedModule],
) -> Vec<String> {
    let providers = imports
        .iter()
        .filter(|v| {
            !settings.upstream.host_allowed(&v.addr.hostname)
                && !settings.trust.private.has_provider(&v.addr)
        })
        .map(|v| v.addr.hostname.to_string());
    let modules = modules
        .iter()
        .filter(|m| {
            !settings.upstream.host_allowed(&m.addr.hostname)
                && !settings.trust.private.has_module(&m.addr)
        })
        .map(|m| m.addr.hostname.to_string());
    let hosts: BTreeSet<String> = providers.chain(modules).collect();
    let platforms: BTreeSet<String> = imports
        .iter()
        .flat_map(|v| &v.archives)
        .filter(|a| !settings.upstream.platform_allowed(&a.key.platform))
        .map(|a| a.key.platform.to_string())
        .collect();
    let hosts = hosts.into_iter().map(|host| {
        format!(
            "{host} is not listed in upstream.allowed_hosts; its providers and modules are in \
             the cache but will not be served until it is ([upstream] allowed_hosts = [..., \
             {host:?}])"
        )
    });
    let platforms = platforms.into_iter().map(|platform| {
        format!(
            "{platform} is not listed in upstream.platforms; its archives are in the cache \
             but will not be served until it is"
        )
    });
    hosts.chain(platforms).collect()
}

/// The rules an import is checked against: the same trust policy as `serve`, the sites whose
/// bundles are trusted, and whether the operator accepts what no one vouches for.
struct Rules {
    trust: TrustPolicy,
    trusted_sites: Vec<SitePublicKey>,
    allow_unverified: bool,
    /// The vendors' keys that CLI releases are checked with, as when the mirror fetches them.
    releases: Result<Arc<Verifier>, String>,
}

impl Rules {
    /// Whether an archive of `addr` at level `kind` may be admitted.
    fn admit(&self, addr: &ProviderAddr, kind: SignatureKind) -> Result<(), ImportError> {
        self.trust.admit(addr, kind)?;
        if kind == SignatureKind::Unverified && !self.allow_unverified {
            return Err(ImportError::Unvouched);
        }
        Ok(())
    }
}

/// What the verifying phase works with, on a blocking thread: the runtime that the staging
/// area's calls are run on, the staging area, the progress bar, the configured bounds on
/// hashing one archive (the same as when `serve` fetches it), and the rules.
struct Checker<'a> {
    handle: &'a tokio::runtime::Handle,
    staging: &'a Staging,
    bar: &'a indicatif::ProgressBar,
    limits: HashLimits,
    module_limits: crate::package::PackLimits,
    rules: &'a Rules,
}

/// Copies `reader` into a new staging file, hashing it, refusing more than `cap` bytes.
fn stage(
    checker: &Checker,
    reader: &mut dyn Read,
    cap: Option<u64>,
) -> Result<Staged, ImportError> {
    Ok(admission::stage_read(
        checker.handle,
        checker.staging,
        reader,
        cap,
    )?)
}

/// Stages a bundle entry whose size and SHA-256 the manifest pins, and checks them.
fn stage_pinned(
    checker: &Checker,
    reader: &mut dyn Read,
    size: u64,
    sha256: &Sha256,
) -> Result<StagedFile, ImportError> {
    let staged = stage(checker, reader, Some(size))?;
    Expected {
        sha256,
        size: Some(size),
    }
    .check(&staged.digest)?;
    Ok(staged.file)
}

/// Who vouches for a bundle, from its head: refused outright when a trusted site's signature
/// does not verify, and when no trusted site signed it unless `--allow-unverified` is given.
fn custody(rules: &Rules, head: &Head) -> Result<Custody, ImportError> {
    let custody = match &head.signature {
        Some(sig) => sig.custody(&head.manifest_bytes, &rules.trusted_sites)?,
        None => Custody::Untrusted("the bundle is not signed".into()),
    };
    match custody {
        Custody::Untrusted(why) if !rules.allow_unverified => {
            Err(ImportError::UntrustedBundle(why))
        }
        custody => Ok(custody),
    }
}

/// Everything a source holds that passed every check, waiting in the staging area.
#[derive(Default)]
struct Found {
    versions: Vec<VersionImport>,
    modules: Vec<VerifiedModule>,
    releases: Vec<VerifiedRelease>,
    git: Vec<StagedGit>,
    /// The publications of the published versions it carries.
    publications: Vec<Publication>,
    /// What it carries that this site cannot serve, left out.
    left_out: Vec<LeftOut>,
    /// A bundle's contents (its manifest's, or derived from its lists for a bundle made before
    /// manifests said), and the public key of the site that signed it.
    contents: Option<bundle::Contents>,
    signer: Option<String>,
}

/// A published version, as `(kind, address, version)`.
type PublishedId = (PublishedKind, String, Version);

/// Who vouches for a bundle, and the published versions in it that are left out here.
struct Vouched<'a> {
    custody: &'a Custody,
    skip: &'a [PublishedId],
}

/// The published versions a bundle carries whose namespace is not private here: each is left
/// out, with its publication and its provider or module version, and named with the
/// `[publishing]` settings that would admit it.
fn unpublished_here(
    private: &crate::trust::PrivateNamespaces,
    listed: &[Publication],
) -> (Vec<PublishedId>, Vec<LeftOut>) {
    let mut skip = Vec::new();
    let mut left_out = Vec::new();
    for p in listed {
        let place = match p.kind {
            PublishedKind::Provider => p.provider().map(|a| (a.hostname, a.namespace)),
            PublishedKind::Module => p.module().map(|a| (a.hostname, a.namespace)),
        };
        // A malformed address is not left out: `check_publications` refuses it.
        let Some((host, namespace)) = place else {
            continue;
        };
        if private.contains(&host, &namespace) {
            continue;
        }
        let namespace = namespace.to_ascii_lowercase();
        let why = match &private.hostname {
            Some(h) if *h == host => {
                format!("namespace {namespace} of {host} is not in publishing.namespaces here")
            }
            Some(h) => format!("this site publishes under {h}, not {host}"),
            None => "this site has no private namespace ([publishing] is not configured)".into(),
        };
        skip.push((p.kind, p.address.clone(), p.version.clone()));
        left_out.push(LeftOut {
            what: format!("published {} {} {}", p.kind.as_str(), p.address, p.version),
            why,
            settings: format!(
                "[publishing]\nhostname = \"{host}\"\nsigning_key = \"...\"   # this site's own key: \
                 provender keygen --provider-signing\n\n[publishing.namespaces.{namespace}]"
            ),
        });
    }
    (skip, left_out)
}

/// One git repository's `git bundle`, checked against the manifest, waiting in the staging
/// area; git checks what is in it when it is admitted.
struct StagedGit {
    entry: bundle::BundleGit,
    staged: StagedFile,
}

fn from_bundle(checker: &Checker, path: &Path, failed: &mut Failures) -> (Found, Option<Custody>) {
    let shown = path.display().to_string();
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            failed.push((format!("{shown}: open"), e.to_string()));
            return (Found::default(), None);
        }
    };
    let reader = BufReader::with_capacity(256 * 1024, checker.bar.wrap_read(file));
    let mut vouched = None;
    let mut described = None;
    let mut staged: HashMap<(usize, usize), VerifiedArchive> = HashMap::new();
    let mut staged_modules: HashMap<usize, StagedFile> = HashMap::new();
    let mut staged_zips: HashMap<(usize, usize), StagedFile> = HashMap::new();
    let mut staged_git: HashMap<usize, StagedFile> = HashMap::new();
    let mut problems = Vec::new();
    let walked = bundle::walk(
        reader,
        &mut problems,
        |head| {
            described = Some((
                head.manifest
                    .contents
                    .clone()
                    .unwrap_or_else(|| bundle::Contents::of(&head.manifest)),
                head.signature.as_ref().map(|s| s.public_key.clone()),
            ));
            vouched = Some(custody(checker.rules, head)?);
            Ok::<(), ImportError>(())
        },
        |payload, body| match payload {
            bundle::Payload::Archive(entry, v, a) => {
                checker.bar.set_message(entry.path.clone());
                let checked = check_archive(checker, body, entry)?;
                staged.insert((v, a), checked);
                Ok(())
            }
            bundle::Payload::Module(entry, m) => {
                checker.bar.set_message(entry.path.clone());
                staged_modules.insert(m, check_module(checker, body, entry)?);
                Ok(())
            }
            bundle::Payload::Git(entry, g) => {
                checker.bar.set_message(entry.path.clone());
                let file = stage_pinned(checker, body, entry.size, &entry.sha256)?;
                staged_git.insert(g, file);
                Ok(())
            }
            bundle::Payload::ReleaseBuild(entry, r, z) => {
                checker.bar.set_message(entry.path.clone());
                let file = stage_pinned(checker, body, entry.size, &entry.sha256)?;
                staged_zips.insert((r, z), file);
                Ok(())
            }
        },
    );
    failed.extend(
        problems
            .into_iter()
            .map(|e| (format!("{shown}: {}", e.entry), e.problem)),
    );
    let (Some(walked), Some(custody)) = (walked, vouched) else {
        return (Found::default(), None);
    };
    if !failed.is_empty() {
        return (Found::default(), Some(custody));
    }
    let head = &walked.head;
    let (skip, left_out) =
        unpublished_here(&checker.rules.trust.private, &head.manifest.publications);
    let vouched = Vouched {
        custody: &custody,
        skip: &skip,
    };
    let out = bundle_versions(checker, head, walked.sums, staged, &vouched, &shown, failed);
    let releases = bundle_releases(
        checker,
        head,
        walked.release_sums,
        staged_zips,
        &shown,
        failed,
    );
    if !failed.is_empty() {
        return (Found::default(), Some(custody));
    }
    let mut modules = Vec::new();
    for (mi, m) in head.manifest.modules.iter().enumerate() {
        let Some(staged) = staged_modules.remove(&mi) else {
            continue;
        };
        let addr = bundle::parse_module_source(&m.source).expect("checked by Manifest::parse");
        if skip.contains(&(PublishedKind::Module, addr.to_string(), m.version.clone())) {
            continue;
        }
        // How it was obtained is this import's finding, not the bundle's claim: a trusted
        // site's word counts, and so does its saying that it had the package unverified.
        let mut record = m.record.clone();
        record.trust = match &custody {
            // A published module stays published: `check_publications` requires its record.
            Custody::Trusted(_) if checker.rules.trust.private.has_module(&addr) => {
                ModuleTrust::Private
            }
            Custody::Trusted(_) if record.trust != ModuleTrust::Unverified => {
                ModuleTrust::SignedBundle
            }
            _ => ModuleTrust::Unverified,
        };
        if let Err(why) = checker.rules.trust.admit_module(&addr, record.trust) {
            failed.push((format!("{shown}: {}", m.path), why.to_string()));
            continue;
        }
        modules.push(VerifiedModule {
            addr,
            version: m.version.clone(),
            staged,
            record,
        });
    }
    if !failed.is_empty() {
        return (Found::default(), Some(custody));
    }
    let git = head
        .manifest
        .git
        .iter()
        .enumerate()
        .filter_map(|(gi, g)| {
            Some(StagedGit {
                entry: g.clone(),
                staged: staged_git.remove(&gi)?,
            })
        })
        .collect();
    let publications = check_publications(checker, head, &vouched, &out, &modules, &shown, failed);
    if !failed.is_empty() {
        return (Found::default(), Some(custody));
    }
    let (contents, signer) = described.unzip();
    let found = Found {
        versions: out,
        modules,
        releases,
        git,
        publications,
        left_out,
        contents,
        signer: signer.flatten(),
    };
    (found, Some(custody))
}

/// The published versions a bundle carries: only from a trusted site, each with its
/// publication record, and only for what the bundle holds (a publication record without its
/// version, or a version of a private namespace without its record, is refused). Those whose
/// namespace is not private here are left out before (`skip`, from [`unpublished_here`]).
fn check_publications(
    checker: &Checker,
    head: &Head,
    vouched: &Vouched,
    versions: &[VersionImport],
    modules: &[VerifiedModule],
    shown: &str,
    failed: &mut Failures,
) -> Vec<Publication> {
    let (custody, skip) = (vouched.custody, vouched.skip);
    let private = &checker.rules.trust.private;
    let listed = &head.manifest.publications;
    let has = |kind: PublishedKind, address: &str, version: &Version| {
        listed
            .iter()
            .any(|p| p.kind == kind && p.address == address && &p.version == version)
    };
    let mut fail = |what: String, why: &str| failed.push((format!("{shown}: {what}"), why.into()));
    let carried = versions
        .iter()
        .filter(|v| private.has_provider(&v.addr))
        .map(|v| (PublishedKind::Provider, v.addr.to_string(), &v.version))
        .chain(
            modules
                .iter()
                .filter(|m| private.has_module(&m.addr))
                .map(|m| (PublishedKind::Module, m.addr.to_string(), &m.version)),
        );
    for (kind, address, version) in carried {
        if !matches!(custody, Custody::Trusted(_)) {
            fail(
                format!("{address} {version}"),
                "published versions of a private namespace are admitted only from a bundle \
                 signed by a site in bundles.trusted_keys",
            );
        } else if !has(kind, &address, version) {
            fail(
                format!("{address} {version}"),
                "is in a private namespace here, but the bundle has no publication record for it",
            );
        }
    }
    let mut out = Vec::new();
    for p in listed {
        if skip.contains(&(p.kind, p.address.clone(), p.version.clone())) {
            continue; // left out: its namespace is not private here
        }
        let here = match p.kind {
            PublishedKind::Provider => p.provider().is_some_and(|a| private.has_provider(&a)),
            PublishedKind::Module => p.module().is_some_and(|a| private.has_module(&a)),
        };
        let carried = match p.kind {
            PublishedKind::Provider => versions
                .iter()
                .any(|v| v.addr.to_string() == p.address && v.version == p.version),
            PublishedKind::Module => modules
                .iter()
                .any(|m| m.addr.to_string() == p.address && m.version == p.version),
        };
        if !here {
            fail(
                format!("publication of {} {}", p.address, p.version),
                "its namespace is not private here (publishing.namespaces)",
            );
        } else if !carried {
            fail(
                format!("publication of {} {}", p.address, p.version),
                "the bundle does not carry the version it records",
            );
        } else {
            out.push(p.clone());
        }
    }
    out
}

/// Publications this registry has already with another digest.
async fn publication_conflicts(mirror: &Arc<Core>, publications: &[Publication]) -> Failures {
    let mut out = Vec::new();
    for p in publications {
        match mirror
            .publications()
            .get(p.kind, &p.address, &p.version)
            .await
        {
            Ok(Some(have)) if have.digest != p.digest => out.push((
                format!("{} {}", p.address, p.version),
                format!(
                    "is published here with other files (digest {}; the bundle's is {})",
                    have.digest, p.digest
                ),
            )),
            Ok(_) => {}
            Err(e) => out.push((p.address.clone(), format!("reading the cache: {e}"))),
        }
    }
    out
}

/// Claims every published version the bundle carries (state `pending`), before any of their
/// records is written. A version published here with other files meanwhile is a conflict, and
/// the claims this call made are given back, so nothing changed. Returns the publications to
/// record once their versions are in: those claimed now, and those an earlier import of the
/// same files claimed and did not finish.
async fn claim_publications(
    mirror: &Arc<Core>,
    publications: &[Publication],
) -> Result<Vec<Publication>, ImportError> {
    let store = mirror.publications();
    let mut claimed: Vec<Publication> = Vec::new();
    let mut to_finish = Vec::new();
    for p in publications {
        let what = format!("{} {}", p.address, p.version);
        let pending = Publication {
            state: crate::records::publish::State::Pending,
            ..p.clone()
        };
        let found = store
            .claim(&pending)
            .await
            .map_err(ImportError::store(&what));
        let conflict = match found {
            Ok(crate::cache::Claimed::Claimed) => {
                claimed.push(p.clone());
                to_finish.push(p.clone());
                None
            }
            Ok(crate::cache::Claimed::Exists(have)) if have.digest == p.digest => {
                if have.state == crate::records::publish::State::Pending {
                    to_finish.push(p.clone());
                }
                None
            }
            Ok(crate::cache::Claimed::Exists(_)) => Some(ImportError::Conflict(format!(
                "{what} was published here with other files meanwhile"
            ))),
            Err(e) => Some(e),
        };
        if let Some(e) = conflict {
            for c in &claimed {
                if let Err(undo) = store.remove(c.kind, &c.address, &c.version).await {
                    tracing::warn!(
                        "giving back the claim on {} {}: {undo}",
                        c.address,
                        c.version
                    );
                }
            }
            return Err(e);
        }
    }
    Ok(to_finish)
}

/// Records the claimed publications as the exporting site recorded them, once their versions
/// are in.
async fn finish_publications(
    mirror: &Arc<Core>,
    publications: Vec<Publication>,
) -> Result<usize, ImportError> {
    let mut added = 0;
    for p in publications {
        let what = format!("{} {}", p.address, p.version);
        mirror
            .publications()
            .put(&p)
            .await
            .map_err(ImportError::store(&what))?;
        added += 1;
    }
    Ok(added)
}

/// One CLI release that passed every check: its record, the vendor's SHA256SUMS and
/// signature, and its zips waiting in the staging area.
struct VerifiedRelease {
    record: ReleaseRecord,
    sums: Vec<u8>,
    signature: Vec<u8>,
    zips: Vec<(ReleaseKey, StagedFile, ReleaseZip)>,
}

/// Checks each release's SHA256SUMS as a fetch does (`verify_release_sums`: the vendor's
/// pinned key, the list itself), and that it lists each staged zip (already checked against
/// the manifest) with the same SHA-256.
fn bundle_releases(
    checker: &Checker,
    head: &Head,
    mut files: bundle::ReleaseSumsFiles,
    mut staged: HashMap<(usize, usize), StagedFile>,
    shown: &str,
    failed: &mut Failures,
) -> Vec<VerifiedRelease> {
    let mut out = Vec::new();
    for (ri, r) in head.manifest.releases.iter().enumerate() {
        let sums = files.remove(&(ri, false)).unwrap_or_default();
        let signature = files.remove(&(ri, true)).unwrap_or_default();
        let at = format!("{shown}: {}", r.sums_path);
        let verified = checker
            .rules
            .releases
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|verifier| {
                verify_release_sums(verifier, r.cli, &r.version, &sums, &signature)
                    .map_err(|e| e.to_string())
            });
        let record = match verified {
            Ok(record) => record,
            Err(why) => {
                failed.push((at, why));
                continue;
            }
        };
        let mut zips = Vec::new();
        for (zi, z) in r.builds.iter().enumerate() {
            let Some(file) = staged.remove(&(ri, zi)) else {
                continue;
            };
            let key = r.key(z);
            if record.sha256_of(&key) != Some(&z.sha256) {
                failed.push((
                    format!("{shown}: {}", z.path),
                    format!(
                        "SHA-256 {} is not what the vendor's signed {} lists for {}",
                        z.sha256,
                        sums_filename(r.cli, &r.version),
                        key.filename()
                    ),
                ));
                continue;
            }
            let zip = ReleaseZip {
                sha256: z.sha256.clone(),
                size: z.size,
            };
            zips.push((key, file, zip));
        }
        out.push(VerifiedRelease {
            record,
            sums,
            signature,
            zips,
        });
    }
    out
}

/// Release zips the cache already holds with other bytes: refused before anything is admitted.
async fn release_conflicts(mirror: &Arc<Core>, releases: &[VerifiedRelease]) -> Failures {
    let mut out = Vec::new();
    for (key, _, zip) in releases.iter().flat_map(|r| &r.zips) {
        let what = format!("release zip {key}");
        match mirror.releases().record(key).await {
            Ok(Some(have)) if have.sha256 != zip.sha256 => out.push((
                what,
                format!(
                    "the cache holds another zip (SHA-256 {}) than the import ({})",
                    have.sha256, zip.sha256
                ),
            )),
            Ok(_) => {}
            Err(e) => out.push((what, format!("reading the cache: {e}"))),
        }
    }
    out
}

/// Stores each verified release (its SHA256SUMS, signature and record, unless already
/// stored), commits its zips not already cached, and lists it; returns the zips added and
/// those present.
async fn admit_releases(
    mirror: &Arc<Core>,
    releases: Vec<VerifiedRelease>,
) -> Result<(Vec<String>, Vec<String>), ImportError> {
    let (mut added, mut present) = (Vec::new(), Vec::new());
    let lists = ReleaseMirror::new(mirror.clone());
    for r in releases {
        let (cli, version) = (r.record.product, r.record.version.clone());
        let what = format!("{cli} {version}");
        let storage = mirror.releases().storage().as_ref();
        let admitted = async {
            // The record is the commit point: without it, the release is stored again.
            if stored_record(storage, cli, &version).await?.is_none() {
                store_release(storage, &r.record, r.sums.into(), r.signature.into()).await?;
            }
            lists.list_release(&r.record).await
        };
        admitted.await.map_err(|e| ImportError::Release {
            what: what.clone(),
            problem: e.to_string(),
        })?;
        for (key, staged, zip) in r.zips {
            let store = mirror.releases();
            let name = key.to_string();
            if store
                .record(&key)
                .await
                .map_err(ImportError::store(format_args!("release zip {name}")))?
                .is_some()
            {
                present.push(name);
                continue;
            }
            store
                .commit(&key, staged, &zip)
                .await
                .map_err(ImportError::store(format_args!(
                    "storing release zip {name}"
                )))?;
            added.push(name);
        }
    }
    Ok((added, present))
}

/// Stages one archive and checks size, SHA-256 and `h1:` against its manifest entry.
fn check_archive(
    checker: &Checker,
    reader: &mut dyn Read,
    meta: &bundle::BundleArchive,
) -> Result<VerifiedArchive, ImportError> {
    let staged = stage(checker, reader, Some(meta.size))?;
    let expected = Expected {
        sha256: &meta.sha256,
        size: Some(meta.size),
    };
    let verified =
        checker
            .handle
            .block_on(admission::verify_archive(staged, expected, checker.limits))?;
    if verified.info.h1 != meta.h1 {
        return Err(ImportError::Mismatch {
            what: "h1",
            found: verified.info.h1.to_string(),
            promised: meta.h1.to_string(),
        });
    }
    Ok(verified)
}

/// Checks every version's origin checksums against the trust policy, and classifies each
/// staged archive (already checked against the manifest).
fn bundle_versions(
    checker: &Checker,
    head: &Head,
    mut sums: SumsFiles,
    mut staged: HashMap<(usize, usize), VerifiedArchive>,
    vouched: &Vouched,
    shown: &str,
    failed: &mut Failures,
) -> Vec<VersionImport> {
    let (custody, skip) = (vouched.custody, vouched.skip);
    let rules = checker.rules;
    let mut out = Vec::new();
    for (vi, v) in head.manifest.versions.iter().enumerate() {
        let addr = bundle::parse_source(&v.source).expect("checked by Manifest::parse");
        if skip.contains(&(PublishedKind::Provider, addr.to_string(), v.version.clone())) {
            continue; // left out: its namespace is not private here
        }
        let mut refs = Vec::new();
        for (si, s) in v.sums.iter().enumerate() {
            let doc = sums.remove(&(vi, si, false)).unwrap_or_default();
            let sig = sums.remove(&(vi, si, true)).unwrap_or_default();
            // The same check as when `serve` fetches them: the bundle's word is not taken.
            let described = v
                .archives
                .iter()
                .filter_map(|a| Some((&a.platform, a.origin.as_ref()?)))
                .filter(|(_, p)| p.shasums_url.as_deref() == Some(s.reference.url.as_str()));
            let verified = rules.trust.verify_sums(
                Verifier::hashicorp(),
                &addr,
                &v.version,
                &doc,
                &sig,
                described,
            );
            let mut trust = match verified {
                Ok(trust) => trust,
                Err(e) => {
                    failed.push((format!("{shown}: {}", s.path), e.to_string()));
                    continue;
                }
            };
            // An origin that signs nothing is vouched for only by a trusted site.
            if trust.kind == SignatureKind::Unsigned && !matches!(custody, Custody::Trusted(_)) {
                trust = Trust {
                    kind: SignatureKind::Unverified,
                    key_id: None,
                };
            }
            let mut reference = s.reference.clone();
            reference.trust = Some(trust);
            refs.push((reference, doc, sig));
        }
        let mut archives = Vec::new();
        for (ai, a) in v.archives.iter().enumerate() {
            let Some(mut archive) = staged.remove(&(vi, ai)) else {
                continue;
            };
            let fail = |why: String| (format!("{shown}: {}", a.path), why);
            let kind = match &a.origin {
                // `verify_sums` checked that the SHA256SUMS lists this shasum, which is the
                // manifest's sha256 (Manifest::parse), which the bytes have.
                Some(pkg) => match refs
                    .iter()
                    .find(|(r, _, _)| pkg.shasums_url.as_deref() == Some(r.url.as_str()))
                {
                    Some((r, _, _)) => r
                        .trust
                        .as_ref()
                        .map_or(SignatureKind::Unverified, |t| t.kind),
                    None => continue, // its SHA256SUMS failed; reported above
                },
                None => SignatureKind::Unverified,
            };
            if let Err(why) = rules.admit(&addr, kind) {
                failed.push(fail(why.to_string()));
                continue;
            }
            archive.info.trust = Some(kind);
            archives.push(Verified {
                key: ArchiveKey {
                    addr: addr.clone(),
                    version: v.version.clone(),
                    platform: a.platform.clone(),
                },
                archive,
                origin: a.origin.clone(),
            });
        }
        out.push(VersionImport {
            addr,
            version: v.version.clone(),
            protocols: v.protocols.clone(),
            archives,
            sums: refs,
        });
    }
    out
}

/// Total size of the zips under a mirror directory (for the progress bar).
fn zip_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(path),
                Ok(m) if path.extension().is_some_and(|e| e == "zip") => total += m.len(),
                _ => {}
            }
        }
    }
    total
}

fn subdirs(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.push((
                entry.file_name().to_string_lossy().to_string(),
                entry.path(),
            ));
        }
    }
    out.sort();
    Ok(out)
}

fn from_dir(checker: &Checker, root: &Path, failed: &mut Failures) -> Vec<VersionImport> {
    let mut out = Vec::new();
    if !checker.rules.allow_unverified {
        failed.push((
            root.display().to_string(),
            "a mirror directory carries no signature, so nothing in it can be verified; pass \
             --allow-unverified to admit it as unverified"
                .into(),
        ));
        return out;
    }
    let hosts = match subdirs(root) {
        Ok(h) => h,
        Err(e) => {
            failed.push((root.display().to_string(), e.to_string()));
            return out;
        }
    };
    for (host, host_dir) in hosts {
        if host == bundle::ORIGIN_DIR || host.starts_with('.') {
            continue;
        }
        for (ns, ns_dir) in subdirs(&host_dir).unwrap_or_default() {
            for (ty, dir) in subdirs(&ns_dir).unwrap_or_default() {
                let addr = match ProviderAddr::new(&host, &ns, &ty) {
                    Ok(a) => a,
                    Err(e) => {
                        failed.push((dir.display().to_string(), e.to_string()));
                        continue;
                    }
                };
                if let Err(why) = checker.rules.admit(&addr, SignatureKind::Unverified) {
                    failed.push((dir.display().to_string(), why.to_string()));
                    continue;
                }
                out.extend(provider_from_dir(checker, &addr, &dir, failed));
            }
        }
    }
    if !failed.is_empty() {
        return Vec::new();
    }
    out
}

fn provider_from_dir(
    checker: &Checker,
    addr: &ProviderAddr,
    dir: &Path,
    failed: &mut Failures,
) -> Vec<VersionImport> {
    let fail =
        |failed: &mut Failures, p: &Path, why: String| failed.push((p.display().to_string(), why));
    let mut docs = Vec::new();
    let mut zips = BTreeSet::new();
    let Ok(listing) = std::fs::read_dir(dir) else {
        fail(failed, dir, "cannot read directory".into());
        return Vec::new();
    };
    for entry in listing.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.ends_with(".zip") {
            zips.insert(name);
        } else if name != "index.json" && name.ends_with(".json") {
            docs.push(name);
        }
    }
    docs.sort();
    let mut out = Vec::new();
    for doc_name in docs {
        let doc_path = dir.join(&doc_name);
        let version = match Version::parse(doc_name.trim_end_matches(".json")) {
            Ok(v) => v,
            Err(e) => {
                fail(failed, &doc_path, format!("not named <version>.json: {e}"));
                continue;
            }
        };
        let doc: docs::MirrorVersion = match std::fs::read(&doc_path)
            .map_err(serde_json::Error::io)
            .and_then(|b| serde_json::from_slice(&b))
        {
            Ok(d) => d,
            Err(e) => {
                fail(
                    failed,
                    &doc_path,
                    format!("not a mirror version document: {e}"),
                );
                continue;
            }
        };
        let mut archives = Vec::new();
        for (platform, entry) in doc.archives {
            let at = format!("{} archives.{platform}", doc_path.display());
            let platform = match Platform::parse(&platform) {
                Ok(p) => p,
                Err(e) => {
                    failed.push((at, e.to_string()));
                    continue;
                }
            };
            if entry.url.is_empty()
                || entry.url.contains(['/', '\\', ':'])
                || entry.url.starts_with('.')
            {
                failed.push((
                    at,
                    format!(
                        "url {:?} is not a file name in the same directory",
                        entry.url
                    ),
                ));
                continue;
            }
            if !zips.remove(&entry.url) {
                failed.push((at, format!("{} is not in the directory", entry.url)));
                continue;
            }
            let zip_path = dir.join(&entry.url);
            checker.bar.set_message(entry.url.clone());
            match check_listed(checker, &zip_path, &entry.hashes) {
                Ok(archive) => archives.push(Verified {
                    key: ArchiveKey {
                        addr: addr.clone(),
                        version: version.clone(),
                        platform,
                    },
                    archive,
                    origin: None,
                }),
                Err(e) => failed.push((zip_path.display().to_string(), e.to_string())),
            }
        }
        if !archives.is_empty() {
            out.push(VersionImport {
                addr: addr.clone(),
                version,
                protocols: Vec::new(),
                archives,
                sums: Vec::new(),
            });
        }
    }
    for zip in zips {
        failed.push((
            dir.join(&zip).display().to_string(),
            "not listed in any <version>.json, so its hashes cannot be checked".into(),
        ));
    }
    out
}

/// Stages a zip from a mirror directory and checks it against the hashes listed for it.
fn check_listed(
    checker: &Checker,
    zip: &Path,
    hashes: &[String],
) -> Result<VerifiedArchive, ImportError> {
    if hashes.is_empty() {
        return Err(ImportError::NothingListed);
    }
    let file = std::fs::File::open(zip).map_err(ImportError::local("opening"))?;
    let mut reader = BufReader::new(checker.bar.wrap_read(file));
    let staged = stage(checker, &mut reader, None)?;
    let h1 = checker
        .handle
        .block_on(admission::h1_of_file(staged.file.path(), checker.limits))?;
    let sha = staged.digest.sha256;
    for listed in hashes {
        let ok = match listed.split_once(':') {
            Some(("h1", _)) => *listed == h1,
            Some(("zh", hex)) => hex == sha,
            _ => return Err(ImportError::UnknownHashKind(listed.clone())),
        };
        if !ok {
            return Err(ImportError::ListedMismatch {
                listed: listed.clone(),
                h1,
                sha256: sha,
            });
        }
    }
    Ok(VerifiedArchive {
        file: staged.file,
        info: ArchiveInfo {
            sha256: sha,
            h1,
            size: staged.digest.size,
            trust: Some(SignatureKind::Unverified),
        },
    })
}

/// Archives the cache already holds with different bytes: refused before anything is admitted.
async fn conflicts(mirror: &Arc<Core>, imports: &[VersionImport]) -> Failures {
    let mut out = Vec::new();
    for vi in imports {
        let record = mirror.meta().read_version(&vi.addr, &vi.version).await;
        for a in &vi.archives {
            match mirror.archives().record(&a.key).await {
                Ok(Some(have)) if have.sha256 != a.archive.info.sha256 => out.push((
                    a.key.to_string(),
                    format!(
                        "the cache holds a different archive (SHA-256 {}) than the import ({})",
                        have.sha256, a.archive.info.sha256
                    ),
                )),
                Ok(_) => {}
                Err(e) => out.push((a.key.to_string(), format!("reading the cache: {e}"))),
            }
            if let Some(pkg) = record
                .as_ref()
                .and_then(|r| r.packages.get(&a.key.platform))
            {
                if pkg.shasum != a.archive.info.sha256 {
                    out.push((
                        a.key.to_string(),
                        format!(
                            "the cache's origin metadata says SHA-256 {}, the import has {}",
                            pkg.shasum, a.archive.info.sha256
                        ),
                    ));
                }
            }
        }
    }
    out
}

type Admitted = Vec<(ArchiveKey, u64)>;

/// Commits verified archives, then the metadata that describes them (through the cache's own
/// merges: checksum files, then version records, then version lists).
async fn admit(
    mirror: &Arc<Core>,
    imports: Vec<VersionImport>,
) -> Result<(Admitted, Admitted), ImportError> {
    let (mut added, mut present) = (Vec::new(), Vec::new());
    let meta = mirror.meta();
    let mut index_updates: BTreeMap<ProviderAddr, Vec<IndexVersion>> = BTreeMap::new();
    for vi in imports {
        let mut packages = BTreeMap::new();
        for a in vi.archives {
            let have = mirror
                .archives()
                .record(&a.key)
                .await
                .map_err(ImportError::store(&a.key))?;
            let info = a.archive.info.clone();
            if have.is_some() {
                present.push((a.key.clone(), info.size));
            } else {
                a.archive
                    .commit(mirror.archives(), &a.key)
                    .await
                    .map_err(ImportError::store(format_args!("storing {}", a.key)))?;
                added.push((a.key.clone(), info.size));
            }
            let mut pkg = a.origin.unwrap_or_else(|| {
                Package::imported(a.key.filename(), info.sha256.clone(), vi.protocols.clone())
            });
            pkg.h1 = Some(info.h1);
            pkg.size = Some(info.size);
            packages.insert(a.key.platform.clone(), pkg);
        }
        let platforms: Vec<Platform> = packages.keys().cloned().collect();
        let sums = vi
            .sums
            .into_iter()
            .map(|(r, doc, sig)| (r, doc.into(), sig.into()))
            .collect();
        meta.merge_imported_version(&vi.addr, &vi.version, packages, sums)
            .await
            .map_err(ImportError::store(format_args!(
                "{} {}: recording the version",
                vi.addr, vi.version
            )))?;
        index_updates
            .entry(vi.addr.clone())
            .or_default()
            .push(IndexVersion {
                version: vi.version.clone(),
                protocols: vi.protocols.clone(),
                platforms,
            });
    }
    for (addr, versions) in index_updates {
        mirror
            .provider_lists()
            .update(&addr, |list| list.add_versions(versions))
            .await
            .map_err(ImportError::store(format_args!(
                "{addr}: writing the version list"
            )))?;
    }
    added.sort_by_key(|a| a.0.to_string());
    present.sort_by_key(|a| a.0.to_string());
    Ok((added, present))
}
