//! `[upstream]` and `[upstream.hosts."<hostname>"]` as written: the origins, how they are
//! reached and trusted, and the sites a host is reached through (`via`); their validation into
//! [`UpstreamSettings`] and the trust policy. `config` runs it, handing over the hosts other
//! sections name (issuers, git, releases), and turns [`UpstreamConfigError`] into its own error.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use super::{HostSettings, ProxyUrl, UpstreamSettings};
use crate::address::{Hostname, Platform};

/// A bad `[upstream]` setting: the key at fault and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("config key {key}: {message}")]
pub struct UpstreamConfigError {
    pub key: String,
    pub message: String,
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> UpstreamConfigError {
    UpstreamConfigError {
        key: key.into(),
        message: message.into(),
    }
}

/// `[upstream]`
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Registry hostnames whose providers and modules may be requested; any other hostname is
    /// answered 404 and causes no outbound connection.
    pub allowed_hosts: Vec<String>,
    /// Platforms (`os_arch`, such as `linux_amd64`) to serve; empty: every platform the origin
    /// offers.
    pub platforms: Vec<String>,
    /// Extra trusted root certificates (PEM) for connections to origins, such as a corporate
    /// CA; the system's roots stay trusted.
    #[schemars(extend("format" = "path"))]
    pub ca_file: Option<PathBuf>,
    /// Per-host settings, by hostname (from `allowed_hosts`, `git.allowed_hosts`, an issuer's
    /// host, or a centre named by another host's `via`).
    pub hosts: BTreeMap<String, HostConfig>,
    /// How long a TCP and TLS connection to an origin may take.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub connect_timeout: Duration,
    /// How long a whole request for a JSON document or a SHA256SUMS file may take.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub request_timeout: Duration,
    /// How long the whole download of one archive may take.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub archive_timeout: Duration,
    /// Largest JSON document or SHA256SUMS file accepted from an origin (at least 1 KiB).
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_document_size: bytesize::ByteSize,
    /// Largest archive accepted from an origin (at least 1 KiB).
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_archive_size: bytesize::ByteSize,
    /// Redirects followed per request to an origin, each to https (at most 10).
    pub max_redirects: usize,
    /// Download-metadata requests made in parallel when a version's platforms are looked up.
    pub concurrency: usize,
    /// Never contact any origin: serve only what the cache holds (404 for anything else), for
    /// sealed sites filled with `provender import` or `provender seed`.
    pub offline: bool,
    /// Refuse versions whose origin lists no signing keys for SHA256SUMS. When keys are
    /// listed the signature is always checked; this decides what happens when there are none.
    /// Overridden per host by `upstream.hosts.<name>.require_signature`.
    pub require_signature: bool,
    /// The weakest trust level served, seeded, locked or imported: `"unverified"` <
    /// `"unsigned"` < `"community"` < `"partner"` < `"official"`. Unset: every level.
    pub min_trust: Option<String>,
    /// Let origins (and the URLs they hand out, and their redirects) resolve to loopback,
    /// private, link-local and other non-public addresses; off, such connections are refused
    /// before they are made (`connect_to` targets are always allowed).
    pub allow_private_networks: bool,
    /// An HTTP(S) proxy for every request to an origin (`http://` or `https://`, optionally
    /// with credentials, host and port only). Unset: no proxy (`HTTPS_PROXY` and friends are
    /// ignored). Hosts with `connect_to` are reached directly.
    pub proxy: Option<ProxyText>,
    /// Largest service discovery document accepted (at least 1 KiB).
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_discovery_size: bytesize::ByteSize,
    /// The longest wait for the next bytes from an origin, the response head included (so also
    /// the time-to-first-byte limit).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub idle_timeout: Duration,
    /// Response headers accepted from an origin over HTTP/1.1 (8 to 1000).
    pub max_response_headers: usize,
    /// Bytes of response headers accepted from an origin over HTTP/2 (1 KiB to 16 MiB).
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_header_list_size: bytesize::ByteSize,
    /// Most zip entries of an archive whose `h1:` is computed; an archive beyond it is not
    /// cached (zip bombs).
    pub max_zip_entries: usize,
    /// Most bytes an archive's entries may expand to while its `h1:` is computed, counted as
    /// they are read (at least 1 KiB).
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_unpacked_size: bytesize::ByteSize,
    /// Extra attempts after a connection error, a timeout, 429 or a 5xx other than 501, within
    /// the request's timeout (at most 10).
    pub retries: u32,
    /// The first wait before a retry; it doubles with random jitter, or follows the origin's
    /// `Retry-After` (up to five minutes).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub retry_base_delay: Duration,
    /// After this many consecutive failures an origin host is not contacted for
    /// `breaker_cooldown`; then one probe decides whether it is back (0: no breaker).
    pub breaker_failures: u32,
    /// How long an origin host's circuit stays open before a probe.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub breaker_cooldown: Duration,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            allowed_hosts: vec![
                "registry.terraform.io".into(),
                "registry.opentofu.org".into(),
            ],
            platforms: Vec::new(),
            ca_file: None,
            hosts: BTreeMap::new(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            archive_timeout: Duration::from_secs(30 * 60),
            max_document_size: bytesize::ByteSize::mib(4),
            max_archive_size: bytesize::ByteSize::gib(2),
            max_redirects: 3,
            concurrency: 8,
            offline: false,
            require_signature: true,
            min_trust: None,
            allow_private_networks: false,
            proxy: None,
            max_discovery_size: bytesize::ByteSize::mib(1),
            idle_timeout: Duration::from_secs(30),
            max_response_headers: 100,
            max_header_list_size: bytesize::ByteSize::kib(64),
            max_zip_entries: 10_000,
            max_unpacked_size: bytesize::ByteSize::gib(4),
            retries: 2,
            retry_base_delay: Duration::from_millis(200),
            breaker_failures: 5,
            breaker_cooldown: Duration::from_secs(30),
        }
    }
}

/// `[upstream.hosts."<hostname>"]`
#[derive(Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct HostConfig {
    /// Reach this host at another address (`IP:port`); TLS still verifies the host's own name.
    pub connect_to: Option<String>,
    /// Bearer token for a private registry, sent only to URLs on this host (never across a
    /// redirect to another); for a git host, the password of HTTP Basic credentials. Wins over
    /// Terraform's `TF_TOKEN_<host>` variables.
    pub token: Option<String>,
    /// A file holding the token, read for every request (a projected workload identity token).
    #[schemars(extend("format" = "path"))]
    pub token_file: Option<PathBuf>,
    /// The user name sent with `token` to a git host (HTTP Basic); `x-access-token` if unset.
    pub git_username: Option<String>,
    /// Overrides `upstream.require_signature` for this host.
    pub require_signature: Option<bool>,
    /// Allow plain http URLs on this host (testing only: nothing in transit is protected).
    pub allow_http: bool,
    /// Another provender (a site's centre, `https://` base URL) asked in this origin's place:
    /// its registry facade, module registry, release mirror and git door are asked for this
    /// host, and what it sends is verified here as the origin's own. The centre's credential
    /// goes in the centre's own `[upstream.hosts]` table.
    pub via: Option<String>,
    /// `"origin"`: ask the origin itself when the centre does not answer; `"none"` (default).
    pub fallback: Option<String>,
}

// Tokens never appear in `Debug` output (and so in no log line that prints settings).
impl std::fmt::Debug for HostConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostConfig")
            .field("connect_to", &self.connect_to)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("token_file", &self.token_file)
            .field("git_username", &self.git_username)
            .field("require_signature", &self.require_signature)
            .field("allow_http", &self.allow_http)
            .field("via", &self.via)
            .field("fallback", &self.fallback)
            .finish()
    }
}

/// `upstream.hosts.*.via` and `fallback` of the table `key`, for origin `host` (`None`: for
/// every origin, as `provender seed --from` gives it).
pub fn parse_via(
    key: &str,
    host: Option<&Hostname>,
    via: &str,
    fallback: Option<&str>,
) -> Result<super::Via, UpstreamConfigError> {
    let via_key = format!("{key}.via");
    let mut url = url::Url::parse(via).map_err(|e| invalid(&via_key, format!("not a URL: {e}")))?;
    if url.scheme() != "https" {
        return Err(invalid(&via_key, "must be an https:// URL"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            &via_key,
            "must not carry credentials: give the centre's token in its own [upstream.hosts] table",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(&via_key, "must have no query or fragment"));
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    let centre = crate::address::authority(&url)
        .and_then(|a| Hostname::parse(&a).ok())
        .ok_or_else(|| invalid(&via_key, "has no usable host name"))?;
    if Some(&centre) == host {
        return Err(invalid(&via_key, "names the origin itself"));
    }
    let fallback_to_origin = match fallback {
        None | Some("none") => false,
        Some("origin") => true,
        Some(other) => {
            return Err(invalid(
                format!("{key}.fallback"),
                format!("must be \"origin\" or \"none\", not {other:?}"),
            ));
        }
    };
    Ok(super::Via {
        url,
        host: centre,
        fallback_to_origin,
    })
}

/// `upstream.proxy` as written, parsed in `validate()` so that no error quotes it: it may hold
/// a password.
#[derive(Clone, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct ProxyText(String);

impl ProxyText {
    fn parse(&self) -> Result<ProxyUrl, UpstreamConfigError> {
        let url = Url::parse(&self.0).map_err(|e| invalid(PROXY_KEY, format!("not a URL: {e}")))?;
        let proxy = ProxyUrl(url);
        check_proxy(&proxy)?;
        Ok(proxy)
    }
}

const PROXY_KEY: &str = "upstream.proxy";

impl std::fmt::Debug for ProxyText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match Url::parse(&self.0) {
            Ok(url) => write!(f, "ProxyText({})", ProxyUrl(url)),
            Err(_) => f.write_str("ProxyText(<not a URL>)"),
        }
    }
}

/// Whether `upstream.proxy` names a proxy: scheme, optional credentials, host and port only.
fn check_proxy(proxy: &ProxyUrl) -> Result<(), UpstreamConfigError> {
    {
        let url = &proxy.0;
        let problem = if !matches!(url.scheme(), "http" | "https") {
            "the proxy must be an http:// or https:// URL"
        } else if url.host_str().is_none_or(str::is_empty) {
            "names no host"
        } else if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            "give only scheme, optional credentials, host and port"
        } else {
            return Ok(());
        };
        Err(invalid(PROXY_KEY, format!("{proxy}: {problem}")))
    }
}

impl UpstreamConfig {
    /// `[upstream]`: the origin client's settings and the trust policy. `issuer_hosts` (those of
    /// `auth.issuers`) may have `upstream.hosts` entries too, without being origins.
    pub fn validate(
        &self,
        issuer_hosts: &[String],
    ) -> Result<(UpstreamSettings, crate::trust::TrustPolicy), UpstreamConfigError> {
        let u = self;
        if let Some(path) = &u.ca_file {
            if let Err(e) = std::fs::metadata(path) {
                return Err(invalid(
                    "upstream.ca_file",
                    format!("cannot read {}: {e}", path.display()),
                ));
            }
        }
        if u.concurrency == 0 {
            return Err(invalid("upstream.concurrency", "must be at least 1"));
        }
        let proxy = u.proxy.as_ref().map(ProxyText::parse).transpose()?;
        let mut allowed_hosts = Vec::new();
        for (i, h) in u.allowed_hosts.iter().enumerate() {
            let host = Hostname::parse(h)
                .map_err(|e| invalid(format!("upstream.allowed_hosts[{i}]"), e.to_string()))?;
            allowed_hosts.push(host);
        }
        let mut platforms = Vec::new();
        for (i, p) in u.platforms.iter().enumerate() {
            platforms.push(
                Platform::parse(p)
                    .map_err(|e| invalid(format!("upstream.platforms[{i}]"), e.to_string()))?,
            );
        }
        let mut hosts = BTreeMap::new();
        // The centres some hosts go through (`via`): their own tables hold their credentials.
        let mut vias = BTreeMap::new();
        for (name, hc) in &u.hosts {
            let key = format!("upstream.hosts.{name:?}");
            let host = Hostname::parse(name).map_err(|e| invalid(&key, e.to_string()))?;
            match (&hc.via, &hc.fallback) {
                (Some(via), fallback) => {
                    vias.insert(
                        host.clone(),
                        parse_via(&key, Some(&host), via, fallback.as_deref())?,
                    );
                }
                (None, Some(_)) => {
                    return Err(invalid(
                        format!("{key}.fallback"),
                        "applies only to a host with a via",
                    ));
                }
                (None, None) => {}
            }
        }
        for (name, hc) in &u.hosts {
            let key = format!("upstream.hosts.{name:?}");
            let host = Hostname::parse(name).map_err(|e| invalid(&key, e.to_string()))?;
            let centre = vias.values().any(|v| v.host == host);
            if !allowed_hosts.contains(&host)
                && !issuer_hosts.iter().any(|h| h == host.as_str())
                && !centre
            {
                return Err(invalid(
                    &key,
                    format!(
                        "{host} is not listed in upstream.allowed_hosts (nor git.allowed_hosts, nor the host of an auth.issuers entry, nor the via of another host)"
                    ),
                ));
            }
            if hc.token.is_some() && hc.token_file.is_some() {
                return Err(invalid(
                    format!("{key}.token_file"),
                    "give either token or token_file, not both",
                ));
            }
            if let Some(path) = &hc.token_file {
                if let Err(e) = std::fs::metadata(path) {
                    return Err(invalid(
                        format!("{key}.token_file"),
                        format!("cannot read {}: {e}", path.display()),
                    ));
                }
            }
            let connect_to = match &hc.connect_to {
                Some(addr) => Some(parse_connect_to(&format!("{key}.connect_to"), addr)?),
                None => None,
            };
            if hc
                .token
                .as_deref()
                .is_some_and(|t| t.is_empty() || t.chars().any(|c| c.is_control() || c == ' '))
            {
                return Err(invalid(
                    format!("{key}.token"),
                    "must be a non-empty token without spaces or control characters",
                ));
            }
            if hc
                .git_username
                .as_deref()
                .is_some_and(|u| u.is_empty() || u.chars().any(|c| c.is_control() || c == ':'))
            {
                return Err(invalid(
                    format!("{key}.git_username"),
                    "must be a non-empty name without ':' or control characters",
                ));
            }
            let via = vias.get(&host).cloned();
            hosts.insert(
                host,
                HostSettings {
                    connect_to,
                    token: hc.token.clone(),
                    token_file: hc.token_file.clone(),
                    via,
                    git_username: hc.git_username.clone(),
                    require_signature: hc.require_signature,
                    allow_http: hc.allow_http,
                },
            );
        }
        for (key, d) in [
            ("upstream.connect_timeout", u.connect_timeout),
            ("upstream.request_timeout", u.request_timeout),
            ("upstream.archive_timeout", u.archive_timeout),
        ] {
            if d.is_zero() {
                return Err(invalid(key, "must be longer than zero"));
            }
        }
        if u.max_document_size.as_u64() < 1024 {
            return Err(invalid(
                "upstream.max_document_size",
                "must be at least 1 KiB",
            ));
        }
        if u.max_archive_size.as_u64() < 1024 {
            return Err(invalid(
                "upstream.max_archive_size",
                "must be at least 1 KiB",
            ));
        }
        if u.max_redirects > 10 {
            return Err(invalid("upstream.max_redirects", "must be at most 10"));
        }
        if u.retries > 10 {
            return Err(invalid("upstream.retries", "must be at most 10"));
        }
        if u.max_discovery_size.as_u64() < 1024 {
            return Err(invalid(
                "upstream.max_discovery_size",
                "must be at least 1 KiB",
            ));
        }
        if u.idle_timeout.is_zero() {
            return Err(invalid("upstream.idle_timeout", "must be longer than zero"));
        }
        if !(8..=1000).contains(&u.max_response_headers) {
            return Err(invalid(
                "upstream.max_response_headers",
                "must be from 8 to 1000",
            ));
        }
        if !(1024..=(16 << 20)).contains(&u.max_header_list_size.as_u64()) {
            return Err(invalid(
                "upstream.max_header_list_size",
                "must be from 1 KiB to 16 MiB",
            ));
        }
        if u.max_zip_entries == 0 {
            return Err(invalid("upstream.max_zip_entries", "must be at least 1"));
        }
        if u.max_unpacked_size.as_u64() < 1024 {
            return Err(invalid(
                "upstream.max_unpacked_size",
                "must be at least 1 KiB",
            ));
        }
        let min_trust = u
            .min_trust
            .as_deref()
            .map(str::parse::<crate::trust::SignatureKind>)
            .transpose()
            .map_err(|e| invalid("upstream.min_trust", e.to_string()))?;
        let trust = crate::trust::TrustPolicy {
            require_signature: u.require_signature,
            require_signature_for: hosts
                .iter()
                .filter_map(|(h, hs)| hs.require_signature.map(|r| (h.clone(), r)))
                .collect(),
            min_trust,
            private: Default::default(),
        };
        let settings = UpstreamSettings {
            allowed_hosts,
            platforms,
            ca_file: u.ca_file.clone(),
            hosts,
            connect_timeout: u.connect_timeout,
            request_timeout: u.request_timeout,
            archive_timeout: u.archive_timeout,
            max_document_size: u.max_document_size.as_u64(),
            max_archive_size: u.max_archive_size.as_u64(),
            max_redirects: u.max_redirects,
            concurrency: u.concurrency,
            offline: u.offline,
            allow_private_networks: u.allow_private_networks,
            proxy,
            max_discovery_size: u.max_discovery_size.as_u64(),
            idle_timeout: u.idle_timeout,
            max_response_headers: u.max_response_headers,
            max_header_list_size: u.max_header_list_size.as_u64(),
            max_zip_entries: u.max_zip_entries,
            max_unpacked_size: u.max_unpacked_size.as_u64(),
            retries: u.retries,
            retry_base_delay: u.retry_base_delay,
            breaker_failures: u.breaker_failures,
            breaker_cooldown: u.breaker_cooldown,
        };
        Ok((settings, trust))
    }
}

fn parse_connect_to(key: &str, s: &str) -> Result<SocketAddr, UpstreamConfigError> {
    s.parse::<SocketAddr>().map_err(|_| {
        invalid(
            key,
            format!("{s:?} is not an IP address and port like 127.0.0.1:9443"),
        )
    })
}
