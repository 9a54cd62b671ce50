//! Fetching a module's git source with the `git` CLI, under the same rules as every other
//! origin request.
//!
//! provender does not speak the git protocol itself; it runs `git` with everything that could
//! reach further than intended switched off:
//!
//! - the host name is resolved here, through the address policy (and `connect_to`), and handed
//!   to git with `http.curloptResolve`, so git connects to exactly the checked address;
//!   `http.followRedirects=false` keeps it there;
//! - `GIT_ALLOW_PROTOCOL=https` (plus `http` for hosts with `allow_http`): no `file://`, `ssh`
//!   or `ext::` anywhere, submodules included;
//! - no prompts, no credential helpers, no system or user configuration, a scratch `HOME`;
//! - a deadline, and caps on the repository's bytes (watched while it downloads) and objects.
//!
//! Only the wanted reference is fetched (`--depth 1`); an abbreviated commit, which a shallow
//! fetch cannot name, falls back to fetching every branch and tag. The commit it resolved to is
//! returned, to be recorded with the package.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use url::Url;

use super::{Operation, Outcome, Result, Upstream, UpstreamError};
use crate::address::Hostname;

/// Bounds on one git fetch.
#[derive(Debug, Clone)]
pub struct GitLimits {
    /// The `git` executable.
    pub program: PathBuf,
    /// Most bytes the fetched repository may take on disk.
    pub max_bytes: u64,
    /// Most objects it may hold.
    pub max_objects: u64,
    pub timeout: Duration,
}

/// A fetched commit: its id and a `git archive` tar of its tree.
#[derive(Debug)]
pub struct GitFetch {
    pub commit: String,
    pub tar: PathBuf,
}

fn failed(url: &Url, what: &str, detail: &str) -> UpstreamError {
    let detail = detail.trim();
    let detail = detail.lines().last().unwrap_or(detail);
    UpstreamError::Connect(format!("git {what} {url}: {detail}"))
}

/// Bytes under `dir`, recursively.
fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// `git` invocations in `repo`, isolated from the machine's configuration.
struct Git {
    limits: GitLimits,
    repo: PathBuf,
    home: PathBuf,
    config: Vec<String>,
    allow_protocols: &'static str,
}

impl Git {
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.limits.program);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_ALLOW_PROTOCOL", self.allow_protocols)
            .env("GIT_PROTOCOL_FROM_USER", "0")
            .arg("-C")
            .arg(&self.repo);
        for c in &self.config {
            cmd.arg("-c").arg(c);
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs git to completion within the deadline, killing it if the repository grows past the
    /// byte cap. Returns its stdout.
    async fn run(&self, args: &[&str], deadline: Instant, url: &Url) -> Result<String> {
        let mut child = self
            .command(args)
            .spawn()
            .map_err(|e| failed(url, "cannot start git:", &e.to_string()))?;
        let mut stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let collect = async {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let _ = tokio::join!(
                tokio::io::AsyncReadExt::read_to_end(&mut stdout, &mut out),
                tokio::io::AsyncReadExt::read_to_end(&mut stderr, &mut err),
            );
            (out, err)
        };
        tokio::pin!(collect);
        let mut ticker = tokio::time::interval(Duration::from_millis(200));
        let (out, err) = loop {
            tokio::select! {
                done = &mut collect => break done,
                _ = ticker.tick() => {
                    if dir_size(&self.repo) > self.limits.max_bytes {
                        let _ = child.kill().await;
                        return Err(UpstreamError::TooLarge(format!(
                            "git {url}: the repository grew past modules.max_git_size ({} bytes)",
                            self.limits.max_bytes
                        )));
                    }
                }
                _ = tokio::time::sleep_until(deadline.into()) => {
                    let _ = child.kill().await;
                    return Err(UpstreamError::Timeout(format!(
                        "git {url}: not done within modules.git_timeout ({:?})",
                        self.limits.timeout
                    )));
                }
            }
        };
        let status = child
            .wait()
            .await
            .map_err(|e| failed(url, "waiting for git:", &e.to_string()))?;
        if !status.success() {
            return Err(failed(url, args[0], &String::from_utf8_lossy(&err)));
        }
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }
}

impl Upstream {
    /// Fetches `reference` (default: the default branch) of the repository at `url` into
    /// `workdir` (an empty scratch directory) and writes the tar of its tree there. `host` is
    /// the registry whose module named it (for metrics; no token is ever sent to a git host).
    pub async fn git_fetch(
        &self,
        host: &Hostname,
        url: &Url,
        reference: Option<&str>,
        workdir: &Path,
        limits: &GitLimits,
    ) -> Result<GitFetch> {
        let started = Instant::now();
        let result = self
            .git_fetch_inner(host, url, reference, workdir, limits)
            .await;
        self.observe(host, Operation::Git, started);
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(e) => e.outcome(),
        };
        self.count(host, Operation::Git, outcome);
        result
    }

    /// A git runner for `url` in `workdir`: the URL checked, its host resolved through the
    /// address policy and pinned, the origin CA added, the protocols allowed. Returns the URL
    /// to use (its port is `connect_to`'s when one applies).
    async fn git_for(
        &self,
        host: &Hostname,
        url: &Url,
        workdir: &Path,
        limits: &GitLimits,
    ) -> Result<(Git, Url)> {
        self.check_url(host, url)?;
        let mut url = url.clone();
        let name = url.host_str().unwrap_or_default().to_ascii_lowercase();
        let mut config = vec![
            "http.followRedirects=false".to_string(),
            "credential.helper=".to_string(),
            "core.askPass=".to_string(),
            "protocol.version=2".to_string(),
            "advice.detachedHead=false".to_string(),
        ];
        match &self.settings.proxy {
            Some(proxy) => config.push(format!("http.proxy={}", proxy.0)),
            None if url
                .host()
                .is_some_and(|h| matches!(h, url::Host::Domain(_))) =>
            {
                // Connect exactly where the address policy says this name may go.
                let found = self.resolver.lookup(&name).await.map_err(|e| {
                    if e.kind() == std::io::ErrorKind::PermissionDenied {
                        UpstreamError::Refused(format!("git {url}: {e}"))
                    } else {
                        UpstreamError::Connect(format!("git {url}: {e}"))
                    }
                })?;
                let addr = found[0];
                let port = match addr.port() {
                    // A `connect_to` override names its port; git only pins an address.
                    0 => url.port_or_known_default().unwrap_or(443),
                    p => p,
                };
                if url.port_or_known_default() != Some(port) {
                    let _ = url.set_port(Some(port));
                }
                let ip = match addr.ip() {
                    std::net::IpAddr::V6(v6) => format!("[{v6}]"),
                    v4 => v4.to_string(),
                };
                config.push(format!("http.curloptResolve={name}:{port}:{ip}"));
            }
            None => {}
        }
        if let Some(ca) = &self.settings.ca_file {
            config.push(format!(
                "http.sslCAInfo={}",
                bundle_with(ca, workdir)?.display()
            ));
        }
        let allow_protocols = if self.net_policy.http_hosts.contains(&name) {
            "https:http"
        } else {
            "https"
        };
        let repo = workdir.join("repo.git");
        let home = workdir.join("home");
        for dir in [&repo, &home] {
            std::fs::create_dir_all(dir)
                .map_err(|e| failed(&url, "scratch directory", &e.to_string()))?;
        }
        let git = Git {
            limits: limits.clone(),
            repo,
            home,
            config,
            allow_protocols,
        };
        Ok((git, url))
    }

    async fn git_fetch_inner(
        &self,
        host: &Hostname,
        url: &Url,
        reference: Option<&str>,
        workdir: &Path,
        limits: &GitLimits,
    ) -> Result<GitFetch> {
        let deadline = Instant::now() + limits.timeout;
        let (git, url) = self.git_for(host, url, workdir, limits).await?;
        git.run(&["init", "--quiet", "--bare"], deadline, &url)
            .await?;
        let wanted = reference.unwrap_or("HEAD");
        let shallow = git
            .run(
                &[
                    "fetch",
                    "--quiet",
                    "--no-tags",
                    "--depth",
                    "1",
                    url.as_str(),
                    wanted,
                ],
                deadline,
                &url,
            )
            .await;
        let commit = match shallow {
            Ok(_) => {
                git.run(&["rev-parse", "FETCH_HEAD^{commit}"], deadline, &url)
                    .await?
            }
            Err(e @ (UpstreamError::TooLarge(_) | UpstreamError::Timeout(_))) => return Err(e),
            // An abbreviated commit cannot be fetched by name: take every branch and tag, as
            // go-getter's full clone would, and look it up.
            Err(e)
                if reference.is_some_and(|r| {
                    (7..40).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_hexdigit())
                }) =>
            {
                tracing::debug!("shallow fetch of {wanted} failed ({e}); fetching all refs");
                git.run(
                    &[
                        "fetch",
                        "--quiet",
                        url.as_str(),
                        "+refs/heads/*:refs/heads/*",
                        "+refs/tags/*:refs/tags/*",
                    ],
                    deadline,
                    &url,
                )
                .await?;
                git.run(
                    &["rev-parse", "--verify", &format!("{wanted}^{{commit}}")],
                    deadline,
                    &url,
                )
                .await?
            }
            Err(e) => return Err(e),
        };
        let counted = git.run(&["count-objects", "-v"], deadline, &url).await?;
        let objects: u64 = counted
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(": ")?;
                matches!(k, "count" | "in-pack").then(|| v.trim().parse::<u64>().ok())?
            })
            .sum();
        if objects > limits.max_objects {
            return Err(UpstreamError::TooLarge(format!(
                "git {url}: {objects} objects, more than modules.max_git_objects ({})",
                limits.max_objects
            )));
        }
        if git
            .run(
                &["cat-file", "-e", &format!("{commit}:.gitmodules")],
                deadline,
                &url,
            )
            .await
            .is_ok()
        {
            return Err(UpstreamError::BadDocument(format!(
                "git {url} at {commit} uses git submodules, which this mirror does not fetch"
            )));
        }
        let tar = workdir.join("tree.tar");
        let out = tar.display().to_string();
        git.run(
            &["archive", "--format=tar", "-o", &out, &commit],
            deadline,
            &url,
        )
        .await?;
        Ok(GitFetch { commit, tar })
    }
}

impl Upstream {
    /// Where `reference` of the repository at `url` points now (`git ls-remote`), without
    /// fetching anything; `None` if the origin does not have it.
    pub async fn git_resolve(
        &self,
        host: &Hostname,
        url: &Url,
        reference: &str,
        workdir: &Path,
        limits: &GitLimits,
    ) -> Result<Option<String>> {
        let (git, url) = self.git_for(host, url, workdir, limits).await?;
        let deadline = Instant::now() + limits.timeout;
        let listed = git
            .run(&["ls-remote", url.as_str(), reference], deadline, &url)
            .await?;
        // An annotated tag lists its peeled commit as `<tag>^{}`: prefer that.
        let mut found = None;
        for line in listed.lines() {
            let Some((id, name)) = line.split_once('\t') else {
                continue;
            };
            if name.ends_with("^{}") || found.is_none() {
                found = Some(id.to_string());
            }
        }
        Ok(found)
    }
}

/// A CA bundle for git: the system's roots plus `extra` (git's `http.sslCAInfo` replaces the
/// system bundle rather than adding to it).
fn bundle_with(extra: &Path, dir: &Path) -> Result<PathBuf> {
    let mut pem = Vec::new();
    for system in [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/cert.pem",
    ] {
        if let Ok(bytes) = std::fs::read(system) {
            pem.extend_from_slice(&bytes);
            pem.push(b'\n');
            break;
        }
    }
    let extra_pem = std::fs::read(extra).map_err(|e| {
        UpstreamError::Connect(format!("upstream.ca_file {}: {e}", extra.display()))
    })?;
    pem.extend_from_slice(&extra_pem);
    let path = dir.join("ca-bundle.pem");
    std::fs::write(&path, pem)
        .map_err(|e| UpstreamError::Connect(format!("writing {}: {e}", path.display())))?;
    Ok(path)
}
