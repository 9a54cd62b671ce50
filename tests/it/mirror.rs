//! The mirror protocol through a real provender server and a fake origin over TLS:
//! - cold miss then hit (zero upstream archive downloads the second time), hashes in `<version>.json`;
//! - unknown provider / version / platform, hostnames outside `allowed_hosts` (no outbound request);
//! - malformed paths (400 JSON), methods (405), HEAD, conditional requests;
//! - origin 5xx (502, not cached), tampered archive and wrong shasum (refused, nothing stored);
//! - restart with a warm cache while the origin is down; platform filter; base path; metrics;
//! - the built-in self-signed certificate.

use std::time::Duration;

use serde_json::Value;

use crate::support::http::{get, request, send};
use crate::support::origin::{FakeOrigin, Fault, ProviderSpec, RequestKind};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror};
use crate::support::{eventually, https_client, poll, within};

const PLATFORMS: &[(&str, &str)] = &[
    ("linux", "amd64"),
    ("darwin", "arm64"),
    ("windows", "amd64"),
];

/// How long polling waits for what follows a response (an `h1:`, a metric, a clean-up).
const SETTLE: Duration = Duration::from_secs(5);

async fn setup() -> (TestCa, FakeOrigin) {
    let ca = TestCa::new();
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new("acme", "foo", &["1.0.0", "1.1.0", "2.0.0-rc.1"], PLATFORMS),
            ProviderSpec::new("acme", "dirs", &["0.1.0"], &[("linux", "amd64")]),
        ],
    )
    .await;
    (ca, origin)
}

/// The version document once `platform`'s archive has been processed: `h1:` is added right
/// after a download completes, so poll briefly for it.
async fn version_doc_with_h1(
    client: &reqwest::Client,
    mirror: &TestMirror,
    ty: &str,
    version: &str,
    platform: &str,
) -> Value {
    let url = mirror.url(&format!("{REGISTRY}/acme/{ty}/{version}.json"));
    poll(SETTLE, async || {
        let doc = get(client, &url).await.json();
        let hashes = doc["archives"][platform]["hashes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        hashes
            .iter()
            .any(|h| h.as_str().is_some_and(|h| h.starts_with("h1:")))
            .then_some(doc)
    })
    .await
    .unwrap_or_else(|| panic!("{url}: no h1 for {platform} after the archive was downloaded"))
}

fn zip_path(ty: &str, version: &str, platform: &str) -> String {
    format!("{REGISTRY}/acme/{ty}/terraform-provider-{ty}_{version}_{platform}.zip")
}

#[tokio::test(flavor = "multi_thread")]
async fn cold_miss_then_hit() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);

    let index = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/index.json")),
    )
    .await;
    assert_eq!(index.status, 200);
    assert_eq!(index.content_type(), "application/json");
    assert_eq!(
        index.json(),
        serde_json::json!({"versions": {"1.0.0": {}, "1.1.0": {}, "2.0.0-rc.1": {}}})
    );

    let doc = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/1.0.0.json")),
    )
    .await;
    assert_eq!(doc.status, 200);
    let archives = doc.json()["archives"].as_object().unwrap().clone();
    assert_eq!(archives.len(), 3);
    for (os, arch) in PLATFORMS {
        let entry = &archives[&format!("{os}_{arch}")];
        assert_eq!(
            entry["url"],
            format!("terraform-provider-foo_1.0.0_{os}_{arch}.zip")
        );
        let zh = format!("zh:{}", origin.sha256_hex("acme", "foo", "1.0.0", os, arch));
        assert_eq!(
            entry["hashes"],
            serde_json::json!([zh]),
            "no h1 before the archive is processed"
        );
    }
    assert_eq!(
        origin.count(RequestKind::Archive),
        0,
        "metadata requests download no archive"
    );

    let zip = get(
        &client,
        &mirror.url(&zip_path("foo", "1.0.0", "linux_amd64")),
    )
    .await;
    assert_eq!(zip.status, 200);
    assert_eq!(
        zip.body,
        origin.archive("acme", "foo", "1.0.0", "linux", "amd64"),
        "byte-identical to the origin's"
    );
    assert_eq!(zip.content_type(), "application/zip");
    assert_eq!(
        zip.headers["content-length"],
        zip.body.len().to_string().as_str()
    );
    assert_eq!(
        zip.headers["etag"],
        format!(
            "\"{}\"",
            origin.sha256_hex("acme", "foo", "1.0.0", "linux", "amd64")
        )
        .as_str()
    );
    assert!(zip.headers.contains_key("last-modified"));
    assert_eq!(origin.count(RequestKind::Archive), 1);

    let doc = version_doc_with_h1(&client, &mirror, "foo", "1.0.0", "linux_amd64").await;
    let hashes = doc["archives"]["linux_amd64"]["hashes"]
        .as_array()
        .unwrap()
        .clone();
    let h1 = origin.h1_zip("acme", "foo", "1.0.0", "linux", "amd64");
    let zh = format!(
        "zh:{}",
        origin.sha256_hex("acme", "foo", "1.0.0", "linux", "amd64")
    );
    assert_eq!(hashes, vec![Value::from(h1), Value::from(zh)]);

    let before = origin.total_requests();
    let again = get(
        &client,
        &mirror.url(&zip_path("foo", "1.0.0", "linux_amd64")),
    )
    .await;
    assert_eq!(again.body, zip.body);
    let _ = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/index.json")),
    )
    .await;
    let _ = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/1.0.0.json")),
    )
    .await;
    assert_eq!(
        origin.total_requests(),
        before,
        "warm requests never reach the origin"
    );
    assert_eq!(origin.count(RequestKind::Archive), 1);

    let metrics = mirror.metrics(&client).await;
    assert!(
        metrics.contains(r#"provender_cache_lookups_total{kind="archive",result="hit"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"provender_cache_lookups_total{kind="archive",result="miss"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains("provender_cache_archives 1"), "{metrics}");
    assert!(
        metrics.contains(r#"provender_http_requests_total{route="archive",status="200"} 2"#),
        "{metrics}"
    );
    assert!(metrics.contains("provender_upstream_requests_total{host=\"registry.terraform.io\",operation=\"archive\",outcome=\"ok\"} 1"), "{metrics}");
    let served = zip.body.len() * 2;
    assert!(
        metrics.contains(&format!("provender_archive_bytes_served_total {served}")),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn directory_entries_get_terraforms_h1() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let zip = get(
        &client,
        &mirror.url(&zip_path("dirs", "0.1.0", "linux_amd64")),
    )
    .await;
    assert_eq!(zip.status, 200);
    let doc = version_doc_with_h1(&client, &mirror, "dirs", "0.1.0", "linux_amd64").await;
    let h1 = origin.h1_zip("acme", "dirs", "0.1.0", "linux", "amd64");
    assert_ne!(
        h1,
        origin.h1_dir("acme", "dirs", "0.1.0", "linux", "amd64"),
        "fixture really has directory entries"
    );
    assert_eq!(doc["archives"]["linux_amd64"]["hashes"][0], h1.as_str());
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_things_are_404_json() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    for path in [
        format!("{REGISTRY}/acme/nope/index.json"),
        format!("{REGISTRY}/acme/nope/1.0.0.json"),
        format!("{REGISTRY}/acme/foo/9.9.9.json"),
        zip_path("foo", "9.9.9", "linux_amd64"),
        zip_path("foo", "1.0.0", "plan9_mips"),
    ] {
        let got = get(&client, &mirror.url(&path)).await;
        assert_eq!(got.status, 404, "{path}");
        assert_eq!(got.code(), "not_found", "{path}");
        assert_eq!(got.content_type(), "application/json", "{path}");
    }
    assert_eq!(origin.count(RequestKind::Archive), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn hosts_outside_the_allow_list_cause_no_outbound_request() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    for host in [
        "evil.example",
        "127.0.0.1",
        "localhost",
        "169.254.169.254",
        "registry.terraform.io.evil.example",
    ] {
        for file in [
            "index.json",
            "1.0.0.json",
            "terraform-provider-foo_1.0.0_linux_amd64.zip",
        ] {
            let got = get(&client, &mirror.url(&format!("{host}/acme/foo/{file}"))).await;
            assert_eq!(got.status, 404, "{host}/{file}");
            assert!(
                String::from_utf8_lossy(&got.body).contains("allowed_hosts"),
                "{host}/{file}"
            );
        }
    }
    assert_eq!(origin.total_requests(), 0, "no request reached any origin");
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_requests_get_400_json() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    for path in [
        "registry.terraform.io/acme/foo/1.0.json",
        "registry.terraform.io/acme/foo/v1.0.0.json",
        "registry.terraform.io/acme/foo/latest",
        "registry.terraform.io/ac%2Fme/foo/index.json",
        "registry.terraform.io/%2e%2e/foo/index.json",
        "registry.terraform.io/acme/fo%00o/index.json",
        "registry.terraform.io/acme/foo/terraform-provider-bar_1.0.0_linux_amd64.zip",
        "registry.terraform.io/acme/foo/index.json/x",
        "registry.terraform.io/acme",
        "bad_host/acme/foo/index.json",
    ] {
        let got = get(&client, &format!("{}{}", mirror.url, path)).await;
        assert_eq!(
            got.status,
            400,
            "{path}: {}",
            String::from_utf8_lossy(&got.body)
        );
        assert_eq!(got.code(), "bad_request", "{path}");
        assert_eq!(got.content_type(), "application/json");
    }
    let post = request(
        &client,
        reqwest::Method::POST,
        &mirror.url(&format!("{REGISTRY}/acme/foo/index.json")),
    )
    .await;
    assert_eq!(post.status, 405);
    assert_eq!(post.headers["allow"], "GET, HEAD");
    assert_eq!(origin.total_requests(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn head_and_conditional_requests() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let url = mirror.url(&zip_path("foo", "1.1.0", "darwin_arm64"));
    let sha = origin.sha256_hex("acme", "foo", "1.1.0", "darwin", "arm64");
    // A HEAD of an archive that is not cached answers from the verified metadata and
    // downloads nothing.
    let head = request(&client, reqwest::Method::HEAD, &url).await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(head.headers["etag"], format!("\"{sha}\"").as_str());
    assert_ne!(
        head.headers
            .get("content-length")
            .map(|v| v.to_str().unwrap()),
        Some("0"),
        "no size is claimed before it is known"
    );
    assert_eq!(
        origin.count(RequestKind::Archive),
        0,
        "HEAD downloads nothing"
    );
    assert!(mirror.cached_archives().is_empty());

    let got = get(&client, &url).await;
    let size = origin
        .archive("acme", "foo", "1.1.0", "darwin", "arm64")
        .len();
    assert_eq!(got.body.len(), size);
    eventually("the archive is committed", SETTLE, || {
        mirror.cached_archives().len() == 1
    })
    .await;
    let head = request(&client, reqwest::Method::HEAD, &url).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.headers["content-length"], size.to_string().as_str());
    let etag = head.headers["etag"].clone();
    let cond = send(&url, client.get(&url).header("if-none-match", etag)).await;
    assert_eq!(cond.status, 304);
    assert_eq!(origin.count(RequestKind::Archive), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn origin_errors_are_502_and_not_cached() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let index_url = mirror.url(&format!("{REGISTRY}/acme/foo/index.json"));

    origin.set_fault(Fault::Status {
        kind: RequestKind::Versions,
        status: 503,
    });
    let got = get(&client, &index_url).await;
    assert_eq!(got.status, 502);
    assert_eq!(got.code(), "upstream_error");
    assert_eq!(
        origin.count(RequestKind::Versions),
        3,
        "a 503 is retried twice (upstream.retries)"
    );
    origin.clear_faults();
    assert_eq!(
        get(&client, &index_url).await.status,
        200,
        "the failure was not remembered"
    );

    origin.set_fault(Fault::Status {
        kind: RequestKind::Archive,
        status: 500,
    });
    let zip_url = mirror.url(&zip_path("foo", "1.0.0", "linux_amd64"));
    let got = get(&client, &zip_url).await;
    assert_eq!(got.status, 502);
    assert!(mirror.cached_archives().is_empty());
    origin.clear_faults();
    let got = get(&client, &zip_url).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        origin.count(RequestKind::Archive),
        3 + 1,
        "three failed attempts, then one good download"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tampered_archive_is_refused_and_nothing_is_stored() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    origin.set_fault(Fault::TamperArchive);
    let zip_url = mirror.url(&zip_path("foo", "1.0.0", "linux_amd64"));
    // A small archive is checked completely before the response starts, so the mismatch is an
    // ordinary error response (a large one is aborted mid-stream: see the resilience tests).
    let refused = get(&client, &zip_url).await;
    assert_eq!(refused.status, 502, "{}", refused.message());
    assert!(
        refused.message().contains("SHA-256"),
        "the error names the cause: {}",
        refused.message()
    );
    let failure = r#"provender_verification_failures_total{reason="archive_checksum"} 1"#;
    let counted = poll(SETTLE, async || {
        mirror
            .metrics(&client)
            .await
            .contains(failure)
            .then_some(())
    })
    .await;
    assert!(counted.is_some(), "{}", mirror.metrics(&client).await);
    eventually("no partial file left behind", SETTLE, || {
        mirror.staging_files().is_empty()
    })
    .await;
    assert!(mirror.cached_archives().is_empty(), "nothing committed");
    let doc = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/1.0.0.json")),
    )
    .await
    .json();
    assert_eq!(
        doc["archives"]["linux_amd64"]["hashes"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "no h1 for a refused archive"
    );

    origin.clear_faults();
    let got = get(&client, &zip_url).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.body,
        origin.archive("acme", "foo", "1.0.0", "linux", "amd64")
    );
    assert_eq!(
        origin.count(RequestKind::Archive),
        2,
        "the failure was not remembered"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn shasum_that_disagrees_with_sha256sums_is_refused() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    origin.set_fault(Fault::WrongShasum);
    let got = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/1.0.0.json")),
    )
    .await;
    assert_eq!(got.status, 502);
    assert_eq!(got.code(), "verification_failed");
    let got = get(
        &client,
        &mirror.url(&zip_path("foo", "1.0.0", "linux_amd64")),
    )
    .await;
    assert_eq!(got.status, 502);
    assert_eq!(
        origin.count(RequestKind::Archive),
        0,
        "no download for unverifiable metadata"
    );
    assert!(mirror.cached_archives().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn restart_with_a_warm_cache_needs_no_origin() {
    let (ca, origin) = setup().await;
    let mut mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let paths = [
        format!("{REGISTRY}/acme/foo/index.json"),
        format!("{REGISTRY}/acme/foo/1.0.0.json"),
        zip_path("foo", "1.0.0", "linux_amd64"),
    ];
    let mut first = Vec::new();
    for p in &paths {
        let got = get(&client, &mirror.url(p)).await;
        assert_eq!(got.status, 200, "{p}");
        first.push(got.body);
    }
    // The version document changed when the archive was processed (h1 added): take it again.
    version_doc_with_h1(&client, &mirror, "foo", "1.0.0", "linux_amd64").await;
    first[1] = get(&client, &mirror.url(&paths[1])).await.body;
    mirror.stop().await;

    for kind in RequestKind::ALL {
        origin.set_fault(Fault::Status { kind, status: 500 });
    }
    origin.reset_counts();
    let restarted = TestMirror::start_on(&ca, &origin, &mirror.cache_dir).await;
    for (p, body) in paths.iter().zip(&first) {
        let got = get(&client, &restarted.url(p)).await;
        assert_eq!(
            got.status,
            200,
            "{p}: {}",
            String::from_utf8_lossy(&got.body)
        );
        assert_eq!(&got.body, body, "{p}");
    }
    assert_eq!(origin.total_requests(), 0, "everything came from the cache");
}

#[tokio::test(flavor = "multi_thread")]
async fn platform_filter_and_base_path() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: r#"platforms = ["linux_amd64", "darwin_arm64"]"#,
            extra_server: r#"base_path = "/providers""#,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(mirror.url.path(), "/providers/");
    let client = https_client(&ca, &[]);
    let page = get(&client, mirror.url.as_str()).await;
    assert_eq!(page.status, 200);
    assert!(page.content_type().starts_with("text/html"));
    let page = String::from_utf8(page.body).unwrap();
    assert!(
        page.contains("network_mirror") && page.contains(mirror.url.as_str()),
        "{page}"
    );

    let doc = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/1.0.0.json")),
    )
    .await
    .json();
    let platforms: Vec<&String> = doc["archives"].as_object().unwrap().keys().collect();
    assert_eq!(platforms, ["darwin_arm64", "linux_amd64"]);
    assert_eq!(
        origin.count(RequestKind::Download),
        2,
        "filtered platforms are not even looked up"
    );
    let got = get(
        &client,
        &mirror.url(&zip_path("foo", "1.0.0", "windows_amd64")),
    )
    .await;
    assert_eq!(got.status, 404);
    let outside = get(
        &client,
        &mirror.root_url(&format!("/{REGISTRY}/acme/foo/index.json")),
    )
    .await;
    assert_eq!(
        outside.status, 404,
        "nothing is served outside the base path"
    );
    for admin in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            get(&client, &mirror.root_url(admin)).await.status,
            200,
            "{admin}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn built_in_self_signed_certificate_is_usable() {
    let (ca, origin) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_ca(dir.path());
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[cache]\ndir = \"{}\"\n[upstream]\nca_file = \"{}\"\n\
         [upstream.hosts.\"{REGISTRY}\"]\nconnect_to = \"{}\"\n",
        dir.path().join("data").display(),
        ca_file.display(),
        origin.addr()
    );
    let settings = provender::config::Config::from_toml(&toml)
        .unwrap()
        .validate()
        .unwrap();
    let server = within("bind", provender::server::Server::bind(settings))
        .await
        .unwrap();
    let generated = server.ca_file().expect("a CA was generated").clone();
    assert!(generated.starts_with(dir.path().join("data/tls")));
    let running = server.spawn();

    crate::support::install_crypto_provider();
    let root = reqwest::Certificate::from_pem(&std::fs::read(&generated).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .tls_certs_only([root])
        .no_proxy()
        .build()
        .unwrap();
    let url = running
        .base_url
        .join(&format!("{REGISTRY}/acme/foo/index.json"))
        .unwrap();
    let got = get(&client, url.as_str()).await;
    assert_eq!(got.status, 200);
    within("stop", running.stop()).await.unwrap();
}
