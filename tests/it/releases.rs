//! The CLIs' own releases through the mirror (`[releases]`), from fake release origins in the
//! vendors' layouts (nginx over TLS serving HashiCorp's `terraform/<v>/...` and OpenTofu's
//! `v<v>/...`), their SHA256SUMS signed with a test key that the configuration puts in place of
//! the vendor's:
//! - the real `terraform` binary, zipped as HashiCorp ships it, comes through the mirror whole
//!   and runs `terraform version`; SHA256SUMS and both signature names are the origin's bytes;
//!   the vendors' lists of releases (HashiCorp's `index.json`, OpenTofu's `api.json`) are
//!   served with this mirror's URLs, also once the origin is gone;
//!   four clients at once cause one origin download, and the release is served from the cache
//!   once the origin is gone;
//! - a release signed by any other key is refused (502, naming the pinned key) and nothing of it
//!   is kept; with the built-in keys, a release signed by the test key is refused likewise;
//!   `provender verify` finds and quarantines a damaged cached zip;
//! - a forged build (zip or `.tar.gz`) whose first member is a script: clients that unpack
//!   as they read (`curl | tar xzf -`, `curl | jar x`), the one that started the download and
//!   one that joined it, over HTTP/1.1 and HTTP/2, unpack nothing of it, since a build is held
//!   back whole until its SHA-256 matched; it is not cached, and the signed build then streams
//!   and unpacks;
//! - versions the vendor's list does not have cost the release host one list fetch in all, a
//!   listed release the host does not have one request; a vendor's 429 for one release leaves
//!   the host's circuit closed for the others; release builds count against `cache.max_size`
//!   and are evicted with archives, least recently used first;
//! - a real installer, mise (from npm), pointed at the mirror installs terraform: the binary it
//!   installs is the origin's, and runs;
//! - `provender seed --cli terraform@CONSTRAINT` fetches the newest matching release's zips, and
//!   `provender ls` lists them.

use std::io::Write;
use std::path::{Path, PathBuf};

use http::Version as HttpVersion;
use sha2::Digest;

use crate::support::http::get;
use crate::support::origin::{FakeOrigin, sign_detached, signing_key_armor};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, TestMirror, files_under};
use crate::support::static_server::StaticServer;
use crate::support::{https_client, sample, within};

const TERRAFORM: &str = "/usr/local/bin/terraform";

/// mise, installed from npm by `.ci/test` (`@jdxcode/mise-linux-x64`); `MISE` overrides.
const MISE_DEFAULT: &str = "target/ci-tools/mise/node_modules/@jdxcode/mise-linux-x64/bin/mise";

fn mise() -> PathBuf {
    let path = match std::env::var_os("MISE") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(MISE_DEFAULT),
    };
    assert!(
        path.is_file(),
        "{} is missing: .ci/test installs it (npm install --prefix target/ci-tools/mise @jdxcode/mise-linux-x64)",
        path.display()
    );
    path
}

/// The HashiCorp layout of terraform 1.11.4 with the real binary for linux_amd64, signed with
/// the test key, under `root/hashicorp`. Returns the zip.
pub(crate) fn terraform_release(root: &Path) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let binary = std::fs::read(TERRAFORM).expect("the terraform binary");
    let zip = zip_of("terraform", &binary, true);
    let other = zip_of("terraform", b"not for this platform", true);
    let (sums, signature) = write_release(
        &root.join("hashicorp/terraform/1.11.4"),
        "terraform_1.11.4_SHA256SUMS",
        &[
            ("terraform_1.11.4_linux_amd64.zip", &zip),
            ("terraform_1.11.4_darwin_arm64.zip", &other),
        ],
        &[
            "terraform_1.11.4_SHA256SUMS.sig",
            "terraform_1.11.4_SHA256SUMS.72D7468F.sig",
        ],
        false,
    );
    // HashiCorp's list of releases, as releases.hashicorp.com publishes it.
    let build = |platform: &str| {
        let (os, arch) = platform.split_once('_').unwrap();
        serde_json::json!({
            "name": "terraform", "version": "1.11.4", "os": os, "arch": arch,
            "filename": format!("terraform_1.11.4_{platform}.zip"),
            "url": format!("https://releases.hashicorp.com/terraform/1.11.4/terraform_1.11.4_{platform}.zip"),
        })
    };
    let index = serde_json::json!({"name": "terraform", "versions": {"1.11.4": {
        "name": "terraform", "version": "1.11.4",
        "shasums": "terraform_1.11.4_SHA256SUMS",
        "shasums_signature": "terraform_1.11.4_SHA256SUMS.sig",
        "shasums_signatures": ["terraform_1.11.4_SHA256SUMS.72D7468F.sig", "terraform_1.11.4_SHA256SUMS.sig"],
        "builds": [build("linux_amd64"), build("darwin_arm64")],
    }}});
    std::fs::write(
        root.join("hashicorp/terraform/index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
    (zip, sums, signature)
}

/// [`terraform_release`] under `work/origin`, served by nginx over TLS; and its zip, SHA256SUMS
/// and signature.
fn terraform_origin(ca: &TestCa, work: &Path) -> (StaticServer, Vec<u8>, Vec<u8>, Vec<u8>) {
    let root = work.join("origin");
    let (zip, sums, signature) = terraform_release(&root);
    (StaticServer::start(ca, &root), zip, sums, signature)
}

/// A zip holding one file, stored (not deflated), as the release zips hold their binary.
pub(crate) fn zip_of(name: &str, content: &[u8], executable: bool) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .unix_permissions(if executable { 0o755 } else { 0o644 });
    zip.start_file(name, options).unwrap();
    zip.write_all(content).unwrap();
    zip.finish().unwrap().into_inner()
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Writes one release into `dir` (already the release's directory): its zips, SHA256SUMS listing
/// `listed` (name, bytes) and its signature under `signature_names`; `served` replaces what a
/// zip's file holds (a tampered copy). Returns the SHA256SUMS and its signature.
pub(crate) fn write_release(
    dir: &Path,
    sums_name: &str,
    zips: &[(&str, &[u8])],
    signature_names: &[&str],
    unlisted_key: bool,
) -> (Vec<u8>, Vec<u8>) {
    std::fs::create_dir_all(dir).unwrap();
    let mut sums = String::new();
    for (name, bytes) in zips {
        sums.push_str(&format!("{}  {name}\n", sha256_hex(bytes)));
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    std::fs::write(dir.join(sums_name), &sums).unwrap();
    let signature = sign_detached(sums.as_bytes(), unlisted_key);
    for name in signature_names {
        std::fs::write(dir.join(name), &signature).unwrap();
    }
    (sums.into_bytes(), signature)
}

/// [`write_release`] for OpenTofu's release `version` under `root/opentofu/v<version>`: each
/// build named `tofu_<version>_<platform file>` (e.g. `linux_amd64.zip`), its SHA256SUMS and
/// the `.gpgsig` signature. Returns the SHA256SUMS and its signature.
pub(crate) fn write_tofu_release(
    root: &Path,
    version: &str,
    builds: &[(&str, &[u8])],
    unlisted_key: bool,
) -> (Vec<u8>, Vec<u8>) {
    let named: Vec<(String, &[u8])> = builds
        .iter()
        .map(|(file, bytes)| (format!("tofu_{version}_{file}"), *bytes))
        .collect();
    let zips: Vec<(&str, &[u8])> = named.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    write_release(
        &root.join(format!("opentofu/v{version}")),
        &format!("tofu_{version}_SHA256SUMS"),
        &zips,
        &[&format!("tofu_{version}_SHA256SUMS.gpgsig")],
        unlisted_key,
    )
}

/// Writes OpenTofu's `api.json` under `root/opentofu`.
pub(crate) fn write_api_json(root: &Path, api: &serde_json::Value) {
    std::fs::create_dir_all(root.join("opentofu")).unwrap();
    std::fs::write(
        root.join("opentofu/api.json"),
        serde_json::to_vec(api).unwrap(),
    )
    .unwrap();
}

/// The test key in place of both vendors' keys, and both release origins at `origin`.
pub(crate) fn releases_toml(work: &Path, origin: &StaticServer, builtin_keys: bool) -> String {
    releases_toml_at(work, &origin.url(), builtin_keys)
}

/// [`releases_toml`] with the origins at `base` (`https://host:port/`).
pub(crate) fn releases_toml_at(work: &Path, base: &str, builtin_keys: bool) -> String {
    std::fs::create_dir_all(work).unwrap();
    let key = work.join("test-key.asc");
    std::fs::write(&key, signing_key_armor()).unwrap();
    let keys = if builtin_keys {
        String::new()
    } else {
        format!(
            "hashicorp_key_file = \"{k}\"\nopentofu_key_file = \"{k}\"\n",
            k = key.display()
        )
    };
    format!(
        "[releases]\nenabled = true\nhashicorp_url = \"{base}hashicorp\"\n\
         opentofu_url = \"{base}opentofu\"\nopentofu_index_url = \"{base}opentofu/api.json\"\n{keys}",
    )
}

pub(crate) async fn mirror(
    ca: &TestCa,
    work: &Path,
    origin: &StaticServer,
    builtin_keys: bool,
) -> (TestMirror, FakeOrigin) {
    mirror_at(ca, work, &origin.url(), builtin_keys).await
}

/// A throttle in front of `origin`, and the base URL (`https://localhost:port/`) that reaches
/// `origin` through it.
async fn throttled(origin: &StaticServer) -> (crate::support::throttle::Throttle, String) {
    let port = url::Url::parse(&origin.url()).unwrap().port().unwrap();
    let throttle = crate::support::throttle::Throttle::start(([127, 0, 0, 1], port).into()).await;
    let base = format!("https://localhost:{}/", throttle.addr().port());
    (throttle, base)
}

/// [`mirror`] with the release origins at `base` (`https://host:port/`), e.g. a throttle's.
async fn mirror_at(
    ca: &TestCa,
    work: &Path,
    base: &str,
    builtin_keys: bool,
) -> (TestMirror, FakeOrigin) {
    mirror_with(ca, work, base, builtin_keys, vec![], "").await
}

/// [`mirror_at`], its registry origin serving `providers`, with `extra_cache` keys.
async fn mirror_with(
    ca: &TestCa,
    work: &Path,
    base: &str,
    builtin_keys: bool,
    providers: Vec<crate::support::origin::ProviderSpec>,
    extra_cache: &str,
) -> (TestMirror, FakeOrigin) {
    let registry = FakeOrigin::start(ca, &[crate::support::provender::REGISTRY], providers).await;
    let toml = releases_toml_at(work, base, builtin_keys);
    let m = TestMirror::start_with(
        ca,
        &registry,
        MirrorOptions {
            extra_upstream: "allow_private_networks = true",
            extra_cache,
            extra_toml: &toml,
            ..Default::default()
        },
    )
    .await;
    (m, registry)
}

/// A configuration file in `dir` for the operator commands, with the release origins at
/// `origin` (its cache is `dir/cache`); and the registry origin it names.
async fn seed_config(ca: &TestCa, dir: &Path, origin: &StaticServer) -> (PathBuf, FakeOrigin) {
    let registry = FakeOrigin::start(ca, &[crate::support::provender::REGISTRY], vec![]).await;
    let toml = releases_toml(dir, origin, false);
    let config = crate::support::provender::write_config(
        ca,
        dir,
        registry.addr(),
        &MirrorOptions {
            extra_upstream: "allow_private_networks = true",
            extra_toml: &toml,
            ..Default::default()
        },
    );
    (config, registry)
}

fn release_files(cache: &Path) -> Vec<PathBuf> {
    files_under(&cache.join("releases"))
}

#[tokio::test(flavor = "multi_thread")]
async fn terraform_comes_through_the_mirror_verified_and_runs() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let binary = std::fs::read(TERRAFORM).expect("the terraform binary");
    let (origin, zip, sums, signature) = terraform_origin(&ca, work.path());
    let (m, _registry) = mirror(&ca, work.path(), &origin, false).await;
    let c = https_client(&ca, &[]);
    let base = "releases/terraform/1.11.4";

    // A HEAD answers from the signed SHA256SUMS, without downloading the zip.
    let url = m.url(&format!("{base}/terraform_1.11.4_linux_amd64.zip"));
    let head = c.head(&url).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        head.headers()["etag"].to_str().unwrap(),
        format!("\"{}\"", sha256_hex(&zip))
    );
    let metrics = m.metrics(&c).await;
    assert_eq!(
        sample(
            &metrics,
            "provender_upstream_requests_total{host=\"localhost\",operation=\"archive\",outcome=\"ok\"}"
        ),
        0,
        "a HEAD downloads nothing"
    );

    // Four clients at once: one origin download, every client gets the origin's zip.
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (c, url) = (c.clone(), url.clone());
        clients.push(tokio::spawn(async move { get(&c, &url).await }));
    }
    for client in clients {
        let got = within("a release download", client).await.unwrap();
        assert_eq!(got.status, 200);
        assert!(got.body == zip, "the origin's zip, whole");
    }
    let metrics = m.metrics(&c).await;
    assert_eq!(
        sample(
            &metrics,
            "provender_upstream_requests_total{host=\"localhost\",operation=\"archive\",outcome=\"ok\"}"
        ),
        1,
        "one origin download for four clients"
    );
    assert_eq!(
        sample(
            &metrics,
            "provender_cache_lookups_total{kind=\"release_zip\",result=\"miss\"}"
        ),
        1
    );
    // Now stored, a HEAD knows its size.
    let head = c.head(&url).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.content_length(), Some(zip.len() as u64));

    // The files installers verify are the origin's.
    for (name, expected) in [
        ("terraform_1.11.4_SHA256SUMS", &sums),
        ("terraform_1.11.4_SHA256SUMS.sig", &signature),
        ("terraform_1.11.4_SHA256SUMS.72D7468F.sig", &signature),
    ] {
        let got = get(&c, &m.url(&format!("{base}/{name}"))).await;
        assert_eq!(got.status, 200, "{name}");
        assert!(&got.body == expected, "{name} is the origin's");
    }

    // The binary from the mirror runs.
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(get(&c, &url).await.body)).unwrap();
    let installed = work.path().join("bin/terraform");
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    std::io::copy(
        &mut archive.by_name("terraform").unwrap(),
        &mut std::fs::File::create(&installed).unwrap(),
    )
    .unwrap();
    assert_eq!(
        sha256_hex(&std::fs::read(&installed).unwrap()),
        sha256_hex(&binary)
    );
    std::fs::set_permissions(
        &installed,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = std::process::Command::new(&installed)
        .arg("version")
        .env("CHECKPOINT_DISABLE", "1")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Terraform v1.11.4"),
        "{out:?}"
    );

    // The vendor's list of releases, pointing at this mirror.
    let index = get(&c, &m.url("releases/terraform/index.json")).await;
    assert_eq!(index.status, 200);
    let index: serde_json::Value = serde_json::from_slice(&index.body).unwrap();
    let release = &index["versions"]["1.11.4"];
    assert_eq!(release["shasums"], "terraform_1.11.4_SHA256SUMS");
    let builds = release["builds"].as_array().unwrap();
    assert_eq!(builds.len(), 2);
    let linux = builds.iter().find(|b| b["os"] == "linux").unwrap();
    let zip_url = linux["url"].as_str().unwrap();
    // The vendor's own URL, which installers rebase onto the mirror they are given.
    assert_eq!(
        zip_url,
        "https://releases.hashicorp.com/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip"
    );
    let one = get(&c, &m.url("releases/terraform/1.11.4/index.json")).await;
    assert_eq!(one.status, 200);
    let one: serde_json::Value = serde_json::from_slice(&one.body).unwrap();
    assert_eq!(
        &one, release,
        "a version's index.json is its entry in the list"
    );
    let unknown = get(&c, &m.url("releases/terraform/9.9.9/index.json")).await;
    assert_eq!(unknown.status, 404);

    // With the origin gone, the release is served from the cache.
    drop(origin);
    let index_again = get(&c, &m.url("releases/terraform/index.json")).await;
    assert_eq!(index_again.status, 200, "the list, from the cache");
    let again = get(&c, &url).await;
    assert!(again.status == 200 && again.body == zip);
    let sums_again = get(&c, &m.url(&format!("{base}/terraform_1.11.4_SHA256SUMS"))).await;
    assert!(sums_again.status == 200 && sums_again.body == sums);
    // A platform the release does not have is a 404, without asking anyone.
    let none = get(
        &c,
        &m.url(&format!("{base}/terraform_1.11.4_freebsd_arm.zip")),
    )
    .await;
    assert_eq!(none.status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_signed_by_another_key_is_refused_and_nothing_is_kept() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    let zip = zip_of("tofu", b"#!/bin/sh\necho tofu\n", true);
    write_tofu_release(&root, "1.8.0", &[("linux_amd64.zip", &zip)], true);
    write_tofu_release(&root, "1.8.1", &[("linux_amd64.zip", &zip)], false);
    let api = serde_json::json!({"versions": [
        {"id": "1.8.1", "files": ["tofu_1.8.1_linux_amd64.zip", "tofu_1.8.1_SHA256SUMS"]},
        {"id": "1.8.0", "files": ["tofu_1.8.0_linux_amd64.zip", "tofu_1.8.0_SHA256SUMS"]},
    ]});
    write_api_json(&root, &api);
    let origin = StaticServer::start(&ca, &root);
    let c = https_client(&ca, &[]);

    // Pinned to the test key: 1.8.0, signed by another key, is refused; 1.8.1 is served.
    let (m, _registry) = mirror(&ca, work.path(), &origin, false).await;
    let refused = get(&c, &m.url("releases/tofu/1.8.0/tofu_1.8.0_linux_amd64.zip")).await;
    assert_eq!(refused.status, 502);
    assert!(
        refused.message().contains("OpenTofu's pinned key"),
        "{}",
        refused.message()
    );
    let sums = get(&c, &m.url("releases/tofu/1.8.0/tofu_1.8.0_SHA256SUMS")).await;
    assert_eq!(sums.status, 502);
    assert_eq!(
        release_files(&m.cache_dir),
        [m.cache_dir.join("releases/tofu/index.json")],
        "nothing of it is kept (only the list of releases)"
    );
    // `seed` refuses it through the same check, and keeps nothing either.
    let dir = work.path().join("seed");
    let (config, _seed_registry) = seed_config(&ca, &dir, &origin).await;
    let config = crate::support::cli::path_str(&config);
    let seeded =
        crate::support::cli::provender(&["seed", "--config", config, "--cli", "tofu@1.8.0"]).await;
    seeded.fails(1);
    assert!(
        seeded.out().contains("OpenTofu's pinned key"),
        "{}",
        seeded.out()
    );
    let kept: Vec<_> = release_files(&dir.join("cache"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("1.8.0"))
        .collect();
    assert!(
        kept.is_empty(),
        "seed kept nothing of it (only the list of releases): {kept:?}"
    );
    let served = get(&c, &m.url("releases/tofu/1.8.1/tofu_1.8.1_linux_amd64.zip")).await;
    assert!(served.status == 200 && served.body == zip);
    // OpenTofu's list of releases, newest first as OpenTofu lists it.
    let listed = get(&c, &m.url("releases/tofu/api.json")).await;
    assert_eq!(listed.status, 200);
    let listed: serde_json::Value = serde_json::from_slice(&listed.body).unwrap();
    assert_eq!(listed, api);

    // `provender verify` re-hashes cached release zips: a damaged one is reported and
    // quarantined.
    let cached = m
        .cache_dir
        .join("releases/tofu/1.8.1/tofu_1.8.1_linux_amd64.zip");
    crate::support::poll(std::time::Duration::from_secs(10), async || {
        m.cache_dir
            .join("releases/tofu/1.8.1/tofu_1.8.1_linux_amd64.zip.json")
            .exists()
            .then_some(())
    })
    .await
    .expect("the zip is committed");
    let config = work.path().join("verify.toml");
    std::fs::write(
        &config,
        format!("[cache]\ndir = \"{}\"\n", m.cache_dir.display()),
    )
    .unwrap();
    let config = crate::support::cli::path_str(&config);
    let clean = crate::support::cli::provender(&["verify", "--config", config]).await;
    assert!(
        clean.out().contains("1 release zips checked, 1 ok"),
        "{}",
        clean.out()
    );
    let mut bytes = std::fs::read(&cached).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&cached, bytes).unwrap();
    let found = crate::support::cli::provender(&["verify", "--config", config]).await;
    found.fails(1);
    assert!(
        found.out().contains("tofu 1.8.1 linux_amd64"),
        "{}",
        found.out()
    );
    assert!(!cached.exists(), "the damaged zip is out of service");
    drop(m);

    // With the built-in keys, a release signed by the test key is refused like any other.
    let (builtin, _registry) = mirror(&ca, &work.path().join("builtin"), &origin, true).await;
    let refused = get(
        &c,
        &builtin.url("releases/tofu/1.8.1/tofu_1.8.1_linux_amd64.zip"),
    )
    .await;
    assert_eq!(refused.status, 502);
    assert_eq!(
        release_files(&builtin.cache_dir),
        [builtin.cache_dir.join("releases/tofu/index.json")]
    );
}

/// `len` incompressible bytes (xorshift), so that a build is as large packed as unpacked.
fn noise(len: usize) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// A build holding `members` in this order, each executable: a zip (`.zip`) or a `.tar.gz`.
fn pack(suffix: &str, members: &[(&str, &[u8])]) -> Vec<u8> {
    if suffix == ".zip" {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .unix_permissions(0o755);
        for (name, content) in members {
            zip.start_file(*name, options).unwrap();
            zip.write_all(content).unwrap();
        }
        return zip.finish().unwrap().into_inner();
    }
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    for (name, content) in members {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o755);
        header.set_cksum();
        builder.append_data(&mut header, name, *content).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// What people do with a build: `curl URL | tar xzf -` (for a zip, `curl URL | jar x`, which
/// also unpacks each entry as it arrives, from its local header), into `into`, over HTTP/2 or
/// HTTP/1.1. What it unpacked is what is left in `into`.
async fn unpack_as_it_arrives(ca_file: &Path, url: &str, http2: bool, suffix: &str, into: &Path) {
    std::fs::create_dir_all(into).unwrap();
    let unpack = if suffix == ".zip" {
        "(cd \"$4\" && jar x)"
    } else {
        "tar xzf - -C \"$4\""
    };
    within(
        "curl | unpack",
        tokio::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "curl -sS --max-time 60 \"$1\" --cacert \"$2\" \"$3\" | {unpack}"
            ))
            .arg("sh")
            .arg(if http2 { "--http2" } else { "--http1.1" })
            .arg(ca_file)
            .arg(url)
            .arg(into)
            .output(),
    )
    .await
    .expect("run curl, tar and jar (CI installs them)");
}

/// Writes the vendor's list of releases naming `versions` (without files), as every vendor
/// publishes one: OpenTofu's `api.json` under `root/opentofu`, HashiCorp's `index.json` under
/// `root/hashicorp/terraform`.
fn list_releases(root: &Path, product: &str, versions: &[&str]) {
    let (path, list) = if product == "tofu" {
        let listed: Vec<_> = versions
            .iter()
            .map(|v| serde_json::json!({"id": v, "files": []}))
            .collect();
        ("opentofu/api.json", serde_json::json!({"versions": listed}))
    } else {
        let listed: serde_json::Map<String, serde_json::Value> = versions
            .iter()
            .map(|v| {
                let release = serde_json::json!({"name": "terraform", "version": v,
                    "shasums": format!("terraform_{v}_SHA256SUMS"), "builds": []});
                (v.to_string(), release)
            })
            .collect();
        (
            "hashicorp/terraform/index.json",
            serde_json::json!({"name": "terraform", "versions": listed}),
        )
    };
    std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
    std::fs::write(root.join(path), serde_json::to_vec(&list).unwrap()).unwrap();
}

/// A build (`tofu_1.8.0_linux_amd64<suffix>`) whose first member is a script and whose bytes
/// are not those the signed SHA256SUMS lists (another script): two clients over `http` that
/// unpack as they read, the one that starts the download and one that joins it, unpack
/// nothing of it, since no byte of a build leaves before its SHA-256 matched; nothing is
/// cached. The origin is slowed down so that the second client really joins the first one's
/// download. The build as signed then streams and unpacks.
async fn tampered_build_unpacks_nothing(http: HttpVersion, suffix: &str) {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    let payload = noise(3 << 20);
    let script: &[u8] = b"#!/bin/sh\necho OpenTofu v1.8.0\n";
    let genuine = |suffix: &str| pack(suffix, &[("tofu", script), ("payload", &payload)]);
    let forged = pack(
        suffix,
        &[("tofu", b"#!/bin/sh\necho forged\n"), ("payload", &payload)],
    );
    // Every release has zips; OpenTofu's also have `.tar.gz` files.
    let name = format!("tofu_1.8.0_linux_amd64{suffix}");
    let dir = root.join("opentofu/v1.8.0");
    write_tofu_release(
        &root,
        "1.8.0",
        &[
            ("linux_amd64.zip", &genuine(".zip")),
            ("linux_amd64.tar.gz", &genuine(".tar.gz")),
        ],
        false,
    );
    list_releases(&root, "tofu", &["1.8.0"]);
    std::fs::write(dir.join(&name), &forged).unwrap();
    let origin = StaticServer::start(&ca, &root);
    let (throttle, base) = throttled(&origin).await;
    let (m, _registry) = mirror_at(&ca, work.path(), &base, false).await;
    let url = m.url(&format!("releases/tofu/1.8.0/{name}"));
    let c = https_client(&ca, &[]);
    // The release's record first, so that both clients meet at the build's download.
    let sums = get(&c, &m.url("releases/tofu/1.8.0/tofu_1.8.0_SHA256SUMS")).await;
    assert_eq!(sums.status, 200);
    let lookups = async |result: &str| {
        sample(
            &m.metrics(&c).await,
            &format!("provender_cache_lookups_total{{kind=\"release_zip\",result=\"{result}\"}}"),
        )
    };
    let ca_file = ca.write_ca(work.path());
    let http2 = http == HttpVersion::HTTP_2;
    let (first, second) = (work.path().join("first"), work.path().join("second"));

    throttle.set_rate(1 << 20);
    let leader = {
        let (ca_file, url, into, suffix) = (
            ca_file.clone(),
            url.clone(),
            first.clone(),
            suffix.to_owned(),
        );
        tokio::spawn(
            async move { unpack_as_it_arrives(&ca_file, &url, http2, &suffix, &into).await },
        )
    };
    crate::support::poll(std::time::Duration::from_secs(10), async || {
        (lookups("miss").await == 1).then_some(())
    })
    .await
    .expect("the leader's download started");
    assert_eq!(
        sample(&m.metrics(&c).await, "provender_fills_in_flight"),
        1,
        "the download is in the core's table of fills (which shutdown waits for)"
    );
    let joiner = {
        let (ca_file, url, into, suffix) = (
            ca_file.clone(),
            url.clone(),
            second.clone(),
            suffix.to_owned(),
        );
        tokio::spawn(
            async move { unpack_as_it_arrives(&ca_file, &url, http2, &suffix, &into).await },
        )
    };
    within("the leader", leader).await.unwrap();
    within("the joiner", joiner).await.unwrap();
    assert_eq!(
        lookups("joined").await,
        1,
        "the second client joined the download"
    );
    for (who, into) in [("the leader", &first), ("the joiner", &second)] {
        assert_eq!(
            files_under(into),
            Vec::<PathBuf>::new(),
            "{who} over {http:?} unpacked nothing of the forged build"
        );
    }
    let metrics = m.metrics(&c).await;
    assert_eq!(
        sample(
            &metrics,
            "provender_upstream_requests_total{host=\"localhost\",operation=\"archive\",outcome=\"ok\"}"
        ),
        1,
        "one origin download"
    );
    assert_eq!(
        sample(
            &metrics,
            "provender_verification_failures_total{reason=\"archive_checksum\"}"
        ),
        1
    );
    let kept: Vec<_> = release_files(&m.cache_dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert!(
        kept.is_empty(),
        "the tampered build is not cached: {kept:?}"
    );

    // The build as signed streams, and unpacks as it arrives.
    std::fs::write(dir.join(&name), genuine(suffix)).unwrap();
    throttle.set_rate(0);
    let third = work.path().join("third");
    unpack_as_it_arrives(&ca_file, &url, http2, suffix, &third).await;
    assert_eq!(std::fs::read(third.join("tofu")).unwrap(), script);
    assert!(std::fs::read(third.join("payload")).unwrap() == payload);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_release_zip_unpacks_nothing_over_http1() {
    tampered_build_unpacks_nothing(HttpVersion::HTTP_11, ".zip").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_release_zip_unpacks_nothing_over_http2() {
    tampered_build_unpacks_nothing(HttpVersion::HTTP_2, ".zip").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_release_tar_gz_unpacks_nothing_over_http1() {
    tampered_build_unpacks_nothing(HttpVersion::HTTP_11, ".tar.gz").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_release_tar_gz_unpacks_nothing_over_http2() {
    tampered_build_unpacks_nothing(HttpVersion::HTTP_2, ".tar.gz").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mise_installs_terraform_through_the_mirror() {
    let mise = mise();
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let (origin, _, _, _) = terraform_origin(&ca, work.path());
    let (m, _registry) = mirror(&ca, work.path(), &origin, false).await;
    let ca_file = ca.write_ca(work.path());
    let home = work.path().join("mise");
    let into = work.path().join("installed");
    // mise's own set-up for a mirror: the release site's URL replaced by the mirror's.
    let replacements = format!(
        "{{\"https://releases.hashicorp.com\":\"{}\"}}",
        m.url("releases").trim_end_matches('/')
    );
    let out = within(
        "mise install-into",
        tokio::process::Command::new(&mise)
            .args(["install-into", "terraform@1.11.4"])
            .arg(&into)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &home)
            .env("MISE_DATA_DIR", home.join("data"))
            .env("MISE_CACHE_DIR", home.join("cache"))
            .env("MISE_CONFIG_DIR", home.join("config"))
            .env("MISE_STATE_DIR", home.join("state"))
            .env("MISE_YES", "1")
            .env("MISE_USE_VERSIONS_HOST", "false")
            .env("MISE_URL_REPLACEMENTS", &replacements)
            .env("SSL_CERT_FILE", &ca_file)
            .output(),
    )
    .await
    .expect("run mise");
    assert!(
        out.status.success(),
        "mise failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let installed = into.join("terraform");
    assert_eq!(
        sha256_hex(&std::fs::read(&installed).unwrap()),
        sha256_hex(&std::fs::read(TERRAFORM).unwrap()),
        "mise installed the origin's binary"
    );
    let version = std::process::Command::new(&installed)
        .arg("version")
        .env("CHECKPOINT_DISABLE", "1")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).contains("Terraform v1.11.4"));
    let metrics = m.metrics(&https_client(&ca, &[])).await;
    assert_eq!(
        sample(
            &metrics,
            "provender_http_requests_total{route=\"release\",status=\"200\"}"
        ),
        2,
        "mise fetched the zip and SHA256SUMS from the mirror"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn seed_fetches_the_newest_matching_release_for_every_platform() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let (origin, zip, _, _) = terraform_origin(&ca, work.path());
    let dir = work.path().join("seed");
    let (config, _registry) = seed_config(&ca, &dir, &origin).await;
    let config = crate::support::cli::path_str(&config);
    let seeded =
        crate::support::cli::provender(&["seed", "--config", config, "--cli", "terraform@~> 1.11"])
            .await;
    seeded.ok();
    assert!(
        seeded
            .out()
            .contains("release terraform 1.11.4 linux_amd64: added"),
        "{}",
        seeded.out()
    );
    assert!(
        seeded
            .out()
            .contains("release terraform 1.11.4 darwin_arm64: added")
    );
    let stored = dir.join("cache/releases/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip");
    assert!(
        std::fs::read(&stored).unwrap() == zip,
        "the origin's zip, in the cache"
    );
    let again =
        crate::support::cli::provender(&["seed", "--config", config, "--cli", "terraform@1.11.4"])
            .await;
    again.ok();
    assert!(
        again.out().contains("linux_amd64: already present"),
        "{}",
        again.out()
    );
    let listed = crate::support::cli::provender(&["ls", "--config", config, "--json"]).await;
    listed.ok();
    let listed: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    let mut zips: Vec<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "release")
        .map(|o| format!("{} {} {}", o["cli"], o["version"], o["platform"]))
        .collect();
    zips.sort();
    assert_eq!(
        zips,
        [
            r#""terraform" "1.11.4" "darwin_arm64""#,
            r#""terraform" "1.11.4" "linux_amd64""#
        ],
        "provender ls lists the seeded zips"
    );
    let none =
        crate::support::cli::provender(&["seed", "--config", config, "--cli", "terraform@>= 2.0"])
            .await;
    none.fails(1);
    assert!(none.out().contains("no release matches"), "{}", none.out());
    let bad =
        crate::support::cli::provender(&["seed", "--config", config, "--cli", "vault@1.0"]).await;
    bad.fails(78);
    assert!(
        bad.out().contains("expected terraform or tofu"),
        "{}",
        bad.out()
    );
}

/// Rewrites a bundle as a forger would: `zip` (an entry path) gets its last byte flipped, the
/// manifest is made to agree with the new bytes, and the site's signature is dropped.
fn forge_release_zip(bundle: &Path, out: &Path, zip: &str) {
    let mut archive = tar::Archive::new(std::fs::File::open(bundle).unwrap());
    let mut entries: Vec<(tar::Header, String, Vec<u8>)> = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().to_string();
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut body).unwrap();
        entries.push((entry.header().clone(), path, body));
    }
    let (_, _, forged) = entries.iter_mut().find(|(_, p, _)| p == zip).unwrap();
    *forged.last_mut().unwrap() ^= 1;
    let forged_sha = sha256_hex(forged);
    let (_, _, manifest) = entries
        .iter_mut()
        .find(|(_, p, _)| p == "provender-bundle.json")
        .unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(manifest).unwrap();
    for release in doc["releases"].as_array_mut().unwrap() {
        for z in release["builds"].as_array_mut().unwrap() {
            if z["path"] == zip {
                z["sha256"] = forged_sha.clone().into();
            }
        }
    }
    *manifest = serde_json::to_vec_pretty(&doc).unwrap();
    let mut builder = tar::Builder::new(std::fs::File::create(out).unwrap());
    for (mut header, path, body) in entries {
        if path == "provender-bundle.json.sig" {
            continue;
        }
        header.set_size(body.len() as u64);
        header.set_cksum();
        builder.append(&header, &body[..]).unwrap();
    }
    builder.finish().unwrap();
}

/// Sets every file under `dir` as stored and last used `age` ago.
fn age_files(dir: &Path, age: std::time::Duration) {
    let then = std::time::SystemTime::now() - age;
    for file in files_under(dir) {
        std::fs::File::open(&file)
            .unwrap()
            .set_times(
                std::fs::FileTimes::new()
                    .set_accessed(then)
                    .set_modified(then),
            )
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_travels_in_a_bundle_checked_by_the_vendors_signature_and_is_pruned() {
    use crate::support::cli::{config_file, import, import_unverified, path_str, provender};
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let (origin, zip, sums, _) = terraform_origin(&ca, work.path());
    let registry = FakeOrigin::start(&ca, &[crate::support::provender::REGISTRY], vec![]).await;
    // Two sites sharing a site key, as two that exchanged public keys: A online, B offline.
    let sites = work.path().join("sites");
    std::fs::create_dir_all(&sites).unwrap();
    let releases = releases_toml(&sites, &origin, false);
    let site = |name: &str, extra: &str| {
        let cache = sites.join(format!("{name}-cache"));
        let config = config_file(&sites, name, &cache, registry.addr(), &ca, extra);
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str(&releases);
        std::fs::write(&config, text).unwrap();
        (config, cache)
    };
    let (config_a, _) = site("a.toml", "allow_private_networks = true");
    let (config_b, cache_b) = site("b.toml", "offline = true");
    let (a, b) = (path_str(&config_a), path_str(&config_b));
    provender(&["seed", "--config", a, "--cli", "terraform@1.11.4"])
        .await
        .ok();

    // Only the CLI goes into the bundle, with the vendor's signed SHA256SUMS.
    let bundle = work.path().join("cli.tar");
    let exported = provender(&[
        "export",
        "--config",
        a,
        "--bundle",
        path_str(&bundle),
        "--cli",
        "terraform",
    ])
    .await;
    exported.ok();
    assert!(
        exported
            .out()
            .contains("terraform 1.11.4: darwin_arm64, linux_amd64"),
        "{}",
        exported.out()
    );
    let manifest: serde_json::Value = {
        let mut archive = tar::Archive::new(std::fs::File::open(&bundle).unwrap());
        let mut first = archive.entries().unwrap().next().unwrap().unwrap();
        serde_json::from_reader(&mut first).unwrap()
    };
    assert_eq!(manifest["versions"], serde_json::json!([]));
    assert_eq!(manifest["releases"][0]["cli"], "terraform");

    // A zip the vendor's SHA256SUMS does not list is refused, though the manifest agrees with
    // it and the importer accepts unsigned bundles; nothing is admitted.
    let forged = work.path().join("forged.tar");
    let zip_path = "releases/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip";
    forge_release_zip(&bundle, &forged, zip_path);
    let refused = import_unverified(b, &forged).await;
    refused.fails(1);
    assert!(
        refused
            .out()
            .contains("is not what the vendor's signed terraform_1.11.4_SHA256SUMS lists"),
        "{}",
        refused.out()
    );
    assert!(release_files(&cache_b).is_empty(), "nothing admitted");

    // The real bundle is admitted; the offline site serves the release and lists it.
    let imported = import(b, &bundle).await;
    imported.ok();
    assert!(
        imported
            .out()
            .contains("CLI release zips: 2 added, 0 already present"),
        "{}",
        imported.out()
    );
    let again = import(b, &bundle).await;
    again.ok();
    assert!(
        again
            .out()
            .contains("CLI release zips: 0 added, 2 already present"),
        "importing again changes nothing: {}",
        again.out()
    );
    let toml = releases.clone();
    let mut served = TestMirror::start_with(
        &ca,
        &registry,
        MirrorOptions {
            extra_upstream: "offline = true",
            extra_toml: &toml,
            cache_dir: Some(&cache_b),
            ..Default::default()
        },
    )
    .await;
    let c = https_client(&ca, &[]);
    let got = get(&c, &served.url(zip_path)).await;
    assert!(got.status == 200 && got.body == zip, "the origin's zip");
    let got = get(
        &c,
        &served.url("releases/terraform/1.11.4/terraform_1.11.4_SHA256SUMS"),
    )
    .await;
    assert!(got.status == 200 && got.body == sums);
    let index = get(&c, &served.url("releases/terraform/index.json")).await;
    assert_eq!(index.status, 200);
    let index: serde_json::Value = serde_json::from_slice(&index.body).unwrap();
    assert_eq!(
        index["versions"]["1.11.4"]["builds"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "the imported release is listed without its origin: {index}"
    );
    served.stop().await;

    // Unused for long, the release goes unless --keep-cli pins it.
    age_files(
        &cache_b.join("releases"),
        std::time::Duration::from_secs(200 * 86400),
    );
    let kept = provender(&[
        "prune",
        "--config",
        b,
        "--unused-for",
        "90d",
        "--keep-cli",
        "terraform@~> 1.11",
        "--json",
    ])
    .await;
    kept.ok();
    let kept: serde_json::Value = serde_json::from_str(&kept.stdout).unwrap();
    assert_eq!(kept["removed"], serde_json::json!([]));
    assert_eq!(kept["kept"][0]["kind"], "release");
    let pruned = provender(&["prune", "--config", b, "--unused-for", "90d", "--json"]).await;
    pruned.ok();
    let pruned: serde_json::Value = serde_json::from_str(&pruned.stdout).unwrap();
    let removed: Vec<&str> = pruned["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["platform"].as_str().unwrap())
        .collect();
    assert_eq!(removed, ["darwin_arm64", "linux_amd64"], "{pruned}");
    assert!(
        release_files(&cache_b)
            .iter()
            .all(|p| !p.to_string_lossy().contains("1.11.4/")),
        "the zips, the record and the SHA256SUMS copies are gone: {:?}",
        release_files(&cache_b)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_on_a_shared_directory_store_fetch_a_release_zip_once() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    // A zip big enough to be still downloading when every client has asked.
    let payload: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let zip = zip_of("terraform", &payload, true);
    write_release(
        &root.join("hashicorp/terraform/1.9.0"),
        "terraform_1.9.0_SHA256SUMS",
        &[("terraform_1.9.0_linux_amd64.zip", &zip)],
        &["terraform_1.9.0_SHA256SUMS.sig"],
        false,
    );
    list_releases(&root, "terraform", &["1.9.0"]);
    let origin = StaticServer::start(&ca, &root);
    let (throttle, base) = throttled(&origin).await;
    throttle.set_rate(1 << 20);
    let registry = FakeOrigin::start(&ca, &[crate::support::provender::REGISTRY], vec![]).await;
    let shared = work.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let cache = format!(
        "backend = \"directory\"\n\n[cache.object_store]\nbucket = \"{}\"\nprefix = \"mirror\"\n",
        shared.display()
    );
    let toml = releases_toml_at(&work.path().join("keys"), &base, false);
    let replica = async || {
        TestMirror::start_with(
            &ca,
            &registry,
            MirrorOptions {
                extra_upstream: "allow_private_networks = true",
                extra_cache: &cache,
                extra_toml: &toml,
                ..Default::default()
            },
        )
        .await
    };
    let (a, b) = (replica().await, replica().await);
    let c = https_client(&ca, &[]);
    let path = "releases/terraform/1.9.0/terraform_1.9.0_linux_amd64.zip";
    let mut downloads = Vec::new();
    for m in [&a, &b, &a, &b, &a, &b] {
        let (c, url) = (c.clone(), m.url(path));
        downloads.push(tokio::spawn(async move { get(&c, &url).await }));
    }
    for d in downloads {
        let got = within("a release download", d).await.unwrap();
        assert!(
            got.status == 200 && got.body == zip,
            "the origin's zip, whole"
        );
    }
    let fetched = origin
        .access_log()
        .lines()
        .filter(|l| l.contains("_linux_amd64.zip"))
        .count();
    assert_eq!(fetched, 1, "one origin download for both replicas");
    let role = async |m: &TestMirror, role: &str| {
        sample(
            &m.metrics(&c).await,
            &format!("provender_fleet_fills_total{{role=\"{role}\"}}"),
        )
    };
    let leaders = role(&a, "leader").await + role(&b, "leader").await;
    let followers = role(&a, "follower").await + role(&b, "follower").await;
    assert_eq!(
        (leaders, followers),
        (1, 1),
        "one replica led, the other followed"
    );
    assert_eq!(role(&a, "alone").await + role(&b, "alone").await, 0);
    assert!(
        files_under(&shared.join("mirror/releases"))
            .iter()
            .any(|p| p.ends_with("terraform_1.9.0_linux_amd64.zip")),
        "the zip is in the shared store"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_authentication_on_installers_use_basic_credentials_or_open_releases() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let (origin, _, sums, _) = terraform_origin(&ca, work.path());
    let registry = FakeOrigin::start(&ca, &[crate::support::provender::REGISTRY], vec![]).await;
    let token = "installer-token-0123456789abcdef";
    let c = https_client(&ca, &[]);
    let path = "releases/terraform/1.11.4/terraform_1.11.4_SHA256SUMS";
    let reader = "reader-token-0123456789abcdef0";
    for protect in [true, false] {
        // `reader` may read only what is cached (a rule with `fill = false`).
        let toml = format!(
            "{}\n[auth]\ntokens = [\"{token}\"]\nprotect_releases = {protect}\n\n\
             [[auth.clients]]\nname = \"reader\"\ntoken = \"{reader}\"\n\n\
             [[auth.rules]]\nname = \"cache-only\"\nclients = \"reader\"\nfill = false\n",
            releases_toml(&work.path().join("keys"), &origin, false)
        );
        let m = TestMirror::start_with(
            &ca,
            &registry,
            MirrorOptions {
                extra_upstream: "allow_private_networks = true",
                extra_toml: &toml,
                ..Default::default()
            },
        )
        .await;
        let anonymous = c.get(m.url(path)).send().await.unwrap();
        assert_eq!(anonymous.status(), if protect { 401 } else { 200 });
        // What curl --netrc (tfenv's TFENV_NETRC_PATH) sends: the token as the password.
        let basic = c
            .get(m.url(path))
            .basic_auth("ci", Some(token))
            .send()
            .await
            .unwrap();
        let status = basic.status();
        let body = basic.bytes().await.unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert!(body == sums);
        let wrong = c
            .get(m.url(path))
            .basic_auth("ci", Some("not-the-token"))
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), if protect { 401 } else { 200 });
        // A cache-only client learns nothing of a build that is not cached, HEAD or GET.
        let zip = m.url("releases/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip");
        for method in [reqwest::Method::HEAD, reqwest::Method::GET] {
            let refused = c
                .request(method.clone(), &zip)
                .bearer_auth(reader)
                .send()
                .await
                .unwrap();
            assert_eq!(refused.status(), 403, "{method}");
        }
        // Everything else still needs a token.
        let index = c
            .get(m.url(&format!(
                "{}/hashicorp/random/index.json",
                crate::support::provender::REGISTRY
            )))
            .send()
            .await
            .unwrap();
        assert_eq!(index.status(), 401);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tofu_comes_through_as_zip_and_tar_gz_the_way_tofudl_fetches_it() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    let binary = b"#!/bin/sh\necho OpenTofu v1.8.0\n";
    let zip = zip_of("tofu", binary, true);
    let tarball = pack(".tar.gz", &[("tofu", binary)]);
    let names = [
        "tofu_1.8.0_linux_amd64.zip",
        "tofu_1.8.0_linux_amd64.tar.gz",
    ];
    let (sums, signature) = write_tofu_release(
        &root,
        "1.8.0",
        &[("linux_amd64.zip", &zip), ("linux_amd64.tar.gz", &tarball)],
        false,
    );
    // get.opentofu.org's api.json, as tofudl reads it.
    let mut files: Vec<&str> = names.to_vec();
    files.extend(["tofu_1.8.0_SHA256SUMS", "tofu_1.8.0_SHA256SUMS.gpgsig"]);
    let api = serde_json::json!({"versions": [{"id": "1.8.0", "files": files}]});
    write_api_json(&root, &api);
    let origin = StaticServer::start(&ca, &root);
    let (m, _registry) = mirror(&ca, work.path(), &origin, false).await;
    let c = https_client(&ca, &[]);

    // tofudl (opentofu/tofudl): the API document, then every artifact from its URL template
    // `<base>releases/tofu/{{ .Version }}/{{ .Artifact }}`, each only if `files` lists it.
    let listed = get(&c, &m.url("releases/tofu/api.json")).await;
    assert_eq!(listed.status, 200);
    let listed: serde_json::Value = serde_json::from_slice(&listed.body).unwrap();
    let release = &listed["versions"][0];
    assert_eq!(release["id"], "1.8.0");
    let artifact = |name: &str| {
        assert!(
            release["files"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f == name),
            "{name} is listed"
        );
        m.url(&format!("releases/tofu/1.8.0/{name}"))
    };
    let got_sums = get(&c, &artifact("tofu_1.8.0_SHA256SUMS")).await;
    assert!(got_sums.status == 200 && got_sums.body == sums);
    let got_sig = get(&c, &artifact("tofu_1.8.0_SHA256SUMS.gpgsig")).await;
    assert!(got_sig.status == 200 && got_sig.body == signature);
    // A record kept before .tar.gz builds were recorded (without `tarballs`) still serves them,
    // from the stored SHA256SUMS.
    let record_path = m.cache_dir.join("releases/tofu/1.8.0/release.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record_path).unwrap()).unwrap();
    assert!(record["tarballs"].is_object(), "{record}");
    record.as_object_mut().unwrap().remove("tarballs");
    std::fs::write(&record_path, serde_json::to_vec(&record).unwrap()).unwrap();
    let got = get(&c, &artifact(names[1])).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.headers["content-type"], "application/gzip");
    assert!(got.body == tarball, "the origin's .tar.gz, whole");
    let line = format!("{}  {}", sha256_hex(&got.body), names[1]);
    assert!(
        String::from_utf8_lossy(&got_sums.body).contains(&line),
        "its SHA-256 is the signed list's"
    );
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record_path).unwrap()).unwrap();
    assert!(
        record["tarballs"].is_object(),
        "the record is kept with its .tar.gz builds again: {record}"
    );
    let got = get(&c, &artifact(names[0])).await;
    assert!(got.status == 200 && got.body == zip);
    // A platform the release has no .tar.gz for is a 404.
    let none = get(
        &c,
        &m.url("releases/tofu/1.8.0/tofu_1.8.0_darwin_arm64.tar.gz"),
    )
    .await;
    assert_eq!(none.status, 404);

    // Both builds are cached (each committed once its download is checked).
    let cached = || {
        release_files(&m.cache_dir)
            .iter()
            .filter(|p| {
                let name = p.to_string_lossy();
                name.ends_with(".zip") || name.ends_with(".tar.gz")
            })
            .count()
    };
    crate::support::poll(std::time::Duration::from_secs(10), async || {
        (cached() == 2).then_some(())
    })
    .await
    .expect("both builds are cached");

    // `seed --cli tofu` fetches every build of the newest matching release.
    let dir = work.path().join("seed");
    let (config, _registry) = seed_config(&ca, &dir, &origin).await;
    let config = crate::support::cli::path_str(&config);
    let seeded =
        crate::support::cli::provender(&["seed", "--config", config, "--cli", "tofu"]).await;
    seeded.ok();
    for added in [
        "release tofu 1.8.0 linux_amd64: added",
        "release tofu 1.8.0 linux_amd64 (tar.gz): added",
    ] {
        assert!(seeded.out().contains(added), "{}", seeded.out());
    }
    let stored = dir.join("cache/releases/tofu/1.8.0/tofu_1.8.0_linux_amd64.tar.gz");
    assert!(std::fs::read(stored).unwrap() == tarball);

    // Both builds travel in a bundle and are checked again on import.
    let bundle = work.path().join("tofu.tar");
    crate::support::cli::provender(&[
        "export",
        "--config",
        config,
        "--bundle",
        crate::support::cli::path_str(&bundle),
    ])
    .await
    .ok();
    let other = work.path().join("other");
    let (other_config, _other_registry) = seed_config(&ca, &other, &origin).await;
    let imported = crate::support::cli::import_unverified(
        crate::support::cli::path_str(&other_config),
        &bundle,
    )
    .await;
    imported.ok();
    assert!(
        imported
            .out()
            .contains("CLI release zips: 2 added, 0 already present"),
        "{}",
        imported.out()
    );
    let imported = other.join("cache/releases/tofu/1.8.0/tofu_1.8.0_linux_amd64.tar.gz");
    assert!(std::fs::read(imported).unwrap() == tarball);
}

/// How many requests of the origin's access log name `path`.
fn asked(origin: &StaticServer, path: &str) -> usize {
    origin
        .access_log()
        .lines()
        .filter(|l| l.contains(path))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_versions_cost_the_release_host_one_list_fetch_and_missing_ones_one_request() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    let zip = zip_of("tofu", b"#!/bin/sh\necho tofu\n", true);
    write_tofu_release(&root, "1.8.0", &[("linux_amd64.zip", &zip)], false);
    // 1.8.5 is listed, but the release host has none of its files.
    list_releases(&root, "tofu", &["1.8.5", "1.8.0"]);
    let origin = StaticServer::start(&ca, &root);
    let (m, _registry) = mirror(&ca, work.path(), &origin, false).await;
    let c = https_client(&ca, &[]);

    // 40 requests at once for versions the vendor does not list, in every form a build or
    // its checksums are asked for.
    let mut requests = Vec::new();
    for i in 0..40 {
        let v = format!("1.9.{i}");
        let (file, head) = match i % 4 {
            0 => (format!("tofu_{v}_linux_amd64.zip"), false),
            1 => (format!("tofu_{v}_linux_amd64.tar.gz"), false),
            2 => (format!("tofu_{v}_SHA256SUMS"), false),
            _ => (format!("tofu_{v}_linux_amd64.zip"), true),
        };
        let (c, url) = (c.clone(), m.url(&format!("releases/tofu/{v}/{file}")));
        requests.push(tokio::spawn(async move {
            let request = if head { c.head(&url) } else { c.get(&url) };
            let resp = request.send().await.unwrap();
            let status = resp.status();
            (url, status, resp.text().await.unwrap())
        }));
    }
    for request in requests {
        let (url, status, body) = within("a request", request).await.unwrap();
        assert_eq!(status, 404, "{url}: {body}");
        if !body.is_empty() {
            assert!(body.contains("list of releases does not have it"), "{body}");
        }
    }
    assert_eq!(
        asked(&origin, "GET /opentofu/api.json"),
        1,
        "one list fetch"
    );
    assert_eq!(
        asked(&origin, "/opentofu/v1.9."),
        0,
        "nothing of an unlisted version is asked for"
    );

    // A listed version the release host does not have: asked once, then remembered.
    for _ in 0..10 {
        let got = get(&c, &m.url("releases/tofu/1.8.5/tofu_1.8.5_linux_amd64.zip")).await;
        assert_eq!(got.status, 404);
        assert!(
            got.message().contains("tofu_1.8.5_SHA256SUMS"),
            "{}",
            got.message()
        );
    }
    assert_eq!(
        asked(&origin, "/opentofu/v1.8.5/"),
        1,
        "one request, then remembered"
    );

    // A listed release is served as ever, from the list already fetched.
    let got = get(&c, &m.url("releases/tofu/1.8.0/tofu_1.8.0_linux_amd64.zip")).await;
    assert!(got.status == 200 && got.body == zip);
    assert_eq!(asked(&origin, "GET /opentofu/api.json"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vendors_429_for_one_release_does_not_stop_the_others() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    let zip = zip_of("tofu", b"#!/bin/sh\necho tofu\n", true);
    for v in ["1.8.0", "1.9.0"] {
        write_tofu_release(&root, v, &[("linux_amd64.zip", &zip)], false);
    }
    list_releases(&root, "tofu", &["1.9.0", "1.8.0"]);
    // The vendor rate-limits everything of 1.9.0.
    let origin = StaticServer::start_with(
        &ca,
        &root,
        "location /opentofu/v1.9.0/ { add_header Retry-After 0 always; return 429; }",
    );
    let (m, _registry) = mirror(&ca, work.path(), &origin, false).await;
    let c = https_client(&ca, &[]);
    for _ in 0..4 {
        let got = get(&c, &m.url("releases/tofu/1.9.0/tofu_1.9.0_linux_amd64.zip")).await;
        assert_eq!(got.status, 502, "{}", got.message());
        assert!(got.message().contains("429"), "{}", got.message());
    }
    let limited = origin
        .access_log()
        .lines()
        .filter(|l| l.contains("/opentofu/v1.9.0/") && l.contains("\" 429 "))
        .count();
    assert!(
        limited > 5,
        "more 429s ({limited}) than upstream.breaker_failures (5), each retried"
    );
    let metrics = m.metrics(&c).await;
    assert_eq!(
        sample(
            &metrics,
            "provender_upstream_circuit_open{host=\"localhost\"}"
        ),
        0,
        "a 429 does not open the host's circuit"
    );
    let got = get(&c, &m.url("releases/tofu/1.8.0/tofu_1.8.0_linux_amd64.zip")).await;
    assert_eq!(got.status, 200, "{}", got.message());
    assert!(got.body == zip);
}

#[tokio::test(flavor = "multi_thread")]
async fn release_builds_count_against_max_size_and_push_out_older_objects() {
    const MIB: usize = 1 << 20;
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    // Two builds of 2 MiB each (stored, so as large as their content).
    let linux = zip_of("tofu", &noise(2 * MIB), true);
    let darwin = zip_of("tofu ", &noise(2 * MIB), true);
    write_tofu_release(
        &root,
        "1.8.0",
        &[("linux_amd64.zip", &linux), ("darwin_arm64.zip", &darwin)],
        false,
    );
    list_releases(&root, "tofu", &["1.8.0"]);
    let origin = StaticServer::start(&ca, &root);
    let big =
        crate::support::origin::ProviderSpec::new("acme", "big", &["1.0.0"], &[("linux", "amd64")])
            .with_payload(2 * MIB);
    let (m, _registry) = mirror_with(
        &ca,
        work.path(),
        &origin.url(),
        false,
        vec![big],
        "max_size = \"5 MiB\"",
    )
    .await;
    let c = https_client(&ca, &[]);
    let archive = m.url(&format!(
        "{}/acme/big/terraform-provider-big_1.0.0_linux_amd64.zip",
        crate::support::provender::REGISTRY
    ));
    let build = |platform: &str| m.url(&format!("releases/tofu/1.8.0/tofu_1.8.0_{platform}.zip"));
    let stored = || {
        let mut names: Vec<String> = files_under(&m.cache_dir)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".zip"))
            .collect();
        names.sort();
        names
    };
    let settled = async |what: &str, expected: &[&str]| {
        crate::support::poll(std::time::Duration::from_secs(10), async || {
            (stored() == expected).then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("{what}: {:?}", stored()));
    };
    let provider = "terraform-provider-big_1.0.0_linux_amd64.zip";
    assert_eq!(get(&c, &archive).await.status, 200);
    settled("the archive is stored", &[provider]).await;
    assert!(get(&c, &build("linux_amd64")).await.body == linux);
    settled(
        "a build beside it",
        &[provider, "tofu_1.8.0_linux_amd64.zip"],
    )
    .await;
    // A third object of 2 MiB is over 5 MiB: the least recently used goes, the archive.
    assert!(get(&c, &build("darwin_arm64")).await.body == darwin);
    settled(
        "the archive pushed out by a build",
        &["tofu_1.8.0_darwin_arm64.zip", "tofu_1.8.0_linux_amd64.zip"],
    )
    .await;
    // Builds are evictable like archives: the archive again pushes out the older build.
    assert_eq!(get(&c, &archive).await.status, 200);
    settled(
        "the older build pushed out",
        &[provider, "tofu_1.8.0_darwin_arm64.zip"],
    )
    .await;
    let metrics = m.metrics(&c).await;
    assert_eq!(sample(&metrics, "provender_cache_evictions_total"), 2);
    // An evicted build is fetched again when asked for.
    assert!(get(&c, &build("linux_amd64")).await.body == linux);
}
