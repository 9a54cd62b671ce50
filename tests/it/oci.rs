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
//! - with `[auth]`, the bearer challenge and `/v2/token` take the mirror's own tokens;
//! - a module (`<host>/modules/<namespace>/<name>/<system>`, from an archive or from git) is an
//!   OpenTofu module artifact: one manifest with exactly the fields OpenTofu's `oci://`
//!   installer checks, whose one `archive/zip` layer holds the files `terraform init` installs
//!   through the module registry door, the same digests after a restart; skopeo and oras pull
//!   it; a cache-only client gets only cached modules, and no client a module outside its
//!   patterns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::support::http::{Got, get, request};
use crate::support::https_client;
use crate::support::origin::{FakeOrigin, Fault, ProviderSpec, RequestKind};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror, files_under};
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
    // The token is a registry token for the repository asked for, not the mirror's token: it
    // reads nothing else, at no other door, and a scope-less request still gets the token back.
    assert!(token.starts_with("pvo_"), "{token}");
    assert_ne!(token, "s3cret-token-for-tests");
    assert_eq!(granted.json()["expires_in"], 300);
    let other_url = mirror.root_url("/v2/registry.terraform.io/acme/other/tags/list");
    let other =
        crate::support::http::send(&other_url, client.get(&other_url).bearer_auth(&token)).await;
    assert_eq!(other.status, StatusCode::UNAUTHORIZED);
    assert!(
        header(&other, "www-authenticate")
            .contains("scope=\"repository:registry.terraform.io/acme/other:pull\""),
        "a new challenge for the other repository"
    );
    let index_url = mirror.url(&format!("{REPO}/index.json"));
    let elsewhere =
        crate::support::http::send(&index_url, client.get(&index_url).bearer_auth(&token)).await;
    assert_eq!(elsewhere.status, StatusCode::UNAUTHORIZED);
    let unscoped_url = format!("{realm}?service=provender");
    let unscoped = crate::support::http::send(
        &unscoped_url,
        client
            .get(&unscoped_url)
            .basic_auth("ci", Some("s3cret-token-for-tests")),
    )
    .await;
    assert_eq!(unscoped.json()["token"], "s3cret-token-for-tests");

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
    repo: String,
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
            repo: REPO.to_string(),
            certs,
            auth,
        }
    }

    /// The same, for another repository than [`REPO`].
    fn for_repo(mut self, repo: &str) -> Skopeo {
        self.repo = repo.to_string();
        self
    }

    /// `docker://<mirror>/<repo><suffix>`.
    fn image(&self, suffix: &str) -> String {
        format!("docker://{}/{}{suffix}", self.host, self.repo)
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
    repo: String,
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
            repo: REPO.to_string(),
            ca: dir,
            credentials: None,
        }
    }

    /// The same, for another repository than [`REPO`].
    fn for_repo(mut self, repo: &str) -> Oras {
        self.repo = repo.to_string();
        self
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
            repo = format!("{}/{}", self.host, self.repo),
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

// ---- Modules as OpenTofu `oci://` artifacts ----

const MODULE_ARTIFACT: &str = "application/vnd.opentofu.modulepkg";

/// The modules the origin serves: one from an archive, one from git.
async fn module_origin(ca: &TestCa) -> FakeOrigin {
    use crate::support::origin::{ModuleSource, ModuleSpec};
    FakeOrigin::start_with_modules(
        ca,
        &[REGISTRY],
        Vec::new(),
        vec![
            ModuleSpec::new("acme", "net", "test", &["1.0.0", "1.1.0+b.2"])
                .with_file("scripts/run.sh", "#!/bin/sh\necho hi\n"),
            ModuleSpec::new("acme", "gitmod", "test", &["1.0.0"])
                .source(ModuleSource::Git)
                .with_file("modules/extra/main.tf", "# a nested directory\n"),
        ],
    )
    .await
}

fn module_repo(name: &str) -> String {
    format!("{REGISTRY}/modules/acme/{name}/test")
}

/// Every file of a zip, name → content (directories left out).
fn unzip(bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    use std::io::Read;
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    let mut files = BTreeMap::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).unwrap();
        if entry.is_dir() {
            continue;
        }
        let mut body = Vec::new();
        entry.read_to_end(&mut body).unwrap();
        files.insert(entry.name().unwrap().to_string(), body);
    }
    files
}

/// A module's manifest by tag, checked field by field against what OpenTofu's `oci://`
/// installer requires; its digest, its layer's digest and size.
async fn module_manifest(
    client: &reqwest::Client,
    mirror: &TestMirror,
    repo: &str,
    tag: &str,
) -> (String, String, u64) {
    let (digest, manifest, bytes) = document(client, mirror, repo, tag, MANIFEST).await;
    assert!(bytes.len() <= 4 << 20);
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(manifest["mediaType"], MANIFEST);
    assert_eq!(manifest["artifactType"], MODULE_ARTIFACT);
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.oci.empty.v1+json"
    );
    assert_eq!(manifest["config"]["digest"], EMPTY);
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], "archive/zip");
    let keys: Vec<&String> = manifest.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "artifactType",
            "config",
            "layers",
            "mediaType",
            "schemaVersion"
        ]
    );
    (
        digest,
        layers[0]["digest"].as_str().unwrap().to_string(),
        layers[0]["size"].as_u64().unwrap(),
    )
}

/// A blob of `repo`, checked against its digest and size.
async fn blob(
    client: &reqwest::Client,
    mirror: &TestMirror,
    repo: &str,
    digest: &str,
    size: u64,
) -> Vec<u8> {
    let url = mirror.root_url(&format!("/v2/{repo}/blobs/{digest}"));
    let head = request(client, Method::HEAD, &url).await;
    assert_eq!(head.status, StatusCode::OK, "HEAD {url}");
    assert_eq!(header(&head, "content-length"), size.to_string());
    let got = get(client, &url).await;
    assert_eq!(got.status, StatusCode::OK, "GET {url}: {}", got.text());
    assert_eq!(header(&got, "docker-content-digest"), digest);
    assert_eq!(got.body.len() as u64, size);
    assert_eq!(format!("sha256:{}", sha256(&got.body)), digest);
    got.body
}

#[tokio::test(flavor = "multi_thread")]
async fn modules_are_opentofu_module_artifacts_holding_what_terraform_installs() {
    let ca = TestCa::new();
    let origin = module_origin(&ca).await;
    let mut mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);

    let tags = get(
        &client,
        &mirror.root_url(&format!("/v2/{}/tags/list", module_repo("net"))),
    )
    .await;
    assert_eq!(tags.status, StatusCode::OK);
    assert_eq!(
        tags.json(),
        serde_json::json!({"name": module_repo("net"), "tags": ["1.0.0", "1.1.0_b.2", "latest"]})
    );

    // terraform installs the same modules through the module registry door.
    let root = crate::support::tf_config::root_module(
        "module \"net\" {\n  source  = \"acme/net/test\"\n  version = \"1.1.0+b.2\"\n}\n\n\
         module \"git\" {\n  source  = \"acme/gitmod/test\"\n  version = \"1.0.0\"\n}\n",
    );
    let base = mirror.url.as_str();
    let terraform = crate::support::Terraform::new(
        &ca,
        &crate::support::tf_config::registry_host_with_modules(
            &format!("{base}v1/providers/{REGISTRY}/"),
            &format!("{base}v1/modules/{REGISTRY}/"),
        ),
    );
    terraform.init(root.path()).await.assert_success();

    let mut digests = Vec::new();
    for (call, name, tag) in [("net", "net", "1.1.0_b.2"), ("git", "gitmod", "1.0.0")] {
        let repo = module_repo(name);
        let (digest, layer, size) = module_manifest(&client, &mirror, &repo, tag).await;
        let zip = blob(&client, &mirror, &repo, &layer, size).await;
        let config = blob(&client, &mirror, &repo, EMPTY, 2).await;
        assert_eq!(config, b"{}");
        // By digest too, as OpenTofu asks for `?digest=`.
        let (again, _, _) = document(&client, &mirror, &repo, &digest, MANIFEST).await;
        assert_eq!(again, digest);

        let dir = root.path().join(".terraform/modules").join(call);
        let installed: BTreeMap<String, Vec<u8>> = files_under(&dir)
            .into_iter()
            .filter(|p| !p.components().any(|c| c.as_os_str() == ".git"))
            .map(|p| {
                let rel = p.strip_prefix(&dir).unwrap().to_str().unwrap().to_owned();
                (rel, std::fs::read(&p).unwrap())
            })
            .collect();
        assert!(installed.len() > 1, "{installed:?}");
        assert_eq!(
            unzip(&zip),
            installed,
            "{name}: the layer holds what terraform installs"
        );
        digests.push((repo, tag, digest, layer));
    }
    // `latest` (what a source without `?tag=` asks for) is the newest version.
    let (latest, _, _) = module_manifest(&client, &mirror, &module_repo("net"), "latest").await;
    assert_eq!(latest, digests[0].2);
    // The script keeps its mode.
    let (_, layer, size) =
        module_manifest(&client, &mirror, &module_repo("net"), "1.1.0_b.2").await;
    let zip = blob(&client, &mirror, &module_repo("net"), &layer, size).await;
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(zip)).unwrap();
    let mode = zip.by_name("scripts/run.sh").unwrap().unix_mode().unwrap();
    let installed =
        std::fs::metadata(root.path().join(".terraform/modules/net/scripts/run.sh")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        mode & 0o111 != 0,
        installed.permissions().mode() & 0o111 != 0
    );

    // After a restart on the same cache: the same documents, from the cache alone.
    mirror.stop().await;
    let before = origin.total_requests();
    let restarted = TestMirror::start_on(&ca, &origin, &mirror.cache_dir).await;
    for (repo, tag, digest, layer) in &digests {
        let (after, after_layer, size) = module_manifest(&client, &restarted, repo, tag).await;
        assert_eq!((&after, &after_layer), (digest, layer));
        let (by_digest, _, _) = document(&client, &restarted, repo, digest, MANIFEST).await;
        assert_eq!(&by_digest, digest);
        blob(&client, &restarted, repo, layer, size).await;
    }
    assert_eq!(
        origin.count(RequestKind::ModuleArchive),
        1,
        "the archive was fetched once, before the restart"
    );
    assert_eq!(
        origin.total_requests(),
        before,
        "nothing asked of the origin after the restart"
    );

    // What names nothing is an OCI error.
    let unknown = get(
        &client,
        &restarted.root_url(&format!(
            "/v2/{}/blobs/sha256:{}",
            module_repo("net"),
            "0".repeat(64)
        )),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(oci_code(&unknown), "BLOB_UNKNOWN");
    let other = get(
        &client,
        &restarted.root_url(&format!("/v2/{}/manifests/9.9.9", module_repo("net"))),
    )
    .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND, "{}", other.text());
    assert_eq!(oci_code(&other), "MANIFEST_UNKNOWN");
}

#[tokio::test(flavor = "multi_thread")]
async fn skopeo_and_oras_pull_a_module() {
    let ca = TestCa::new();
    let origin = module_origin(&ca).await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let repo = module_repo("net");

    let skopeo = Skopeo::new(&ca, &mirror).for_repo(&repo);
    let listed: Value =
        serde_json::from_str(&skopeo.run(&["list-tags", &skopeo.image("")])).unwrap();
    assert_eq!(
        listed["Tags"],
        serde_json::json!(["1.0.0", "1.1.0_b.2", "latest"])
    );
    let raw = skopeo.run(&["inspect", "--raw", &skopeo.image(":1.0.0")]);
    let (digest, _, served) = document(&client, &mirror, &repo, "1.0.0", MANIFEST).await;
    assert_eq!(
        raw.trim_end().as_bytes(),
        &served[..],
        "skopeo sees the manifest as served"
    );
    let (_, layer, _) = module_manifest(&client, &mirror, &repo, "1.0.0").await;
    let out = tempfile::tempdir().unwrap();
    skopeo.run(&[
        "copy",
        &skopeo.image(":1.0.0"),
        &format!("dir:{}", out.path().display()),
    ]);
    let copied = std::fs::read(out.path().join(layer.trim_start_matches("sha256:"))).unwrap();
    assert_eq!(format!("sha256:{}", sha256(&copied)), layer);
    assert_eq!(
        std::fs::read(out.path().join("manifest.json")).unwrap(),
        served,
        "the copied manifest is the one served ({digest})"
    );
    let files = unzip(&copied);
    assert_eq!(files["VERSION"], b"1.0.0\n");

    let oras = Oras::new(&ca, &mirror).for_repo(&repo);
    let tags: Vec<String> =
        serde_json::from_str(oras.run("print(json.dumps(client.get_tags(repo)))").trim()).unwrap();
    assert_eq!(tags, ["1.0.0", "1.1.0_b.2", "latest"]);
    let pulled = tempfile::tempdir().unwrap();
    let printed = oras.run(&format!(
        "files = client.pull(target=f'{{repo}}:1.0.0', outdir={:?})\nprint(json.dumps(files))\n",
        pulled.path().to_str().unwrap()
    ));
    let files: Vec<String> = serde_json::from_str(printed.trim()).unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    let path = Path::new(&files[0]);
    assert_eq!(path.file_name().unwrap(), "net-test-1.0.0.zip");
    assert_eq!(std::fs::read(path).unwrap(), copied);
}

#[tokio::test(flavor = "multi_thread")]
async fn module_repositories_follow_the_module_doors_rules() {
    let ca = TestCa::new();
    let origin = module_origin(&ca).await;
    let toml = platform_and_readers_toml(&format!("modules = [\"{REGISTRY}/acme/net/*\"]"));
    let mirror = TestMirror::start_with_toml(&ca, &origin, &toml).await;
    let client = https_client(&ca, &[]);
    let as_client = |path: String, token: &'static str| {
        let url = mirror.root_url(&format!("/v2/{path}"));
        let req = client.get(&url).bearer_auth(token);
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status();
            let body = resp.bytes().await.unwrap().to_vec();
            (status, body)
        }
    };
    let code = |body: &[u8]| -> String {
        let json: Value = serde_json::from_slice(body).unwrap();
        json["errors"][0]["code"].as_str().unwrap().to_string()
    };
    let net = module_repo("net");

    // Nothing cached: a cache-only reader may not cause a fetch.
    let (status, body) =
        as_client(format!("{net}/manifests/1.0.0"), "ci-token-0123456789abc").await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(code(&body), "DENIED");
    assert_eq!(origin.count(RequestKind::ModuleArchive), 0);
    // A module outside its patterns is refused.
    let (status, body) = as_client(
        format!("{}/tags/list", module_repo("gitmod")),
        "ci-token-0123456789abc",
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        String::from_utf8_lossy(&body).contains("does not let ci get module"),
        "{}",
        String::from_utf8_lossy(&body)
    );

    // The platform team pulls 1.0.0; then the reader gets it, and sees only cached versions.
    let (status, manifest) = as_client(
        format!("{net}/manifests/1.0.0"),
        "platform-token-0123456789",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, again) =
        as_client(format!("{net}/manifests/1.0.0"), "ci-token-0123456789abc").await;
    assert_eq!((status, &again), (StatusCode::OK, &manifest));
    let layer: Value = serde_json::from_slice(&manifest).unwrap();
    let layer = layer["layers"][0]["digest"].as_str().unwrap().to_string();
    let (status, _) = as_client(format!("{net}/blobs/{layer}"), "ci-token-0123456789abc").await;
    assert_eq!(status, StatusCode::OK);
    let (status, tags) = as_client(format!("{net}/tags/list"), "ci-token-0123456789abc").await;
    assert_eq!(status, StatusCode::OK);
    let tags: Value = serde_json::from_slice(&tags).unwrap();
    assert_eq!(tags["tags"], serde_json::json!(["1.0.0", "latest"]));
    // For it, `latest` is the newest cached version.
    let (status, latest) =
        as_client(format!("{net}/manifests/latest"), "ci-token-0123456789abc").await;
    assert_eq!((status, &latest), (StatusCode::OK, &manifest));
    let (status, _) = as_client(
        format!("{net}/manifests/1.1.0_b.2"),
        "ci-token-0123456789abc",
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(origin.count(RequestKind::ModuleArchive), 1);
}

/// A module's zip is a stored object like any: `provender verify` re-hashes it and quarantines
/// one that no longer matches its record, and the next request makes it again from the package,
/// byte for byte the same; `provender prune` removes it with its package.
#[tokio::test(flavor = "multi_thread")]
async fn module_zips_are_verified_remade_and_pruned_with_their_package() {
    use crate::support::cli::{config_file, path_str, provender};
    let ca = TestCa::new();
    let origin = module_origin(&ca).await;
    let mut mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let repo = module_repo("net");
    let (digest, layer, size) = module_manifest(&client, &mirror, &repo, "1.0.0").await;
    let zip = blob(&client, &mirror, &repo, &layer, size).await;
    mirror.stop().await;

    let cache = mirror.cache_dir.clone();
    let cfg = config_file(
        mirror.dir.path(),
        "cli.toml",
        &cache,
        origin.addr(),
        &ca,
        "",
    );
    let cfg = path_str(&cfg);
    let stored = cache
        .join("modules")
        .join(REGISTRY)
        .join("acme/net/test/1.0.0/module.zip");
    let clean = provender(&["verify", "--config", cfg]).await;
    clean.ok();
    assert!(
        clean.stdout.contains("module zips checked"),
        "{}",
        clean.stdout
    );
    let mut bytes = std::fs::read(&stored).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&stored, bytes).unwrap();
    let found = provender(&["verify", "--config", cfg]).await;
    found.fails(1);
    assert!(
        found
            .stdout
            .contains("1 module zips checked, 0 ok, 1 failed"),
        "{}",
        found.stdout
    );
    assert!(
        found.stdout.contains("1.0.0: SHA-256 is"),
        "{}",
        found.stdout
    );
    assert!(
        found.stdout.contains("/module.zip."),
        "quarantined: {}",
        found.stdout
    );
    assert!(!stored.exists());

    // Made again from the package: the same digests.
    let restarted = TestMirror::start_on(&ca, &origin, &cache).await;
    let (again, again_layer, _) = module_manifest(&client, &restarted, &repo, "1.0.0").await;
    assert_eq!((again, &again_layer), (digest, &layer));
    assert_eq!(blob(&client, &restarted, &repo, &layer, size).await, zip);
    assert!(stored.exists());
    drop(restarted);

    // Unused for a second: pruned with its package.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let pruned = provender(&["prune", "--config", cfg, "--unused-for", "1s"]).await;
    pruned.ok();
    assert!(!stored.exists(), "{}", pruned.out());
    assert!(!stored.with_file_name("module.tar.gz").exists());
}

/// A package whose module sits in a subdirectory (the registry answer's `//subdir`, here a
/// GitHub-style top directory and a git repository's `modules/inner`) is served over OCI as
/// that directory: the layer skopeo copies holds the module's `.tf` files at its root, exactly
/// the files `terraform init` loads as the module through the module door.
#[tokio::test(flavor = "multi_thread")]
async fn a_module_in_a_subdirectory_is_its_directory_over_oci() {
    use crate::support::origin::{ModuleSource, ModuleSpec};
    let ca = TestCa::new();
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY],
        Vec::new(),
        vec![
            ModuleSpec::new("acme", "multi", "test", &["1.0.0"]).source(ModuleSource::Subdir(
                "acme-terraform-aws-multi-1a2b3c4".to_owned(),
            )),
            ModuleSpec::new("acme", "gitsub", "test", &["1.0.0"])
                .source(ModuleSource::GitSubdir("modules/inner".to_owned()))
                .with_file("nested/extra.tf", "# nested in the module\n"),
        ],
    )
    .await;
    let mut mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let root = crate::support::tf_config::root_module(
        "module \"multi\" {\n  source  = \"acme/multi/test\"\n  version = \"1.0.0\"\n}\n\n\
         module \"gitsub\" {\n  source  = \"acme/gitsub/test\"\n  version = \"1.0.0\"\n}\n",
    );
    let base = mirror.url.as_str();
    let terraform = crate::support::Terraform::new(
        &ca,
        &crate::support::tf_config::registry_host_with_modules(
            &format!("{base}v1/providers/{REGISTRY}/"),
            &format!("{base}v1/modules/{REGISTRY}/"),
        ),
    );
    terraform.init(root.path()).await.assert_success();
    // Where terraform loads each module from (its modules.json).
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(root.path().join(".terraform/modules/modules.json")).unwrap(),
    )
    .unwrap();
    for (name, subdir) in [
        ("multi", "acme-terraform-aws-multi-1a2b3c4"),
        ("gitsub", "modules/inner"),
    ] {
        let dir = manifest["Modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["Key"] == name)
            .and_then(|m| m["Dir"].as_str())
            .unwrap_or_else(|| panic!("{name} in {manifest}"))
            .to_string();
        assert!(dir.ends_with(subdir), "{dir}");
        let dir = root.path().join(dir);
        let loaded: BTreeMap<String, Vec<u8>> = files_under(&dir)
            .into_iter()
            .map(|p| {
                let rel = p.strip_prefix(&dir).unwrap().to_str().unwrap().to_owned();
                (rel, std::fs::read(&p).unwrap())
            })
            .collect();
        assert_eq!(loaded, origin.module_files("acme", name, "test", "1.0.0"));

        let repo = module_repo(name);
        let (_, layer, size) = module_manifest(&client, &mirror, &repo, "1.0.0").await;
        let zip = blob(&client, &mirror, &repo, &layer, size).await;
        let files = unzip(&zip);
        assert!(files.contains_key("main.tf"), "{name}: {:?}", files.keys());
        assert_eq!(files, loaded, "{name}: the layer is the module's directory");

        // A real OCI client sees the same.
        let skopeo = Skopeo::new(&ca, &mirror).for_repo(&repo);
        let out = tempfile::tempdir().unwrap();
        skopeo.run(&[
            "copy",
            &skopeo.image(":1.0.0"),
            &format!("dir:{}", out.path().display()),
        ]);
        let copied = std::fs::read(out.path().join(layer.trim_start_matches("sha256:"))).unwrap();
        assert_eq!(unzip(&copied), loaded, "{name}: as skopeo copies it");
    }

    // A zip kept from before zips were rooted at the subdirectory (its record names none) is
    // made again, not served.
    let repo = module_repo("multi");
    let (_, layer, size) = module_manifest(&client, &mirror, &repo, "1.0.0").await;
    mirror.stop().await;
    let dir = mirror
        .cache_dir
        .join("modules")
        .join(REGISTRY)
        .join("acme/multi/test/1.0.0");
    let record_path = dir.join("module.zip.json");
    let mut record: Value = serde_json::from_slice(&std::fs::read(&record_path).unwrap()).unwrap();
    assert_eq!(record["subdir"], "acme-terraform-aws-multi-1a2b3c4");
    let old = b"a zip of the whole package".to_vec();
    record.as_object_mut().unwrap().remove("subdir");
    record["sha256"] = Value::String(sha256(&old));
    record["size"] = Value::from(old.len());
    std::fs::write(dir.join("module.zip"), &old).unwrap();
    std::fs::write(&record_path, serde_json::to_vec(&record).unwrap()).unwrap();
    let restarted = TestMirror::start_on(&ca, &origin, &mirror.cache_dir).await;
    let (_, again, _) = module_manifest(&client, &restarted, &repo, "1.0.0").await;
    assert_eq!(again, layer, "made again from the package");
    let zip = blob(&client, &restarted, &repo, &layer, size).await;
    assert!(unzip(&zip).contains_key("main.tf"));
}

/// A provider's tag asked for by a cache-only client (`fill = false`) whose version record is
/// cached but whose archives are not: no origin request at all (no `HEAD` for a size, no
/// download), a clear `DENIED`; once a client that may fill resolved it, the cache-only client
/// gets the same index from the cache, and its layers only where the archive is cached.
#[tokio::test(flavor = "multi_thread")]
async fn a_cache_only_clients_oci_requests_never_reach_the_origin() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let toml = platform_and_readers_toml("");
    let mirror = TestMirror::start_with_toml(&ca, &origin, &toml).await;
    let client = https_client(&ca, &[]);
    let send = |url: String, method: Method, token: &'static str| {
        let req = client.request(method, &url).bearer_auth(token);
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status();
            (status, resp.bytes().await.unwrap().to_vec())
        }
    };
    let (ci, platform) = ("ci-token-0123456789abc", "platform-token-0123456789");
    // The version record is cached (a network mirror client asked), no archive is.
    let (status, _) = send(
        mirror.url(&format!("{REGISTRY}/acme/foo/1.0.0.json")),
        Method::GET,
        platform,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(mirror.cached_archives().is_empty());
    origin.reset_counts();

    let tag = mirror.root_url(&format!("/v2/{REPO}/manifests/1.0.0"));
    for method in [Method::HEAD, Method::GET] {
        let (status, body) = send(tag.clone(), method.clone(), ci).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method}");
        if method == Method::GET {
            let json: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(json["errors"][0]["code"], "DENIED", "{json}");
            let message = json["errors"][0]["message"].as_str().unwrap();
            assert!(message.contains("not in the cache"), "{message}");
        }
    }
    assert_eq!(
        origin.total_requests(),
        0,
        "a cache-only client asks the origin nothing: {:?}",
        origin.requests()
    );

    // Resolved by a client that may fill (sizes by HEAD, no download): the reader gets the
    // same index, from the cache.
    let (status, index) = send(tag.clone(), Method::GET, platform).await;
    assert_eq!(status, StatusCode::OK);
    assert!(mirror.cached_archives().is_empty(), "sizes by HEAD only");
    origin.reset_counts();
    let (status, again) = send(tag.clone(), Method::GET, ci).await;
    assert_eq!((status, &again), (StatusCode::OK, &index));
    // Its layers are archives that are not cached: refused, without a request.
    let index: Value = serde_json::from_slice(&index).unwrap();
    let manifest = index["manifests"][0]["digest"].as_str().unwrap();
    let (status, manifest) = send(
        mirror.root_url(&format!("/v2/{REPO}/manifests/{manifest}")),
        Method::GET,
        ci,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let manifest: Value = serde_json::from_slice(&manifest).unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    let blob_url = mirror.root_url(&format!("/v2/{REPO}/blobs/{layer}"));
    for method in [Method::HEAD, Method::GET] {
        let (status, _) = send(blob_url.clone(), method.clone(), ci).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method}");
    }
    assert_eq!(origin.total_requests(), 0, "{:?}", origin.requests());
    assert!(mirror.cached_archives().is_empty());
}

/// Counts the times a directory is opened (listed), by inotify.
struct DirectoryOpens {
    fd: i32,
}

impl DirectoryOpens {
    fn watch(dir: &Path) -> DirectoryOpens {
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: plain system calls on a descriptor this value owns.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(fd >= 0, "inotify_init1");
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: `path` is a valid C string for the call's duration.
        let wd = unsafe { libc::inotify_add_watch(fd, path.as_ptr(), libc::IN_OPEN) };
        assert!(wd >= 0, "inotify_add_watch {}", dir.display());
        DirectoryOpens { fd }
    }

    /// The opens seen since the last call.
    fn take(&self) -> usize {
        let mut buf = vec![0u8; 64 * 1024];
        let mut seen = 0;
        loop {
            // SAFETY: `buf` is writable for its whole length.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return seen;
            }
            let mut at = 0;
            while at < n as usize {
                // SAFETY: the kernel wrote whole events; read without alignment assumptions.
                let event: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf.as_ptr().add(at).cast()) };
                seen += 1;
                at += std::mem::size_of::<libc::inotify_event>() + event.len as usize;
            }
        }
    }
}

impl Drop for DirectoryOpens {
    fn drop(&mut self) {
        // SAFETY: the descriptor is this value's own.
        unsafe { libc::close(self.fd) };
    }
}

/// Module lookups by digest go through a digest index: a made-up digest (manifest or blob)
/// costs no listing of the module's versions, a genuine one is found on a restarted server
/// from the index alone, and the answer is still checked against the version's zip.
#[tokio::test(flavor = "multi_thread")]
async fn module_digests_are_looked_up_in_an_index() {
    let ca = TestCa::new();
    let origin = module_origin(&ca).await;
    let mut mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let repo = module_repo("net");
    let mut known = Vec::new();
    for tag in ["1.0.0", "1.1.0_b.2"] {
        let (digest, layer, size) = module_manifest(&client, &mirror, &repo, tag).await;
        blob(&client, &mirror, &repo, &layer, size).await;
        known.push((digest, layer, size));
    }
    let module_dir = mirror
        .cache_dir
        .join("modules")
        .join(REGISTRY)
        .join("acme/net/test");
    let opens = DirectoryOpens::watch(&module_dir);
    // A listing is seen.
    std::fs::read_dir(&module_dir).unwrap().for_each(drop);
    assert!(opens.take() > 0, "inotify sees a listing");
    for i in 0..10 {
        let made_up = format!("sha256:{}", sha256(format!("made up {i}").as_bytes()));
        for path in ["manifests", "blobs"] {
            let url = mirror.root_url(&format!("/v2/{repo}/{path}/{made_up}"));
            let got = get(&client, &url).await;
            assert_eq!(got.status, StatusCode::NOT_FOUND, "{url}");
            let code = if path == "blobs" {
                "BLOB_UNKNOWN"
            } else {
                "MANIFEST_UNKNOWN"
            };
            assert_eq!(oci_code(&got), code);
        }
    }
    assert_eq!(opens.take(), 0, "made-up digests list nothing");
    for (digest, layer, size) in &known {
        let (by_digest, _, _) = document(&client, &mirror, &repo, digest, MANIFEST).await;
        assert_eq!(&by_digest, digest);
        blob(&client, &mirror, &repo, layer, *size).await;
    }
    assert_eq!(opens.take(), 0, "genuine digests list nothing either");

    // After a restart, by digest first (another replica resolved the tags): from the index.
    mirror.stop().await;
    let restarted = TestMirror::start_on(&ca, &origin, &mirror.cache_dir).await;
    for (digest, layer, size) in &known {
        let (by_digest, _, _) = document(&client, &restarted, &repo, digest, MANIFEST).await;
        assert_eq!(&by_digest, digest);
        blob(&client, &restarted, &repo, layer, *size).await;
    }
}

/// Module zips count against `cache.max_size` like archives, whoever made them: a cache-only
/// client asking for the OCI artifacts of cached packages cannot grow the cache past it; the
/// least recently used zip is evicted and made again, byte for byte, when next asked for.
#[tokio::test(flavor = "multi_thread")]
async fn module_zips_count_against_the_cache_size() {
    use crate::support::origin::ModuleSpec;
    let ca = TestCa::new();
    // 700 KiB that do not compress: two zips are more than 1 MiB.
    let mut noise = Vec::with_capacity(700 << 10);
    let mut block = sha256(b"noise");
    while noise.len() < 700 << 10 {
        block = sha256(block.as_bytes());
        noise.extend_from_slice(&hex::decode(&block).unwrap());
    }
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY],
        Vec::new(),
        vec![
            ModuleSpec::new("acme", "big", "test", &["1.0.0", "2.0.0"])
                .with_file("blob.bin", noise),
        ],
    )
    .await;
    let toml = platform_and_readers_toml("");
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_cache: "max_size = \"1 MiB\"",
            extra_toml: &toml,
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let get_as = |url: String, token: &'static str| {
        let req = client.get(&url).bearer_auth(token);
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status();
            (status, resp.bytes().await.unwrap().to_vec())
        }
    };
    let (ci, platform) = ("ci-token-0123456789abc", "platform-token-0123456789");
    // The platform team caches both packages through the module door (no zip yet).
    for version in ["1.0.0", "2.0.0"] {
        let (status, _) = get_as(
            mirror.url(&format!(
                "v1/modules/{REGISTRY}/acme/big/test/{version}/module.tar.gz"
            )),
            platform,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
    }
    let zip_of = |version: &str| {
        mirror
            .cache_dir
            .join("modules")
            .join(REGISTRY)
            .join(format!("acme/big/test/{version}/module.zip"))
    };
    let repo = module_repo("big");
    let layer_of = async |version: &str| {
        let (status, manifest) = get_as(
            mirror.root_url(&format!("/v2/{repo}/manifests/{version}")),
            ci,
        )
        .await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&manifest)
        );
        let manifest: Value = serde_json::from_slice(&manifest).unwrap();
        manifest["layers"][0]["digest"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // The cache-only reader makes the first zip, then the second: the first is evicted.
    let first = layer_of("1.0.0").await;
    let (status, first_zip) =
        get_as(mirror.root_url(&format!("/v2/{repo}/blobs/{first}")), ci).await;
    assert_eq!(status, StatusCode::OK);
    assert!(first_zip.len() > 600 << 10, "{}", first_zip.len());
    assert!(zip_of("1.0.0").exists());
    let second = layer_of("2.0.0").await;
    assert!(zip_of("2.0.0").exists());
    assert!(
        !zip_of("1.0.0").exists(),
        "the least recently used zip is evicted past cache.max_size"
    );
    // The packages stay; the evicted zip is made again, the same bytes.
    assert!(zip_of("1.0.0").with_file_name("module.tar.gz").exists());
    assert_eq!(layer_of("1.0.0").await, first);
    let (status, again) = get_as(mirror.root_url(&format!("/v2/{repo}/blobs/{first}")), ci).await;
    assert_eq!((status, &again), (StatusCode::OK, &first_zip));
    assert!(!zip_of("2.0.0").exists(), "{second} was evicted in turn");
    assert_eq!(origin.count(RequestKind::ModuleArchive), 2);
}

/// Two clients: `platform`, who may do anything, and `ci`, a cache-only reader (`fill = false`)
/// whose rule also holds `reader_keys`.
fn platform_and_readers_toml(reader_keys: &str) -> String {
    format!(
        r#"[auth]
url_signing_key = "{key}"

[[auth.clients]]
name = "platform"
token = "platform-token-0123456789"

[[auth.clients]]
name = "ci"
token = "ci-token-0123456789abc"

[[auth.rules]]
name = "platform-team"
clients = "platform"

[[auth.rules]]
name = "readers"
clients = "*"
fill = false
{reader_keys}
"#,
        key = "k".repeat(40),
    )
}
