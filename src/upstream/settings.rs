//! `[upstream]`, validated (from `UpstreamConfig`, in `upstream/config.rs`): what the origin
//! client and the read-through flow need. The types live here, with the client they configure.

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

    /// The other mirror that `h`'s requests go to instead of `h` (`upstream.hosts.*.via`).
    pub fn via(&self, h: &Hostname) -> Option<&Via> {
        self.hosts.get(h).and_then(|hs| hs.via.as_ref())
    }

    /// Sends every allowed host's requests (and those of `release_hosts`) to `centre`, except
    /// hosts that already name a centre of their own: what `provender seed --from` does.
    pub fn fill_from(&mut self, centre: &Via, release_hosts: &[Hostname]) {
        for host in self.allowed_hosts.iter().chain(release_hosts) {
            let hs = self.hosts.entry(host.clone()).or_default();
            if hs.via.is_none() {
                hs.via = Some(centre.clone());
            }
        }
    }
}

/// `upstream.hosts.*.via`: another provender (a site's centre) that answers for an origin
/// host. Its registry facade, module registry and release mirror are asked in the origin's
/// place; everything it sends is verified as if the origin had sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Via {
    /// The centre's base URL, ending in `/`.
    pub url: Url,
    /// Its `host:port` (the port only when not the scheme's default), as tokens are keyed.
    pub host: Hostname,
    /// Ask the origin itself when the centre does not answer (`fallback = "origin"`).
    pub fallback_to_origin: bool,
}

impl Via {
    /// The centre's base URL for an origin host's registry service: `providers.v1` at
    /// `<via>v1/providers/<host>/`, `modules.v1` at `<via>v1/modules/<host>/`, as its own
    /// server lays them out. `None` for a service a centre does not offer.
    pub fn service_base(&self, origin: &Hostname, service: &str) -> Option<Url> {
        let door = match service {
            "providers.v1" => "providers",
            "modules.v1" => "modules",
            _ => return None,
        };
        self.url.join(&format!("v1/{door}/{origin}/")).ok()
    }

    /// A URL below the centre's release mirror (`<via>releases/<path>`).
    pub fn releases(&self, path: &str) -> Option<Url> {
        self.url.join(&format!("releases/{path}")).ok()
    }
}

/// Where a host's bearer token comes from: the configuration, or a file read again for every
/// request (a Kubernetes projected service-account token, which the kubelet rotates).
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Token(String),
    File(PathBuf),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Token(_) => f.write_str("Token([redacted])"),
            Credential::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

/// Per-registry settings from `[upstream.hosts."<hostname>"]`.
#[derive(Clone, Default)]
pub struct HostSettings {
    pub connect_to: Option<SocketAddr>,
    pub token: Option<String>,
    /// A file holding the token, read again for each request (`token_file`).
    pub token_file: Option<PathBuf>,
    /// The mirror this host's requests go to instead (`via`).
    pub via: Option<Via>,
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
            .field("token_file", &self.token_file)
            .field("via", &self.via)
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
