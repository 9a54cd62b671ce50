//! Smoke tests for the module registry side of the fake origin in `support::origin`, so that
//! module tests built on it fail for the product's reasons, not the fixture's:
//!
//! - discovery lists `modules.v1` (only on an origin started with modules), versions and
//!   download answer in every [`DownloadAnswer`] form, for every [`ModuleSource`];
//! - the packages are deterministic tar.gz archives holding exactly the expected files;
//! - the git server works with the real `git` CLI (protocol v2 and v0), and `move_tag` moves a
//!   tag to new content;
//! - every hostile answer is what it claims to be;
//! - the real terraform CLI installs modules from it (relative archive, nested module, git,
//!   `//subdir`, absolute archive).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};
use url::Url;

use crate::support::origin::{
    DownloadAnswer, ENDLESS_GIT_REF, FakeOrigin, Fault, GZIP_BOMB_UNPACKED, HostileModule,
    LONG_NAME_BOMB_DECLARED, ModuleSource, ModuleSpec, RequestKind, ZIP_BOMB_UNPACKED,
};
use crate::support::pki::TestCa;
use crate::support::{Terraform, https_client, install_crypto_provider, poll, tf_config, within};

const HOST: &str = "registry.terraform.io";

/// `(ns, name, system)` of every module [`modules`] serves, with the version tests use.
const NET: (&str, &str, &str) = ("acme", "net", "test");
const REL: (&str, &str, &str) = ("acme", "rel", "test");
const LEAF: (&str, &str, &str) = ("acme", "leaf", "test");
const GIT: (&str, &str, &str) = ("acme", "gitmod", "test");
const GITHUB: (&str, &str, &str) = ("acme", "gh", "test");
const SUB: (&str, &str, &str) = ("acme", "sub", "test");
const GIT_SUB: (&str, &str, &str) = ("acme", "gitsub", "test");
const JSON_ONLY: (&str, &str, &str) = ("acme", "json", "test");

fn modules() -> Vec<ModuleSpec> {
    let spec = |(ns, name, system): (&str, &str, &str), versions: &[&str]| {
        ModuleSpec::new(ns, name, system, versions)
    };
    vec![
        spec(NET, &["1.0.0", "1.1.0"]),
        spec(REL, &["1.0.0"])
            .source(ModuleSource::RelativeArchive)
            .answer(DownloadAnswer::HeaderAndJson)
            .with_child("acme/leaf/test", "1.0.0"),
        spec(LEAF, &["1.0.0"]),
        spec(GIT, &["1.0.0", "1.1.0"])
            .source(ModuleSource::Git)
            .with_file("modules/extra/main.tf", "# a nested directory\n"),
        spec(GITHUB, &["2.0.0"]).source(ModuleSource::GithubTarball),
        spec(SUB, &["1.0.0"]).source(ModuleSource::Subdir("modules/inner".to_owned())),
        spec(GIT_SUB, &["1.0.0"])
            .source(ModuleSource::GitSubdir("modules/inner".to_owned()))
            .answer(DownloadAnswer::HeaderAndJson),
        spec(JSON_ONLY, &["1.0.0"]).answer(DownloadAnswer::JsonOnly),
    ]
}

/// A CA, an origin serving [`modules`] as `registry.terraform.io`, and a client reaching it
/// that does not follow redirects.
async fn start() -> (TestCa, FakeOrigin, reqwest::Client) {
    let ca = TestCa::new();
    let origin = FakeOrigin::start_with_modules(&ca, &[HOST], Vec::new(), modules()).await;
    let client = no_redirects(&ca, &origin);
    (ca, origin, client)
}

fn no_redirects(ca: &TestCa, origin: &FakeOrigin) -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.ca_pem().as_bytes()).unwrap()])
        .resolve(HOST, origin.addr())
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(crate::support::TIMEOUT)
        .build()
        .unwrap()
}

fn url(path: &str) -> String {
    format!("https://{HOST}{path}")
}

fn download_url((ns, name, system): (&str, &str, &str), version: &str) -> String {
    url(&format!(
        "/v1/modules/{ns}/{name}/{system}/{version}/download"
    ))
}

async fn send(request: reqwest::RequestBuilder) -> (reqwest::StatusCode, http::HeaderMap, Vec<u8>) {
    let response = within("request", request.send()).await.expect("send");
    let status = response.status();
    let headers = response.headers().clone();
    let body = within("body", response.bytes()).await.expect("read body");
    (status, headers, body.to_vec())
}

async fn get_json(client: &reqwest::Client, url: &str) -> (StatusCode, Value) {
    let (status, _, body) = send(client.get(url)).await;
    let value = serde_json::from_slice(&body).unwrap_or_else(|err| {
        panic!(
            "{url}: not JSON ({err}): {}",
            String::from_utf8_lossy(&body)
        )
    });
    (status, value)
}

/// The location a download answer names: the `X-Terraform-Get` header or the JSON body's
/// `location`, checked to agree when both are present and to match the answer's form.
async fn location(client: &reqwest::Client, download: &str, form: DownloadAnswer) -> String {
    let (status, headers, body) = send(client.get(download)).await;
    let header = headers
        .get("x-terraform-get")
        .map(|v| v.to_str().unwrap().to_owned());
    match form {
        DownloadAnswer::NoContent => {
            assert_eq!(status, StatusCode::NO_CONTENT, "{download}");
            assert!(body.is_empty());
            header.expect("X-Terraform-Get")
        }
        DownloadAnswer::HeaderAndJson | DownloadAnswer::JsonOnly => {
            assert_eq!(status, StatusCode::OK, "{download}");
            assert_eq!(headers["content-type"], "application/json");
            let body: Value = serde_json::from_slice(&body).unwrap();
            let location = body["location"].as_str().expect("location").to_owned();
            if form == DownloadAnswer::HeaderAndJson {
                assert_eq!(header.as_deref(), Some(location.as_str()));
            } else {
                assert_eq!(header, None);
            }
            location
        }
    }
}

/// Splits a go-getter location the way Terraform does: `(package URL, subdir)`, the `//`
/// looked for only after `://` and before `?`; a relative location is resolved against
/// `base`.
fn split_location(location: &str, base: &str) -> (String, Option<String>) {
    let location = if location.starts_with('/') {
        Url::parse(base)
            .unwrap()
            .join(location)
            .unwrap()
            .to_string()
    } else {
        location.to_owned()
    };
    let scheme_end = location.find("://").expect("absolute location") + 3;
    let query_start = location.find('?').unwrap_or(location.len());
    match location[scheme_end..query_start].find("//") {
        Some(at) => {
            let at = scheme_end + at;
            let subdir = location[at + 2..query_start].to_owned();
            let package = format!("{}{}", &location[..at], &location[query_start..]);
            (package, Some(subdir))
        }
        None => (location, None),
    }
}

/// One tar entry as read: its raw name, type, link target and content.
struct Member {
    name: String,
    kind: tar::EntryType,
    link: Option<String>,
    content: Vec<u8>,
}

fn untar(tar_gz: &[u8]) -> Vec<Member> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tar_gz));
    archive
        .entries()
        .expect("tar entries")
        .map(|entry| {
            let mut entry = entry.expect("tar entry");
            let mut content = Vec::new();
            entry.read_to_end(&mut content).expect("tar entry content");
            Member {
                name: String::from_utf8(entry.path_bytes().to_vec()).unwrap(),
                kind: entry.header().entry_type(),
                link: entry
                    .link_name_bytes()
                    .map(|l| String::from_utf8(l.to_vec()).unwrap()),
                content,
            }
        })
        .collect()
}

/// The regular files of a tar.gz, path → content.
fn files_of(tar_gz: &[u8]) -> BTreeMap<String, Vec<u8>> {
    untar(tar_gz)
        .into_iter()
        .filter(|e| e.kind == tar::EntryType::Regular)
        .map(|e| (e.name, e.content))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_fixture_discovery_and_versions() {
    let (ca, origin, client) = start().await;

    let (status, discovery) = get_json(&client, &url("/.well-known/terraform.json")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        discovery,
        json!({ "providers.v1": "/v1/providers/", "modules.v1": "/v1/modules/" })
    );
    origin.set_fault(Fault::ModulesV1("https://127.0.0.1:1/v1/modules/"));
    let (_, discovery) = get_json(&client, &url("/.well-known/terraform.json")).await;
    assert_eq!(discovery["modules.v1"], "https://127.0.0.1:1/v1/modules/");
    origin.clear_faults();

    let (status, versions) = get_json(&client, &url("/v1/modules/acme/net/test/versions")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        versions,
        json!({ "modules": [{ "versions": [{ "version": "1.0.0" }, { "version": "1.1.0" }] }] })
    );
    let (status, body) = get_json(&client, &url("/v1/modules/acme/nope/test/versions")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({ "errors": ["Not Found"] }));
    for path in [
        "/v1/modules/acme/net/test/9.9.9/download",
        "/v1/modules/acme/nope/test/1.0.0/download",
        "/modarchives/acme/net/test/9.9.9.tar.gz",
        "/modarchives/acme/gh/test/2.0.0.tar.gz",
        "/v1/modules/acme/net",
    ] {
        let (status, _, _) = send(client.get(url(path))).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    assert_eq!(origin.count(RequestKind::ModuleVersions), 2);
    assert_eq!(origin.count(RequestKind::ModuleDownload), 2);
    assert_eq!(origin.count(RequestKind::ModuleArchive), 2);
    assert_eq!(origin.count(RequestKind::Discovery), 2);
    assert_eq!(origin.total_requests(), 9);
    assert_eq!(
        RequestKind::EVERY,
        [&RequestKind::ALL[..], &RequestKind::MODULES[..]].concat()[..]
    );

    // An origin started without modules does not mention them.
    let plain = FakeOrigin::start(&ca, &[HOST], Vec::new()).await;
    let client = https_client(&ca, &[(HOST, plain.addr())]);
    let (_, discovery) = get_json(&client, &url("/.well-known/terraform.json")).await;
    assert_eq!(discovery, json!({ "providers.v1": "/v1/providers/" }));
    let (status, _) = get_json(&client, &url("/v1/modules/acme/net/test/versions")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(plain.count(RequestKind::ModuleVersions), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_fixture_download_answers_and_archives() {
    let (ca, origin, client) = start().await;
    let port = origin.addr().port();

    // Exact locations, built from the host the client named.
    let expected = [
        (
            NET,
            "1.0.0",
            format!("https://{HOST}/modarchives/acme/net/test/1.0.0.tar.gz"),
        ),
        (
            REL,
            "1.0.0",
            "/modarchives/acme/rel/test/1.0.0.tar.gz".to_owned(),
        ),
        (
            GIT,
            "1.1.0",
            format!("git::https://{HOST}/git/acme/terraform-test-gitmod.git?ref=v1.1.0"),
        ),
        (
            GITHUB,
            "2.0.0",
            format!("https://{HOST}/modarchives/acme/gh/test/tarball/v2.0.0//*?archive=tar.gz"),
        ),
        (
            SUB,
            "1.0.0",
            format!("https://{HOST}/modarchives/acme/sub/test/1.0.0.tar.gz//modules/inner"),
        ),
        (
            GIT_SUB,
            "1.0.0",
            format!(
                "git::https://{HOST}/git/acme/terraform-test-gitsub.git//modules/inner?ref=v1.0.0"
            ),
        ),
        (
            JSON_ONLY,
            "1.0.0",
            format!("https://{HOST}/modarchives/acme/json/test/1.0.0.tar.gz"),
        ),
    ];
    for ((ns, name, system), version, want) in &expected {
        let form = origin.module_spec(ns, name, system).answer;
        let got = location(&client, &download_url((ns, name, system), version), form).await;
        assert_eq!(&got, want, "{ns}/{name}/{system}");
        assert_eq!(
            &origin.module_location(ns, name, system, version, HOST),
            want
        );
    }
    // Through 127.0.0.1 (terraform's view), absolute locations name that.
    let by_ip = format!(
        "{}/v1/modules/acme/net/test/1.0.0/download",
        origin.base_url()
    );
    let direct = https_client(&ca, &[]);
    let (status, headers, _) = send(direct.get(&by_ip)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        headers["x-terraform-get"],
        format!("https://127.0.0.1:{port}/modarchives/acme/net/test/1.0.0.tar.gz").as_str()
    );
    // Unless an authority is imposed.
    let imposed = format!("{HOST}:{port}");
    origin.set_location_authority(Some(&imposed));
    let got = location(
        &client,
        &download_url(GIT, "1.0.0"),
        DownloadAnswer::NoContent,
    )
    .await;
    assert_eq!(
        got,
        format!("git::https://{imposed}/git/acme/terraform-test-gitmod.git?ref=v1.0.0")
    );
    origin.set_location_authority(None);

    // Every archive location serves the package: exact bytes, sane headers, HEAD too.
    for ((ns, name, system), version, location) in &expected {
        if location.starts_with("git::") {
            continue;
        }
        let (package, subdir) =
            split_location(location, &download_url((ns, name, system), version));
        let package = package.replace("?archive=tar.gz", "");
        let (status, headers, body) = send(client.get(&package)).await;
        assert_eq!(status, StatusCode::OK, "{package}");
        assert_eq!(
            body,
            origin.module_archive(ns, name, system, version),
            "{package}"
        );
        assert!(headers.get("content-encoding").is_none());
        assert!(
            headers["content-type"].to_str().unwrap().contains("gzip"),
            "{headers:?}"
        );
        assert_eq!(
            package,
            origin
                .module_archive_url(ns, name, system, version)
                .replace(&format!("127.0.0.1:{port}"), HOST)
        );
        let (status, headers, empty) = send(client.head(&package)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(empty.is_empty());
        assert_eq!(headers["content-length"], body.len().to_string().as_str());

        // The files: at the root, under the subdir, or under one GitHub-style directory.
        let mut files = files_of(&body);
        if (*ns, *name, *system) == GITHUB {
            let entries = untar(&body);
            let top = &entries[0];
            assert_eq!(top.kind, tar::EntryType::Directory);
            assert!(
                top.name.starts_with("acme-terraform-test-gh-"),
                "{}",
                top.name
            );
            files = files
                .into_iter()
                .map(|(path, content)| (path[top.name.len()..].to_owned(), content))
                .collect();
        }
        assert_eq!(
            files,
            origin.module_package_files(ns, name, system, version)
        );
        let module = origin.module_files(ns, name, system, version);
        assert_eq!(module["VERSION"], format!("{version}\n").as_bytes());
        assert!(module.contains_key("main.tf"));
        match &subdir {
            Some(subdir) if subdir != "*" => {
                let under: BTreeMap<_, _> = files
                    .iter()
                    .filter_map(|(path, content)| {
                        Some((
                            path.strip_prefix(&format!("{subdir}/"))?.to_owned(),
                            content.clone(),
                        ))
                    })
                    .collect();
                assert_eq!(under, module);
                assert!(files.contains_key("README.md"));
            }
            _ => assert_eq!(files, module),
        }
    }
    let rel_main = &origin.module_files("acme", "rel", "test", "1.0.0")["child.tf"];
    assert!(String::from_utf8_lossy(rel_main).contains("source  = \"acme/leaf/test\""));

    // Deterministic: another origin builds the same bytes and the same commits.
    let again = FakeOrigin::start_with_modules(&ca, &[HOST], Vec::new(), modules()).await;
    for spec in modules() {
        for version in &spec.versions {
            let (ns, name, system) = (&spec.namespace, &spec.name, &spec.system);
            assert_eq!(
                origin.module_archive(ns, name, system, version),
                again.module_archive(ns, name, system, version)
            );
            assert_eq!(
                origin.git_commit(ns, name, system, version),
                again.git_commit(ns, name, system, version)
            );
        }
    }
    assert_eq!(origin.count(RequestKind::ModuleDownload), 9);
}

/// The real `git` CLI, hermetic (its own HOME, no configuration, no prompts), trusting only
/// the test CA and reaching `registry.terraform.io:PORT` at the origin.
struct GitClient {
    home: tempfile::TempDir,
    ca_file: PathBuf,
    port: u16,
    /// An empty repository to fetch into.
    repo: PathBuf,
}

impl GitClient {
    async fn new(ca: &TestCa, port: u16) -> GitClient {
        let home = tempfile::Builder::new()
            .prefix("provender-git-client-")
            .tempdir()
            .unwrap();
        let ca_file = ca.write_ca(home.path());
        let repo = home.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        let client = GitClient {
            home,
            ca_file,
            port,
            repo,
        };
        client.ok(&["init", "--quiet"]).await;
        client
    }

    /// `git args` in the repository, not yet run.
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("git");
        command
            .current_dir(&self.repo)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_SSL_CAINFO", &self.ca_file)
            .args([
                "-c",
                &format!("http.curloptResolve={HOST}:{}:127.0.0.1", self.port),
            ])
            .args(args)
            .kill_on_drop(true);
        command
    }

    /// Runs `git args`, which must succeed; returns stdout.
    async fn ok(&self, args: &[&str]) -> Vec<u8> {
        let output = within(&format!("git {args:?}"), self.command(args).output())
            .await
            .expect("run git");
        assert!(
            output.status.success(),
            "git {args:?} failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    }

    /// `git fetch --depth 1 <remote> <rev>` with protocol version `protocol`.
    async fn fetch(&self, protocol: &str, remote: &str, rev: &str) {
        let protocol = format!("protocol.version={protocol}");
        self.ok(&[
            "-c", &protocol, "fetch", "--quiet", "--depth", "1", remote, rev,
        ])
        .await;
    }

    /// The fetched commit.
    async fn head(&self) -> String {
        let out = self.ok(&["rev-parse", "FETCH_HEAD"]).await;
        String::from_utf8(out).unwrap().trim().to_owned()
    }

    /// A fetched file's content.
    async fn show(&self, path: &str) -> Vec<u8> {
        self.ok(&["show", &format!("FETCH_HEAD:{path}")]).await
    }

    /// The fetched commit's file names, sorted.
    async fn names(&self) -> Vec<String> {
        let out = self
            .ok(&["ls-tree", "-r", "--name-only", "FETCH_HEAD"])
            .await;
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_fixture_git_fetch_with_the_cli() {
    let (ca, origin, _) = start().await;
    let port = origin.addr().port();
    let git = GitClient::new(&ca, port).await;
    let (ns, name, system) = GIT;
    let remote = format!("https://{HOST}:{port}/git/acme/terraform-test-gitmod.git");
    assert_eq!(
        origin.module_git_url(ns, name, system),
        format!("https://127.0.0.1:{port}/git/acme/terraform-test-gitmod.git")
    );

    // Protocol v2 (the default) and v0 both fetch the tag with depth 1.
    for (version, protocol) in [("1.0.0", "2"), ("1.1.0", "0")] {
        git.fetch(protocol, &remote, &format!("v{version}")).await;
        let commit = git.head().await;
        assert_eq!(commit, origin.git_commit(ns, name, system, version));
        assert_eq!(commit.len(), 40);
        let files = origin.module_package_files(ns, name, system, version);
        assert_eq!(git.names().await, files.keys().cloned().collect::<Vec<_>>());
        for (path, content) in &files {
            assert_eq!(&git.show(path).await, content, "{path}");
        }
    }
    let requests = origin.requests();
    assert!(
        requests
            .iter()
            .filter(|r| r.kind == Some(RequestKind::Git))
            .all(|r| r.host.as_deref() == Some(format!("{HOST}:{port}").as_str())),
        "{requests:?}"
    );
    // info/refs then upload-pack, per fetch (v2 also lists refs).
    assert!(
        origin.count(RequestKind::Git) >= 4,
        "{}",
        origin.count(RequestKind::Git)
    );

    // A subdir module's repository holds the whole package.
    let (ns2, name2, system2) = GIT_SUB;
    let sub_remote = format!("https://{HOST}:{port}/git/acme/terraform-test-gitsub.git");
    git.fetch("2", &sub_remote, "v1.0.0").await;
    assert_eq!(
        git.head().await,
        origin.git_commit(ns2, name2, system2, "1.0.0")
    );
    assert_eq!(git.show("modules/inner/VERSION").await, b"1.0.0\n");
    assert_eq!(
        git.names().await,
        [
            "README.md",
            "modules/inner/VERSION",
            "modules/inner/main.tf"
        ]
    );

    // A fetch by full commit ID works too (protocol v2).
    let commit_100 = origin.git_commit(ns, name, system, "1.0.0");
    git.fetch("2", &remote, &commit_100).await;
    assert_eq!(git.head().await, commit_100);

    // Moving the tag: new commit, new content in git; archives and expected files unchanged.
    let archive_before = origin.module_archive(ns, name, system, "1.0.0");
    let moved = origin.move_tag(ns, name, system, "1.0.0", &[("main.tf", b"# moved\n")]);
    assert_ne!(moved, commit_100);
    assert_eq!(origin.git_commit(ns, name, system, "1.0.0"), moved);
    git.fetch("2", &remote, "v1.0.0").await;
    assert_eq!(git.head().await, moved);
    assert_eq!(git.show("main.tf").await, b"# moved\n");
    assert_eq!(git.names().await, ["main.tf"]);
    assert_eq!(
        origin.module_archive(ns, name, system, "1.0.0"),
        archive_before
    );
    assert_eq!(
        files_of(&archive_before),
        origin.module_files(ns, name, system, "1.0.0")
    );
    // Moving it again works as well; the other tag stays.
    let again = origin.move_tag(
        ns,
        name,
        system,
        "1.0.0",
        &[("main.tf", b"# moved twice\n")],
    );
    assert_ne!(again, moved);
    git.fetch("0", &remote, "v1.1.0").await;
    assert_eq!(
        git.head().await,
        origin.git_commit(ns, name, system, "1.1.0")
    );

    // Unknown repositories are the backend's 404; pushing is refused.
    let client = no_redirects(&ca, &origin);
    let refs = |repo: &str, service: &str| url(&format!("/git/{repo}/info/refs?service={service}"));
    let (status, _, _) = send(client.get(refs("acme/nope.git", "git-upload-pack"))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let gitmod = "acme/terraform-test-gitmod.git";
    let (status, _, _) = send(client.get(refs(gitmod, "git-receive-pack"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, headers, body) = send(client.get(refs(gitmod, "git-upload-pack"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers["content-type"],
        "application/x-git-upload-pack-advertisement"
    );
    assert_eq!(headers["content-length"], body.len().to_string().as_str());
    assert!(body.starts_with(b"001e# service=git-upload-pack\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_fixture_hostile_answers() {
    let (ca, origin, client) = start().await;
    let port = origin.addr().port();

    // A given location, in each answer form.
    origin.set_fault(Fault::ModuleLocation("https://127.0.0.1:1/x.tar.gz"));
    for (module, form) in [
        (NET, DownloadAnswer::NoContent),
        (REL, DownloadAnswer::HeaderAndJson),
        (JSON_ONLY, DownloadAnswer::JsonOnly),
    ] {
        let got = location(&client, &download_url(module, "1.0.0"), form).await;
        assert_eq!(got, "https://127.0.0.1:1/x.tar.gz");
    }

    for hostile in HostileModule::ALL {
        origin.set_fault(Fault::HostileModule(hostile));
        let got = location(
            &client,
            &download_url(NET, "1.0.0"),
            DownloadAnswer::NoContent,
        )
        .await;
        assert_eq!(got, hostile.location(HOST));
    }
    origin.clear_faults();
    let got = location(
        &client,
        &download_url(NET, "1.0.0"),
        DownloadAnswer::NoContent,
    )
    .await;
    assert_eq!(
        got,
        origin.module_location("acme", "net", "test", "1.0.0", HOST)
    );

    let fetch = async |hostile: HostileModule| {
        let (status, _, body) = send(client.get(url(hostile.path()))).await;
        assert_eq!(status, StatusCode::OK, "{hostile:?}");
        assert_eq!(body, origin.hostile_archive(hostile));
        body
    };
    let names = |body: &[u8]| untar(body).into_iter().map(|e| e.name).collect::<Vec<_>>();
    assert_eq!(
        names(&fetch(HostileModule::DotDot).await),
        ["main.tf", "../evil"]
    );
    assert_eq!(
        names(&fetch(HostileModule::AbsolutePath).await),
        ["main.tf", "/tmp/provender-absolute-evil.tf"]
    );
    let symlink = untar(&fetch(HostileModule::Symlink).await);
    assert_eq!(symlink[1].name, "secrets.tf");
    assert_eq!(symlink[1].kind, tar::EntryType::Symlink);
    assert_eq!(
        symlink[1].link.as_deref(),
        Some("../../../../../../etc/passwd")
    );

    // The bomb: small, valid (CRC and all), and 1 GiB of zeros inside.
    let bomb = fetch(HostileModule::GzipBomb).await;
    assert!(bomb.len() < 2 << 20, "{} bytes", bomb.len());
    let unpacked = tokio::task::spawn_blocking(move || {
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bomb[..]));
        let mut sizes = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = String::from_utf8(entry.path_bytes().to_vec()).unwrap();
            let size = std::io::copy(&mut entry, &mut std::io::sink()).unwrap();
            sizes.push((name, size));
        }
        // Reading to the end checks the gzip trailer.
        let mut rest = Vec::new();
        archive.into_inner().read_to_end(&mut rest).unwrap();
        sizes
    })
    .await
    .unwrap();
    assert_eq!(unpacked[1], ("zeros.bin".to_owned(), GZIP_BOMB_UNPACKED));
    const { assert!(GZIP_BOMB_UNPACKED > 64 << 20) };

    // The long-name bomb: small, valid, its first header a GNU long name declaring 256 MiB,
    // and the zeros it declares really there, followed by main.tf.
    let bomb = fetch(HostileModule::LongNameBomb).await;
    assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
    let headers = tokio::task::spawn_blocking(move || {
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bomb[..]));
        let headers: Vec<_> = (archive.entries().unwrap().raw(true))
            .map(|e| {
                let e = e.unwrap();
                let name = String::from_utf8(e.path_bytes().to_vec()).unwrap();
                (e.header().entry_type(), name, e.size())
            })
            .collect();
        let mut rest = Vec::new();
        archive.into_inner().read_to_end(&mut rest).unwrap();
        headers
    })
    .await
    .unwrap();
    assert_eq!(
        headers,
        [
            (
                tar::EntryType::GNULongName,
                "././@LongLink".to_owned(),
                LONG_NAME_BOMB_DECLARED
            ),
            (tar::EntryType::Regular, "main.tf".to_owned(), 60),
        ]
    );

    // The zip bomb: small, and 256 MiB of zeros inside, as its directory says.
    let zip_bomb = fetch(HostileModule::ZipBomb).await;
    assert!(zip_bomb.len() < 2 << 20, "{} bytes", zip_bomb.len());
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip_bomb)).unwrap();
    assert_eq!(
        archive.by_name("zeros.bin").unwrap().size(),
        ZIP_BOMB_UNPACKED
    );

    // The loop redirects to itself.
    let path = HostileModule::RedirectLoop.path();
    let (status, headers, _) = send(client.get(url(path))).await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(headers["location"], path);
    // The generic fault works on module kinds too.
    origin.set_fault(Fault::RedirectLoop {
        kind: RequestKind::ModuleArchive,
    });
    let (status, _, _) = send(client.get(url("/modarchives/acme/net/test/1.0.0.tar.gz"))).await;
    assert_eq!(status, StatusCode::FOUND);
    origin.clear_faults();

    // The endless repository: git keeps receiving pack data until killed (v2 and v0).
    let git = GitClient::new(&ca, port).await;
    let remote = format!("https://{HOST}:{port}/git/endless.git");
    for protocol in ["2", "0"] {
        let before = origin.endless_git_bytes_sent();
        let protocol_version = format!("protocol.version={protocol}");
        let mut child = git
            .command(&["-c", &protocol_version, "fetch", "--quiet", "--depth", "1"])
            .args([remote.as_str(), ENDLESS_GIT_REF])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let streamed = poll(Duration::from_secs(20), async || {
            (origin.endless_git_bytes_sent() - before > 32 << 20).then_some(())
        })
        .await;
        let running = child.try_wait().unwrap().is_none();
        if streamed.is_none() || !running {
            let _ = child.start_kill();
            let output = child.wait_with_output().await.unwrap();
            panic!(
                "protocol {protocol}: {} bytes sent, git {}: {}",
                origin.endless_git_bytes_sent() - before,
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        child.kill().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_fixture_terraform_installs_from_it() {
    let (ca, origin, _) = start().await;
    let port = origin.addr().port();
    let config =
        tf_config::registry_host_with_modules(&origin.providers_v1_url(), &origin.modules_v1_url());
    let terraform = Terraform::new(&ca, &config);
    let ca_file = terraform.ca_file().to_str().unwrap().to_owned();
    let terraform = terraform
        .env("GIT_SSL_CAINFO", &ca_file)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0");
    let root = tf_config::root_module(
        r#"module "rel" {
  source  = "acme/rel/test"
  version = "1.0.0"
}

module "git" {
  source  = "registry.terraform.io/acme/gitmod/test"
  version = "~> 1.0"
}

module "sub" {
  source  = "acme/sub/test"
  version = "1.0.0"
}

module "abs" {
  source  = "acme/net/test"
  version = "1.0.0"
}

output "messages" {
  value = [module.rel.message, module.rel.child_message, module.git.version, module.sub.version]
}
"#,
    );
    terraform.init(root.path()).await.assert_success();
    terraform
        .run(root.path(), &["validate", "-no-color"])
        .await
        .assert_success();

    let modules_dir = root.path().join(".terraform/modules");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(modules_dir.join("modules.json")).unwrap()).unwrap();
    let dirs: BTreeMap<String, (String, String)> = manifest["Modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["Key"].as_str().unwrap().to_owned(),
                (
                    m["Dir"].as_str().unwrap().to_owned(),
                    m["Version"].as_str().unwrap_or_default().to_owned(),
                ),
            )
        })
        .collect();
    let installed = |key: &str| {
        let (dir, _) = &dirs[key];
        let dir = root.path().join(dir);
        let mut files = BTreeMap::new();
        collect_files(&dir, &dir, &mut files);
        files
    };
    assert_eq!(dirs["sub"].0, ".terraform/modules/sub/modules/inner");
    assert_eq!(dirs["git"].1, "1.1.0");
    assert_eq!(
        installed("rel"),
        origin.module_files("acme", "rel", "test", "1.0.0")
    );
    assert_eq!(
        installed("rel.child"),
        origin.module_files("acme", "leaf", "test", "1.0.0")
    );
    assert_eq!(
        installed("abs"),
        origin.module_files("acme", "net", "test", "1.0.0")
    );
    assert_eq!(
        installed("sub"),
        origin.module_files("acme", "sub", "test", "1.0.0")
    );
    assert_eq!(
        installed("git"),
        origin.module_files("acme", "gitmod", "test", "1.1.0")
    );

    // Terraform came as 127.0.0.1:PORT, archives by HEAD + GET, git by info/refs + upload-pack.
    assert_eq!(origin.count(RequestKind::ModuleDownload), 5);
    assert!(origin.count(RequestKind::ModuleArchive) >= 4);
    assert!(origin.count(RequestKind::Git) >= 2);
    assert_eq!(
        origin.count(RequestKind::Discovery),
        0,
        "the host block skips discovery"
    );
    let authority = format!("127.0.0.1:{port}");
    for request in origin.requests() {
        assert_eq!(
            request.host.as_deref(),
            Some(authority.as_str()),
            "{request:?}"
        );
    }
}

/// Every regular file under `dir` (skipping `.git`), path relative to `root` → content.
fn collect_files(root: &Path, dir: &Path, files: &mut BTreeMap<String, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        if entry.file_name() == ".git" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            collect_files(root, &path, files);
        } else {
            let relative = path
                .strip_prefix(root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned();
            files.insert(relative, std::fs::read(&path).unwrap());
        }
    }
}
