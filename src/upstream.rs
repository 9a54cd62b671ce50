//! The only part of provender that talks to origin registries.
//!
//! [`Upstream`] performs remote service discovery (`/.well-known/terraform.json`), the
//! provider registry protocol (version lists and download metadata, [`providers`]) and
//! fetches of SHA256SUMS files and archives. It applies per-host settings (connection
//! overrides, bearer tokens), size caps and timeouts, retries and a circuit breaker per host, and
//! records `provender_upstream_*` metrics. Every failure is an [`UpstreamError`] that knows its
//! metric outcome and the HTTP status a client sees. It knows nothing about caching or the mirror
//! protocol.

mod config;
mod documents;
mod git;
pub mod health;
mod modules;
mod oidc;
pub mod policy;
mod providers;
mod resolve;
mod settings;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use url::Url;

use crate::breaker;
pub use crate::breaker::Circuit;
pub use config::{HostConfig, ProxyText, UpstreamConfig, UpstreamConfigError, parse_via};
pub use documents::{
    DocumentError, ModuleVersionList, Services, VersionList, parse_discovery, parse_download,
    parse_module_versions, parse_versions,
};
pub use git::{GitFetch, GitLimits, MIN_GIT, Mirrored, kill_group, valid_reference};
pub use modules::Location;
pub use oidc::IssuerEndpoints;
pub use providers::ArchiveDownload;
pub use settings::{Credential, HostSettings, ProxyUrl, UpstreamSettings, Via};

use crate::address::Hostname;
use crate::metrics::Metrics;

/// What an upstream request was for; the `operation` label of upstream metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Discovery,
    Versions,
    Download,
    Shasums,
    Signature,
    Archive,
    /// A `HEAD` of an archive's download URL, for its size.
    ArchiveSize,
    ModuleVersions,
    ModuleDownload,
    ModuleArchive,
    Git,
    /// An OpenID Connect issuer's discovery document or key set.
    Oidc,
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
            Operation::ArchiveSize => "archive_size",
            Operation::ModuleVersions => "module_versions",
            Operation::ModuleDownload => "module_download",
            Operation::ModuleArchive => "module_archive",
            Operation::Git => "git",
            Operation::Oidc => "oidc",
        }
    }
}

/// How an origin request ended; the `outcome` label of `provender_upstream_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    NotFound,
    ClientError,
    ServerError,
    Timeout,
    ConnectError,
    /// Refused by the address or redirect policy (never retried, not the origin's health).
    Refused,
    TooLarge,
    BadDocument,
    CircuitOpen,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::NotFound => "not_found",
            Outcome::ClientError => "client_error",
            Outcome::ServerError => "server_error",
            Outcome::Timeout => "timeout",
            Outcome::ConnectError => "connect_error",
            Outcome::Refused => "refused",
            Outcome::TooLarge => "too_large",
            Outcome::BadDocument => "bad_document",
            Outcome::CircuitOpen => "circuit_open",
        }
    }

    fn of_status(status: reqwest::StatusCode) -> Outcome {
        if status.is_server_error() {
            Outcome::ServerError
        } else {
            Outcome::ClientError
        }
    }
}

/// Why an origin request failed. Messages name the operation and URL (never credentials).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// The address or redirect policy refused the URL or a hop.
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Timeout(String),
    /// The connection failed or broke.
    #[error("{0}")]
    Connect(String),
    /// The origin (or its centre, `via`: `what` names the URL asked) answered with an error
    /// status.
    #[error("{what}: answered {status}")]
    Status { what: String, status: u16 },
    /// More than a configured cap.
    #[error("{0}")]
    TooLarge(String),
    /// An answer that cannot be used (malformed JSON, a missing field, a bad URL in it).
    #[error("{0}")]
    BadDocument(String),
    /// The host's circuit breaker is open.
    #[error("{0}")]
    CircuitOpen(String),
    /// The host does not offer the wanted protocol (no discovery document, no such service).
    #[error("{0}")]
    NotARegistry(String),
}

impl UpstreamError {
    /// The metrics outcome of a request that failed this way.
    pub fn outcome(&self) -> Outcome {
        match self {
            UpstreamError::Refused(_) => Outcome::Refused,
            UpstreamError::Timeout(_) => Outcome::Timeout,
            UpstreamError::Connect(_) => Outcome::ConnectError,
            UpstreamError::Status { status, .. } => Outcome::of_status(
                reqwest::StatusCode::from_u16(*status).unwrap_or(reqwest::StatusCode::BAD_GATEWAY),
            ),
            UpstreamError::TooLarge(_) => Outcome::TooLarge,
            UpstreamError::BadDocument(_) => Outcome::BadDocument,
            UpstreamError::CircuitOpen(_) => Outcome::CircuitOpen,
            UpstreamError::NotARegistry(_) => Outcome::NotFound,
        }
    }

    /// The HTTP status a client of the mirror sees: 504 for a timeout, 503 while the host's
    /// circuit is open, 404 when the host is not a registry of the wanted kind, 502 otherwise.
    pub fn status(&self) -> http::StatusCode {
        match self {
            UpstreamError::Timeout(_) => http::StatusCode::GATEWAY_TIMEOUT,
            UpstreamError::CircuitOpen(_) => http::StatusCode::SERVICE_UNAVAILABLE,
            UpstreamError::NotARegistry(_) => http::StatusCode::NOT_FOUND,
            _ => http::StatusCode::BAD_GATEWAY,
        }
    }

    /// Whether the host did not answer usefully for now (a timeout, no connection, a 5xx, its
    /// circuit open), so asking again later may succeed: what a client is told to wait for.
    pub fn unanswered(&self) -> bool {
        match self {
            UpstreamError::Timeout(_)
            | UpstreamError::Connect(_)
            | UpstreamError::CircuitOpen(_) => true,
            UpstreamError::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }

    fn status_of(op: Operation, url: &Url, status: reqwest::StatusCode) -> UpstreamError {
        UpstreamError::Status {
            what: format!("{} {url}", op.as_str()),
            status: status.as_u16(),
        }
    }

    /// A failure while sending a request (connecting, TLS, the policy, a timeout).
    fn from_send(op: Operation, url: &Url, err: &reqwest::Error) -> UpstreamError {
        let msg = describe(op, url, err);
        if err.is_timeout() {
            UpstreamError::Timeout(msg)
        } else if policy::is_refusal(err) {
            UpstreamError::Refused(msg)
        } else {
            UpstreamError::Connect(msg)
        }
    }

    /// A failure while reading a body.
    fn from_body(op: Operation, url: &Url, err: &reqwest::Error) -> UpstreamError {
        let msg = describe(op, url, err);
        if err.is_timeout() {
            UpstreamError::Timeout(msg)
        } else {
            UpstreamError::Connect(msg)
        }
    }
}

/// Shorthand for upstream results.
pub type Result<T, E = UpstreamError> = std::result::Result<T, E>;

/// How long a successful discovery result is reused.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);

/// One origin host as the status page shows it.
#[derive(Debug, Clone)]
pub struct OriginHealth {
    pub host: String,
    pub circuit: breaker::Circuit,
    pub recent: health::HostHealth,
}

/// Client for origin registries.
pub struct Upstream {
    settings: Arc<UpstreamSettings>,
    http: reqwest::Client,
    discovery: moka::future::Cache<Hostname, Arc<(Url, Services)>>,
    tokens: HashMap<Hostname, Credential>,
    breaker: breaker::Breaker,
    health: health::Health,
    metrics: Arc<Metrics>,
    net_policy: Arc<policy::NetPolicy>,
    resolver: resolve::Resolver,
    /// Whether git sources can be fetched (see [`Upstream::with_git`]), or why not.
    git_ready: std::result::Result<(), String>,
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
        // A centre that an origin host goes via without `fallback = "origin"` is the edge's one
        // egress for it: a redirect off such a centre is never followed.
        let held_centres: std::collections::HashSet<String> = settings
            .hosts
            .values()
            .filter_map(|hs| hs.via.as_ref())
            .filter(|via| !via.fallback_to_origin)
            .map(|via| via.host.to_string())
            .collect();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            let first = attempt
                .previous()
                .first()
                .and_then(crate::address::authority);
            let off_centre = first
                .filter(|centre| held_centres.contains(centre))
                .filter(|centre| crate::address::authority(attempt.url()).as_ref() != Some(centre));
            if let Some(centre) = off_centre {
                let target = policy::redact(attempt.url());
                attempt.error(policy::PolicyError(format!(
                    "refusing a redirect from the centre {centre} to {target}: an origin host \
                     that goes via a centre without fallback = \"origin\" is reached only at \
                     the centre"
                )))
            } else if attempt.previous().len() > max_redirects {
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
            .dns_resolver(resolver.clone())
            .redirect(redirects)
            .https_only(net_policy.http_hosts.is_empty())
            .connect_timeout(settings.connect_timeout)
            .read_timeout(settings.idle_timeout)
            .http1_max_headers(settings.max_response_headers)
            .http2_max_header_list_size(
                u32::try_from(settings.max_header_list_size).unwrap_or(u32::MAX),
            )
            .pool_idle_timeout(Duration::from_secs(60))
            // An HTTP/2 connection carries every request to its host: one that stopped
            // answering (an origin stalled mid-stream) would hold up all of them, each until
            // its own deadline, for as long as it stays pooled. A ping unanswered within
            // `idle_timeout` closes it, so the next request opens a new one.
            .http2_keep_alive_interval(settings.idle_timeout)
            .http2_keep_alive_timeout(settings.idle_timeout)
            .http2_keep_alive_while_idle(true);
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
            health: Default::default(),
            discovery: moka::future::Cache::builder()
                .max_capacity(1024)
                .time_to_live(DISCOVERY_TTL)
                .build(),
            settings,
            http,
            metrics,
            net_policy,
            resolver,
            git_ready: Err("no git was checked (modules.git)".into()),
        })
    }

    /// Checks the `git` at `program` once ([`git::probe`]): git sources are fetched only with a
    /// git that keeps provender's safeguards; without one they are refused, naming why.
    pub fn with_git(mut self, program: &std::path::Path) -> Upstream {
        self.git_ready = git::probe(program).map(|(major, minor)| {
            tracing::debug!("module sources in git are fetched with git {major}.{minor}");
        });
        if let Err(why) = &self.git_ready {
            tracing::info!("module sources in git will be refused: {why}");
        }
        self
    }

    /// A host's discovery document (cached): the URL it came from and the services it lists.
    async fn services(&self, host: &Hostname) -> Result<Arc<(Url, Services)>> {
        self.discovery
            .try_get_with(host.clone(), async {
                self.discover(host).await.map(Arc::new)
            })
            .await
            .map_err(|e: Arc<UpstreamError>| (*e).clone())
    }

    async fn discover(&self, host: &Hostname) -> Result<(Url, Services)> {
        let url = Url::parse(&format!("https://{host}/.well-known/terraform.json"))
            .expect("a validated hostname makes a URL");
        self.check_url(host, &url)?;
        let max = self.settings.max_discovery_size;
        let Some((final_url, body)) = self
            .document(host, Operation::Discovery, &url, max, true)
            .await?
        else {
            return Err(UpstreamError::NotARegistry(format!(
                "{host} has no service discovery document, so it is not a registry"
            )));
        };
        let services = parse_discovery(&body)
            .map_err(|e| UpstreamError::BadDocument(format!("{host}: {e}")))?;
        Ok((final_url, services))
    }

    /// A centre's base URL for `host`'s `service`, checked.
    fn centre_base(&self, host: &Hostname, via: &Via, service: &str) -> Result<Url> {
        let base = via.service_base(host, service).ok_or_else(|| {
            UpstreamError::NotARegistry(format!(
                "{host} goes through {} (via), which offers no {service}",
                via.host
            ))
        })?;
        self.check_url(host, &base)?;
        Ok(base)
    }

    /// Runs `ask` against `host`'s `service`: at its centre when it has a `via`, and then at
    /// the origin itself if the centre did not answer (no connection, a timeout, a 5xx, its
    /// circuit open) and `fallback = "origin"`. An answer of the centre's (a 404, a 403, a
    /// document) is never second-guessed by asking the origin.
    async fn at_service<T, F, Fut>(&self, host: &Hostname, service: &str, ask: F) -> Result<T>
    where
        F: Fn(Url) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let Some(via) = self.settings.via(host) else {
            return ask(self.origin_service_base(host, service).await?).await;
        };
        match ask(self.centre_base(host, via, service)?).await {
            Err(e) if via.fallback_to_origin && centre_unavailable(&e) => {
                tracing::warn!(%host, centre = %via.host, "the centre does not answer ({e}); asking the origin (fallback = \"origin\")");
                ask(self.origin_service_base(host, service).await?).await
            }
            answered => answered,
        }
    }

    /// The base URL of a service from the origin's own service discovery.
    async fn origin_service_base(&self, host: &Hostname, service: &str) -> Result<Url> {
        let found = self.services(host).await?;
        let (final_url, services) = &*found;
        let Some(base) = services.get(service) else {
            return Err(UpstreamError::NotARegistry(format!(
                "{host} does not offer {service} in its service discovery document"
            )));
        };
        let mut resolved = final_url.join(base).map_err(|e| {
            UpstreamError::BadDocument(format!(
                "{host}: {service} {base:?} is not a valid URL: {e}"
            ))
        })?;
        self.check_url(host, &resolved)?;
        if !resolved.path().ends_with('/') {
            let path = format!("{}/", resolved.path());
            resolved.set_path(&path);
        }
        Ok(resolved)
    }

    /// Records bytes received from an origin (archives report as they stream).
    pub fn add_bytes(&self, n: u64) {
        self.metrics.upstream_bytes.inc_by(n);
    }

    /// GETs a document with a size cap. Returns its final URL (after redirects) and body, or
    /// `None` on 404.
    async fn document(
        &self,
        host: &Hostname,
        op: Operation,
        url: &Url,
        max: u64,
        require_json: bool,
    ) -> Result<Option<(Url, Bytes)>> {
        self.get_answer(host, op, url, |resp| async move {
            if require_json && !is_json(&resp) {
                return Err(UpstreamError::BadDocument(format!(
                    "{} {url}: answer is not application/json",
                    op.as_str()
                )));
            }
            let final_url = resp.url().clone();
            let body = read_capped(op, resp, max).await?;
            self.add_bytes(body.len() as u64);
            Ok((final_url, body))
        })
        .await
    }

    /// GETs `url` (with [`send`](Self::send)'s retries) and hands a successful answer to
    /// `read`; `None` on 404, an error for any other status. Times the call and counts its
    /// outcome, whatever `read` makes of the answer.
    async fn get_answer<T, F, Fut>(
        &self,
        host: &Hostname,
        op: Operation,
        url: &Url,
        read: F,
    ) -> Result<Option<T>>
    where
        F: FnOnce(reqwest::Response) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let started = Instant::now();
        let result = async {
            let resp = self
                .send(host, op, url, self.settings.request_timeout)
                .await?;
            let status = resp.status();
            if status == reqwest::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            if !status.is_success() {
                return Err(UpstreamError::status_of(op, url, status));
            }
            read(resp).await.map(Some)
        }
        .await;
        // Counted for whom was asked: the origin, or its centre.
        let peer = self.peer(host, url);
        self.observe(peer, op, started);
        let outcome = match &result {
            Ok(Some(_)) => Outcome::Ok,
            Ok(None) => Outcome::NotFound,
            Err(e) => e.outcome(),
        };
        self.count(peer, op, outcome);
        self.record_health(peer, started, &result);
        result
    }

    /// Notes a call's outcome in the host's health (not a refusal by this mirror's own policy,
    /// which says nothing of the origin).
    fn record_health<T>(&self, host: &Hostname, started: Instant, result: &Result<T>) {
        if matches!(result, Err(UpstreamError::Refused(_))) {
            return;
        }
        let outcome = result.as_ref().map(|_| ()).map_err(|e| e.to_string());
        self.health
            .record(host.as_str(), outcome, started.elapsed());
    }

    /// `e`, an unusable answer of `host`'s (see [`health::Health::fault`]), noted in its health.
    fn origin_fault(&self, host: &Hostname, e: UpstreamError) -> UpstreamError {
        self.health.fault(host.as_str(), e.to_string());
        e
    }

    /// Each origin host's recent calls, with its circuit breaker's state.
    pub fn health(&self) -> Vec<OriginHealth> {
        self.health
            .snapshot()
            .into_iter()
            .map(|(host, recent)| OriginHealth {
                circuit: self.breaker.state_of(&host),
                host,
                recent,
            })
            .collect()
    }

    /// Sends the operation's request (a GET; a HEAD for [`Operation::ArchiveSize`]) with
    /// retries: connection errors, timeouts, 429 and 5xx (except 501) are
    /// retried up to `upstream.retries` times with exponential backoff and full jitter (or the
    /// origin's `Retry-After`), all within `timeout`. Each host has a circuit breaker; while it
    /// is open, calls fail at once. Only failures count towards opening it (no answer, or a
    /// 5xx): a 429 is the host answering and asking for patience, which `Retry-After` gives
    /// it, so a rate limit on one of its endpoints (an identity provider's token endpoint)
    /// never stops every other call to the host (its key set). Failed attempts are counted
    /// here; the caller counts the outcome of the response it gets.
    async fn send(
        &self,
        host: &Hostname,
        op: Operation,
        url: &Url,
        timeout: Duration,
    ) -> Result<reqwest::Response> {
        self.send_as(host, op, url, timeout, Ask::Get).await
    }

    /// [`send`](Self::send), for a GET or a form sent once.
    async fn send_as(
        &self,
        host: &Hostname,
        op: Operation,
        url: &Url,
        timeout: Duration,
        ask: Ask<'_>,
    ) -> Result<reqwest::Response> {
        self.hold_to_centre(host, url)?;
        let deadline = Instant::now() + timeout;
        let mut attempt: u32 = 0;
        // A centre (`via`) has its own circuit: its failures say nothing of the origin's.
        let asked_for = host;
        let host = self.peer(host, url);
        // Every origin host called gets its breaker series, at 0 until its circuit opens.
        self.metrics
            .upstream_circuit_open
            .with_label_values(&[host.as_str()]);
        loop {
            if let Err(rejected) = self.breaker.allow(host.as_str()) {
                return Err(UpstreamError::CircuitOpen(format!(
                    "{} {url}: origin {host} is failing; next attempt in {}s (circuit breaker)",
                    op.as_str(),
                    rejected.retry_in.as_secs().max(1)
                )));
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(UpstreamError::Timeout(format!(
                    "{} {url}: out of time",
                    op.as_str()
                )));
            }
            let result = self.send_once(asked_for, op, url, remaining, ask).await;
            if let Err(e @ UpstreamError::Refused(_)) = &result {
                // Refused by the address or redirect policy: final, and not the origin's health.
                return Err(e.clone());
            }
            // A 429 is an answer: the host is up and asks this client to slow down (waited
            // out through `Retry-After`). Counted as a failure, a vendor's rate limit on one
            // file would open the circuit for everything else the host serves.
            let hint = match &result {
                Ok(resp) if retryable_status(resp.status()) => Some(retry_after(resp)),
                Ok(_) => None,
                Err(_) => Some(None),
            };
            let is_failure = result
                .as_ref()
                .map_or(true, |r| r.status().is_server_error());
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
            if matches!(ask, Ask::FormOnce(_)) || attempt >= self.settings.retries {
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
                Ok(resp) => Outcome::of_status(resp.status()),
                Err(e) => e.outcome(),
            };
            self.count(host, op, outcome);
            tracing::debug!(%host, op = op.as_str(), attempt, ?backoff, "retrying after {}", outcome.as_str());
            drop(result);
            tokio::time::sleep(backoff).await;
            attempt += 1;
        }
    }

    /// One GET, adding the registry's token only where it belongs, or one form POST.
    async fn send_once(
        &self,
        host: &Hostname,
        op: Operation,
        url: &Url,
        timeout: Duration,
        ask: Ask<'_>,
    ) -> Result<reqwest::Response> {
        if let Ask::FormOnce(form) = ask {
            return self
                .http
                .post(url.clone())
                .timeout(timeout)
                .header(reqwest::header::ACCEPT, "application/json")
                .header(
                    reqwest::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body(form.to_string())
                .send()
                .await
                .map_err(|e| UpstreamError::from_send(op, url, &e));
        }
        let method = match op {
            Operation::ArchiveSize => reqwest::Method::HEAD,
            _ => reqwest::Method::GET,
        };
        let mut req = self.http.request(method, url.clone()).timeout(timeout);
        if matches!(op, Operation::Discovery) {
            req = req.header(reqwest::header::ACCEPT, "application/json");
        }
        // A registry's token goes only to that registry's own host (and a centre's only to the
        // centre): not to a `providers.v1` or download URL elsewhere, and (reqwest drops it)
        // not across a redirect.
        if let Some((owner, credential)) = self.credential_for(host, url) {
            req = req.bearer_auth(self.bearer(owner, credential).await?);
        }
        req.send()
            .await
            .map_err(|e| UpstreamError::from_send(op, url, &e))
    }

    /// Whom a request for `host`'s at `url` is really sent to: the centre when `url` is on
    /// `host`'s `via`, else `host`. Circuits and health are kept per peer.
    fn peer<'a>(&'a self, host: &'a Hostname, url: &Url) -> &'a Hostname {
        match self.settings.via(host) {
            Some(via) if crate::address::authority(url).as_deref() == Some(via.host.as_str()) => {
                &via.host
            }
            _ => host,
        }
    }

    /// The credential that goes with a request for `host`'s at `url`, and whose it is: `host`'s
    /// own when `url` is on `host`, its centre's when `url` is on the centre, else none.
    fn credential_for<'a>(
        &'a self,
        host: &'a Hostname,
        url: &Url,
    ) -> Option<(&'a Hostname, &'a Credential)> {
        let owner = self.peer(host, url);
        let credential = self.tokens.get(owner)?;
        (crate::address::authority(url).as_deref() == Some(owner.as_str()))
            .then_some((owner, credential))
    }

    /// The bearer token of a credential: a `token_file` is read for every request, so a
    /// rotated workload identity token is picked up at once.
    async fn bearer(&self, owner: &Hostname, credential: &Credential) -> Result<String> {
        let path = match credential {
            Credential::Token(token) => return Ok(token.clone()),
            Credential::File(path) => path,
        };
        let unusable = |why: String| {
            UpstreamError::Refused(format!(
                "upstream.hosts.{:?}.token_file {}: {why}",
                owner.as_str(),
                path.display()
            ))
        };
        let text = tokio::fs::read_to_string(path)
            .await
            .map_err(|e| unusable(e.to_string()))?;
        let token = text.trim();
        if token.is_empty() || token.chars().any(|c| c.is_control() || c == ' ') {
            return Err(unusable(
                "holds no usable token (empty, or spaces or control characters)".into(),
            ));
        }
        Ok(token.to_string())
    }

    /// Only absolute https URLs (http where `allow_http` says so) without credentials, and
    /// never an IP literal outside the address policy, are ever fetched.
    fn check_url(&self, host: &Hostname, url: &Url) -> Result<()> {
        self.hold_to_centre(host, url)?;
        self.net_policy.check_url(url).map_err(|refused| {
            tracing::warn!(%host, "{refused}");
            UpstreamError::Refused(format!("{host}: {refused}"))
        })
    }

    /// For a host that goes via a centre without `fallback = "origin"`, the centre is the one
    /// place asked: a URL on any other host (a `download_url` or SHA256SUMS URL naming the
    /// origin, a git source elsewhere) is refused before any request, so neither a request nor
    /// a token ever leaves for it. Redirects off such a centre are refused by the client's
    /// redirect policy.
    fn hold_to_centre(&self, host: &Hostname, url: &Url) -> Result<()> {
        let Some(via) = self.settings.via(host) else {
            return Ok(());
        };
        if via.fallback_to_origin
            || crate::address::authority(url).as_deref() == Some(via.host.as_str())
        {
            return Ok(());
        }
        let refused = format!(
            "{host} goes via the centre {} without fallback = \"origin\": refusing {}, which is \
             not on the centre",
            via.host,
            policy::redact(url)
        );
        tracing::warn!(%host, centre = %via.host, "{refused}");
        Err(UpstreamError::Refused(refused))
    }

    /// A URL an origin document names, made absolute against the document's URL and checked.
    fn resolve(&self, host: &Hostname, base: &Url, reference: &str, what: &str) -> Result<Url> {
        let abs = base.join(reference).map_err(|e| {
            UpstreamError::BadDocument(format!("{what}: URL {reference:?} is invalid: {e}"))
        })?;
        self.check_url(host, &abs)?;
        Ok(abs)
    }

    fn count(&self, host: &Hostname, op: Operation, outcome: Outcome) {
        self.metrics
            .upstream_requests
            .with_label_values(&[host.as_str(), op.as_str(), outcome.as_str()])
            .inc();
    }

    fn observe(&self, host: &Hostname, op: Operation, started: Instant) {
        self.metrics
            .upstream_duration
            .with_label_values(&[host.as_str(), op.as_str()])
            .observe(started.elapsed().as_secs_f64());
    }
}

/// What [`Upstream::send_as`] sends.
#[derive(Debug, Clone, Copy)]
enum Ask<'a> {
    /// The operation's GET (a HEAD for [`Operation::ArchiveSize`]), retried.
    Get,
    /// A form POST (`application/x-www-form-urlencoded`), sent once: never retried, as what it
    /// carries may work only once (an authorization code).
    FormOnce(&'a str),
}

/// Tokens from `[upstream.hosts]` (which win) and `TF_TOKEN_*` environment variables, encoded as
/// Terraform encodes them: `.` -> `_`, `-` -> `__`.
fn tokens_for(settings: &UpstreamSettings) -> HashMap<Hostname, Credential> {
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
            let centre = settings
                .hosts
                .values()
                .any(|hs| hs.via.as_ref().is_some_and(|v| v.host == host));
            if (settings.host_allowed(&host) || centre) && !value.is_empty() {
                tokens.insert(host, Credential::Token(value));
            }
        }
    }
    for (host, hs) in &settings.hosts {
        if let Some(t) = &hs.token {
            tokens.insert(host.clone(), Credential::Token(t.clone()));
        } else if let Some(path) = &hs.token_file {
            tokens.insert(host.clone(), Credential::File(path.clone()));
        }
    }
    tokens
}

/// Whether a centre's failure means it did not answer (so `fallback = "origin"` may ask the
/// origin): no connection, a timeout, a 5xx, its circuit open. Not a 404 or 403, nor a
/// document or bytes found wrong: those are the centre's answers.
fn centre_unavailable(e: &UpstreamError) -> bool {
    match e {
        UpstreamError::Connect(_) | UpstreamError::Timeout(_) | UpstreamError::CircuitOpen(_) => {
            true
        }
        UpstreamError::Status { status, .. } => *status >= 500,
        _ => false,
    }
}

/// `base` joined with a relative `path` built from validated address parts.
fn join(base: &Url, path: &str) -> Url {
    base.join(path)
        .expect("validated address parts join onto a base URL")
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

async fn read_capped(op: Operation, resp: reqwest::Response, max: u64) -> Result<Bytes> {
    let url = resp.url().clone();
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(UpstreamError::TooLarge(format!(
            "{} {url}: document larger than the {max}-byte limit",
            op.as_str()
        )));
    }
    let mut body = BytesMut::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| UpstreamError::from_body(op, &url, &e))?;
        if body.len() as u64 + chunk.len() as u64 > max {
            return Err(UpstreamError::TooLarge(format!(
                "{} {url}: document larger than the {max}-byte limit",
                op.as_str()
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

/// A transport error's message: the whole chain of causes, without reqwest's URL suffix.
fn describe(op: Operation, url: &Url, err: &reqwest::Error) -> String {
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
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_centre_that_did_not_answer_is_passed_over() {
        let status = |status| UpstreamError::Status {
            what: "versions".into(),
            status,
        };
        for unavailable in [
            UpstreamError::Connect("refused".into()),
            UpstreamError::Timeout("slow".into()),
            UpstreamError::CircuitOpen("open".into()),
            status(500),
            status(502),
            status(503),
        ] {
            assert!(centre_unavailable(&unavailable), "{unavailable:?}");
        }
        // Its answers stand: a refusal, a missing thing, a bad document, the local policy.
        for answered in [
            status(401),
            status(403),
            status(404),
            status(429),
            UpstreamError::BadDocument("garbled".into()),
            UpstreamError::TooLarge("big".into()),
            UpstreamError::Refused("policy".into()),
            UpstreamError::NotARegistry("none".into()),
        ] {
            assert!(!centre_unavailable(&answered), "{answered:?}");
        }
    }
}
