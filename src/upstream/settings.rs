//! `[upstream]`, validated (by `config`): what the origin client and the read-through flow
//! need. The types live here, with the client they configure; `config` builds them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use url::Url;

use crate::address::{Hostname, Platform};

/// `[upstream]`, validated: what the origin client and the read-through flow need.
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    pub allowed_hosts: Vec<Hostname>,
    /// Empty means every platform.
    pub platforms: Vec<Platform>,
    pub ca_file: Option<PathBuf>,
    pub hosts: BTreeMap<Hostname, HostSettings>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub archive_timeout: Duration,
    pub max_document_size: u64,
    pub max_archive_size: u64,
    pub max_redirects: usize,
    pub concurrency: usize,
    /// Never contact an origin; serve only what the cache holds.
    pub offline: bool,
    /// Let origins resolve to loopback, private, link-local and similar addresses.
    pub allow_private_networks: bool,
    /// The HTTP(S) proxy every origin request goes through, except to `connect_to` hosts.
    pub proxy: Option<ProxyUrl>,
    pub max_discovery_size: u64,
    /// Longest wait for the next bytes from an origin (including the response head).
    pub idle_timeout: Duration,
    pub max_response_headers: usize,
    pub max_header_list_size: u64,
    /// Most entries, and most bytes they may expand to, in an archive being hashed.
    pub max_zip_entries: usize,
    pub max_unpacked_size: u64,
    /// Extra attempts after a connection error, timeout, 429 or 5xx (not 501).
    pub retries: u32,
    pub retry_base_delay: Duration,
    /// Consecutive failures that open a host's circuit (0: never).
    pub breaker_failures: u32,
    pub breaker_cooldown: Duration,
}

impl UpstreamSettings {
    /// Whether the platform filter lets this platform through.
    pub fn platform_allowed(&self, p: &Platform) -> bool {
        self.platforms.is_empty() || self.platforms.contains(p)
    }

    /// Whether provider addresses on this registry host may be looked up at all.
    pub fn host_allowed(&self, h: &Hostname) -> bool {
        self.allowed_hosts.contains(h)
    }

    /// The bounds on hashing one archive (`upstream.max_zip_entries`, `max_unpacked_size`).
    pub fn hash_limits(&self) -> crate::hash::HashLimits {
        crate::hash::HashLimits {
            max_entries: self.max_zip_entries,
            max_uncompressed_bytes: self.max_unpacked_size,
        }
    }

    /// The settings of one registry host (empty when it has no `[upstream.hosts]` table).
    pub fn host(&self, h: &Hostname) -> HostSettings {
        self.hosts.get(h).cloned().unwrap_or_default()
    }
}

/// Per-registry settings from `[upstream.hosts."<hostname>"]`.
#[derive(Clone, Default)]
pub struct HostSettings {
    pub connect_to: Option<SocketAddr>,
    pub token: Option<String>,
    /// The user name sent with `token` to a git host (HTTP Basic).
    pub git_username: Option<String>,
    /// Overrides `upstream.require_signature` for this host.
    pub require_signature: Option<bool>,
    /// URLs on this host may use plain http.
    pub allow_http: bool,
}

impl std::fmt::Debug for HostSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSettings")
            .field("connect_to", &self.connect_to)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("git_username", &self.git_username)
            .field("require_signature", &self.require_signature)
            .field("allow_http", &self.allow_http)
            .finish()
    }
}

/// `upstream.proxy`: an `http://` or `https://` proxy URL, optionally with credentials, which
/// never appear in `Debug` or `Display` output.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyUrl(pub Url);

impl std::fmt::Display for ProxyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shown = self.0.clone();
        if shown.password().is_some() {
            let _ = shown.set_password(Some("***"));
        }
        write!(f, "{shown}")
    }
}

impl std::fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProxyUrl({self})")
    }
}
