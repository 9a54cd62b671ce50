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
//! - `provender seed --from <centre>` fills a cache from the centre, with the same checks.

use std::path::Path;

use serde_json::Value;

use crate::releases::{releases_toml, sha256_hex, terraform_release};
use crate::support::cli::{path_str, provender};
use crate::support::http::get;
use crate::support::origin::{FakeOrigin, ModuleSpec, ProviderSpec, RequestKind, sign_detached};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror, files_under, write_config};
use crate::support::static_server::StaticServer;
use crate::support::tf_config::{self, local_platform, root_module};
use crate::support::{Terraform, https_client, sample};

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

/// The edge's tables: `registry.terraform.io` (reachable only at a closed port) and the
/// release host go via `centre`; the centre's token comes from `token_file`. `more` is added
/// to the registry's table.
fn edge_toml(centre: &url::Url, token_file: &Path, more: &str) -> String {
    let centre_host = format!(
        "{}:{}",
        centre.host_str().unwrap(),
        centre.port_or_known_default().unwrap()
    );
    format!(
        "[upstream.hosts.\"{REGISTRY}\"]\nvia = \"{centre}\"\nconnect_to = \"127.0.0.1:9\"\n{more}\n\n\
         [upstream.hosts.\"{centre_host}\"]\ntoken_file = \"{token}\"\n\n\
         [upstream.hosts.\"localhost\"]\nvia = \"{centre}\"\n",
        token = token_file.display(),
    )
}

/// An edge server via `centre`: the origin is out of its reach, its token in `dir`.
async fn edge(
    ca: &TestCa,
    origin: &FakeOrigin,
    centre: &url::Url,
    dir: &Path,
    releases: &str,
    more: &str,
) -> TestMirror {
    let token_file = dir.join("edge-token");
    std::fs::write(&token_file, format!("{EDGE_TOKEN}\n")).unwrap();
    let toml = format!("{}\n{releases}", edge_toml(centre, &token_file, more));
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
        vec![ModuleSpec::new("acme", "net", "test", &["1.0.0"])],
    )
    .await;
    let release_root = work.path().join("release-origin");
    let (zip, _sums, _signature) = terraform_release(&release_root);
    let release_host = StaticServer::start(&ca, &release_root);
    let releases = releases_toml(&work.path().join("keys"), &release_host, false);

    let centre = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: "allow_private_networks = true",
            extra_toml: &format!("{releases}\n{}", centre_auth()),
            ..Default::default()
        },
    )
    .await;
    let mut centre = centre;
    let edge = edge(&ca, &origin, &centre.url, work.path(), &releases, "").await;
    let terraform = Terraform::new(&ca, &through(&edge.url));

    let first = root_module(&main_tf());
    terraform.init(first.path()).await.assert_success();
    let lock = std::fs::read_to_string(first.path().join(".terraform.lock.hcl")).unwrap();
    let zh = format!("zh:{}", origin.sha256_hex("acme", "foo", "1.0.0", os, arch));
    assert!(
        lock.contains(&zh),
        "the lock file has the signed zh: {lock}"
    );
    assert!(
        lock.contains(&origin.h1_zip("acme", "foo", "1.0.0", os, arch))
            || lock.contains(&origin.h1_dir("acme", "foo", "1.0.0", os, arch)),
        "the lock file has the archive's h1: {lock}"
    );
    let manifest =
        std::fs::read_to_string(first.path().join(".terraform/modules/modules.json")).unwrap();
    assert!(manifest.contains("\"net\""), "{manifest}");

    // A CLI release through the edge: the vendor's bytes.
    let c = https_client(&ca, &[]);
    let release_url = edge.url("releases/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip");
    let got = get(&c, &release_url).await;
    assert_eq!(got.status, 200);
    assert_eq!(sha256_hex(&got.body), sha256_hex(&zip));

    // The origin served each archive once, to the centre; the edge never reached it.
    assert_eq!(origin.downloads_of("acme", "foo", "1.0.0", os, arch), 1);
    assert_eq!(origin.count(RequestKind::Archive), 1);
    assert_eq!(origin.count(RequestKind::ModuleDownload), 1);
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
    let rec = version_record(&edge.cache_dir, "acme", "foo", "1.0.0").expect("edge record");
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
    // The edge's SHA256SUMS copies are the origin's bytes.
    let sums = std::fs::read(
        edge.cache_dir
            .join(format!("metadata/{REGISTRY}/acme/foo/1.0.0.SHA256SUMS.0")),
    )
    .unwrap();
    assert_eq!(sums, origin.shasums("acme", "foo", "1.0.0"));

    // The centre gone: the edge serves from its cache.
    centre.stop().await;
    let second = root_module(&main_tf());
    terraform.init(second.path()).await.assert_success();
    let got = get(&c, &release_url).await;
    assert_eq!(got.status, 200);
    assert_eq!(sha256_hex(&got.body), sha256_hex(&zip));
    assert_eq!(origin.count(RequestKind::Archive), 1);
}
