//! What each client may do (`[[auth.rules]]`): a platform team's client fills the cache,
//! everyone else reads it. A reader is refused (403, a JSON error naming the rule) what is not
//! cached and providers or modules outside its patterns, sees only cached versions (so the
//! real `terraform init` picks one it can have), and the archive URLs handed to it carry its
//! name, so that a download by signed URL is held to its rule too. The same holds for the
//! registry facade, the module registry and the OCI registry.

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::http::send;
use crate::support::origin::{FakeOrigin, ModuleSpec, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror};
use crate::support::tf_config::{self, local_platform};
use crate::support::{Terraform, https_client, sample};

const PLATFORM_TOKEN: &str = "platform-team-token-0123456789";
const CI_TOKEN: &str = "ci-fleet-token-0123456789";

async fn setup() -> (TestCa, FakeOrigin, TestMirror) {
    let ca = TestCa::new();
    let (os, arch) = local_platform();
    let other = if os == "windows" { "linux" } else { "windows" };
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new(
                "acme",
                "foo",
                &["1.0.0", "2.0.0"],
                &[(os, arch), (other, "amd64")],
            ),
            ProviderSpec::new("acme", "bar", &["1.0.0"], &[(os, arch)]),
        ],
        vec![ModuleSpec::new("acme", "net", "test", &["1.0.0", "1.1.0"])],
    )
    .await;
    let mirror = TestMirror::start_with_toml(&ca, &origin, &auth_toml(true)).await;
    (ca, origin, mirror)
}

/// The `[auth]` section: the platform team's client, the `ci` client (`with_ci`), their rules.
fn auth_toml(with_ci: bool) -> String {
    let ci = if with_ci {
        format!("[[auth.clients]]\nname = \"ci\"\ntoken = \"{CI_TOKEN}\"\n")
    } else {
        String::new()
    };
    format!(
        r#"[auth]
url_signing_key = "{key}"

[[auth.clients]]
name = "platform"
token = "{PLATFORM_TOKEN}"

{ci}
[[auth.rules]]
name = "platform-team"
clients = "platform"

[[auth.rules]]
name = "readers"
clients = "*"
fill = false
providers = ["{REGISTRY}/acme/foo"]
modules = ["{REGISTRY}/acme/*"]
"#,
        key = "k".repeat(40),
    )
}

/// The CLI configuration: the mirror, with `token` as its credentials.
fn cli(mirror: &TestMirror, token: &str) -> String {
    tf_config::network_mirror_with_token(&mirror.url, token)
}

fn requiring_foo(constraint: &str) -> String {
    format!(
        "terraform {{\n  required_providers {{\n    foo = {{ source = \"acme/foo\", version = \"{constraint}\" }}\n  }}\n}}\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn readers_get_what_the_platform_team_let_into_the_cache_and_nothing_else() {
    let (ca, origin, mirror) = setup().await;
    let client = https_client(&ca, &[]);
    let get = |path: String, token: &'static str| {
        let url = format!("{}{path}", mirror.url);
        let req = client.get(&url).bearer_auth(token);
        async move { send(&url, req).await }
    };
    let foo = format!("{REGISTRY}/acme/foo");

    // Nothing is cached: a reader may not cause the first fetch.
    let refused = get(format!("{foo}/index.json"), CI_TOKEN).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.code(), "forbidden");
    assert!(
        refused.message().contains("rule readers")
            && refused
                .message()
                .contains("lets ci read only what is cached"),
        "{}",
        refused.message()
    );
    // A provider outside its patterns is refused whatever the cache holds.
    let other = get(format!("{REGISTRY}/acme/bar/index.json"), CI_TOKEN).await;
    assert_eq!(other.status, StatusCode::FORBIDDEN);
    assert!(
        other
            .message()
            .contains(&format!("does not let ci get provider {REGISTRY}/acme/bar")),
        "{}",
        other.message()
    );
    assert_eq!(origin.total_requests(), 0, "readers reached the origin");

    // The platform team lets 1.0.0 in.
    let dir = tf_config::root_module(&requiring_foo("1.0.0"));
    Terraform::new(&ca, &cli(&mirror, PLATFORM_TOKEN))
        .init(dir.path())
        .await
        .assert_success();

    // A reader sees 1.0.0 alone, though the origin has 2.0.0, and installs it. (The archive
    // is committed just after its last byte reached terraform: wait for that.)
    let mut index = get(format!("{foo}/index.json"), CI_TOKEN).await;
    for _ in 0..100 {
        if index.status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        index = get(format!("{foo}/index.json"), CI_TOKEN).await;
    }
    assert_eq!(index.status, StatusCode::OK, "{}", index.text());
    let listed: Vec<String> = index.json()["versions"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(listed, ["1.0.0"]);
    let dir = tf_config::root_module(&requiring_foo(">= 1.0.0"));
    Terraform::new(&ca, &cli(&mirror, CI_TOKEN))
        .init(dir.path())
        .await
        .assert_success();
    let lock = std::fs::read_to_string(dir.path().join(".terraform.lock.hcl")).unwrap();
    assert!(lock.contains("version     = \"1.0.0\""), "{lock}");
    let uncached = get(format!("{foo}/2.0.0.json"), CI_TOKEN).await;
    assert_eq!(
        uncached.status,
        StatusCode::FORBIDDEN,
        "{}",
        uncached.text()
    );

    // The archive URLs handed to a reader carry its name: the platform it lacks is refused,
    // though the URL is validly signed; the one it has is served.
    let (os, arch) = local_platform();
    let doc: Value = get(format!("{foo}/1.0.0.json"), CI_TOKEN).await.json();
    let archives = doc["archives"].as_object().unwrap();
    assert_eq!(archives.len(), 2);
    for (platform, entry) in archives {
        let relative = entry["url"].as_str().unwrap();
        assert!(relative.contains("&c=ci&"), "{relative}");
        let url = format!("{}{foo}/{relative}", mirror.url);
        let got = send(&url, client.get(&url)).await;
        if platform == &format!("{os}_{arch}") {
            assert_eq!(got.status, StatusCode::OK, "{}", got.text());
        } else {
            assert_eq!(got.status, StatusCode::FORBIDDEN, "{}", got.text());
            assert!(got.message().contains("rule readers"), "{}", got.message());
        }
    }

    // The registry facade and the OCI registry keep the same rule.
    let versions = get(format!("v1/providers/{foo}/versions"), CI_TOKEN).await;
    assert_eq!(versions.status, StatusCode::OK);
    assert_eq!(versions.json()["versions"].as_array().unwrap().len(), 1);
    let download = get(
        format!("v1/providers/{foo}/2.0.0/download/{os}/{arch}"),
        CI_TOKEN,
    )
    .await;
    assert_eq!(download.status, StatusCode::FORBIDDEN);
    let tags = send(
        "tags",
        client
            .get(mirror.url.join(&format!("/v2/{foo}/tags/list")).unwrap())
            .bearer_auth(CI_TOKEN),
    )
    .await;
    assert_eq!(tags.status, StatusCode::OK, "{}", tags.text());
    assert_eq!(tags.json()["tags"], serde_json::json!(["1.0.0"]));
    let bar_tags = send(
        "tags",
        client
            .get(
                mirror
                    .url
                    .join(&format!("/v2/{REGISTRY}/acme/bar/tags/list"))
                    .unwrap(),
            )
            .bearer_auth(CI_TOKEN),
    )
    .await;
    assert_eq!(bar_tags.status, StatusCode::FORBIDDEN);
    assert_eq!(bar_tags.json()["errors"][0]["code"], "DENIED");

    // The platform team may fill what readers may not.
    let filled = get(format!("{foo}/2.0.0.json"), PLATFORM_TOKEN).await;
    assert_eq!(filled.status, StatusCode::OK, "{}", filled.text());

    // Metrics count downloads by client: terraform's and the signed URL's for ci.
    let metrics = send(
        "metrics",
        client
            .get(mirror.url.join("/metrics").unwrap())
            .bearer_auth(PLATFORM_TOKEN),
    )
    .await
    .text();
    assert_eq!(
        sample(&metrics, "provender_client_downloads_total{client=\"ci\"}"),
        2,
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "provender_client_downloads_total{client=\"platform\"}"
        ),
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn readers_get_only_cached_module_versions() {
    let (ca, _origin, mirror) = setup().await;
    let client = https_client(&ca, &[]);
    let get = |path: String, token: &'static str| {
        let url = format!("{}v1/modules/{REGISTRY}/acme/net/test/{path}", mirror.url);
        let req = client.get(&url).bearer_auth(token);
        async move { send(&url, req).await }
    };
    assert_eq!(
        get("versions".into(), CI_TOKEN).await.status,
        StatusCode::FORBIDDEN
    );
    let refused = get("1.0.0/download".into(), CI_TOKEN).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(
        refused.message().contains("rule readers"),
        "{}",
        refused.message()
    );

    let filled = get("1.0.0/download".into(), PLATFORM_TOKEN).await;
    assert_eq!(filled.status, StatusCode::OK, "{}", filled.text());
    let versions = get("versions".into(), CI_TOKEN).await;
    assert_eq!(versions.status, StatusCode::OK, "{}", versions.text());
    assert_eq!(
        versions.json()["modules"][0]["versions"],
        serde_json::json!([{ "version": "1.0.0" }])
    );
    let download = get("1.0.0/download".into(), CI_TOKEN).await;
    assert_eq!(download.status, StatusCode::OK);
    let location = download.headers["x-terraform-get"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(location.contains("c=ci"), "{location}");
    let url = mirror.url.join(&location).unwrap();
    let package = send("package", client.get(url)).await;
    assert_eq!(package.status, StatusCode::OK);
    // OpenTofu 1.12 and later download the body's location themselves, with the registry
    // host's token, when the answer says so: the location then works with the token alone.
    let body = download.json();
    assert_eq!(body["use_registry_credentials"], true, "{body}");
    let mut direct = mirror.url.join(body["location"].as_str().unwrap()).unwrap();
    direct.set_query(None);
    let anonymous = send("unsigned package", client.get(direct.clone())).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let with_token = send(
        "package with token",
        client.get(direct).bearer_auth(CI_TOKEN),
    )
    .await;
    assert_eq!(with_token.status, StatusCode::OK);
    assert_eq!(with_token.body, package.body);
    assert_eq!(
        get("1.1.0/download".into(), CI_TOKEN).await.status,
        StatusCode::FORBIDDEN
    );

    let outside = send(
        "other module",
        client
            .get(format!(
                "{}v1/modules/{REGISTRY}/other/net/test/versions",
                mirror.url
            ))
            .bearer_auth(CI_TOKEN),
    )
    .await;
    assert_eq!(outside.status, StatusCode::FORBIDDEN);
    assert!(
        outside.message().contains("does not let ci get module"),
        "{}",
        outside.message()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_url_is_refused_once_its_client_is_removed() {
    let (ca, origin, mut mirror) = setup().await;
    let client = https_client(&ca, &[]);
    let foo = format!("{REGISTRY}/acme/foo");
    let (os, arch) = local_platform();
    // The archive URL of `<version>.json` as handed to the holder of `token`, below `foo/`.
    let archive_url = async |mirror: &TestMirror, token: &str| {
        let url = format!("{}{foo}/1.0.0.json", mirror.url);
        let doc = send(&url, client.get(&url).bearer_auth(token)).await;
        assert_eq!(doc.status, StatusCode::OK, "{}", doc.text());
        doc.json()["archives"][format!("{os}_{arch}")]["url"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let download = async |mirror: &TestMirror, relative: &str| {
        let url = format!("{}{foo}/{relative}", mirror.url);
        send(&url, client.get(&url)).await
    };
    let platform = archive_url(&mirror, PLATFORM_TOKEN).await;
    assert_eq!(download(&mirror, &platform).await.status, StatusCode::OK);
    let ci = archive_url(&mirror, CI_TOKEN).await;
    assert_eq!(download(&mirror, &ci).await.status, StatusCode::OK);

    // The same cache and key, without the client ci: its URL, unexpired, no longer works.
    mirror.stop().await;
    let toml = auth_toml(false);
    let after = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            cache_dir: Some(&mirror.cache_dir),
            extra_toml: &toml,
            ..Default::default()
        },
    )
    .await;
    let refused = download(&after, &ci).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.code(), "forbidden");
    assert!(
        refused.message().contains("was handed to ci")
            && refused.message().contains("no longer accepts"),
        "{}",
        refused.message()
    );
    assert_eq!(download(&after, &platform).await.status, StatusCode::OK);
}
