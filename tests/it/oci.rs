//! The OCI mirror (`/v2/`) for OpenTofu's `oci_mirror`, against the rules its client applies
//! (as read from opentofu/opentofu's `oci_registry_mirror_source.go` and oras-go) and with real
//! OCI clients (skopeo, the `oras` Python client):
//!
//! - `/v2/` answers 200; `tags/list` lists the versions (`+` as `_`), paged with `n`/`last` and
//!   a `Link` header; an unknown provider or host is `NAME_UNKNOWN`;
//! - `HEAD` and `GET` of a tag give the image index with `Content-Type`, `Content-Length` and
//!   `Docker-Content-Digest` (the digest of the bytes); the index lists every platform the origin
//!   offers, each manifest has the empty config and one `archive/zip` layer whose digest is the
//!   zip's SHA-256 and whose size is its length; blobs are the origin's zip byte for byte;
//! - resolving a tag downloads no archive (sizes come from a `HEAD`, or the registry's
//!   `packages` extension), and a wrong stated size is corrected once the archive is stored;
//! - the documents are the same bytes on another replica and after a restart; an offline
//!   mirror serves what it holds;
//! - with `[auth]`, the bearer challenge and `/v2/token` take the mirror's own tokens.

use std::path::{Path, PathBuf};
use std::process::Command;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::support::http::{Got, get, request};
use crate::support::https_client;
use crate::support::origin::{FakeOrigin, Fault, ProviderSpec, RequestKind};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror};
use crate::support::tf_config::local_platform_and;

const REPO: &str = "registry.terraform.io/acme/foo";
const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const EMPTY: &str = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";

fn platforms() -> Vec<(&'static str, &'static str)> {
    local_platform_and(&[
        ("linux", "amd64"),
        ("linux", "arm64"),
        ("darwin", "arm64"),
        ("windows", "amd64"),
    ])
}

async fn origin(ca: &TestCa) -> FakeOrigin {
    let p = platforms();
    FakeOrigin::start(
        ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new("acme", "foo", &["1.0.0", "1.1.0", "1.2.0+ent.1"], &p),
            ProviderSpec::new("acme", "tofu", &["3.0.0"], &p).with_packages_extension(),
        ],
    )
    .await
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

fn header<'a>(got: &'a Got, name: &str) -> &'a str {
    got.headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header: {:?}", got.headers))
        .to_str()
        .unwrap()
}

/// The OCI error code of an error answer.
fn oci_code(got: &Got) -> String {
    got.json()["errors"][0]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A document by tag or digest, checked the way OpenTofu's client checks it: the `HEAD`'s
/// headers, then a `GET` whose type, length and digest agree and whose bytes hash to the digest.
async fn document(
    client: &reqwest::Client,
    mirror: &TestMirror,
    repo: &str,
    reference: &str,
    media: &str,
) -> (String, Value, Vec<u8>) {
    let url = mirror.root_url(&format!("/v2/{repo}/manifests/{reference}"));
    let head = request(client, Method::HEAD, &url).await;
    assert_eq!(head.status, StatusCode::OK, "HEAD {url}");
    assert!(head.body.is_empty());
    assert_eq!(header(&head, "content-type"), media);
    let digest = header(&head, "docker-content-digest").to_string();
    let length: usize = header(&head, "content-length").parse().unwrap();
    let got = get(client, &url).await;
    assert_eq!(got.status, StatusCode::OK, "GET {url}");
    assert_eq!(header(&got, "content-type"), media);
    assert_eq!(header(&got, "docker-content-digest"), digest);
    assert_eq!(got.body.len(), length);
    assert_eq!(digest, format!("sha256:{}", sha256(&got.body)));
    assert_eq!(
        header(&got, "docker-distribution-api-version"),
        "registry/2.0"
    );
    let json: Value = serde_json::from_slice(&got.body).unwrap();
    (digest, json, got.body)
}

#[tokio::test(flavor = "multi_thread")]
async fn tags_manifests_and_blobs_follow_opentofus_rules() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);

    let ping = get(&client, &mirror.root_url("/v2/")).await;
    assert_eq!(ping.status, StatusCode::OK);
    assert_eq!(
        header(&ping, "docker-distribution-api-version"),
        "registry/2.0"
    );

    // Tags: every version, `+` written `_`, in lexical order; paged on request.
    let tags = get(&client, &mirror.root_url(&format!("/v2/{REPO}/tags/list"))).await;
    assert_eq!(tags.status, StatusCode::OK);
    assert_eq!(
        tags.json(),
        serde_json::json!({"name": REPO, "tags": ["1.0.0", "1.1.0", "1.2.0_ent.1"]})
    );
    let mut paged = Vec::new();
    let mut next = Some(format!("/v2/{REPO}/tags/list?n=2"));
    while let Some(path) = next.take() {
        // Resolved against the request URL, as clients do.
        let page = get(&client, mirror.url.join(&path).unwrap().as_str()).await;
        assert_eq!(page.status, StatusCode::OK);
        for t in page.json()["tags"].as_array().unwrap() {
            paged.push(t.as_str().unwrap().to_string());
        }
        next = page.headers.get("link").map(|l| {
            let l = l.to_str().unwrap();
            assert!(l.ends_with("; rel=\"next\""), "{l}");
            l[l.find('<').unwrap() + 1..l.find('>').unwrap()].to_string()
        });
    }
    assert_eq!(paged, ["1.0.0", "1.1.0", "1.2.0_ent.1"]);

    // Not found, as OpenTofu needs to move on to its next installation method.
    for (path, status, code) in [
        (
            "/v2/registry.terraform.io/acme/nope/tags/list",
            404,
            "NAME_UNKNOWN",
        ),
        ("/v2/example.com/acme/foo/tags/list", 404, "NAME_UNKNOWN"),
        ("/v2/acme/foo/tags/list", 400, "NAME_INVALID"),
        (
            "/v2/registry.terraform.io/acme/foo/manifests/9.9.9",
            404,
            "MANIFEST_UNKNOWN",
        ),
        (
            "/v2/registry.terraform.io/acme/foo/manifests/latest",
            404,
            "MANIFEST_UNKNOWN",
        ),
        (
            &format!("/v2/{REPO}/manifests/sha256:{}", "0".repeat(64)),
            404,
            "MANIFEST_UNKNOWN",
        ),
        (
            &format!("/v2/{REPO}/blobs/sha256:{}", "0".repeat(64)),
            404,
            "BLOB_UNKNOWN",
        ),
        (
            &format!("/v2/{REPO}/blobs/sha256:xyz"),
            400,
            "DIGEST_INVALID",
        ),
    ] {
        let got = get(&client, &mirror.root_url(path)).await;
        assert_eq!(got.status.as_u16(), status, "{path}: {}", got.text());
        assert_eq!(oci_code(&got), code, "{path}: {}", got.text());
    }

    // The tag: an index listing every platform, each manifest one zip layer.
    origin.reset_counts();
    let (index_digest, index, _) = document(&client, &mirror, REPO, "1.2.0_ent.1", INDEX).await;
    assert_eq!(index["mediaType"], INDEX);
    assert_eq!(index["artifactType"], "application/vnd.opentofu.provider");
    let entries = index["manifests"].as_array().unwrap();
    let mut listed: Vec<(String, String)> = entries
        .iter()
        .map(|e| {
            assert_eq!(
                e["artifactType"],
                "application/vnd.opentofu.provider-target"
            );
            assert_eq!(e["mediaType"], MANIFEST);
            assert!(e["platform"].get("os.version").is_none());
            (
                e["platform"]["os"].as_str().unwrap().to_string(),
                e["platform"]["architecture"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    listed.sort();
    let mut offered: Vec<(String, String)> = platforms()
        .iter()
        .map(|(o, a)| (o.to_string(), a.to_string()))
        .collect();
    offered.sort();
    offered.dedup();
    assert_eq!(listed, offered);
    assert_eq!(
        origin.count(RequestKind::Archive),
        offered.len(),
        "one HEAD per platform for its size, no download"
    );
    assert!(
        origin
            .requests()
            .iter()
            .filter(|r| r.kind == Some(RequestKind::Archive))
            .all(|r| r.method == "HEAD")
    );
    // The same index by its digest.
    let (_, by_digest, _) = document(&client, &mirror, REPO, &index_digest, INDEX).await;
    assert_eq!(by_digest, index);

    for entry in entries {
        let (os, arch) = (
            entry["platform"]["os"].as_str().unwrap(),
            entry["platform"]["architecture"].as_str().unwrap(),
        );
        let digest = entry["digest"].as_str().unwrap();
        let (_, manifest, bytes) = document(&client, &mirror, REPO, digest, MANIFEST).await;
        assert_eq!(bytes.len() as u64, entry["size"].as_u64().unwrap());
        assert_eq!(
            manifest["artifactType"],
            "application/vnd.opentofu.provider-target"
        );
        assert_eq!(manifest["config"]["digest"], EMPTY);
        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(layers[0]["mediaType"], "archive/zip");
        let zip = origin.archive("acme", "foo", "1.2.0+ent.1", os, arch);
        assert_eq!(
            layers[0]["digest"],
            format!(
                "sha256:{}",
                origin.sha256_hex("acme", "foo", "1.2.0+ent.1", os, arch)
            )
        );
        assert_eq!(layers[0]["size"].as_u64().unwrap(), zip.len() as u64);

        let blob = mirror.root_url(&format!(
            "/v2/{REPO}/blobs/{}",
            layers[0]["digest"].as_str().unwrap()
        ));
        let head = request(&client, Method::HEAD, &blob).await;
        assert_eq!(head.status, StatusCode::OK);
        assert_eq!(header(&head, "content-length"), zip.len().to_string());
        let got = get(&client, &blob).await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(got.body, zip, "{os}_{arch}: the origin's zip byte for byte");
        assert_eq!(
            header(&got, "docker-content-digest"),
            layers[0]["digest"].as_str().unwrap()
        );
    }
    let config = get(
        &client,
        &mirror.root_url(&format!("/v2/{REPO}/blobs/{EMPTY}")),
    )
    .await;
    assert_eq!(config.status, StatusCode::OK);
    assert_eq!(config.body, b"{}");

    // A provider whose registry sends the `packages` extension: sizes from it, no HEAD.
    origin.reset_counts();
    let (_, tofu, _) = document(
        &client,
        &mirror,
        "registry.terraform.io/acme/tofu",
        "3.0.0",
        INDEX,
    )
    .await;
    assert_eq!(tofu["manifests"].as_array().unwrap().len(), offered.len());
    assert_eq!(origin.count(RequestKind::Archive), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn documents_are_the_same_on_every_replica_and_after_a_restart() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let client = https_client(&ca, &[]);
    let mut a = TestMirror::start(&ca, &origin).await;
    let b = TestMirror::start(&ca, &origin).await;
    let (from_a, _, bytes_a) = document(&client, &a, REPO, "1.1.0", INDEX).await;
    let (from_b, _, bytes_b) = document(&client, &b, REPO, "1.1.0", INDEX).await;
    assert_eq!(from_a, from_b);
    assert_eq!(bytes_a, bytes_b);
    // Fetch one archive through a, then restart it on its cache: the size now comes from the
    // stored archive and the documents do not change.
    let (os, arch) = platforms()[0];
    let layer = format!(
        "sha256:{}",
        origin.sha256_hex("acme", "foo", "1.1.0", os, arch)
    );
    let got = get(&client, &a.root_url(&format!("/v2/{REPO}/blobs/{layer}"))).await;
    assert_eq!(got.status, StatusCode::OK);
    a.stop().await;
    let again = TestMirror::start_on(&ca, &origin, &a.cache_dir).await;
    let (after, _, _) = document(&client, &again, REPO, "1.1.0", INDEX).await;
    assert_eq!(after, from_a);
    // A request by digest on a fresh process finds what an earlier one rendered.
    let restarted = TestMirror::start_on(&ca, &origin, &a.cache_dir).await;
    let (by_digest, _, _) = document(&client, &restarted, REPO, &from_a, INDEX).await;
    assert_eq!(by_digest, from_a);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_stated_size_is_corrected_once_the_archive_is_stored() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    origin.set_fault(Fault::WrongPackageSize);
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let repo = "registry.terraform.io/acme/tofu";
    let (os, arch) = platforms()[0];
    let zip = origin.archive("acme", "tofu", "3.0.0", os, arch);
    let layer_of = |index: &Value| -> (String, u64) {
        let entry = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["platform"]["os"] == os && e["platform"]["architecture"] == arch)
            .unwrap()
            .clone();
        (entry["digest"].as_str().unwrap().to_string(), 0)
    };
    let (first, index, _) = document(&client, &mirror, repo, "3.0.0", INDEX).await;
    let (manifest_digest, _) = layer_of(&index);
    let (_, manifest, _) = document(&client, &mirror, repo, &manifest_digest, MANIFEST).await;
    assert_eq!(
        manifest["layers"][0]["size"].as_u64().unwrap(),
        zip.len() as u64 + 1,
        "as stated"
    );
    // The blob is the genuine archive; storing it corrects the record.
    let blob = get(
        &client,
        &mirror.root_url(&format!(
            "/v2/{repo}/blobs/{}",
            manifest["layers"][0]["digest"].as_str().unwrap()
        )),
    )
    .await;
    assert_eq!(blob.body, zip);
    // The correction lands just after the blob's body ends, so it can fall between a HEAD and
    // a GET: wait for it with GETs alone, then read the (now settled) documents.
    let tag = mirror.root_url(&format!("/v2/{repo}/manifests/3.0.0"));
    crate::support::poll(std::time::Duration::from_secs(10), async || {
        let got = get(&client, &tag).await;
        (header(&got, "docker-content-digest") != first).then_some(())
    })
    .await
    .expect("the index is rendered again with the true size");
    let (_, corrected, _) = document(&client, &mirror, repo, "3.0.0", INDEX).await;
    let (manifest_digest, _) = layer_of(&corrected);
    let (_, manifest, _) = document(&client, &mirror, repo, &manifest_digest, MANIFEST).await;
    assert_eq!(
        manifest["layers"][0]["size"].as_u64().unwrap(),
        zip.len() as u64
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_offline_mirror_serves_what_it_holds() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let client = https_client(&ca, &[]);
    let mut online = TestMirror::start(&ca, &origin).await;
    let (digest, index, _) = document(&client, &online, REPO, "1.0.0", INDEX).await;
    online.stop().await;
    let closed = "127.0.0.1:9".parse().unwrap();
    let offline = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            cache_dir: Some(&online.cache_dir),
            connect_to: Some(closed),
            extra_upstream: "offline = true",
            ..Default::default()
        },
    )
    .await;
    origin.reset_counts();
    let (again, _, _) = document(&client, &offline, REPO, "1.0.0", INDEX).await;
    assert_eq!(again, digest);
    // No archive is cached: blobs are unknown offline, as the network mirror's archives are.
    let layer = index["manifests"][0]["digest"].as_str().unwrap();
    let (_, manifest, _) = document(&client, &offline, REPO, layer, MANIFEST).await;
    let blob = get(
        &client,
        &offline.root_url(&format!(
            "/v2/{REPO}/blobs/{}",
            manifest["layers"][0]["digest"].as_str().unwrap()
        )),
    )
    .await;
    assert_eq!(blob.status, StatusCode::NOT_FOUND, "{}", blob.text());
    assert_eq!(oci_code(&blob), "BLOB_UNKNOWN");
    let other = get(
        &client,
        &offline.root_url(&format!("/v2/{REPO}/manifests/1.1.0")),
    )
    .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    assert_eq!(origin.total_requests(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_auth_the_bearer_challenge_takes_the_mirrors_tokens() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_toml: "[auth]\ntokens = [\"s3cret-token-for-tests\"]\nurl_signing_key = \"0123456789abcdef0123456789abcdef\"\n",
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let ping = get(&client, &mirror.root_url("/v2/")).await;
    assert_eq!(ping.status, StatusCode::UNAUTHORIZED);
    assert_eq!(oci_code(&ping), "UNAUTHORIZED");
    let realm = format!("{}v2/token", mirror.url);
    assert_eq!(
        header(&ping, "www-authenticate"),
        format!("Bearer realm=\"{realm}\",service=\"provender\"")
    );
    let tags_url = mirror.root_url(&format!("/v2/{REPO}/tags/list"));
    let denied = get(&client, &tags_url).await;
    assert_eq!(
        header(&denied, "www-authenticate"),
        format!("Bearer realm=\"{realm}\",service=\"provender\",scope=\"repository:{REPO}:pull\"")
    );

    // The token endpoint, as oras-go and skopeo call it: Basic credentials, scope and service.
    let token_url = format!("{realm}?service=provender&scope=repository:{REPO}:pull");
    let anonymous = get(&client, &token_url).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let wrong = crate::support::http::send(
        &token_url,
        client.get(&token_url).basic_auth("ci", Some("wrong")),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let granted = crate::support::http::send(
        &token_url,
        client
            .get(&token_url)
            .basic_auth("ci", Some("s3cret-token-for-tests")),
    )
    .await;
    assert_eq!(granted.status, StatusCode::OK, "{}", granted.text());
    let token = granted.json()["token"].as_str().unwrap().to_string();
    let tags =
        crate::support::http::send(&tags_url, client.get(&tags_url).bearer_auth(&token)).await;
    assert_eq!(tags.status, StatusCode::OK);
    assert_eq!(tags.json()["tags"][0], "1.0.0");

    // The real clients follow the challenge.
    let skopeo = Skopeo::new(&ca, &mirror);
    let listed = skopeo.run(&[
        "list-tags",
        "--creds",
        "ci:s3cret-token-for-tests",
        &skopeo.image(""),
    ]);
    assert!(listed.contains("1.2.0_ent.1"), "{listed}");
    let refused = skopeo.output(&["list-tags", "--creds", "ci:wrong", &skopeo.image("")]);
    assert!(!refused.status.success());
    let oras = Oras::new(&ca, &mirror).with_credentials("ci", "s3cret-token-for-tests");
    let pulled = oras.pull_platform("1.0.0", "linux", "amd64");
    assert_eq!(
        pulled.1,
        origin.archive("acme", "foo", "1.0.0", "linux", "amd64")
    );
}

/// skopeo (Debian's, containers/image) against the mirror, trusting the test CA.
struct Skopeo {
    host: String,
    certs: tempfile::TempDir,
    auth: PathBuf,
}

impl Skopeo {
    fn new(ca: &TestCa, mirror: &TestMirror) -> Skopeo {
        let certs = tempfile::tempdir().unwrap();
        std::fs::write(certs.path().join("ca.crt"), ca.ca_pem()).unwrap();
        let auth = certs.path().join("auth.json");
        std::fs::write(&auth, "{}").unwrap();
        Skopeo {
            host: format!("localhost:{}", mirror.url.port().unwrap()),
            certs,
            auth,
        }
    }

    /// `docker://<mirror>/<REPO><suffix>`.
    fn image(&self, suffix: &str) -> String {
        format!("docker://{}/{REPO}{suffix}", self.host)
    }

    fn output(&self, args: &[&str]) -> std::process::Output {
        let cert_dir = self.certs.path().to_str().unwrap();
        let mut full: Vec<&str> = vec!["--insecure-policy"];
        full.push(args[0]);
        match args[0] {
            "copy" => full.extend(["--src-cert-dir", cert_dir]),
            _ => full.extend(["--cert-dir", cert_dir]),
        }
        full.extend(&args[1..]);
        Command::new("skopeo")
            .args(&full)
            .env("REGISTRY_AUTH_FILE", &self.auth)
            .env("HOME", self.certs.path())
            .output()
            .expect("run skopeo (.ci/test installs it)")
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.output(args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "skopeo {args:?}:\n{text}");
        text
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn skopeo_lists_inspects_and_copies_a_provider() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let skopeo = Skopeo::new(&ca, &mirror);

    let listed: Value =
        serde_json::from_str(&skopeo.run(&["list-tags", &skopeo.image("")])).unwrap();
    assert_eq!(
        listed["Tags"],
        serde_json::json!(["1.0.0", "1.1.0", "1.2.0_ent.1"])
    );
    let raw = skopeo.run(&["inspect", "--raw", &skopeo.image(":1.0.0")]);
    let (digest, _, served) = document(&client, &mirror, REPO, "1.0.0", INDEX).await;
    assert_eq!(
        raw.trim_end().as_bytes(),
        &served[..],
        "skopeo sees the index as served"
    );

    for (os, arch) in [("linux", "amd64"), ("linux", "arm64")] {
        let out = tempfile::tempdir().unwrap();
        let layout = format!("oci:{}:foo", out.path().display());
        skopeo.run(&[
            "copy",
            "--override-os",
            os,
            "--override-arch",
            arch,
            &skopeo.image(":1.0.0"),
            &layout,
        ]);
        let zip = origin.archive("acme", "foo", "1.0.0", os, arch);
        let blob = out
            .path()
            .join("blobs/sha256")
            .join(origin.sha256_hex("acme", "foo", "1.0.0", os, arch));
        assert_eq!(std::fs::read(&blob).unwrap(), zip, "{os}_{arch}");
        // The copied manifest is the one the index names for that platform.
        let (_, index, _) = document(&client, &mirror, REPO, &digest, INDEX).await;
        let named = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["platform"]["os"] == os && e["platform"]["architecture"] == arch)
            .unwrap()["digest"]
            .as_str()
            .unwrap()
            .trim_start_matches("sha256:")
            .to_string();
        assert!(
            out.path().join("blobs/sha256").join(&named).exists(),
            "{os}_{arch}"
        );
    }
}

/// The `oras` Python client (oras-py, from PyPI) in the virtual environment `.ci/test` makes.
struct Oras {
    python: PathBuf,
    host: String,
    ca: tempfile::TempDir,
    credentials: Option<(String, String)>,
}

impl Oras {
    fn new(ca: &TestCa, mirror: &TestMirror) -> Oras {
        let python = std::env::var_os("ORAS_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-tools/oras/bin/python")
            });
        let dir = tempfile::tempdir().unwrap();
        ca.write_ca(dir.path());
        Oras {
            python,
            host: format!("localhost:{}", mirror.url.port().unwrap()),
            ca: dir,
            credentials: None,
        }
    }

    fn with_credentials(mut self, user: &str, password: &str) -> Oras {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// Runs a Python snippet with `client` (an `OrasClient` for the mirror) and `repo` defined;
    /// returns what it prints.
    fn run(&self, snippet: &str) -> String {
        let login = match &self.credentials {
            Some((u, p)) => format!("client.auth.set_basic_auth({u:?}, {p:?})\n"),
            None => String::new(),
        };
        let script = format!(
            "import json, sys, oras.client\nclient = oras.client.OrasClient(hostname={host:?}, tls_verify={ca:?})\n{login}repo = {repo:?}\n{snippet}",
            host = self.host,
            ca = self.ca.path().join("ca.pem").to_str().unwrap(),
            repo = format!("{}/{REPO}", self.host),
        );
        let out = Command::new(&self.python)
            .args(["-c", &script])
            .env("HOME", self.ca.path())
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "run {} ({e}): .ci/test installs oras",
                    self.python.display()
                )
            });
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "oras:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// Pulls one platform's manifest of `tag` the way oras users do (by the digest the index
    /// names); returns the pulled file's name and bytes.
    fn pull_platform(&self, tag: &str, os: &str, arch: &str) -> (String, Vec<u8>) {
        let out = tempfile::tempdir().unwrap();
        let printed = self.run(&format!(
            "index = client.get_manifest(f'{{repo}}:{tag}')\n\
             m = [e for e in index['manifests'] if e['platform'] == {{'os': {os:?}, 'architecture': {arch:?}}}]\n\
             assert len(m) == 1, index\n\
             files = client.pull(target=f\"{{repo}}@{{m[0]['digest']}}\", outdir={out:?})\n\
             print(json.dumps(files))\n",
            out = out.path().to_str().unwrap(),
        ));
        let files: Vec<String> = serde_json::from_str(printed.trim()).unwrap();
        assert_eq!(files.len(), 1, "{files:?}");
        let path = Path::new(&files[0]);
        (
            path.file_name().unwrap().to_str().unwrap().to_string(),
            std::fs::read(path).unwrap(),
        )
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn oras_lists_tags_and_pulls_a_platforms_zip() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let oras = Oras::new(&ca, &mirror);
    let tags: Vec<String> =
        serde_json::from_str(oras.run("print(json.dumps(client.get_tags(repo)))").trim()).unwrap();
    assert_eq!(tags, ["1.0.0", "1.1.0", "1.2.0_ent.1"]);
    for (os, arch) in [("linux", "amd64"), ("darwin", "arm64")] {
        let (name, bytes) = oras.pull_platform("1.1.0", os, arch);
        assert_eq!(
            name,
            format!("terraform-provider-foo_1.1.0_{os}_{arch}.zip")
        );
        assert_eq!(bytes, origin.archive("acme", "foo", "1.1.0", os, arch));
    }
}
