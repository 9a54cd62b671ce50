//! Request routing and responses.
//!
//! Turns an HTTP request into a call on a front-end of the [`Mirror`] and its result into a
//! response (documents that name URLs rendered by [`super::links`]): JSON documents as
//! `application/json`, archives streamed from the store with `Content-Length`, `ETag` and
//! `Last-Modified`, and every failure as a JSON error body with the status its [`Error`] carries.
//! The OCI distribution API (`/v2/`) is answered by [`oci`], in that API's terms.
//! Records `provender_http_*` metrics for every request, and with `server.access_log` one log
//! line per request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::TryStreamExt;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};

use super::identity::{Identities, Principal};
use super::links::Links;
use super::site::Site;
use crate::address::{MirrorPath, ModulePath, RegistryPath, Version};
use crate::auth::Denied;
use crate::config::Settings;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::mirror::Mirror;
use crate::mirror::{ArchiveBody, ArchiveHead, Reach, Served};
use crate::records::releases::{Packing, Product, ReleaseFile};

mod git;
mod oci;
mod publish;

use super::pages::{ReleaseFilesPage, ReleaseListPage};
pub use super::respond::Body;
use super::respond::{
    denied_response, empty, error_response, json_response, moved_permanently, redirect, response,
};

/// Each route's series of the HTTP metrics, looked up once: finding a series by its label values
/// (hashing them, under a lock) cost a metadata request more than counting it.
struct RouteSeries {
    /// `provender_http_request_duration_seconds`, by route.
    duration: Vec<prometheus::Histogram>,
    /// `provender_http_requests_total` with status 200, by route; other statuses are looked up.
    ok: Vec<prometheus::IntCounter>,
}

impl RouteSeries {
    fn new(metrics: &Metrics) -> RouteSeries {
        RouteSeries {
            duration: Route::ALL
                .iter()
                .map(|r| metrics.http_duration.with_label_values(&[r.as_str()]))
                .collect(),
            ok: Route::ALL
                .iter()
                .map(|r| {
                    metrics
                        .http_requests
                        .with_label_values(&[r.as_str(), "200"])
                })
                .collect(),
        }
    }
}

/// Shared state of the HTTP layer.
pub struct App {
    settings: Arc<Settings>,
    mirror: Arc<Mirror>,
    identities: Arc<Identities>,
    /// Who fetched which versions (see `crate::usage`).
    usage: Arc<crate::usage::Recorder>,
    site: Site,
    metrics: Arc<Metrics>,
    series: RouteSeries,
    pub base_url: url::Url,
    /// Set once shutdown has begun: `/readyz` answers 503 so load balancers move away.
    draining: std::sync::atomic::AtomicBool,
}

/// Which endpoint a request hit; the `route` label of HTTP metrics.
#[derive(Debug, Clone, Copy)]
enum Route {
    Index,
    Version,
    Archive,
    Module,
    Oci,
    Release,
    Git,
    Discovery,
    Registry,
    Page,
    Api,
    Metrics,
    Health,
    Ready,
    Other,
}

impl Route {
    /// Every route, in declaration order (so `route as usize` is its place here).
    const ALL: [Route; 15] = [
        Route::Index,
        Route::Version,
        Route::Archive,
        Route::Module,
        Route::Oci,
        Route::Release,
        Route::Git,
        Route::Discovery,
        Route::Registry,
        Route::Page,
        Route::Api,
        Route::Metrics,
        Route::Health,
        Route::Ready,
        Route::Other,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Route::Index => "index",
            Route::Version => "version",
            Route::Archive => "archive",
            Route::Registry => "registry",
            Route::Module => "module",
            Route::Oci => "oci",
            Route::Release => "release",
            Route::Git => "git",
            Route::Discovery => "discovery",
            Route::Page => "page",
            Route::Api => "api",
            Route::Metrics => "metrics",
            Route::Health => "healthz",
            Route::Ready => "readyz",
            Route::Other => "other",
        }
    }
}

impl App {
    pub fn new(
        settings: Arc<Settings>,
        mirror: Arc<Mirror>,
        metrics: Arc<Metrics>,
        base_url: url::Url,
        ca_pem: Option<Bytes>,
    ) -> App {
        let person_tokens = settings.auth.cli_login.as_ref().map(|_| {
            Arc::new(crate::auth::tokens::PersonTokens::new(
                mirror.core().archives().storage().clone(),
            ))
        });
        let identities = Arc::new(Identities::new(
            settings.clone(),
            mirror.core().clone(),
            person_tokens.clone(),
            &base_url,
        ));
        let usage = Arc::new(crate::usage::Recorder::new(
            mirror.core().archives().storage().clone(),
            settings.usage.clone(),
            metrics.usage_dropped.clone(),
        ));
        App {
            usage,
            site: Site::new(
                settings.clone(),
                mirror.core().clone(),
                base_url.clone(),
                ca_pem,
                person_tokens,
            ),
            identities,
            settings,
            mirror,
            series: RouteSeries::new(&metrics),
            metrics,
            base_url,
            draining: Default::default(),
        }
    }

    /// The usage counts this server keeps.
    pub fn usage(&self) -> &Arc<crate::usage::Recorder> {
        &self.usage
    }

    /// Counts a client's use of a provider or module version, if the answer served it.
    fn record_use(
        &self,
        resp: &Result<Response<Body>, Error>,
        principal: &Principal,
        kind: crate::usage::Kind,
        address: String,
        version: &crate::address::Version,
    ) {
        if resp.as_ref().is_ok_and(|r| r.status().as_u16() < 400) {
            self.count_use(principal, kind, address, version);
        }
    }

    /// Counts a client's use of a provider or module version: its download metric and the
    /// usage record.
    fn count_use(
        &self,
        principal: &Principal,
        kind: crate::usage::Kind,
        address: String,
        version: &crate::address::Version,
    ) {
        self.metrics.client_download(&principal.name);
        self.usage.record(crate::usage::Use {
            client: principal.name.to_string(),
            kind,
            address,
            version: version.to_string(),
        });
    }

    /// Marks the server as shutting down (see `/readyz`).
    pub fn start_draining(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// `/readyz`: 200 while the server can serve; 503 with the reason while it shuts down or
    /// its cache cannot be read or written.
    async fn readiness(&self) -> Response<Body> {
        let (status, reason) = if self.draining.load(std::sync::atomic::Ordering::SeqCst) {
            (
                "draining",
                "shutting down: finishing responses in progress".to_string(),
            )
        } else {
            match self.mirror.core().check_storage().await {
                Ok(()) => {
                    return json_response(StatusCode::OK, br#"{"status":"ready"}"#.to_vec());
                }
                Err(e) => ("unavailable", e.to_string()),
            }
        };
        tracing::warn!(status, "not ready: {reason}");
        let body = serde_json::json!({ "status": status, "reason": reason }).to_string();
        json_response(StatusCode::SERVICE_UNAVAILABLE, body.into_bytes())
    }

    /// The mirror behind this HTTP layer.
    pub fn mirror(&self) -> &Arc<Mirror> {
        &self.mirror
    }

    /// Answers one request. Never fails: errors become JSON error responses.
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        peer: SocketAddr,
    ) -> Result<Response<Body>, Infallible> {
        let started = Instant::now();
        // Only the sign-in form has a body; every other route reads the head alone.
        let (head, body) = req.into_parts();
        let req = Request::from_parts(head, ());
        let answer = async {
            // Who is asking, once per request: the routes decide what that allows.
            let who = self
                .identities
                .check(
                    req.headers()
                        .get(header::AUTHORIZATION)
                        .map(HeaderValue::as_bytes),
                    peer.ip(),
                    req.uri().path().starts_with("/v2/"),
                )
                .await;
            let (route, result) = self.route(&req, body, &who, peer).await;
            (who.ok(), route, result)
        };
        // The request's budget bounds everything done for it before its answer starts: the
        // identity check (an issuer's keys), the store, origins, a centre. Dropping the work
        // cancels the calls made for it; fills and single flights run on in their own tasks.
        let (who, route, result) = if self.budgeted(req.uri().path()) {
            let budget = self.settings.server.request_budget;
            match tokio::time::timeout(budget, answer).await {
                Ok(answered) => answered,
                Err(_) => (
                    None,
                    self.route_of(req.uri().path()),
                    Err(Error::OutOfTime(budget)),
                ),
            }
        } else {
            answer.await
        };
        let mut resp = result.unwrap_or_else(|e| {
            if e.status().is_server_error() {
                tracing::warn!(path = %req.uri().path(), status = e.status().as_u16(), "{e}");
            } else {
                tracing::debug!(path = %req.uri().path(), status = e.status().as_u16(), "{e}");
            }
            error_response(&e)
        });
        if req.method() == Method::HEAD {
            *resp.body_mut() = empty();
        }
        let status = resp.status();
        if status == StatusCode::OK {
            self.series.ok[route as usize].inc();
        } else {
            self.metrics
                .http_requests
                .with_label_values(&[route.as_str(), status.as_str()])
                .inc();
        }
        self.series.duration[route as usize].observe(started.elapsed().as_secs_f64());
        if self.settings.server.access_log {
            // The client a signed URL names, else the one the credentials name.
            let client = resp
                .extensions()
                .get::<Principal>()
                .or(who.as_ref())
                .map_or("-", |p| &*p.name);
            access_log(&req, &resp, route, peer, client, started);
        }
        Ok(resp)
    }

    /// Whether `server.request_budget` applies to a request for `path`: everything but the
    /// git door (whose refreshes and streams have `git.*` deadlines of their own) and the
    /// publishing API (whose uploads are as long as they are large).
    fn budgeted(&self, path: &str) -> bool {
        let Some(rest) = path.strip_prefix(self.settings.server.base_path.as_str()) else {
            return true;
        };
        !(rest.starts_with("git/") || rest.starts_with("-/api/v1/publish/"))
    }

    /// The route a request for `path` takes, for the metrics of one whose budget ran out
    /// (what [`route`](Self::route) would have said, from the path alone).
    fn route_of(&self, path: &str) -> Route {
        match path {
            "/healthz" => return Route::Health,
            "/readyz" => return Route::Ready,
            "/metrics" => return Route::Metrics,
            "/.well-known/terraform.json" => return Route::Discovery,
            _ if path == "/v2" || path.starts_with("/v2/") => return Route::Oci,
            _ => {}
        }
        let base = self.settings.server.base_path.as_str();
        let Some(rest) = path.strip_prefix(base) else {
            return Route::Page;
        };
        if let Some(site) = rest.strip_prefix("-/") {
            return if site.starts_with("api/") {
                Route::Api
            } else {
                Route::Page
            };
        }
        if rest.is_empty() {
            Route::Page
        } else if rest.starts_with("v1/providers/") {
            Route::Registry
        } else if rest.starts_with("v1/modules/") {
            Route::Module
        } else if rest.starts_with("releases/") {
            Route::Release
        } else if rest.starts_with("git/") {
            Route::Git
        } else {
            match MirrorPath::parse(rest) {
                Ok(MirrorPath::Index(..)) => Route::Index,
                Ok(MirrorPath::Version(..)) => Route::Version,
                Ok(MirrorPath::Archive(..)) => Route::Archive,
                Err(_) => Route::Other,
            }
        }
    }

    async fn route(
        &self,
        req: &Request<()>,
        body: Incoming,
        who: &Result<Principal, Denied>,
        peer: SocketAddr,
    ) -> (Route, Result<Response<Body>, Error>) {
        let path = req.uri().path();
        let route = match path {
            "/healthz" => Route::Health,
            "/readyz" => Route::Ready,
            "/metrics" => Route::Metrics,
            "/.well-known/terraform.json" => Route::Discovery,
            _ if path
                .strip_prefix(self.settings.server.base_path.as_str())
                .is_some_and(|rest| rest.starts_with("releases/")) =>
            {
                Route::Release
            }
            _ => Route::Other,
        };
        // The OCI distribution API lives at `/v2/` on the host, whatever the base path, with its
        // own error format and authentication challenge.
        if path == "/v2" || path.starts_with("/v2/") {
            return (Route::Oci, Ok(self.oci(req, who).await));
        }
        // The pages and the API check methods and credentials their own way (sign-in).
        let base = self.settings.server.base_path.as_str();
        if path == base || path == base.trim_end_matches('/') {
            let answer = self.site.handle(req, body, "", who, peer.ip()).await;
            return (Route::Page, Ok(answer));
        }
        if let Some(rest) = path.strip_prefix(base).and_then(|r| r.strip_prefix("-/")) {
            if let Some(publish) = rest.strip_prefix("api/v1/publish/") {
                return (Route::Api, self.publish(req, body, publish, who).await);
            }
            let route = if rest.starts_with("api/") {
                Route::Api
            } else {
                Route::Page
            };
            return (
                route,
                Ok(self.site.handle(req, body, rest, who, peer.ip()).await),
            );
        }
        // The git door takes POSTs (a fetch's wants and haves) and answers with git's challenge.
        if let Some(rest) = path.strip_prefix(base).and_then(|r| r.strip_prefix("git/")) {
            return (Route::Git, self.git(req, body, rest, who, peer).await);
        }
        if !matches!(*req.method(), Method::GET | Method::HEAD) {
            return (route, Err(Error::MethodNotAllowed));
        }
        let principal = match self.authorize(req, route, who) {
            Ok(principal) => principal,
            Err(denied) => return (route, Ok(denied_response(&denied))),
        };
        match route {
            Route::Health => {
                return (
                    route,
                    Ok(json_response(
                        StatusCode::OK,
                        br#"{"status":"ok"}"#.to_vec(),
                    )),
                );
            }
            Route::Ready => return (route, Ok(self.readiness().await)),
            Route::Discovery => return (route, Ok(self.discovery())),
            Route::Metrics => {
                let body = self.metrics.render();
                return (
                    route,
                    Ok(response(
                        StatusCode::OK,
                        "text/plain; version=0.0.4; charset=utf-8",
                        Bytes::from(body),
                    )),
                );
            }
            _ => {}
        }
        let Some(rest) = path.strip_prefix(base) else {
            return (
                Route::Other,
                Err(Error::NotFound(format!(
                    "nothing at {path}; the mirror lives under {base}"
                ))),
            );
        };
        let (route, result) = self.serve(req, rest, &principal).await;
        if !self.settings.server.access_log {
            return (route, result);
        }
        // For the access log: the client a signed URL names.
        let result = result.map(|mut resp| {
            resp.extensions_mut().insert(principal);
            resp
        });
        (route, result)
    }

    /// The registry protocols and the network mirror, for a client that may use them.
    async fn serve(
        &self,
        req: &Request<()>,
        rest: &str,
        principal: &Principal,
    ) -> (Route, Result<Response<Body>, Error>) {
        let reach = principal.reach();
        if let Some(registry_path) = rest.strip_prefix("v1/providers/") {
            let registry_path = self.unalias(registry_path);
            return (
                Route::Registry,
                self.registry(&registry_path, principal).await,
            );
        }
        if let Some(module_path) = rest.strip_prefix("v1/modules/") {
            let module_path = self.unalias(module_path);
            return (
                Route::Module,
                self.module(req, &module_path, principal).await,
            );
        }
        if let Some(release_path) = rest.strip_prefix("releases/") {
            return (
                Route::Release,
                self.release(req, release_path, &reach).await,
            );
        }
        let parsed = match MirrorPath::parse(rest) {
            Ok(p) => p,
            Err(e) => return (Route::Other, Err(Error::BadRequest(e))),
        };
        if let Err(e) = principal.may_get_provider(parsed.addr()) {
            return (Route::Other, Err(e));
        }
        let providers = &self.mirror.providers;
        match parsed {
            MirrorPath::Index(addr) => (
                Route::Index,
                providers
                    .index(&addr, &reach)
                    .await
                    .map(|body| json_response(StatusCode::OK, body)),
            ),
            MirrorPath::Version(addr, version) => (
                Route::Version,
                providers.version(&addr, &version, &reach).await.map(|rec| {
                    let body = Links::new(&self.settings, &principal.name)
                        .mirror_version(&addr, &version, &rec);
                    json_response(StatusCode::OK, body)
                }),
            ),
            MirrorPath::Archive(addr, version, platform) if req.method() == Method::HEAD => {
                // A HEAD never downloads the archive.
                let result = providers
                    .archive_head(&addr, &version, &platform, &reach)
                    .await;
                (
                    Route::Archive,
                    result.map(|head| archive_head_response(req, &head)),
                )
            }
            MirrorPath::Archive(addr, version, platform) => {
                let result = providers.archive(&addr, &version, &platform, &reach).await;
                let resp = result.map(|served| match served {
                    Served::Body(archive) => self.archive_response(req, archive),
                    Served::Redirect(url) => redirect(&url),
                });
                let kind = crate::usage::Kind::Provider;
                self.record_use(&resp, principal, kind, addr.to_string(), &version);
                (Route::Archive, resp)
            }
        }
    }

    /// `releases/<product>/<version>/<file>`: a CLI release's zip, SHA256SUMS or signature, in
    /// the paths of the vendor's layout. (`releases` has no dot, so it shadows no registry
    /// hostname a provider address can name in practice.)
    async fn release(
        &self,
        req: &Request<()>,
        path: &str,
        reach: &Reach,
    ) -> Result<Response<Body>, Error> {
        let not_here = || {
            Error::NotFound(format!(
                "releases/{path}: expected releases/<terraform|tofu>/[<version>/[<file>]]"
            ))
        };
        let not_a_release = |product: Product, version: &Version| {
            Error::NotFound(format!("{product} {version} is not a release"))
        };
        let releases = &self.mirror.releases;
        let segments: Vec<&str> = path.split('/').collect();
        fn json<T: serde::Serialize>(value: &T) -> Response<Body> {
            let body = serde_json::to_vec(value).expect("release documents serialise");
            json_response(StatusCode::OK, Bytes::from(body))
        }
        // The vendors' lists of releases. Each build's `url` stays the vendor's canonical one:
        // installers given this mirror as their base rebuild download URLs from it (hc-install
        // joins the URL's path to its base, tenv swaps the vendor's prefix for its base), so a
        // URL on this mirror would have them repeat `releases/`.
        let base = HASHICORP_RELEASES;
        let here = format!("{}releases/", self.settings.server.base_path);
        match segments[..] {
            // tofuenv's `TOFUENV_REMOTE`, asked for its list of releases the way GitHub's
            // releases API answers it; a browser (or tenv, or anything else) is sent on to the
            // listing below.
            ["tofu"] if wants_json(req) => {
                let list = releases.list(Product::Tofu, reach).await?;
                let mut resp = json(&list.github_releases());
                vary_accept(&mut resp);
                return Ok(resp);
            }
            [product] if Product::parse(product).is_some() => {
                let mut resp = moved_permanently(&format!("{here}{product}/"));
                vary_accept(&mut resp);
                return Ok(resp);
            }
            // The listings a person or tfenv / tenv browse, as the vendors' release sites have
            // them.
            [product, ""] => {
                let product = Product::parse(product).ok_or_else(not_here)?;
                let list = releases.list(product, reach).await?;
                return listing(ReleaseListPage {
                    product: product.as_str(),
                    versions: list
                        .releases
                        .iter()
                        .rev()
                        .map(|r| r.version.to_string())
                        .collect(),
                });
            }
            [product, version, ""] => {
                let product = Product::parse(product).ok_or_else(not_here)?;
                let version = Version::parse(version).map_err(Error::BadRequest)?;
                let list = releases.list(product, reach).await?;
                let release = list
                    .release(&version)
                    .ok_or_else(|| not_a_release(product, &version))?;
                let mut files = list.served_files(release);
                files.sort();
                return listing(ReleaseFilesPage {
                    product: product.as_str(),
                    files,
                    version: version.to_string(),
                });
            }
            ["terraform", "index.json"] => {
                let list = releases.list(Product::Terraform, reach).await?;
                return Ok(json(&list.hashicorp_index(&format!("{base}terraform/"))));
            }
            ["terraform", version, "index.json"] => {
                let version = Version::parse(version).map_err(Error::BadRequest)?;
                let list = releases.list(Product::Terraform, reach).await?;
                let release = list
                    .release(&version)
                    .ok_or_else(|| not_a_release(Product::Terraform, &version))?;
                return Ok(json(
                    &list.hashicorp_release(release, &format!("{base}terraform/")),
                ));
            }
            ["tofu", "api.json"] => {
                let list = releases.list(Product::Tofu, reach).await?;
                return Ok(json(&list.tofu_index()));
            }
            [product, version] if Product::parse(product).is_some() => {
                let version = Version::parse(version).map_err(Error::BadRequest)?;
                return Ok(moved_permanently(&format!("{here}{product}/{version}/")));
            }
            _ => {}
        }
        let [product, version, file] = match segments[..] {
            // tofuenv downloads from `$TOFUENV_REMOTE/download/v<version>/<file>`, GitHub's
            // layout: the same files as `tofu/<version>/<file>`.
            ["tofu", "download", tag, file] => {
                let version = tag.strip_prefix('v').ok_or_else(not_here)?;
                ["tofu", version, file]
            }
            [product, version, file] => [product, version, file],
            _ => return Err(not_here()),
        };
        let product = Product::parse(product).ok_or_else(not_here)?;
        let version = Version::parse(version).map_err(Error::BadRequest)?;
        match ReleaseFile::parse(product, &version, file).ok_or_else(not_here)? {
            ReleaseFile::Build(key) => {
                // A HEAD never downloads the build.
                let mut resp = if req.method() == Method::HEAD {
                    archive_head_response(req, &releases.build_head(&key, reach).await?)
                } else {
                    self.archive_response(req, releases.build(&key, reach).await?)
                };
                if key.packing == Packing::TarGz && resp.status() == StatusCode::OK {
                    resp.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/gzip"),
                    );
                }
                Ok(resp)
            }
            ReleaseFile::Sums => {
                let sums = releases.checksums(product, &version, false, reach).await?;
                Ok(response(StatusCode::OK, "text/plain; charset=utf-8", sums))
            }
            ReleaseFile::Signature => {
                let sig = releases.checksums(product, &version, true, reach).await?;
                Ok(response(StatusCode::OK, "application/octet-stream", sig))
            }
        }
    }

    /// Client authentication (see `auth`): a bearer token, or for an archive a signed URL,
    /// which names the client it was handed to.
    fn authorize(
        &self,
        req: &Request<()>,
        route: Route,
        who: &Result<Principal, Denied>,
    ) -> Result<Principal, Denied> {
        let auth = &self.settings.auth;
        let anyone = || self.identities.anonymous();
        if !auth.enabled() {
            return Ok(anyone());
        }
        let protected = match route {
            Route::Discovery => false,
            Route::Health | Route::Ready => auth.protect_health,
            Route::Metrics => auth.protect_metrics,
            Route::Release => auth.protect_releases,
            _ => true,
        };
        if !protected {
            return Ok(who.clone().unwrap_or_else(|_| anyone()));
        }
        if let Ok(principal) = who {
            return Ok(principal.clone());
        }
        let rest = req
            .uri()
            .path()
            .strip_prefix(self.settings.server.base_path.as_str());
        // Archives, and the registry facade's SHA256SUMS files, may carry a signed URL instead.
        let module_archive = rest
            .and_then(|r| r.strip_prefix("v1/modules/"))
            .map(|r| self.unalias(r))
            .and_then(|r| match ModulePath::parse(&r) {
                Ok(ModulePath::Archive(addr, version)) => Some(format!(
                    "v1/modules/{}",
                    ModulePath::archive_path(&addr, &version)
                )),
                _ => None,
            });
        let signed_path = module_archive.or(match rest {
            Some(rest) => match rest.strip_prefix("v1/providers/") {
                Some(registry) => match RegistryPath::parse(registry) {
                    Ok(RegistryPath::Sums {
                        addr,
                        version,
                        index,
                        signature,
                    }) => Some(crate::auth::sums_path(&addr, &version, index, signature)),
                    _ => None,
                },
                None => match MirrorPath::parse(rest) {
                    Ok(MirrorPath::Archive(addr, version, platform)) => {
                        Some(addr.archive_path(&version, &platform))
                    }
                    _ => None,
                },
            },
            None => None,
        });
        if let Some(path) = signed_path {
            let now = std::time::SystemTime::now();
            if let Some(client) = auth.verify_signed(&path, req.uri().query(), now)? {
                return Ok(Principal::named(client, &self.settings));
            }
        }
        who.clone()
    }

    /// A registry path below `v1/providers/` or `v1/modules/` whose hostname segment is `-`
    /// (what this server's own discovery document names) with the registry of its namespace
    /// put in its place: this one's own hostname for a private namespace
    /// (`publishing.namespaces`), else the origin registry (`modules.aliases`, else
    /// `modules.default_registry`).
    fn unalias(&self, path: &str) -> String {
        match path.strip_prefix("-/") {
            Some(rest) => {
                let namespace = rest.split('/').next().unwrap_or_default();
                let private = &self.settings.trust.private;
                let origin = match &private.hostname {
                    Some(own) if private.contains(own, namespace) => own,
                    _ => self.settings.modules.origin_of(namespace),
                };
                format!("{origin}/{rest}")
            }
            None => path.to_string(),
        }
    }

    /// `/.well-known/terraform.json`: this server as a registry of its own, so that sources
    /// written with its hostname (`mirror.example.com/acme/vpc/aws`) go through it. Both
    /// services map namespaces to origins with `modules.aliases` / `modules.default_registry`.
    fn discovery(&self) -> Response<Body> {
        let base = &self.settings.server.base_path;
        let mut doc = serde_json::json!({
            "modules.v1": format!("{base}v1/modules/-/"),
            "providers.v1": format!("{base}v1/providers/-/"),
        });
        // `terraform login` / `tofu login` (see `auth::login`).
        if self.settings.auth.cli_login.is_some() {
            doc["login.v1"] = serde_json::json!({
                "client": crate::auth::login::CLIENT_ID,
                "grant_types": ["authz_code"],
                "authz": format!("{base}-/login/authorize"),
                "token": format!("{base}-/login/token"),
            });
        }
        json_response(StatusCode::OK, doc.to_string().into_bytes())
    }

    /// The module registry facade (see `mirror::modules`).
    async fn module(
        &self,
        req: &Request<()>,
        path: &str,
        principal: &Principal,
    ) -> Result<Response<Body>, Error> {
        let parsed = ModulePath::parse(path).map_err(Error::BadRequest)?;
        principal.may_get_module(parsed.addr())?;
        let reach = principal.reach();
        let m = &self.mirror.modules;
        Ok(match parsed {
            ModulePath::Versions(addr) => {
                json_response(StatusCode::OK, m.module_versions(&addr, &reach).await?)
            }
            ModulePath::Download(addr, version) => {
                let rec = m.module_download(&addr, &version, &reach).await?;
                let location = Links::new(&self.settings, &principal.name)
                    .module_package(&addr, &version, &rec);
                // Both forms: Terraform reads the header, OpenTofu also the JSON body. With
                // client authentication on, OpenTofu 1.12 and later is told to send its token for
                // this host with the package request (the signed URL stays for older clients and
                // Terraform). Not for a package whose module lies in a subdirectory: OpenTofu's
                // direct download does not read the `//subdir` of a location.
                let use_registry_credentials =
                    (self.settings.auth.enabled() && rec.subdir.is_none()).then_some(true);
                let body = crate::records::docs::to_bytes(&crate::records::docs::ModuleLocation {
                    location: location.clone(),
                    use_registry_credentials,
                });
                let mut resp = json_response(StatusCode::OK, body);
                resp.headers_mut().insert(
                    "x-terraform-get",
                    HeaderValue::from_str(&location)
                        .map_err(|e| Error::unexpected(format!("module location: {e}")))?,
                );
                resp
            }
            ModulePath::Archive(addr, version) if req.method() == Method::HEAD => {
                let mut resp = archive_head_response(req, &m.module_head(&addr, &version).await?);
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/gzip"),
                );
                resp
            }
            ModulePath::Archive(addr, version) => {
                let package = m.serve_module_package(&addr, &version, &reach).await?;
                let head = ArchiveHead {
                    sha256: package.sha256,
                    size: Some(package.size),
                    modified: package.modified,
                };
                let mut resp = archive_head_response(req, &head);
                if resp.status() == StatusCode::OK {
                    resp.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/gzip"),
                    );
                    let served = self.metrics.archive_bytes_served.clone();
                    let stream = package
                        .body
                        .inspect_ok(move |chunk| served.inc_by(chunk.len() as u64))
                        .map_ok(Frame::data);
                    *resp.body_mut() = BodyExt::boxed_unsync(StreamBody::new(stream));
                }
                let resp = Ok(resp);
                let kind = crate::usage::Kind::Module;
                self.record_use(&resp, principal, kind, addr.to_string(), &version);
                return resp;
            }
        })
    }

    /// The registry-protocol facade (see `mirror::facade`).
    async fn registry(&self, path: &str, principal: &Principal) -> Result<Response<Body>, Error> {
        let parsed = RegistryPath::parse(path).map_err(Error::BadRequest)?;
        principal.may_get_provider(parsed.addr())?;
        let reach = principal.reach();
        let m = &self.mirror.providers;
        Ok(match parsed {
            RegistryPath::Versions(addr) => {
                json_response(StatusCode::OK, m.registry_versions(&addr, &reach).await?)
            }
            RegistryPath::Download(addr, version, platform) => {
                let answer = m
                    .registry_download(&addr, &version, &platform, &reach)
                    .await?;
                let links = Links::new(&self.settings, &principal.name);
                json_response(
                    StatusCode::OK,
                    links.registry_download(&addr, &version, &platform, &answer),
                )
            }
            RegistryPath::Sums {
                addr,
                version,
                index,
                signature,
            } => {
                let body = m
                    .registry_sums(&addr, &version, index, signature, &reach)
                    .await?;
                let content_type = if signature {
                    "application/octet-stream"
                } else {
                    "text/plain; charset=utf-8"
                };
                response(StatusCode::OK, content_type, body)
            }
        })
    }

    fn archive_response(&self, req: &Request<()>, archive: ArchiveBody) -> Response<Body> {
        let head = ArchiveHead {
            sha256: archive.sha256,
            size: archive.size,
            modified: archive.modified,
        };
        let mut resp = archive_head_response(req, &head);
        if resp.status() == StatusCode::OK {
            let served = self.metrics.archive_bytes_served.clone();
            let stream = archive
                .stream
                .inspect_ok(move |chunk| served.inc_by(chunk.len() as u64))
                .map_ok(Frame::data);
            *resp.body_mut() = BodyExt::boxed_unsync(StreamBody::new(stream));
        }
        resp
    }
}

/// Whether a request's `Accept` asks for JSON (`application/json`, or GitHub's
/// `application/vnd.github+json`).
fn wants_json(req: &Request<()>) -> bool {
    req.headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.split(';').next().unwrap_or_default().trim())
        .any(|t| {
            t.eq_ignore_ascii_case("application/json")
                || t.eq_ignore_ascii_case("application/vnd.github+json")
        })
}

/// Marks an answer as depending on the request's `Accept`.
fn vary_accept(resp: &mut Response<Body>) {
    resp.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("accept"));
}

/// A release listing page: plain HTML that loads nothing and runs nothing.
fn listing(page: impl askama::Template) -> Result<Response<Body>, Error> {
    let text = page
        .render()
        .map_err(|e| Error::unexpected(format!("rendering a release listing: {e}")))?;
    let mut resp = response(
        StatusCode::OK,
        "text/html; charset=utf-8",
        Bytes::from(text),
    );
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'; base-uri 'none'"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    Ok(resp)
}

/// Where HashiCorp publishes its releases, as the build URLs in its lists name it.
const HASHICORP_RELEASES: &str = "https://releases.hashicorp.com/";

/// The head of an archive response, with an empty body: `ETag` (the SHA-256), `Last-Modified`,
/// and either 304 for a matching `If-None-Match` or 200 with `Content-Type` and, when known,
/// `Content-Length`.
fn archive_head_response(req: &Request<()>, head: &ArchiveHead) -> Response<Body> {
    let etag = format!("\"{}\"", head.sha256);
    let not_modified = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let builder = Response::builder().header(header::ETAG, &etag).header(
        header::LAST_MODIFIED,
        httpdate::fmt_http_date(head.modified),
    );
    let builder = if not_modified {
        builder.status(StatusCode::NOT_MODIFIED)
    } else {
        let builder = builder
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/zip");
        match head.size {
            Some(size) => builder.header(header::CONTENT_LENGTH, size),
            None => builder,
        }
    };
    builder.body(empty()).expect("valid response")
}

/// One line per request on target `provender::access`: who asked for what, the answer, and how
/// long its head took. Query strings (signed URLs) and credentials are left out.
fn access_log(
    req: &Request<()>,
    resp: &Response<Body>,
    route: Route,
    peer: SocketAddr,
    client: &str,
    started: Instant,
) {
    let header =
        |h: &Option<&HeaderValue>| h.and_then(|v| v.to_str().ok()).unwrap_or("-").to_owned();
    tracing::info!(
        target: "provender::access",
        peer = %peer.ip(),
        client,
        method = %req.method(),
        path = %req.uri().path(),
        version = ?req.version(),
        status = resp.status().as_u16(),
        route = route.as_str(),
        bytes = %header(&resp.headers().get(header::CONTENT_LENGTH)),
        head_ms = started.elapsed().as_secs_f64() * 1000.0,
        user_agent = %header(&req.headers().get(header::USER_AGENT)),
        "request"
    );
}

#[cfg(test)]
mod tests {
    use super::Route;

    #[test]
    fn each_route_is_at_its_place_in_all() {
        for (i, route) in Route::ALL.iter().enumerate() {
            assert_eq!(*route as usize, i, "{}", route.as_str());
        }
    }
}
