//! A fake origin registry served in-process over real TLS.
//!
//! [`FakeOrigin`] implements Terraform's remote service discovery and the provider
//! registry protocol (`providers.v1`) well enough for both provender and the real
//! `terraform` CLI to install from it, and, when started with
//! [`FakeOrigin::start_with_modules`], the module registry protocol (`modules.v1`) too:
//!
//! - `GET /.well-known/terraform.json` answers `{"providers.v1":"/v1/providers/"}`, plus
//!   `"modules.v1":"/v1/modules/"` when the origin serves modules;
//! - `GET /v1/providers/:ns/:type/versions` lists versions, protocols and platforms;
//! - `GET /v1/providers/:ns/:type/:version/download/:os/:arch` answers the full download
//!   metadata, with `download_url`, `shasums_url` and `shasums_signature_url` given as
//!   relative URLs (`/files/...`) so they resolve against whichever host name the client
//!   used (provender reaches this server as `registry.terraform.io`, terraform itself as
//!   `127.0.0.1:PORT`);
//! - `GET /files/:ns/:type/:version/<file>` serves the zip archives, the goreleaser-style
//!   `..._SHA256SUMS` file and its binary detached OpenPGP signature `..._SHA256SUMS.sig`;
//! - `GET /v1/modules/:ns/:name/:system/versions` answers
//!   `{"modules":[{"versions":[{"version":"1.0.0"},...]}]}`;
//! - `GET /v1/modules/:ns/:name/:system/:version/download` answers the package's location
//!   ([`ModuleSource`]) as `204` + `X-Terraform-Get`, or `200` with a JSON `{"location"}` body
//!   with or without the header ([`DownloadAnswer`]); absolute locations name the host the
//!   client used (its `Host` header), so they work for provender (`registry.terraform.io`)
//!   and for terraform itself (`127.0.0.1:PORT`) alike;
//! - `GET /modarchives/...` serves the modules' deterministic `.tar.gz` packages and the
//!   hostile ones ([`HostileModule`]);
//! - `/git/...` is a real git server over HTTPS (`git http-backend` as a CGI) holding one
//!   repository per module, one tagged commit per version (see the `git` submodule).
//!
//! Everything is built once at [`FakeOrigin::start`]: deterministic zip archives (fixed
//! timestamps, so their bytes and hashes are stable), the SHA256SUMS documents, and real
//! signatures made by the `gpg` binary with a key generated once per test process.
//!
//! Tests observe the server through per-[`RequestKind`] counters (incremented before any
//! fault applies, so "zero archive downloads upstream" is easy to assert) and a request
//! log, and disturb it at runtime with [`Fault`]s.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::{Cursor, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST, LOCATION, USER_AGENT};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use zip::write::SimpleFileOptions;
use zip::{DateTime, System, ZipWriter};

use super::pki::TestCa;
use super::within;

mod git;
mod modules;

pub use git::{DEEP_TREE, OPTION_BRANCH};

pub use modules::{
    DownloadAnswer, ENDLESS_GIT_REF, GZIP_BOMB_UNPACKED, HostileModule, LONG_NAME_BOMB_DECLARED,
    ModuleSource, ModuleSpec, ZIP_BOMB_UNPACKED,
};

use self::git::GitRepos;
use self::modules::ModuleFixtures;

/// The provider plugin protocol versions every fake provider claims to support.
const PROTOCOLS: [&str; 1] = ["5.0"];

/// How long a client may take to finish its TLS handshake before the server gives up.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One provider the fake registry serves: every version is available for every platform.
#[derive(Clone, Debug)]
pub struct ProviderSpec {
    /// Registry namespace, e.g. `acme`.
    pub namespace: String,
    /// Provider type, e.g. `foo` (the archive holds `terraform-provider-foo_v<version>`).
    pub type_: String,
    /// Version strings, served in this order.
    pub versions: Vec<String>,
    /// `(os, arch)` pairs, e.g. `("linux", "amd64")`.
    pub platforms: Vec<(String, String)>,
    /// Whether archives also hold an explicit `docs/` directory entry and
    /// `docs/README.md`, to exercise h1 hashing of directory entries. [`ProviderSpec::new`]
    /// turns it on for the type `dirs`.
    pub with_dir_entries: bool,
    /// Size of an extra incompressible `payload.bin` in every archive (0: none), for tests
    /// that need archives large enough to be caught mid-download.
    pub payload_bytes: usize,
    /// Extra entries added to every archive as given (`None`: a directory entry), for tests of
    /// hostile archives; see [`ProviderSpec::with_entry`].
    pub extra_entries: Vec<(String, Option<Vec<u8>>)>,
    /// Whether download metadata carries the OpenTofu registry's `packages` extension (every
    /// platform's `zh:` and `h1:` hashes and size).
    pub packages_extension: bool,
}

impl ProviderSpec {
    /// A provider `ns/ty` with the given versions, each built for every `(os, arch)`.
    pub fn new(ns: &str, ty: &str, versions: &[&str], platforms: &[(&str, &str)]) -> Self {
        ProviderSpec {
            namespace: ns.to_owned(),
            type_: ty.to_owned(),
            versions: versions.iter().map(|v| (*v).to_owned()).collect(),
            platforms: platforms
                .iter()
                .map(|(os, arch)| ((*os).to_owned(), (*arch).to_owned()))
                .collect(),
            with_dir_entries: ty == "dirs",
            payload_bytes: 0,
            extra_entries: Vec::new(),
            packages_extension: false,
        }
    }

    /// Download metadata carries the `packages` extension, as registry.opentofu.org sends it.
    pub fn with_packages_extension(mut self) -> Self {
        self.packages_extension = true;
        self
    }

    /// Adds an entry named `name` (a directory when `content` is `None`) to every archive.
    pub fn with_entry(mut self, name: &str, content: Option<Vec<u8>>) -> Self {
        self.extra_entries.push((name.to_owned(), content));
        self
    }

    /// Adds `bytes` of incompressible (but deterministic) data to every archive.
    pub fn with_payload(mut self, bytes: usize) -> Self {
        self.payload_bytes = bytes;
        self
    }

    /// Adds the `docs/` directory entry and `docs/README.md` to every archive.
    pub fn with_dir_entries(mut self) -> Self {
        self.with_dir_entries = true;
        self
    }
}

/// The kinds of request the fake registry distinguishes, for counters and faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// `/.well-known/terraform.json`
    Discovery,
    /// `/v1/providers/:ns/:type/versions`
    Versions,
    /// `/v1/providers/:ns/:type/:version/download/:os/:arch` (the metadata, not the zip)
    Download,
    /// `/files/.../terraform-provider-<type>_<version>_SHA256SUMS`
    Sums,
    /// `/files/.../terraform-provider-<type>_<version>_SHA256SUMS.sig`
    Signature,
    /// `/files/.../terraform-provider-<type>_<version>_<os>_<arch>.zip`
    Archive,
    /// `/v1/modules/:ns/:name/:system/versions`
    ModuleVersions,
    /// `/v1/modules/:ns/:name/:system/:version/download`
    ModuleDownload,
    /// `/modarchives/...` (module packages, hostile ones included)
    ModuleArchive,
    /// `/git/...` (any request to the git server)
    Git,
}

impl RequestKind {
    /// Every kind of the provider registry protocol (and discovery), in counter order.
    pub const ALL: [RequestKind; 6] = [
        RequestKind::Discovery,
        RequestKind::Versions,
        RequestKind::Download,
        RequestKind::Sums,
        RequestKind::Signature,
        RequestKind::Archive,
    ];

    /// Every kind of the module registry protocol and its packages.
    pub const MODULES: [RequestKind; 4] = [
        RequestKind::ModuleVersions,
        RequestKind::ModuleDownload,
        RequestKind::ModuleArchive,
        RequestKind::Git,
    ];

    /// Every kind, in counter order: [`ALL`](Self::ALL) then [`MODULES`](Self::MODULES).
    pub const EVERY: [RequestKind; 10] = [
        RequestKind::Discovery,
        RequestKind::Versions,
        RequestKind::Download,
        RequestKind::Sums,
        RequestKind::Signature,
        RequestKind::Archive,
        RequestKind::ModuleVersions,
        RequestKind::ModuleDownload,
        RequestKind::ModuleArchive,
        RequestKind::Git,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// A misbehaviour injected at runtime with [`FakeOrigin::set_fault`].
///
/// Setting a fault replaces an earlier one of the same variant (and, where it has one,
/// the same `kind`); faults of different variants or kinds stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The next `times` requests of `kind` answer `status` (with `Retry-After: <seconds>` when
    /// `retry_after` is set); later ones are answered normally.
    Flaky {
        /// Which requests fail.
        kind: RequestKind,
        /// The HTTP status to answer.
        status: u16,
        /// How many requests fail.
        times: u32,
        /// `Retry-After` seconds to send with the failures.
        retry_after: Option<u32>,
    },
    /// Every request of `kind` answers `status` with a small JSON error body.
    Status {
        /// Which requests fail.
        kind: RequestKind,
        /// The HTTP status to answer (an invalid code becomes 500).
        status: u16,
    },
    /// Archives are served with one byte flipped; the metadata `shasum` and SHA256SUMS
    /// still describe the real archive.
    TamperArchive,
    /// Archives are served with their last 10 bytes altered (the end of the file is the last
    /// thing a streaming mirror sees); the metadata and SHA256SUMS describe the real archive.
    TamperTail,
    /// The download metadata's `shasum` differs from the archive's SHA256SUMS line (which,
    /// like the archive, stays genuine).
    WrongShasum,
    /// Requests of `kind` sleep `millis` before being answered (faulted or not).
    Delay {
        /// Which requests are slowed down.
        kind: RequestKind,
        /// How long to sleep, in milliseconds.
        millis: u64,
    },
    /// Discovery answers this `providers.v1` value instead of `/v1/providers/`.
    ProvidersV1(&'static str),
    /// Download metadata names this `download_url` (absolute or relative).
    DownloadUrl(&'static str),
    /// Download metadata names this `shasums_url`.
    ShasumsUrl(&'static str),
    /// Requests of `kind` answer `302 Found` with this `Location`.
    Redirect {
        /// Which requests redirect.
        kind: RequestKind,
        /// The `Location` header.
        location: &'static str,
    },
    /// Requests of `kind` answer `302 Found` pointing at themselves.
    RedirectLoop {
        /// Which requests redirect.
        kind: RequestKind,
    },
    /// Requests of `kind` answer 200 with a body that never ends (no `Content-Length`).
    EndlessBody {
        /// Which requests stream forever.
        kind: RequestKind,
    },
    /// SHA256SUMS is signed by a second key that the download metadata does not list.
    SignedByUnlistedKey,
    /// SHA256SUMS gains an extra line after it was signed (its signature stays the original).
    AlteredSums,
    /// Download metadata lists no signing keys.
    NoSigningKeys,
    /// Download metadata answers with another package's genuine, signed file: that of
    /// `version` (a rollback) and/or of `platform` (a relabel) instead of the one asked for.
    /// The `os` and `arch` fields still name the platform asked for.
    DescribeAs {
        version: Option<&'static str>,
        platform: Option<(&'static str, &'static str)>,
    },
    /// Version lists (providers' and modules') leave out this version: a release the origin
    /// has not published yet. Clearing the fault publishes it.
    Unlisted(&'static str),
    /// The `packages` extension states every archive one byte larger than it is.
    WrongPackageSize,
    /// The `packages` extension lists another (well-formed) `h1:` for every archive.
    WrongReportedH1,
    /// Discovery answers this `modules.v1` value instead of `/v1/modules/` (only an origin
    /// serving modules lists `modules.v1` at all).
    ModulesV1(&'static str),
    /// Every module download answers this location (verbatim, in the module's
    /// [`DownloadAnswer`] form), e.g. `https://127.0.0.1:1/x.tar.gz`.
    ModuleLocation(&'static str),
    /// Every module download answers the location of this hostile package (built from the
    /// client's host, like genuine locations).
    HostileModule(HostileModule),
}

impl Fault {
    fn replaces(&self, other: &Fault) -> bool {
        match (self, other) {
            (Fault::Flaky { kind: a, .. }, Fault::Flaky { kind: b, .. }) => a == b,
            (Fault::Status { kind: a, .. }, Fault::Status { kind: b, .. })
            | (Fault::Delay { kind: a, .. }, Fault::Delay { kind: b, .. }) => a == b,
            (Fault::TamperArchive, Fault::TamperArchive)
            | (Fault::TamperTail, Fault::TamperTail)
            | (Fault::WrongShasum, Fault::WrongShasum) => true,
            (Fault::Redirect { kind: a, .. }, Fault::Redirect { kind: b, .. })
            | (Fault::RedirectLoop { kind: a }, Fault::RedirectLoop { kind: b })
            | (Fault::EndlessBody { kind: a }, Fault::EndlessBody { kind: b }) => a == b,
            (Fault::ProvidersV1(_), Fault::ProvidersV1(_))
            | (Fault::DownloadUrl(_), Fault::DownloadUrl(_))
            | (Fault::ShasumsUrl(_), Fault::ShasumsUrl(_))
            | (Fault::SignedByUnlistedKey, Fault::SignedByUnlistedKey)
            | (Fault::AlteredSums, Fault::AlteredSums)
            | (Fault::NoSigningKeys, Fault::NoSigningKeys)
            | (Fault::DescribeAs { .. }, Fault::DescribeAs { .. })
            | (Fault::WrongPackageSize, Fault::WrongPackageSize)
            | (Fault::WrongReportedH1, Fault::WrongReportedH1)
            | (Fault::ModulesV1(_), Fault::ModulesV1(_)) => true,
            // One location rule at a time: a hostile package replaces a given location.
            (
                Fault::ModuleLocation(_) | Fault::HostileModule(_),
                Fault::ModuleLocation(_) | Fault::HostileModule(_),
            ) => true,
            _ => false,
        }
    }
}

/// One request as the fake registry saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The request's kind, or `None` for a path the registry does not serve.
    pub kind: Option<RequestKind>,
    /// The HTTP method, e.g. `GET`.
    pub method: String,
    /// The path (without query).
    pub path: String,
    /// The host the client asked for: the URI authority (HTTP/2) or the `Host` header.
    pub host: Option<String>,
    /// The `User-Agent` header, if any.
    pub user_agent: Option<String>,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The names of every header, lowercase.
    pub header_names: Vec<String>,
}

/// A running fake origin registry; dropping it aborts the server and its connections.
pub struct FakeOrigin {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: Option<JoinHandle<()>>,
}

impl FakeOrigin {
    /// Starts on 127.0.0.1:0 with a leaf certificate from `ca` valid for `hostnames` plus
    /// "127.0.0.1" and "localhost".
    ///
    /// Builds every archive, SHA256SUMS document and signature up front (the first call
    /// in a test process also generates the OpenPGP key with `gpg`). Panics on failure.
    pub async fn start(
        ca: &TestCa,
        hostnames: &[&str],
        providers: Vec<ProviderSpec>,
    ) -> FakeOrigin {
        FakeOrigin::launch(ca, hostnames, providers, None).await
    }

    /// [`start`](Self::start) as the public registry
    /// ([`REGISTRY`](crate::support::provender::REGISTRY)) with one provider, `acme/foo`
    /// 1.0.0 for linux_amd64: the origin of tests about who may get it, not what it is.
    pub async fn acme_foo(ca: &TestCa) -> FakeOrigin {
        FakeOrigin::start(
            ca,
            &[crate::support::provender::REGISTRY],
            vec![ProviderSpec::new(
                "acme",
                "foo",
                &["1.0.0"],
                &[("linux", "amd64")],
            )],
        )
        .await
    }

    /// Like [`start`](Self::start), and also a module registry serving `modules` (which may
    /// be empty: discovery still lists `modules.v1`, and the hostile packages are served).
    ///
    /// Also builds every module package and creates the git repositories with the `git` CLI
    /// (a few milliseconds per version). Panics on failure.
    pub async fn start_with_modules(
        ca: &TestCa,
        hostnames: &[&str],
        providers: Vec<ProviderSpec>,
        modules: Vec<ModuleSpec>,
    ) -> FakeOrigin {
        FakeOrigin::launch(ca, hostnames, providers, Some(modules)).await
    }

    async fn launch(
        ca: &TestCa,
        hostnames: &[&str],
        providers: Vec<ProviderSpec>,
        modules: Option<Vec<ModuleSpec>>,
    ) -> FakeOrigin {
        let mut names: Vec<&str> = hostnames.to_vec();
        for extra in ["127.0.0.1", "localhost"] {
            if !names.contains(&extra) {
                names.push(extra);
            }
        }
        let tls = TlsAcceptor::from(ca.issue(&names).server_config());

        let (fixtures, git) = within(
            "building the fake origin's archives, signatures and repositories",
            tokio::task::spawn_blocking(move || {
                let mut fixtures = Fixtures::build(&providers);
                let git = modules.map(|modules| {
                    fixtures.modules = Some(ModuleFixtures::build(&modules));
                    GitRepos::create(&modules)
                });
                (fixtures, git)
            }),
        )
        .await
        .expect("fixture builder panicked");

        let listener = within("binding the fake origin", TcpListener::bind("127.0.0.1:0"))
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("listener address");
        let shared = Arc::new(Shared {
            fixtures,
            git,
            location_authority: Mutex::new(None),
            counts: Default::default(),
            archives_in_flight: Default::default(),
            archives_peak: Default::default(),
            git_flights: Default::default(),
            archive_gate: tokio::sync::watch::Sender::new(true),
            archives_at_gate: Default::default(),
            total: AtomicUsize::new(0),
            faults: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
        });
        let serving = Arc::clone(&shared);
        let server = super::serve_connections(listener, move |tcp| {
            serve_connection(tcp, tls.clone(), Arc::clone(&serving))
        });
        FakeOrigin {
            addr,
            shared,
            server: Some(server),
        }
    }

    /// The address the server listens on (127.0.0.1 and an ephemeral port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:PORT`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// `https://127.0.0.1:PORT/v1/providers/`: the `providers.v1` base URL, e.g. for a
    /// terraform CLI `host` block.
    pub fn providers_v1_url(&self) -> String {
        format!("{}/v1/providers/", self.base_url())
    }

    /// `https://127.0.0.1:PORT/v1/modules/`: the `modules.v1` base URL, e.g. for a terraform
    /// CLI `host` block.
    pub fn modules_v1_url(&self) -> String {
        format!("{}/v1/modules/", self.base_url())
    }

    /// How many requests of `kind` arrived since the start or the last
    /// [`reset_counts`](Self::reset_counts), faulted ones included.
    pub fn count(&self, kind: RequestKind) -> usize {
        self.shared.counts[kind.index()].load(Ordering::SeqCst)
    }

    /// The most archive requests this origin was answering at once (an injected
    /// [`Fault::Delay`] keeps each one open for its duration).
    pub fn archives_peak(&self) -> usize {
        self.shared.archives_peak.load(Ordering::SeqCst)
    }

    /// How many requests for this one archive arrived since the start or the last reset.
    pub fn downloads_of(&self, ns: &str, ty: &str, version: &str, os: &str, arch: &str) -> usize {
        let file = format!("/{}", self.filename(ns, ty, version, os, arch));
        lock(&self.shared.log)
            .iter()
            .filter(|r| r.kind == Some(RequestKind::Archive) && r.path.ends_with(&file))
            .count()
    }

    /// From now on, archive requests are counted and then wait, unanswered, until
    /// [`release_archives`](Self::release_archives): a test decides when a download starts.
    pub fn hold_archives(&self) {
        self.shared.archive_gate.send_replace(false);
    }

    /// Answers the archive requests held by [`hold_archives`](Self::hold_archives), and the
    /// later ones at once.
    pub fn release_archives(&self) {
        self.shared.archive_gate.send_replace(true);
    }

    /// How many archive requests are waiting for [`release_archives`](Self::release_archives).
    pub fn archives_held(&self) -> usize {
        self.shared.archives_at_gate.load(Ordering::SeqCst)
    }

    /// How many requests of any kind (unknown paths included) arrived.
    pub fn total_requests(&self) -> usize {
        self.shared.total.load(Ordering::SeqCst)
    }

    /// Every request since the start or the last reset, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.log).clone()
    }

    /// The most git requests that were in flight at once: in all, and for each host asked
    /// (without its port).
    pub fn git_peaks(&self) -> (usize, std::collections::HashMap<String, usize>) {
        let flights = lock(&self.shared.git_flights);
        (flights.peak, flights.peak_by_host.clone())
    }

    /// Adds a repository `name` (e.g. `big.git`) holding one commit on `main` with one file of
    /// `bytes` incompressible bytes (its pack cannot be smaller); returns the commit.
    pub fn git_big_repo(&self, name: &str, bytes: usize) -> String {
        self.git().big_repo(name, bytes)
    }

    /// Commits `files` on a new branch `branch` of the repository `repo` (e.g.
    /// `acme/terraform-aws-net.git`), on top of `main`; returns the commit.
    pub fn git_branch_commit(
        &self,
        repo: &str,
        branch: &str,
        files: &std::collections::BTreeMap<String, Vec<u8>>,
    ) -> String {
        self.git().branch_commit(repo, branch, files)
    }

    /// Deletes `branch` of `repo` and removes every object no reference reaches any more
    /// (`git gc --prune=now`), as an origin scrubbing a leaked secret does.
    pub fn git_scrub_branch(&self, repo: &str, branch: &str) {
        self.git().scrub_branch(repo, branch)
    }

    /// Zeroes every counter and empties the request log.
    pub fn reset_counts(&self) {
        let mut log = lock(&self.shared.log);
        for counter in &self.shared.counts {
            counter.store(0, Ordering::SeqCst);
        }
        self.shared.total.store(0, Ordering::SeqCst);
        self.shared.archives_peak.store(0, Ordering::SeqCst);
        log.clear();
    }

    /// The exact bytes served (without faults) for this archive. Panics if unknown.
    pub fn archive(&self, ns: &str, ty: &str, version: &str, os: &str, arch: &str) -> Vec<u8> {
        self.package(ns, ty, version, os, arch).archive.to_vec()
    }

    /// The archive's file name, `terraform-provider-<type>_<version>_<os>_<arch>.zip`.
    pub fn filename(&self, ns: &str, ty: &str, version: &str, os: &str, arch: &str) -> String {
        self.package(ns, ty, version, os, arch).filename.clone()
    }

    /// Lowercase hex SHA-256 of the archive (its `shasum`, and its `zh:` hash without
    /// the prefix). Panics if unknown.
    pub fn sha256_hex(&self, ns: &str, ty: &str, version: &str, os: &str, arch: &str) -> String {
        self.package(ns, ty, version, os, arch).sha256_hex.clone()
    }

    /// The archive's `h1:` hash as Go's `dirhash.HashZip` computes it: over every entry
    /// as stored, directory entries counting as empty files. Panics if unknown.
    pub fn h1_zip(&self, ns: &str, ty: &str, version: &str, os: &str, arch: &str) -> String {
        self.package(ns, ty, version, os, arch).h1_zip.clone()
    }

    /// The `h1:` hash of the archive once extracted (`dirhash.HashDir`: regular files
    /// only). Equal to [`h1_zip`](Self::h1_zip) unless the spec has directory entries.
    pub fn h1_dir(&self, ns: &str, ty: &str, version: &str, os: &str, arch: &str) -> String {
        self.package(ns, ty, version, os, arch).h1_dir.clone()
    }

    /// The SHA256SUMS document served for `ns/ty` `version`. Panics if unknown.
    pub fn shasums(&self, ns: &str, ty: &str, version: &str) -> Vec<u8> {
        self.release(ns, ty, version).sums.to_vec()
    }

    /// The binary detached signature served for the SHA256SUMS document.
    pub fn shasums_signature(&self, ns: &str, ty: &str, version: &str) -> Vec<u8> {
        self.release(ns, ty, version).signature.to_vec()
    }

    /// The signing key's long ID, 16 uppercase hex digits (as in `signing_keys`).
    pub fn key_id(&self) -> &'static str {
        &gpg::signing_key().key_id
    }

    /// The signing key's ASCII-armored public key (as in `signing_keys`).
    pub fn public_key_armor(&self) -> &'static str {
        &gpg::signing_key().public_armor
    }

    /// The spec of module `ns/name/system`. Panics if unknown.
    pub fn module_spec(&self, ns: &str, name: &str, system: &str) -> &ModuleSpec {
        self.modules()
            .spec(ns, name, system)
            .unwrap_or_else(|| panic!("fake origin serves no module {ns}/{name}/{system}"))
    }

    /// The exact `.tar.gz` bytes served for this module version (at
    /// [`module_archive_url`](Self::module_archive_url); for a git-sourced module the same
    /// package, served there although the download answer names the repository). Panics if
    /// unknown.
    pub fn module_archive(&self, ns: &str, name: &str, system: &str, version: &str) -> Vec<u8> {
        self.modules()
            .archive(ns, name, system, version)
            .unwrap_or_else(|| {
                panic!("fake origin serves no module {ns}/{name}/{system} {version}")
            })
            .to_vec()
    }

    /// The module's own files for `version`, path → content: what ends up in the module's
    /// directory once the location's `//subdir` (if any) is applied; `VERSION` included.
    /// [`move_tag`](Self::move_tag) does not change them.
    pub fn module_files(
        &self,
        ns: &str,
        name: &str,
        system: &str,
        version: &str,
    ) -> BTreeMap<String, Vec<u8>> {
        self.module_version(ns, name, system, version)
            .module_files(version)
    }

    /// Every file of the package for `version`, path → content, relative to the package root
    /// (a GitHub-style top-level directory removed): differs from
    /// [`module_files`](Self::module_files) only for a source with a subdirectory.
    pub fn module_package_files(
        &self,
        ns: &str,
        name: &str,
        system: &str,
        version: &str,
    ) -> BTreeMap<String, Vec<u8>> {
        self.module_version(ns, name, system, version)
            .package_files(version)
    }

    /// The `X-Terraform-Get` value the download endpoint answers for this version when the
    /// client named `authority` (`host[:port]`, e.g. `registry.terraform.io` or
    /// `127.0.0.1:PORT`) and no fault or [`set_location_authority`](Self::set_location_authority)
    /// applies.
    pub fn module_location(
        &self,
        ns: &str,
        name: &str,
        system: &str,
        version: &str,
        authority: &str,
    ) -> String {
        self.module_version(ns, name, system, version)
            .location(version, authority)
    }

    /// `https://127.0.0.1:PORT/modarchives/...`: where this version's archive is served.
    pub fn module_archive_url(&self, ns: &str, name: &str, system: &str, version: &str) -> String {
        let spec = self.module_version(ns, name, system, version);
        format!("{}{}", self.base_url(), spec.archive_path(version))
    }

    /// `https://127.0.0.1:PORT/git/<ns>/terraform-<system>-<name>.git`: the module's
    /// repository.
    pub fn module_git_url(&self, ns: &str, name: &str, system: &str) -> String {
        let spec = self.module_spec(ns, name, system);
        format!("{}/git/{}", self.base_url(), spec.git_repo())
    }

    /// The commit the module's tag `v<version>` points at now (40 hex digits). Panics if
    /// unknown.
    pub fn git_commit(&self, ns: &str, name: &str, system: &str, version: &str) -> String {
        self.git()
            .commit(ns, name, system, version)
            .unwrap_or_else(|| panic!("fake origin has no tag for {ns}/{name}/{system} {version}"))
    }

    /// Commits exactly `files` (path → content, relative to the package root) on top of the
    /// repository's `main` and force-moves the tag `v<version>` there, like an origin that
    /// re-tags a release; returns the new commit. Only the git repository changes: archives,
    /// [`module_files`](Self::module_files) and [`module_archive`](Self::module_archive) keep
    /// the original content. Runs the `git` CLI (blocking, a few milliseconds).
    pub fn move_tag(
        &self,
        ns: &str,
        name: &str,
        system: &str,
        version: &str,
        files: &[(&str, &[u8])],
    ) -> String {
        let spec = self.module_version(ns, name, system, version);
        let files = files
            .iter()
            .map(|(path, content)| ((*path).to_owned(), content.to_vec()))
            .collect();
        self.git().move_tag(spec, version, &files)
    }

    /// The bytes served at `hostile`'s path. Panics for [`HostileModule::RedirectLoop`] and
    /// [`HostileModule::EndlessGit`], which have none.
    pub fn hostile_archive(&self, hostile: HostileModule) -> Vec<u8> {
        self.modules()
            .hostile
            .get(hostile.path())
            .unwrap_or_else(|| panic!("{hostile:?} has no archive"))
            .to_vec()
    }

    /// How many bytes the endless git repository's upload-pack answers have sent so far.
    pub fn endless_git_bytes_sent(&self) -> u64 {
        self.git().endless_sent.load(Ordering::Relaxed)
    }

    /// Makes absolute module locations (archives and git URLs) name `authority` (e.g.
    /// `registry.terraform.io:PORT`) instead of the host each request named; `None` restores
    /// the default.
    pub fn set_location_authority(&self, authority: Option<&str>) {
        *lock(&self.shared.location_authority) = authority.map(str::to_owned);
    }

    /// Adds `fault`, replacing an earlier fault of the same variant and kind.
    pub fn set_fault(&self, fault: Fault) {
        let mut faults = lock(&self.shared.faults);
        faults.retain(|old| !fault.replaces(old));
        faults.push(fault);
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// Stops accepting and aborts every open connection.
    pub async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
            // An aborted task yields a cancellation error; that is the expected outcome.
            let _ = within("stopping the fake origin", server).await;
        }
    }

    fn modules(&self) -> &ModuleFixtures {
        self.shared
            .fixtures
            .modules
            .as_ref()
            .expect("this fake origin was started without modules (use start_with_modules)")
    }

    fn git(&self) -> &GitRepos {
        self.shared
            .git
            .as_ref()
            .expect("this fake origin was started without modules (use start_with_modules)")
    }

    /// The spec of a module that has `version`. Panics if unknown.
    fn module_version(&self, ns: &str, name: &str, system: &str, version: &str) -> &ModuleSpec {
        let spec = self.module_spec(ns, name, system);
        assert!(
            spec.versions.iter().any(|v| v == version),
            "fake origin serves no module {ns}/{name}/{system} {version}"
        );
        spec
    }

    fn release(&self, ns: &str, ty: &str, version: &str) -> &Release {
        self.shared
            .fixtures
            .release(ns, ty, version)
            .unwrap_or_else(|| panic!("fake origin serves no {ns}/{ty} {version}"))
    }

    fn package(&self, ns: &str, ty: &str, version: &str, os: &str, arch: &str) -> &Package {
        self.release(ns, ty, version)
            .packages
            .get(&(os.to_owned(), arch.to_owned()))
            .unwrap_or_else(|| panic!("fake origin serves no {ns}/{ty} {version} for {os}_{arch}"))
    }
}

impl Drop for FakeOrigin {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

/// Locks a mutex, ignoring poisoning: a panicking test must not take the server down.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// State shared by the handle and the server task.
struct Shared {
    fixtures: Fixtures,
    /// The git server, when the origin serves modules.
    git: Option<GitRepos>,
    /// See [`FakeOrigin::set_location_authority`].
    location_authority: Mutex<Option<String>>,
    counts: [AtomicUsize; RequestKind::EVERY.len()],
    total: AtomicUsize,
    /// Archive requests being answered now, and the most there ever were at once.
    archives_in_flight: AtomicUsize,
    archives_peak: AtomicUsize,
    /// Git requests being answered now, and the most there ever were at once: in all, and
    /// per host asked.
    git_flights: Mutex<GitFlights>,
    /// Open (`true`) unless [`FakeOrigin::hold_archives`] holds archive requests.
    archive_gate: tokio::sync::watch::Sender<bool>,
    /// Archive requests waiting at the closed gate.
    archives_at_gate: AtomicUsize,
    faults: Mutex<Vec<Fault>>,
    log: Mutex<Vec<RecordedRequest>>,
}

impl Shared {
    /// Consumes one failure of a [`Fault::Flaky`] for `kind`, if any is left.
    fn take_flaky(&self, kind: RequestKind) -> Option<(u16, Option<u32>)> {
        let mut faults = lock(&self.faults);
        for fault in faults.iter_mut() {
            if let Fault::Flaky {
                kind: k,
                status,
                times,
                retry_after,
            } = fault
                && *k == kind
                && *times > 0
            {
                *times -= 1;
                return Some((*status, *retry_after));
            }
        }
        None
    }

    fn record(&self, kind: Option<RequestKind>, req: &Request<Incoming>) {
        let header = |name| {
            req.headers()
                .get(name)
                .and_then(|value: &HeaderValue| value.to_str().ok())
                .map(str::to_owned)
        };
        let entry = RecordedRequest {
            kind,
            method: req.method().to_string(),
            path: req.uri().path().to_owned(),
            host: req
                .uri()
                .authority()
                .map(|authority| authority.to_string())
                .or_else(|| header(HOST)),
            user_agent: header(USER_AGENT),
            authorization: header(AUTHORIZATION),
            header_names: req
                .headers()
                .keys()
                .map(|k| k.as_str().to_owned())
                .collect(),
        };
        let mut log = lock(&self.log);
        self.total.fetch_add(1, Ordering::SeqCst);
        if let Some(kind) = kind {
            self.counts[kind.index()].fetch_add(1, Ordering::SeqCst);
        }
        log.push(entry);
    }

    fn faults(&self) -> Vec<Fault> {
        lock(&self.faults).clone()
    }

    /// Waits while [`FakeOrigin::hold_archives`] holds archive requests.
    async fn pass_archive_gate(&self) {
        let mut gate = self.archive_gate.subscribe();
        if *gate.borrow_and_update() {
            return;
        }
        self.archives_at_gate.fetch_add(1, Ordering::SeqCst);
        let _ = gate.wait_for(|open| *open).await;
        self.archives_at_gate.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether an [`Fault::EndlessBody`] applies to this request.
    fn endless(&self, req: &Request<Incoming>) -> bool {
        let kind = Route::parse(req.uri().path()).kind();
        lock(&self.faults)
            .iter()
            .any(|f| matches!(f, Fault::EndlessBody { kind: k } if Some(*k) == kind))
    }
}

// ---------------------------------------------------------------------------------------
// Fixtures: archives, SHA256SUMS and signatures, built once per FakeOrigin.
// ---------------------------------------------------------------------------------------

/// Everything the registry serves, keyed by `(namespace, type)` then version.
struct Fixtures {
    providers: BTreeMap<(String, String), BTreeMap<String, Release>>,
    /// Version order and platforms per provider, for the versions listing.
    specs: BTreeMap<(String, String), ProviderSpec>,
    /// The module registry's packages, when the origin serves modules.
    modules: Option<ModuleFixtures>,
}

/// One provider version: its packages and the signed SHA256SUMS over them.
struct Release {
    sums_filename: String,
    sums: Bytes,
    signature: Bytes,
    packages: BTreeMap<(String, String), Package>,
}

/// One platform's zip archive and its hashes.
struct Package {
    filename: String,
    archive: Bytes,
    sha256_hex: String,
    h1_zip: String,
    h1_dir: String,
}

/// One zip entry: a directory when `content` is `None`.
struct Entry {
    name: String,
    mode: u32,
    content: Option<Vec<u8>>,
}

impl Fixtures {
    fn build(specs: &[ProviderSpec]) -> Fixtures {
        let mut providers = BTreeMap::new();
        let mut unsigned = Vec::new();
        for spec in specs {
            let key = (spec.namespace.clone(), spec.type_.clone());
            let mut releases = BTreeMap::new();
            for version in &spec.versions {
                let release = build_release(spec, version);
                unsigned.push((key.clone(), version.clone(), release.sums.clone()));
                releases.insert(version.clone(), release);
            }
            providers.insert(key, releases);
        }

        let documents: Vec<&[u8]> = unsigned.iter().map(|(_, _, sums)| &sums[..]).collect();
        let signatures = gpg::sign_detached(&documents);
        for ((key, version, _), signature) in unsigned.iter().zip(signatures) {
            let release = providers
                .get_mut(key)
                .and_then(|releases| releases.get_mut(version))
                .expect("release built above");
            release.signature = Bytes::from(signature);
        }

        let specs = specs
            .iter()
            .map(|spec| ((spec.namespace.clone(), spec.type_.clone()), spec.clone()))
            .collect();
        Fixtures {
            providers,
            specs,
            modules: None,
        }
    }

    fn release(&self, ns: &str, ty: &str, version: &str) -> Option<&Release> {
        self.providers
            .get(&(ns.to_owned(), ty.to_owned()))?
            .get(version)
    }
}

/// Builds every platform's archive for one version and its (not yet signed) SHA256SUMS.
fn build_release(spec: &ProviderSpec, version: &str) -> Release {
    let ty = &spec.type_;
    let mut packages = BTreeMap::new();
    for (os, arch) in &spec.platforms {
        let entries = archive_entries(spec, version, os, arch);
        let archive = Bytes::from(build_zip(&entries));
        let package = Package {
            filename: format!("terraform-provider-{ty}_{version}_{os}_{arch}.zip"),
            sha256_hex: hex::encode(Sha256::digest(&archive)),
            h1_zip: h1(entries.iter()),
            h1_dir: h1(entries.iter().filter(|entry| entry.content.is_some())),
            archive,
        };
        packages.insert((os.clone(), arch.clone()), package);
    }

    // goreleaser's format: `<hex>  <filename>` lines sorted by file name.
    let mut listed: Vec<&Package> = packages.values().collect();
    listed.sort_by(|a, b| a.filename.cmp(&b.filename));
    let sums: String = listed
        .iter()
        .map(|package| format!("{}  {}\n", package.sha256_hex, package.filename))
        .collect();
    Release {
        sums_filename: format!("terraform-provider-{ty}_{version}_SHA256SUMS"),
        sums: Bytes::from(sums),
        signature: Bytes::new(),
        packages,
    }
}

/// The entries of one archive: the executable "plugin" (a shell script naming what it is,
/// so every archive differs) and, optionally, a `docs/` directory entry with a README.
fn archive_entries(spec: &ProviderSpec, version: &str, os: &str, arch: &str) -> Vec<Entry> {
    let (ns, ty) = (&spec.namespace, &spec.type_);
    let script = format!(
        "#!/bin/sh\n\
         # Fake provider plugin served by provender's test origin; not a real plugin.\n\
         echo 'terraform-provider-{ty} {version} ({ns}/{ty}, {os}_{arch}) is a test fixture' >&2\n\
         exit 1\n"
    );
    let mut entries = vec![Entry {
        name: format!("terraform-provider-{ty}_v{version}"),
        mode: 0o755,
        content: Some(script.into_bytes()),
    }];
    if spec.payload_bytes > 0 {
        // xorshift64: cheap, deterministic, incompressible enough for deflate.
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15
            ^ (version.len() as u64)
            ^ ((os.len() as u64) << 8)
            ^ ((arch.len() as u64) << 16);
        let mut data = Vec::with_capacity(spec.payload_bytes + 8);
        while data.len() < spec.payload_bytes {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            data.extend_from_slice(&state.to_le_bytes());
        }
        data.truncate(spec.payload_bytes);
        entries.push(Entry {
            name: "payload.bin".to_owned(),
            mode: 0o644,
            content: Some(data),
        });
    }
    for (name, content) in &spec.extra_entries {
        entries.push(Entry {
            name: name.clone(),
            mode: 0o644,
            content: content.clone(),
        });
    }
    if spec.with_dir_entries {
        entries.push(Entry {
            name: "docs/".to_owned(),
            mode: 0o755,
            content: None,
        });
        entries.push(Entry {
            name: "docs/README.md".to_owned(),
            mode: 0o644,
            content: Some(
                format!("# {ns}/{ty} {version}\n\nBuilt for {os}_{arch}.\n").into_bytes(),
            ),
        });
    }
    entries
}

/// Writes `entries` into a zip with fixed timestamps, so the bytes never change.
fn build_zip(entries: &[Entry]) -> Vec<u8> {
    let timestamp = DateTime::from_date_and_time(2024, 1, 2, 3, 4, 6).expect("valid zip timestamp");
    let base = SimpleFileOptions::default()
        .last_modified_time(timestamp)
        .system(System::Unix);
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    for entry in entries {
        let options = base.unix_permissions(entry.mode);
        match &entry.content {
            None => zip.add_directory(entry.name.as_str(), options),
            Some(content) => zip
                .start_file(entry.name.as_str(), options)
                .and_then(|()| zip.write_all(content).map_err(Into::into)),
        }
        .unwrap_or_else(|err| panic!("write zip entry {}: {err}", entry.name));
    }
    zip.finish().expect("finish zip").into_inner()
}

/// Terraform's `h1:` hash (Go's `dirhash.Hash1`) over `entries`, directories as empty files.
fn h1<'a>(entries: impl Iterator<Item = &'a Entry>) -> String {
    let mut lines: Vec<(String, String)> = entries
        .map(|entry| {
            let content = entry.content.as_deref().unwrap_or_default();
            (entry.name.clone(), hex::encode(Sha256::digest(content)))
        })
        .collect();
    lines.sort();
    let mut summary = Sha256::new();
    for (name, digest) in &lines {
        summary.update(format!("{digest}  {name}\n"));
    }
    format!(
        "h1:{}",
        base64::engine::general_purpose::STANDARD.encode(summary.finalize())
    )
}

// ---------------------------------------------------------------------------------------
// The server: TLS accept loop, routing, faults.
// ---------------------------------------------------------------------------------------

/// Serves HTTP/1.1 or h2 (whichever the client speaks) on one TLS connection.
async fn serve_connection(tcp: TcpStream, tls: TlsAcceptor, shared: Arc<Shared>) {
    let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(tcp)).await else {
        return;
    };
    let service = service_fn(move |req| {
        let shared = Arc::clone(&shared);
        async move {
            let endless = shared.endless(&req);
            let response = handle(&shared, req).await;
            Ok::<_, Infallible>(if endless {
                endless_response(response)
            } else {
                response
            })
        }
    });
    // Connection errors (resets, bad input) only end this connection.
    let _ = auto::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// A request path, parsed.
enum Route {
    Discovery,
    Versions {
        ns: String,
        ty: String,
    },
    Download {
        ns: String,
        ty: String,
        version: String,
        os: String,
        arch: String,
    },
    File {
        kind: RequestKind,
        ns: String,
        ty: String,
        version: String,
        name: String,
    },
    ModuleVersions {
        ns: String,
        name: String,
        system: String,
    },
    ModuleDownload {
        ns: String,
        name: String,
        system: String,
        version: String,
    },
    /// A path under `/modarchives/` (the query is not part of it).
    ModuleArchive {
        path: String,
    },
    /// A path under `/git/`: `path_info` is what follows `/git`.
    Git {
        path_info: String,
    },
    Unknown,
}

impl Route {
    fn parse(path: &str) -> Route {
        if path == "/.well-known/terraform.json" {
            return Route::Discovery;
        }
        // Segments must match the specs exactly (terraform sends lowercase names).
        let owned = |s: &str| s.to_owned();
        if let Some(rest) = path.strip_prefix("/v1/providers/") {
            let parts: Vec<&str> = rest.split('/').collect();
            return match parts[..] {
                [ns, ty, "versions"] => Route::Versions {
                    ns: owned(ns),
                    ty: owned(ty),
                },
                [ns, ty, version, "download", os, arch] => Route::Download {
                    ns: owned(ns),
                    ty: owned(ty),
                    version: owned(version),
                    os: owned(os),
                    arch: owned(arch),
                },
                _ => Route::Unknown,
            };
        }
        if let Some(rest) = path.strip_prefix("/v1/modules/") {
            let parts: Vec<&str> = rest.split('/').collect();
            return match parts[..] {
                [ns, name, system, "versions"] => Route::ModuleVersions {
                    ns: owned(ns),
                    name: owned(name),
                    system: owned(system),
                },
                [ns, name, system, version, "download"] => Route::ModuleDownload {
                    ns: owned(ns),
                    name: owned(name),
                    system: owned(system),
                    version: owned(version),
                },
                _ => Route::Unknown,
            };
        }
        if path.starts_with("/modarchives/") {
            return Route::ModuleArchive { path: owned(path) };
        }
        if let Some(path_info) = path.strip_prefix("/git/") {
            return Route::Git {
                path_info: format!("/{path_info}"),
            };
        }
        if let Some(rest) = path.strip_prefix("/files/") {
            let parts: Vec<&str> = rest.split('/').collect();
            if let [ns, ty, version, name] = parts[..] {
                let kind = if name.ends_with("_SHA256SUMS.sig") {
                    RequestKind::Signature
                } else if name.ends_with("_SHA256SUMS") {
                    RequestKind::Sums
                } else if name.ends_with(".zip") {
                    RequestKind::Archive
                } else {
                    return Route::Unknown;
                };
                return Route::File {
                    kind,
                    ns: owned(ns),
                    ty: owned(ty),
                    version: owned(version),
                    name: owned(name),
                };
            }
        }
        Route::Unknown
    }

    fn kind(&self) -> Option<RequestKind> {
        match self {
            Route::Discovery => Some(RequestKind::Discovery),
            Route::Versions { .. } => Some(RequestKind::Versions),
            Route::Download { .. } => Some(RequestKind::Download),
            Route::File { kind, .. } => Some(*kind),
            Route::ModuleVersions { .. } => Some(RequestKind::ModuleVersions),
            Route::ModuleDownload { .. } => Some(RequestKind::ModuleDownload),
            Route::ModuleArchive { .. } => Some(RequestKind::ModuleArchive),
            Route::Git { .. } => Some(RequestKind::Git),
            Route::Unknown => None,
        }
    }
}

/// Counts and logs the request, applies faults, then answers it.
async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<OriginBody> {
    let route = Route::parse(req.uri().path());
    let kind = route.kind();
    shared.record(kind, &req);
    let _in_flight = (kind == Some(RequestKind::Archive)).then(|| ArchiveInFlight::enter(shared));
    let _git_in_flight =
        (kind == Some(RequestKind::Git)).then(|| GitInFlight::enter(shared, request_host(&req)));
    if kind == Some(RequestKind::Archive) {
        shared.pass_archive_gate().await;
    }

    let faults = shared.faults();
    if let Some(kind) = kind
        && let Some(response) = injected(shared, &faults, kind, &req).await
    {
        return response.map(BodyExt::boxed);
    }

    if let Route::Git { path_info } = route {
        return match &shared.git {
            Some(git) => git.serve(req, path_info).await,
            None => not_found().map(BodyExt::boxed),
        };
    }

    let is_head = req.method() == Method::HEAD;
    if req.method() != Method::GET && !is_head {
        return json_response(
            StatusCode::METHOD_NOT_ALLOWED,
            &json!({ "errors": ["Method Not Allowed"] }),
        )
        .map(BodyExt::boxed);
    }
    let authority = lock(&shared.location_authority)
        .clone()
        .unwrap_or_else(|| request_host(&req));
    let response = answer(&shared.fixtures, &faults, route, &authority);
    if is_head {
        // Same headers (Content-Length included), no body.
        let (parts, _) = response.into_parts();
        return Response::from_parts(parts, Full::new(Bytes::new()).boxed());
    }
    response.map(BodyExt::boxed)
}

/// Counts an archive request as in flight while it lives (through any injected delay).
struct ArchiveInFlight<'a>(&'a Shared);

impl<'a> ArchiveInFlight<'a> {
    fn enter(shared: &'a Shared) -> Self {
        let now = shared.archives_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.archives_peak.fetch_max(now, Ordering::SeqCst);
        ArchiveInFlight(shared)
    }
}

impl Drop for ArchiveInFlight<'_> {
    fn drop(&mut self) {
        self.0.archives_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Git requests in flight and their peaks, in all and per host.
#[derive(Default)]
struct GitFlights {
    now: usize,
    peak: usize,
    now_by_host: std::collections::HashMap<String, usize>,
    peak_by_host: std::collections::HashMap<String, usize>,
}

/// Counts a git request as in flight while it lives (through any injected delay).
struct GitInFlight<'a>(&'a Shared, String);

impl<'a> GitInFlight<'a> {
    fn enter(shared: &'a Shared, host: String) -> Self {
        let host = host.split(':').next().unwrap_or_default().to_owned();
        let mut flights = lock(&shared.git_flights);
        flights.now += 1;
        flights.peak = flights.peak.max(flights.now);
        let now = {
            let n = flights.now_by_host.entry(host.clone()).or_default();
            *n += 1;
            *n
        };
        let peak = flights.peak_by_host.entry(host.clone()).or_default();
        *peak = (*peak).max(now);
        drop(flights);
        GitInFlight(shared, host)
    }
}

impl Drop for GitInFlight<'_> {
    fn drop(&mut self) {
        let mut flights = lock(&self.0.git_flights);
        flights.now -= 1;
        if let Some(n) = flights.now_by_host.get_mut(&self.1) {
            *n -= 1;
        }
    }
}

/// The answer a fault injects for a request of `kind` (delays apply first), if any.
async fn injected(
    shared: &Shared,
    faults: &[Fault],
    kind: RequestKind,
    req: &Request<Incoming>,
) -> Option<Response<Full<Bytes>>> {
    for fault in faults {
        if let Fault::Delay { kind: k, millis } = *fault
            && k == kind
        {
            tokio::time::sleep(Duration::from_millis(millis)).await;
        }
    }
    if let Some((status, retry_after)) = shared.take_flaky(kind) {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        let message = format!("injected flaky fault: {kind:?} answers {}", status.as_u16());
        let mut response = json_response(status, &json!({ "errors": [message] }));
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from(secs));
        }
        return Some(response);
    }
    for fault in faults {
        if let Fault::Status { kind: k, status } = *fault
            && k == kind
        {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let message = format!("injected fault: {kind:?} answers {}", status.as_u16());
            return Some(json_response(status, &json!({ "errors": [message] })));
        }
    }
    for fault in faults {
        match *fault {
            // A redirect to another https host is not redirected again there.
            Fault::Redirect { kind: k, location }
                if k == kind
                    && !location.starts_with(&format!("https://{}/", request_host(req))) =>
            {
                return Some(redirect(location));
            }
            Fault::RedirectLoop { kind: k } if k == kind => {
                return Some(redirect(req.uri().path()));
            }
            _ => {}
        }
    }
    None
}

/// The registry proper: the response for `route` with `faults` applied to the content;
/// absolute module locations name `authority`.
fn answer(
    fixtures: &Fixtures,
    faults: &[Fault],
    route: Route,
    authority: &str,
) -> Response<Full<Bytes>> {
    match route {
        Route::Discovery => {
            let base = faults
                .iter()
                .find_map(|f| match f {
                    Fault::ProvidersV1(url) => Some(*url),
                    _ => None,
                })
                .unwrap_or("/v1/providers/");
            let mut services = json!({ "providers.v1": base });
            if fixtures.modules.is_some() {
                services["modules.v1"] = json!(
                    faults
                        .iter()
                        .find_map(|f| match f {
                            Fault::ModulesV1(url) => Some(*url),
                            _ => None,
                        })
                        .unwrap_or("/v1/modules/")
                );
            }
            json_response(StatusCode::OK, &services)
        }
        Route::ModuleVersions { ns, name, system } => {
            match fixtures
                .modules
                .as_ref()
                .and_then(|modules| modules.spec(&ns, &name, &system))
            {
                Some(spec) => {
                    let versions: Vec<_> = spec
                        .versions
                        .iter()
                        .filter(|v| !unlisted(faults, v))
                        .map(|version| json!({ "version": version }))
                        .collect();
                    json_response(
                        StatusCode::OK,
                        &json!({ "modules": [{ "versions": versions }] }),
                    )
                }
                None => not_found(),
            }
        }
        Route::ModuleDownload {
            ns,
            name,
            system,
            version,
        } => {
            let Some(spec) = fixtures
                .modules
                .as_ref()
                .and_then(|modules| modules.spec(&ns, &name, &system))
                .filter(|spec| spec.versions.contains(&version))
            else {
                return not_found();
            };
            let location = faults
                .iter()
                .find_map(|fault| match fault {
                    Fault::ModuleLocation(location) => Some((*location).to_owned()),
                    Fault::HostileModule(hostile) => Some(hostile.location(authority)),
                    _ => None,
                })
                .unwrap_or_else(|| spec.location(&version, authority));
            module_download_response(spec.answer, &location)
        }
        Route::ModuleArchive { path } => {
            let Some(modules) = &fixtures.modules else {
                return not_found();
            };
            if path == HostileModule::RedirectLoop.path() {
                return redirect(&path);
            }
            if let Some(archive) = modules.hostile.get(path.as_str()) {
                return bytes_response("application/gzip", archive.clone());
            }
            match modules.paths.get(&path) {
                Some((ns, name, system, version)) => {
                    let archive = modules
                        .archive(ns, name, system, version)
                        .expect("every archive path has an archive");
                    // GitHub's tarball endpoint answers this type.
                    let content_type = if path.contains("/tarball/") {
                        "application/x-gzip"
                    } else {
                        "application/gzip"
                    };
                    bytes_response(content_type, archive.clone())
                }
                None => not_found(),
            }
        }
        // Served by the git server before `answer` is reached.
        Route::Git { .. } => not_found(),
        Route::Versions { ns, ty } => match fixtures.specs.get(&(ns, ty)) {
            Some(spec) => json_response(StatusCode::OK, &versions_json(spec, faults)),
            None => not_found(),
        },
        Route::Download {
            ns,
            ty,
            version,
            os,
            arch,
        } => {
            if fixtures.release(&ns, &ty, &version).is_none() {
                return not_found();
            }
            let (mut version, mut platform) = (version.clone(), (os.clone(), arch.clone()));
            for fault in faults {
                if let Fault::DescribeAs {
                    version: v,
                    platform: p,
                } = fault
                {
                    version = v.map_or(version, str::to_string);
                    platform = p.map_or(platform, |(o, a)| (o.to_string(), a.to_string()));
                }
            }
            let Some(release) = fixtures.release(&ns, &ty, &version) else {
                return not_found();
            };
            let Some(package) = release.packages.get(&platform) else {
                return not_found();
            };
            let mut shasum = package.sha256_hex.clone();
            if faults.contains(&Fault::WrongShasum) {
                shasum = corrupt_hex(&shasum);
            }
            let files = format!("/files/{ns}/{ty}/{version}");
            let key = gpg::signing_key();
            let mut body = json!({
                "protocols": PROTOCOLS,
                "os": os,
                "arch": arch,
                "filename": package.filename,
                "download_url": format!("{files}/{}", package.filename),
                "shasums_url": format!("{files}/{}", release.sums_filename),
                "shasums_signature_url": format!("{files}/{}.sig", release.sums_filename),
                "shasum": shasum,
                "signing_keys": {
                    "gpg_public_keys": [{
                        "key_id": key.key_id,
                        "ascii_armor": key.public_armor,
                        "trust_signature": "",
                        "source": "Test",
                        "source_url": null,
                    }],
                },
            });
            if fixtures.specs[&(ns.clone(), ty.clone())].packages_extension {
                let extension: serde_json::Map<String, serde_json::Value> = release
                    .packages
                    .iter()
                    .map(|((os, arch), p)| {
                        let mut size = p.archive.len() as u64;
                        if faults.contains(&Fault::WrongPackageSize) {
                            size += 1;
                        }
                        let h1 = if faults.contains(&Fault::WrongReportedH1) {
                            format!(
                                "h1:{}",
                                base64::engine::general_purpose::STANDARD.encode([7u8; 32])
                            )
                        } else {
                            p.h1_zip.clone()
                        };
                        let hashes = json!([format!("zh:{}", p.sha256_hex), h1]);
                        (
                            format!("{os}_{arch}"),
                            json!({ "hashes": hashes, "package_size": size }),
                        )
                    })
                    .collect();
                body["packages"] = serde_json::Value::Object(extension);
            }
            for fault in faults {
                match fault {
                    Fault::DownloadUrl(url) => body["download_url"] = json!(url),
                    Fault::ShasumsUrl(url) => body["shasums_url"] = json!(url),
                    Fault::NoSigningKeys => {
                        body["signing_keys"] = json!({ "gpg_public_keys": [] });
                    }
                    _ => {}
                }
            }
            json_response(StatusCode::OK, &body)
        }
        Route::File {
            kind,
            ns,
            ty,
            version,
            name,
        } => {
            let Some(release) = fixtures.release(&ns, &ty, &version) else {
                return not_found();
            };
            match kind {
                RequestKind::Sums if name == release.sums_filename => {
                    let mut sums = release.sums.to_vec();
                    if faults.contains(&Fault::AlteredSums) {
                        sums.extend_from_slice(
                            format!("{}  terraform-provider-evil.zip\n", "e".repeat(64)).as_bytes(),
                        );
                    }
                    bytes_response("text/plain; charset=utf-8", Bytes::from(sums))
                }
                RequestKind::Signature if name == format!("{}.sig", release.sums_filename) => {
                    let signature = if faults.contains(&Fault::SignedByUnlistedKey) {
                        Bytes::from(
                            gpg::sign_detached_by(gpg::unlisted_key(), &[&release.sums]).remove(0),
                        )
                    } else {
                        release.signature.clone()
                    };
                    bytes_response("application/octet-stream", signature)
                }
                RequestKind::Archive => {
                    match release
                        .packages
                        .values()
                        .find(|package| package.filename == name)
                    {
                        Some(package) if faults.contains(&Fault::TamperArchive) => {
                            let mut tampered = package.archive.to_vec();
                            let middle = tampered.len() / 2;
                            tampered[middle] ^= 0x01;
                            bytes_response("application/zip", Bytes::from(tampered))
                        }
                        Some(package) if faults.contains(&Fault::TamperTail) => {
                            let mut tampered = package.archive.to_vec();
                            let end = tampered.len();
                            for b in &mut tampered[end - 10..] {
                                *b ^= 0x5a;
                            }
                            bytes_response("application/zip", Bytes::from(tampered))
                        }
                        Some(package) => bytes_response("application/zip", package.archive.clone()),
                        None => not_found(),
                    }
                }
                _ => not_found(),
            }
        }
        Route::Unknown => not_found(),
    }
}

/// The `versions` listing: every version with the same protocols and platforms.
fn versions_json(spec: &ProviderSpec, faults: &[Fault]) -> serde_json::Value {
    let platforms: Vec<_> = spec
        .platforms
        .iter()
        .map(|(os, arch)| json!({ "os": os, "arch": arch }))
        .collect();
    let versions: Vec<_> = spec
        .versions
        .iter()
        .filter(|v| !unlisted(faults, v))
        .map(
            |version| json!({ "version": version, "protocols": PROTOCOLS, "platforms": platforms }),
        )
        .collect();
    json!({ "versions": versions })
}

/// Whether a fault leaves `version` out of version lists.
fn unlisted(faults: &[Fault], version: &str) -> bool {
    faults
        .iter()
        .any(|f| matches!(f, Fault::Unlisted(v) if *v == version))
}

/// A different but well-formed lowercase hex digest.
fn corrupt_hex(hex_digest: &str) -> String {
    let mut chars: Vec<char> = hex_digest.chars().collect();
    chars[0] = if chars[0] == '0' { '1' } else { '0' };
    chars.into_iter().collect()
}

/// The host a request was sent to: its URI authority (HTTP/2) or `Host` header.
fn request_host(req: &Request<Incoming>) -> String {
    req.uri()
        .authority()
        .map(|a| a.to_string())
        .or_else(|| {
            req.headers()
                .get(HOST)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

/// `302 Found` to `location`.
fn redirect(location: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::FOUND;
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(LOCATION, value);
    }
    response
}

/// The download endpoint's answer naming `location`, in the `form` the module uses.
fn module_download_response(form: DownloadAnswer, location: &str) -> Response<Full<Bytes>> {
    let mut response = match form {
        DownloadAnswer::NoContent => {
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = StatusCode::NO_CONTENT;
            response
        }
        DownloadAnswer::HeaderAndJson | DownloadAnswer::JsonOnly => {
            json_response(StatusCode::OK, &json!({ "location": location }))
        }
    };
    if form != DownloadAnswer::JsonOnly {
        // A location that is no valid header value (tests only pass sane ones) is left out.
        if let Ok(value) = HeaderValue::from_str(location) {
            response.headers_mut().insert("x-terraform-get", value);
        }
    }
    response
}

/// The head of `response` with a body that never ends.
fn endless_response(response: Response<OriginBody>) -> Response<OriginBody> {
    let (mut parts, _) = response.into_parts();
    parts.headers.remove(CONTENT_LENGTH);
    let chunk = Bytes::from(vec![b' '; 64 * 1024]);
    let stream = futures_util::stream::repeat_with(move || {
        Ok::<_, Infallible>(hyper::body::Frame::data(chunk.clone()))
    });
    Response::from_parts(
        parts,
        BodyExt::boxed(http_body_util::StreamBody::new(stream)),
    )
}

/// What the fake origin's responses carry: a buffer, or an endless stream.
type OriginBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn not_found() -> Response<Full<Bytes>> {
    json_response(StatusCode::NOT_FOUND, &json!({ "errors": ["Not Found"] }))
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = bytes_response("application/json", Bytes::from(body.to_string()));
    *response.status_mut() = status;
    response
}

fn bytes_response(content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let length = HeaderValue::from(body.len());
    let mut response = Response::new(Full::new(body));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CONTENT_LENGTH, length);
    response
}

// ---------------------------------------------------------------------------------------
/// A binary detached signature over `document` by the origins' test signing key (whose public
/// key is [`FakeOrigin::public_key_armor`]), or by a second key that no origin lists.
pub fn sign_detached(document: &[u8], by_unlisted_key: bool) -> Vec<u8> {
    let key = if by_unlisted_key {
        gpg::unlisted_key()
    } else {
        gpg::signing_key()
    };
    gpg::sign_detached_by(key, &[document]).remove(0)
}

/// The test signing key's ASCII-armored public key.
pub fn signing_key_armor() -> &'static str {
    &gpg::signing_key().public_armor
}

// OpenPGP signing through the gpg binary.
// ---------------------------------------------------------------------------------------

/// Real OpenPGP keys and signatures, made with `/usr/bin/gpg` (terraform verifies them).
///
/// The key is generated once per test process in a temporary GNUPGHOME, exported (public
/// and unprotected secret part) and that home deleted. Each signing batch imports the
/// secret key into a fresh temporary home. Every home kills its gpg-agent when dropped,
/// so no process outlives the batch.
mod gpg {
    use std::fs;
    use std::path::Path;
    use std::process::Command;
    use std::sync::OnceLock;

    use tempfile::TempDir;

    const GPG: &str = "/usr/bin/gpg";
    const GPGCONF: &str = "/usr/bin/gpgconf";
    const USER_ID: &str = "provender test <test@provender.invalid>";

    /// The process-wide signing key.
    pub(super) struct SigningKey {
        /// Long key ID, 16 uppercase hex digits.
        pub(super) key_id: String,
        /// Full fingerprint, used to select the key.
        fingerprint: String,
        /// ASCII-armored public key.
        pub(super) public_armor: String,
        /// ASCII-armored secret key without passphrase.
        secret_armor: Vec<u8>,
    }

    /// The signing key, generated on first use.
    pub(super) fn signing_key() -> &'static SigningKey {
        static KEY: OnceLock<SigningKey> = OnceLock::new();
        KEY.get_or_init(generate)
    }

    /// A second key, never listed in `signing_keys`, generated on first use.
    pub(super) fn unlisted_key() -> &'static SigningKey {
        static KEY: OnceLock<SigningKey> = OnceLock::new();
        KEY.get_or_init(generate)
    }

    /// Binary detached signatures over each document, in order.
    pub(super) fn sign_detached(documents: &[&[u8]]) -> Vec<Vec<u8>> {
        sign_detached_by(signing_key(), documents)
    }

    /// Binary detached signatures by `key` over each document, in order.
    pub(super) fn sign_detached_by(key: &SigningKey, documents: &[&[u8]]) -> Vec<Vec<u8>> {
        if documents.is_empty() {
            return Vec::new();
        }
        let home = Home::new();
        let secret = home.path().join("secret.asc");
        fs::write(&secret, &key.secret_armor).expect("write secret key for import");
        home.gpg(&["--import", path_str(&secret)]);
        documents
            .iter()
            .enumerate()
            .map(|(index, document)| {
                let file = home.path().join(format!("document-{index}"));
                fs::write(&file, document).expect("write document to sign");
                home.gpg(&[
                    "--local-user",
                    &key.fingerprint,
                    "--digest-algo",
                    "SHA256",
                    "--detach-sign",
                    "--output",
                    "-",
                    path_str(&file),
                ])
            })
            .collect()
    }

    fn generate() -> SigningKey {
        let home = Home::new();
        home.gpg(&["--quick-gen-key", USER_ID, "rsa2048", "sign", "never"]);
        let listing = String::from_utf8(home.gpg(&["--with-colons", "--list-secret-keys"]))
            .expect("gpg --with-colons output is UTF-8");
        let field = |record: &str, index: usize| {
            listing
                .lines()
                .map(|line| line.split(':').collect::<Vec<_>>())
                .find(|fields| fields[0] == record)
                .and_then(|fields| fields.get(index).map(|f| (*f).to_owned()))
                .unwrap_or_else(|| panic!("no {record} record in gpg listing:\n{listing}"))
        };
        let key_id = field("sec", 4);
        let fingerprint = field("fpr", 9);
        assert_eq!(key_id.len(), 16, "unexpected gpg key id {key_id:?}");
        let public_armor = String::from_utf8(home.gpg(&["--armor", "--export", &fingerprint]))
            .expect("armored public key is UTF-8");
        let secret_armor = home.gpg(&["--armor", "--export-secret-keys", &fingerprint]);
        assert!(
            public_armor.starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----"),
            "gpg exported no public key:\n{public_armor}"
        );
        SigningKey {
            key_id: key_id.to_ascii_uppercase(),
            fingerprint,
            public_armor,
            secret_armor,
        }
    }

    fn path_str(path: &Path) -> &str {
        path.to_str().expect("temporary paths are UTF-8")
    }

    /// A temporary GNUPGHOME whose gpg-agent is killed on drop.
    struct Home {
        dir: TempDir,
    }

    impl Home {
        fn new() -> Home {
            let dir = tempfile::Builder::new()
                .prefix("provender-gpg-")
                .tempdir()
                .expect("create temporary GNUPGHOME");
            Home { dir }
        }

        fn path(&self) -> &Path {
            self.dir.path()
        }

        /// Runs gpg non-interactively in this home; panics with its stderr on failure.
        fn gpg(&self, args: &[&str]) -> Vec<u8> {
            let output = Command::new(GPG)
                .env("GNUPGHOME", self.path())
                .args([
                    "--batch",
                    "--yes",
                    "--no-tty",
                    "--pinentry-mode",
                    "loopback",
                ])
                .args(["--passphrase", ""])
                .args(args)
                .output()
                .unwrap_or_else(|err| panic!("cannot run {GPG}: {err}"));
            assert!(
                output.status.success(),
                "gpg {args:?} failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            output.stdout
        }
    }

    impl Drop for Home {
        fn drop(&mut self) {
            // Best effort: a failure here must not mask the test's own outcome.
            let _ = Command::new(GPGCONF)
                .env("GNUPGHOME", self.path())
                .args(["--kill", "all"])
                .output();
        }
    }
}
