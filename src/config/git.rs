//! `[git]`: the git door's cache of repositories, its bounds and its turns.

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, invalid};
use crate::address::Hostname;

/// `[git]`: the read-through cache of git repositories that configurations call modules from
/// directly (`git::https://...` sources).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GitConfig {
    /// The hosts whose repositories may be fetched and served; empty: the git door is closed.
    pub allowed_hosts: Vec<String>,
    /// How long a repository is served from the cache before a client's `info/refs` makes
    /// the mirror ask its origin for new commits again.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub refresh_after: Duration,
    /// Most bytes one cached repository may take on disk.
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_repository_size: bytesize::ByteSize,
    /// Most objects one cached repository may hold.
    pub max_objects: u64,
    /// Longest refresh from an origin.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub fetch_timeout: Duration,
    /// Largest request body a client may send (its wants and haves).
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_request_size: bytesize::ByteSize,
    /// Longest a client's fetch may take to be answered.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub serve_timeout: Duration,
    /// Most packs made at once (`git upload-pack` for a fetch); more requests wait for a
    /// turn. Advertisements have as many turns of their own.
    pub max_concurrent_serves: usize,
    /// Most of those turns one client holds at once (its name, or its address when
    /// authentication is off); its further requests wait.
    pub max_serves_per_client: usize,
    /// Longest a client may leave the next piece of an answer unread before its
    /// `git upload-pack` is stopped and its turn freed.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub stall_timeout: Duration,
    /// Most refreshes from origins at once, in total.
    pub max_concurrent_refreshes: usize,
    /// Most refreshes from one origin host at once; past it (or past
    /// `max_concurrent_refreshes`) a cached copy is served as it is, and a repository not cached
    /// yet is answered 503 with `Retry-After`.
    pub max_refreshes_per_host: usize,
    /// Most bytes the whole git cache may take; past it, the repositories used least recently
    /// are removed (never the one just refreshed).
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_size: bytesize::ByteSize,
    /// Hosts that name a repository case-insensitively and with or without `.git`
    /// (`Acme/X`, `acme/x.git` and `acme/x` are one repository there).
    pub forge_hosts: Vec<String>,
}

impl Default for GitConfig {
    fn default() -> Self {
        GitConfig {
            allowed_hosts: Vec::new(),
            refresh_after: Duration::from_secs(60),
            max_repository_size: bytesize::ByteSize::gib(2),
            max_objects: 2_000_000,
            fetch_timeout: Duration::from_secs(600),
            max_request_size: bytesize::ByteSize::mib(16),
            serve_timeout: Duration::from_secs(600),
            max_concurrent_serves: 16,
            max_serves_per_client: 4,
            stall_timeout: Duration::from_secs(60),
            max_concurrent_refreshes: 8,
            max_refreshes_per_host: 4,
            max_size: bytesize::ByteSize::gib(20),
            forge_hosts: vec![
                "github.com".into(),
                "gitlab.com".into(),
                "bitbucket.org".into(),
            ],
        }
    }
}

/// `[git]`, validated.
#[derive(Debug, Clone)]
pub struct GitSettings {
    pub allowed_hosts: Vec<Hostname>,
    pub refresh_after: Duration,
    /// Bounds on one refresh from an origin (`modules.git` is the program).
    pub limits: crate::upstream::GitLimits,
    /// `git.max_request_size`, in bytes.
    pub max_request_size: u64,
    pub serve_timeout: Duration,
    pub max_concurrent_serves: usize,
    pub max_serves_per_client: usize,
    pub stall_timeout: Duration,
    pub max_concurrent_refreshes: usize,
    pub max_refreshes_per_host: usize,
    /// `git.max_size`, in bytes.
    pub max_size: u64,
    pub forge_hosts: Vec<Hostname>,
}

impl GitSettings {
    /// Whether repositories on `host` may be fetched and served.
    pub fn host_allowed(&self, host: &Hostname) -> bool {
        self.allowed_hosts.contains(host)
    }

    /// Whether `host` names repositories case-insensitively and with or without `.git`.
    pub fn is_forge(&self, host: &Hostname) -> bool {
        self.forge_hosts.contains(host)
    }
}

impl GitConfig {
    /// `[git]`; `program` is `modules.git`.
    pub(super) fn validate(&self, program: &std::path::Path) -> Result<GitSettings, ConfigError> {
        let mut allowed_hosts = Vec::new();
        for (i, h) in self.allowed_hosts.iter().enumerate() {
            let host = Hostname::parse(h)
                .map_err(|e| invalid(format!("git.allowed_hosts[{i}]"), e.to_string()))?;
            allowed_hosts.push(host);
        }
        for (key, size) in [
            ("git.max_repository_size", self.max_repository_size),
            ("git.max_request_size", self.max_request_size),
        ] {
            if size.as_u64() < 1024 {
                return Err(invalid(key, "must be at least 1 KiB"));
            }
        }
        if self.max_objects == 0 {
            return Err(invalid("git.max_objects", "must be at least 1"));
        }
        for (key, value) in [
            ("git.max_concurrent_serves", self.max_concurrent_serves),
            ("git.max_serves_per_client", self.max_serves_per_client),
            (
                "git.max_concurrent_refreshes",
                self.max_concurrent_refreshes,
            ),
            ("git.max_refreshes_per_host", self.max_refreshes_per_host),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        if self.max_size.as_u64() < 1024 {
            return Err(invalid("git.max_size", "must be at least 1 KiB"));
        }
        let mut forge_hosts = Vec::new();
        for (i, h) in self.forge_hosts.iter().enumerate() {
            let host = Hostname::parse(h)
                .map_err(|e| invalid(format!("git.forge_hosts[{i}]"), e.to_string()))?;
            forge_hosts.push(host);
        }
        for (key, value) in [
            ("git.fetch_timeout", self.fetch_timeout),
            ("git.serve_timeout", self.serve_timeout),
            ("git.stall_timeout", self.stall_timeout),
        ] {
            if value.is_zero() {
                return Err(invalid(key, "must be longer than zero"));
            }
        }
        Ok(GitSettings {
            allowed_hosts,
            refresh_after: self.refresh_after,
            limits: crate::upstream::GitLimits {
                program: program.to_path_buf(),
                max_bytes: self.max_repository_size.as_u64(),
                max_objects: self.max_objects,
                // A cached repository is served as it is, never archived.
                max_archive: 0,
                timeout: self.fetch_timeout,
                size_key: "git.max_repository_size",
                timeout_key: "git.fetch_timeout",
            },
            max_request_size: self.max_request_size.as_u64(),
            serve_timeout: self.serve_timeout,
            max_concurrent_serves: self.max_concurrent_serves,
            max_serves_per_client: self.max_serves_per_client,
            stall_timeout: self.stall_timeout,
            max_concurrent_refreshes: self.max_concurrent_refreshes,
            max_refreshes_per_host: self.max_refreshes_per_host,
            max_size: self.max_size.as_u64(),
            forge_hosts,
        })
    }

    /// The hosts named, as written (they may have `upstream.hosts` entries).
    pub(super) fn hosts(&self) -> impl Iterator<Item = String> + '_ {
        self.allowed_hosts.iter().map(|h| h.to_ascii_lowercase())
    }
}
