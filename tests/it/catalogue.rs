//! The catalogue's JSON API (`<base>-/api/v1/`), through a real provender server filled by the
//! real protocol from a fake origin over TLS: what it lists is what the verified records and
//! the stored archives say. (That it answers nobody without credentials when authentication is
//! on is checked with the pages, in `pages.rs`.)
//! A snapshot is rebuilt when this server changes the store; the `h1:` of an archive is
//! recorded just after the archive itself, so the first check polls.

use std::time::Duration;

use serde_json::Value;

use crate::support::http::get;
use crate::support::origin::{FakeOrigin, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{REGISTRY, TestMirror};
use crate::support::{https_client, poll};

const PLATFORMS: &[(&str, &str)] = &[("linux", "amd64"), ("darwin", "arm64")];

async fn setup() -> (TestCa, FakeOrigin) {
    let ca = TestCa::new();
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new(
            "acme",
            "foo",
            &["1.0.0", "1.1.0"],
            PLATFORMS,
        )],
    )
    .await;
    (ca, origin)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_lists_what_the_cache_holds_from_its_records() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let api = mirror.url(&format!("-/api/v1/providers/{REGISTRY}/acme/foo"));

    // One archive of 1.1.0, through the network mirror protocol.
    let zip = format!("{REGISTRY}/acme/foo/terraform-provider-foo_1.1.0_linux_amd64.zip");
    assert_eq!(get(&client, &mirror.url(&zip)).await.status, 200);
    // A view is kept for a few seconds: a first one may predate the archive's h1:.
    let listed: Value = poll(Duration::from_secs(15), async || {
        let doc = get(&client, &api).await.json();
        let h1 = &doc["provider"]["versions"][0]["platforms"][1]["h1"];
        h1.is_string().then_some(doc)
    })
    .await
    .expect("the archive is listed with its h1:");
    let provider = &listed["provider"];
    assert_eq!(provider["source"], format!("{REGISTRY}/acme/foo"));
    assert_eq!(provider["type"], "foo");
    let versions = provider["versions"].as_array().unwrap();
    assert_eq!(
        versions.len(),
        1,
        "only versions with cached archives: {listed}"
    );
    let version = &versions[0];
    assert_eq!(version["version"], "1.1.0");
    assert_eq!(version["complete_hashes"], false, "darwin has no h1: yet");
    let platforms = version["platforms"].as_array().unwrap();
    let names: Vec<&str> = platforms
        .iter()
        .map(|p| p["platform"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["darwin_arm64", "linux_amd64"]);
    let (darwin, linux) = (&platforms[0], &platforms[1]);
    assert_eq!(linux["cached"], true);
    assert_eq!(darwin["cached"], false);
    let archive = origin.archive("acme", "foo", "1.1.0", "linux", "amd64");
    assert_eq!(linux["size"], archive.len() as u64);
    assert_eq!(
        linux["sha256"],
        origin.sha256_hex("acme", "foo", "1.1.0", "linux", "amd64")
    );
    assert_eq!(
        linux["zh"],
        format!(
            "zh:{}",
            origin.sha256_hex("acme", "foo", "1.1.0", "linux", "amd64")
        )
    );
    assert!(linux["last_used"].as_u64().unwrap() > 0);
    // The same h1: the mirror protocol serves for it.
    let doc = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/1.1.0.json")),
    )
    .await
    .json();
    assert!(
        doc["archives"]["linux_amd64"]["hashes"]
            .as_array()
            .unwrap()
            .contains(&linux["h1"]),
        "{doc}"
    );
    // The fake origin signs with its own key, which no partner signature vouches for.
    assert_eq!(version["trust"], "community", "{version}");
    assert_eq!(version["signing_key"], origin.key_id(), "{version}");
    assert!(linux["h1"].as_str().unwrap().starts_with("h1:"), "{linux}");

    // The list summarises it, and its filters select.
    let list = get(&client, &mirror.url("-/api/v1/providers")).await.json();
    assert_eq!(list["total"], 1);
    let summary = &list["providers"][0];
    assert_eq!(summary["source"], format!("{REGISTRY}/acme/foo"));
    assert_eq!(summary["versions"], 1);
    assert_eq!(summary["latest"], "1.1.0");
    assert_eq!(summary["trust"], serde_json::json!(["community"]));
    assert_eq!(summary["platforms"], serde_json::json!(["linux_amd64"]));
    assert_eq!(summary["size"], archive.len() as u64);
    for (query, matches) in [
        ("q=FOO", 1),
        ("q=bar", 0),
        ("namespace=acme", 1),
        ("hostname=registry.opentofu.org", 0),
        ("trust=community", 1),
        ("trust=official", 0),
        ("platform=linux_amd64", 1),
        ("platform=darwin_arm64", 0),
    ] {
        let doc = get(&client, &mirror.url(&format!("-/api/v1/providers?{query}")))
            .await
            .json();
        assert_eq!(
            doc["providers"].as_array().unwrap().len(),
            matches,
            "{query}: {doc}"
        );
        assert_eq!(doc["total"], 1);
    }

    // One version, and its lock-file block.
    let one = get(
        &client,
        &mirror.url(&format!("-/api/v1/providers/{REGISTRY}/acme/foo/1.1.0")),
    )
    .await
    .json();
    assert_eq!(one["version"]["version"], "1.1.0");
    let lock = get(
        &client,
        &mirror.url(&format!(
            "-/api/v1/providers/{REGISTRY}/acme/foo/1.1.0/lock?platform=linux_amd64"
        )),
    )
    .await
    .json();
    let block = lock["lock_file"].as_str().unwrap();
    assert!(
        block.starts_with(&format!(
            "provider \"{REGISTRY}/acme/foo\" {{\n  version = \"1.1.0\"\n"
        )),
        "{block}"
    );
    assert!(block.contains(linux["h1"].as_str().unwrap()), "{block}");
    assert!(block.contains(darwin["zh"].as_str().unwrap()), "{block}");
    assert_eq!(lock["without_h1"], serde_json::json!([]));

    for missing in [
        "-/api/v1/nothing".to_string(),
        format!("-/api/v1/providers/{REGISTRY}/acme/other"),
        format!("-/api/v1/providers/{REGISTRY}/acme/foo/1.0.0"),
    ] {
        let unknown = get(&client, &mirror.url(&missing)).await;
        assert_eq!(unknown.status, 404, "{missing}");
        assert_eq!(unknown.json()["error"]["code"], "not_found");
    }
    // A record written again (darwin's archive adds its h1:) is read again: the next views
    // show it, without a restart.
    let darwin_zip = format!("{REGISTRY}/acme/foo/terraform-provider-foo_1.1.0_darwin_arm64.zip");
    assert_eq!(get(&client, &mirror.url(&darwin_zip)).await.status, 200);
    let complete = poll(Duration::from_secs(15), async || {
        let doc = get(&client, &api).await.json();
        (doc["provider"]["versions"][0]["complete_hashes"] == true).then_some(doc)
    })
    .await;
    assert!(complete.is_some(), "darwin's h1: never showed");
    let bad = get(
        &client,
        &mirror.url(&format!("-/api/v1/providers/{REGISTRY}/a%20b/foo")),
    )
    .await;
    assert_eq!(bad.status, 400);
}
