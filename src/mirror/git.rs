//! The read-through git cache: bare copies of the origin repositories that configurations call
//! modules from directly (`git::https://<host>/<path>` sources), served to git clients by
//! `git upload-pack` (the smart HTTP protocol is `server::routes::git`'s).
//!
//! Each repository is kept at `<cache.dir>/git/<host>/<digest>.git`, the digest being the
//! SHA-256 of its path (so no path a client sends becomes a file name, and no two
//! repositories nest; on `git.forge_hosts`, which ignore case and a trailing `.git`, of the
//! path in lower case without `.git`, so every spelling shares one copy, refreshed from the
//! name it was first filled with), with two files of provender's own inside: `provender-origin` (the
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
//! repository at a time however many clients ask, at most `git.max_concurrent_refreshes` in
//! all and `git.max_refreshes_per_host` per host (past them: the cached copy as it is, or 503
//! with `Retry-After`). A client of a cached copy waits for a refresh at most
//! `upstream.connect_timeout`, then gets the copy while the refresh goes on. When the origin
//! fails, a cached copy is served as it is (stale-if-error, as for version lists), and said
//! so in the log. After a refresh, the repositories used least recently are removed until
//! the cache fits `git.max_size`. A client
//! that may only read the cache (`fill = false`), or a mirror that is offline, gets the cached
//! copy or a refusal, never an origin fetch.
//!
//! Everything a client sends after `info/refs` (protocol v2's `ls-refs` and `fetch`, protocol
//! v0's negotiation) is answered by `git upload-pack --stateless-rpc` over the cached copy,
//! which never reaches the origin: what a client sees is what the cache has. Each runs with a
//! turn ([`GitMirror::turn`]): advertisements and `ls-refs` from turns of their own, packs
//! from the client's `git.max_serves_per_client` and then all clients'
//! `git.max_concurrent_serves`; a client that stops reading loses its turn after
//! `git.stall_timeout`.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::address::{GitRepo, Hostname};
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

/// Which pool a `git upload-pack` takes its turn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnKind {
    /// An advertisement (`info/refs`) or protocol v2's `ls-refs`: short, and never waiting
    /// behind packs.
    Listing,
    /// A pack (v2 `fetch`, v0's negotiation): one of `git.max_concurrent_serves`, and of the
    /// client's `git.max_serves_per_client`.
    Pack,
}

/// A turn to run one `git upload-pack`, held until it ends.
pub struct GitTurn {
    _permits: Vec<tokio::sync::OwnedSemaphorePermit>,
}

/// How long a client that found every refresh slot taken is told to wait (`Retry-After`).
const REFRESH_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// The last failed refresh of each repository (by its identity), and when.
type Failures = Arc<std::sync::Mutex<std::collections::HashMap<String, (Instant, Error)>>>;

/// The git cache.
pub struct GitMirror {
    core: Arc<Core>,
    /// `<cache.dir>/git`.
    root: PathBuf,
    /// Refreshes in progress, by repository identity ([`GitMirror::identity`]).
    refreshes: Flights<String, (), Error>,
    /// Turns for packs (`git.max_concurrent_serves`).
    serving: Arc<tokio::sync::Semaphore>,
    /// Turns for advertisements and `ls-refs` (as many again): packs never hold them up.
    listing: Arc<tokio::sync::Semaphore>,
    /// Each client's turns for packs (`git.max_serves_per_client`), by client.
    clients: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Semaphore>>>,
    /// Refreshes from origins at once (`git.max_concurrent_refreshes`), and per host.
    refreshing: Arc<tokio::sync::Semaphore>,
    refreshing_hosts:
        std::sync::Mutex<std::collections::HashMap<Hostname, Arc<tokio::sync::Semaphore>>>,
    /// The last failed refresh of each repository, and when: for `cache.not_found_ttl` no
    /// client makes the mirror ask that origin again (a repository it does not have, an
    /// outage), whatever a client asks.
    failures: Failures,
}

impl GitMirror {
    pub fn new(core: Arc<Core>) -> Arc<GitMirror> {
        let root = core.settings().cache.dir.join("git");
        let settings = &core.settings().git;
        let semaphore = |n: usize| Arc::new(tokio::sync::Semaphore::new(n));
        Arc::new(GitMirror {
            root,
            refreshes: Flights::default(),
            serving: semaphore(settings.max_concurrent_serves),
            listing: semaphore(settings.max_concurrent_serves),
            clients: Default::default(),
            refreshing: semaphore(settings.max_concurrent_refreshes),
            refreshing_hosts: Default::default(),
            failures: Default::default(),
            core,
        })
    }

    /// What makes two names one repository: the path as written, except on a
    /// `git.forge_hosts` host, which ignores case and a trailing `.git`.
    fn identity(&self, repo: &GitRepo) -> String {
        if !self.core.settings().git.is_forge(&repo.host) {
            return repo.path().to_string();
        }
        let path = repo.path().to_ascii_lowercase();
        match path.strip_suffix(".git") {
            Some(bare) if !bare.is_empty() => bare.to_string(),
            _ => path,
        }
    }

    /// Where `repo` is kept.
    fn dir_of(&self, repo: &GitRepo) -> PathBuf {
        let digest = Sha256::of(self.identity(repo).as_bytes());
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

    /// A slot for one more refresh from `host`'s origin, if one is free (per host and in
    /// total).
    fn refresh_slot(&self, host: &Hostname) -> Option<Vec<tokio::sync::OwnedSemaphorePermit>> {
        let per_host = {
            let mut hosts = self.refreshing_hosts.lock().expect("refresh slots lock");
            let n = self.core.settings().git.max_refreshes_per_host;
            hosts
                .entry(host.clone())
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(n)))
                .clone()
        };
        let host_slot = per_host.try_acquire_owned().ok()?;
        let slot = self.refreshing.clone().try_acquire_owned().ok()?;
        Some(vec![host_slot, slot])
    }

    /// The cached copy of `repo`, refreshed from its origin first when it is older than
    /// `git.refresh_after` and `reach` allows (see the module header).
    pub async fn ready(&self, repo: &GitRepo, reach: &Reach) -> Result<GitReady> {
        self.allowed(repo)?;
        let settings = &self.core.settings().git;
        let id = self.identity(repo);
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
            failures.get(&id).map(|(_, e)| e.clone())
        };
        let result = match recent_failure {
            Some(e) => Err(e),
            None => {
                let flight = match self.refreshes.join(&id) {
                    Some(flight) => flight,
                    None => {
                        let Some(slot) = self.refresh_slot(&repo.host) else {
                            return match refreshed {
                                Some(_) => {
                                    tracing::info!(repository = %repo, "every refresh slot is taken (git.max_concurrent_refreshes, git.max_refreshes_per_host): serving the cached copy");
                                    Ok(GitReady { dir })
                                }
                                None => Err(Error::Busy {
                                    message: format!(
                                        "git repository {repo}: the mirror is refreshing as \
                                         many repositories as it may at once \
                                         (git.max_concurrent_refreshes, \
                                         git.max_refreshes_per_host); try again shortly"
                                    ),
                                    retry_after: REFRESH_RETRY_AFTER,
                                }),
                            };
                        };
                        let job = RefreshJob {
                            core: self.core.clone(),
                            root: self.root.clone(),
                            repo: repo.clone(),
                            id: id.clone(),
                            dir: dir.clone(),
                            was_cached: refreshed.is_some(),
                            failures: self.failures.clone(),
                            _slot: slot,
                        };
                        self.refreshes.begin(id.clone(), move || job.run()).0
                    }
                };
                match refreshed {
                    // A client of a cached copy waits no longer for a refresh than for any
                    // origin's answer to start: past that, it gets the copy, and the refresh
                    // goes on for the next client.
                    Some(_) => {
                        let wait = self.core.settings().upstream.connect_timeout;
                        match tokio::time::timeout(wait, flight).await {
                            Ok(result) => result,
                            Err(_) => {
                                tracing::info!(repository = %repo, "serving the cached copy while its refresh goes on");
                                return Ok(GitReady { dir });
                            }
                        }
                    }
                    None => flight.await,
                }
            }
        };
        match (result, refreshed) {
            (Ok(()), _) => Ok(GitReady { dir }),
            // The origin failed: what the cache has is still good to serve.
            (Err(e @ Error::Upstream(_)), Some(_)) if !is_too_large(&e) => {
                tracing::warn!(repository = %repo, "serving the cached copy: {e}");
                Ok(GitReady { dir })
            }
            (Err(Error::Upstream(UpstreamError::Status { status: 404, .. })), None) => {
                Err(Error::NotFound(format!(
                    "git repository {repo}: its origin has no such repository"
                )))
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

    /// Whether the repository is served at all: its host is allowed (`git.allowed_hosts`) and
    /// no version-policy rule without `versions` refuses it.
    fn allowed(&self, repo: &GitRepo) -> Result<()> {
        if !self.core.settings().git.host_allowed(&repo.host) {
            return Err(Error::Forbidden(format!(
                "git repositories on {} are not served here (git.allowed_hosts)",
                repo.host
            )));
        }
        self.core
            .judge_unversioned(crate::policy::Kind::Git, &repo.to_string())
    }

    /// A turn to run one `git upload-pack` for `client` (its name, or its address when
    /// authentication is off): a pack waits for one of the client's own turns first, then for
    /// one of all; a listing only for a listing turn.
    pub async fn turn(&self, client: &str, kind: TurnKind) -> GitTurn {
        let closed = "the semaphore is never closed";
        let mut permits = Vec::new();
        match kind {
            TurnKind::Listing => {
                permits.push(self.listing.clone().acquire_owned().await.expect(closed));
            }
            TurnKind::Pack => {
                let own = {
                    let mut clients = self.clients.lock().expect("client turns lock");
                    if !clients.contains_key(client) {
                        // Forget clients with no turn held or awaited.
                        clients.retain(|_, turns| Arc::strong_count(turns) > 1);
                    }
                    let n = self.core.settings().git.max_serves_per_client;
                    clients
                        .entry(client.to_string())
                        .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(n)))
                        .clone()
                };
                permits.push(own.acquire_owned().await.expect(closed));
                permits.push(self.serving.clone().acquire_owned().await.expect(closed));
            }
        }
        GitTurn { _permits: permits }
    }

    /// The answer to `info/refs?service=git-upload-pack`: the references (protocol v0) or the
    /// capabilities (v2), as `git upload-pack --advertise-refs` prints them.
    pub async fn advertise(&self, ready: &GitReady, protocol: GitProtocol) -> Result<Bytes> {
        let turn = self.turn("", TurnKind::Listing).await;
        let mut body = self
            .upload_pack(ready, protocol, true, Bytes::new(), turn)
            .await?;
        let mut out = Vec::new();
        while let Some(piece) = body.next().await {
            out.extend_from_slice(&piece.map_err(|e| Error::io("git upload-pack", e))?);
        }
        Ok(Bytes::from(out))
    }

    /// `git upload-pack --stateless-rpc` over the cached copy, given one request of the
    /// client's (its commands, or its wants and haves) and its `turn`: its output, as it comes.
    /// It is stopped, with its whole process group, and the turn freed, when the stream is
    /// dropped (the client went away), when a piece of output waits for the client longer than
    /// `git.stall_timeout` (it stopped reading), or at `git.serve_timeout`.
    pub async fn upload_pack(
        &self,
        ready: &GitReady,
        protocol: GitProtocol,
        advertise: bool,
        request: Bytes,
        turn: GitTurn,
    ) -> Result<BoxStream<'static, io::Result<Bytes>>> {
        let settings = &self.core.settings().git;
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
        // The watchdog owns the process: it reports how it ended, or stops it at the deadline,
        // when the client stalls, or once the stream is gone (`stop` dropped), and holds the
        // turn until then.
        let deadline = Instant::now() + settings.serve_timeout;
        let stall = settings.stall_timeout;
        let waiting = Arc::new(Waiting::new());
        let (ended, status) = tokio::sync::oneshot::channel();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let watched = waiting.clone();
        let dir = ready.dir.clone();
        tokio::spawn(async move {
            let _turn = turn;
            let mut ticks = tokio::time::interval((stall / 4).max(Duration::from_millis(50)));
            let outcome = loop {
                tokio::select! {
                    status = child.wait() => break status,
                    _ = tokio::time::sleep_until(deadline.into()) => {
                        crate::upstream::kill_group(&mut child).await;
                        break Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "git upload-pack took longer than git.serve_timeout",
                        ));
                    }
                    _ = &mut stopped => {
                        crate::upstream::kill_group(&mut child).await;
                        break Err(io::Error::other("the client went away"));
                    }
                    _ = ticks.tick() => {
                        if watched.for_longer_than(stall) {
                            tracing::info!(repository = %dir.display(), "stopping git upload-pack: the client read nothing for git.stall_timeout");
                            crate::upstream::kill_group(&mut child).await;
                            break Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "the client read nothing for git.stall_timeout",
                            ));
                        }
                    }
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
            waiting,
        };
        Ok(
            futures_util::stream::unfold(Some(state), |state| async move {
                let mut running = state?;
                running.waiting.clear();
                match running.next().await {
                    Ok(Some(piece)) => {
                        running.waiting.start();
                        Some((Ok(piece), Some(running)))
                    }
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
            .env("GIT_CONFIG_KEY_0", "safe.directory")
            .env("GIT_CONFIG_VALUE_0", "*")
            // What a client may ask for by id: what the references reach (as GitHub serves),
            // never any object (v0; v2 serves what the copy holds, and refreshes drop what no
            // reference reaches any more, see `Upstream::git_mirror`).
            .env("GIT_CONFIG_KEY_1", "uploadpack.allowAnySHA1InWant")
            .env("GIT_CONFIG_VALUE_1", "false")
            .env("GIT_CONFIG_KEY_2", "uploadpack.allowReachableSHA1InWant")
            .env("GIT_CONFIG_VALUE_2", "true")
            .env("GIT_CONFIG_COUNT", "3")
            // Its own process group, so stopping it stops its `pack-objects` too.
            .process_group(0);
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
        repo_dirs_in(&self.root)
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
        cached_in(&self.root)
    }
}

/// Every entry of a host's directory under `root` (repositories, their lock files).
fn repo_dirs_in(root: &Path) -> impl Iterator<Item = PathBuf> + use<> {
    let hosts = std::fs::read_dir(root).into_iter().flatten().flatten();
    hosts.flat_map(|host| {
        let entries = std::fs::read_dir(host.path())
            .into_iter()
            .flatten()
            .flatten();
        entries.map(|entry| entry.path())
    })
}

/// Every cached repository under `root`.
fn cached_in(root: &Path) -> Vec<CachedRepo> {
    let mut found = Vec::new();
    for dir in repo_dirs_in(root) {
        let Some(refreshed) = GitMirror::refreshed_at(&dir) else {
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
    /// Whether a piece handed on waits for the client, for the watchdog.
    waiting: Arc<Waiting>,
}

/// Since when a piece of `git upload-pack`'s output has waited for the client to take it: the
/// stream asks for the next piece only once the connection took the last, so a client that
/// stops reading leaves one waiting.
struct Waiting {
    base: Instant,
    /// Milliseconds after `base`, plus one; zero while nothing waits.
    since: AtomicU64,
}

impl Waiting {
    fn new() -> Waiting {
        Waiting {
            base: Instant::now(),
            since: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
    }

    fn start(&self) {
        self.since.store(self.now(), Ordering::Relaxed);
    }

    fn clear(&self) {
        self.since.store(0, Ordering::Relaxed);
    }

    fn for_longer_than(&self, limit: Duration) -> bool {
        let since = self.since.load(Ordering::Relaxed);
        since != 0 && self.now().saturating_sub(since) >= limit.as_millis() as u64
    }
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

/// One refresh, the work of a flight: it holds its refresh slot, and counts, remembers and
/// cleans up after itself whether or not a client still waits for it.
struct RefreshJob {
    core: Arc<Core>,
    root: PathBuf,
    repo: GitRepo,
    id: String,
    dir: PathBuf,
    /// Whether a copy was cached before (a failure then serves it: "stale").
    was_cached: bool,
    failures: Failures,
    _slot: Vec<tokio::sync::OwnedSemaphorePermit>,
}

impl RefreshJob {
    async fn run(self) -> Result<()> {
        let result = refresh(self.core.clone(), self.repo.clone(), self.dir.clone()).await;
        let outcome = match &result {
            Ok(()) => "ok",
            Err(e @ Error::Upstream(_)) if self.was_cached && !is_too_large(e) => "stale",
            Err(_) => "failed",
        };
        let refreshes = &self.core.metrics().git_refreshes;
        refreshes.with_label_values(&[outcome]).inc();
        match &result {
            Ok(()) => evict(&self.core, &self.root, &self.dir).await,
            Err(e) => {
                let mut failures = self.failures.lock().expect("git failures lock");
                failures.insert(self.id.clone(), (Instant::now(), e.clone()));
            }
        }
        result
    }
}

/// Keeps the git cache within `git.max_size`: removes the repositories used least recently
/// until it fits, never `keep` (the one just refreshed).
async fn evict(core: &Core, root: &Path, keep: &Path) {
    let max = core.settings().git.max_size;
    let scan = root.to_path_buf();
    let Ok(mut repos) = tokio::task::spawn_blocking(move || cached_in(&scan)).await else {
        return;
    };
    let mut total: u64 = repos.iter().map(|r| r.size).sum();
    if total <= max {
        return;
    }
    repos.sort_by_key(|r| r.last_used);
    for old in repos {
        if total <= max {
            break;
        }
        if old.dir == keep {
            continue;
        }
        let removed = match lock_repo(&old.dir).await {
            Ok(_locked) => remove_repo(&old.dir),
            Err(e) => Err(io::Error::other(e.to_string())),
        };
        match removed {
            Ok(()) => {
                total = total.saturating_sub(old.size);
                tracing::info!(repository = %old.repo, bytes = old.size, "removed from the git cache, the least recently used past git.max_size");
            }
            Err(e) => {
                tracing::warn!(repository = %old.repo, "cannot remove from the git cache: {e}")
            }
        }
    }
}

/// One refresh of `repo` into `dir` from its origin: the origin the copy was first filled
/// from, when it names one (another spelling of the same repository asked this time).
async fn refresh(core: Arc<Core>, repo: GitRepo, dir: PathBuf) -> Result<()> {
    let what = format!("git repository {repo}");
    let upstream = core.origin(&what)?;
    let _locked = lock_repo(&dir).await?;
    let repo = std::fs::read_to_string(dir.join(ORIGIN_FILE))
        .ok()
        .and_then(|text| GitRepo::parse(text.trim()).ok())
        .filter(|first| first.host == repo.host)
        .unwrap_or(repo);
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
