//! What people and scripts see under the base URL: the start page at `<base>`, the pages and
//! the JSON API under `<base>-/` (`-/` cannot begin a hostname, so nothing here shadows a mirror
//! path), sign-in and sign-out, and the pages' own static files.
//!
//! Every view comes from the [`Catalogue`]; a page renders it with its template (see
//! [`super::pages`]) and the API serialises it, so the two agree. Pages are sent with a strict
//! `Content-Security-Policy` (nothing but this server's own scripts, styles and images; no
//! inline code, no frames, forms only to itself) and load nothing from anywhere else.
//!
//! With client authentication on, everything here but the sign-in page and the static files
//! needs a bearer token or a session cookie (see [`crate::auth::session`]): a page without one
//! redirects to sign-in, an API request gets 401. Sign-in, sign-out and approvals (the policy
//! page's forms, `POST -/api/v1/policy/approvals`) are the only `POST`s; browsers'
//! `Sec-Fetch-Site` must say they come from this site (or, from browsers too old to send it,
//! `Origin` must be this server's; a form with neither is refused), and the cookie is
//! `SameSite=Strict`, so other sites cannot make a browser use them. An approval is made only
//! by a client whose `[[auth.rules]]` entry says `approve = true`, under its name; with
//! authentication off there is no name to record, so none is made here. Single sign-on's starts
//! and callbacks are rate-limited per client address and for everyone (see
//! [`crate::auth::sso::SignIns`]).
//!
//! Pages and API documents are rendered by at most half the cores at a time, so that clients
//! asking for them as fast as they can leave the protocol the rest.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use askama::Template;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::identity::Principal;
use super::pages::{
    Chrome, ErrorPage, Paging, PolicyPage, ProviderPage, ProvidersPage, PublishedPage,
    ReleasesPage, SignInPage, SignedInPage, Snippet, StartPage, StatusPage, UsagePage, VersionPage,
};
use super::respond::{
    Body, error_headers, error_response, json_response, response, see_other, unauthorized,
};
use crate::address::{Platform, ProviderAddr, Version};
use crate::auth::Denied;
use crate::auth::oidc::{Issuers, Judged, Kept};
use crate::auth::session::{self, Session, Sessions};
use crate::auth::sso::{self, Pending, SignIns};
use crate::catalogue::{
    ApprovalRequest, Catalogue, ModuleQuery, ProviderQuery, ReleaseCatalogue, UsageQuery,
};
use crate::config::Settings;
use crate::error::Error;
use crate::mirror::Core;
use crate::upstream::IssuerEndpoints;

mod login;
mod modules;

/// Providers listed per page.
pub const PAGE_SIZE: usize = 100;

/// The largest sign-in or approval form (or JSON body) accepted.
const MAX_FORM: usize = 8 * 1024;

/// Where approvers `POST` approvals, below `-/`.
const APPROVALS: &str = "api/v1/policy/approvals";

/// What pages may load: their own scripts, styles and images, nothing inline, no frames.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The static files, built into the binary.
const STATIC: &[(&str, &str, &str)] = &[
    (
        "provender.css",
        "text/css; charset=utf-8",
        include_str!("assets/provender.css"),
    ),
    (
        "provender.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/provender.js"),
    ),
    ("icon.svg", "image/svg+xml", include_str!("assets/icon.svg")),
];

/// The pages, the API and sign-in.
pub struct Site {
    settings: Arc<Settings>,
    catalogue: Arc<Catalogue>,
    /// Sign-in sessions, when client authentication is on.
    sessions: Option<Sessions>,
    /// The identity provider's keys, for single sign-on's ID tokens.
    sso_keys: Issuers,
    /// The identity provider's endpoints, from its discovery document.
    sso_endpoints: Kept<IssuerEndpoints, Error>,
    /// Single sign-on's rate bounds and the sign-ins that came back.
    sign_ins: SignIns,
    /// The origins' client reaches the identity provider.
    core: Arc<Core>,
    base_url: url::Url,
    /// The generated CA certificate, when the server made its own.
    ca_pem: Option<Bytes>,
    /// Pages and API documents rendered at once: at most half the cores, so that however
    /// hard the pages are asked for, the protocol keeps the other half.
    renders: tokio::sync::Semaphore,
    /// People's tokens, when `terraform login` is on (`[auth.cli_login]`).
    person_tokens: Option<Arc<crate::auth::tokens::PersonTokens>>,
    /// `terraform login` codes already traded here.
    used_codes: crate::auth::login::UsedCodes,
}

/// How a request is answered when it lacks credentials.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Page,
    Api,
}

/// Who is asking.
enum Caller {
    /// Authentication is off, or the request carried a valid bearer token.
    Let,
    /// A signed-in browser.
    Session(Session),
    Nobody,
}

impl Site {
    pub fn new(
        settings: Arc<Settings>,
        core: Arc<Core>,
        base_url: url::Url,
        ca_pem: Option<Bytes>,
        person_tokens: Option<Arc<crate::auth::tokens::PersonTokens>>,
    ) -> Site {
        let catalogue = Catalogue::new(core.clone());
        let sso_keys = Issuers::new(
            settings
                .auth
                .sso
                .iter()
                .map(|s| s.rules.clone())
                .collect::<Vec<_>>()
                .as_slice(),
        );
        let sessions = settings
            .auth
            .pages_need_sign_in()
            .then(|| Sessions::new(&settings.auth, base_url.as_str()));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Site {
            settings,
            catalogue,
            sessions,
            sso_keys,
            sso_endpoints: Kept::default(),
            sign_ins: SignIns::default(),
            core,
            base_url,
            ca_pem,
            renders: tokio::sync::Semaphore::new((cores / 2).max(1)),
            person_tokens,
            used_codes: Default::default(),
        }
    }

    fn base(&self) -> &str {
        &self.settings.server.base_path
    }

    /// Answers `<base>` (`rest` empty) or `<base>-/<rest>` to a client at `peer`.
    pub async fn handle(
        &self,
        req: &Request<()>,
        body: Incoming,
        rest: &str,
        who: &Result<Principal, Denied>,
        peer: IpAddr,
    ) -> Response<Body> {
        let kind = if rest.starts_with("api/") {
            Kind::Api
        } else {
            Kind::Page
        };
        let result = self.answer(req, body, rest, kind, who, peer).await;
        let mut resp = result.unwrap_or_else(|e| match kind {
            Kind::Api => error_response(&e),
            Kind::Page => self.error_page(&e, self.session(req).is_some()),
        });
        let headers = resp.headers_mut();
        if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
            headers.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            );
        }
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        if !headers.contains_key(header::CACHE_CONTROL) {
            headers.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("private, no-store"),
            );
        }
        resp
    }

    async fn answer(
        &self,
        req: &Request<()>,
        body: Incoming,
        rest: &str,
        kind: Kind,
        who: &Result<Principal, Denied>,
        peer: IpAddr,
    ) -> Result<Response<Body>, Error> {
        if let Some(name) = rest.strip_prefix("static/") {
            only_get(req)?;
            return static_file(name);
        }
        if rest == "sign-in/sso" {
            only_get(req)?;
            return self.sso_start(req, peer).await;
        }
        if rest == "sign-in/callback" {
            only_get(req)?;
            return self.sso_callback(req, peer).await;
        }
        if rest == "sign-in" {
            return match *req.method() {
                Method::GET | Method::HEAD if self.sessions.is_none() => Ok(see_other(self.base())),
                Method::GET | Method::HEAD => Ok(self.sign_in_page(req, None)),
                Method::POST => self.sign_in(req, body).await,
                _ => Err(Error::MethodNotAllowed),
            };
        }
        if rest == "login/authorize" {
            return self.login_authorize(req, body, peer).await;
        }
        if rest == "login/token" {
            return self.login_token(req, body, peer).await;
        }
        let caller = self.caller(req, who);
        if self.person_tokens.is_some() && (rest == "tokens" || rest.starts_with("api/v1/tokens")) {
            return self.tokens_route(req, body, rest, kind, caller, who).await;
        }
        if rest == "sign-out" {
            if *req.method() != Method::POST {
                return Err(Error::MethodNotAllowed);
            }
            return self.sign_out(req, caller);
        }
        if *req.method() == Method::POST && (rest == "policy" || rest == APPROVALS) {
            return self.approval(req, body, kind, caller, who).await;
        }
        only_get(req)?;
        if let Caller::Nobody = caller {
            return Ok(self.without_credentials(req, kind));
        }
        let signed_in = caller.signed_in();
        let query = req.uri().query();
        let _turn = self
            .renders
            .acquire()
            .await
            .map_err(|e| Error::unexpected(format!("page renders: {e}")))?;
        if rest == "policy" {
            let approver = self
                .approver(&caller, who)
                .and_then(|p| p.may_approve().map(|()| p))
                .ok();
            return self.policy_page(query, signed_in, approver).await;
        }
        match rest.strip_prefix("api/v1/") {
            Some(api) => self.api(api, query).await,
            None => self.page(rest, query, signed_in).await,
        }
    }

    /// Who would approve: the client a bearer token or a signed-in session stands for. With
    /// authentication off nobody can: an approval names who made it.
    fn approver(
        &self,
        caller: &Caller,
        who: &Result<Principal, Denied>,
    ) -> Result<Principal, Error> {
        match (caller, who) {
            (Caller::Session(session), _) => Ok(Principal::named(
                self.settings.auth.subject_client(&session.subject),
                &self.settings,
            )),
            (Caller::Let, Ok(principal)) if self.settings.auth.enabled() => Ok(principal.clone()),
            (Caller::Let, _) => Err(Error::Forbidden(
                "approvals need to know who approved, and client authentication is off here \
                 ([auth]): no one can approve through the API or the pages; operators use \
                 provender policy waive|hold|revoke"
                    .into(),
            )),
            (Caller::Nobody, _) => Err(Error::Forbidden(
                "approving needs a bearer token or a signed-in session".into(),
            )),
        }
    }

    /// `POST -/api/v1/policy/approvals` (JSON) and the policy page's forms (`POST -/policy`):
    /// a waiver, hold or revocation by a client whose `[[auth.rules]]` entry says
    /// `approve = true`, recorded with its name. A form must come from this site (like
    /// sign-in's); so must a request carrying only a session cookie.
    async fn approval(
        &self,
        req: &Request<()>,
        body: Incoming,
        kind: Kind,
        caller: Caller,
        who: &Result<Principal, Denied>,
    ) -> Result<Response<Body>, Error> {
        if let Caller::Nobody = caller {
            return Ok(self.without_credentials(req, kind));
        }
        if kind == Kind::Page || matches!(caller, Caller::Session(_)) {
            same_site(req, &self.base_url)?;
        }
        let principal = self.approver(&caller, who)?;
        principal.may_approve()?;
        let bytes = http_body_util::Limited::new(body, MAX_FORM)
            .collect()
            .await
            .map_err(|e| Error::PayloadTooLarge(format!("approval: {e}")))?
            .to_bytes();
        let request = match kind {
            Kind::Api => serde_json::from_slice::<ApprovalRequest>(&bytes)
                .map_err(|e| Error::Invalid(format!("the body is not an approval: {e}")))?,
            Kind::Page => approval_form(&bytes),
        };
        let approved = self.catalogue.approve(&request, &principal.name).await?;
        Ok(match kind {
            Kind::Api => {
                let body = serde_json::to_vec(&approved).expect("approvals serialise");
                json_response(StatusCode::CREATED, body)
            }
            Kind::Page => see_other(&format!(
                "{}-/policy?recorded={}#history",
                self.base(),
                approved.approval.id
            )),
        })
    }

    /// The policy page: for an approver, with the forms to waive, hold and revoke.
    async fn policy_page(
        &self,
        query: Option<&str>,
        signed_in: bool,
        approver: Option<Principal>,
    ) -> Result<Response<Body>, Error> {
        let view = self.catalogue.policy().await?;
        // `recorded=<id>`, where a form's approval sends the person: that record, said back.
        let recorded = url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .find(|(k, _)| k == "recorded")
            .and_then(|(_, id)| view.history.iter().find(|a| a.id == id).cloned());
        html(PolicyPage {
            chrome: self.chrome("Version policy", "policy", signed_in),
            view: &view,
            recorded,
            approver: approver.map(|p| p.name.to_string()),
            authentication: self.settings.auth.pages_need_sign_in(),
        })
    }

    /// Who is asking: with authentication off anyone; else a bearer token's holder (`who`,
    /// checked by the caller), else a signed-in browser.
    fn caller(&self, req: &Request<()>, who: &Result<Principal, Denied>) -> Caller {
        let auth = &self.settings.auth;
        // With single sign-on alone, `who` is anyone: only a session counts.
        if !auth.pages_need_sign_in() || (auth.enabled() && who.is_ok()) {
            return Caller::Let;
        }
        self.session(req).map_or(Caller::Nobody, Caller::Session)
    }

    /// The session a request's cookie carries, if it is a live one.
    fn session(&self, req: &Request<()>) -> Option<Session> {
        let sessions = self.sessions.as_ref()?;
        req.headers()
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(session::from_header)
            .find_map(|cookie| sessions.check(cookie, SystemTime::now()))
    }

    fn chrome(&self, title: impl Into<String>, section: &'static str, signed_in: bool) -> Chrome {
        Chrome {
            base: self.base().to_string(),
            title: title.into(),
            section,
            signed_in,
            login: self.person_tokens.is_some(),
            version: env!("CARGO_PKG_VERSION"),
        }
    }

    async fn page(
        &self,
        rest: &str,
        query: Option<&str>,
        signed_in: bool,
    ) -> Result<Response<Body>, Error> {
        if rest.is_empty() {
            return self.start_page(signed_in).await;
        }
        if rest == "ca.pem" {
            let pem = self.ca_pem.clone().ok_or_else(|| {
                Error::NotFound("this server uses a certificate it was given".into())
            })?;
            return Ok(response(StatusCode::OK, "application/x-pem-file", pem));
        }
        if rest == "providers" {
            let parsed = ProviderQuery::parse(query);
            let list = self.catalogue.providers(&parsed).await?;
            let pages = list.providers.len().div_ceil(PAGE_SIZE).max(1);
            let page = page_number(query).clamp(1, pages);
            let start = (page - 1) * PAGE_SIZE;
            let shown = &list.providers[start..(start + PAGE_SIZE).min(list.providers.len())];
            return html(ProvidersPage {
                chrome: self.chrome("Providers", "providers", signed_in),
                list: &list,
                shown,
                query: &parsed,
                paging: Paging { page, pages },
            });
        }
        if let Some(path) = rest.strip_prefix("providers/") {
            let (addr, version) = provider_path(path)?;
            return match version {
                None => {
                    let provider = self.catalogue.provider(&addr).await?;
                    let title = provider.provider.source.clone();
                    html(ProviderPage::of(
                        self.chrome(title, "providers", signed_in),
                        &provider,
                    ))
                }
                Some(version) => {
                    let view = self.catalogue.version(&addr, &version).await?;
                    let (ticked, platforms) = ticked_platforms(query, &view.version);
                    let lock = match platforms.is_empty() {
                        true => None,
                        false => Some(
                            self.catalogue
                                .lock_block(&addr, &version, &platforms)
                                .await?,
                        ),
                    };
                    html(VersionPage {
                        chrome: self.chrome(format!("{addr} {version}"), "providers", signed_in),
                        view: &view,
                        ticked,
                        lock,
                    })
                }
            };
        }
        if rest == "modules" {
            return self.modules_page(query, signed_in).await;
        }
        if let Some(path) = rest.strip_prefix("modules/") {
            return self.module_page(path, query, signed_in).await;
        }
        if rest == "search" {
            return self.search_page(query, signed_in).await;
        }
        if rest == "releases" {
            let view = self.catalogue.releases().await?;
            return html(ReleasesPage {
                chrome: self.chrome("CLI releases", "releases", signed_in),
                snippets: release_snippets(&self.settings, &self.base_url, &view),
                remote: releases_url(&self.base_url),
                view: &view,
            });
        }
        if rest == "usage" {
            let parsed = UsageQuery::parse(query);
            let list = self.catalogue.usage(&parsed).await?;
            return html(UsagePage {
                chrome: self.chrome("Usage", "usage", signed_in),
                list: &list,
                query: &parsed,
            });
        }
        if rest == "published" {
            let list = self.catalogue.published().await?;
            return html(PublishedPage {
                chrome: self.chrome("Published", "published", signed_in),
                list: &list,
            });
        }
        if rest == "status" {
            let status = self.catalogue.status().await?;
            return html(StatusPage {
                chrome: self.chrome("Status", "status", signed_in),
                status: &status,
            });
        }
        Err(Error::NotFound(format!("there is no page -/{rest}")))
    }

    async fn start_page(&self, signed_in: bool) -> Result<Response<Body>, Error> {
        let snapshot = self.catalogue.snapshot().await?;
        html(StartPage {
            chrome: self.chrome("Use this mirror", "start", signed_in),
            // The CA certificate the page offers, as the name it downloads under.
            snippets: snippets(
                &self.settings,
                &self.base_url,
                self.ca_pem.as_ref().map(|_| "~/provender-ca.pem"),
            ),
            ca_url: self
                .ca_pem
                .as_ref()
                .map(|_| format!("{}-/ca.pem", self.base())),
            providers: snapshot.providers.len(),
            versions: snapshot.providers.iter().map(|p| p.versions.len()).sum(),
            modules: snapshot.modules.len(),
        })
    }

    /// The JSON API (`-/api/v1/...`), over the same views as the pages.
    async fn api(&self, path: &str, query: Option<&str>) -> Result<Response<Body>, Error> {
        let c = &self.catalogue;
        match path {
            "" => return json(&api_index()),
            "providers" => return json(&c.providers(&ProviderQuery::parse(query)).await?),
            "modules" => return json(&c.modules(&ModuleQuery::parse(query), true).await?),
            "status" => return json(&c.status().await?),
            "usage" => return json(&c.usage(&UsageQuery::parse(query)).await?),
            "releases" => return json(&c.releases().await?),
            "publications" => return json(&c.published().await?),
            "policy" => return json(&c.policy().await?),
            "policy/history" => return json(&c.policy_history().await?),
            _ => {}
        }
        if let Some(path) = path.strip_prefix("modules/") {
            return self.module_api(path).await;
        }
        if let Some(path) = path.strip_prefix("providers/") {
            let (path, lock) = match path.strip_suffix("/lock") {
                Some(p) => (p, true),
                None => (path, false),
            };
            return match (provider_path(path)?, lock) {
                ((addr, None), false) => json(&c.provider(&addr).await?),
                ((addr, Some(version)), false) => json(&c.version(&addr, &version).await?),
                ((addr, Some(version)), true) => {
                    let view = c.version(&addr, &version).await?;
                    let (_, platforms) = ticked_platforms(query, &view.version);
                    json(&c.lock_block(&addr, &version, &platforms).await?)
                }
                ((_, None), true) => Err(not_in_api(path)),
            };
        }
        Err(not_in_api(path))
    }

    fn sign_in_page(&self, req: &Request<()>, failure: Option<&'static str>) -> Response<Body> {
        let next = next_of(req.uri().query(), self.base());
        let status = match failure {
            Some(_) => StatusCode::UNAUTHORIZED,
            None => StatusCode::OK,
        };
        self.sign_in_answer(next, failure.map(str::to_string), status)
    }

    /// The sign-in page, returning to `next`, with a `failure` to show and its status.
    fn sign_in_answer(
        &self,
        next: String,
        failure: Option<String>,
        status: StatusCode,
    ) -> Response<Body> {
        let sso = self.settings.auth.sso.as_ref().map(|sso| {
            let query = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("next", &next)
                .finish();
            (
                sso.label.clone(),
                format!("{}-/sign-in/sso?{query}", self.base()),
            )
        });
        let page = SignInPage {
            chrome: self.chrome("Sign in", "", false),
            next,
            failure,
            sso,
            tokens: self.settings.auth.has_tokens(),
        };
        html(page)
            .map(|mut r| {
                *r.status_mut() = status;
                r
            })
            .unwrap_or_else(|e| error_response(&e))
    }

    async fn sign_in(&self, req: &Request<()>, body: Incoming) -> Result<Response<Body>, Error> {
        same_site(req, &self.base_url)?;
        let Some(sessions) = &self.sessions else {
            return Ok(see_other(self.base()));
        };
        let form = http_body_util::Limited::new(body, MAX_FORM)
            .collect()
            .await
            .map_err(|e| Error::PayloadTooLarge(format!("sign-in form: {e}")))?
            .to_bytes();
        let mut token = String::new();
        let mut next = String::new();
        for (key, value) in url::form_urlencoded::parse(&form) {
            match &*key {
                "token" => token = value.into_owned(),
                "next" => next = value.into_owned(),
                _ => {}
            }
        }
        let next = safe_next(&next, self.base());
        match sessions.sign_in(&token, SystemTime::now()) {
            Some((session, cookie)) => {
                tracing::info!(subject = %session.subject, "signed in to the pages");
                let mut resp = see_other(&next);
                self.set_session_cookie(&mut resp, &cookie, sessions.ttl().as_secs())?;
                Ok(resp)
            }
            None => {
                tracing::info!("a sign-in to the pages with a wrong token");
                let mut again = Request::new(());
                *again.uri_mut() = format!(
                    "{}-/sign-in?{}",
                    self.base(),
                    url::form_urlencoded::Serializer::new(String::new())
                        .append_pair("next", &next)
                        .finish()
                )
                .parse()
                .map_err(|e: http::uri::InvalidUri| Error::unexpected(e.to_string()))?;
                Ok(self.sign_in_page(&again, Some("That token is not one of this mirror's.")))
            }
        }
    }

    /// `-/sign-in/sso`: sends the browser to the identity provider (see `auth::sso`).
    async fn sso_start(&self, req: &Request<()>, peer: IpAddr) -> Result<Response<Body>, Error> {
        let sso = self.sso()?;
        self.sign_ins.admit(peer)?;
        let next = next_of(req.uri().query(), self.base());
        let endpoints = self.sso_endpoints(sso).await?;
        let pending = Pending::new(next, crate::clock::now_secs())
            .ok_or_else(|| Error::unexpected("the system random source failed"))?;
        let target =
            sso.authorization_url(&endpoints.authorization, &self.callback_url(), &pending);
        let mut resp = see_other(target.as_str());
        set_cookie(
            &mut resp,
            format!(
                "{}={}; Path={}-/sign-in; Max-Age={}; HttpOnly; Secure; SameSite=Lax",
                sso::COOKIE,
                self.settings.auth.seal_pending(&pending),
                self.base(),
                sso::PENDING_TTL.as_secs()
            ),
        )?;
        Ok(resp)
    }

    /// `-/sign-in/callback`: the identity provider's answer. The state must be the one this
    /// browser was sent with, in a sign-in that has not come back before; only then is the
    /// code traded for an ID token, which is checked like any (with this mirror's client ID as
    /// its audience, and the nonce it was sent with). A person who passes gets a session.
    async fn sso_callback(&self, req: &Request<()>, peer: IpAddr) -> Result<Response<Body>, Error> {
        let sso = self.sso()?;
        self.sign_ins.admit(peer)?;
        let Some(sessions) = &self.sessions else {
            return Err(Error::NotFound("sign-in is off".into()));
        };
        let now = crate::clock::now_secs();
        let pending = req
            .headers()
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|h| session::cookie(h, sso::COOKIE))
            .find_map(|value| self.settings.auth.unseal_pending(value, now));
        let params: std::collections::HashMap<String, String> =
            url::form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes())
                .into_owned()
                .collect();
        let failed = |next: String, message: String| {
            tracing::info!("single sign-on failed: {message}");
            Ok(self.sign_in_answer(next, Some(message), StatusCode::FORBIDDEN))
        };
        let Some(pending) = pending else {
            return failed(
                self.base().to_string(),
                "This sign-in was not started in this browser, or took too long. Please start again.".into(),
            );
        };
        let next = pending.next.clone();
        if let Some(error) = params.get("error") {
            return failed(
                next,
                format!(
                    "The identity provider did not sign you in: {error} {}",
                    params.get("error_description").map_or("", String::as_str)
                ),
            );
        }
        let (Some(code), Some(state)) = (params.get("code"), params.get("state")) else {
            return failed(next, "The identity provider's answer lacks a code.".into());
        };
        if !pending.state_is(state) {
            return failed(
                next,
                "This sign-in's state does not match; please start again.".into(),
            );
        }
        if !self.sign_ins.first_return(&pending) {
            return failed(
                next,
                "This sign-in has already come back once; please start again.".into(),
            );
        }
        let client = self.core.identity_client();
        let issuer = sso.issuer();
        let endpoints = self.sso_endpoints(sso).await?;
        let callback = self.callback_url();
        let answer = client
            .token_exchange(
                &issuer,
                &endpoints.token,
                &sso.token_form(code, &callback, &pending),
            )
            .await?;
        let Some(id_token) = answer["id_token"].as_str() else {
            return failed(next, "The identity provider sent no ID token.".into());
        };
        let core = self.core.clone();
        let fetch = move |issuer: url::Url| async move {
            let client = core.identity_client();
            client
                .issuer_keys(&issuer)
                .await
                .map_err(super::identity::keys_unavailable)
        };
        let identity = match self.sso_keys.verify(id_token, now, fetch).await {
            Ok(identity) => identity,
            Err(refused) => {
                return failed(next, format!("You may not sign in here: {refused}."));
            }
        };
        let nonce = identity.claims["nonce"].as_str().unwrap_or_default();
        if !pending.nonce_is(nonce) {
            return failed(next, "The ID token is not for this sign-in (nonce).".into());
        }
        let (session, cookie) = sessions
            .start(identity.name, SystemTime::now())
            .ok_or_else(|| Error::unexpected("the system random source failed"))?;
        tracing::info!(subject = %session.subject, "signed in to the pages with single sign-on");
        let mut resp = html(SignedInPage {
            base: self.base().to_string(),
            next,
        })?;
        self.set_session_cookie(&mut resp, &cookie, sessions.ttl().as_secs())?;
        set_cookie(
            &mut resp,
            format!(
                "{}=; Path={}-/sign-in; Max-Age=0; HttpOnly; Secure; SameSite=Lax",
                sso::COOKIE,
                self.base()
            ),
        )?;
        Ok(resp)
    }

    /// The identity provider's endpoints: fetched on first use, again after
    /// [`sso::ENDPOINTS_TTL`], at most once per `refetch_interval` however many sign-ins start,
    /// and kept through an outage.
    async fn sso_endpoints(&self, sso: &sso::SsoSettings) -> Result<Arc<IssuerEndpoints>, Error> {
        let (core, issuer) = (self.core.clone(), sso.issuer());
        let fetch = || async move {
            let fetched = core.identity_client().issuer_endpoints(&issuer).await;
            if let Err(e) = &fetched {
                tracing::warn!("cannot fetch the identity provider's endpoints: {e}");
            }
            fetched.map_err(Error::from)
        };
        let judge = |_: &IssuerEndpoints, age| match age > sso::ENDPOINTS_TTL {
            true => Judged::Old,
            false => Judged::Fresh,
        };
        self.sso_endpoints
            .get(sso.rules.refetch_interval, judge, fetch)
            .await
    }

    /// Single sign-on's settings, or 404 when it is not configured.
    fn sso(&self) -> Result<&sso::SsoSettings, Error> {
        self.settings
            .auth
            .sso
            .as_ref()
            .ok_or_else(|| Error::NotFound("single sign-on is not configured".into()))
    }

    /// Where the identity provider sends people back.
    fn callback_url(&self) -> String {
        format!(
            "{}-/sign-in/callback",
            self.base_url.as_str().trim_end_matches('/').to_string() + "/"
        )
    }

    /// Sets the session cookie (`max_age` 0 clears it).
    fn set_session_cookie(
        &self,
        resp: &mut Response<Body>,
        value: &str,
        max_age: u64,
    ) -> Result<(), Error> {
        set_cookie(
            resp,
            format!(
                "{}={value}; Path={}; Max-Age={max_age}; HttpOnly; Secure; SameSite=Strict",
                session::COOKIE,
                self.base(),
            ),
        )
    }

    fn sign_out(&self, req: &Request<()>, caller: Caller) -> Result<Response<Body>, Error> {
        same_site(req, &self.base_url)?;
        if let (Some(sessions), Caller::Session(session)) = (&self.sessions, &caller) {
            sessions.sign_out(session);
            tracing::info!(subject = %session.subject, "signed out of the pages");
        }
        let mut resp = see_other(&format!("{}-/sign-in", self.base()));
        self.set_session_cookie(&mut resp, "", 0)?;
        Ok(resp)
    }

    /// The answer to a request without credentials: an API request gets 401, a page sends the
    /// browser to sign in.
    fn without_credentials(&self, req: &Request<()>, kind: Kind) -> Response<Body> {
        match kind {
            Kind::Api => unauthorized("this mirror requires a bearer token or a signed-in session"),
            Kind::Page => self.to_sign_in(req),
        }
    }

    /// A redirect to the sign-in page that comes back here.
    fn to_sign_in(&self, req: &Request<()>) -> Response<Body> {
        let here = req
            .uri()
            .path_and_query()
            .map_or(self.base().to_string(), |p| p.to_string());
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("next", &here)
            .finish();
        see_other(&format!("{}-/sign-in?{query}", self.base()))
    }

    fn error_page(&self, e: &Error, signed_in: bool) -> Response<Body> {
        let status = e.status();
        let title = status.canonical_reason().unwrap_or("Error").to_string();
        let page = ErrorPage {
            chrome: self.chrome(title, "", signed_in),
            message: e.to_string(),
        };
        match page.render() {
            Ok(text) => {
                let mut resp = response(status, "text/html; charset=utf-8", Bytes::from(text));
                error_headers(e, &mut resp);
                resp
            }
            Err(_) => error_response(e),
        }
    }
}

impl Caller {
    fn signed_in(&self) -> bool {
        matches!(self, Caller::Session(_))
    }
}

/// Adds a `Set-Cookie` header.
fn set_cookie(resp: &mut Response<Body>, value: String) -> Result<(), Error> {
    resp.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_str(&value).map_err(|e| Error::unexpected(e.to_string()))?,
    );
    Ok(())
}

fn only_get(req: &Request<()>) -> Result<(), Error> {
    match *req.method() {
        Method::GET | Method::HEAD => Ok(()),
        _ => Err(Error::MethodNotAllowed),
    }
}

/// Refuses a form that another site may have sent. Browsers say where a form comes from in
/// `Sec-Fetch-Site`; those too old to send it say so in `Origin`, which must then be this
/// server's own (`base_url`'s). A form with neither is refused: only browsers post these
/// forms, and every browser sends one of the two with a form.
fn same_site(req: &Request<()>, base_url: &url::Url) -> Result<(), Error> {
    let header = |name: &str| req.headers().get(name).map(|v| v.to_str().unwrap_or("?"));
    let refused = |from: &str| {
        let from: String = from.chars().take(100).collect();
        Err(Error::Forbidden(format!(
            "a form from another site ({from}) cannot sign in, sign out or approve here"
        )))
    };
    match (header("sec-fetch-site"), header("origin")) {
        (Some("same-origin" | "none"), _) => Ok(()),
        (Some(other), _) => refused(other),
        (None, Some(origin)) if origin == base_url.origin().ascii_serialization() => Ok(()),
        (None, Some(origin)) => refused(origin),
        (None, None) => Err(Error::Forbidden(
            "a form without Sec-Fetch-Site or Origin cannot sign in, sign out or approve here: only a \
             browser's form on this mirror's own pages can"
                .into(),
        )),
    }
}

/// The policy page's form, as an approval request (missing fields are empty, and named when
/// checked).
fn approval_form(form: &[u8]) -> ApprovalRequest {
    let mut request = ApprovalRequest::default();
    for (key, value) in url::form_urlencoded::parse(form) {
        let value = value.into_owned();
        match &*key {
            "kind" => request.kind = value,
            "address" => request.address = value,
            "version" => request.version = value,
            "action" => request.action = value,
            "reason" => request.reason = value,
            "until" => request.until = Some(value),
            _ => {}
        }
    }
    request
}

fn html(page: impl Template) -> Result<Response<Body>, Error> {
    let text = page
        .render()
        .map_err(|e| Error::unexpected(format!("rendering a page: {e}")))?;
    Ok(response(
        StatusCode::OK,
        "text/html; charset=utf-8",
        Bytes::from(text),
    ))
}

fn json(view: &impl serde::Serialize) -> Result<Response<Body>, Error> {
    let body = serde_json::to_vec(view).expect("catalogue views serialise");
    Ok(json_response(StatusCode::OK, body))
}

fn static_file(name: &str) -> Result<Response<Body>, Error> {
    let (_, content_type, text) = STATIC
        .iter()
        .find(|(n, _, _)| *n == name)
        .ok_or_else(|| Error::NotFound(format!("there is no static file {name}")))?;
    let mut resp = response(
        StatusCode::OK,
        content_type,
        Bytes::from_static(text.as_bytes()),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=600"),
    );
    Ok(resp)
}

fn not_in_api(path: &str) -> Error {
    Error::NotFound(format!(
        "no API document -/api/v1/{path} (see -/api/v1/ for the list)"
    ))
}

/// `-/api/v1/`: what the API offers.
fn api_index() -> serde_json::Value {
    serde_json::json!({
        "api_version": crate::catalogue::API_VERSION,
        "documents": {
            "providers": "providers?q=&hostname=&namespace=&trust=&platform=",
            "provider": "providers/{hostname}/{namespace}/{type}",
            "version": "providers/{hostname}/{namespace}/{type}/{version}",
            "lock": "providers/{hostname}/{namespace}/{type}/{version}/lock?platform={os_arch}",
            "modules": "modules?q=&hostname=&namespace=&trust=&source=",
            "module": "modules/{hostname}/{namespace}/{name}/{system}",
            "module_version": "modules/{hostname}/{namespace}/{name}/{system}/{version} (with its documentation)",
            "status": "status",
            "usage": "usage?q=&days=30",
            "releases": "releases",
            "publications": "publications",
            "policy": "policy",
            "policy_history": "policy/history",
            "policy_approvals": "POST policy/approvals {kind, address, version, action, reason, until?}",
            "tokens": "tokens (a person's own, with terraform login on)",
            "token_revoke": "POST tokens/{id}/revoke",
        }
    })
}

/// `<hostname>/<namespace>/<type>[/<version>]`.
fn provider_path(path: &str) -> Result<(ProviderAddr, Option<Version>), Error> {
    let parts: Vec<&str> = path.split('/').collect();
    let (addr, version) = match parts.as_slice() {
        [h, n, t] => (ProviderAddr::new(h, n, t)?, None),
        [h, n, t, v] => (ProviderAddr::new(h, n, t)?, Some(Version::parse(v)?)),
        _ => {
            return Err(Error::NotFound(format!(
                "-/providers/{path}: expected <hostname>/<namespace>/<type>[/<version>]"
            )));
        }
    };
    Ok((addr, version))
}

/// `page=` of a query, from 1.
fn page_number(query: Option<&str>) -> usize {
    url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "page")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(1)
}

/// The platforms a query ticks (`platform=` repeated, kept when the version has them); with
/// none named and no `ticked=` (the form's marker), the version's cached platforms.
fn ticked_platforms(
    query: Option<&str>,
    version: &crate::catalogue::VersionEntry,
) -> (Vec<String>, Vec<Platform>) {
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let asked: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "platform")
        .map(|(_, v)| v.clone())
        .collect();
    let ticked: Vec<String> = if asked.is_empty() && !pairs.iter().any(|(k, _)| k == "ticked") {
        version.cached().map(|p| p.platform.clone()).collect()
    } else {
        asked
    };
    let platforms = ticked
        .iter()
        .filter_map(|p| Platform::parse(p).ok())
        .filter(|p| {
            version
                .platforms
                .iter()
                .any(|e| e.platform == p.to_string())
        })
        .collect();
    (ticked, platforms)
}

/// `next=` of the sign-in page's query, made safe.
fn next_of(query: Option<&str>, base: &str) -> String {
    let next = url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "next")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    safe_next(&next, base)
}

/// Where to go after signing in: a path of this mirror's own, else its start page (never
/// another site: `//host`, `/\host` and schemes are refused).
fn safe_next(next: &str, base: &str) -> String {
    let ok = next.starts_with(base)
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(char::is_control)
        && !next.contains("-/sign-");
    if ok {
        next.to_string()
    } else {
        base.to_string()
    }
}

/// Each client's set-up for this mirror, with its URLs filled in: the start page shows them, and
/// `serve` logs them once at start. `ca_file` is where clients keep this server's CA
/// certificate when it made its own (none: a certificate the operator gave it).
pub fn snippets(settings: &Settings, base_url: &url::Url, ca_file: Option<&str>) -> Vec<Snippet> {
    let url = base_url.as_str();
    let host = crate::address::authority(base_url).unwrap_or_else(|| "localhost".into());
    let mut out = vec![Snippet {
        id: "network-mirror",
        title: "Providers: Terraform and OpenTofu",
        intro: "Add this to the CLI configuration (~/.terraformrc, ~/.tofurc, terraform.rc on \
                Windows, or the file TF_CLI_CONFIG_FILE names), then run terraform init or \
                tofu init as usual."
            .into(),
        text: format!(
            "provider_installation {{\n  network_mirror {{\n    url = \"{url}\"\n  }}\n}}\n"
        ),
    }];
    out.push(Snippet {
        id: "oci-mirror",
        title: "Providers: OpenTofu's OCI mirror",
        intro: "OpenTofu 1.10 and later can install the same verified providers from this \
                server as an OCI registry instead."
            .into(),
        text: format!(
            "provider_installation {{\n  oci_mirror {{\n    repository_template = \"{host}/${{hostname}}/${{namespace}}/${{type}}\"\n  }}\n}}\n"
        ),
    });
    let mut hosts = String::new();
    for registry in &settings.upstream.allowed_hosts {
        hosts.push_str(&format!(
            "host \"{registry}\" {{\n  services = {{\n    \"modules.v1\"   = \"{url}v1/modules/{registry}/\"\n    \"providers.v1\" = \"{url}v1/providers/{registry}/\"\n  }}\n}}\n"
        ));
    }
    out.push(Snippet {
        id: "host-block",
        title: "Modules, and the registry facade",
        intro: "A host block sends a registry's module downloads (and terraform providers \
                mirror) through this server, with no change to any .tf file. Terraform users \
                need the registry.terraform.io block, OpenTofu users the registry.opentofu.org \
                one."
            .into(),
        text: hosts,
    });
    if !settings.git.allowed_hosts.is_empty() {
        let mut lines = String::new();
        for git_host in &settings.git.allowed_hosts {
            lines.push_str(&format!(
                "git config --global url.\"{url}git/{git_host}/\".insteadOf \"https://{git_host}/\"\n"
            ));
        }
        // git reads neither SSL_CERT_FILE nor the CLI's settings: its own, for this server only.
        match ca_file {
            Some(ca) => lines.push_str(&format!(
                "git config --global http.\"{url}\".sslCAInfo {ca}\n                 # or, for one shell or CI job: export GIT_SSL_CAINFO={ca}\n"
            )),
            None => lines.push_str(&format!(
                "# If this server's certificate is from a private CA (git does not read SSL_CERT_FILE):\n                 # git config --global http.\"{url}\".sslCAInfo /path/to/ca.pem\n                 # or, for one shell or CI job: export GIT_SSL_CAINFO=/path/to/ca.pem\n"
            )),
        }
        out.push(Snippet {
            id: "git",
            title: "Modules from git sources",
            intro: "Run these once on each machine or CI job (a run step in GitHub Actions, \
                    before_script in GitLab CI): git then fetches git::https:// module sources \
                    from these hosts through this server, with no change to any .tf file. Git \
                    does not read SSL_CERT_FILE: the CA line tells it which certificate \
                    authority to trust for this server."
                .into(),
            text: lines,
        });
    }
    if settings.releases.enabled {
        out.push(Snippet {
            id: "releases",
            title: "Installers: terraform and tofu themselves",
            intro: format!(
                "Version installers (tfenv, tenv, tofuenv) download the CLIs' own releases from \
                 this base URL; the releases page ({url}-/releases) has each installer's lines."
            ),
            text: format!(
                "{}\n\n# tfenv and tenv (terraform):\nexport TFENV_REMOTE={}\n",
                releases_url(base_url),
                releases_url(base_url)
            ),
        });
    }
    if settings.auth.cli_login.is_some() {
        let machine = base_url.host_str().unwrap_or("localhost");
        out.push(Snippet {
            id: "login",
            title: "Sign in: one token for every door",
            intro: "Run this once: it opens your browser at this mirror's single sign-on and \
                    stores a token of yours in the CLI's credentials file, which terraform and \
                    tofu then send here for providers and modules. Git and CLI release \
                    downloads take the same token from a netrc file."
                .into(),
            text: format!(
                "terraform login {host}    # or: tofu login {host}\n\n\
                 # Then, for git and release downloads, a line in ~/.netrc with the token the\n\
                 # login stored in ~/.terraform.d/credentials.tfrc.json:\n\
                 machine {machine} login token password <your token>\n"
            ),
        });
    }
    if settings.auth.enabled() {
        out.push(Snippet {
            id: "credentials",
            title: "Credentials",
            intro: "This mirror asks for a token: put yours in place of the placeholder (or set \
                    TF_TOKEN_ for the host). OpenTofu's OCI mirror reads oci_credentials; git \
                    reads a netrc file or a credential helper."
                .into(),
            text: format!(
                "credentials \"{host}\" {{\n  token = \"<your token>\"\n}}\n\noci_credentials \"{host}\" {{\n  username = \"tofu\"\n  password = \"<your token>\"\n}}\n"
            ),
        });
        if !settings.git.allowed_hosts.is_empty() || settings.releases.enabled {
            let machine = base_url.host_str().unwrap_or("localhost");
            out.push(Snippet {
                id: "netrc",
                title: "The token for git and installers: ~/.netrc",
                intro: "Git and the installers send the same token from a netrc file: add this \
                        line to ~/.netrc (readable by you alone: chmod 600 ~/.netrc), with your \
                        token in place of the placeholder."
                    .into(),
                text: format!("machine {machine} login token password <your token>\n"),
            });
        }
    }
    out
}

/// Where installers find this mirror's CLI releases: `<mirror URL>releases`, without a
/// trailing slash (installers add their own).
fn releases_url(base_url: &url::Url) -> String {
    format!("{}releases", base_url.as_str())
}

/// The set-up lines of the CLI releases page for each installer, with this server's URLs filled
/// in, and exact versions from what the cache holds (else the vendor's list).
pub fn release_snippets(
    settings: &Settings,
    base_url: &url::Url,
    view: &ReleaseCatalogue,
) -> Vec<Snippet> {
    use crate::records::releases::Product;
    let remote = releases_url(base_url);
    // Whether installers need a token for `releases/`.
    let auth = settings.auth.enabled() && settings.auth.protect_releases;
    // The newest cached release and one of its zips (this machine's usual platform if it is
    // cached), else the newest the vendor lists.
    let newest = |product: Product| -> Option<(String, Option<String>)> {
        let p = view.product(product)?;
        match p.releases.first() {
            Some(r) => {
                let zips = || r.zips.iter().filter(|z| z.packing.is_zip());
                let zip = zips()
                    .find(|z| z.platform == "linux_amd64")
                    .or(zips().next())
                    .map(|z| z.filename.clone());
                Some((r.version.clone(), zip))
            }
            None => p.list.as_ref()?.newest.clone().map(|v| (v, None)),
        }
    };
    let version_of = |product| newest(product).map_or("<version>".to_string(), |(v, _)| v);
    let host = base_url.host_str().unwrap_or("localhost");
    let netrc = |variable: &str| {
        if auth {
            format!(
                " This mirror asks for a token: put it in a .netrc file (machine {host} login \
                 <any name> password <your token>) and name that file in {variable}."
            )
        } else {
            String::new()
        }
    };
    let with_token = |line: &'static str| if auth { line } else { "" };
    let mut out = vec![
        Snippet {
            id: "tfenv",
            title: "terraform: tfenv",
            intro: format!(
                "tfenv lists the releases from this mirror and downloads the zip, SHA256SUMS and \
                 its signature from it; then tfenv install as usual.{}",
                netrc("TFENV_NETRC_PATH")
            ),
            text: format!(
                "export TFENV_REMOTE={remote}\n{}",
                with_token("export TFENV_NETRC_PATH=~/.netrc\n")
            ),
        },
        Snippet {
            id: "tenv-terraform",
            title: "terraform: tenv",
            intro: format!(
                "tenv reads the same listing (its html mode, the default for a remote of one's \
                 own) and each release's index.json; then tenv tf install as usual.{}",
                with_token(
                    " With a token: TFENV_REMOTE_USER (any name) and TFENV_REMOTE_PASSWORD (the \
                     token)."
                )
            ),
            text: format!("export TFENV_REMOTE={remote}\n"),
        },
        Snippet {
            id: "tenv-tofu",
            title: "tofu: tenv",
            intro: format!(
                "tenv's mirror mode reads OpenTofu's list of releases and downloads from this \
                 mirror's layout. This mirror checks each release's SHA256SUMS against \
                 OpenTofu's key and serves no cosign files, so tenv checks the SHA-256 only; \
                 then tenv tofu install as usual.{}",
                with_token(
                    " With a token: TOFUENV_REMOTE_USER (any name) and TOFUENV_REMOTE_PASSWORD \
                     (the token)."
                )
            ),
            text: format!(
                "export TOFUENV_LIST_MODE=mirror\n\
                 export TOFUENV_LIST_URL={remote}/tofu/api.json\n\
                 export TOFUENV_INSTALL_MODE=mirror\n\
                 export TOFUENV_URL_TEMPLATE='{remote}/tofu/{{{{ .Version }}}}/{{{{ .Artifact }}}}'\n\
                 export TENV_VALIDATION=sha\n"
            ),
        },
        Snippet {
            id: "tofuenv",
            title: "tofu: tofuenv",
            intro: format!(
                "tofuenv lists the releases from this mirror (in the shape of GitHub's releases \
                 API) and downloads the zip, SHA256SUMS and its signature from it; then tofuenv \
                 install as usual.{}",
                netrc("TOFUENV_NETRC_PATH")
            ),
            text: format!(
                "export TOFUENV_REMOTE={remote}/tofu\n{}",
                with_token("export TOFUENV_NETRC_PATH=~/.netrc\n")
            ),
        },
        Snippet {
            id: "hc-install",
            title: "terraform: hc-install (Go)",
            intro: "HashiCorp's Go installer reads each release's index.json from this mirror \
                    and downloads from it, checking the SHA256SUMS signature itself."
                .into(),
            text: format!(
                "installer := &releases.ExactVersion{{\n\
                 \tProduct:    product.Terraform,\n\
                 \tVersion:    version.Must(version.NewVersion(\"{}\")),\n\
                 \tApiBaseURL: \"{remote}\",\n\
                 }}\n\
                 execPath, err := installer.Install(context.Background())\n",
                version_of(Product::Terraform)
            ),
        },
        Snippet {
            id: "tofudl",
            title: "tofu: tofudl (Go)",
            intro: format!(
                "OpenTofu's Go downloader reads OpenTofu's list of releases from this mirror and \
                 downloads the .tar.gz, SHA256SUMS and its signature from it, checking the \
                 signature itself (the same settings as tofudl's Config.APIURL and \
                 DownloadMirrorURLTemplate).{}",
                with_token(
                    " With a token: TOFUDL_API_AUTHORIZATION and \
                     TOFUDL_DOWNLOAD_MIRROR_AUTHORIZATION, each \"Bearer <your token>\"."
                )
            ),
            text: format!(
                "export TOFUDL_API_URL={remote}/tofu/api.json\n\
                 export TOFUDL_DOWNLOAD_MIRROR_URL_TEMPLATE='{remote}/tofu/{{{{ .Version }}}}/{{{{ .Artifact }}}}'\n"
            ),
        },
        Snippet {
            id: "mise",
            title: "terraform: mise",
            intro: "mise downloads the zip and SHA256SUMS from this mirror and checks the zip. \
                    Give an exact version: mise resolves others through GitHub's API."
                .into(),
            text: format!(
                "export MISE_URL_REPLACEMENTS='{{\"https://releases.hashicorp.com\":\"{remote}\"}}'\n\
                 mise install terraform@{}\n",
                version_of(Product::Terraform)
            ),
        },
    ];
    for (product, id, title) in [
        (Product::Terraform, "curl-terraform", "terraform: curl"),
        (Product::Tofu, "curl-tofu", "tofu: curl"),
    ] {
        let Some((version, Some(zip))) = newest(product) else {
            continue;
        };
        let Ok(parsed) = crate::address::Version::parse(&version) else {
            continue;
        };
        let sums = crate::records::releases::sums_filename(product, &parsed);
        let curl = if auth { "curl --netrc -fO" } else { "curl -fO" };
        out.push(Snippet {
            id,
            title,
            intro: format!(
                "The newest cached release's zip and its SHA256SUMS, by hand.{}",
                with_token(" curl --netrc reads the token from ~/.netrc.")
            ),
            text: format!(
                "{curl} {remote}/{product}/{version}/{zip}\n\
                 {curl} {remote}/{product}/{version}/{sums}\n\
                 sha256sum -c --ignore-missing {sums}\n"
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_sign_in_only_this_mirrors_own_pages() {
        assert_eq!(safe_next("/-/providers?q=a", "/"), "/-/providers?q=a");
        assert_eq!(safe_next("//evil.example/", "/"), "/");
        assert_eq!(safe_next("/\\evil.example/", "/"), "/");
        assert_eq!(safe_next("https://evil.example/", "/"), "/");
        assert_eq!(safe_next("/other/", "/mirror/"), "/mirror/");
        assert_eq!(safe_next("/-/sign-out", "/"), "/");
    }

    #[test]
    fn provider_paths_are_checked() {
        let (addr, version) = provider_path("registry.terraform.io/acme/foo/1.0.0").unwrap();
        assert_eq!(addr.to_string(), "registry.terraform.io/acme/foo");
        assert_eq!(version.unwrap().as_str(), "1.0.0");
        assert!(provider_path("registry.terraform.io/acme").is_err());
        assert!(provider_path("registry.terraform.io/acme/foo/x<y").is_err());
    }
}
