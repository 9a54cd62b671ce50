//! The only part of provender that talks to origin registries.
//!
//! [`Upstream`] performs remote service discovery (`/.well-known/terraform.json` ->
//! `providers.v1`), the provider registry protocol (version lists and download metadata), and
//! fetches of SHA256SUMS files and archives. It applies per-host settings (connection overrides,
//! bearer tokens), size caps and timeouts, and records `provender_upstream_*` metrics. It knows
//! nothing about caching or the mirror protocol.

mod breaker;
mod documents;
pub mod policy;
mod resolve;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use url::Url;

pub use documents::{DocumentError, VersionList, parse_discovery, parse_download, parse_versions};

use crate::address::{Hostname, Platform, ProviderAddr, Version};
use crate::config::UpstreamSettings;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::records::Package;

/// What an upstream request was for; the `operation` label of upstream metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Discovery,
    Versions,
    Download,
    Shasums,
    Signature,
    Archive,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Discovery => "discovery",
            Operation::Versions => "versions",
            Operation::Download => "download",
            Operation::Shasums => "shasums",
            Operation::Signature => "signature",
            Operation::Archive => "archive",
        }
    }
}

/// How long a successful discovery result is reused.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);

/// Client for origin registries.
pub struct Upstream {
    settings: Arc<UpstreamSettings>,
    http: reqwest::Client,
    discovery: moka::future::Cache<Hostname, Url>,
    tokens: HashMap<Hostname, String>,
    breaker: breaker::Breaker,
    metrics: Arc<Metrics>,
    net_policy: Arc<policy::NetPolicy>,
}

impl Upstream {
    /// Builds the HTTP client from the settings (trust roots, overrides, timeouts, tokens).
    pub fn new(settings: Arc<UpstreamSettings>, metrics: Arc<Metrics>) -> anyhow::Result<Upstream> {
        crate::tls::install_crypto_provider();
        // `connect_to` hosts: where each bare name connects, and the ports it may be used with.
        let mut overrides = HashMap::new();
        let mut pinned_ports: HashMap<String, Vec<u16>> = HashMap::new();
        for (host, hs) in &settings.hosts {
            if let Some(addr) = hs.connect_to {
                let (bare, port) = match host.as_str().split_once(':') {
                    Some((bare, port)) => (bare, port.parse().unwrap_or(443)),
                    None => (host.as_str(), 443),
                };
                overrides.insert(bare.to_string(), addr);
                pinned_ports.entry(bare.to_string()).or_default().push(port);
            }
        }
        let net_policy = Arc::new(policy::NetPolicy {
            allow_private_networks: settings.allow_private_networks,
            http_hosts: settings
                .hosts
                .iter()
                .filter(|(_, hs)| hs.allow_http)
                .map(|(h, _)| h.as_str().split(':').next().unwrap_or_default().to_string())
                .collect(),
            pinned_ports,
        });
        // Every hop is checked like the first request: scheme, IP-literal address, no loops.
        // Host names are checked by the resolver; `Authorization` is dropped by reqwest when a
        // hop leaves the host it was meant for.
        let max_redirects = settings.max_redirects;
        let hop_policy = net_policy.clone();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > max_redirects {
                attempt.error(policy::PolicyError(format!(
                    "refusing more than {max_redirects} redirects (upstream.max_redirects)"
                )))
            } else if attempt.previous().contains(attempt.url()) {
                let looped = policy::redact(attempt.url());
                attempt.error(policy::PolicyError(format!(
                    "refusing a redirect loop back to {looped}"
                )))
            } else if let Err(refused) = hop_policy.check_url(attempt.url()) {
                attempt.error(refused)
            } else {
                attempt.follow()
            }
        });
        // The operator chose the proxy, like a `connect_to` address: its name is not checked.
        let proxy_host = settings
            .proxy
            .as_ref()
            .and_then(|p| p.0.host_str())
            .map(str::to_ascii_lowercase);
        let resolver = resolve::Resolver::new(overrides.clone(), net_policy.clone())
            .trusting(proxy_host.into_iter().collect());
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("provender/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(resolver)
            .redirect(redirects)
            .https_only(net_policy.http_hosts.is_empty())
            .connect_timeout(settings.connect_timeout)
            .read_timeout(settings.idle_timeout)
            .http1_max_headers(settings.max_response_headers)
            .http2_max_header_list_size(
                u32::try_from(settings.max_header_list_size).unwrap_or(u32::MAX),
            )
            .pool_idle_timeout(Duration::from_secs(60));
        builder = match &settings.proxy {
            // Environment settings (`HTTPS_PROXY`, ...) are ignored: only an explicit choice.
            None => builder.no_proxy(),
            Some(proxy) => {
                // `connect_to` hosts (exactly those names, not their subdomains) are reached at
                // their address, not through the proxy.
                let direct: std::collections::HashSet<String> = overrides.keys().cloned().collect();
                let target = proxy.0.clone();
                let through = reqwest::Proxy::custom(move |url| {
                    let host = url.host_str()?.to_ascii_lowercase();
                    (!direct.contains(&host)).then(|| target.clone())
                });
                tracing::info!(%proxy, "origin requests go through a proxy");
                builder.proxy(through)
            }
        };
        if let Some(path) = &settings.ca_file {
            let pem = std::fs::read(path)
                .map_err(|e| anyhow::anyhow!("upstream.ca_file {}: {e}", path.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                anyhow::anyhow!(
                    "upstream.ca_file {}: not a PEM certificate bundle: {e}",
                    path.display()
                )
            })?;
            if certs.is_empty() {
                anyhow::bail!(
                    "upstream.ca_file {}: contains no certificates",
                    path.display()
                );
            }
            builder = builder.tls_certs_merge(certs);
        }
        let http = builder
            .build()
            .map_err(|e| anyhow::anyhow!("building the upstream HTTP client: {e}"))?;
        Ok(Upstream {
            tokens: tokens_for(&settings),
            breaker: breaker::Breaker::new(settings.breaker_failures, settings.breaker_cooldown),
            discovery: moka::future::Cache::builder()
                .max_capacity(1024)
                .time_to_live(DISCOVERY_TTL)
                .build(),
            settings,
            http,
            metrics,
            net_policy,
        })
    }

    /// The `providers.v1` base URL of a registry host, from (cached) service discovery.
    pub async fn providers_base(&self, host: &Hostname) -> Result<Url> {
        self.discovery
            .try_get_with(host.clone(), self.discover(host))
            .await
            .map_err(|e: Arc<Error>| (*e).clone())
    }

    async fn discover(&self, host: &Hostname) -> Result<Url> {
        let url = Url::parse(&format!("https://{host}/.well-known/terraform.json"))
            .map_err(|e| Error::BadRequest(format!("hostname {host}: {e}")))?;
        self.check_url(host, &url)?;
        let max = self.settings.max_discovery_size;
        let (final_url, body) = self
            .document(host, Operation::Discovery, &url, max, true)
            .await?;
        let Some((final_url, body)) = final_url.zip(body) else {
            return Err(Error::NotFound(format!(
                "{host} has no service discovery document, so it is not a provider registry"
            )));
        };
        let base = parse_discovery(&body).map_err(|e| Error::Upstream(format!("{host}: {e}")))?;
        let Some(base) = base else {
            return Err(Error::NotFound(format!(
                "{host} does not offer the provider registry protocol (no providers.v1)"
            )));
        };
        let mut resolved = final_url.join(&base).map_err(|e| {
            Error::Upstream(format!(
                "{host}: providers.v1 {base:?} is not a valid URL: {e}"
            ))
        })?;
        self.check_url(host, &resolved)?;
        if !resolved.path().ends_with('/') {
            let path = format!("{}/", resolved.path());
            resolved.set_path(&path);
        }
        Ok(resolved)
    }

    /// Lists a provider's versions. `Ok(None)`: the origin has no such provider.
    pub async fn versions(&self, addr: &ProviderAddr) -> Result<Option<VersionList>> {
        let base = self.providers_base(&addr.hostname).await?;
        let url = join(
            &base,
            &format!("{}/{}/versions", addr.namespace, addr.type_),
        )?;
        let (_, body) = self
            .document(
                &addr.hostname,
                Operation::Versions,
                &url,
                self.settings.max_document_size,
                false,
            )
            .await?;
        let Some(body) = body else { return Ok(None) };
        let list = parse_versions(&body).map_err(|e| Error::Upstream(format!("{addr}: {e}")))?;
        for note in &list.skipped {
            tracing::warn!(provider = %addr, "origin version list: skipped {note}");
        }
        Ok(Some(list))
    }

    /// Fetches download metadata for one package, with every URL in it made absolute.
    /// `Ok(None)`: the origin has no package for this platform.
    pub async fn download_info(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
    ) -> Result<Option<Package>> {
        let base = self.providers_base(&addr.hostname).await?;
        let path = format!(
            "{}/{}/{}/download/{}/{}",
            addr.namespace, addr.type_, version, platform.os, platform.arch
        );
        let url = join(&base, &path)?;
        let (final_url, body) = self
            .document(
                &addr.hostname,
                Operation::Download,
                &url,
                self.settings.max_document_size,
                false,
            )
            .await?;
        let (Some(final_url), Some(body)) = (final_url, body) else {
            return Ok(None);
        };
        let mut info = parse_download(&body, platform)
            .map_err(|e| Error::Upstream(format!("{addr} {version}: {e}")))?;
        for u in [
            &mut info.download_url,
            &mut info.shasums_url,
            &mut info.shasums_signature_url,
        ] {
            let abs = final_url.join(u).map_err(|e| {
                Error::Upstream(format!(
                    "{addr} {version} {platform}: URL {u:?} is invalid: {e}"
                ))
            })?;
            self.check_url(&addr.hostname, &abs)?;
            *u = abs.to_string();
        }
        Ok(Some(info))
    }

    /// Fetches a small file such as SHA256SUMS, failing on 404 as on any other error status.
    pub async fn small_file(&self, host: &Hostname, op: Operation, url: &str) -> Result<Bytes> {
        let url =
            Url::parse(url).map_err(|e| Error::Upstream(format!("invalid URL {url:?}: {e}")))?;
        self.check_url(host, &url)?;
        let (_, body) = self
            .document(host, op, &url, self.settings.max_document_size, false)
            .await?;
        body.ok_or_else(|| {
            Error::Upstream(format!(
                "{} {url}: origin answered 404 Not Found",
                op.as_str()
            ))
        })
    }

    /// Starts an archive download and returns the response once its status is 200.
    pub async fn archive(&self, host: &Hostname, url: &str) -> Result<reqwest::Response> {
        let url = Url::parse(url)
            .map_err(|e| Error::Upstream(format!("invalid archive URL {url:?}: {e}")))?;
        self.check_url(host, &url)?;
        let started = Instant::now();
        let result = self
            .send(
                host,
                Operation::Archive,
                &url,
                self.settings.archive_timeout,
            )
            .await;
        self.observe(host, Operation::Archive, started);
        let resp = match result {
            Ok(resp) => resp,
            Err((e, outcome)) => {
                self.count(host, Operation::Archive, outcome);
                return Err(e);
            }
        };
        if resp.status() != reqwest::StatusCode::OK {
            self.count(host, Operation::Archive, outcome_for_status(resp.status()));
            return Err(status_error(Operation::Archive, &url, resp.status()));
        }
        if let Some(len) = resp.content_length() {
            if len > self.settings.max_archive_size {
                self.count(host, Operation::Archive, "too_large");
                return Err(Error::Upstream(format!(
                    "archive {url} is {len} bytes, more than upstream.max_archive_size ({})",
                    self.settings.max_archive_size
                )));
            }
        }
        self.count(host, Operation::Archive, "ok");
        Ok(resp)
    }

    /// Records bytes received from an origin (archives report as they stream).
    pub fn add_bytes(&self, n: u64) {
        self.metrics.upstream_bytes.inc_by(n);
    }

    /// GETs a document with a size cap. Returns `(final URL, body)`, both `None` on 404.
    async fn document(
        &self,
        host: &Hostname,
        op: Operation,
        url: &Url,
        max: u64,
        require_json: bool,
    ) -> Result<(Option<Url>, Option<Bytes>)> {
        let started = Instant::now();
        let result = async {
            let resp = self
                .send(host, op, url, self.settings.request_timeout)
                .await?;
            let status = resp.status();
            if status == reqwest::StatusCode::NOT_FOUND {
                return Ok((None, None, "not_found"));
            }
            if !status.is_success() {
                return Err((status_error(op, url, status), outcome_for_status(status)));
            }
            if require_json && !is_json(&resp) {
                return Err((
                    Error::Upstream(format!(
                        "{} {url}: answer is not application/json",
                        op.as_str()
                    )),
                    "bad_document",
                ));
            }
            let final_url = resp.url().clone();
            let body = read_capped(resp, max).await.map_err(|e| {
                let outcome = if matches!(e, Error::UpstreamTimeout(_)) {
                    "timeout"
                } else {
                    "error"
                };
                (e, outcome)
            })?;
            self.add_bytes(body.len() as u64);
            Ok((Some(final_url), Some(body), "ok"))
        }
        .await;
        self.observe(host, op, started);
        match result {
            Ok((u, b, outcome)) => {
                self.count(host, op, outcome);
                Ok((u, b))
            }
            Err((e, outcome)) => {
                self.count(host, op, outcome);
                Err(e)
            }
        }
    }

    /// Sends a GET with retries: connection errors, timeouts, 429 and 5xx (except 501) are
    /// retried up to `upstream.retries` times with exponential backoff and full jitter (or the
    /// origin's `Retry-After`), all within `timeout`. Each host has a circuit breaker; while it
    /// is open, calls fail at once. Failed attempts are counted here; the caller counts the
    /// outcome of the response it gets.
    async fn send(
        &self,
        host: &Hostname,
        op: Operation,
        url: &Url,
        timeout: Duration,
    ) -> Result<reqwest::Response, (Error, &'static str)> {
        let deadline = Instant::now() + timeout;
        let mut attempt: u32 = 0;
        loop {
            if let Err(rejected) = self.breaker.allow(host.as_str()) {
                let msg = format!(
                    "{} {url}: origin {host} is failing; next attempt in {}s (circuit breaker)",
                    op.as_str(),
                    rejected.retry_in.as_secs().max(1)
                );
                return Err((Error::Upstream(msg), "circuit_open"));
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err((
                    Error::UpstreamTimeout(format!("{} {url}: out of time", op.as_str())),
                    "timeout",
                ));
            }
            let result = self.send_once(host, op, url, remaining).await;
            if matches!(result, Err((_, "refused"))) {
                // Refused by the address or redirect policy: final, and not the origin's health.
                return result;
            }
            let (healthy, hint) = match &result {
                Ok(resp) if retryable_status(resp.status()) => (
                    resp.status() != reqwest::StatusCode::TOO_MANY_REQUESTS,
                    Some(retry_after(resp)),
                ),
                Ok(_) => (true, None),
                Err(_) => (false, Some(None)),
            };
            let is_failure =
                !healthy || result.as_ref().is_ok_and(|r| r.status().is_server_error());
            if is_failure {
                if self.breaker.failure(host.as_str()) {
                    tracing::warn!(%host, "origin keeps failing; circuit opened for {:?}", self.settings.breaker_cooldown);
                    self.metrics
                        .upstream_circuit_open
                        .with_label_values(&[host.as_str()])
                        .set(1);
                }
            } else if self.breaker.success(host.as_str()) {
                tracing::info!(%host, "origin answers again; circuit closed");
                self.metrics
                    .upstream_circuit_open
                    .with_label_values(&[host.as_str()])
                    .set(0);
            }
            let Some(hint) = hint else { return result };
            if attempt >= self.settings.retries {
                return result;
            }
            let backoff = hint.unwrap_or_else(|| {
                let cap = self
                    .settings
                    .retry_base_delay
                    .saturating_mul(1 << attempt.min(16));
                cap.mul_f64(fastrand::f64())
            });
            if Instant::now() + backoff >= deadline {
                return result;
            }
            let outcome = match &result {
                Ok(resp) => outcome_for_status(resp.status()),
                Err((_, outcome)) => outcome,
            };
            self.count(host, op, outcome);
            tracing::debug!(%host, op = op.as_str(), attempt, ?backoff, "retrying after {outcome}");
            drop(result);
            tokio::time::sleep(backoff).await;
            attempt += 1;
        }
    }

    /// One GET, adding the registry's token only where it belongs.
    async fn send_once(
        &self,
        host: &Hostname,
        op: Operation,
        url: &Url,
        timeout: Duration,
    ) -> Result<reqwest::Response, (Error, &'static str)> {
        let mut req = self.http.get(url.clone()).timeout(timeout);
        if matches!(op, Operation::Discovery) {
            req = req.header(reqwest::header::ACCEPT, "application/json");
        }
        if let Some(token) = self.tokens.get(host) {
            // A registry's token goes only to that registry's own host: not to a `providers.v1`
            // or download URL elsewhere, and (reqwest drops it) not across a redirect.
            if url_host(url).as_deref() == Some(host.as_str()) {
                req = req.bearer_auth(token);
            }
        }
        req.send().await.map_err(|e| {
            let outcome = if e.is_timeout() {
                "timeout"
            } else if policy::is_refusal(&e) {
                "refused"
            } else {
                "connect_error"
            };
            let err = transport_error(op, url, &e);
            (err, outcome)
        })
    }

    /// Only absolute https URLs (http where `allow_http` says so) without credentials, and
    /// never an IP literal outside the address policy, are ever fetched.
    fn check_url(&self, host: &Hostname, url: &Url) -> Result<()> {
        self.net_policy.check_url(url).map_err(|refused| {
            tracing::warn!(%host, "{refused}");
            Error::Upstream(format!("{host}: {refused}"))
        })
    }

    fn count(&self, host: &Hostname, op: Operation, outcome: &str) {
        self.metrics
            .upstream_requests
            .with_label_values(&[host.as_str(), op.as_str(), outcome])
            .inc();
    }

    fn observe(&self, host: &Hostname, op: Operation, started: Instant) {
        self.metrics
            .upstream_duration
            .with_label_values(&[host.as_str(), op.as_str()])
            .observe(started.elapsed().as_secs_f64());
    }
}

/// Tokens from `[upstream.hosts]` (which win) and `TF_TOKEN_*` environment variables, encoded as
/// Terraform encodes them: `.` -> `_`, `-` -> `__`.
fn tokens_for(settings: &UpstreamSettings) -> HashMap<Hostname, String> {
    let mut tokens = HashMap::new();
    for (name, value) in std::env::vars() {
        let Some(encoded) = name.strip_prefix("TF_TOKEN_") else {
            continue;
        };
        let decoded = encoded
            .replace("__", "\u{0}")
            .replace('_', ".")
            .replace('\u{0}', "-");
        if let Ok(host) = Hostname::parse(&decoded) {
            if settings.host_allowed(&host) && !value.is_empty() {
                tokens.insert(host, value);
            }
        }
    }
    for (host, hs) in &settings.hosts {
        if let Some(t) = &hs.token {
            tokens.insert(host.clone(), t.clone());
        }
    }
    tokens
}

fn url_host(url: &Url) -> Option<String> {
    let host = url.host_str()?.to_ascii_lowercase();
    Some(match url.port() {
        Some(p) if p != 443 => format!("{host}:{p}"),
        _ => host,
    })
}

fn join(base: &Url, path: &str) -> Result<Url> {
    base.join(path)
        .map_err(|e| Error::Internal(format!("joining {path:?} onto {base}: {e}")))
}

fn is_json(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        })
        .unwrap_or(false)
}

async fn read_capped(resp: reqwest::Response, max: u64) -> Result<Bytes> {
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(Error::Upstream(format!(
            "{}: document larger than the {max}-byte limit",
            resp.url()
        )));
    }
    let url = resp.url().clone();
    let mut body = BytesMut::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| transport_error(Operation::Download, &url, &e))?;
        if body.len() as u64 + chunk.len() as u64 > max {
            return Err(Error::Upstream(format!(
                "{url}: document larger than the {max}-byte limit"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Statuses worth another attempt: 429 and 5xx except 501 Not Implemented.
fn retryable_status(status: reqwest::StatusCode) -> bool {
    status == reqwest::StatusCode::TOO_MANY_REQUESTS
        || (status.is_server_error() && status != reqwest::StatusCode::NOT_IMPLEMENTED)
}

/// The origin's `Retry-After` (seconds or an HTTP date), capped at five minutes.
fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    let value = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let wait = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    };
    Some(wait.min(Duration::from_secs(300)))
}

fn outcome_for_status(status: reqwest::StatusCode) -> &'static str {
    if status.is_server_error() {
        "server_error"
    } else {
        "client_error"
    }
}

fn status_error(op: Operation, url: &Url, status: reqwest::StatusCode) -> Error {
    Error::Upstream(format!("{} {url}: origin answered {status}", op.as_str()))
}

fn transport_error(op: Operation, url: &Url, err: &reqwest::Error) -> Error {
    let mut msg = format!("{} {}: ", op.as_str(), url);
    let mut source: Option<&dyn std::error::Error> = Some(err);
    let mut first = true;
    while let Some(e) = source {
        if !first {
            msg.push_str(": ");
        }
        msg.push_str(&e.to_string().replace(&format!(" for url ({url})"), ""));
        first = false;
        source = e.source();
    }
    if err.is_timeout() {
        Error::UpstreamTimeout(msg)
    } else {
        Error::Upstream(msg)
    }
}
