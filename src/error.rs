//! Errors that know whose fault they are.
//!
//! Every failure the mirror can report to a client is an [`Error`]. Its variant decides the HTTP
//! status (client mistake, upstream trouble, or our own fault) and the short machine-readable code
//! in the JSON error body. Messages are written for humans and name the provider, file or URL
//! involved, but never carry credentials.

use http::StatusCode;

/// A failure while answering a mirror request.
///
/// `Clone` because one upstream fetch can have many waiting clients, and each gets the same error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The request itself is malformed (bad path segment, bad version syntax, ...).
    #[error("{0}")]
    BadRequest(String),
    /// The mirror does not serve this: unknown provider, version, platform, or a hostname outside
    /// `upstream.allowed_hosts`.
    #[error("{0}")]
    NotFound(String),
    /// The HTTP method is not GET or HEAD.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The origin registry failed, did not answer in time, or answered with something
    /// unusable.
    #[error("{0}")]
    Upstream(#[from] crate::upstream::UpstreamError),
    /// What the origin sent does not match what it promised (checksums, SHA256SUMS).
    #[error("{0}")]
    Verification(String),
    /// The operator's policy refuses this (e.g. a provider below `upstream.min_trust`); the
    /// message names the rule.
    #[error("{0}")]
    Policy(String),
    /// The cache cannot take what it would need to serve this (a full disk, with more than
    /// `cache.max_fill_memory` left to hold).
    #[error("{0}")]
    InsufficientStorage(String),
    /// The cache's store failed (a full disk, an unreachable bucket).
    #[error("{0}")]
    Storage(#[from] crate::storage::StorageError),
    /// Our own fault: disk I/O, a bug.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// The HTTP status a client sees for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Error::Upstream(e) => e.status(),
            Error::Verification(_) => StatusCode::BAD_GATEWAY,
            Error::Policy(_) => StatusCode::FORBIDDEN,
            Error::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
            Error::Storage(e) => e.status(),
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A stable short code for the JSON body and logs.
    pub fn code(&self) -> &'static str {
        match self {
            Error::BadRequest(_) => "bad_request",
            Error::NotFound(_) => "not_found",
            Error::MethodNotAllowed => "method_not_allowed",
            Error::Upstream(crate::upstream::UpstreamError::Timeout(_)) => "upstream_timeout",
            Error::Upstream(crate::upstream::UpstreamError::NotARegistry(_)) => "not_found",
            Error::Upstream(_) => "upstream_error",
            Error::Verification(_) => "verification_failed",
            Error::Policy(_) => "policy_refused",
            Error::InsufficientStorage(_) => "insufficient_storage",
            Error::Storage(crate::storage::StorageError::Unavailable { .. }) => {
                "storage_unavailable"
            }
            Error::Storage(_) => "storage_error",
            Error::Internal(_) => "internal_error",
        }
    }

    /// The JSON body sent to clients: `{"error": {"status": 404, "code": "not_found", "message": "..."}}`.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "error": {
                "status": self.status().as_u16(),
                "code": self.code(),
                "message": self.to_string(),
            }
        })
        .to_string()
    }

    /// Wraps an I/O failure on our own disk, naming what we were doing.
    pub fn io(context: impl std::fmt::Display, err: std::io::Error) -> Error {
        Error::Internal(format!("{context}: {err}"))
    }
}

/// Shorthand used throughout the request path.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<crate::cache::Aborted> for Error {
    fn from(e: crate::cache::Aborted) -> Error {
        Error::Internal(e.to_string())
    }
}
