//! Smoke tests for the fake origin registry in `support::origin`, so that tests built on it
//! fail for the product's reasons, not the fixture's:
//!
//! - discovery, versions, download metadata, SHA256SUMS and archives agree with each other;
//! - unknown providers, versions, platforms and paths answer 404;
//! - archives are deterministic zips with an executable (and optional directory entries);
//! - counters, the request log, HTTP/2 and every [`Fault`];
//! - the real terraform CLI installs from it (metadata, zips and signature all accepted).

use std::time::{Duration, Instant};

use http::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use url::Url;

use crate::support::origin::{FakeOrigin, Fault, ProviderSpec, RequestKind};
use crate::support::pki::TestCa;
use crate::support::{Terraform, https_client, within};

const HOST: &str = "registry.terraform.io";

fn specs() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new(
            "acme",
            "foo",
            &["1.0.0", "1.1.0"],
            &[("linux", "amd64"), ("darwin", "arm64")],
        ),
        ProviderSpec::new("acme", "dirs", &["0.1.0"], &[("linux", "amd64")]),
    ]
}

/// A CA, an origin serving [`specs`] as `registry.terraform.io`, and a client reaching it.
async fn start() -> (TestCa, FakeOrigin, reqwest::Client) {
    let ca = TestCa::new();
    let origin = FakeOrigin::start(&ca, &[HOST], specs()).await;
    let client = https_client(&ca, &[(HOST, origin.addr())]);
    (ca, origin, client)
}

fn url(path: &str) -> String {
    format!("https://{HOST}{path}")
}

async fn get(client: &reqwest::Client, url: &str) -> reqwest::Response {
    within(url, client.get(url).send())
        .await
        .unwrap_or_else(|err| panic!("GET {url}: {err}"))
}

async fn get_bytes(client: &reqwest::Client, url: &str) -> (StatusCode, Vec<u8>) {
    let response = get(client, url).await;
    let status = response.status();
    let body = within(url, response.bytes()).await.expect("read body");
    (status, body.to_vec())
}

async fn get_json(client: &reqwest::Client, url: &str) -> (StatusCode, Value) {
    let (status, body) = get_bytes(client, url).await;
    let value = serde_json::from_slice(&body).unwrap_or_else(|err| {
        panic!(
            "{url}: not JSON ({err}): {}",
            String::from_utf8_lossy(&body)
        )
    });
    (status, value)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_protocol_round_trip() {
    let (_ca, origin, client) = start().await;

    let discovery_url = url("/.well-known/terraform.json");
    let response = get(&client, &discovery_url).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body = within("discovery body", response.bytes()).await.unwrap();
    let discovery: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(discovery, json!({ "providers.v1": "/v1/providers/" }));

    // Resolve the way terraform does: relative to the discovery document.
    let base = Url::parse(&discovery_url)
        .unwrap()
        .join(discovery["providers.v1"].as_str().unwrap())
        .unwrap();
    let (status, versions) =
        get_json(&client, base.join("acme/foo/versions").unwrap().as_str()).await;
    assert_eq!(status, StatusCode::OK);
    let listed: Vec<&str> = versions["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["1.0.0", "1.1.0"]);
    assert_eq!(versions["versions"][0]["protocols"], json!(["5.0"]));
    assert_eq!(
        versions["versions"][0]["platforms"],
        json!([{ "os": "linux", "arch": "amd64" }, { "os": "darwin", "arch": "arm64" }])
    );

    let download_url = base.join("acme/foo/1.0.0/download/linux/amd64").unwrap();
    let (status, meta) = get_json(&client, download_url.as_str()).await;
    assert_eq!(status, StatusCode::OK);
    let filename = "terraform-provider-foo_1.0.0_linux_amd64.zip";
    assert_eq!(meta["protocols"], json!(["5.0"]));
    assert_eq!(
        (meta["os"].as_str(), meta["arch"].as_str()),
        (Some("linux"), Some("amd64"))
    );
    assert_eq!(meta["filename"], filename);
    let shasum = meta["shasum"].as_str().unwrap();
    assert_eq!(
        shasum,
        origin.sha256_hex("acme", "foo", "1.0.0", "linux", "amd64")
    );
    let key = &meta["signing_keys"]["gpg_public_keys"][0];
    assert_eq!(key["key_id"], origin.key_id());
    assert!(
        key["key_id"]
            .as_str()
            .unwrap()
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase())
    );
    assert!(
        key["ascii_armor"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    );
    for field in ["download_url", "shasums_url", "shasums_signature_url"] {
        let value = meta[field].as_str().unwrap();
        assert!(
            value.starts_with("/files/acme/foo/1.0.0/"),
            "{field} = {value}"
        );
    }

    // Relative URLs resolve against the metadata URL, so the host name stays ours.
    let resolve = |field: &str| download_url.join(meta[field].as_str().unwrap()).unwrap();
    assert_eq!(resolve("download_url").host_str(), Some(HOST));
    let (status, sums) = get_bytes(&client, resolve("shasums_url").as_str()).await;
    assert_eq!(status, StatusCode::OK);
    let sums = String::from_utf8(sums).unwrap();
    assert_eq!(sums.as_bytes(), origin.shasums("acme", "foo", "1.0.0"));
    assert!(sums.contains(&format!("{shasum}  {filename}\n")), "{sums}");
    let names: Vec<&str> = sums
        .lines()
        .map(|l| l.split_once("  ").unwrap().1)
        .collect();
    assert_eq!(
        names,
        ["terraform-provider-foo_1.0.0_darwin_arm64.zip", filename],
        "one line per platform, sorted by file name"
    );

    let (status, signature) = get_bytes(&client, resolve("shasums_signature_url").as_str()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(signature[0] & 0x80 != 0, "binary OpenPGP packet expected");
    assert_eq!(signature, origin.shasums_signature("acme", "foo", "1.0.0"));

    let response = get(&client, resolve("download_url").as_str()).await;
    assert_eq!(response.headers()["content-type"], "application/zip");
    let length = response.content_length();
    let archive = within("archive body", response.bytes()).await.unwrap();
    assert_eq!(length, Some(archive.len() as u64));
    assert_eq!(sha256_hex(&archive), shasum);
    assert_eq!(
        archive,
        origin.archive("acme", "foo", "1.0.0", "linux", "amd64")
    );

    for kind in RequestKind::ALL {
        assert_eq!(origin.count(kind), 1, "{kind:?}");
    }
    assert_eq!(origin.total_requests(), 6);
    let requests = origin.requests();
    assert_eq!(requests.len(), 6);
    assert!(
        requests
            .iter()
            .all(|r| r.host.as_deref().is_some_and(|h| h.starts_with(HOST))),
        "{requests:?}"
    );
    origin.reset_counts();
    assert_eq!(origin.total_requests(), 0);
    assert_eq!(origin.count(RequestKind::Archive), 0);
    assert!(origin.requests().is_empty());
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_things_are_not_found() {
    let (_ca, origin, client) = start().await;

    let (status, body) = get_json(&client, &url("/v1/providers/acme/nope/versions")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({ "errors": ["Not Found"] }));
    for path in [
        "/v1/providers/acme/foo/9.9.9/download/linux/amd64",
        "/v1/providers/acme/foo/1.0.0/download/windows/amd64",
        "/files/acme/foo/1.0.0/terraform-provider-foo_1.0.0_windows_amd64.zip",
        "/files/acme/foo/9.9.9/terraform-provider-foo_9.9.9_SHA256SUMS",
        "/nothing/here",
        "/v1/providers/",
    ] {
        let (status, _) = get_bytes(&client, &url(path)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    assert_eq!(origin.count(RequestKind::Versions), 1);
    assert_eq!(origin.count(RequestKind::Download), 2);
    assert_eq!(origin.count(RequestKind::Archive), 1);
    assert_eq!(origin.count(RequestKind::Sums), 1);
    assert_eq!(origin.total_requests(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archives_are_deterministic_executable_zips() {
    let (ca, origin, _client) = start().await;

    let foo = origin.archive("acme", "foo", "1.0.0", "linux", "amd64");
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(&foo)).unwrap();
    assert_eq!(zip.len(), 1);
    let mut plugin = zip.by_index(0).unwrap();
    assert_eq!(plugin.name().unwrap(), "terraform-provider-foo_v1.0.0");
    assert_eq!(plugin.unix_mode().map(|mode| mode & 0o777), Some(0o755));
    let mut script = String::new();
    std::io::Read::read_to_string(&mut plugin, &mut script).unwrap();
    assert!(
        script.starts_with("#!/bin/sh\n") && script.contains("linux_amd64"),
        "{script}"
    );
    assert_ne!(
        foo,
        origin.archive("acme", "foo", "1.0.0", "darwin", "arm64")
    );
    assert_ne!(
        foo,
        origin.archive("acme", "foo", "1.1.0", "linux", "amd64")
    );
    let h1 = origin.h1_zip("acme", "foo", "1.0.0", "linux", "amd64");
    assert!(h1.starts_with("h1:") && h1.len() == 3 + 44, "{h1}");
    assert_eq!(h1, origin.h1_dir("acme", "foo", "1.0.0", "linux", "amd64"));

    let dirs = origin.archive("acme", "dirs", "0.1.0", "linux", "amd64");
    let zip = zip::ZipArchive::new(std::io::Cursor::new(&dirs)).unwrap();
    let names: Vec<String> = zip
        .file_names()
        .map(|name| name.unwrap().into_owned())
        .collect();
    assert!(
        names == ["terraform-provider-dirs_v0.1.0", "docs/", "docs/README.md"],
        "{names:?}"
    );
    assert_ne!(
        origin.h1_zip("acme", "dirs", "0.1.0", "linux", "amd64"),
        origin.h1_dir("acme", "dirs", "0.1.0", "linux", "amd64"),
        "directory entries count in the zip's h1 only"
    );

    let again = FakeOrigin::start(&ca, &[HOST], specs()).await;
    assert_eq!(foo, again.archive("acme", "foo", "1.0.0", "linux", "amd64"));
    assert_eq!(
        dirs,
        again.archive("acme", "dirs", "0.1.0", "linux", "amd64")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speaks_http2_and_http1() {
    let (ca, origin, client) = start().await;
    let response = get(&client, &url("/.well-known/terraform.json")).await;
    assert_eq!(response.version(), http::Version::HTTP_2);

    crate::support::install_crypto_provider();
    let http1 = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.ca_pem().as_bytes()).unwrap()])
        .resolve(HOST, origin.addr())
        .no_proxy()
        .http1_only()
        .build()
        .unwrap();
    let response = get(&http1, &url("/.well-known/terraform.json")).await;
    assert_eq!(response.version(), http::Version::HTTP_11);
    assert_eq!(response.status(), StatusCode::OK);

    // The certificate is also valid for 127.0.0.1 (terraform's view of this origin).
    let by_ip = format!("{}/.well-known/terraform.json", origin.base_url());
    assert_eq!(get(&client, &by_ip).await.status(), StatusCode::OK);

    // HEAD: same headers, no body, on both protocols.
    let archive_url = url("/files/acme/foo/1.0.0/terraform-provider-foo_1.0.0_linux_amd64.zip");
    let length = origin
        .archive("acme", "foo", "1.0.0", "linux", "amd64")
        .len();
    for client in [&client, &http1] {
        let response = within("HEAD", client.head(&archive_url).send())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-length"],
            length.to_string().as_str()
        );
        assert!(
            within("HEAD body", response.bytes())
                .await
                .unwrap()
                .is_empty()
        );
    }
    assert_eq!(origin.count(RequestKind::Archive), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_apply_and_clear() {
    let (_ca, origin, client) = start().await;
    let archive_url = url("/files/acme/foo/1.0.0/terraform-provider-foo_1.0.0_linux_amd64.zip");
    let meta_url = url("/v1/providers/acme/foo/1.0.0/download/linux/amd64");
    let real = origin.archive("acme", "foo", "1.0.0", "linux", "amd64");
    let real_sha = origin.sha256_hex("acme", "foo", "1.0.0", "linux", "amd64");

    origin.set_fault(Fault::Status {
        kind: RequestKind::Archive,
        status: 503,
    });
    assert_eq!(
        get_bytes(&client, &archive_url).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    origin.set_fault(Fault::Status {
        kind: RequestKind::Archive,
        status: 500,
    });
    assert_eq!(
        get_bytes(&client, &archive_url).await.0,
        StatusCode::INTERNAL_SERVER_ERROR,
        "a fault replaces the previous one of the same kind"
    );
    assert_eq!(
        get_json(&client, &meta_url).await.0,
        StatusCode::OK,
        "other kinds unaffected"
    );
    assert_eq!(
        origin.count(RequestKind::Archive),
        2,
        "faulted requests are counted"
    );
    origin.clear_faults();

    origin.set_fault(Fault::Delay {
        kind: RequestKind::Versions,
        millis: 300,
    });
    let started = Instant::now();
    let (status, _) = get_json(&client, &url("/v1/providers/acme/foo/versions")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_millis(300));
    origin.clear_faults();

    origin.set_fault(Fault::TamperArchive);
    let (status, tampered) = get_bytes(&client, &archive_url).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(tampered.len(), real.len());
    assert_eq!(
        tampered.iter().zip(&real).filter(|(a, b)| a != b).count(),
        1
    );
    assert_ne!(sha256_hex(&tampered), real_sha);
    assert_eq!(
        get_json(&client, &meta_url).await.1["shasum"],
        real_sha.as_str()
    );
    origin.clear_faults();

    origin.set_fault(Fault::WrongShasum);
    let (_, meta) = get_json(&client, &meta_url).await;
    let wrong = meta["shasum"].as_str().unwrap();
    assert_ne!(wrong, real_sha);
    assert_eq!(wrong.len(), 64);
    let sums = origin.shasums("acme", "foo", "1.0.0");
    assert!(String::from_utf8(sums).unwrap().contains(&real_sha));
    assert_eq!(
        sha256_hex(&get_bytes(&client, &archive_url).await.1),
        real_sha
    );
    origin.clear_faults();

    assert_eq!(
        get_json(&client, &meta_url).await.1["shasum"],
        real_sha.as_str()
    );
    assert_eq!(get_bytes(&client, &archive_url).await.1, real);
}

/// Also pins which `h1:` terraform computes: `providers mirror` hashes the zip as stored
/// (directory entries included, [`FakeOrigin::h1_zip`]) while `init` records the extracted
/// directory's hash ([`FakeOrigin::h1_dir`]) in the lock file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terraform_cli_installs_from_origin() {
    let ca = TestCa::new();
    let platforms = [("linux", "amd64"), ("darwin", "arm64")];
    let providers = [("foo", "1.0.0"), ("dirs", "0.1.0")];
    let specs = providers
        .iter()
        .map(|(ty, version)| ProviderSpec::new("acme", ty, &[version], &platforms))
        .collect();
    let origin = FakeOrigin::start(&ca, &[HOST], specs).await;
    let terraform = Terraform::new(
        &ca,
        &format!(
            "host \"{HOST}\" {{\n  services = {{\n    \"providers.v1\" = \"{}\"\n  }}\n}}\n",
            origin.providers_v1_url()
        ),
    );
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("main.tf"),
        r#"terraform {
  required_providers {
    foo  = { source = "acme/foo", version = "1.0.0" }
    dirs = { source = "acme/dirs", version = "0.1.0" }
  }
}
"#,
    )
    .unwrap();

    let out = work.path().join("mirror");
    let args = [
        "providers",
        "mirror",
        "-platform=linux_amd64",
        "-platform=darwin_arm64",
    ];
    let args: Vec<&str> = args.into_iter().chain([out.to_str().unwrap()]).collect();
    terraform.run(work.path(), &args).await.assert_success();
    for (ty, version) in providers {
        let dir = out.join(HOST).join("acme").join(ty);
        let index = std::fs::read_to_string(dir.join(format!("{version}.json"))).unwrap();
        let index: Value = serde_json::from_str(&index).unwrap();
        for (os, arch) in platforms {
            let file = dir.join(origin.filename("acme", ty, version, os, arch));
            let bytes =
                std::fs::read(&file).unwrap_or_else(|err| panic!("{}: {err}", file.display()));
            assert_eq!(
                bytes,
                origin.archive("acme", ty, version, os, arch),
                "{ty} {os}_{arch}"
            );
            assert_eq!(
                index["archives"][format!("{os}_{arch}")]["hashes"],
                json!([origin.h1_zip("acme", ty, version, os, arch)]),
                "{ty} {os}_{arch}"
            );
        }
    }

    let init = terraform
        .run(work.path(), &["init", "-input=false", "-no-color"])
        .await;
    init.assert_success();
    let verified = format!("(self-signed, key ID {})", origin.key_id());
    assert!(
        init.stdout.contains(&verified),
        "signature not verified?\n{}",
        init.stdout
    );
    let lock = std::fs::read_to_string(work.path().join(".terraform.lock.hcl")).unwrap();
    for (ty, version) in providers {
        for (os, arch) in platforms {
            let zh = format!("zh:{}", origin.sha256_hex("acme", ty, version, os, arch));
            assert!(lock.contains(&zh), "{zh} missing from lock file:\n{lock}");
        }
        // This machine is linux_amd64, so that platform's h1 is recorded too.
        let h1 = origin.h1_dir("acme", ty, version, "linux", "amd64");
        assert!(
            lock.contains(&h1),
            "{ty}: {h1} missing from lock file:\n{lock}"
        );
    }
    assert!(
        origin.count(RequestKind::Signature) >= 2,
        "terraform fetched the signatures"
    );
    origin.stop().await;
}

/// The faults matter to the real client: a tampered archive and a `shasum` that disagrees
/// with SHA256SUMS both make `terraform init` fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terraform_cli_rejects_faulty_origin() {
    let ca = TestCa::new();
    let spec = ProviderSpec::new("acme", "foo", &["1.0.0"], &[("linux", "amd64")]);
    let origin = FakeOrigin::start(&ca, &[HOST], vec![spec]).await;
    let terraform = Terraform::new(
        &ca,
        &format!(
            "host \"{HOST}\" {{\n  services = {{\n    \"providers.v1\" = \"{}\"\n  }}\n}}\n",
            origin.providers_v1_url()
        ),
    );
    let expected_errors = [
        (Fault::TamperArchive, "archive has incorrect checksum"),
        (
            Fault::WrongShasum,
            "checksum list has unexpected SHA-256 hash",
        ),
    ];
    for (fault, expected) in expected_errors {
        origin.clear_faults();
        origin.set_fault(fault);
        let work = tempfile::tempdir().unwrap();
        std::fs::write(
            work.path().join("main.tf"),
            "terraform {\n  required_providers {\n    foo = { source = \"acme/foo\", version = \"1.0.0\" }\n  }\n}\n",
        )
        .unwrap();
        let init = terraform
            .run(work.path(), &["init", "-input=false", "-no-color"])
            .await;
        init.assert_failure();
        // Terraform wraps long lines; compare with whitespace collapsed.
        let output = init
            .combined()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(output.contains(expected), "{fault:?}: {}", init.combined());
    }
    origin.stop().await;
}
