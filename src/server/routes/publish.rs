//! The publishing API, under `<base>-/api/v1/`: how CI and people put the organisation's own
//! providers and modules into the private namespaces (see [`crate::mirror::Publisher`]).
//!
//! - `PUT` (or `POST`) `publish/providers/<namespace>/<type>/<version>`: the body is a tar
//!   stream (plain or gzip) of the release's files as GoReleaser makes them;
//! - `PUT` (or `POST`) `publish/modules/<namespace>/<name>/<system>/<version>`: the body is
//!   the module's archive (`.tar.gz`, `.tar` or `.zip`);
//! - `POST publish/<providers|modules>/<address>/<version>/yank[?reason=...]`: withdraws a
//!   version from its version list.
//!
//! What was published is shown by the site (`-/published`, `-/api/v1/publications`).
//!
//! Bodies are streamed to the staging area within `publishing.max_upload_size`. The client
//! authenticates as at every door (a token, or a CI system's ID token) and its rule's
//! `publish` patterns must name what it publishes. Answers are JSON: `201` for a new
//! publication, `200` when the same files were published before, `409` when other files were,
//! and the usual error body otherwise.

use futures_util::{StreamExt, TryStreamExt};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::{App, Body, Route, denied_response};
use crate::address::{AddressError, ModuleAddr, ProviderAddr, Version};
use crate::auth::Denied;
use crate::error::Error;
use crate::mirror::Outcome;
use crate::records::publish::{Publication, PublishedKind};
use crate::server::identity::Principal;
use crate::server::respond::json_response;

/// What a request under `publish/` names.
enum Target {
    Provider(ProviderAddr),
    Module(ModuleAddr),
}

impl Target {
    fn kind(&self) -> PublishedKind {
        match self {
            Target::Provider(_) => PublishedKind::Provider,
            Target::Module(_) => PublishedKind::Module,
        }
    }

    fn address(&self) -> String {
        match self {
            Target::Provider(a) => a.to_string(),
            Target::Module(a) => a.to_string(),
        }
    }

    fn namespace(&self) -> &str {
        match self {
            Target::Provider(a) => &a.namespace,
            Target::Module(a) => &a.namespace,
        }
    }

    /// The kind a rule's `publish` patterns name.
    fn publish_kind(&self) -> crate::auth::rules::PublishKind {
        match self {
            Target::Provider(_) => crate::auth::rules::PublishKind::Provider,
            Target::Module(_) => crate::auth::rules::PublishKind::Module,
        }
    }

    /// What a rule's `publish` patterns are matched against: the address without its host.
    fn pattern_subject(&self) -> String {
        match self {
            Target::Provider(a) => format!("{}/{}", a.namespace, a.type_),
            Target::Module(a) => format!("{}/{}/{}", a.namespace, a.name, a.system),
        }
    }
}

/// `publish/<providers|modules>/<address>/<version>[/yank]` under the registry's hostname.
fn parse(
    rest: &str,
    hostname: &crate::address::Hostname,
) -> Result<(Target, Version, bool), Error> {
    let not_found = || {
        Error::NotFound(format!(
            "{rest}: expected publish/providers/<namespace>/<type>/<version> or \
             publish/modules/<namespace>/<name>/<system>/<version>, optionally with /yank"
        ))
    };
    let (rest, yank) = match rest.strip_suffix("/yank") {
        Some(r) => (r, true),
        None => (rest, false),
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let host = hostname.as_str();
    let bad = |e: AddressError| Error::BadRequest(e);
    match parts.as_slice() {
        ["providers", ns, ty, v] => Ok((
            Target::Provider(ProviderAddr::new(host, ns, ty).map_err(bad)?),
            Version::parse(v).map_err(bad)?,
            yank,
        )),
        ["modules", ns, name, system, v] => Ok((
            Target::Module(ModuleAddr::new(host, ns, name, system).map_err(bad)?),
            Version::parse(v).map_err(bad)?,
            yank,
        )),
        _ => Err(not_found()),
    }
}

/// The JSON of a publication answer.
fn answer(status: StatusCode, outcome: &str, publication: &Publication) -> Response<Body> {
    let body = serde_json::json!({ "status": outcome, "publication": publication });
    json_response(
        status,
        serde_json::to_vec(&body).expect("records serialise"),
    )
}

impl App {
    /// A request under `<base>-/api/v1/publish/`; `rest` is the part after `publish/`.
    pub(super) async fn publish(
        &self,
        req: &Request<()>,
        body: Incoming,
        rest: &str,
        who: &Result<Principal, Denied>,
    ) -> Result<Response<Body>, Error> {
        let principal = match self.authorize(req, Route::Api, who) {
            Ok(principal) => principal,
            Err(denied) => return Ok(denied_response(&denied)),
        };
        let publisher = &self.mirror.publisher;
        let Some(hostname) = publisher.hostname() else {
            return Err(Error::NotFound(
                "this registry has no private namespaces (publishing.namespaces)".into(),
            ));
        };
        let (target, version, yank) = parse(rest, hostname)?;
        publisher.check_namespace(hostname, target.namespace())?;
        principal.may_publish(target.publish_kind(), &target.pattern_subject())?;
        if yank {
            if req.method() != Method::POST {
                return Err(Error::MethodNotAllowed);
            }
            let reason = req
                .uri()
                .query()
                .into_iter()
                .flat_map(|q| url::form_urlencoded::parse(q.as_bytes()))
                .find(|(k, _)| k == "reason")
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default();
            let publication = publisher
                .yank(
                    target.kind(),
                    &target.address(),
                    &version,
                    &principal.name,
                    &reason,
                )
                .await?;
            return Ok(answer(StatusCode::OK, "yanked", &publication));
        }
        if !matches!(*req.method(), Method::PUT | Method::POST) {
            return Err(Error::MethodNotAllowed);
        }
        let stream = body
            .into_data_stream()
            .map_err(std::io::Error::other)
            .boxed();
        let staged = publisher.stage_body(stream).await?;
        let outcome = match &target {
            Target::Provider(addr) => {
                let files = publisher.unpack_release(staged).await?;
                publisher
                    .publish_provider(addr, &version, files, &principal.name)
                    .await?
            }
            Target::Module(addr) => {
                publisher
                    .publish_module(addr, &version, staged, &principal.name)
                    .await?
            }
        };
        Ok(match &outcome {
            Outcome::Published(p) => answer(StatusCode::CREATED, "published", p),
            Outcome::Unchanged(p) => answer(StatusCode::OK, "unchanged", p),
        })
    }
}
