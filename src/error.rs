//! Errors that know whose fault they are.
//!
//! Every failure the mirror can report to a client is an [`Error`]. Its variant decides the HTTP
//! status (client mistake, upstream trouble, or our own fault) and the short machine-readable code
//! in the JSON error body. Messages are written for humans and name the provider, file or URL
//! involved, but never carry credentials.
//!
//! Errors keep their cause: a failed verification says what failed ([`Failure`]) and of what
//! ([`Subject`]), with the underlying error as its `source()`. Causes that cannot be cloned are
//! held in an [`Arc`], so every request joined to one piece of work gets the same error value.

use std::sync::Arc;

use http::StatusCode;

use crate::address::{AddressError, ModuleAddr, ProviderAddr, Version};
use crate::hash::{HashError, Sha256};
use crate::metrics::{PolicyRule, VerificationReason};
use crate::package::PackError;
use crate::trust::{Owner, Refusal, TrustError};

/// A failure while answering a mirror request.
///
/// `Clone` because one upstream fetch can have many waiting clients, and each gets the same error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The request path is malformed (bad path segment, bad version syntax, ...).
    #[error("{0}")]
    BadRequest(#[from] AddressError),
    /// A request body is malformed: the message names the field at fault.
    #[error("{0}")]
    Invalid(String),
    /// The mirror does not serve this: unknown provider, version, platform, or a hostname outside
    /// `upstream.allowed_hosts`.
    #[error("{0}")]
    NotFound(String),
    /// The HTTP method is not GET or HEAD.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The request is understood but refused (e.g. a form another site sent).
    #[error("{0}")]
    Forbidden(String),
    /// A request body is larger than the endpoint takes.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// Too many sign-ins: the client may try again after `Retry-After`.
    #[error("{0}")]
    TooManySignIns(#[from] crate::auth::sso::TooManySignIns),
    /// The mirror is doing as much of this as it may at once (e.g. `git.max_concurrent_refreshes`):
    /// the client may try again after `retry_after` (`Retry-After`).
    #[error("{message}")]
    Busy {
        message: String,
        retry_after: std::time::Duration,
    },
    /// The origin registry failed, did not answer in time, or answered with something
    /// unusable.
    #[error("{0}")]
    Upstream(#[from] crate::upstream::UpstreamError),
    /// What the origin sent does not match what it promised (checksums, SHA256SUMS).
    #[error("{0}")]
    Verification(#[from] Box<Verification>),
    /// The operator's trust policy refuses this (e.g. a provider below `upstream.min_trust`);
    /// the message names the rule. 410, never 401 or 403, which the CLIs report as a problem
    /// with the person's credentials.
    #[error("{0}")]
    Policy(#[from] Box<PolicyRefusal>),
    /// The version policy (`[policy]`) refuses this version: denied (410 Gone), or held by a
    /// hold or a cooldown that can end (425 Too Early). The JSON body carries the rule.
    #[error("{0}")]
    NotAdmitted(Box<crate::policy::Refused>),
    /// The cache cannot take what it would need to serve this (a full disk, with more than
    /// `cache.max_fill_memory` left to hold).
    #[error("{0}")]
    InsufficientStorage(String),
    /// The cache's store failed (a full disk, an unreachable bucket).
    #[error("{0}")]
    Storage(#[from] crate::storage::StorageError),
    /// A publication refused (a malformed release, a conflict with a published version).
    #[error("{0}")]
    Publish(#[from] crate::records::publish::PublishError),
    /// Our own fault: disk I/O, a bug.
    #[error("{0}")]
    Internal(#[from] Internal),
    /// The request's budget (`server.request_budget`) ran out before its answer could start:
    /// something it needs (an origin, the store, an issuer, a centre) is slow or not answering.
    #[error(
        "no answer within {} (server.request_budget): a dependency is slow or not answering; try again shortly",
        humantime::format_duration(*.0)
    )]
    OutOfTime(std::time::Duration),
}

/// What `Retry-After` says to a client whose request a dependency failed (a timeout, no
/// connection, an open circuit, the store unavailable): soon, but not at once.
pub const RETRY_SOON: std::time::Duration = std::time::Duration::from_secs(5);

/// What a verification failure or a policy refusal is about.
#[derive(Debug, Clone)]
pub enum Subject {
    /// A provider version.
    Provider {
        addr: ProviderAddr,
        version: Version,
    },
    /// A module, or one of its versions.
    Module {
        addr: ModuleAddr,
        version: Option<Version>,
    },
    /// A release of a CLI (`terraform`, `tofu`).
    Release {
        product: crate::records::releases::Product,
        version: Version,
    },
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Provider { addr, version } => write!(f, "{addr} {version}"),
            Subject::Module {
                addr,
                version: Some(version),
            } => write!(f, "{addr} {version}"),
            Subject::Module {
                addr,
                version: None,
            } => write!(f, "{addr}"),
            Subject::Release { product, version } => write!(f, "{product} {version}"),
        }
    }
}

/// What the origin sent does not match what it promised: what failed, and of what.
#[derive(Debug, Clone)]
pub struct Verification {
    pub subject: Subject,
    pub failure: Failure,
}

impl std::fmt::Display for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Verification { subject, failure } = self;
        match subject {
            Subject::Provider { .. } | Subject::Release { .. } => {
                write!(f, "{subject}: verification failed: {failure}")
            }
            Subject::Module { .. } => write!(f, "module {subject}: {failure}"),
        }
    }
}

impl std::error::Error for Verification {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.failure)
    }
}

impl Verification {
    /// The `reason` label of `provender_verification_failures_total`.
    pub fn reason(&self) -> VerificationReason {
        self.failure.reason()
    }
}

/// What failed to verify.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Failure {
    /// An archive's bytes do not have the SHA-256 its origin published.
    #[error("{file} has SHA-256 {found} but the origin published {expected}")]
    ArchiveChecksum {
        file: String,
        expected: Sha256,
        found: Sha256,
    },
    /// An archive is not a zip Terraform could hash or unpack.
    #[error("{file}: {source}")]
    UnusableZip {
        file: String,
        source: Arc<HashError>,
    },
    /// The signature, SHA256SUMS or a package name was refused; `document` names what was
    /// checked. Built by [`Error::refused`], which also classifies the refusal.
    #[error("{refusal} ({document})")]
    Refused {
        #[source]
        refusal: Refusal,
        document: String,
        reason: VerificationReason,
    },
    /// A release's SHA256SUMS (signed) lists something other than that release's files.
    #[error("{file}: {error}")]
    ReleaseSums {
        file: String,
        error: crate::records::releases::ReleaseSumsError,
    },
    /// A module's archive cannot become a package.
    #[error("the package {0}")]
    UnusablePackage(#[source] Arc<PackError>),
    /// A module archive does not have the SHA-256 its source named (`?checksum=`).
    #[error("{url} has SHA-256 {found} but its source's checksum says {expected}")]
    PackageChecksum {
        url: url::Url,
        expected: Sha256,
        found: Sha256,
    },
}

impl Failure {
    /// The `reason` label of `provender_verification_failures_total`.
    pub fn reason(&self) -> VerificationReason {
        match self {
            Failure::ArchiveChecksum { .. } => VerificationReason::ArchiveChecksum,
            Failure::UnusableZip { .. } => VerificationReason::UnusableZip,
            Failure::ReleaseSums { .. } => VerificationReason::ShasumsMismatch,
            Failure::Refused { reason, .. } => *reason,
            Failure::UnusablePackage(_) => VerificationReason::UnusableModulePackage,
            Failure::PackageChecksum { .. } => VerificationReason::ModuleChecksum,
        }
    }
}

/// How a [`Refusal`] is counted: as a failed check of what the origin signed, or as the
/// operator's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The `reason` of `provender_verification_failures_total`.
    Failed(VerificationReason),
    /// The `rule` of `provender_policy_refusals_total`.
    Policy(PolicyRule),
}

impl RefusalKind {
    pub fn of(refusal: &Refusal) -> RefusalKind {
        use VerificationReason as R;
        let owner = |owner: &Owner| match owner {
            Owner::Hashicorp => R::SignatureNotHashicorp,
            Owner::Opentofu => R::SignatureNotOpentofu,
        };
        RefusalKind::Failed(match refusal {
            Refusal::Signature(e) => match e {
                TrustError::NoKeys => R::SignatureMissingKeys,
                TrustError::MalformedSignature(_) => R::SignatureMalformed,
                TrustError::BadSigningKey { .. } => R::SigningKeyInvalid,
                TrustError::BadSignature { .. } => R::SignatureInvalid,
                TrustError::UnknownIssuer { .. } => R::SignatureUnknownKey,
                TrustError::BadTrustSignature { .. } => R::TrustSignatureInvalid,
                TrustError::NotPinned { owner: o, .. }
                | TrustError::ReleaseNotPinned { owner: o, .. } => owner(o),
            },
            Refusal::NoKeys => R::SignatureMissingKeys,
            Refusal::ShasumsMismatch { .. } => R::ShasumsMismatch,
            Refusal::ShasumsMissing { .. } => R::ShasumsMissing,
            Refusal::NotPinnedSigned { owner: o, .. } => owner(o),
            Refusal::WrongFilename { .. } => R::PackageFilenameMismatch,
            Refusal::BelowMinTrust { .. } | Refusal::UnverifiedModule { .. } => {
                return RefusalKind::Policy(PolicyRule::MinTrust);
            }
            Refusal::NotPublished { .. } | Refusal::NotPrivate { .. } => {
                return RefusalKind::Policy(PolicyRule::PrivateNamespace);
            }
        })
    }
}

/// The operator's policy refuses something: what, and by which rule.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{subject}: refused by policy: {refusal}")]
pub struct PolicyRefusal {
    pub subject: Subject,
    #[source]
    pub refusal: Refusal,
}

/// Our own fault.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Internal {
    /// I/O on our own disk: what we were doing, and how it failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: Arc<std::io::Error>,
    },
    /// A blocking task died (it panicked, or the runtime is shutting down).
    #[error("{what} failed: {source}")]
    Task {
        what: &'static str,
        source: Arc<tokio::task::JoinError>,
    },
    /// Shared work ended without a result.
    #[error("{0}")]
    Aborted(#[from] crate::cache::Aborted),
    /// A state that should not occur, described (an object gone right after it was stored, a
    /// download that ended without a verdict); there is no underlying error to keep.
    #[error("{0}")]
    Unexpected(String),
}

impl Error {
    /// The HTTP status a client sees for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest(_) | Error::Invalid(_) => StatusCode::BAD_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Error::TooManySignIns(_) => StatusCode::TOO_MANY_REQUESTS,
            Error::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Error::Upstream(e) => e.status(),
            Error::Verification(_) => StatusCode::BAD_GATEWAY,
            Error::Policy(_) => StatusCode::GONE,
            Error::NotAdmitted(r) if r.is_hold() => StatusCode::TOO_EARLY,
            Error::NotAdmitted(_) => StatusCode::GONE,
            Error::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
            Error::Storage(e) => e.status(),
            Error::Publish(e) => e.status(),
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Error::OutOfTime(_) => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// A stable short code for the JSON body and logs.
    pub fn code(&self) -> &'static str {
        match self {
            Error::BadRequest(_) | Error::Invalid(_) => "bad_request",
            Error::NotFound(_) => "not_found",
            Error::MethodNotAllowed => "method_not_allowed",
            Error::Forbidden(_) => "forbidden",
            Error::PayloadTooLarge(_) => "payload_too_large",
            Error::TooManySignIns(_) => "too_many_requests",
            Error::Busy { .. } => "busy",
            Error::Upstream(crate::upstream::UpstreamError::Timeout(_)) => "upstream_timeout",
            Error::Upstream(crate::upstream::UpstreamError::NotARegistry(_)) => "not_found",
            Error::Upstream(_) => "upstream_error",
            Error::Verification(_) => "verification_failed",
            Error::Policy(_) => "policy_refused",
            Error::NotAdmitted(r) if r.is_hold() => "version_held",
            Error::NotAdmitted(_) => "version_denied",
            Error::InsufficientStorage(_) => "insufficient_storage",
            Error::Storage(crate::storage::StorageError::Unavailable { .. }) => {
                "storage_unavailable"
            }
            Error::Storage(_) => "storage_error",
            Error::Publish(e) => e.code(),
            Error::Internal(_) => "internal_error",
            Error::OutOfTime(_) => "deadline_exceeded",
        }
    }

    /// The JSON body sent to clients: `{"error": {"status": 404, "code": "not_found", "message": "..."}}`.
    pub fn to_json(&self) -> String {
        let mut body = serde_json::json!({
            "error": {
                "status": self.status().as_u16(),
                "code": self.code(),
                "message": self.to_string(),
            }
        });
        if let Error::NotAdmitted(r) = self {
            body["error"]["policy"] = r.to_json();
        }
        body.to_string()
    }

    /// Wraps an I/O failure on our own disk, naming what we were doing.
    pub fn io(context: impl std::fmt::Display, err: std::io::Error) -> Error {
        Error::Internal(Internal::Io {
            context: context.to_string(),
            source: Arc::new(err),
        })
    }

    /// A blocking task (`what`, e.g. "hashing task") that died.
    pub fn task(what: &'static str, err: tokio::task::JoinError) -> Error {
        Error::Internal(Internal::Task {
            what,
            source: Arc::new(err),
        })
    }

    /// A state that should not occur, described.
    pub fn unexpected(message: impl Into<String>) -> Error {
        Error::Internal(Internal::Unexpected(message.into()))
    }

    /// A failed verification of `subject`.
    pub fn verification(subject: Subject, failure: Failure) -> Error {
        Error::Verification(Box::new(Verification { subject, failure }))
    }

    /// A [`Refusal`] of `subject` as the error a client gets: a policy refusal (403) or a
    /// failed check (502) of `document`.
    pub fn refused(subject: Subject, refusal: Refusal, document: &str) -> Error {
        match RefusalKind::of(&refusal) {
            RefusalKind::Policy(_) => Error::Policy(Box::new(PolicyRefusal { subject, refusal })),
            RefusalKind::Failed(reason) => Error::verification(
                subject,
                Failure::Refused {
                    refusal,
                    document: document.to_string(),
                    reason,
                },
            ),
        }
    }

    /// A provider version as the subject of a verification or refusal.
    pub fn provider(addr: &ProviderAddr, version: &Version) -> Subject {
        Subject::Provider {
            addr: addr.clone(),
            version: version.clone(),
        }
    }

    /// A module (version) as the subject of a verification or refusal.
    pub fn module(addr: &ModuleAddr, version: Option<&Version>) -> Subject {
        Subject::Module {
            addr: addr.clone(),
            version: version.cloned(),
        }
    }

    /// How long the client should wait before asking again (`Retry-After`), when it says.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Error::TooManySignIns(e) => Some(e.retry_after),
            Error::Busy { retry_after, .. } => Some(*retry_after),
            Error::OutOfTime(_) => Some(RETRY_SOON),
            Error::Storage(crate::storage::StorageError::Unavailable { .. }) => Some(RETRY_SOON),
            Error::Upstream(e) if e.status().is_server_error() && e.unanswered() => {
                Some(RETRY_SOON)
            }
            _ => None,
        }
    }

    /// The failed verification this error reports, if it is one.
    pub fn as_verification(&self) -> Option<&Verification> {
        match self {
            Error::Verification(v) => Some(v),
            _ => None,
        }
    }
}

/// Shorthand used throughout the request path.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<crate::cache::NotCached> for Error {
    fn from(e: crate::cache::NotCached) -> Error {
        Error::NotFound(e.to_string())
    }
}

impl From<crate::cache::Aborted> for Error {
    fn from(e: crate::cache::Aborted) -> Error {
        Error::Internal(Internal::Aborted(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aws() -> Subject {
        Error::provider(
            &ProviderAddr::parse("registry.example/acme/aws").unwrap(),
            &Version::parse("1.2.3").unwrap(),
        )
    }

    fn module(version: Option<&str>) -> Subject {
        let version = version.map(|v| Version::parse(v).unwrap());
        Error::module(
            &ModuleAddr::parse_in("acme/net/aws", "registry.example").unwrap(),
            version.as_ref(),
        )
    }

    /// The chain of `source()`s below `e`, as text.
    fn causes(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
        let mut out = Vec::new();
        let mut next = e.source();
        while let Some(e) = next {
            out.push(e.to_string());
            next = e.source();
        }
        out
    }

    #[test]
    fn messages_name_the_subject_and_what_failed() {
        let checksum = Error::verification(
            aws(),
            Failure::ArchiveChecksum {
                file: "a.zip".into(),
                expected: Sha256::of(b"a"),
                found: Sha256::of(b"b"),
            },
        );
        assert_eq!(
            checksum.to_string(),
            format!(
                "registry.example/acme/aws 1.2.3: verification failed: a.zip has SHA-256 {} but \
                 the origin published {}",
                Sha256::of(b"b"),
                Sha256::of(b"a")
            )
        );
        assert_eq!(checksum.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(checksum.code(), "verification_failed");

        let zip = Error::verification(
            aws(),
            Failure::UnusableZip {
                file: "a.zip".into(),
                source: Arc::new(HashError::DuplicateNames),
            },
        );
        assert_eq!(
            zip.to_string(),
            "registry.example/acme/aws 1.2.3: verification failed: a.zip: zip lists the same \
             entry name more than once"
        );
        assert_eq!(
            causes(&zip).last().unwrap(),
            "zip lists the same entry name more than once"
        );

        let package = Error::verification(
            module(Some("1.0.0")),
            Failure::UnusablePackage(Arc::new(PackError::TooManyEntries(5))),
        );
        assert_eq!(
            package.to_string(),
            "module registry.example/acme/net/aws 1.0.0: the package more than 5 entries \
             (modules.max_entries)"
        );
        let url = url::Url::parse("https://origin.example/net.tar.gz").unwrap();
        let sum = Error::verification(
            module(None),
            Failure::PackageChecksum {
                url,
                expected: Sha256::of(b"a"),
                found: Sha256::of(b"b"),
            },
        );
        assert_eq!(
            sum.to_string(),
            format!(
                "module registry.example/acme/net/aws: https://origin.example/net.tar.gz has \
                 SHA-256 {} but its source's checksum says {}",
                Sha256::of(b"b"),
                Sha256::of(b"a")
            )
        );
        assert_eq!(
            sum.as_verification().unwrap().reason(),
            VerificationReason::ModuleChecksum
        );
    }

    #[test]
    fn refusals_are_policy_or_failed_checks() {
        let missing = Refusal::ShasumsMissing {
            filename: "a.zip".into(),
        };
        let e = Error::refused(aws(), missing.clone(), "SHA256SUMS at https://x/");
        assert_eq!(
            e.to_string(),
            "registry.example/acme/aws 1.2.3: verification failed: SHA256SUMS has no line for \
             a.zip (SHA256SUMS at https://x/)"
        );
        assert_eq!(
            e.as_verification().unwrap().reason().as_str(),
            "shasums_missing"
        );
        assert_eq!(causes(&e).last(), Some(&missing.to_string()));

        let below = Refusal::BelowMinTrust {
            addr: "registry.example/acme/aws".into(),
            kind: crate::trust::SignatureKind::Community,
            min: crate::trust::SignatureKind::Partner,
        };
        assert_eq!(
            RefusalKind::of(&below),
            RefusalKind::Policy(PolicyRule::MinTrust)
        );
        let e = Error::refused(aws(), below.clone(), "archive");
        assert_eq!(e.status(), StatusCode::GONE);
        assert_eq!(e.code(), "policy_refused");
        assert_eq!(
            e.to_string(),
            format!("registry.example/acme/aws 1.2.3: refused by policy: {below}")
        );

        let unpinned = Refusal::Signature(TrustError::NotPinned {
            addr: "registry.terraform.io/hashicorp/aws".into(),
            owner: Owner::Hashicorp,
            key_id: "0".into(),
        });
        assert_eq!(
            RefusalKind::of(&unpinned),
            RefusalKind::Failed(VerificationReason::SignatureNotHashicorp)
        );
    }

    #[test]
    fn clones_share_their_cause() {
        let e = Error::io(
            "reading a staging file",
            std::io::Error::other("disk on fire"),
        );
        let shared = e.clone();
        let (
            Error::Internal(Internal::Io { source: a, .. }),
            Error::Internal(Internal::Io { source: b, .. }),
        ) = (&e, &shared)
        else {
            panic!("{e:?}");
        };
        assert!(Arc::ptr_eq(a, b));
        assert_eq!(e.to_string(), "reading a staging file: disk on fire");
        assert_eq!(
            causes(&e),
            ["reading a staging file: disk on fire", "disk on fire"]
        );
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
