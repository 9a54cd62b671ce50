//! Operator commands: filling, inspecting and carrying the cache without a running server.
//!
//! - `seed`: fetch and verify the providers named by lock files, configurations or lists;
//! - `export`: write the cache as a static network mirror directory, or one bundle file;
//! - `import`: admit a bundle or a mirror directory after checking every hash;
//! - `lock`: write `.terraform.lock.hcl` with `h1:` for chosen platforms and the `zh:` set;
//! - `ls` and `verify`: list the cache; re-hash it and quarantine what no longer matches;
//! - `prune`: remove provider and module versions not used for a given time, keeping what lock
//!   files, configurations or lists pin;
//! - `keygen`: a site key that signs bundles, so that importers know who made them (or the
//!   registry's provider signing key);
//! - `publish`: a client of a registry's publishing API; `unpublish`: an operator's removal of a
//!   published version, with an audit record;
//! - `policy`: operators' waivers, holds and revocations of versions under the version policy
//!   (each with an audit record), the rules and what of the cache they refuse, and one
//!   version's decision;
//! - `tokens`: people's tokens from `terraform login`, listed and revoked on the store.
//!
//! Every command opens the same [`Core`](crate::mirror::Core) as `serve` (same `--config`, cache directory,
//! upstream settings and verification), works, prints a summary on stdout, and exits non-zero
//! when anything failed. Progress bars go to stderr and only when it is a terminal.
//!
//! Errors are typed where they arise ([`inputs::InputError`], [`bundle::BundleError`], each
//! command's own); what stops a command is an [`OpsError`]: `Usage` for what the operator must
//! fix (a configuration, argument or input file: exit code 78), `Failed` for anything else
//! (exit code 1). A failure of one item (an archive, a module) is reported in the summary and
//! the command goes on.

pub mod bundle;
pub mod configuration;
pub mod export;
pub mod import;
pub mod inputs;
pub mod keygen;
pub mod lock;
pub mod lockfile;
pub mod ls;
pub mod policy;
pub mod prune;
pub mod publish;
pub mod seed;
pub mod tokens;
pub mod usage;
pub mod verify;
pub mod wanted;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::address::Platform;
use crate::cache::{StagedFile, Staging};
use crate::config::Settings;
use crate::metrics::Metrics;
use crate::mirror::Core;
use crate::mirror::admission::{self, AdmitError};
use crate::records::{ArchiveInfo, ArchiveKey};
use crate::storage::StorageError;

/// Exit code for an unusable configuration or command line (sysexits' EX_CONFIG).
pub(crate) const EXIT_CONFIG: u8 = 78;
/// Exit code of a command done in part: what this site has no configuration for was left out
/// (an `import` that admitted the rest).
pub(crate) const EXIT_PARTIAL: u8 = 3;
/// Exit code when the listening socket cannot be bound (sysexits' EX_UNAVAILABLE): worth a
/// restart, unlike a configuration error.
pub(crate) const EXIT_UNAVAILABLE: u8 = 69;

/// The multi-threaded async runtime a command runs on; when there can be none, says why on
/// stderr and gives the exit code to end with.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("provender: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        })
}

/// The operator subcommands (flattened into the top-level command line).
#[derive(clap::Subcommand)]
pub enum OpsCommand {
    /// Fill the cache from the origins with what configurations, lock files and lists need.
    ///
    /// A configuration directory gives its providers (`required_providers`, and those its
    /// resources and `provider` blocks imply), the registry modules its `module` blocks call
    /// (fetched through the mirror, then read for the providers and modules they call in turn)
    /// and its direct git sources (`git::https://...`, `github.com/...`: each repository is
    /// refreshed in the git cache, its host listed in `git.allowed_hosts`, and each call's `ref`
    /// checked in it). A lock file gives its exact provider versions; `--provider`, `--module`
    /// and `--cli` name more.
    Seed(seed::SeedArgs),
    /// Write the cache as a static network mirror directory (the `terraform providers mirror`
    /// layout), or as one bundle file with `--bundle`.
    Export(export::ExportArgs),
    /// Admit a bundle, an exported directory or a `terraform providers mirror` directory into the
    /// cache, after checking every archive's hashes.
    Import(import::ImportArgs),
    /// Write or update a `.terraform.lock.hcl` with `h1:` hashes for the chosen platforms.
    Lock(lock::LockArgs),
    /// List what the cache holds: providers, versions, platforms, sizes, last use.
    Ls(ls::LsArgs),
    /// Re-hash every cached archive; quarantine those that no longer match their record.
    Verify(verify::VerifyArgs),
    /// Remove provider and module versions not used for a given time, keeping what lock files,
    /// configurations or provider lists pin.
    Prune(prune::PruneArgs),
    /// Make a site key for signing bundles (`export --bundle`) and print its public key.
    Keygen(keygen::KeygenArgs),
    /// Show which clients fetched which provider and module versions, per the servers' counts.
    Usage(usage::UsageArgs),
    /// Publish a provider release or a module version to a registry's private namespaces
    /// (through its API, with a token or a CI system's ID token), or yank one.
    Publish(publish::PublishArgs),
    /// Remove a published version for good, leaving an audit record (an operator's command:
    /// it works on the store).
    Unpublish(publish::UnpublishArgs),
    /// The version policy: waive, hold or revoke one version (leaving an audit record), list
    /// the rules and what of the cache they refuse, show the audit trail, check one version.
    Policy(policy::PolicyArgs),
    /// People's tokens from `terraform login`: list them, revoke them (on the store).
    Tokens(tokens::TokensArgs),
}

/// The options every operator command shares.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Configuration file (TOML), the same one `serve` uses: cache directory, upstream settings.
    #[arg(long, short, env = "PROVENDER_CONFIG")]
    pub config: Option<PathBuf>,
}

/// Runs an operator command to completion.
pub fn run(command: OpsCommand) -> ExitCode {
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let outcome = runtime.block_on(async move {
        match command {
            OpsCommand::Seed(a) => seed::run(a).await,
            OpsCommand::Export(a) => export::run(a).await,
            OpsCommand::Import(a) => import::run(a).await,
            OpsCommand::Lock(a) => lock::run(a).await,
            OpsCommand::Ls(a) => ls::run(a).await,
            OpsCommand::Verify(a) => verify::run(a).await,
            OpsCommand::Prune(a) => prune::run(a).await,
            OpsCommand::Keygen(a) => keygen::run(a),
            OpsCommand::Usage(a) => usage::run(a).await,
            OpsCommand::Publish(a) => publish::run(a).await,
            OpsCommand::Unpublish(a) => publish::unpublish(a).await,
            OpsCommand::Policy(a) => policy::run(a).await,
            OpsCommand::Tokens(a) => tokens::run(a).await,
        }
    });
    match outcome {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::FAILURE,
        Ok(Outcome::Partial) => ExitCode::from(EXIT_PARTIAL),
        Err(OpsError::Usage(msg)) => {
            eprintln!("provender: {msg}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(OpsError::Failed(e)) => {
            eprintln!("provender: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// How a command ended when it ran to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything asked for was done.
    Success,
    /// The command finished, but some items failed (the summary says which).
    Failed,
    /// Done in part: what this site has no configuration for was left out, named with the
    /// settings that would take it (`import`; exit code [`EXIT_PARTIAL`]).
    Partial,
}

impl Outcome {
    /// `Failed` when `failures` is non-zero.
    pub fn from_failures(failures: usize) -> Outcome {
        if failures == 0 {
            Outcome::Success
        } else {
            Outcome::Failed
        }
    }
}

/// Why a command stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// A bad configuration, argument or input file (exit code 78).
    #[error("{0}")]
    Usage(String),
    /// Anything else (exit code 1).
    #[error("{0:#}")]
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for OpsError {
    fn from(e: anyhow::Error) -> Self {
        OpsError::Failed(e)
    }
}

/// A bad input file or argument is the operator's to fix.
impl From<inputs::InputError> for OpsError {
    fn from(e: inputs::InputError) -> Self {
        OpsError::Usage(e.to_string())
    }
}

/// Shorthand for a usage error.
pub fn usage(msg: impl Into<String>) -> OpsError {
    OpsError::Usage(msg.into())
}

/// Loads the configuration the same way `serve` does (built-in defaults without a file).
pub fn load_settings(common: &CommonArgs) -> Result<Settings, OpsError> {
    crate::config::load(common.config.as_deref()).map_err(|e| usage(e.to_string()))
}

/// Opens the cache with `settings` (no network is touched until something is missing), and
/// a handle on its staging directory for this command's own temporary copies.
pub fn open_core(settings: Settings) -> Result<(Arc<Core>, Staging), OpsError> {
    let tmp = settings.cache.dir.join("tmp");
    let mirror =
        Core::open(Arc::new(settings), Arc::new(Metrics::new())).map_err(OpsError::Failed)?;
    // Opened before any download starts, so its clean-up cannot remove one in progress.
    let (staging, _) = Staging::open(tmp)
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("cache.dir: cannot open tmp/: {e}")))?;
    Ok((mirror, staging))
}

/// Reads the operators' approvals of the version policy from the store, for a command that
/// judges versions (seed, export, import) as the server does.
pub async fn load_approvals(core: &Core) -> Result<(), OpsError> {
    core.policy()
        .approvals()
        .refresh()
        .await
        .map(|_| ())
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("reading policy approvals: {e}")))
}

/// Why a cached archive could not be copied out of the store for an operator command.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("opening the cached archive: {0}")]
    Store(#[from] StorageError),
    #[error("the archive is not in the cache")]
    Missing,
    /// A local file operation: what it was for, and why it failed.
    #[error("{doing}: {source}")]
    Local {
        doing: &'static str,
        source: std::io::Error,
    },
}

/// Copies a cached archive into a staging file (for work that needs a seekable local file),
/// returning the file and the SHA-256 and size of what was copied.
pub async fn local_copy(
    mirror: &Core,
    staging: &Staging,
    key: &ArchiveKey,
) -> Result<(StagedFile, crate::hash::Sha256, u64), CopyError> {
    let stored = mirror
        .archives()
        .open(key)
        .await?
        .ok_or(CopyError::Missing)?;
    let body = stored
        .body
        .map(|chunk| chunk.map_err(AdmitError::Source))
        .boxed();
    let staged = admission::stage_stream::<AdmitError>(staging, body, None)
        .await
        .map_err(|e| match e {
            AdmitError::Local { doing, source } => CopyError::Local { doing, source },
            AdmitError::Source(source) => CopyError::Local {
                doing: "copying the cached archive",
                source,
            },
            other => CopyError::Local {
                doing: "copying the cached archive",
                source: std::io::Error::other(other.to_string()),
            },
        })?;
    Ok((staged.file, staged.digest.sha256, staged.digest.size))
}

/// A cached object whose bytes are not those its record describes (`provender verify` takes it
/// out of service).
#[derive(Debug, thiserror::Error)]
#[error(
    "{what}: cached {kind} has SHA-256 {sha256}, its record says {recorded} (run provender verify)"
)]
pub struct Damaged {
    /// Which object: an archive's key, `module <address> <version>`.
    pub what: String,
    /// `archive` or `package`.
    pub kind: &'static str,
    pub sha256: crate::hash::Sha256,
    pub recorded: crate::hash::Sha256,
}

/// `Err` unless `sha256`, computed from a cached archive's bytes, is the one its record holds.
pub fn check_recorded_sha256(
    key: &ArchiveKey,
    sha256: &crate::hash::Sha256,
    recorded: &ArchiveInfo,
) -> Result<(), Damaged> {
    if *sha256 == recorded.sha256 {
        return Ok(());
    }
    Err(Damaged {
        what: key.to_string(),
        kind: "archive",
        sha256: sha256.clone(),
        recorded: recorded.sha256.clone(),
    })
}

/// The platforms a command works on: `--platform` values (each checked against the
/// configuration's filter), else the filter itself; empty means "every platform offered".
pub fn select_platforms(
    settings: &Settings,
    given: &[Platform],
) -> Result<Vec<Platform>, OpsError> {
    if given.is_empty() {
        return Ok(settings.upstream.platforms.clone());
    }
    let mut out: Vec<Platform> = Vec::new();
    for p in given {
        if !settings.upstream.platform_allowed(p) {
            return Err(usage(format!(
                "--platform {p} is excluded by upstream.platforms in the configuration"
            )));
        }
        if !out.contains(p) {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// A progress bar on stderr, drawn only when stderr is a terminal.
pub fn progress(len: u64, what: &str, bytes: bool) -> ProgressBar {
    let template = if bytes {
        "{prefix} [{bar:30}] {bytes}/{total_bytes} {wide_msg}"
    } else {
        "{prefix} [{bar:30}] {pos}/{len} {wide_msg}"
    };
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
        .with_style(style)
        .with_prefix(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Human-readable byte count, e.g. `12.3 MiB`.
pub fn human_bytes(n: u64) -> String {
    bytesize::ByteSize::b(n).display().iec().to_string()
}

/// One line per failure, indented under a heading.
pub fn print_failures(failures: &[(String, String)]) {
    if failures.is_empty() {
        return;
    }
    println!("failed ({}):", failures.len());
    for (what, why) in failures {
        println!("  {what}: {why}");
    }
}

/// `--cli terraform|tofu[@CONSTRAINT]`: a CLI whose releases the mirror keeps, and which of
/// its versions (every one without a constraint).
pub(crate) fn parse_cli(
    text: &str,
) -> Result<
    (
        crate::records::releases::Product,
        crate::constraints::Constraints,
    ),
    OpsError,
> {
    let (name, constraint) = text.split_once('@').unwrap_or((text, ""));
    let product = crate::records::releases::Product::parse(name.trim()).ok_or_else(|| {
        usage(format!(
            "--cli {text:?}: expected terraform or tofu, optionally @CONSTRAINT"
        ))
    })?;
    let constraints = if constraint.trim().is_empty() {
        crate::constraints::Constraints::any()
    } else {
        crate::constraints::Constraints::parse(constraint)
            .map_err(|e| usage(format!("--cli {text:?}: {e}")))?
    };
    Ok((product, constraints))
}
