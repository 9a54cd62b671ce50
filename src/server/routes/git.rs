//! The git door: git's smart HTTP protocol, fetches only, under `<base>git/<host>/<path>`, so
//! that `git config url."https://mirror/git/github.com/".insteadOf "https://github.com/"` sends
//! a configuration's `git::https://github.com/...` sources here unchanged.
//!
//! - `GET <repo>/info/refs?service=git-upload-pack`: the repository made ready
//!   ([`crate::mirror::GitMirror::ready`]: refreshed from its origin when stale, within the
//!   client's reach) and its advertisement; protocol v2 when the client's `Git-Protocol`
//!   header asks for it, else v0 (with the `# service=` line git's own server sends first);
//! - `POST <repo>/git-upload-pack`: one request of the client's (`ls-refs` or `fetch` in v2,
//!   the negotiation in v0; gzip-encoded if the client chose), at most `git.max_request_size`,
//!   answered by `git upload-pack --stateless-rpc` over the cached copy, streamed. Only its
//!   first [`PEEK`] bytes are read before it has a turn (`GitMirror::turn`: v2's `ls-refs`
//!   from the listing turns, everything else from the client's and all clients' pack turns),
//!   so requests waiting for a turn hold next to nothing; the rest is read, and inflated, once
//!   it has one;
//! - `git-receive-pack` (a push) is refused, and so is git's old "dumb" protocol.
//!
//! Clients authenticate as at every door; git sends `Basic` credentials (a token as the
//! password, from a credential helper or `.netrc`), so a missing or refused one gets a `Basic`
//! challenge, which makes git ask its helper. `[[auth.rules]]` `git` patterns say which
//! repositories a client may fetch; `fill = false` clients get only what is cached.

use std::io::Read;
use std::net::SocketAddr;

use bytes::Bytes;
use futures_util::TryStreamExt;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::body::{Frame, Incoming};

use super::{App, Body, Route, denied_response};
use crate::address::{AddressError, GitRepo};
use crate::auth::Denied;
use crate::error::Error;
use crate::mirror::{GitProtocol, GitReady, GitTurn, TurnKind};
use crate::server::identity::Principal;
use crate::server::respond::full;

/// How much of a request body is read before the request has a turn: enough for its first
/// command.
const PEEK: usize = 4 * 1024;

/// How a request body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Identity,
    Gzip,
}

/// What a request to the git door asks for.
#[derive(Debug, PartialEq, Eq)]
enum GitRequest {
    /// `info/refs?service=git-upload-pack`.
    Refs,
    /// `git-upload-pack`.
    UploadPack,
    /// `git-receive-pack`, or `info/refs?service=git-receive-pack`.
    Push,
}

/// `<host>/<path>/<info/refs | git-upload-pack | git-receive-pack>` (the part after `git/`).
fn parse(rest: &str, query: Option<&str>) -> Result<(GitRepo, GitRequest), Error> {
    let service = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("service="));
    let (repo, request) = if let Some(repo) = rest.strip_suffix("/info/refs") {
        match service {
            Some("git-upload-pack") => (repo, GitRequest::Refs),
            Some("git-receive-pack") => (repo, GitRequest::Push),
            _ => {
                return Err(Error::NotFound(format!(
                    "git/{rest}: only git's smart HTTP protocol is served \
                     (info/refs?service=git-upload-pack)"
                )));
            }
        }
    } else if let Some(repo) = rest.strip_suffix("/git-upload-pack") {
        (repo, GitRequest::UploadPack)
    } else if let Some(repo) = rest.strip_suffix("/git-receive-pack") {
        (repo, GitRequest::Push)
    } else {
        return Err(Error::NotFound(format!(
            "git/{rest}: expected git/<host>/<path>/info/refs or git/<host>/<path>/git-upload-pack"
        )));
    };
    Ok((GitRepo::parse(repo)?, request))
}

/// The protocol a request asks for: v2 when its `Git-Protocol` header names `version=2`.
fn protocol_of(req: &Request<()>) -> GitProtocol {
    let v2 = req
        .headers()
        .get("git-protocol")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(':').any(|p| p.trim() == "version=2"));
    if v2 { GitProtocol::V2 } else { GitProtocol::V0 }
}

/// A git pkt-line holding `text`.
fn pkt_line(text: &str) -> String {
    format!("{:04x}{text}", text.len() + 4)
}

/// The headers git's own server sends with every smart answer: never cached by a proxy.
fn git_response(content_type: &'static str, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, max-age=0, must-revalidate"),
    );
    resp
}

impl App {
    /// A request under `<base>git/`, `rest` the part after it.
    pub(super) async fn git(
        &self,
        req: &Request<()>,
        body: Incoming,
        rest: &str,
        who: &Result<Principal, Denied>,
        peer: SocketAddr,
    ) -> Result<Response<Body>, Error> {
        let principal = match self.authorize(req, Route::Git, who) {
            Ok(principal) => principal,
            Err(denied) => {
                let mut resp = denied_response(&denied);
                if matches!(denied, Denied::Unauthorized(_)) {
                    // git asks its credential helper only after a Basic challenge.
                    resp.headers_mut().insert(
                        header::WWW_AUTHENTICATE,
                        HeaderValue::from_static("Basic realm=\"provender\""),
                    );
                }
                return Ok(resp);
            }
        };
        let (repo, request) = parse(rest, req.uri().query())?;
        let method_ok = match request {
            GitRequest::Refs => matches!(*req.method(), Method::GET | Method::HEAD),
            GitRequest::UploadPack => req.method() == Method::POST,
            GitRequest::Push => true,
        };
        if !method_ok {
            return Err(Error::MethodNotAllowed);
        }
        if request == GitRequest::Push {
            return Err(Error::Forbidden(format!(
                "git repository {repo}: this mirror serves fetches only, not pushes"
            )));
        }
        principal.may_get_git(&repo)?;
        let protocol = protocol_of(req);
        let git = &self.mirror.git;
        match request {
            GitRequest::Refs => {
                let ready = git.ready(&repo, &principal.reach()).await?;
                let advertised = git.advertise(&ready, protocol).await?;
                git.record_use(&ready);
                self.usage.record(crate::usage::Use {
                    client: principal.name.to_string(),
                    kind: crate::usage::Kind::Git,
                    address: repo.to_string(),
                    version: "-".into(),
                });
                let body = match protocol {
                    // v0 clients expect the service line git's own server sends first.
                    GitProtocol::V0 => {
                        let mut body = pkt_line("# service=git-upload-pack\n").into_bytes();
                        body.extend_from_slice(b"0000");
                        body.extend_from_slice(&advertised);
                        Bytes::from(body)
                    }
                    GitProtocol::V2 => advertised,
                };
                Ok(git_response(
                    "application/x-git-upload-pack-advertisement",
                    full(body),
                ))
            }
            GitRequest::UploadPack => {
                // No refresh here: the client asks about what `info/refs` showed it, which is
                // what the cache has (a cache-only client's reach is checked by `ready`).
                let ready = git.cached_copy(&repo)?;
                let encoding = encoding_of(req)?;
                let max = self.settings.git.max_request_size;
                let (head, rest) = peek(body, max).await?;
                let kind = if protocol == GitProtocol::V2 && is_ls_refs(&head, encoding) {
                    TurnKind::Listing
                } else {
                    TurnKind::Pack
                };
                // Turns are per client: its name, or its address when anyone may ask.
                let client = if self.settings.auth.enabled() {
                    principal.name.to_string()
                } else {
                    peer.ip().to_string()
                };
                let turn = git.turn(&client, kind).await;
                let request = git_request(head, rest, encoding, max).await?;
                self.upload_pack(&ready, protocol, request, turn).await
            }
            GitRequest::Push => unreachable!("refused above"),
        }
    }

    /// Streams `git upload-pack`'s answer to one request.
    async fn upload_pack(
        &self,
        ready: &GitReady,
        protocol: GitProtocol,
        request: Bytes,
        turn: GitTurn,
    ) -> Result<Response<Body>, Error> {
        let output = self
            .mirror
            .git
            .upload_pack(ready, protocol, false, request, turn)
            .await?;
        let stream = output.map_ok(Frame::data);
        Ok(git_response(
            "application/x-git-upload-pack-result",
            BodyExt::boxed_unsync(StreamBody::new(stream)),
        ))
    }
}

fn too_large(max: u64) -> Error {
    Error::PayloadTooLarge(format!(
        "a git request of more than git.max_request_size ({max} bytes)"
    ))
}

fn unreadable() -> Error {
    Error::BadRequest(AddressError::new(
        "git request",
        "(body)",
        "could not be read to its end",
    ))
}

/// The request's `Content-Encoding`: none (or `identity`) or gzip, as git sends.
fn encoding_of(req: &Request<()>) -> Result<Encoding, Error> {
    let encoding = req
        .headers()
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    match encoding {
        None | Some("identity") => Ok(Encoding::Identity),
        Some("gzip" | "x-gzip") => Ok(Encoding::Gzip),
        Some(other) => Err(Error::BadRequest(AddressError::new(
            "Content-Encoding",
            other,
            "a git request is sent plain or gzip-encoded",
        ))),
    }
}

/// The first [`PEEK`] bytes or so of a request body (all of it if shorter), and the rest,
/// unread (`None` when it ended).
async fn peek(mut body: Incoming, max: u64) -> Result<(Vec<u8>, Option<Incoming>), Error> {
    let mut head = Vec::new();
    while head.len() < PEEK {
        match body.frame().await {
            None => return Ok((head, None)),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    head.extend_from_slice(&data);
                    if head.len() as u64 > max {
                        return Err(too_large(max));
                    }
                }
            }
            Some(Err(_)) => return Err(unreadable()),
        }
    }
    Ok((head, Some(body)))
}

/// Whether a request (its first bytes) is protocol v2's `ls-refs`.
fn is_ls_refs(head: &[u8], encoding: Encoding) -> bool {
    const FIRST: u64 = 64;
    let mut first = Vec::new();
    match encoding {
        // A prefix of a gzip stream inflates to a prefix of the request (the error at its
        // cut end is expected).
        Encoding::Gzip => {
            let _ = flate2::read::GzDecoder::new(head)
                .take(FIRST)
                .read_to_end(&mut first);
        }
        Encoding::Identity => first.extend(head.iter().take(FIRST as usize)),
    }
    first
        .get(4..)
        .is_some_and(|command| command.starts_with(b"command=ls-refs\n"))
}

/// The client's whole request, `head` and then `rest`: at most `max` bytes, decoded if
/// gzip-encoded (and at most `max` bytes decoded).
async fn git_request(
    head: Vec<u8>,
    rest: Option<Incoming>,
    encoding: Encoding,
    max: u64,
) -> Result<Bytes, Error> {
    let mut collected = head;
    if let Some(rest) = rest {
        let left = max.saturating_sub(collected.len() as u64);
        let more = Limited::new(rest, left as usize)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    too_large(max)
                } else {
                    unreadable()
                }
            })?
            .to_bytes();
        collected.extend_from_slice(&more);
    }
    match encoding {
        Encoding::Identity => Ok(Bytes::from(collected)),
        Encoding::Gzip => {
            let mut decoded = Vec::new();
            flate2::read::GzDecoder::new(&collected[..])
                .take(max + 1)
                .read_to_end(&mut decoded)
                .map_err(|_| {
                    Error::BadRequest(AddressError::new(
                        "git request",
                        "(gzip)",
                        "is not valid gzip",
                    ))
                })?;
            if decoded.len() as u64 > max {
                return Err(too_large(max));
            }
            Ok(Bytes::from(decoded))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_from_their_paths() {
        let (repo, req) = parse(
            "github.com/acme/modules.git/info/refs",
            Some("service=git-upload-pack"),
        )
        .unwrap();
        assert_eq!(repo.to_string(), "github.com/acme/modules.git");
        assert_eq!(req, GitRequest::Refs);
        let (repo, req) = parse("gitlab.example/group/sub/project/git-upload-pack", None).unwrap();
        assert_eq!(repo.path(), "group/sub/project");
        assert_eq!(req, GitRequest::UploadPack);
        assert_eq!(
            parse("github.com/a/b/info/refs", Some("service=git-receive-pack"))
                .unwrap()
                .1,
            GitRequest::Push
        );
        for bad in [
            ("github.com/a/b/info/refs", None),
            ("github.com/a/b/HEAD", None),
            ("github.com/a/b/objects/info/packs", None),
            ("github.com/../b/git-upload-pack", None),
            ("github.com/a/../../etc/git-upload-pack", None),
            ("github.com/git-upload-pack", None),
            ("github.com//b/git-upload-pack", None),
            ("github.com/a/.git/git-upload-pack", None),
            ("not a host/a/git-upload-pack", None),
        ] {
            assert!(parse(bad.0, bad.1).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pkt_lines_carry_their_length() {
        assert_eq!(
            pkt_line("# service=git-upload-pack\n"),
            "001e# service=git-upload-pack\n"
        );
    }
}
