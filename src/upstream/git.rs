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
//!   provender's own settings travel in `GIT_CONFIG_*` variables, never on the command line
//!   (where a proxy's credentials would be visible to every user of the machine);
//! - references from an origin must be well-formed (`git check-ref-format` rules, no leading
//!   `-`) and every value from outside follows `--end-of-options`;
//! - a deadline, and caps on the repository's bytes (watched while it downloads), its objects,
//!   and the `git archive` of the tree, counted as git writes it and stopped at the cap: a small
//!   pack whose trees point many times at one large blob cannot fill the disk;
//! - attributes from the repository cannot change the archive: `export-subst` (which expands
//!   `$Format:...$` placeholders, some of them relative to now) and `export-ignore` are
//!   neutralised, so a commit always gives the same bytes, as a `git clone` would see them.
//!
//! The `git` in use must be [`MIN_GIT`] or later (`GIT_CONFIG_COUNT`, `--end-of-options`,
//! `http.curloptResolve`); [`probe`] checks it once at start-up, and without it git sources are
//! refused. Only the wanted reference is fetched (`--depth 1`); an abbreviated commit, which a
//! shallow fetch cannot name, falls back to fetching every branch and tag. The commit it
//! resolved to is returned, to be recorded with the package.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use url::Url;

use super::{Credential, Operation, Outcome, Result, Upstream, UpstreamError};
use crate::address::Hostname;

/// The oldest git provender runs: `GIT_CONFIG_COUNT` came in 2.31 (`--end-of-options` in 2.24,
/// `http.curloptResolve` in 2.20).
pub const MIN_GIT: (u32, u32) = (2, 31);

/// Most bytes kept of what a git command prints (other than an archive).
const MAX_OUTPUT: u64 = 1 << 20;
/// Most bytes kept of what it prints on standard error (the end is what matters).
const MAX_STDERR: usize = 16 * 1024;

/// Bounds on one git fetch.
#[derive(Debug, Clone)]
pub struct GitLimits {
    /// The `git` executable.
    pub program: PathBuf,
    /// Most bytes the fetched repository may take on disk.
    pub max_bytes: u64,
    /// Most objects it may hold.
    pub max_objects: u64,
    /// Most bytes its `git archive` may have: what a package within the unpacking limits can
    /// take ([`crate::package::PackLimits::max_tar_stream`]).
    pub max_archive: u64,
    pub timeout: Duration,
    /// The settings errors name for `max_bytes` and `timeout`.
    pub size_key: &'static str,
    pub timeout_key: &'static str,
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

/// Checks that `program` is a git provender can use safely ([`MIN_GIT`] or later); returns its
/// version, or why git sources cannot be fetched.
pub fn probe(program: &Path) -> std::result::Result<(u32, u32), String> {
    let out = std::process::Command::new(program)
        .arg("--version")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("modules.git {}: cannot run it: {e}", program.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = parse_version(&text).ok_or_else(|| {
        format!(
            "modules.git {}: {:?} is not a git version",
            program.display(),
            text.trim()
        )
    })?;
    if version < MIN_GIT {
        return Err(format!(
            "modules.git {} is git {}.{}; fetching git sources safely needs {}.{} or later",
            program.display(),
            version.0,
            version.1,
            MIN_GIT.0,
            MIN_GIT.1
        ));
    }
    Ok(version)
}

/// `git version 2.47.3` (or `git version 2.39.5 (Apple Git-154)`) -> `(2, 47)`.
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let rest = text.trim().strip_prefix("git version ")?;
    let mut parts = rest.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether `reference` may be handed to git: a branch, tag or commit name as
/// `git check-ref-format --allow-onelevel` accepts it, and nothing git could read as an option.
pub fn valid_reference(reference: &str) -> bool {
    let bad_char = |c: char| c.is_ascii_control() || " ~^:?*[\\".contains(c);
    !reference.is_empty()
        && reference.len() <= 255
        && !reference.starts_with('-')
        && !reference.contains("..")
        && !reference.contains("@{")
        && reference != "@"
        && !reference.chars().any(bad_char)
        && !reference.ends_with('.')
        && reference
            .split('/')
            .all(|part| !part.is_empty() && !part.starts_with('.') && !part.ends_with(".lock"))
}

/// A full commit id as git prints it (SHA-1 or SHA-256).
fn is_commit_id(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Copies `from` to `to` until it ends; `Ok(None)` once more than `max` bytes came.
async fn copy_capped(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    max: u64,
) -> std::io::Result<Option<u64>> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            to.flush().await?;
            return Ok(Some(total));
        }
        total += n as u64;
        if total > max {
            return Ok(None);
        }
        to.write_all(&buf[..n]).await?;
    }
}

/// The last [`MAX_STDERR`] bytes of `from`, read to its end.
async fn tail_of(mut from: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 8 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > MAX_STDERR {
            kept.drain(..kept.len() - MAX_STDERR);
        }
    }
    kept
}

/// Stops `child` and everything it started: `child` leads its own process group (started with
/// `process_group(0)`), so its helpers (`pack-objects` under `upload-pack`, `remote-https` and
/// `index-pack` under `fetch`) end with it instead of running on until their next write. The
/// group is signalled only while `child` is not yet reaped (its id then still names it).
pub async fn kill_group(child: &mut tokio::process::Child) {
    if let Some(pid) = child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(id as i32))
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill().await;
}

/// `git` invocations in `repo`, isolated from the machine's configuration.
struct Git {
    limits: GitLimits,
    repo: PathBuf,
    home: PathBuf,
    /// `key=value` settings, passed as `GIT_CONFIG_KEY_<n>` / `GIT_CONFIG_VALUE_<n>`.
    config: Vec<(&'static str, String)>,
    allow_protocols: &'static str,
}

/// What a git command's standard output is for.
enum Sink<'a> {
    /// Kept, up to [`MAX_OUTPUT`] bytes, and returned.
    Collect,
    /// Written to this file, up to `max` bytes; past them the command is stopped.
    File { path: &'a Path, max: u64 },
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
            .env("GIT_CONFIG_COUNT", self.config.len().to_string());
        for (n, (key, value)) in self.config.iter().enumerate() {
            cmd.env(format!("GIT_CONFIG_KEY_{n}"), key)
                .env(format!("GIT_CONFIG_VALUE_{n}"), value);
        }
        cmd.arg("-C")
            .arg(&self.repo)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        cmd
    }

    /// Runs git to completion within the deadline and returns what it printed.
    async fn run(&self, args: &[&str], deadline: Instant, url: &Url) -> Result<String> {
        self.run_into(args, deadline, url, Sink::Collect).await
    }

    /// Runs git to completion within the deadline, killing it if the repository grows past the
    /// byte cap or it prints more than its sink takes. Returns what it printed, for
    /// [`Sink::Collect`].
    async fn run_into(
        &self,
        args: &[&str],
        deadline: Instant,
        url: &Url,
        sink: Sink<'_>,
    ) -> Result<String> {
        let mut child = self
            .command(args)
            .spawn()
            .map_err(|e| failed(url, "cannot start git:", &e.to_string()))?;
        let mut stdout = child.stdout.take().expect("piped");
        let stderr = tokio::spawn(tail_of(child.stderr.take().expect("piped")));
        let mut collected = Vec::new();
        let (mut file, max) = match sink {
            Sink::Collect => (None, MAX_OUTPUT),
            Sink::File { path, max } => {
                let f = tokio::fs::File::create(path)
                    .await
                    .map_err(|e| failed(url, "writing", &format!("{}: {e}", path.display())))?;
                (Some(tokio::io::BufWriter::new(f)), max)
            }
        };
        let copied = {
            let copying = async {
                match &mut file {
                    Some(f) => copy_capped(&mut stdout, f, max).await,
                    None => copy_capped(&mut stdout, &mut collected, max).await,
                }
            };
            tokio::pin!(copying);
            let mut ticker = tokio::time::interval(Duration::from_millis(200));
            loop {
                tokio::select! {
                    done = &mut copying => break done,
                    _ = ticker.tick() => {
                        if crate::fsio::dir_size(&self.repo) > self.limits.max_bytes {
                            kill_group(&mut child).await;
                            return Err(UpstreamError::TooLarge(format!(
                                "git {url}: the repository grew past {} ({} bytes)",
                                self.limits.size_key,
                                self.limits.max_bytes
                            )));
                        }
                    }
                    _ = tokio::time::sleep_until(deadline.into()) => {
                        kill_group(&mut child).await;
                        return Err(self.timed_out(url));
                    }
                }
            }
        };
        match copied {
            Ok(Some(_)) => {}
            Ok(None) => {
                kill_group(&mut child).await;
                return Err(UpstreamError::TooLarge(match file {
                    Some(_) => format!(
                        "git {url}: `git {}` wrote more than {max} bytes, more than a package \
                         within modules.max_unpacked_size and modules.max_entries can take",
                        args[0]
                    ),
                    None => format!("git {url}: `git {}` printed more than {max} bytes", args[0]),
                }));
            }
            Err(e) => {
                kill_group(&mut child).await;
                return Err(failed(url, args[0], &e.to_string()));
            }
        }
        let status = tokio::select! {
            status = child.wait() => status
                .map_err(|e| failed(url, "waiting for git:", &e.to_string()))?,
            _ = tokio::time::sleep_until(deadline.into()) => {
                kill_group(&mut child).await;
                return Err(self.timed_out(url));
            }
        };
        if !status.success() {
            let err = stderr.await.unwrap_or_default();
            return Err(failed(url, args[0], &String::from_utf8_lossy(&err)));
        }
        Ok(String::from_utf8_lossy(&collected).trim().to_string())
    }

    fn timed_out(&self, url: &Url) -> UpstreamError {
        UpstreamError::Timeout(format!(
            "git {url}: not done within {} ({:?})",
            self.limits.timeout_key, self.limits.timeout
        ))
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
        let fetch = self.git_fetch_inner(host, url, reference, workdir, limits);
        self.counted_git(host, fetch).await
    }

    /// Runs one git operation on `host`'s origin, timed and counted as `Operation::Git`.
    async fn counted_git<T>(
        &self,
        host: &Hostname,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = work.await;
        self.observe(host, Operation::Git, started);
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(e) => e.outcome(),
        };
        self.count(host, Operation::Git, outcome);
        result
    }

    /// A git runner for `url` in `workdir`: git's version checked, the URL checked, its host
    /// resolved through the address policy and pinned, the origin CA added, the protocols
    /// allowed. Returns the URL to use (its port is `connect_to`'s when one applies).
    async fn git_for(
        &self,
        host: &Hostname,
        url: &Url,
        reference: Option<&str>,
        workdir: &Path,
        limits: &GitLimits,
    ) -> Result<(Git, Url)> {
        if let Err(why) = &self.git_ready {
            return Err(UpstreamError::Refused(format!(
                "git {url}: git sources cannot be fetched: {why}"
            )));
        }
        if let Some(r) = reference.filter(|r| !valid_reference(r)) {
            return Err(UpstreamError::BadDocument(format!(
                "git {url}: {r:?} is not a valid git reference"
            )));
        }
        self.check_url(host, url)?;
        let mut url = url.clone();
        let name = url.host_str().unwrap_or_default().to_ascii_lowercase();
        let mut config = vec![
            ("http.followRedirects", "false".to_string()),
            ("credential.helper", String::new()),
            ("core.askPass", String::new()),
            ("protocol.version", "2".to_string()),
            ("advice.detachedHead", "false".to_string()),
            // An origin that stops sending is given up after `upstream.idle_timeout`, as every
            // other origin request is (curl's own default waits for ever).
            ("http.lowSpeedLimit", "1".to_string()),
            (
                "http.lowSpeedTime",
                self.settings.idle_timeout.as_secs().max(1).to_string(),
            ),
        ];
        match &self.settings.proxy {
            Some(proxy) => {
                config.push(("http.proxy", proxy.0.to_string()));
                // Credentials in the proxy's URL are sent with the first CONNECT, as for every
                // other origin request (curl's default first asks without them).
                config.push(("http.proxyAuthMethod", "basic".to_string()));
            }
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
                config.push(("http.curloptResolve", format!("{name}:{port}:{ip}")));
            }
            None => {}
        }
        if let Some(ca) = &self.settings.ca_file {
            config.push((
                "http.sslCAInfo",
                bundle_with(ca, workdir)?.display().to_string(),
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
        let (git, url) = self.git_for(host, url, reference, workdir, limits).await?;
        git.run(&["init", "--quiet", "--bare"], deadline, &url)
            .await?;
        // The repository's own attributes may not change what is archived (see the module
        // header); `info/attributes` takes precedence over every `.gitattributes` in the tree.
        let info = git.repo.join("info");
        std::fs::create_dir_all(&info)
            .and_then(|()| {
                std::fs::write(info.join("attributes"), "* -export-subst -export-ignore\n")
            })
            .map_err(|e| failed(&url, "scratch directory", &e.to_string()))?;
        let wanted = reference.unwrap_or("HEAD");
        let shallow = git
            .run(
                &[
                    "fetch",
                    "--quiet",
                    "--no-tags",
                    "--depth",
                    "1",
                    "--end-of-options",
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
                        "--end-of-options",
                        url.as_str(),
                        "+refs/heads/*:refs/heads/*",
                        "+refs/tags/*:refs/tags/*",
                    ],
                    deadline,
                    &url,
                )
                .await?;
                git.run(
                    &[
                        "rev-parse",
                        "--verify",
                        "--end-of-options",
                        &format!("{wanted}^{{commit}}"),
                    ],
                    deadline,
                    &url,
                )
                .await?
            }
            Err(e) => return Err(e),
        };
        if !is_commit_id(&commit) {
            return Err(failed(
                &url,
                "rev-parse",
                &format!("{commit:?} is no commit id"),
            ));
        }
        let objects = count_objects(&git, deadline, &url).await?;
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
        git.run_into(
            &["archive", "--format=tar", "--end-of-options", &commit],
            deadline,
            &url,
            Sink::File {
                path: &tar,
                max: limits.max_archive,
            },
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
        let (git, url) = self
            .git_for(host, url, Some(reference), workdir, limits)
            .await?;
        let deadline = Instant::now() + limits.timeout;
        let listed = git
            .run(
                &["ls-remote", "--end-of-options", url.as_str(), reference],
                deadline,
                &url,
            )
            .await?;
        // An annotated tag lists its peeled commit as `<tag>^{}`: prefer that.
        let mut found = None;
        for line in listed.lines() {
            let Some((id, name)) = line.split_once('\t') else {
                continue;
            };
            if !is_commit_id(id) {
                continue;
            }
            if name.ends_with("^{}") || found.is_none() {
                found = Some(id.to_string());
            }
        }
        Ok(found)
    }
}

/// A cached repository brought up to date by [`Upstream::git_mirror`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirrored {
    /// The branch the origin's `HEAD` names (`refs/heads/...`), if it names one.
    pub head: Option<String>,
}

impl Upstream {
    /// Brings the bare repository `repo` up to date with the origin at `url`: every branch
    /// and tag, pruned, its `HEAD` pointing where the origin's does, under the same rules as
    /// [`Upstream::git_fetch`] (address policy, no redirects, https only, settings off the
    /// command line), within `limits` (the whole repository's bytes, its objects, a deadline).
    /// The host's `token` from `[upstream.hosts]` goes to that host alone, as HTTP Basic.
    ///
    /// References move only when the whole fetch succeeded (`--atomic`); a fetch stopped
    /// half-way leaves the repository as it was, apart from temporary files the next refresh
    /// removes. A repository past `max_objects` after the fetch is reported as too large: the
    /// caller drops it.
    pub async fn git_mirror(
        &self,
        host: &Hostname,
        url: &Url,
        repo: &Path,
        scratch: &Path,
        limits: &GitLimits,
    ) -> Result<Mirrored> {
        let refresh = self.git_mirror_inner(host, url, repo, scratch, limits);
        self.counted_git(host, refresh).await
    }

    async fn git_mirror_inner(
        &self,
        host: &Hostname,
        url: &Url,
        repo: &Path,
        scratch: &Path,
        limits: &GitLimits,
    ) -> Result<Mirrored> {
        let deadline = Instant::now() + limits.timeout;
        // A host that goes via a centre is refreshed from the centre's git door
        // (`<via>git/<host>/<path>`), with the centre's credential; git checks every object.
        let via = self.settings.via(host);
        let url = match via {
            Some(via) => via
                .url
                .join(&format!("git/{host}{}", url.path()))
                .map_err(|e| {
                    UpstreamError::BadDocument(format!("git {url} via {}: {e}", via.host))
                })?,
            None => url.clone(),
        };
        let (mut git, url) = self.git_for(host, &url, None, scratch, limits).await?;
        let credential = match via {
            Some(_) => match self.credential_for(host, &url) {
                Some((owner, credential)) => Some((
                    "x-access-token".to_string(),
                    self.bearer(owner, credential).await?,
                )),
                None => None,
            },
            None => {
                let hs = self.settings.host(host);
                let user = hs
                    .git_username
                    .unwrap_or_else(|| "x-access-token".to_string());
                let credential = match (hs.token, hs.token_file) {
                    (Some(token), _) => Some(Credential::Token(token)),
                    (None, Some(path)) => Some(Credential::File(path)),
                    (None, None) => None,
                };
                match credential {
                    Some(credential) => Some((user, self.bearer(host, &credential).await?)),
                    None => None,
                }
            }
        };
        if let Some((user, token)) = credential {
            use base64::Engine as _;
            let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"));
            git.config
                .push(("http.extraHeader", format!("Authorization: Basic {basic}")));
        }
        // Ask the origin first (from the scratch repository): a path it does not have leaves
        // nothing in the cache. One small answer: an origin that accepts connections but does
        // not answer is given up after `upstream.connect_timeout` and `idle_timeout` (git has no
        // connect timeout of its own; curl's default is five minutes).
        let asking = (Instant::now() + self.settings.connect_timeout + self.settings.idle_timeout)
            .min(deadline);
        let symref = git
            .run(
                &[
                    "ls-remote",
                    "--symref",
                    "--end-of-options",
                    url.as_str(),
                    "HEAD",
                ],
                asking,
                &url,
            )
            .await
            .map_err(|e| not_found(e, &url))?;
        // The fetch may not start git's housekeeping, which would outlive its deadline.
        git.config.push(("gc.auto", "0".to_string()));
        git.config.push(("maintenance.auto", "false".to_string()));
        // The cache's repositories may belong to another user (an `import` run as root).
        git.config.push(("safe.directory", "*".to_string()));
        git.repo = repo.to_path_buf();
        std::fs::create_dir_all(repo)
            .map_err(|e| failed(&url, "cache directory", &e.to_string()))?;
        remove_leftovers(repo);
        if !repo.join("HEAD").exists() {
            // No template: no sample hooks, nothing in the repository but git's own.
            git.run(
                &["init", "--quiet", "--bare", "--template="],
                deadline,
                &url,
            )
            .await?;
        }
        let before = refs_of(&git, deadline, &url).await?;
        let head = symref.lines().find_map(|line| {
            let target = line.strip_prefix("ref: ")?.strip_suffix("\tHEAD")?;
            let branch = target.strip_prefix("refs/heads/")?;
            valid_reference(branch).then(|| target.to_string())
        });
        git.run(
            &[
                "fetch",
                "--quiet",
                "--prune",
                "--no-tags",
                "--atomic",
                "--no-write-fetch-head",
                "--end-of-options",
                url.as_str(),
                "+refs/heads/*:refs/heads/*",
                "+refs/tags/*:refs/tags/*",
            ],
            deadline,
            &url,
        )
        .await?;
        let after = refs_of(&git, deadline, &url).await?;
        if rewound(&git, &before, &after, deadline, &url).await {
            // The origin deleted or rewrote references: what only they reached may be what it
            // scrubbed (a leaked secret). Protocol v2 serves any object a repository holds, so
            // the copy keeps only what its references reach now.
            git.run(&["repack", "-a", "-d", "-q"], deadline, &url)
                .await?;
            git.run(&["prune", "--expire=now"], deadline, &url).await?;
        }
        let objects = count_objects(&git, deadline, &url).await?;
        if objects > limits.max_objects {
            return Err(UpstreamError::TooLarge(format!(
                "git {url}: {objects} objects, more than git.max_objects ({})",
                limits.max_objects
            )));
        }
        if let Some(target) = &head {
            // The origin's default branch, for clients that ask without a ref.
            git.run(&["symbolic-ref", "HEAD", target], deadline, &url)
                .await?;
        }
        Ok(Mirrored { head })
    }
}

/// An origin's "no such repository" (git says `repository '...' not found` for a 404) as a
/// 404 of the origin's, so the client gets a 404 too; other failures as they are.
fn not_found(e: UpstreamError, url: &Url) -> UpstreamError {
    match e {
        UpstreamError::Connect(msg) if msg.contains("not found") => UpstreamError::Status {
            what: format!("git ls-remote {url}"),
            status: 404,
        },
        e => e,
    }
}

/// Every reference of the repository and the object it names.
async fn refs_of(
    git: &Git,
    deadline: Instant,
    url: &Url,
) -> Result<std::collections::BTreeMap<String, String>> {
    let listed = git
        .run(
            &["for-each-ref", "--format=%(objectname) %(refname)"],
            deadline,
            url,
        )
        .await?;
    Ok(listed
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(id, name)| (name.to_string(), id.to_string()))
        .collect())
}

/// Whether a fetch deleted a reference or moved one other than forward (a force-push, a
/// moved tag): objects only the old ones reached may now be unreachable.
async fn rewound(
    git: &Git,
    before: &std::collections::BTreeMap<String, String>,
    after: &std::collections::BTreeMap<String, String>,
    deadline: Instant,
    url: &Url,
) -> bool {
    for (name, old) in before {
        match after.get(name) {
            None => return true,
            Some(new) if new == old => {}
            Some(new) => {
                let forward = git
                    .run(
                        &["merge-base", "--is-ancestor", "--end-of-options", old, new],
                        deadline,
                        url,
                    )
                    .await
                    .is_ok();
                if !forward {
                    return true;
                }
            }
        }
    }
    false
}

/// The objects in a repository, loose and packed.
async fn count_objects(git: &Git, deadline: Instant, url: &Url) -> Result<u64> {
    let counted = git.run(&["count-objects", "-v"], deadline, url).await?;
    Ok(counted
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(": ")?;
            matches!(k, "count" | "in-pack").then(|| v.trim().parse::<u64>().ok())?
        })
        .sum())
}

/// Removes what a git stopped half-way may have left in `repo`: temporary packs and lock
/// files. The caller holds the repository's lock (refreshes, imports and removals of it take
/// turns, across processes), so none of them is in use.
fn remove_leftovers(repo: &Path) {
    let pack = repo.join("objects").join("pack");
    for entry in std::fs::read_dir(&pack).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with("tmp_") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let is_lock = |path: &Path| path.extension().is_some_and(|e| e == "lock");
    for entry in std::fs::read_dir(repo).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) && is_lock(&entry.path()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let mut stack = vec![repo.join("refs")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t) if t.is_file() && is_lock(&path) => {
                    let _ = std::fs::remove_file(path);
                }
                _ => {}
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_follow_check_ref_format() {
        for good in [
            "main",
            "v1.2.0",
            "release/1.x",
            "feature_x-y",
            "0123abc",
            "a@b",
            "e83c5163316f89bfbde7d9ab23ca2e25604af290",
        ] {
            assert!(valid_reference(good), "{good}");
        }
        for bad in [
            "",
            "-c",
            "--upload-pack=touch /tmp/x",
            "a..b",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[b",
            "a\\b",
            "@",
            "a@{1}",
            "a.",
            "a/",
            "/a",
            "a//b",
            ".hidden",
            "a/.b",
            "a.lock",
            "a/b.lock/c",
            "a\u{7f}b",
            "a\nb",
        ] {
            assert!(!valid_reference(bad), "{bad:?}");
        }
        assert!(!valid_reference(&"a".repeat(256)));
    }

    #[test]
    fn settings_travel_in_the_environment_not_on_the_command_line() {
        let secret = "http://user:s3cret@proxy.example:3128";
        let git = Git {
            limits: GitLimits {
                program: PathBuf::from("git"),
                max_bytes: 1,
                max_objects: 1,
                max_archive: 1,
                timeout: Duration::from_secs(1),
                size_key: "modules.max_git_size",
                timeout_key: "modules.git_timeout",
            },
            repo: PathBuf::from("repo.git"),
            home: PathBuf::from("home"),
            config: vec![
                ("http.followRedirects", "false".into()),
                ("http.proxy", secret.into()),
            ],
            allow_protocols: "https",
        };
        let cmd = git.command(&["fetch", "--end-of-options", "https://example.com/x.git"]);
        let cmd = cmd.as_std();
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(
            !args.iter().any(|a| a.contains("s3cret") || a == "-c"),
            "{args:?}"
        );
        let env: std::collections::HashMap<String, String> = cmd
            .get_envs()
            .filter_map(|(k, v)| {
                Some((
                    k.to_string_lossy().into_owned(),
                    v?.to_string_lossy().into_owned(),
                ))
            })
            .collect();
        assert_eq!(env["GIT_CONFIG_COUNT"], "2");
        assert_eq!(env["GIT_CONFIG_KEY_1"], "http.proxy");
        assert_eq!(env["GIT_CONFIG_VALUE_1"], secret);
        assert_eq!(env["GIT_CONFIG_KEY_0"], "http.followRedirects");
    }

    #[test]
    fn git_versions_are_read() {
        assert_eq!(parse_version("git version 2.47.3\n"), Some((2, 47)));
        assert_eq!(
            parse_version("git version 2.39.5 (Apple Git-154)"),
            Some((2, 39))
        );
        assert_eq!(parse_version("git version 2.31.0.windows.1"), Some((2, 31)));
        assert_eq!(parse_version("hg 6.1"), None);
        assert!((2, 30) < MIN_GIT && (2, 31) >= MIN_GIT && (3, 0) > MIN_GIT);
    }

    #[test]
    fn a_missing_or_old_git_is_refused() {
        let missing = probe(Path::new("/nonexistent/git")).unwrap_err();
        assert!(missing.contains("modules.git"), "{missing}");
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("git");
        std::fs::write(&old, "#!/bin/sh\necho 'git version 2.20.1'\n").unwrap();
        #[cfg(unix)]
        std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let why = probe(&old).unwrap_err();
        assert!(why.contains("2.20") && why.contains("2.31"), "{why}");
        assert!(probe(Path::new("git")).is_ok(), "the git on PATH is usable");
    }
}
