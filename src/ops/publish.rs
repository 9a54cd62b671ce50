//! `provender publish`: a client of a running registry's publishing API (see
//! [`crate::mirror::Publisher`]), for CI jobs and people. It holds no store credentials and
//! no signing key: it sends the files, and the registry checks, signs and keeps them.
//!
//! - `publish provider DIR --namespace NS`: the release files in `DIR` as GoReleaser's
//!   Terraform template writes them (`terraform-provider-<type>_<version>_*`): the zips,
//!   `SHA256SUMS`, its `.sig` if there is one, and the manifest; anything else in `DIR`
//!   (GoReleaser's `artifacts.json`, binaries, ...) is left out;
//! - `publish module NS/NAME/SYSTEM VERSION SOURCE`: a directory (packed as it is, `.git` and
//!   `.terraform` left out, links kept as links for the registry to judge), an archive
//!   (`.tar.gz`, `.tgz`, `.tar`, `.zip`), or a git repository URL (`https://`, `ssh://`,
//!   `git@`, `file://`, optionally with go-getter's `git::`), whose tag `v<VERSION>` (else
//!   `<VERSION>`, or `--ref`) is archived with the local `git` and its credentials;
//! - `publish yank provider|module ADDRESS VERSION`: withdraw a version from its list.
//!
//! The registry is `--server` (`PROVENDER_SERVER`); the credentials are a token of the
//! registry's or a CI system's ID token, from `PROVENDER_TOKEN` or `--token-file` (a
//! Kubernetes projected token, GitLab's `id_tokens` written to a file).

use std::path::{Path, PathBuf};

use super::{OpsError, Outcome, usage};

/// `provender publish`
#[derive(clap::Args, Debug)]
pub struct PublishArgs {
    #[command(subcommand)]
    pub what: PublishCommand,
    /// The registry's base URL (`https://mirror.example.com/`).
    #[arg(long, global = true, env = "PROVENDER_SERVER")]
    pub server: Option<url::Url>,
    /// A file holding the token (a registry token or an ID token); else `PROVENDER_TOKEN`.
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// PEM certificates to trust besides the system's (a private CA).
    #[arg(long, global = true, env = "PROVENDER_CA_FILE", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
}

/// What `provender publish` publishes.
#[derive(clap::Subcommand, Debug)]
pub enum PublishCommand {
    /// A provider release: the GoReleaser output directory.
    Provider {
        /// The directory holding the release files.
        dir: PathBuf,
        /// The private namespace to publish into.
        #[arg(long)]
        namespace: String,
    },
    /// A module version from a directory, an archive or a git repository's tag.
    Module {
        /// `namespace/name/system`.
        address: String,
        version: String,
        /// A directory, an archive file, or a git repository URL.
        source: String,
        /// The git reference to archive (default: `v<VERSION>`, else `<VERSION>`).
        #[arg(long = "ref")]
        reference: Option<String>,
    },
    /// Withdraw a published version from its version list (it stays served to whoever names
    /// it).
    Yank {
        /// `provider` or `module`.
        #[arg(value_parser = ["provider", "module"])]
        kind: String,
        /// `namespace/type` or `namespace/name/system`.
        address: String,
        version: String,
        /// Why, recorded with the yank.
        #[arg(long, default_value = "")]
        reason: String,
    },
}

/// Runs `provender publish`.
pub async fn run(args: PublishArgs) -> Result<Outcome, OpsError> {
    let server = args
        .server
        .clone()
        .ok_or_else(|| usage("--server (or PROVENDER_SERVER) names the registry to publish to"))?;
    let token = match &args.token_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| usage(format!("--token-file {}: {e}", path.display())))?,
        None => std::env::var("PROVENDER_TOKEN")
            .map_err(|_| usage("no credentials: set PROVENDER_TOKEN or pass --token-file"))?,
    };
    let token = token.trim().to_string();
    let client = client(args.ca_file.as_deref())?;
    let api = |path: &str| {
        server
            .join(&format!("-/api/v1/publish/{path}"))
            .map_err(|e| usage(format!("--server {server}: {e}")))
    };
    let (method, url, body) = match &args.what {
        PublishCommand::Provider { dir, namespace } => {
            let (ty, version, tar) = release_tar(dir)?;
            let url = api(&format!("providers/{namespace}/{ty}/{version}"))?;
            (reqwest::Method::PUT, url, Some(tar))
        }
        PublishCommand::Module {
            address,
            version,
            source,
            reference,
        } => {
            let body = module_archive(source, version, reference.as_deref())?;
            let url = api(&format!("modules/{address}/{version}"))?;
            (reqwest::Method::PUT, url, Some(body))
        }
        PublishCommand::Yank {
            kind,
            address,
            version,
            reason,
        } => {
            let mut url = api(&format!("{kind}s/{address}/{version}/yank"))?;
            if !reason.is_empty() {
                url.query_pairs_mut().append_pair("reason", reason);
            }
            (reqwest::Method::POST, url, None)
        }
    };
    let mut request = client.request(method, url.clone()).bearer_auth(&token);
    if let Some(body) = body {
        request = request.body(body);
    }
    let response = request
        .send()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("{url}: {e}")))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("{url}: {e}")))?;
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    if !status.is_success() {
        let message = json["error"]["message"].as_str().unwrap_or(&text);
        return Err(OpsError::Failed(anyhow::anyhow!("{status}: {message}")));
    }
    let p = &json["publication"];
    println!(
        "{}: {} {} {} (digest {}, by {})",
        json["status"].as_str().unwrap_or("done"),
        p["kind"].as_str().unwrap_or_default(),
        p["address"].as_str().unwrap_or_default(),
        p["version"].as_str().unwrap_or_default(),
        p["digest"].as_str().unwrap_or_default(),
        p["published_by"].as_str().unwrap_or_default(),
    );
    Ok(Outcome::Success)
}

/// An HTTPS client trusting the system's roots and `ca_file`'s.
fn client(ca_file: Option<&Path>) -> Result<reqwest::Client, OpsError> {
    crate::tls::install_crypto_provider();
    let mut builder = reqwest::Client::builder().timeout(std::time::Duration::from_secs(3600));
    if let Some(path) = ca_file {
        let pem =
            std::fs::read(path).map_err(|e| usage(format!("--ca-file {}: {e}", path.display())))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| usage(format!("--ca-file {}: {e}", path.display())))?;
        builder = builder.tls_certs_merge(certs);
    }
    builder
        .build()
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("building the HTTP client: {e}")))
}

/// The release files of the one provider version in `dir`, as a tar stream: its type, its
/// version and the tar.
fn release_tar(dir: &Path) -> Result<(String, String, Vec<u8>), OpsError> {
    let entries = std::fs::read_dir(dir).map_err(|e| usage(format!("{}: {e}", dir.display())))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let sums: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("terraform-provider-") && n.ends_with("_SHA256SUMS"))
        .collect();
    let [sums] = sums.as_slice() else {
        return Err(usage(format!(
            "{}: expected exactly one terraform-provider-<type>_<version>_SHA256SUMS, found {}",
            dir.display(),
            sums.len()
        )));
    };
    let stem = sums
        .strip_prefix("terraform-provider-")
        .and_then(|s| s.strip_suffix("_SHA256SUMS"))
        .unwrap_or_default();
    let Some((ty, version)) = stem.split_once('_') else {
        return Err(usage(format!(
            "{sums}: not terraform-provider-<type>_<version>_SHA256SUMS"
        )));
    };
    let prefix = format!("terraform-provider-{ty}_{version}_");
    let mut tar = tar::Builder::new(Vec::new());
    for name in names.iter().filter(|n| n.starts_with(&prefix)) {
        let take = name.ends_with(".zip")
            || name.ends_with("_SHA256SUMS")
            || name.ends_with("_SHA256SUMS.sig")
            || name.ends_with("_manifest.json");
        if take {
            tar.append_path_with_name(dir.join(name), name)
                .map_err(|e| usage(format!("{name}: {e}")))?;
        }
    }
    let tar = tar
        .into_inner()
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("packing the release: {e}")))?;
    Ok((ty.to_string(), version.to_string(), tar))
}

/// A module version's archive from `source` (see the module documentation).
fn module_archive(
    source: &str,
    version: &str,
    reference: Option<&str>,
) -> Result<Vec<u8>, OpsError> {
    let path = Path::new(source);
    if path.is_dir() {
        return tar_gz_dir(path);
    }
    if path.is_file() {
        return std::fs::read(path).map_err(|e| usage(format!("{source}: {e}")));
    }
    let url = source.strip_prefix("git::").unwrap_or(source);
    let git_url = ["https://", "ssh://", "file://", "git@"]
        .iter()
        .any(|scheme| url.starts_with(scheme));
    if !git_url {
        return Err(usage(format!(
            "{source}: not a directory, an archive file or a git repository URL"
        )));
    }
    let scratch = tempfile::tempdir()
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("a scratch directory: {e}")))?;
    let candidates: Vec<String> = match reference {
        Some(r) => vec![r.to_string()],
        None => vec![format!("v{version}"), version.to_string()],
    };
    let repo = scratch.path().join("repo");
    let mut tried = Vec::new();
    for reference in &candidates {
        let out = std::process::Command::new("git")
            .args([
                "clone",
                "--quiet",
                "--depth",
                "1",
                "--branch",
                reference,
                "--end-of-options",
            ])
            .arg(url)
            .arg(&repo)
            .output()
            .map_err(|e| OpsError::Failed(anyhow::anyhow!("running git: {e}")))?;
        if out.status.success() {
            let archive = std::process::Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(["archive", "--format=tar.gz", "HEAD"])
                .output()
                .map_err(|e| OpsError::Failed(anyhow::anyhow!("running git: {e}")))?;
            if !archive.status.success() {
                return Err(OpsError::Failed(anyhow::anyhow!(
                    "git archive of {url} at {reference}: {}",
                    String::from_utf8_lossy(&archive.stderr).trim()
                )));
            }
            return Ok(archive.stdout);
        }
        tried.push(format!(
            "{reference}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Err(usage(format!("{url}: no such tag ({})", tried.join("; "))))
}

/// A directory as a `.tar.gz`, without `.git` and `.terraform`, links kept as links.
fn tar_gz_dir(dir: &Path) -> Result<Vec<u8>, OpsError> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.follow_symlinks(false);
    let fail = |e: std::io::Error| usage(format!("{}: {e}", dir.display()));
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(dir.join(&rel))
            .map_err(fail)?
            .filter_map(|e| e.ok())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name();
            if name == ".git" || name == ".terraform" {
                continue;
            }
            let rel = rel.join(&name);
            let kind = entry.file_type().map_err(fail)?;
            if kind.is_dir() {
                tar.append_dir(&rel, entry.path()).map_err(fail)?;
                stack.push(rel);
            } else {
                tar.append_path_with_name(entry.path(), &rel)
                    .map_err(fail)?;
            }
        }
    }
    tar.into_inner()
        .and_then(|gz| gz.finish())
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("packing {}: {e}", dir.display())))
}

/// `provender unpublish`
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Removes a published version from the store for good (archives or package, \
records, publication), after writing an audit record of what it was, who removed it and why \
(shown by the publications API). Publishers cannot do this; they can only yank."
)]
pub struct UnpublishArgs {
    #[command(flatten)]
    pub common: super::CommonArgs,
    /// `provider` or `module`.
    #[arg(value_parser = ["provider", "module"])]
    pub kind: String,
    /// `namespace/type` or `namespace/name/system` (under `publishing.hostname`).
    pub address: String,
    pub version: String,
    /// Why, kept in the audit record.
    #[arg(long)]
    pub reason: String,
    /// Who removes it, kept in the audit record (default: `$USER`).
    #[arg(long, env = "USER", default_value = "operator")]
    pub by: String,
}

/// Runs `provender unpublish`.
pub async fn unpublish(args: UnpublishArgs) -> Result<Outcome, OpsError> {
    let settings = super::load_settings(&args.common)?;
    let Some(host) = settings.trust.private.hostname.clone() else {
        return Err(usage(
            "this registry has no private namespaces (publishing.namespaces)",
        ));
    };
    let version =
        crate::address::Version::parse(&args.version).map_err(|e| usage(e.to_string()))?;
    let (kind, address) = match args.kind.as_str() {
        "provider" => {
            let Some((ns, ty)) = args.address.split_once('/') else {
                return Err(usage(format!("{}: expected namespace/type", args.address)));
            };
            let addr = crate::address::ProviderAddr::new(host.as_str(), ns, ty)
                .map_err(|e| usage(e.to_string()))?;
            (
                crate::records::publish::PublishedKind::Provider,
                addr.to_string(),
            )
        }
        _ => {
            let parts: Vec<&str> = args.address.split('/').collect();
            let [ns, name, system] = parts.as_slice() else {
                return Err(usage(format!(
                    "{}: expected namespace/name/system",
                    args.address
                )));
            };
            let addr = crate::address::ModuleAddr::new(host.as_str(), ns, name, system)
                .map_err(|e| usage(e.to_string()))?;
            (
                crate::records::publish::PublishedKind::Module,
                addr.to_string(),
            )
        }
    };
    let (core, _) = super::open_core(settings)?;
    let publisher = crate::mirror::Publisher::new(core);
    let audit = publisher
        .unpublish(kind, &address, &version, &args.by, &args.reason)
        .await
        .map_err(|e| match e {
            crate::error::Error::Publish(e) => usage(e.to_string()),
            other => OpsError::Failed(other.into()),
        })?;
    println!(
        "unpublished {} {address} {version} (digest {}, published by {}); audit record kept",
        kind.as_str(),
        audit.publication.digest,
        audit.publication.published_by
    );
    Ok(Outcome::Success)
}
