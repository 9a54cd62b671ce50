//! The OCI distribution API under `/v2/`, for OpenTofu's `oci_mirror` and other OCI clients
//! (skopeo, oras): pull only.
//!
//! - `GET /v2/` answers 200 (clients ping it), or with authentication on and no valid token,
//!   401 with a `Bearer` challenge naming `/v2/token` as its realm;
//! - `GET /v2/token` trades the mirror's credentials (one of its tokens, a person's token from
//!   `terraform login`, an ID token; the password of `Basic` credentials, any user name, or a
//!   bearer token) for a bearer token: when the client names repositories (`scope=repository:
//!   <name>:pull`, as OCI clients do), a registry token good for those repositories alone for
//!   five minutes (see `auth::registry_token`); else the same token it presented;
//! - `tags/list` (paged with `n` / `last` and a `Link` header), `manifests/<tag or digest>` and
//!   `blobs/<digest>`, for `GET` and `HEAD`, with `Content-Type`, `Content-Length` and
//!   `Docker-Content-Digest`;
//! - every failure is an OCI error body `{"errors":[{"code","message","detail"}]}`: an unknown
//!   provider is `NAME_UNKNOWN` (OpenTofu then tries its next installation method), an unknown tag
//!   or digest `MANIFEST_UNKNOWN` / `BLOB_UNKNOWN`, a policy refusal `DENIED`.
//!
//! A repository is a provider (`<hostname>/<namespace>/<type>`) or a module
//! (`<hostname>/modules/<namespace>/<name>/<system>`, for OpenTofu's `oci://` module sources);
//! each gets the same `Principal` checks as its own door (`may_get_provider`, `may_get_module`,
//! and its `Reach`).

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};

use super::{App, Body, redirect};
use crate::address::{OciPath, OciPathError, OciReference, OciRepo};
use crate::auth::Denied;
use crate::auth::registry_token::{REGISTRY_TOKEN_TTL, RegistryGrant};
use crate::error::Error;
use crate::mirror::{OciBlob, OciBlobHead, Served, empty_config};
use crate::records::oci::{self, Document};
use crate::server::identity::Principal;

/// Which kind of object a request was about, for the error code of a "not found".
#[derive(Clone, Copy)]
enum Subject {
    Name,
    Manifest,
    Blob,
}

/// An OCI error answer: status, code, message, and for a 401 its challenge.
struct OciError {
    status: StatusCode,
    code: &'static str,
    message: String,
    challenge: Option<String>,
    /// When to come back (`Retry-After`), as the error says.
    retry_after: Option<std::time::Duration>,
}

impl OciError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> OciError {
        OciError {
            status,
            code,
            message: message.into(),
            challenge: None,
            retry_after: None,
        }
    }

    /// A 401 `UNAUTHORIZED` answer with the `WWW-Authenticate` challenge to follow.
    fn unauthorized(denied: Denied, challenge: String) -> OciError {
        let message = match denied {
            Denied::Unauthorized(m) | Denied::Forbidden(m) => m,
            // The credentials cannot be checked now (an issuer not answering): come back later.
            Denied::Unavailable(m) => {
                return OciError {
                    retry_after: Some(crate::error::RETRY_SOON),
                    ..OciError::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", m)
                };
            }
        };
        OciError {
            challenge: Some(challenge),
            ..OciError::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", message)
        }
    }

    /// A mirror error in the distribution API's terms.
    fn of(e: &Error, subject: Subject) -> OciError {
        let code = match e {
            Error::NotFound(_) => match subject {
                Subject::Name => "NAME_UNKNOWN",
                Subject::Manifest => "MANIFEST_UNKNOWN",
                Subject::Blob => "BLOB_UNKNOWN",
            },
            Error::BadRequest(_) | Error::Invalid(_) => "NAME_INVALID",
            Error::MethodNotAllowed | Error::PayloadTooLarge(_) => "UNSUPPORTED",
            Error::Forbidden(_) => "DENIED",
            Error::Policy(_) | Error::NotAdmitted(_) => "DENIED",
            Error::TooManySignIns(_) => "TOOMANYREQUESTS",
            Error::Upstream(_) | Error::Storage(_) | Error::Busy { .. } | Error::OutOfTime(_) => {
                "UNAVAILABLE"
            }
            Error::Verification(_)
            | Error::InsufficientStorage(_)
            | Error::Internal(_)
            | Error::Publish(_) => "UNKNOWN",
        };
        OciError {
            retry_after: e.retry_after(),
            ..OciError::new(e.status(), code, e.to_string())
        }
    }

    fn of_path(e: &OciPathError) -> OciError {
        let (status, code) = match e {
            OciPathError::Name(_) => (StatusCode::BAD_REQUEST, "NAME_INVALID"),
            OciPathError::Tag(_) => (StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN"),
            OciPathError::Digest(_) => (StatusCode::BAD_REQUEST, "DIGEST_INVALID"),
            OciPathError::Endpoint(_) => (StatusCode::NOT_FOUND, "UNSUPPORTED"),
        };
        OciError::new(status, code, e.to_string())
    }

    fn response(&self) -> Response<Body> {
        let body = serde_json::json!({
            "errors": [{ "code": self.code, "message": self.message, "detail": null }]
        });
        let mut resp = bytes_response(
            self.status,
            "application/json",
            Bytes::from(body.to_string()),
        );
        if self.status == StatusCode::METHOD_NOT_ALLOWED {
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        }
        if let Some(wait) = self.retry_after {
            resp.headers_mut().insert(
                header::RETRY_AFTER,
                crate::server::respond::retry_after(wait),
            );
        }
        if let Some(challenge) = &self.challenge {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_str(challenge).expect("challenges are header-safe"),
            );
        }
        resp
    }
}

fn bytes_response(status: StatusCode, content_type: &str, body: Bytes) -> Response<Body> {
    let len = body.len();
    let mut resp = super::response(status, "application/json", body);
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(content_type).expect("media types are header values"),
    );
    // Explicit, so that a HEAD answer (whose body is dropped) says it too.
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    resp
}

/// A manifest, index or the config blob: its bytes with the headers clients check.
fn document_response(bytes: Bytes, media_type: &str, sha256: &str) -> Response<Body> {
    let mut resp = bytes_response(StatusCode::OK, media_type, bytes);
    let digest = format!("sha256:{sha256}");
    let headers = resp.headers_mut();
    headers.insert(
        header::ETAG,
        HeaderValue::from_str(&format!("\"{digest}\"")).expect("a digest is a header value"),
    );
    headers.insert(
        "docker-content-digest",
        HeaderValue::from_str(&digest).expect("a digest is a header value"),
    );
    resp
}

impl App {
    /// Answers a request below `/v2/` (never fails: errors become OCI error bodies).
    pub(super) async fn oci(
        &self,
        req: &Request<()>,
        who: &Result<Principal, Denied>,
    ) -> Response<Body> {
        let mut resp = match self.oci_route(req, who).await {
            Ok(resp) => resp,
            Err(e) => {
                if e.status.is_server_error() {
                    tracing::warn!(path = %req.uri().path(), status = e.status.as_u16(), "{}", e.message);
                } else {
                    tracing::debug!(path = %req.uri().path(), status = e.status.as_u16(), "{}", e.message);
                }
                e.response()
            }
        };
        resp.headers_mut().insert(
            "docker-distribution-api-version",
            HeaderValue::from_static("registry/2.0"),
        );
        resp
    }

    async fn oci_route(
        &self,
        req: &Request<()>,
        who: &Result<Principal, Denied>,
    ) -> Result<Response<Body>, OciError> {
        if !matches!(*req.method(), Method::GET | Method::HEAD) {
            return Err(OciError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "UNSUPPORTED",
                "this registry is read-only: GET and HEAD only",
            ));
        }
        let path = req.uri().path();
        if path == "/v2/token" {
            return self.oci_token(req, who).await;
        }
        let rest = path.strip_prefix("/v2/").unwrap_or_default();
        let parsed = if rest.is_empty() {
            None
        } else {
            Some(OciPath::parse(rest).map_err(|e| OciError::of_path(&e))?)
        };
        let principal = self.oci_authorize(who, parsed.as_ref())?;
        let Some(parsed) = parsed else {
            return Ok(bytes_response(
                StatusCode::OK,
                "application/json",
                Bytes::from_static(b"{}"),
            ));
        };
        let head = req.method() == Method::HEAD;
        let repo = match &parsed {
            OciPath::Tags(r) | OciPath::Manifest(r, _) | OciPath::Blob(r, _) => r,
        };
        match repo {
            OciRepo::Provider(addr) => principal.may_get_provider(addr),
            OciRepo::Module(addr) => principal.may_get_module(addr),
        }
        .map_err(|e| OciError::of(&e, Subject::Name))?;
        let reach = principal.reach();
        let oci = &self.mirror.oci;
        match parsed {
            OciPath::Tags(repo) => {
                let tags = match &repo {
                    OciRepo::Provider(addr) => oci.oci_tags(addr, &reach).await,
                    OciRepo::Module(addr) => oci.module_tags(addr, &reach).await,
                }
                .map_err(|e| OciError::of(&e, Subject::Name))?;
                self.oci_tags(req, &repo, tags)
            }
            OciPath::Manifest(repo, mut reference) => {
                // `latest` is the version it names now, for the answer and for usage counts.
                if let (OciRepo::Module(addr), OciReference::Latest) = (&repo, &reference) {
                    let version = oci
                        .module_latest(addr, &reach)
                        .await
                        .map_err(|e| OciError::of(&e, Subject::Manifest))?;
                    reference = OciReference::Tag(version);
                }
                let doc: Document = match &repo {
                    OciRepo::Provider(addr) => oci.oci_manifest(addr, &reference, &reach).await,
                    OciRepo::Module(addr) => oci.module_manifest(addr, &reference, &reach).await,
                }
                .map_err(|e| OciError::of(&e, Subject::Manifest))?;
                // A tag names a version: resolving it is using it.
                if let (OciReference::Tag(version), false) = (&reference, head) {
                    let (kind, name) = match &repo {
                        OciRepo::Provider(addr) => (crate::usage::Kind::Provider, addr.to_string()),
                        OciRepo::Module(addr) => (crate::usage::Kind::Module, addr.to_string()),
                    };
                    self.count_use(&principal, kind, name, version);
                }
                Ok(document_response(
                    doc.bytes,
                    doc.media_type,
                    doc.sha256.as_str(),
                ))
            }
            OciPath::Blob(repo, sha256) if head => {
                let found = match &repo {
                    OciRepo::Provider(addr) => oci.oci_blob_head(addr, &sha256, &reach).await,
                    OciRepo::Module(addr) => oci.module_blob_head(addr, &sha256, &reach).await,
                }
                .map_err(|e| OciError::of(&e, Subject::Blob))?;
                Ok(match found {
                    OciBlobHead::Config => {
                        document_response(empty_config(), oci::EMPTY_MEDIA_TYPE, &sha256)
                    }
                    OciBlobHead::Archive(head) => {
                        let mut resp = super::archive_head_response(req, &head);
                        layer_headers(&mut resp, &sha256);
                        resp
                    }
                })
            }
            OciPath::Blob(repo, sha256) => {
                let found = match &repo {
                    OciRepo::Provider(addr) => oci.oci_blob(addr, &sha256, &reach).await,
                    OciRepo::Module(addr) => oci.module_blob(addr, &sha256, &reach).await,
                }
                .map_err(|e| OciError::of(&e, Subject::Blob))?;
                Ok(match found {
                    OciBlob::Config => {
                        document_response(empty_config(), oci::EMPTY_MEDIA_TYPE, &sha256)
                    }
                    OciBlob::Archive(Served::Body(archive)) => {
                        let mut resp = self.archive_response(req, archive);
                        layer_headers(&mut resp, &sha256);
                        resp
                    }
                    OciBlob::Archive(Served::Redirect(url)) => redirect(&url),
                })
            }
        }
    }

    /// `<repo>/tags/list`, in lexical order, `n` at a time after `last` when asked.
    fn oci_tags(
        &self,
        req: &Request<()>,
        repo: &OciRepo,
        tags: Vec<String>,
    ) -> Result<Response<Body>, OciError> {
        let (mut n, mut last) = (None, None);
        for (k, v) in url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()) {
            match &*k {
                "n" => {
                    n = Some(v.parse::<usize>().map_err(|_| {
                        OciError::new(
                            StatusCode::BAD_REQUEST,
                            "PAGINATION_NUMBER_INVALID",
                            format!("n={v:?} is not a number"),
                        )
                    })?)
                }
                "last" => last = Some(v.into_owned()),
                _ => {}
            }
        }
        let after: Vec<&String> = tags
            .iter()
            .filter(|t| last.as_ref().is_none_or(|l| *t > l))
            .collect();
        let page: Vec<&String> = after
            .iter()
            .take(n.unwrap_or(usize::MAX))
            .copied()
            .collect();
        let body = serde_json::json!({ "name": repo.to_string(), "tags": page });
        let mut resp = bytes_response(
            StatusCode::OK,
            "application/json",
            Bytes::from(body.to_string()),
        );
        if let (Some(n), Some(end)) = (n, page.last()) {
            if after.len() > page.len() {
                let next: String = url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("n", &n.to_string())
                    .append_pair("last", end)
                    .finish();
                let link = format!("</v2/{repo}/tags/list?{next}>; rel=\"next\"");
                resp.headers_mut().insert(
                    header::LINK,
                    HeaderValue::from_str(&link).expect("tags are header-safe"),
                );
            }
        }
        Ok(resp)
    }

    /// With authentication on, a request must carry one of the mirror's tokens or an accepted
    /// ID token as its bearer token; otherwise it gets 401 with the challenge OCI clients
    /// follow to `/v2/token`.
    fn oci_authorize(
        &self,
        who: &Result<Principal, Denied>,
        path: Option<&OciPath>,
    ) -> Result<Principal, OciError> {
        let repository = path.map(|p| match p {
            OciPath::Tags(r) | OciPath::Manifest(r, _) | OciPath::Blob(r, _) => r.to_string(),
        });
        let denied = match who {
            Ok(principal)
                if repository
                    .as_ref()
                    .is_none_or(|r| principal.may_read_repository(r)) =>
            {
                return Ok(principal.clone());
            }
            // A registry token for other repositories: the client asks for one for this.
            Ok(principal) => Denied::Unauthorized(format!(
                "the registry token of {} does not name this repository",
                principal.name
            )),
            Err(denied) => denied.clone(),
        };
        let mut realm = self.base_url.clone();
        realm.set_path("/v2/token");
        realm.set_query(None);
        let scope = repository
            .map(|r| format!(",scope=\"repository:{r}:pull\""))
            .unwrap_or_default();
        Err(OciError::unauthorized(
            denied,
            format!("Bearer realm=\"{realm}\",service=\"provender\"{scope}"),
        ))
    }

    /// `/v2/token`: the mirror's credentials in (as the `Basic` password, or a bearer token);
    /// out as `{"token", "access_token"}`, a registry token for the repositories the client
    /// names, or the same token when it names none.
    async fn oci_token(
        &self,
        req: &Request<()>,
        who: &Result<Principal, Denied>,
    ) -> Result<Response<Body>, OciError> {
        let auth = &self.settings.auth;
        let token = if auth.enabled() {
            let presented = req
                .headers()
                .get(header::AUTHORIZATION)
                .map(HeaderValue::as_bytes);
            let refused =
                |denied| OciError::unauthorized(denied, "Basic realm=\"provender\"".into());
            let token =
                crate::auth::AuthSettings::token_request_secret(presented).map_err(refused)?;
            // The request's own credentials were checked once already, as any request's are.
            let principal = who.clone().map_err(refused)?;
            // A client that names repositories gets a token for those alone.
            let repositories =
                crate::auth::registry_token::requested_repositories(req.uri().query())
                    .map_err(|m| OciError::new(StatusCode::FORBIDDEN, "DENIED", m))?;
            match repositories {
                Some(repositories) => auth.seal_registry_token(&RegistryGrant {
                    client: principal.name.to_string(),
                    person_token: principal.person_token.as_deref().map(str::to_string),
                    repositories: match &principal.repositories {
                        // A registry token traded again stays within its own repositories.
                        Some(held) => repositories
                            .into_iter()
                            .filter(|r| held.contains(r))
                            .collect(),
                        None => repositories,
                    },
                    expires: self.mirror.core().clock().now_secs() + REGISTRY_TOKEN_TTL,
                }),
                None => token,
            }
        } else {
            // Nothing to prove: any token works, so hand out a placeholder.
            "anonymous".to_string()
        };
        let body = serde_json::json!({
            "token": token,
            "access_token": token,
            "expires_in": if token.starts_with(crate::auth::registry_token::PREFIX) {
                REGISTRY_TOKEN_TTL
            } else {
                3600
            },
        });
        let mut resp = bytes_response(
            StatusCode::OK,
            "application/json",
            Bytes::from(body.to_string()),
        );
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        Ok(resp)
    }
}

/// Headers of a layer blob answer besides the archive's own.
fn layer_headers(resp: &mut Response<Body>, sha256: &str) {
    if resp.status() == StatusCode::OK {
        resp.headers_mut().insert(
            "docker-content-digest",
            HeaderValue::from_str(&format!("sha256:{sha256}")).expect("a digest is a header value"),
        );
    }
}
