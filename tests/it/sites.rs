//! Sites behind sites: an edge provender whose origin hosts go `via` a centre provender, which
//! alone reaches the origins, with the vendors' signatures checked again at the edge.
//!
//! - three servers on loopback (a fake origin registry with its release host, a centre, an
//!   edge that cannot reach the origin): the real `terraform init` at the edge installs a
//!   provider and a registry module, and a CLI release comes through the edge; the origin
//!   sends each archive once; the edge's version record carries the origin's signing key and
//!   trust level; the edge's workload token (a `token_file`) reaches the centre and never the
//!   origin; with the centre stopped, `init` at the edge still succeeds from its cache;
//! - a hostile centre (nginx impersonating a centre's registry facade) that hands out another
//!   version's signed files, altered bytes, a signature by a key it does not list, or a
//!   pinned namespace signed by another key is refused at the edge, and nothing is kept; an
//!   `h1:` it states falsely is only counted as a mismatch, the computed one is served;
//! - `fallback = "origin"` asks the origin only when the centre does not answer, never when
//!   it answered with a refusal;
//! - `provender seed --from <centre>` fills a cache from the centre, with the same checks;
//! - the edge's workload identity (a Kubernetes service-account token the centre checks against
//!   the cluster's issuer) is read from its `token_file` for every request, so a rotated token
//!   is used at once; an unreadable file fails at the edge.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::releases::{releases_toml, sha256_hex, terraform_release};
use crate::support::cli::{path_str, provender};
use crate::support::http::get;
use crate::support::issuer::FakeIssuer;
use crate::support::origin::{
    FakeOrigin, ModuleSource, ModuleSpec, ProviderSpec, RequestKind, sign_detached,
};
use crate::support::pki::TestCa;
use crate::support::provender::{
    MirrorOptions, REGISTRY, ServerProcess, TestMirror, files_under, write_config,
};
use crate::support::static_server::StaticServer;
use crate::support::tf_config::{self, local_platform, root_module};
use crate::support::{Terraform, https_client, poll, sample};

/// The edge's bearer token at the centre, as a workload identity file would hold it.
const EDGE_TOKEN: &str = "edge-site-workload-token-0123456789";

/// The centre's `[auth]`: one client, the edge, which may fill; nobody else gets in.
fn centre_auth() -> String {
    format!(
        "[auth]\nurl_signing_key = \"{key}\"\n\n[[auth.clients]]\nname = \"edge-site\"\n\
         token = \"{EDGE_TOKEN}\"\n\n[[auth.rules]]\nname = \"edges\"\nclients = \"edge-site\"\n\
         fill = true\n",
        key = "c".repeat(40),
    )
}

/// The edge's tables: `registry.terraform.io` (reachable only at a closed port) and, with
/// `releases`, the release host go via `centre`; the centre's token comes from `token_file`.
/// `more` is added to the registry's table.
fn edge_toml(
    centre: &url::Url,
    token_file: &Path,
    more: &str,
    releases: bool,
    origin: Option<std::net::SocketAddr>,
) -> String {
    let centre_host = format!(
        "{}:{}",
        centre.host_str().unwrap(),
        centre.port_or_known_default().unwrap()
    );
    let release_host = if releases {
        format!("[upstream.hosts.\"localhost\"]\nvia = \"{centre}\"\n")
    } else {
        String::new()
    };
    format!(
        "[upstream.hosts.\"{REGISTRY}\"]\nvia = \"{centre}\"\nconnect_to = \"{origin}\"\n{more}\n\n\
         [upstream.hosts.\"{centre_host}\"]\ntoken_file = \"{token}\"\n\n{release_host}",
        token = token_file.display(),
        origin = origin.unwrap_or_else(|| "127.0.0.1:9".parse().unwrap()),
    )
}

/// An edge server via `centre`, its token in `dir`: the origin is out of its reach, or with
/// `fallback`, reachable and asked when the centre does not answer (`fallback = "origin"`).
async fn edge(
    ca: &TestCa,
    origin: &FakeOrigin,
    centre: &url::Url,
    dir: &Path,
    releases: &str,
    fallback: bool,
) -> TestMirror {
    let token_file = dir.join("edge-token");
    std::fs::write(&token_file, format!("{EDGE_TOKEN}\n")).unwrap();
    let (more, reach) = match fallback {
        true => ("fallback = \"origin\"", Some(origin.addr())),
        false => ("", None),
    };
    let toml = format!(
        "{}\n{releases}",
        edge_toml(centre, &token_file, more, !releases.is_empty(), reach)
    );
    TestMirror::start_with(
        ca,
        origin,
        MirrorOptions {
            extra_upstream: "allow_private_networks = true",
            by_name: true,
            extra_toml: &toml,
            ..Default::default()
        },
    )
    .await
}

fn main_tf() -> String {
    "terraform {\n  required_providers {\n    foo = {\n      source  = \"acme/foo\"\n      \
     version = \"1.0.0\"\n    }\n  }\n}\n\nmodule \"net\" {\n  source  = \"acme/net/test\"\n  \
     version = \"1.0.0\"\n}\n\nmodule \"sub\" {\n  source  = \"acme/sub/test\"\n  \
     version = \"1.0.0\"\n}\n"
        .to_string()
}

/// A CLI configuration sending registry.terraform.io's registry protocols to `mirror`.
fn through(mirror: &url::Url) -> String {
    tf_config::registry_host_with_modules(
        &format!("{mirror}v1/providers/{REGISTRY}/"),
        &format!("{mirror}v1/modules/{REGISTRY}/"),
    )
}

/// The version record the mirror keeps for `acme/<ty>` `version`.
fn version_record(cache: &Path, ns: &str, ty: &str, version: &str) -> Option<Value> {
    let path = cache.join(format!("metadata/{REGISTRY}/{ns}/{ty}/{version}.json"));
    let bytes = std::fs::read(path).ok()?;
    Some(serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edge_fills_through_its_centre_with_the_vendors_checks_and_keeps_serving_without_it() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let (os, arch) = local_platform();
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new(
            "acme",
            "foo",
            &["1.0.0"],
            &[(os, arch), ("darwin", "arm64")],
        )],
        vec![
            ModuleSpec::new("acme", "net", "test", &["1.0.0"]),
            ModuleSpec::new("acme", "sub", "test", &["1.0.0"])
                .source(ModuleSource::Subdir("modules/inner".to_owned())),
        ],
    )
    .await;
    let release_root = work.path().join("release-origin");
    let (zip, _sums, _signature) = terraform_release(&release_root);
    let release_host = StaticServer::start(&ca, &release_root);
    let releases = releases_toml(&work.path().join("keys"), &release_host, false);

    // The centre and the edge: the real binary, each its own process.
    let centre_dir = work.path().join("centre");
    std::fs::create_dir_all(&centre_dir).unwrap();
    let centre_toml = format!("{releases}\n{}", centre_auth());
    let centre_config = write_config(
        &ca,
        &centre_dir,
        origin.addr(),
        &MirrorOptions {
            extra_upstream: "allow_private_networks = true",
            extra_toml: &centre_toml,
            ..Default::default()
        },
    );
    let mut centre = ServerProcess::spawn(&centre_config);
    let edge_dir = work.path().join("edge");
    std::fs::create_dir_all(&edge_dir).unwrap();
    let token_file = edge_dir.join("edge-token");
    std::fs::write(&token_file, format!("{EDGE_TOKEN}\n")).unwrap();
    let edge_toml = format!(
        "{}\n{releases}",
        edge_toml(&centre.url, &token_file, "", true, None)
    );
    let edge_config = write_config(
        &ca,
        &edge_dir,
        origin.addr(),
        &MirrorOptions {
            extra_upstream: "allow_private_networks = true",
            by_name: true,
            extra_toml: &edge_toml,
            ..Default::default()
        },
    );
    let edge = ServerProcess::spawn(&edge_config);
    let edge_cache = edge_dir.join("cache");
    let terraform = Terraform::new(&ca, &through(&edge.url));

    let first = root_module(&main_tf());
    terraform.init(first.path()).await.assert_success();
    let lock = std::fs::read_to_string(first.path().join(".terraform.lock.hcl")).unwrap();
    let zh = format!("zh:{}", origin.sha256_hex("acme", "foo", "1.0.0", os, arch));
    assert!(
        lock.contains(&zh),
        "the lock file has the signed zh: {lock}"
    );
    let other = format!(
        "zh:{}",
        origin.sha256_hex("acme", "foo", "1.0.0", "darwin", "arm64")
    );
    assert!(lock.contains(&other), "and every platform's: {lock}");
    assert!(
        lock.contains(&origin.h1_zip("acme", "foo", "1.0.0", os, arch))
            || lock.contains(&origin.h1_dir("acme", "foo", "1.0.0", os, arch)),
        "the lock file has the archive's h1: {lock}"
    );
    let manifest =
        std::fs::read_to_string(first.path().join(".terraform/modules/modules.json")).unwrap();
    assert!(manifest.contains("\"net\""), "{manifest}");
    // A module in a subdirectory of its package arrives as that subdirectory.
    let installed: Value = serde_json::from_str(&manifest).unwrap();
    let sub = installed["Modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Key"] == "sub")
        .expect("the sub module is installed");
    let sub_dir = first.path().join(sub["Dir"].as_str().unwrap());
    for (path, content) in origin.module_files("acme", "sub", "test", "1.0.0") {
        assert_eq!(
            std::fs::read(sub_dir.join(&path)).unwrap(),
            content,
            "{path}"
        );
    }
    assert!(!sub_dir.join("README.md").exists(), "only the subdirectory");

    // A CLI release through the edge: the vendor's bytes.
    let c = https_client(&ca, &[]);
    let release_url = edge.url("releases/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip");
    let got = get(&c, &release_url).await;
    assert_eq!(got.status, 200);
    assert_eq!(sha256_hex(&got.body), sha256_hex(&zip));

    // The origin served each archive once, to the centre; the edge never reached it.
    assert_eq!(origin.downloads_of("acme", "foo", "1.0.0", os, arch), 1);
    assert_eq!(origin.count(RequestKind::Archive), 1);
    assert_eq!(
        origin.count(RequestKind::ModuleDownload),
        2,
        "one per module version"
    );
    let zip_gets = release_host
        .access_log()
        .lines()
        .filter(|l| l.contains("GET /hashicorp/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip"))
        .count();
    assert_eq!(zip_gets, 1, "{}", release_host.access_log());
    // The edge's token went to the centre only.
    assert!(
        origin.requests().iter().all(|r| r.authorization.is_none()),
        "{:?}",
        origin.requests()
    );

    // The edge's record is what asking the origin gives: its key, its trust level.
    let rec = version_record(&edge_cache, "acme", "foo", "1.0.0").expect("edge record");
    let trust = &rec["sums"][0]["trust"];
    assert_eq!(trust["kind"], "community", "{rec:#}");
    assert_eq!(trust["key_id"], origin.key_id(), "{rec:#}");
    let pkg = &rec["packages"][format!("{os}_{arch}")];
    assert_eq!(
        pkg["signing_keys"][0]["ascii_armor"]
            .as_str()
            .map(str::trim),
        Some(origin.public_key_armor().trim())
    );
    assert_eq!(
        pkg["shasum"],
        origin.sha256_hex("acme", "foo", "1.0.0", os, arch)
    );
    // The centre's URLs, without the signatures it made for the edge: the edge shows its token.
    for url in ["download_url", "shasums_url", "shasums_signature_url"] {
        let url = pkg[url].as_str().unwrap();
        assert!(url.starts_with(centre.url.as_str()), "{url}");
        assert!(!url.contains('?'), "{url}");
    }
    // Module records name the centre's package, without its signature either.
    let module_records: Vec<Value> = files_under(&edge_cache.join("modules"))
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "module.json"))
        .map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap())
        .collect();
    assert_eq!(module_records.len(), 2, "{module_records:?}");
    for rec in &module_records {
        let source = rec["source"].to_string();
        assert!(source.contains(centre.url.as_str()), "{source}");
        assert!(!source.contains('?'), "{source}");
    }
    // The edge's SHA256SUMS copies are the origin's bytes.
    let sums =
        std::fs::read(edge_cache.join(format!("metadata/{REGISTRY}/acme/foo/1.0.0.SHA256SUMS.0")))
            .unwrap();
    assert_eq!(sums, origin.shasums("acme", "foo", "1.0.0"));

    // The centre gone: the edge serves from its cache.
    centre.signal("TERM");
    centre.wait();
    let second = root_module(&main_tf());
    terraform.init(second.path()).await.assert_success();
    let got = get(&c, &release_url).await;
    assert_eq!(got.status, 200);
    assert_eq!(sha256_hex(&got.body), sha256_hex(&zip));
    assert_eq!(origin.count(RequestKind::Archive), 1);
}

/// What a hostile centre does with one version's download answer.
enum Lie {
    /// The genuine answer; the archive's bytes altered.
    AlteredArchive,
    /// Another version's signed files (filename, shasum, SHA256SUMS and signature).
    OtherVersion(&'static str),
    /// The genuine SHA256SUMS signed by a key the answer does not list.
    UnlistedKey,
    /// The genuine answer with a false `h1:` in the `packages` extension.
    FalseH1,
    /// The genuine answer, files and key (of a namespace pinned to another key).
    Genuine,
}

/// Writes, under `root`, a centre's registry facade for `REGISTRY/<ns>/foo` `version` on
/// `platform` as `lie` has it, from the origin's genuine files.
fn hostile_facade(root: &Path, origin: &FakeOrigin, ns: &str, version: &str, lie: Lie) {
    let (os, arch) = local_platform();
    let files = root.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let named = match lie {
        Lie::OtherVersion(other) => other,
        _ => version,
    };
    let filename = origin.filename(ns, "foo", named, os, arch);
    let mut archive = origin.archive(ns, "foo", named, os, arch);
    if let Lie::AlteredArchive = lie {
        let at = archive.len() / 2;
        archive[at] ^= 0x55;
    }
    let sums = origin.shasums(ns, "foo", named);
    let signature = match lie {
        Lie::UnlistedKey => sign_detached(&sums, true),
        _ => origin.shasums_signature(ns, "foo", named),
    };
    // Each version's files apart (under the version asked for).
    let prefix = format!("{ns}_{version}_");
    std::fs::write(files.join(format!("{prefix}{filename}")), &archive).unwrap();
    std::fs::write(files.join(format!("{prefix}SHA256SUMS")), &sums).unwrap();
    std::fs::write(files.join(format!("{prefix}SHA256SUMS.sig")), &signature).unwrap();
    let mut answer = serde_json::json!({
        "protocols": ["5.0"], "os": os, "arch": arch, "filename": filename,
        "download_url": format!("/files/{prefix}{filename}"),
        "shasum": origin.sha256_hex(ns, "foo", named, os, arch),
        "shasums_url": format!("/files/{prefix}SHA256SUMS"),
        "shasums_signature_url": format!("/files/{prefix}SHA256SUMS.sig"),
        "signing_keys": {"gpg_public_keys": [{
            "key_id": origin.key_id(), "ascii_armor": origin.public_key_armor(),
        }]},
    });
    if let Lie::FalseH1 = lie {
        // Another archive's h1: a statement the edge can check once it has the archive.
        let other = origin.h1_zip(ns, "foo", "1.0.0", os, arch);
        answer["packages"] = serde_json::json!({ format!("{os}_{arch}"): {"hashes": [other]} });
    }
    let provider = root.join(format!("v1/providers/{REGISTRY}/{ns}/foo"));
    let download = provider.join(format!("{version}/download/{os}"));
    std::fs::create_dir_all(&download).unwrap();
    std::fs::write(download.join(arch), serde_json::to_vec(&answer).unwrap()).unwrap();
    // The version list: every version written so far.
    let list = provider.join("versions");
    let mut versions: Value = std::fs::read(&list)
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap_or_else(|_| serde_json::json!({"versions": []}));
    versions["versions"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "version": version, "protocols": ["5.0"],
            "platforms": [{"os": os, "arch": arch}],
        }));
    std::fs::write(&list, serde_json::to_vec(&versions).unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_centre_is_refused_at_the_edge_and_nothing_is_kept() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let (os, arch) = local_platform();
    // Only the fixtures' genuine signed files are used: nothing asks this origin anything.
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new("acme", "foo", &["1.0.0", "3.0.0", "4.0.0"], &[(os, arch)]),
            ProviderSpec::new("hashicorp", "foo", &["1.0.0"], &[(os, arch)]),
        ],
    )
    .await;
    let root = work.path().join("hostile");
    hostile_facade(&root, &origin, "acme", "1.0.0", Lie::AlteredArchive);
    hostile_facade(&root, &origin, "acme", "2.0.0", Lie::OtherVersion("1.0.0"));
    hostile_facade(&root, &origin, "acme", "3.0.0", Lie::UnlistedKey);
    hostile_facade(&root, &origin, "acme", "4.0.0", Lie::FalseH1);
    hostile_facade(&root, &origin, "hashicorp", "1.0.0", Lie::Genuine);
    let hostile = StaticServer::start(&ca, &root);
    let centre = url::Url::parse(&hostile.url()).unwrap();
    let edge = edge(&ca, &origin, &centre, work.path(), "", false).await;
    let c = https_client(&ca, &[]);
    let platform = format!("{os}_{arch}");
    let version_doc = |ns: &str, v: &str| edge.url(&format!("{REGISTRY}/{ns}/foo/{v}.json"));
    let archive = |ns: &str, v: &str| {
        edge.url(&format!(
            "{REGISTRY}/{ns}/foo/terraform-provider-foo_{v}_{platform}.zip"
        ))
    };

    // Altered bytes: the signed metadata passes, the archive does not.
    let got = get(&c, &version_doc("acme", "1.0.0")).await;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    let got = c.get(archive("acme", "1.0.0")).send().await.unwrap();
    let status = got.status();
    let body = got.bytes().await;
    assert!(
        status == 502 || body.is_err(),
        "an altered archive never arrives whole ({status})"
    );

    // Another version's signed files, a signature by an unlisted key, a pinned namespace
    // signed by another key: each version is refused before any archive is fetched.
    for (ns, v, why) in [
        ("acme", "2.0.0", "another version"),
        ("acme", "3.0.0", "signature"),
        ("hashicorp", "1.0.0", "pinned"),
    ] {
        let got = get(&c, &version_doc(ns, v)).await;
        let body = String::from_utf8_lossy(&got.body).to_string();
        assert_eq!(got.status, 502, "{ns}/foo {v} ({why}): {body}");
        let got = get(&c, &archive(ns, v)).await;
        assert_eq!(got.status, 502, "{ns}/foo {v} ({why})");
        assert!(version_record(&edge.cache_dir, ns, "foo", v).is_none());
    }
    // Refused on their signed files: their archives were never even asked for.
    let asked = hostile.access_log();
    for refused in [
        "acme_2.0.0_terraform",
        "acme_3.0.0_terraform",
        "hashicorp_1.0.0_terraform",
    ] {
        assert!(!asked.contains(refused), "{refused}: {asked}");
    }
    assert!(
        edge.cached_archives().is_empty(),
        "nothing hostile is kept: {:?}",
        edge.cached_archives()
    );

    // A false h1: is only a hint: the computed one is served, the lie counted.
    let got = get(&c, &archive("acme", "4.0.0")).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, origin.archive("acme", "foo", "4.0.0", os, arch));
    let computed = origin.h1_zip("acme", "foo", "4.0.0", os, arch);
    // The record takes the archive's h1: once it is committed, just after the response.
    let hashes = poll(Duration::from_secs(10), async || {
        let doc = get(&c, &version_doc("acme", "4.0.0")).await.json();
        let hashes = doc["archives"][&platform]["hashes"].to_string();
        hashes.contains(&computed).then_some(hashes)
    })
    .await
    .expect("the computed h1: is listed");
    assert!(
        !hashes.contains(&origin.h1_zip("acme", "foo", "1.0.0", os, arch)),
        "{hashes}"
    );
    let metrics = edge.metrics(&c).await;
    assert_eq!(
        sample(
            &metrics,
            "provender_verification_failures_total{reason=\"reported_h1_mismatch\"}"
        ),
        1
    );
    assert_eq!(edge.cached_archives().len(), 1);
    assert!(
        edge.staging_files().is_empty(),
        "{:?}",
        edge.staging_files()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn fallback_asks_the_origin_only_when_the_centre_does_not_answer() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let (os, arch) = local_platform();
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new("acme", "foo", &["1.0.0"], &[(os, arch)])],
    )
    .await;
    let c = https_client(&ca, &[]);
    let platform = format!("{os}_{arch}");

    // A centre that answers, with a refusal: its edge may read its cache but not fill it.
    let refusing = TestMirror::start_with_toml(
        &ca,
        &origin,
        &centre_auth().replace("fill = true", "fill = false"),
    )
    .await;
    let dir = work.path().join("refused");
    std::fs::create_dir_all(&dir).unwrap();
    let edge_a = edge(&ca, &origin, &refusing.url, &dir, "", true).await;
    let got = get(&c, &edge_a.url(&format!("{REGISTRY}/acme/foo/index.json"))).await;
    assert_ne!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(
        origin.total_requests(),
        0,
        "an answer of the centre's is not second-guessed: {:?}",
        origin.requests()
    );

    // A centre that does not answer at all: the origin is asked, and checked as ever.
    let gone = url::Url::parse("https://localhost:9/").unwrap();
    let dir = work.path().join("gone");
    std::fs::create_dir_all(&dir).unwrap();
    let edge_b = edge(&ca, &origin, &gone, &dir, "", true).await;
    let archive = edge_b.url(&format!(
        "{REGISTRY}/acme/foo/terraform-provider-foo_1.0.0_{platform}.zip"
    ));
    let got = get(&c, &archive).await;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(got.body, origin.archive("acme", "foo", "1.0.0", os, arch));
    assert_eq!(origin.downloads_of("acme", "foo", "1.0.0", os, arch), 1);
    let rec = version_record(&edge_b.cache_dir, "acme", "foo", "1.0.0").expect("record");
    assert_eq!(rec["sums"][0]["trust"]["key_id"], origin.key_id());

    // Without fallback, the same outage is an error: the origin is not asked.
    origin.reset_counts();
    let dir = work.path().join("strict");
    std::fs::create_dir_all(&dir).unwrap();
    let edge_c = edge(&ca, &origin, &gone, &dir, "", false).await;
    let got = get(&c, &edge_c.url(&format!("{REGISTRY}/acme/foo/index.json"))).await;
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(origin.total_requests(), 0, "{:?}", origin.requests());

    // A version record from the centre names the centre's archive URL; the centre gone before
    // the archive was fetched, the origin's own URL is asked for and fetched, and checked
    // against the same signed shasum.
    let mut centre = TestMirror::start_with_toml(&ca, &origin, &centre_auth()).await;
    let dir = work.path().join("late");
    std::fs::create_dir_all(&dir).unwrap();
    let edge_d = edge(&ca, &origin, &centre.url, &dir, "", true).await;
    let got = get(&c, &edge_d.url(&format!("{REGISTRY}/acme/foo/1.0.0.json"))).await;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    let rec = version_record(&edge_d.cache_dir, "acme", "foo", "1.0.0").expect("record");
    let centre_authority = format!("localhost:{}", centre.url.port().unwrap());
    assert!(
        rec["packages"][&platform]["download_url"]
            .as_str()
            .unwrap()
            .contains(&centre_authority),
        "{rec:#}"
    );
    centre.stop().await;
    let before = origin.downloads_of("acme", "foo", "1.0.0", os, arch);
    let got = get(
        &c,
        &edge_d.url(&format!(
            "{REGISTRY}/acme/foo/terraform-provider-foo_1.0.0_{platform}.zip"
        )),
    )
    .await;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(got.body, origin.archive("acme", "foo", "1.0.0", os, arch));
    assert_eq!(
        origin.downloads_of("acme", "foo", "1.0.0", os, arch),
        before + 1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn seed_from_a_centre_fills_a_cache_with_the_same_checks() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let (os, arch) = local_platform();
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new("acme", "foo", &["1.0.0"], &[(os, arch)])],
        vec![ModuleSpec::new("acme", "net", "test", &["1.0.0"])],
    )
    .await;
    let centre = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_toml: &centre_auth(),
            ..Default::default()
        },
    )
    .await;
    // The edge's configuration names no centre, and cannot reach the origin.
    let dir = work.path().join("edge");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = write_config(
        &ca,
        &dir,
        "127.0.0.1:9".parse().unwrap(),
        &MirrorOptions {
            extra_upstream: "allow_private_networks = true",
            ..Default::default()
        },
    );
    let token_file = dir.join("token");
    std::fs::write(&token_file, EDGE_TOKEN).unwrap();
    let platform = format!("{os}_{arch}");
    let seed = |from: String, token: &Path| {
        let (cfg, token) = (path_str(&cfg).to_string(), path_str(token).to_string());
        let platform = platform.clone();
        async move {
            provender(&[
                "seed",
                "--config",
                &cfg,
                "--from",
                &from,
                "--from-token-file",
                &token,
                "--platform",
                &platform,
                "--provider",
                "acme/foo@1.0.0",
                "--module",
                "acme/net/test@1.0.0",
            ])
            .await
        }
    };

    // A wrong token: the centre refuses, nothing is kept.
    let wrong = dir.join("wrong-token");
    std::fs::write(&wrong, "not-the-edge").unwrap();
    let run = seed(centre.url.to_string(), &wrong).await;
    assert_ne!(run.code, Some(0), "{}", run.out());
    assert!(files_under(&dir.join("cache/archives")).is_empty());

    let run = seed(centre.url.to_string(), &token_file).await;
    run.ok();
    let archives: Vec<_> = files_under(&dir.join("cache/archives"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "zip"))
        .collect();
    assert_eq!(archives.len(), 1, "{archives:?}");
    assert_eq!(
        std::fs::read(&archives[0]).unwrap(),
        origin.archive("acme", "foo", "1.0.0", os, arch)
    );
    let rec = version_record(&dir.join("cache"), "acme", "foo", "1.0.0").expect("record");
    assert_eq!(rec["sums"][0]["trust"]["kind"], "community");
    assert_eq!(rec["sums"][0]["trust"]["key_id"], origin.key_id());
    assert!(
        !files_under(&dir.join("cache/modules")).is_empty(),
        "the module is seeded too"
    );
    assert_eq!(origin.downloads_of("acme", "foo", "1.0.0", os, arch), 1);
    assert!(origin.requests().iter().all(|r| r.authorization.is_none()));
}

/// A Kubernetes projected service-account token's claims for the edge's workload, valid from
/// `from` (Unix seconds) for an hour.
fn edge_workload(from: u64) -> Value {
    serde_json::json!({
        "aud": ["https://centre.example"],
        "iat": from, "nbf": from, "exp": from + 3600,
        "kubernetes.io": {
            "namespace": "edge-sites",
            "serviceaccount": { "name": "provender", "uid": "0b7c2f0e-8f7e-4c55-9a53-7f1d3c2a9e41" },
        },
        "sub": "system:serviceaccount:edge-sites:provender",
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edges_workload_identity_is_read_again_as_it_rotates_and_goes_to_the_centre_only() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let (os, arch) = local_platform();
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new(
            "acme",
            "foo",
            &["1.0.0", "2.0.0"],
            &[(os, arch)],
        )],
    )
    .await;
    // The centre accepts the cluster's ID tokens for the edges' service accounts.
    let cluster = FakeIssuer::start_at(&ca, "cluster.example").await;
    let centre_toml = format!(
        "[auth]\nurl_signing_key = \"{key}\"\n\n[[auth.issuers]]\nname = \"cluster\"\n\
         issuer = \"{issuer}\"\naudiences = [\"https://centre.example\"]\n\
         claims = {{ \"/kubernetes.io/namespace\" = \"edge-sites\" }}\n\n\
         [[auth.rules]]\nname = \"edges\"\nclients = [\"cluster:system:serviceaccount:edge-sites:*\"]\n\
         fill = true\n\n{host}",
        key = "c".repeat(40),
        issuer = cluster.url(),
        host = cluster.host_toml(),
    );
    let centre = TestMirror::start_with_toml(&ca, &origin, &centre_toml).await;
    let edge = edge(&ca, &origin, &centre.url, work.path(), "", false).await;
    let token_file = work.path().join("edge-token");
    let now = provender::clock::now_secs();
    let c = https_client(&ca, &[]);
    let version = |v: &str| edge.url(&format!("{REGISTRY}/acme/foo/{v}.json"));

    // The kubelet's token: the centre lets the edge fill.
    std::fs::write(&token_file, cluster.token(&edge_workload(now))).unwrap();
    let got = get(&c, &version("1.0.0")).await;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));

    // The file now holds an expired token: the edge sends what the file holds, and the
    // centre refuses it.
    std::fs::write(&token_file, cluster.token(&edge_workload(now - 7200))).unwrap();
    let got = get(&c, &version("2.0.0")).await;
    let body = String::from_utf8_lossy(&got.body).to_string();
    assert_eq!(got.status, 502, "{body}");
    assert!(body.contains("401"), "{body}");

    // Rotated again: the next request carries the fresh token.
    std::fs::write(&token_file, cluster.token(&edge_workload(now))).unwrap();
    let got = get(&c, &version("2.0.0")).await;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));

    // An unreadable file fails the request at the edge, before the centre is asked.
    std::fs::remove_file(&token_file).unwrap();
    let got = get(&c, &edge.url(&format!("{REGISTRY}/acme/bar/index.json"))).await;
    let body = String::from_utf8_lossy(&got.body).to_string();
    assert_eq!(got.status, 502, "{body}");
    assert!(body.contains("token_file"), "{body}");
    assert!(
        origin.requests().iter().all(|r| r.authorization.is_none()),
        "{:?}",
        origin.requests()
    );
}

/// With `fallback` off, the centre is the edge's one egress for a host that goes via it: a
/// centre that hands out genuine, signed files but names the origin host in a `download_url`
/// or a `shasums_url`, or redirects its archive URL to the origin, is refused with a clear
/// error before anything is sent to the origin (which the edge could reach, and for which it
/// has a token of its own), and nothing is kept.
#[tokio::test(flavor = "multi_thread")]
async fn with_fallback_off_an_edge_asks_nothing_but_its_centre() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let (os, arch) = local_platform();
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new(
            "acme",
            "foo",
            &["1.0.0", "2.0.0", "3.0.0"],
            &[(os, arch)],
        )],
    )
    .await;
    let root = work.path().join("hostile");
    let on_origin =
        |version: &str, file: &str| format!("https://{REGISTRY}/files/acme/foo/{version}/{file}");
    let redirected = on_origin("3.0.0", &origin.filename("acme", "foo", "3.0.0", os, arch));
    for (version, field, url) in [
        (
            "1.0.0",
            "download_url",
            on_origin("1.0.0", &origin.filename("acme", "foo", "1.0.0", os, arch)),
        ),
        (
            "2.0.0",
            "shasums_url",
            on_origin("2.0.0", "terraform-provider-foo_2.0.0_SHA256SUMS"),
        ),
        ("3.0.0", "download_url", "/redirect/archive.zip".to_string()),
    ] {
        hostile_facade(&root, &origin, "acme", version, Lie::Genuine);
        let answer = root.join(format!(
            "v1/providers/{REGISTRY}/acme/foo/{version}/download/{os}/{arch}"
        ));
        let mut doc: Value = serde_json::from_slice(&std::fs::read(&answer).unwrap()).unwrap();
        doc[field] = Value::String(url);
        std::fs::write(&answer, serde_json::to_vec(&doc).unwrap()).unwrap();
    }
    let hostile = StaticServer::start_with(
        &ca,
        &root,
        &format!("location /redirect/ {{ return 302 {redirected}; }}"),
    );
    let centre = url::Url::parse(&hostile.url()).unwrap();
    // The origin is reachable, and the edge holds a token of the origin host's own.
    let token_file = work.path().join("edge-token");
    std::fs::write(&token_file, format!("{EDGE_TOKEN}\n")).unwrap();
    let toml = edge_toml(
        &centre,
        &token_file,
        "token = \"origin-own-token-0123456789\"",
        false,
        Some(origin.addr()),
    );
    let edge = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: "allow_private_networks = true",
            by_name: true,
            extra_toml: &toml,
            ..Default::default()
        },
    )
    .await;
    let c = https_client(&ca, &[]);
    let platform = format!("{os}_{arch}");
    let archive = |v: &str| {
        edge.url(&format!(
            "{REGISTRY}/acme/foo/terraform-provider-foo_{v}_{platform}.zip"
        ))
    };
    for (url, why) in [
        (archive("1.0.0"), "not on the centre"),
        (
            edge.url(&format!("{REGISTRY}/acme/foo/2.0.0.json")),
            "not on the centre",
        ),
        (archive("3.0.0"), "refusing a redirect from the centre"),
    ] {
        let got = get(&c, &url).await;
        let body = String::from_utf8_lossy(&got.body).to_string();
        assert_eq!(got.status, 502, "{url}: {body}");
        assert!(body.contains(why), "{url}: {body}");
    }
    assert_eq!(
        origin.total_requests(),
        0,
        "the origin is never asked: {:?}",
        origin.requests()
    );
    assert!(
        hostile.access_log().contains("/redirect/archive.zip"),
        "the centre itself was asked"
    );
    assert!(edge.cached_archives().is_empty());
    assert!(version_record(&edge.cache_dir, "acme", "foo", "2.0.0").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edge_applies_its_own_policy_on_top_of_what_its_centre_admits() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let (os, arch) = local_platform();
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new(
            "acme",
            "foo",
            &["1.0.0", "2.0.0", "3.0.0"],
            &[(os, arch)],
        )],
    )
    .await;
    let deny = |name: &str, version: &str| {
        format!(
            "[[policy.rules]]\nname = \"{name}\"\nproviders = [\"{REGISTRY}/acme/foo\"]\n\
             versions = \"{version}\"\naction = \"deny\"\nreason = \"{name}'s reason\"\n"
        )
    };
    let centre_toml = format!(
        "{}\n[policy]\n{}",
        centre_auth(),
        deny("centre-rule", "2.0.0")
    );
    let centre = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_toml: &centre_toml,
            ..Default::default()
        },
    )
    .await;
    let token_file = work.path().join("edge-token");
    std::fs::write(&token_file, format!("{EDGE_TOKEN}\n")).unwrap();
    let edge_toml = format!(
        "{}\n[policy]\n{}",
        edge_toml(&centre.url, &token_file, "", false, None),
        deny("edge-rule", "3.0.0")
    );
    let edge = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: "allow_private_networks = true",
            by_name: true,
            extra_toml: &edge_toml,
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let listed = get(
        &client,
        &edge.url(&format!("{REGISTRY}/acme/foo/index.json")),
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    let versions: Vec<String> = listed.json()["versions"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(versions, ["1.0.0"], "the centre's rule, then the edge's");
    let got = get(
        &client,
        &edge.url(&format!("{REGISTRY}/acme/foo/3.0.0.json")),
    )
    .await;
    assert_eq!(got.status, 410, "{}", got.text());
    assert_eq!(got.json()["error"]["policy"]["rule"], "edge-rule");
    // A version only the centre refuses is one the centre does not list: the edge cannot
    // have it (the centre's policy page and logs say why).
    let got = get(
        &client,
        &edge.url(&format!("{REGISTRY}/acme/foo/2.0.0.json")),
    )
    .await;
    assert_eq!(got.status, 404, "{}", got.text());
}
