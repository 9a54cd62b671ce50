//! Responses every part of the HTTP layer sends: bodies, JSON documents, errors as JSON error
//! bodies with the status their [`Error`] carries, refusals with their challenge, redirects.

use std::convert::Infallible;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};

use crate::auth::Denied;
use crate::error::Error;

/// Response body: a buffer or a stream from the archive store.
pub type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// A temporary redirect (to a pre-signed object-store URL).
pub(super) fn redirect(url: &url::Url) -> Response<Body> {
    Response::builder()
        .status(StatusCode::FOUND)
        .header(header::LOCATION, url.as_str())
        .header(header::CACHE_CONTROL, "no-store")
        .body(empty())
        .expect("valid response")
}

pub(super) fn empty() -> Body {
    Full::new(Bytes::new())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

/// A body of `bytes`, whole.
pub(super) fn full(bytes: Bytes) -> Body {
    Full::new(bytes)
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

pub(super) fn response(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(
            Full::new(body)
                .map_err(|never: Infallible| match never {})
                .boxed_unsync(),
        )
        .expect("valid response")
}

pub(super) fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    response(status, "application/json", body.into())
}

/// 401 with the bearer challenge.
pub(super) fn unauthorized(message: &str) -> Response<Body> {
    denied_response(&Denied::Unauthorized(message.to_string()))
}

pub(super) fn denied_response(denied: &Denied) -> Response<Body> {
    tracing::debug!(status = denied.status(), "request refused: {denied:?}");
    let status = StatusCode::from_u16(denied.status()).unwrap_or(StatusCode::UNAUTHORIZED);
    let mut resp = json_response(status, denied.to_json().into_bytes());
    if let Some(challenge) = denied.challenge() {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
    }
    if matches!(denied, Denied::Unavailable(_)) {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(crate::error::RETRY_SOON.as_secs()),
        );
    }
    resp
}

pub(super) fn error_response(e: &Error) -> Response<Body> {
    let mut resp = json_response(e.status(), e.to_json().into_bytes());
    error_headers(e, &mut resp);
    resp
}

/// The headers an error's answer carries, whatever its body: `Allow` for a wrong method,
/// `Retry-After` (whole seconds, at least one) when the error says when to come back.
pub(super) fn error_headers(e: &Error, resp: &mut Response<Body>) {
    if matches!(e, Error::MethodNotAllowed) {
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    if let Some(wait) = e.retry_after() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, retry_after(wait));
    }
}

/// A `Retry-After` value for `wait`: whole seconds, rounded up, at least one.
pub(super) fn retry_after(wait: std::time::Duration) -> HeaderValue {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    HeaderValue::from(secs.max(1))
}

/// 301 to `location` (a path of this server's own).
pub(super) fn moved_permanently(location: &str) -> Response<Body> {
    redirect_to(StatusCode::MOVED_PERMANENTLY, location)
}

/// 303 to `location` (after a form, or to the sign-in page).
pub(super) fn see_other(location: &str) -> Response<Body> {
    redirect_to(StatusCode::SEE_OTHER, location)
}

/// An empty answer with `status` sending the client to `location`.
fn redirect_to(status: StatusCode, location: &str) -> Response<Body> {
    let mut resp = response(status, "text/plain; charset=utf-8", Bytes::new());
    if let Ok(value) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(header::LOCATION, value);
    }
    resp
}
