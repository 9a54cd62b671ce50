//! The read-through git cache: bare copies of the origin repositories that configurations call
//! modules from directly (`git::https://<host>/<path>` sources), served to git clients by
//! `git upload-pack` (the smart HTTP protocol is `server::routes::git`'s).
//!
//! Each repository is kept at `<cache.dir>/git/<host>/<digest>.git`, the digest being the
//! SHA-256 of its path (so no path a client sends becomes a file name, and no two
//! repositories nest), with two files of provender's own inside: `provender-origin` (the
//! repository's `<host>/<path>`, for listings) and `provender-refreshed` (when it last matched
//! its origin, in Unix seconds). A repository **is cached** once `provender-refreshed` exists:
//! it is written only after a whole refresh succeeded. A refresh that failed is remembered for
//! `cache.not_found_ttl`, so clients asking meanwhile do not make the mirror ask that origin
//! again.
//!
//! A client's fetch starts with `info/refs`; that is when [`GitMirror::ready`] decides whether
//! to ask the origin: a repository refreshed within `git.refresh_after` is served as it is;
//! an older one is refreshed first (every branch and tag, pruned, `HEAD` as the origin has
//! it; see `Upstream::git_mirror` for the rules the fetch runs under), one refresh per
//! repository at a time however many clients ask. When the origin fails, a cached copy is
//! served as it is (stale-if-error, as for version lists), and said so in the log. A client
//! that may only read the cache (`fill = false`), or a mirror that is offline, gets the cached
//! copy or a refusal, never an origin fetch.
//!
//! Everything a client sends after `info/refs` (protocol v2's `ls-refs` and `fetch`, protocol
//! v0's negotiation) is answered by `git upload-pack --stateless-rpc` over the cached copy,
//! which never reaches the origin: what a client sees is what the cache has.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::address::GitRepo;
use crate::cache::Flights;
use crate::error::{Error, Result};
use crate::hash::Sha256;
use crate::upstream::UpstreamError;

use super::{Core, Reach};

/// provender's file naming the repository a directory holds.
const ORIGIN_FILE: &str = "provender-origin";
/// provender's file saying when the repository last matched its origin (Unix seconds).
const REFRESHED_FILE: &str = "provender-refreshed";
/// provender's file saying when a client last fetched from the repository (Unix seconds).
const USED_FILE: &str = "provender-used";
/// How often a repository's last use is written, at most.
const USE_RESOLUTION_SECS: u64 = 60;
/// Most bytes kept of what `git upload-pack` prints on standard error.
const MAX_STDERR: usize = 8 * 1024;
/// Largest piece of `git upload-pack`'s output sent at once.
const READ_CHUNK: usize = 64 * 1024;
/// How long a failed `git upload-pack`'s last words are waited for.
const STDERR_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Which git protocol a client speaks, from its `Git-Protocol` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitProtocol {
    V0,
    V2,
}

/// A cached repository, ready to be served.
#[derive(Debug, Clone)]
pub struct GitReady {
    dir: PathBuf,
}

/// One cached repository, for listings.
#[derive(Debug, Clone)]
pub struct CachedRepo {
    pub repo: GitRepo,
    /// When it last matched its origin (Unix seconds).
    pub refreshed: u64,
    /// When a client last fetched from it, or it was refreshed or imported if later (Unix
    /// seconds): what `prune` goes by.
    pub last_used: u64,
    /// Bytes on disk.
    pub size: u64,
    pub dir: PathBuf,
}

/// The git cache.
pub struct GitMirror {
    core: Arc<Core>,
    /// `<cache.dir>/git`.
    root: PathBuf,
    refreshes: Flights<GitRepo, (), Error>,
    /// Turns for `git upload-pack` processes (`git.max_concurrent_serves`).
    serving: Arc<tokio::sync::Semaphore>,
    /// The last failed refresh of each repository, and when: for `cache.not_found_ttl` no
    /// client makes the mirror ask that origin again (a repository it does not have, an
    /// outage), whatever a client asks.
    failures: std::sync::Mutex<std::collections::HashMap<GitRepo, (Instant, Error)>>,
}

impl GitMirror {
    pub fn new(core: Arc<Core>) -> Arc<GitMirror> {
        let root = core.settings().cache.dir.join("git");
        let serving = Arc::new(tokio::sync::Semaphore::new(
            core.settings().git.max_concurrent_serves,
        ));
        Arc::new(GitMirror {
            core,
            root,
            refreshes: Flights::default(),
            serving,
            failures: Default::default(),
        })
    }

    /// Where `repo` is kept.
    fn dir_of(&self, repo: &GitRepo) -> PathBuf {
        let digest = Sha256::of(repo.path().as_bytes());
        self.root
            .join(repo.host.as_str().replace(':', "_"))
            .join(format!("{}.git", &digest.as_str()[..32]))
    }

    /// When the copy at `dir` last matched its origin, if it is cached.
    fn refreshed_at(dir: &Path) -> Option<u64> {
        read_secs(&dir.join(REFRESHED_FILE))
    }

    /// Notes that a client fetched from the copy (at most once a minute per repository).
    pub fn record_use(&self, ready: &GitReady) {
        let now = crate::clock::now_secs();
        let file = ready.dir.join(USED_FILE);
        if read_secs(&file).is_some_and(|at| now.saturating_sub(at) < USE_RESOLUTION_SECS) {
            return;
        }
        if let Err(e) = std::fs::write(&file, now.to_string()) {
            tracing::debug!(repository = %ready.dir.display(), "cannot record a use: {e}");
        }
    }

    /// Removes a cached repository (waiting for a refresh or import of it to end): first what
    /// makes it cached, so no client is served half of it, then the rest.
    pub async fn remove(&self, cached: &CachedRepo) -> Result<()> {
        let _locked = lock_repo(&cached.dir).await?;
        remove_repo(&cached.dir).map_err(|e| Error::io("removing a git repository", e))
    }

    /// The cached copy of `repo`, refreshed from its origin first when it is older than
    /// `git.refresh_after` and `reach` allows (see the module header).
    pub async fn ready(&self, repo: &GitRepo, reach: &Reach) -> Result<GitReady> {
        self.allowed(repo)?;
        let settings = &self.core.settings().git;
        let dir = self.dir_of(repo);
        let refreshed = Self::refreshed_at(&dir);
        let now = crate::clock::now_secs();
        if refreshed.is_some_and(|at| now.saturating_sub(at) < settings.refresh_after.as_secs()) {
            return Ok(GitReady { dir });
        }
        let what = format!("git repository {repo}");
        let may_fetch = reach
            .check(&what)
            .and_then(|()| self.core.origin(&what).map(|_| ()).map_err(Error::from));
        if let Err(refused) = may_fetch {
            return match refreshed {
                Some(_) => Ok(GitReady { dir }),
                None => Err(refused),
            };
        }
        let recent_failure = {
            let mut failures = self.failures.lock().expect("git failures lock");
            let ttl = self.core.settings().cache.not_found_ttl;
            failures.retain(|_, (at, _)| at.elapsed() < ttl);
            failures.get(repo).map(|(_, e)| e.clone())
        };
        let result = match recent_failure {
            Some(e) => Err(e),
            None => {
                let (core, key, target) = (self.core.clone(), repo.clone(), dir.clone());
                let (result, leader) = self
                    .refreshes
                    .run(repo.clone(), move || refresh(core, key, target))
                    .await;
                if leader {
                    let outcome = match &result {
                        Ok(()) => "ok",
                        Err(e @ Error::Upstream(_)) if refreshed.is_some() && !is_too_large(e) => {
                            "stale"
                        }
                        Err(_) => "failed",
                    };
                    let refreshes = &self.core.metrics().git_refreshes;
                    refreshes.with_label_values(&[outcome]).inc();
                    if let Err(e) = &result {
                        let mut failures = self.failures.lock().expect("git failures lock");
                        failures.insert(repo.clone(), (Instant::now(), e.clone()));
                    }
                }
                result
            }
        };
        match (result, refreshed) {
            (Ok(()), _) => Ok(GitReady { dir }),
            // The origin failed: what the cache has is still good to serve.
            (Err(e @ Error::Upstream(_)), Some(_)) if !is_too_large(&e) => {
                tracing::warn!(repository = %repo, "serving the cached copy: {e}");
                Ok(GitReady { dir })
            }
            (Err(e), _) => Err(e),
        }
    }

    /// The cached copy of `repo` as it is, for the requests after `info/refs` (which ask about
    /// what it advertised, so no refresh); 404 if it is not cached.
    pub fn cached_copy(&self, repo: &GitRepo) -> Result<GitReady> {
        self.allowed(repo)?;
        let dir = self.dir_of(repo);
        match Self::refreshed_at(&dir) {
            Some(_) => Ok(GitReady { dir }),
            None => Err(Error::NotFound(format!(
                "git repository {repo} is not cached: a fetch starts with info/refs"
            ))),
        }
    }

    fn allowed(&self, repo: &GitRepo) -> Result<()> {
        if self.core.settings().git.host_allowed(&repo.host) {
            return Ok(());
        }
        Err(Error::Forbidden(format!(
            "git repositories on {} are not served here (git.allowed_hosts)",
            repo.host
        )))
    }

    /// The answer to `info/refs?service=git-upload-pack`: the references (protocol v0) or the
    /// capabilities (v2), as `git upload-pack --advertise-refs` prints them.
    pub async fn advertise(&self, ready: &GitReady, protocol: GitProtocol) -> Result<Bytes> {
        let mut body = self
            .upload_pack(ready, protocol, true, Bytes::new())
            .await?;
        let mut out = Vec::new();
        while let Some(piece) = body.next().await {
            out.extend_from_slice(&piece.map_err(|e| Error::io("git upload-pack", e))?);
        }
        Ok(Bytes::from(out))
    }

    /// `git upload-pack --stateless-rpc` over the cached copy, given one request of the
    /// client's (its commands, or its wants and haves): its output, as it comes. At most
    /// `git.max_concurrent_serves` run at once (more wait for a turn); each is stopped when the
    /// stream is dropped (the client went away) or at `git.serve_timeout`, whether or not the
    /// client reads.
    pub async fn upload_pack(
        &self,
        ready: &GitReady,
        protocol: GitProtocol,
        advertise: bool,
        request: Bytes,
    ) -> Result<BoxStream<'static, io::Result<Bytes>>> {
        let settings = &self.core.settings().git;
        let permit = self
            .serving
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let mut cmd = self.isolated_git()?;
        if protocol == GitProtocol::V2 {
            cmd.env("GIT_PROTOCOL", "version=2");
        }
        cmd.args(["upload-pack", "--stateless-rpc", "--strict"]);
        if advertise {
            cmd.arg("--advertise-refs");
        }
        cmd.arg(&ready.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::io("starting git upload-pack", e))?;
        let mut stdin = child.stdin.take().expect("piped");
        tokio::spawn(async move {
            // A client's request is at most `git.max_request_size`; git reads it all before it
            // answers, and a write error means git stopped early (its status says why).
            let _ = stdin.write_all(&request).await;
        });
        let stderr = child.stderr.take().expect("piped");
        let stderr = tokio::spawn(async move {
            let mut kept = Vec::new();
            let _ = stderr.take(MAX_STDERR as u64).read_to_end(&mut kept).await;
            kept
        });
        let stdout = child.stdout.take().expect("piped");
        // The watchdog owns the process: it reports how it ended, or stops it at the deadline or
        // once the stream is gone (`stop` dropped), and holds the turn until then.
        let deadline = Instant::now() + settings.serve_timeout;
        let (ended, status) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _turn = permit;
            let outcome = tokio::select! {
                status = child.wait() => status,
                _ = tokio::time::sleep_until(deadline.into()) => {
                    let _ = child.kill().await;
                    Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "git upload-pack took longer than git.serve_timeout",
                    ))
                }
                _ = stopped => {
                    let _ = child.kill().await;
                    Err(io::Error::other("the client went away"))
                }
            };
            let _ = ended.send(outcome);
        });
        let state = Running {
            stdout,
            status: Some(status),
            stderr: Some(stderr),
            _stop: stop,
            dir: ready.dir.clone(),
        };
        Ok(
            futures_util::stream::unfold(Some(state), |state| async move {
                let mut running = state?;
                match running.next().await {
                    Ok(Some(piece)) => Some((Ok(piece), Some(running))),
                    Ok(None) => None,
                    Err(e) => Some((Err(e), None)),
                }
            })
            .boxed(),
        )
    }

    /// A `git` command isolated from the machine: no system or user configuration (an empty
    /// `HOME`), no prompts; repositories are trusted whoever owns them (an `import` run by
    /// another user than the server's), which only configuration from the environment can say.
    fn isolated_git(&self) -> Result<tokio::process::Command> {
        let home = self.root.join(".home");
        std::fs::create_dir_all(&home).map_err(|e| Error::io("creating git's home", e))?;
        let mut cmd = tokio::process::Command::new(&self.core.settings().git.limits.program);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "safe.directory")
            .env("GIT_CONFIG_VALUE_0", "*");
        Ok(cmd)
    }

    /// Directories of repositories that never finished a first refresh or import (the process
    /// stopped during it), last changed before `before`: never served, only `prune` removes them.
    pub fn unfinished(&self, before: std::time::SystemTime) -> Vec<PathBuf> {
        self.repo_dirs()
            .filter(|dir| {
                let old = dir
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t < before);
                dir.is_dir() && Self::refreshed_at(dir).is_none() && old
            })
            .collect()
    }

    /// Every entry of a host's directory in the git cache (repositories, their lock files).
    fn repo_dirs(&self) -> impl Iterator<Item = PathBuf> {
        let hosts = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten();
        hosts.flat_map(|host| {
            let entries = std::fs::read_dir(host.path())
                .into_iter()
                .flatten()
                .flatten();
            entries.map(|entry| entry.path())
        })
    }

    /// Removes a directory [`GitMirror::unfinished`] found, once no refresh or import of it
    /// runs.
    pub async fn remove_unfinished(&self, dir: &Path) -> Result<()> {
        let _locked = lock_repo(dir).await?;
        if Self::refreshed_at(dir).is_some() {
            return Ok(());
        }
        std::fs::remove_dir_all(dir).map_err(|e| Error::io("removing a git repository", e))
    }

    /// Every cached repository.
    pub fn cached(&self) -> Vec<CachedRepo> {
        let mut found = Vec::new();
        for dir in self.repo_dirs() {
            let Some(refreshed) = Self::refreshed_at(&dir) else {
                continue;
            };
            let Ok(origin) = std::fs::read_to_string(dir.join(ORIGIN_FILE)) else {
                continue;
            };
            if let Ok(repo) = GitRepo::parse(origin.trim()) {
                let used = read_secs(&dir.join(USED_FILE)).unwrap_or_default();
                found.push(CachedRepo {
                    repo,
                    refreshed,
                    last_used: used.max(refreshed),
                    size: crate::fsio::dir_size(&dir),
                    dir,
                });
            }
        }
        found.sort_by(|a, b| a.repo.cmp(&b.repo));
        found
    }
}

/// A cached repository written out as one `git bundle` ([`GitMirror::bundle_to`]).
#[derive(Debug, Clone)]
pub struct GitBundled {
    pub size: u64,
    pub sha256: Sha256,
    /// The branch `HEAD` names, if any.
    pub head: Option<String>,
    /// Every reference the bundle holds, and the object it names.
    pub refs: std::collections::BTreeMap<String, String>,
}

impl GitMirror {
    /// Runs a local `git args` in `dir` (a cached repository), isolated like `upload-pack`;
    /// what it printed, or why it failed.
    async fn local_git(&self, dir: &Path, args: &[&str]) -> Result<String> {
        let out = self
            .isolated_git()?
            .arg("-C")
            .arg(dir)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| Error::io("running git", e))?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            return Err(Error::unexpected(format!(
                "git {} in {}: {}",
                args.first().copied().unwrap_or_default(),
                dir.display(),
                said.trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The commit `reference` (a branch, tag or commit; `HEAD` when none) names in the cached
    /// copy.
    pub async fn resolve(&self, ready: &GitReady, reference: Option<&str>) -> Result<String> {
        let reference = reference.unwrap_or("HEAD");
        if !crate::upstream::valid_reference(reference) {
            return Err(Error::NotFound(format!(
                "{reference:?} is not a valid git reference"
            )));
        }
        let wanted = format!("{reference}^{{commit}}");
        self.local_git(
            &ready.dir,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &wanted,
            ],
        )
        .await
        .map(|id| id.trim().to_string())
        .map_err(|_| Error::NotFound(format!("no branch, tag or commit {reference}")))
    }

    /// Every reference of the repository at `dir`, and where its `HEAD` points.
    async fn refs_of(
        &self,
        dir: &Path,
    ) -> Result<(std::collections::BTreeMap<String, String>, Option<String>)> {
        let listed = self
            .local_git(dir, &["for-each-ref", "--format=%(objectname) %(refname)"])
            .await?;
        let refs = listed
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(id, name)| (name.to_string(), id.to_string()))
            .collect::<std::collections::BTreeMap<_, _>>();
        let head = self
            .local_git(dir, &["symbolic-ref", "--quiet", "HEAD"])
            .await
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| refs.contains_key(h));
        Ok((refs, head))
    }

    /// Writes the cached `repo` as one `git bundle` of all its references to `out`; `None` if
    /// it has no reference (git makes no empty bundle).
    pub async fn bundle_to(&self, cached: &CachedRepo, out: &Path) -> Result<Option<GitBundled>> {
        let (current, head) = self.refs_of(&cached.dir).await?;
        if current.is_empty() {
            return Ok(None);
        }
        let target = out.to_string_lossy().into_owned();
        self.local_git(
            &cached.dir,
            &["bundle", "create", "--quiet", &target, "--all"],
        )
        .await?;
        // The references are the bundle's own, whatever a refresh changed meanwhile.
        let listed = self
            .local_git(&cached.dir, &["bundle", "list-heads", &target])
            .await?;
        let refs: std::collections::BTreeMap<String, String> = listed
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(_, name)| name.starts_with("refs/"))
            .map(|(id, name)| (name.to_string(), id.to_string()))
            .collect();
        let head = head.filter(|h| refs.contains_key(h));
        let file = out.to_path_buf();
        let digest = tokio::task::spawn_blocking(move || -> io::Result<crate::hash::Digest> {
            let mut hashing = crate::hash::Hashing::bare();
            let mut reader = std::fs::File::open(&file)?;
            let mut buf = vec![0u8; READ_CHUNK];
            loop {
                let n = io::Read::read(&mut reader, &mut buf)?;
                if n == 0 {
                    return Ok(hashing.digest());
                }
                hashing.update(&buf[..n]).map_err(io::Error::other)?;
            }
        })
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
        .map_err(|e| Error::io("reading a git bundle", e))?;
        Ok(Some(GitBundled {
            size: digest.size,
            sha256: digest.sha256,
            head,
            refs,
        }))
    }

    /// Admits `repo` from a `git bundle` whose bytes the caller checked against a manifest:
    /// git verifies the bundle and every object it fetches from it, the repository must end up
    /// with exactly the `refs` the manifest names, and `HEAD` is set to `head`. The repository
    /// counts as cached (and refreshed now) only once all of that holds.
    pub async fn admit_bundle(
        &self,
        repo: &GitRepo,
        file: &Path,
        head: Option<&str>,
        refs: &std::collections::BTreeMap<String, String>,
    ) -> Result<()> {
        let dir = self.dir_of(repo);
        let _locked = lock_repo(&dir).await?;
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating a git repository", e))?;
        if !dir.join("HEAD").exists() {
            self.local_git(&dir, &["init", "--quiet", "--bare", "--template="])
                .await?;
        }
        let bundle = file.to_string_lossy().into_owned();
        self.local_git(&dir, &["bundle", "verify", "--quiet", &bundle])
            .await?;
        self.local_git(
            &dir,
            &[
                "fetch",
                "--quiet",
                "--atomic",
                "--prune",
                "--no-write-fetch-head",
                "--end-of-options",
                &bundle,
                "+refs/heads/*:refs/heads/*",
                "+refs/tags/*:refs/tags/*",
            ],
        )
        .await?;
        let (got, _) = self.refs_of(&dir).await?;
        if &got != refs {
            let differs = refs
                .iter()
                .find(|(name, id)| got.get(*name) != Some(*id))
                .map(|(name, _)| name)
                .or_else(|| got.keys().find(|name| !refs.contains_key(*name)));
            return Err(Error::unexpected(format!(
                "git repository {repo}: after the import its references are not the manifest's \
                 ({} differs)",
                differs.map_or("one", String::as_str)
            )));
        }
        if let Some(head) = head {
            self.local_git(&dir, &["symbolic-ref", "HEAD", head])
                .await?;
        }
        record_refreshed(&dir, repo)
    }
}

/// Unix seconds written in `file`, if it holds them.
fn read_secs(file: &Path) -> Option<u64> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Marks the copy at `dir` as cached and matching its origin now.
fn record_refreshed(dir: &Path, repo: &GitRepo) -> Result<()> {
    let now = crate::clock::now_secs().to_string();
    crate::fsio::write_atomic(&dir.join(ORIGIN_FILE), repo.to_string().as_bytes())
        .and_then(|()| crate::fsio::write_atomic(&dir.join(REFRESHED_FILE), now.as_bytes()))
        .map_err(|e| Error::io("recording a git refresh", e))
}

/// A running `git upload-pack` whose output is being sent.
struct Running {
    stdout: tokio::process::ChildStdout,
    /// How the process ended, from its watchdog.
    status: Option<tokio::sync::oneshot::Receiver<io::Result<std::process::ExitStatus>>>,
    stderr: Option<tokio::task::JoinHandle<Vec<u8>>>,
    /// Dropped with the stream: the watchdog then stops the process.
    _stop: tokio::sync::oneshot::Sender<()>,
    dir: PathBuf,
}

impl Running {
    /// The next piece of output; `None` once git ended well, an error if it did not (the
    /// client's body then ends in an error, not in a short pack taken for a whole one).
    async fn next(&mut self) -> io::Result<Option<Bytes>> {
        let mut buf = vec![0u8; READ_CHUNK];
        let n = self.stdout.read(&mut buf).await?;
        if n > 0 {
            buf.truncate(n);
            return Ok(Some(Bytes::from(buf)));
        }
        let status = match self.status.take() {
            Some(ended) => ended
                .await
                .unwrap_or_else(|_| Err(io::Error::other("git upload-pack's watchdog ended")))?,
            None => return Ok(None),
        };
        if status.success() {
            return Ok(None);
        }
        // What git said, if it said it in time (a child of it may hold the pipe open).
        let said = match self.stderr.take() {
            Some(task) => tokio::time::timeout(STDERR_GRACE, task)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let said = String::from_utf8_lossy(&said);
        tracing::info!(repository = %self.dir.display(), %status, "git upload-pack failed: {}", said.trim());
        Err(io::Error::other(format!(
            "git upload-pack failed ({status})"
        )))
    }
}

fn is_too_large(e: &Error) -> bool {
    matches!(e, Error::Upstream(UpstreamError::TooLarge(_)))
}

/// One refresh of `repo` into `dir` from its origin (the work of a flight).
async fn refresh(core: Arc<Core>, repo: GitRepo, dir: PathBuf) -> Result<()> {
    let what = format!("git repository {repo}");
    let upstream = core.origin(&what)?;
    let _locked = lock_repo(&dir).await?;
    let scratch = core
        .scratch_dir()
        .map_err(|e| Error::io("creating a scratch directory", e))?;
    let limits = &core.settings().git.limits;
    let url = repo.origin_url();
    match upstream
        .git_mirror(&repo.host, &url, &dir, scratch.path(), limits)
        .await
    {
        Ok(mirrored) => {
            tracing::debug!(repository = %repo, head = ?mirrored.head, "git repository refreshed");
            record_refreshed(&dir, &repo)
        }
        Err(e) => {
            if matches!(e, UpstreamError::TooLarge(_)) {
                // Past its bounds, the repository is not kept at all.
                tracing::warn!(repository = %repo, "dropping the cached copy: {e}");
                let _ = remove_repo(&dir);
            } else if GitMirror::refreshed_at(&dir).is_none() {
                // A first fetch that failed leaves nothing: the repository was never served.
                let _ = std::fs::remove_dir_all(&dir);
            }
            Err(e.into())
        }
    }
}

/// An exclusive lock on the repository at `dir` (the file `<dir>.lock` beside it), held until
/// dropped: refreshes, imports and removals of one repository take turns, also across
/// processes (a server, `seed`, `import` and `prune` on one cache).
async fn lock_repo(dir: &Path) -> Result<std::fs::File> {
    let parent = dir
        .parent()
        .expect("a repository lies in a host's directory");
    std::fs::create_dir_all(parent).map_err(|e| Error::io("creating the git cache", e))?;
    let path = dir.with_extension("lock");
    tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(file)
    })
    .await
    .unwrap_or_else(|e| Err(io::Error::other(e)))
    .map_err(|e| Error::io("locking a git repository", e))
}

/// Removes the repository at `dir`: first what makes it cached, so no client is served half
/// of it, then the rest.
fn remove_repo(dir: &Path) -> io::Result<()> {
    match std::fs::remove_file(dir.join(REFRESHED_FILE)) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::remove_dir_all(dir)
}
