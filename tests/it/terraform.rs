//! End to end with the real `terraform` CLI pointed at provender as its `network_mirror`:
//! - `terraform init` installs several providers; a second init in a fresh directory and HOME
//!   downloads no archive from the origin;
//! - `terraform providers mirror` through provender (its registry facade, via a `host` block)
//!   succeeds for several platforms, its archives are the origin's bytes, and the `h1:` hashes
//!   provender reports equal the ones Terraform computes itself mirroring straight from the origin;
//! - `terraform providers lock -net-mirror` gets the same `h1:` values;
//! - a configuration directory yields the providers and constraints `terraform providers` lists.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::http::get;
use crate::support::origin::{FakeOrigin, ProviderSpec, RequestKind};
use crate::support::pki::TestCa;
use crate::support::provender::{REGISTRY, TestMirror};
use crate::support::tf_config::{
    self, FOO_BAR_DIRS, local_platform, local_platform_and, platform_names, root_module,
};
use crate::support::{Terraform, h1_of, https_client, init_fresh, poll};

/// The local platform plus three others, as `(os, arch)` pairs.
fn platforms() -> Vec<(&'static str, &'static str)> {
    local_platform_and(&[
        ("linux", "amd64"),
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
            ProviderSpec::new("acme", "foo", &["1.0.0", "1.1.0"], &p),
            ProviderSpec::new("acme", "bar", &["2.3.0"], &p),
            ProviderSpec::new("acme", "dirs", &["0.1.0"], &p),
        ],
    )
    .await
}

/// The version of `acme/<ty>` that [`FOO_BAR_DIRS`] installs from [`origin`].
fn installed_version(ty: &str) -> &'static str {
    match ty {
        "foo" => "1.1.0",
        "bar" => "2.3.0",
        _ => "0.1.0",
    }
}

/// Lock-file `h1:` hashes per provider source, read from `.terraform.lock.hcl` text.
fn lock_hashes(dir: &Path) -> Vec<(String, Vec<String>)> {
    let text =
        std::fs::read_to_string(dir.join(".terraform.lock.hcl")).expect("a lock file was written");
    let mut out = Vec::new();
    for block in text.split("provider \"").skip(1) {
        let source = block.split('"').next().unwrap().to_string();
        let hashes = block
            .split('"')
            .filter(|s| s.starts_with("h1:") || s.starts_with("zh:"))
            .map(str::to_string)
            .collect();
        out.push((source, hashes));
    }
    out
}

/// provender's version document once every archive Terraform downloaded has been processed
/// (`h1:` is added right after a download completes, so poll briefly).
async fn mirror_document(
    client: &reqwest::Client,
    mirror: &TestMirror,
    ty: &str,
    version: &str,
    platforms: &[String],
) -> Value {
    let url = mirror.url(&format!("{REGISTRY}/acme/{ty}/{version}.json"));
    poll(Duration::from_secs(5), async || {
        let got = get(client, &url).await;
        assert_eq!(got.status, 200, "{url}");
        let doc = got.json();
        platforms
            .iter()
            .all(|p| h1_of(&doc, p).is_some())
            .then_some(doc)
    })
    .await
    .unwrap_or_else(|| panic!("{url}: h1 missing for some of {platforms:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn terraform_init_through_the_mirror() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start(&ca, &origin).await;

    let through_mirror = tf_config::network_mirror(mirror.url.as_str());
    let first = init_fresh(&ca, &through_mirror, FOO_BAR_DIRS).await;
    assert_eq!(
        origin.count(RequestKind::Archive),
        3,
        "one download per provider"
    );

    let (os, arch) = local_platform();
    let platform = format!("{os}_{arch}");
    let client = https_client(&ca, &[]);
    let locked = lock_hashes(first.path());
    assert_eq!(locked.len(), 3, "{locked:?}");
    for (source, hashes) in &locked {
        let ty = source.rsplit('/').next().unwrap();
        let version = installed_version(ty);
        let doc = mirror_document(
            &client,
            &mirror,
            ty,
            version,
            std::slice::from_ref(&platform),
        )
        .await;
        let ours = h1_of(&doc, &platform).expect("h1 reported once the archive was processed");
        if ty == "dirs" {
            // Terraform locks the hash of the *extracted* package; with directory entries in the
            // zip that differs from the zip's own h1, which is what a mirror must publish.
            assert_eq!(ours, origin.h1_zip("acme", ty, version, os, arch));
            assert!(
                hashes.contains(&origin.h1_dir("acme", ty, version, os, arch)),
                "{hashes:?}"
            );
        } else {
            assert!(
                hashes.contains(&ours),
                "{source}: lock file {hashes:?} lacks provender's {ours}"
            );
        }
    }

    // A fresh directory and a fresh HOME (no plugin cache): everything comes from provender.
    let before = origin.total_requests();
    init_fresh(&ca, &through_mirror, FOO_BAR_DIRS).await;
    assert_eq!(
        origin.count(RequestKind::Archive),
        3,
        "the second init caused no archive download upstream"
    );
    assert_eq!(
        origin.total_requests(),
        before,
        "nor any other origin request"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn providers_mirror_and_lock_agree_with_terraforms_own_hashes() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let platform_args: Vec<String> = platforms()
        .iter()
        .map(|(o, a)| format!("-platform={o}_{a}"))
        .collect();

    // Terraform's own hashes: mirror straight from the origin.
    let direct_out = tempfile::tempdir().unwrap();
    let work = root_module(FOO_BAR_DIRS);
    let direct = Terraform::new(&ca, &tf_config::registry_host(&origin.providers_v1_url()));
    let mut args: Vec<&str> = vec!["providers", "mirror", "-no-color"];
    args.extend(platform_args.iter().map(String::as_str));
    let out = direct_out.path().to_str().unwrap();
    args.push(out);
    direct.run(work.path(), &args).await.assert_success();

    // The same through provender: `providers mirror` only speaks the registry protocol, so a
    // `host` block sends it to provender's registry facade.
    let via_out = tempfile::tempdir().unwrap();
    let facade = tf_config::registry_host(&format!("{}v1/providers/{REGISTRY}/", mirror.url));
    let via = Terraform::new(&ca, &facade);
    let origin_archives = origin.count(RequestKind::Archive);
    *args.last_mut().unwrap() = via_out.path().to_str().unwrap();
    let out = via.run(work.path(), &args).await;
    out.assert_success();
    assert_eq!(
        origin.count(RequestKind::Archive) - origin_archives,
        3 * platforms().len(),
        "each archive fetched once via provender"
    );

    let client = https_client(&ca, &[]);
    let mut compared = 0;
    for (ty, version) in [("foo", "1.1.0"), ("bar", "2.3.0"), ("dirs", "0.1.0")] {
        let rel = format!("{REGISTRY}/acme/{ty}");
        let read = |root: &Path| -> Value {
            serde_json::from_slice(
                &std::fs::read(root.join(&rel).join(format!("{version}.json"))).unwrap(),
            )
            .unwrap()
        };
        let terraforms = read(direct_out.path());
        let through = read(via_out.path());
        let ours =
            mirror_document(&client, &mirror, ty, version, &platform_names(&platforms())).await;
        for (os, arch) in platforms() {
            let p = format!("{os}_{arch}");
            let expected = h1_of(&terraforms, &p)
                .unwrap_or_else(|| panic!("terraform wrote no h1 for {ty} {p}"));
            assert_eq!(
                h1_of(&ours, &p).as_deref(),
                Some(expected.as_str()),
                "{ty} {version} {p}: provender vs terraform"
            );
            assert_eq!(
                h1_of(&through, &p).as_deref(),
                Some(expected.as_str()),
                "{ty} {version} {p}: via provender"
            );
            let zip = format!("terraform-provider-{ty}_{version}_{p}.zip");
            let a = std::fs::read(direct_out.path().join(&rel).join(&zip)).unwrap();
            let b = std::fs::read(via_out.path().join(&rel).join(&zip)).unwrap();
            assert_eq!(a, b, "{zip} is byte-identical through provender");
            compared += 1;
        }
    }
    assert_eq!(compared, 3 * platforms().len());

    // `providers lock -net-mirror` through provender records the same h1 values.
    let lock_dir = root_module(FOO_BAR_DIRS);
    let locker = Terraform::new(&ca, "");
    let net_mirror = format!("-net-mirror={}", mirror.url);
    let mut args: Vec<&str> = vec!["providers", "lock", "-no-color", &net_mirror];
    args.extend(platform_args.iter().map(String::as_str));
    locker.run(lock_dir.path(), &args).await.assert_success();
    for (source, hashes) in lock_hashes(lock_dir.path()) {
        let ty = source.rsplit('/').next().unwrap().to_string();
        let version = installed_version(&ty);
        let ours = mirror_document(
            &client,
            &mirror,
            &ty,
            version,
            &platform_names(&platforms()),
        )
        .await;
        for (os, arch) in platforms() {
            let p = format!("{os}_{arch}");
            let h1 = if ty == "dirs" {
                origin.h1_dir("acme", &ty, version, os, arch)
            } else {
                h1_of(&ours, &p).unwrap()
            };
            assert!(hashes.contains(&h1), "{source} {p}: {hashes:?} lacks {h1}");
        }
    }
}

/// A root module using providers every way Terraform allows (explicit, implied, through an
/// override file, a deprecated provider `version`, an `import` block), calling local modules
/// (one of them empty), next to a hidden file Terraform ignores.
const MANY_WAYS: &[(&str, &str)] = &[
    (
        "main.tf",
        r#"terraform {
  required_providers {
    foo = { source = "acme/foo", version = ">= 1.0" }
  }
}
module "net" { source = "./modules/net" }
module "empty" { source = "./modules/empty" }
resource "random_pet" "b" {}
provider "random" { version = "~> 3.1" }
import {
  to = dns_a_record_set.g
  id = "www"
}
resource "thing_one" "c" { provider = special.east }
data "terraform_remote_state" "d" {}
ephemeral "tls_private_key" "e" {}
provider "google" { region = "x" }
check "health" {
  data "http_get" "f" {}
  assert {
    condition     = data.http_get.f.id != ""
    error_message = "unhealthy"
  }
}
"#,
    ),
    (
        "more.tf.json",
        r#"{"resource": {"local_file": {"g": {"provider": "archive.x"}}}, "provider": [{"kubernetes": {}}]}"#,
    ),
    (
        "modules/net/main.tf",
        r#"terraform {
  required_providers {
    b   = { source = "acme/bar", version = "2.2.0" }
    foo = { source = "acme/foo", version = "< 2.0" }
  }
}
resource "b_thing" "x" {}
module "inner" { source = "../inner" }
"#,
    ),
    (
        "modules/inner/main.tf",
        "resource \"null_resource\" \"x\" {}\n",
    ),
    (
        "versions_override.tf.json",
        r#"{"terraform": {"required_providers": {"foo": {"source": "acme/foo", "version": ">= 1.1"}}}}"#,
    ),
    (".hidden.tf", "resource \"hidden_thing\" \"x\" {}\n"),
    (
        "modules/empty/README.md",
        "A module without configuration files.\n",
    ),
];

/// `provender seed` and `lock` read a configuration directory: they must find the providers
/// `terraform providers` finds, with the same constraints, modules included.
#[tokio::test(flavor = "multi_thread")]
async fn configurations_are_read_as_terraform_reads_them() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in MANY_WAYS {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let ours = provender::ops::configuration::read_configuration(
        dir.path(),
        provender::config::Tool::Terraform,
    )
    .unwrap()
    .providers;

    // `terraform get` installs local modules without the network, then `terraform providers`
    // prints the tree: `provider[ADDRESS] CONSTRAINT` per module.
    let tf = Terraform::new(&ca, "");
    tf.run(dir.path(), &["get", "-no-color"])
        .await
        .assert_success();
    let tree = tf.run(dir.path(), &["providers", "-no-color"]).await;
    tree.assert_success();
    let mut theirs = std::collections::BTreeMap::<String, Vec<String>>::new();
    for line in tree.stdout.lines() {
        let Some((_, rest)) = line.split_once("provider[") else {
            continue;
        };
        let (addr, constraint) = rest.split_once(']').unwrap();
        if addr.starts_with("terraform.io/builtin/") {
            continue;
        }
        let entry = theirs.entry(addr.to_string()).or_default();
        if !constraint.trim().is_empty() {
            entry.push(constraint.trim().to_string());
        }
    }
    assert_eq!(theirs.len(), 11, "{}", tree.stdout);
    let our_addrs: Vec<String> = ours.iter().map(|w| w.addr.to_string()).collect();
    let their_addrs: Vec<String> = theirs.keys().cloned().collect();
    assert_eq!(our_addrs, their_addrs, "{}", tree.stdout);
    for wanted in &ours {
        let mut mine: Vec<String> = wanted
            .constraints
            .to_string()
            .split(", ")
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect();
        let mut theirs = theirs[&wanted.addr.to_string()].clone();
        mine.sort();
        theirs.sort();
        assert_eq!(mine, theirs, "{}", wanted.addr);
    }
}
