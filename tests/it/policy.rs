//! The version policy (`[policy]`) at every door, with the real `terraform`:
//! - a denied version is left out of the network mirror's and the facade's lists, so `~> 3.6`
//!   installs the newest admitted one; a lock pinning the denied version fails, and through the
//!   facade Terraform's own output names the rule and its reason; a request for it is a 410
//!   whose JSON body carries the rule;
//! - a cooldown (with the server's clock moved by the test) holds a version the origin published
//!   after the mirror first listed the provider, admits it once old enough, and an operator's
//!   waiver admits it early (leaving its audit record); old versions are never held;
//! - module and CLI release doors leave out and refuse what rules deny;
//! - a `warn` rule only counts; a rules file reloads on change, and a broken one keeps the
//!   rules in force;
//! - `export --bundle` leaves out what the policy refuses.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use provender::clock::Clock;
use provender::policy::ApprovalAction::{self, Revoke, Waive};

use crate::support::cli::{config_file, path_str, provender};
use crate::support::http::get;
use crate::support::origin::{FakeOrigin, Fault, ModuleSpec, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror};
use crate::support::tf_config::{self, local_platform, root_module};
use crate::support::{Terraform, https_client, poll, sample};

const DENY_361: &str = r#"
[policy]
[[policy.rules]]
name = "aws-3.6.1-regression"
providers = ["registry.terraform.io/acme/aws"]
versions = "3.6.1"
action = "deny"
reason = "3.6.1 deletes bucket policies"
link = "https://example.com/advisories/1"
"#;

const MAIN_TF: &str = r#"
terraform {
  required_providers {
    aws = {
      source  = "acme/aws"
      version = "~> 3.6"
    }
  }
}
"#;

async fn aws_origin(ca: &TestCa) -> FakeOrigin {
    FakeOrigin::start(
        ca,
        &[REGISTRY],
        vec![ProviderSpec::new(
            "acme",
            "aws",
            &["3.6.0", "3.6.1"],
            &[local_platform()],
        )],
    )
    .await
}

fn index_versions(body: &serde_json::Value) -> Vec<String> {
    let mut v: Vec<String> = body["versions"]
        .as_object()
        .expect("index.json has versions")
        .keys()
        .cloned()
        .collect();
    v.sort();
    v
}

/// The version `terraform init` installed in `dir`, from its lock file.
fn locked_version(dir: &Path) -> String {
    let lock = std::fs::read_to_string(dir.join(".terraform.lock.hcl")).expect("a lock file");
    let at = lock.find("version").expect("a version line");
    lock[at..].split('"').nth(1).unwrap().to_string()
}

/// A lock file pinning acme/aws `version` (no hashes: Terraform adds them when it installs).
fn lock_pinning(dir: &Path, version: &str) {
    std::fs::write(
        dir.join(".terraform.lock.hcl"),
        format!(
            "provider \"{REGISTRY}/acme/aws\" {{\n  version     = \"{version}\"\n  constraints = \"~> 3.6\"\n}}\n"
        ),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn terraform_installs_the_newest_admitted_version_and_a_pinned_denied_one_names_the_rule() {
    let ca = TestCa::new();
    let origin = aws_origin(&ca).await;
    let mirror = TestMirror::start_with_toml(&ca, &origin, DENY_361).await;
    let client = https_client(&ca, &[]);
    let (os, arch) = local_platform();
    // Over HTTP/1.1 and HTTP/2 alike: the network mirror's list leaves 3.6.1 out; asking for
    // it is a 410 naming the rule.
    for client in [client.clone(), crate::support::https_client_h2(&ca)] {
        let got = get(
            &client,
            &mirror.url(&format!("{REGISTRY}/acme/aws/index.json")),
        )
        .await;
        assert_eq!(got.status, 200);
        assert_eq!(index_versions(&got.json()), ["3.6.0"]);
        let got = get(
            &client,
            &mirror.url(&format!("{REGISTRY}/acme/aws/3.6.1.json")),
        )
        .await;
        assert_eq!(got.status, 410, "{}", got.text());
        assert_eq!(got.code(), "version_denied");
        let policy = &got.json()["error"]["policy"];
        assert_eq!(policy["rule"], "aws-3.6.1-regression");
        assert_eq!(policy["action"], "deny");
        assert_eq!(policy["reason"], "3.6.1 deletes bucket policies");
        assert_eq!(policy["link"], "https://example.com/advisories/1");
        let zip = format!("{REGISTRY}/acme/aws/terraform-provider-aws_3.6.1_{os}_{arch}.zip");
        assert_eq!(get(&client, &mirror.url(&zip)).await.status, 410);
        // The OCI registry's tags leave it out too, and its manifest by tag is DENIED.
        let repo = format!("/v2/{REGISTRY}/acme/aws");
        let tags = get(&client, &mirror.root_url(&format!("{repo}/tags/list"))).await;
        assert_eq!(tags.json()["tags"], serde_json::json!(["3.6.0"]));
        let got = get(
            &client,
            &mirror.root_url(&format!("{repo}/manifests/3.6.1")),
        )
        .await;
        assert_eq!(got.status, 410, "{}", got.text());
        assert_eq!(got.json()["errors"][0]["code"], "DENIED");
    }

    // `~> 3.6` through the network mirror installs 3.6.0.
    let network = tf_config::network_mirror(mirror.url.as_str());
    let dir = root_module(MAIN_TF);
    Terraform::new(&ca, &network)
        .init(dir.path())
        .await
        .assert_success();
    assert_eq!(locked_version(dir.path()), "3.6.0");

    // Through the registry facade, a lock pinning 3.6.1 fails, and Terraform shows the rule's
    // reason (the registry's warnings) instead of a credentials error.
    let facade = tf_config::registry_host(&format!("{}v1/providers/{REGISTRY}/", mirror.url));
    let pinned = root_module(MAIN_TF);
    lock_pinning(pinned.path(), "3.6.1");
    let out = Terraform::new(&ca, &facade).init(pinned.path()).await;
    out.assert_failure();
    // Terraform wraps its diagnostics: compare word by word.
    let said = out
        .combined()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        said.contains("3.6.1 deletes bucket policies") && said.contains("aws-3.6.1-regression"),
        "{said}"
    );
    assert!(!said.contains("credentials"), "{said}");
    // ... and unpinned, the facade installs 3.6.0 too, telling why 3.6.1 was left out.
    let free = root_module(MAIN_TF);
    let out = Terraform::new(&ca, &facade).init(free.path()).await;
    out.assert_success();
    assert_eq!(locked_version(free.path()), "3.6.0");
    assert!(out.combined().contains("aws-3.6.1-regression"));

    assert_eq!(origin.downloads_of("acme", "aws", "3.6.1", os, arch), 0);
    let metrics = mirror.metrics(&client).await;
    assert!(
        sample(
            &metrics,
            r#"provender_policy_decisions_total{action="deny",rule="aws-3.6.1-regression"}"#
        ) >= 3,
        "{metrics}"
    );
}

/// alice's approval of acme/aws 3.6.1.
fn approval(action: ApprovalAction, at: u64, reason: &str) -> provender::policy::Approval {
    provender::policy::Approval {
        id: String::new(),
        kind: provender::policy::Kind::Provider,
        address: format!("{REGISTRY}/acme/aws"),
        version: provender::address::Version::parse("3.6.1").unwrap(),
        action,
        by: "alice".into(),
        at,
        reason: reason.into(),
        until: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cooldown_holds_a_new_version_until_it_is_old_enough_and_a_waiver_admits_it_early() {
    let ca = TestCa::new();
    let origin = aws_origin(&ca).await;
    // 3.6.1 is not published yet when the mirror first lists the provider.
    origin.set_fault(Fault::Unlisted("3.6.1"));
    let clock = provender::clock::ManualClock::at(provender::clock::now_secs());
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_cache: "index_ttl = \"1m\"",
            extra_toml: "[policy]\nmin_age = \"7d\"\n",
            clock: Some(clock.clone()),
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let index = mirror.url(&format!("{REGISTRY}/acme/aws/index.json"));
    let v361 = mirror.url(&format!("{REGISTRY}/acme/aws/3.6.1.json"));

    // A fresh mirror holds back nothing it found already published.
    assert_eq!(
        index_versions(&get(&client, &index).await.json()),
        ["3.6.0"]
    );
    assert_eq!(
        get(
            &client,
            &mirror.url(&format!("{REGISTRY}/acme/aws/3.6.0.json"))
        )
        .await
        .status,
        200
    );

    // The origin publishes 3.6.1; the mirror sees it at its next refresh and holds it.
    origin.clear_faults();
    clock.advance(Duration::from_secs(120));
    let list_file = mirror
        .cache_dir
        .join(format!("metadata/{REGISTRY}/acme/aws/index.json"));
    let seen = poll(Duration::from_secs(10), async || {
        let _ = get(&client, &index).await;
        let text = std::fs::read_to_string(&list_file).ok()?;
        text.contains("\"3.6.1\": ").then_some(text)
    })
    .await;
    assert!(
        seen.is_some(),
        "the refreshed list records when 3.6.1 was first seen"
    );
    assert_eq!(
        index_versions(&get(&client, &index).await.json()),
        ["3.6.0"]
    );
    let got = get(&client, &v361).await;
    assert_eq!(got.status, 425, "{}", got.text());
    assert_eq!(got.code(), "version_held");
    assert_eq!(got.json()["error"]["policy"]["action"], "cooldown");
    assert!(
        got.json()["error"]["policy"]["admissible_at"].is_string(),
        "{}",
        got.text()
    );
    let network = tf_config::network_mirror(mirror.url.as_str());
    let dir = root_module(MAIN_TF);
    Terraform::new(&ca, &network)
        .init(dir.path())
        .await
        .assert_success();
    assert_eq!(
        locked_version(dir.path()),
        "3.6.0",
        "held back by the cooldown"
    );

    // An operator waives it (recorded in the store, read by the server within seconds).
    let storage: Arc<dyn provender::storage::Storage> =
        Arc::new(provender::storage::DiskStorage::new(mirror.cache_dir.clone()).unwrap());
    let approvals = provender::policy::Approvals::in_store(storage.clone());
    approvals
        .record(approval(Waive, clock.now_secs(), "the fix we need"))
        .await
        .unwrap();
    let admitted = poll(Duration::from_secs(10), async || {
        (get(&client, &v361).await.status == 200).then_some(())
    })
    .await;
    assert!(admitted.is_some(), "the waiver admits 3.6.1 early");
    assert_eq!(
        index_versions(&get(&client, &index).await.json()),
        ["3.6.0", "3.6.1"]
    );
    let history = provender::policy::Approvals::in_store(storage.clone())
        .history()
        .await
        .unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].by, "alice");

    // Revoked, it is held again; a week later the cooldown has passed by itself.
    approvals
        .record(approval(Revoke, clock.now_secs() + 1, "tested enough"))
        .await
        .unwrap();
    let held = poll(Duration::from_secs(10), async || {
        (get(&client, &v361).await.status == 425).then_some(())
    })
    .await;
    assert!(held.is_some(), "the revocation ends the waiver");
    clock.advance(Duration::from_secs(7 * 86_400));
    assert_eq!(get(&client, &v361).await.status, 200);
    let later = root_module(MAIN_TF);
    Terraform::new(&ca, &network)
        .init(later.path())
        .await
        .assert_success();
    assert_eq!(locked_version(later.path()), "3.6.1");
}

#[tokio::test(flavor = "multi_thread")]
async fn modules_and_cli_releases_obey_the_rules_and_a_warn_rule_only_counts() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    crate::releases::terraform_release(&root);
    let host = crate::support::static_server::StaticServer::start(&ca, &root);
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new(
            "acme",
            "aws",
            &["3.6.0", "3.6.1"],
            &[local_platform()],
        )],
        vec![ModuleSpec::new("acme", "net", "test", &["1.0.0", "1.1.0"])],
    )
    .await;
    let toml = format!(
        "{}\n[policy]\n\
         [[policy.rules]]\nname = \"net-1.1\"\nmodules = [\"{REGISTRY}/acme/net/*\"]\n\
         versions = \">= 1.1.0\"\naction = \"deny\"\nreason = \"wrong CIDR\"\n\
         [[policy.rules]]\nname = \"no-tf-1.11\"\nreleases = [\"terraform\"]\n\
         versions = \"~> 1.11.0\"\naction = \"hold\"\nreason = \"waiting for sign-off\"\n\
         [[policy.rules]]\nname = \"dry-run\"\nproviders = [\"*\"]\nversions = \"3.6.1\"\n\
         action = \"warn\"\n",
        crate::releases::releases_toml_at(work.path(), &host.url(), false),
    );
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: "allow_private_networks = true",
            extra_toml: &toml,
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);

    // Modules: 1.1.0 left out of the list, its download refused with the rule in the body
    // (the body reaches a person through the CLIs' module installer).
    let got = get(
        &client,
        &mirror.url(&format!("v1/modules/{REGISTRY}/acme/net/test/versions")),
    )
    .await;
    assert_eq!(got.status, 200);
    let listed: Vec<String> = got.json()["modules"][0]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, ["1.0.0"]);
    for path in ["download", "module.tar.gz"] {
        let got = get(
            &client,
            &mirror.url(&format!("v1/modules/{REGISTRY}/acme/net/test/1.1.0/{path}")),
        )
        .await;
        assert_eq!(got.status, 410, "{path}: {}", got.text());
        assert!(got.message().contains("wrong CIDR"), "{}", got.text());
    }
    let admitted = get(
        &client,
        &mirror.url(&format!(
            "v1/modules/{REGISTRY}/acme/net/test/1.0.0/download"
        )),
    )
    .await;
    assert!(admitted.status.is_success(), "{}", admitted.text());

    // CLI releases: held 1.11.4 is left out of the vendor's list and refused (425).
    let got = get(&client, &mirror.url("releases/terraform/index.json")).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert!(
        got.json()["versions"].as_object().unwrap().is_empty(),
        "{}",
        got.text()
    );
    let got = get(
        &client,
        &mirror.url("releases/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip"),
    )
    .await;
    assert_eq!(got.status, 425, "{}", got.text());
    assert_eq!(got.json()["error"]["policy"]["rule"], "no-tf-1.11");

    // The warn rule changes nothing, and counts.
    let got = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/aws/index.json")),
    )
    .await;
    assert_eq!(index_versions(&got.json()), ["3.6.0", "3.6.1"]);
    assert_eq!(
        get(
            &client,
            &mirror.url(&format!("{REGISTRY}/acme/aws/3.6.1.json"))
        )
        .await
        .status,
        200
    );
    let metrics = mirror.metrics(&client).await;
    assert!(
        sample(
            &metrics,
            r#"provender_policy_decisions_total{action="warn",rule="dry-run"}"#
        ) >= 2,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rules_file_reloads_on_change_and_a_broken_one_keeps_the_rules_in_force() {
    let ca = TestCa::new();
    let origin = aws_origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let rules = work.path().join("policy.toml");
    let deny = "[[rules]]\nname = \"bad\"\nproviders = [\"*/acme/aws\"]\nversions = \"3.6.1\"\naction = \"deny\"\n";
    std::fs::write(&rules, "").unwrap();
    let toml = format!("[policy]\nrules_file = \"{}\"\n", rules.display());
    let mirror = TestMirror::start_with_toml(&ca, &origin, &toml).await;
    let client = https_client(&ca, &[]);
    let v361 = mirror.url(&format!("{REGISTRY}/acme/aws/3.6.1.json"));
    assert_eq!(get(&client, &v361).await.status, 200);
    // An OCI client resolved 3.6.1 to digests while it was admitted.
    let repo = format!("/v2/{REGISTRY}/acme/aws");
    let index = get(
        &client,
        &mirror.root_url(&format!("{repo}/manifests/3.6.1")),
    )
    .await;
    assert_eq!(index.status, 200, "{}", index.text());
    let index_digest = format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&index.body))
    );
    let manifest_digest = index.json()["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let manifest = get(
        &client,
        &mirror.root_url(&format!("{repo}/manifests/{manifest_digest}")),
    )
    .await;
    let layer = manifest.json()["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();

    // The rule is written: in force within seconds, for what is cached too.
    std::fs::write(&rules, deny).unwrap();
    let denied = poll(Duration::from_secs(10), async || {
        (get(&client, &v361).await.status == 410).then_some(())
    })
    .await;
    assert!(denied.is_some(), "the changed rules file is read");
    // A digest pins a version like a lock file: refused by manifest and by blob.
    for path in [
        format!("{repo}/manifests/{index_digest}"),
        format!("{repo}/manifests/{manifest_digest}"),
        format!("{repo}/blobs/{layer}"),
    ] {
        let got = get(&client, &mirror.root_url(&path)).await;
        assert_eq!(got.status, 410, "{path}: {}", got.text());
        assert_eq!(got.json()["errors"][0]["code"], "DENIED", "{path}");
    }

    // A broken file (an unknown action on line 5) is refused whole: the rule stays.
    std::fs::write(
        &rules,
        format!("{deny}[[rules]]\nname = \"x\"\nproviders = [\"*\"]\naction = \"nope\"\n"),
    )
    .unwrap();
    let refused = poll(Duration::from_secs(10), async || {
        let m = mirror.metrics(&client).await;
        (sample(&m, r#"provender_policy_reloads_total{result="error"}"#) >= 1).then_some(())
    })
    .await;
    assert!(refused.is_some(), "the broken file was read and refused");
    assert_eq!(get(&client, &v361).await.status, 410);

    // An empty file lifts the rule.
    std::fs::write(&rules, "").unwrap();
    let lifted = poll(Duration::from_secs(10), async || {
        (get(&client, &v361).await.status == 200).then_some(())
    })
    .await;
    assert!(lifted.is_some(), "the reloaded rules are in force");

    // A configuration whose rules file is broken does not start, naming the file and line.
    std::fs::write(&rules, "[[rules]]\nname = \"y\"\naction = \"deny\"\n").unwrap();
    let config = work.path().join("bad.toml");
    std::fs::write(
        &config,
        format!(
            "[cache]\ndir = \"{}\"\n{toml}",
            work.path().join("cache").display()
        ),
    )
    .unwrap();
    let run = provender(&["serve", "--config", path_str(&config)]).await;
    run.fails(78);
    let said = run.out();
    assert!(
        said.contains(&format!("{}:1", rules.display())) && said.contains("names nothing"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bundle_does_not_carry_what_the_policy_refuses() {
    let ca = TestCa::new();
    let origin = aws_origin(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let open = config_file(dir.path(), "open.toml", &cache, origin.addr(), &ca, "");
    let (os, arch) = local_platform();
    let platform = format!("{os}_{arch}");
    crate::support::cli::seed(
        path_str(&open),
        &[&platform],
        &["acme/aws@3.6.0", "acme/aws@3.6.1"],
    )
    .await
    .ok();
    // Both versions are cached; a policy written afterwards keeps 3.6.1 out of the bundle.
    std::fs::write(
        &open,
        format!("{}\n{DENY_361}", std::fs::read_to_string(&open).unwrap()),
    )
    .unwrap();
    let bundle = dir.path().join("out.bundle");
    let run = provender(&[
        "export",
        "--config",
        path_str(&open),
        "--bundle",
        path_str(&bundle),
    ])
    .await;
    run.ok();
    let said = run.out();
    assert!(
        said.contains("left out by the version policy") && said.contains("aws-3.6.1-regression"),
        "{said}"
    );
    assert!(said.contains("acme/aws 3.6.0"), "{said}");
    assert!(!said.contains("acme/aws 3.6.1:"), "{said}");
}
