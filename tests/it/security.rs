//! Attacks on the mirror, through a real provender server and a fake origin over TLS. Each test
//! checks the answer a client gets *and* that nothing was stored and no forbidden connection
//! was made (the fake origin counts and logs every request that reaches it, by host).
//!
//! - trust chain: altered SHA256SUMS, a signature by an unlisted key, a wrong `shasum`, an
//!   origin that lists no signing keys (refused by default, allowed by config); the tampered
//!   archive is `mirror::tampered_archive_is_refused_and_nothing_is_stored`;
//! - reaching only what is allowed: IP-literal registry hosts, a name resolving to loopback,
//!   `providers.v1`, `download_url` and `shasums_url` pointing at loopback, redirects to
//!   loopback / plain http / themselves, tokens never following a redirect to another host,
//!   client headers never forwarded; an egress proxy carrying every origin request;
//! - limits: endless documents and archives, zip bombs and hostile zip entries;
//! - path traversal in every path segment, sent byte for byte;
//! - client authentication: missing, wrong, tampered and expired credentials.
//!
//! Private addresses other than loopback are never dialled by tests; the address policy's
//! handling of them is covered by unit tests in `upstream::policy`.

use std::time::Duration;

use serde_json::Value;

use crate::support::http::{Got, send, send_lenient};
use crate::support::origin::{FakeOrigin, Fault, ProviderSpec, RequestKind};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror, files_under};
use crate::support::tf_config::{self, local_platform};
use crate::support::{
    Terraform, eventually, https_client, https_client_no_redirects, init_fresh, poll, within,
};

const OTHER: &str = "other.example";
const TOKEN: &str = "client-token-0123456789";

async fn setup_with(providers: Vec<ProviderSpec>) -> (TestCa, FakeOrigin) {
    let ca = TestCa::new();
    let origin = FakeOrigin::start(&ca, &[REGISTRY, OTHER], providers).await;
    (ca, origin)
}

async fn setup() -> (TestCa, FakeOrigin) {
    setup_with(vec![ProviderSpec::new(
        "acme",
        "foo",
        &["1.0.0"],
        &[("linux", "amd64"), ("darwin", "arm64")],
    )])
    .await
}

/// A `&'static str` for a [`Fault`] that needs a run-time URL.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// `GET url`, as `token`'s bearer if given. A refused archive may end its body with an error:
/// the status and headers are kept, the body reads as empty.
async fn get_with(client: &reqwest::Client, url: &str, token: Option<&str>) -> Got {
    let mut req = client.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    send_lenient(url, req).await
}

/// `GET url` without credentials (see [`get_with`]).
async fn get(client: &reqwest::Client, url: &str) -> Got {
    get_with(client, url, None).await
}

/// `path` below the mirror's base URL, taken literally (`Url::join` would read a leading
/// `localhost:PORT` as a scheme).
fn at(mirror: &TestMirror, path: &str) -> String {
    format!("{}{path}", mirror.url)
}

fn index(host: &str) -> String {
    format!("{host}/acme/foo/index.json")
}

fn version_doc() -> String {
    format!("{REGISTRY}/acme/foo/1.0.0.json")
}

fn zip(ty: &str, platform: &str) -> String {
    format!("{REGISTRY}/acme/{ty}/terraform-provider-{ty}_1.0.0_{platform}.zip")
}

/// Waits until the metrics show `needle` (fills run detached from the client).
async fn wait_for_metric(client: &reqwest::Client, mirror: &TestMirror, needle: &str) {
    let shown = poll(Duration::from_secs(10), async || {
        mirror.metrics(client).await.contains(needle).then_some(())
    })
    .await;
    if shown.is_none() {
        panic!(
            "metric {needle} never appeared:\n{}",
            mirror.metrics(client).await
        );
    }
}

/// Nothing about version 1.0.0 was committed: no archive, no version record, no SHA256SUMS
/// copy, no staging leftovers.
async fn assert_nothing_committed(mirror: &TestMirror) {
    assert!(
        mirror.cached_archives().is_empty(),
        "{:?}",
        mirror.cached_archives()
    );
    let meta: Vec<_> = files_under(&mirror.cache_dir.join("metadata"))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("1.0.0"))
        })
        .collect();
    assert!(meta.is_empty(), "version metadata was written: {meta:?}");
    eventually(
        "no staging files left behind",
        Duration::from_secs(5),
        || mirror.staging_files().is_empty(),
    )
    .await;
}

/// No request reached the origin under any name but the allowed ones.
fn assert_only_allowed_hosts(origin: &FakeOrigin) {
    for r in origin.requests() {
        let host = r.host.clone().unwrap_or_default();
        assert!(
            host.starts_with(REGISTRY) || host.starts_with(OTHER),
            "a request reached the origin as {host:?}: {r:?}"
        );
    }
}

async fn refused_version(client: &reqwest::Client, mirror: &TestMirror, reason: &str) -> String {
    let got = get(client, &mirror.url(&version_doc())).await;
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(got.code(), "verification_failed");
    let zip = get(client, &mirror.url(&zip("foo", "linux_amd64"))).await;
    assert_eq!(zip.status, 502, "no archive without a verified record");
    let m = mirror.metrics(client).await;
    assert!(
        m.contains(&format!(
            "provender_verification_failures_total{{reason=\"{reason}\"}}"
        )),
        "{m}"
    );
    got.message()
}

/// The signature classification stored in the version record of acme/foo 1.0.0.
fn recorded_trust(mirror: &TestMirror) -> Value {
    let path = mirror
        .cache_dir
        .join("metadata/registry.terraform.io/acme/foo/1.0.0.json");
    let record: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    record["sums"][0]["trust"].clone()
}

/// Waits until the store holds `n` archives (fills commit after the client is served).
async fn wait_for_archives(mirror: &TestMirror, n: usize) {
    eventually(
        &format!("{n} cached archives"),
        Duration::from_secs(10),
        || mirror.cached_archives().len() == n,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn altered_sha256sums_fails_the_signature_check() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    origin.set_fault(Fault::AlteredSums);
    let msg = refused_version(&client, &mirror, "signature_invalid").await;
    assert!(
        msg.contains("registry.terraform.io/acme/foo 1.0.0") && msg.contains("signature"),
        "{msg}"
    );
    assert_eq!(origin.count(RequestKind::Archive), 0);
    assert_nothing_committed(&mirror).await;

    origin.clear_faults();
    let got = get(&client, &mirror.url(&version_doc())).await;
    assert_eq!(got.status, 200, "the failure was not remembered");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signature_by_an_unlisted_key_is_refused() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    origin.set_fault(Fault::SignedByUnlistedKey);
    let msg = refused_version(&client, &mirror, "signature_unknown_key").await;
    assert!(msg.contains("not among the origin's signing keys"), "{msg}");
    assert_eq!(origin.count(RequestKind::Archive), 0);
    assert_nothing_committed(&mirror).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_shasum_in_download_metadata_is_refused() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    origin.set_fault(Fault::WrongShasum);
    let msg = refused_version(&client, &mirror, "shasums_mismatch").await;
    assert!(msg.contains("SHA256SUMS lists"), "{msg}");
    assert_eq!(origin.count(RequestKind::Archive), 0);
    assert_nothing_committed(&mirror).await;
}

/// Another version's or platform's genuinely signed files, offered as this package's: a
/// rollback or a relabel that the signature alone cannot tell. Refused through every door that
/// reads a version record (network mirror, registry facade, OCI), naming both file names.
#[tokio::test(flavor = "multi_thread")]
async fn signed_files_of_another_version_or_platform_are_refused() {
    let (ca, origin) = setup_with(vec![ProviderSpec::new(
        "acme",
        "foo",
        &["1.0.0", "2.0.0"],
        &[("linux", "amd64"), ("darwin", "arm64")],
    )])
    .await;
    let client = https_client(&ca, &[]);
    for (fault, version, expected, found) in [
        (
            Fault::DescribeAs {
                version: Some("1.0.0"),
                platform: None,
            },
            "2.0.0",
            "terraform-provider-foo_2.0.0_darwin_arm64.zip",
            "terraform-provider-foo_1.0.0_darwin_arm64.zip",
        ),
        (
            Fault::DescribeAs {
                version: None,
                platform: Some(("linux", "amd64")),
            },
            "1.0.0",
            "terraform-provider-foo_1.0.0_darwin_arm64.zip",
            "terraform-provider-foo_1.0.0_linux_amd64.zip",
        ),
    ] {
        origin.set_fault(fault);
        let doors = [
            format!("{REGISTRY}/acme/foo/{version}.json"),
            format!("v1/providers/{REGISTRY}/acme/foo/{version}/download/darwin/arm64"),
        ];
        for door in doors {
            let mirror = TestMirror::start(&ca, &origin).await;
            let got = get(&client, &mirror.url(&door)).await;
            assert_eq!(
                got.status,
                502,
                "{door}: {}",
                String::from_utf8_lossy(&got.body)
            );
            assert_eq!(got.code(), "verification_failed", "{door}");
            let msg = got.message();
            assert!(
                msg.contains(expected) && msg.contains(found),
                "{door}: {msg}"
            );
            let archive =
                format!("{REGISTRY}/acme/foo/terraform-provider-foo_{version}_darwin_arm64.zip");
            assert_eq!(get(&client, &mirror.url(&archive)).await.status, 502);
            let m = mirror.metrics(&client).await;
            assert!(
                m.contains(
                    "provender_verification_failures_total{reason=\"package_filename_mismatch\"}"
                ),
                "{m}"
            );
            assert!(mirror.cached_archives().is_empty());
        }
        let mirror = TestMirror::start(&ca, &origin).await;
        let oci = mirror.root_url(&format!("/v2/{REGISTRY}/acme/foo/manifests/{version}"));
        let got = get(&client, &oci).await;
        assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
        assert!(String::from_utf8_lossy(&got.body).contains(expected));
        assert_eq!(origin.count(RequestKind::Archive), 0);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn origins_without_signing_keys_follow_require_signature() {
    let (ca, origin) = setup().await;
    origin.set_fault(Fault::NoSigningKeys);
    let client = https_client(&ca, &[]);

    let strict = TestMirror::start(&ca, &origin).await;
    let msg = refused_version(&client, &strict, "signature_missing_keys").await;
    assert!(msg.contains("upstream.require_signature"), "{msg}");
    assert_nothing_committed(&strict).await;

    // Keys after the generated `[upstream.hosts."registry.terraform.io"]` header belong to it.
    let lenient = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_toml: "require_signature = false",
            ..Default::default()
        },
    )
    .await;
    let got = get(&client, &lenient.url(&version_doc())).await;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    let zip = get(&client, &lenient.url(&zip("foo", "linux_amd64"))).await;
    assert_eq!(zip.status, 200);
    assert_eq!(
        zip.body,
        origin.archive("acme", "foo", "1.0.0", "linux", "amd64")
    );
    let trust = recorded_trust(&lenient);
    assert_eq!(trust, serde_json::json!({ "kind": "unsigned" }));
}

#[tokio::test(flavor = "multi_thread")]
async fn verified_versions_record_their_signature() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    assert_eq!(get(&client, &mirror.url(&version_doc())).await.status, 200);
    assert_eq!(
        recorded_trust(&mirror),
        serde_json::json!({ "kind": "community", "key_id": origin.key_id() })
    );
}

/// A registry host `host` (listed in `upstream.allowed_hosts`) that reaches the origin at a
/// loopback address is refused without connecting, as an upstream error whose message holds
/// every one of `why`; once the operator allows private networks, the very same request works.
async fn loopback_host_is_refused_until_allowed(
    ca: &TestCa,
    origin: &FakeOrigin,
    host: &str,
    why: &[&str],
) {
    let client = https_client(ca, &[]);
    let mirror = TestMirror::start_with(
        ca,
        origin,
        MirrorOptions {
            allowed_hosts: &[host],
            ..Default::default()
        },
    )
    .await;
    let got = get(&client, &at(&mirror, &index(host))).await;
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(got.code(), "upstream_error");
    let message = got.message();
    for part in why {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    assert_eq!(origin.total_requests(), 0, "no connection was made");

    let open = TestMirror::start_with(
        ca,
        origin,
        MirrorOptions {
            allowed_hosts: &[host],
            extra_upstream: "allow_private_networks = true",
            ..Default::default()
        },
    )
    .await;
    assert_eq!(get(&client, &at(&open, &index(host))).await.status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn ip_literal_registry_hosts_are_refused_without_connecting() {
    let (ca, origin) = setup().await;
    let literal = format!("127.0.0.1:{}", origin.addr().port());
    let why = ["loopback", "allow_private_networks"];
    loopback_host_is_refused_until_allowed(&ca, &origin, &literal, &why).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_resolving_to_loopback_is_refused_without_connecting() {
    let (ca, origin) = setup().await;
    let name = format!("localhost:{}", origin.addr().port());
    loopback_host_is_refused_until_allowed(&ca, &origin, &name, &["localhost", "loopback"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn providers_v1_pointing_at_private_addresses_is_refused() {
    let (ca, origin) = setup().await;
    let port = origin.addr().port();
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    for base in [
        format!("https://127.0.0.1:{port}/v1/providers/"),
        format!("https://[::1]:{port}/v1/providers/"),
        format!("https://[::ffff:127.0.0.1]:{port}/v1/providers/"),
        format!("https://[::ffff:7f00:1]:{port}/v1/providers/"),
        format!("https://0x7f.0.0.1:{port}/v1/providers/"),
        format!("https://localhost:{port}/v1/providers/"),
        format!("http://{REGISTRY}/v1/providers/"),
        format!("https://user:secret@{REGISTRY}/v1/providers/"),
    ] {
        origin.set_fault(Fault::ProvidersV1(leak(base.clone())));
        let got = get(&client, &at(&mirror, &index(REGISTRY))).await;
        assert_eq!(got.status, 502, "{base}");
        assert_eq!(got.code(), "upstream_error", "{base}");
        assert!(
            got.message().contains("refusing"),
            "{base}: {}",
            got.message()
        );
        assert!(
            !got.message().contains("secret"),
            "credentials never echoed"
        );
    }
    assert_eq!(origin.count(RequestKind::Versions), 0);
    assert_only_allowed_hosts(&origin);
}

#[tokio::test(flavor = "multi_thread")]
async fn download_and_shasums_urls_pointing_at_private_addresses_are_refused() {
    let (ca, origin) = setup().await;
    let port = origin.addr().port();
    let file = "/files/acme/foo/1.0.0/terraform-provider-foo_1.0.0_linux_amd64.zip";
    let client = https_client(&ca, &[]);

    // IP literals are refused while the version record is built.
    let mirror = TestMirror::start(&ca, &origin).await;
    origin.set_fault(Fault::DownloadUrl(leak(format!(
        "https://127.0.0.1:{port}{file}"
    ))));
    let got = get(&client, &mirror.url(&version_doc())).await;
    assert_eq!(got.status, 502);
    assert!(got.message().contains("loopback"), "{}", got.message());
    assert_nothing_committed(&mirror).await;

    // A name is refused where it resolves, when the archive is fetched.
    origin.set_fault(Fault::DownloadUrl(leak(format!(
        "https://localhost:{port}{file}"
    ))));
    let got = get(&client, &mirror.url(&zip("foo", "linux_amd64"))).await;
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    assert!(got.message().contains("loopback"), "{}", got.message());
    assert!(mirror.cached_archives().is_empty());

    // A connect_to name with another port would reach another service at the same address.
    let other_port = TestMirror::start(&ca, &origin).await;
    origin.set_fault(Fault::DownloadUrl(leak(format!(
        "https://{REGISTRY}:{port}{file}"
    ))));
    let got = get(&client, &other_port.url(&version_doc())).await;
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    assert!(got.message().contains("connect_to"), "{}", got.message());
    assert_nothing_committed(&other_port).await;

    origin.clear_faults();
    let sums_fetched = origin.count(RequestKind::Sums);
    let fresh = TestMirror::start(&ca, &origin).await;
    origin.set_fault(Fault::ShasumsUrl(leak(format!(
        "https://localhost:{port}/files/acme/foo/1.0.0/terraform-provider-foo_1.0.0_SHA256SUMS"
    ))));
    let got = get(&client, &fresh.url(&version_doc())).await;
    assert_eq!(got.status, 502);
    assert!(got.message().contains("loopback"), "{}", got.message());
    assert_nothing_committed(&fresh).await;

    assert_eq!(origin.count(RequestKind::Archive), 0);
    assert_eq!(origin.count(RequestKind::Sums), sums_fetched);
    assert_only_allowed_hosts(&origin);
}

#[tokio::test(flavor = "multi_thread")]
async fn redirects_are_checked_at_every_hop() {
    let (ca, origin) = setup().await;
    let port = origin.addr().port();
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let versions = "/v1/providers/acme/foo/versions";
    for location in [
        format!("https://127.0.0.1:{port}{versions}"),
        format!("https://[::1]:{port}{versions}"),
        format!("https://localhost:{port}{versions}"),
        format!("http://{REGISTRY}{versions}"),
    ] {
        origin.set_fault(Fault::Redirect {
            kind: RequestKind::Versions,
            location: leak(location.clone()),
        });
        let got = get(&client, &at(&mirror, &index(REGISTRY))).await;
        assert_eq!(got.status, 502, "{location}");
        assert!(
            // The policy's own wording, not an OS "connection refused".
            got.message().contains("refusing"),
            "{location}: {}",
            got.message()
        );
    }
    origin.clear_faults();
    origin.set_fault(Fault::RedirectLoop {
        kind: RequestKind::Versions,
    });
    let got = get(&client, &at(&mirror, &index(REGISTRY))).await;
    assert_eq!(got.status, 502);
    assert!(got.message().contains("redirect"), "{}", got.message());
    assert_only_allowed_hosts(&origin);
    assert!(mirror.cached_archives().is_empty());
}

/// With `upstream.proxy`, every origin request goes through the proxy with its credentials,
/// names are left to the proxy to resolve, and IP-literal URLs are still refused on this side.
#[tokio::test(flavor = "multi_thread")]
async fn an_egress_proxy_carries_every_origin_request() {
    use crate::support::egress_proxy::EgressProxy;
    use base64::Engine as _;

    let (ca, origin) = setup().await;
    let proxy = EgressProxy::start(origin.addr()).await;
    let credentials = base64::engine::general_purpose::STANDARD.encode("egress:s3cret");
    proxy.require_authorization(&format!("Basic {credentials}"));
    let setting = format!("proxy = \"http://egress:s3cret@{}\"", proxy.addr());
    // by_name: the registry has no connect_to, so it is reached through the proxy.
    let behind_proxy = |by_name: bool| MirrorOptions {
        extra_upstream: &setting,
        by_name,
        ..MirrorOptions::default()
    };
    let mirror = TestMirror::start_with(&ca, &origin, behind_proxy(true)).await;
    let client = https_client(&ca, &[]);

    let got = get(&client, &mirror.url(&zip("foo", "linux_amd64"))).await;
    assert_eq!(got.status, 200, "{}", got.message());
    assert_eq!(
        got.body,
        origin.archive("acme", "foo", "1.0.0", "linux", "amd64")
    );
    let tunnels = proxy.tunnels();
    assert!(!tunnels.is_empty());
    for tunnel in &tunnels {
        assert_eq!(tunnel.target, format!("{REGISTRY}:443"));
        assert_eq!(
            tunnel.authorization.as_deref(),
            Some(format!("Basic {credentials}").as_str())
        );
    }
    assert_eq!(origin.count(RequestKind::Archive), 1);

    // An IP-literal download URL is refused before the proxy is asked.
    let port = origin.addr().port();
    origin.set_fault(Fault::DownloadUrl(leak(format!(
        "https://127.0.0.1:{port}/files/acme/foo/1.0.0/terraform-provider-foo_1.0.0_linux_amd64.zip"
    ))));
    let other = TestMirror::start_with(&ca, &origin, behind_proxy(true)).await;
    let asked = proxy.tunnels().len();
    let refused = get(&client, &other.url(&version_doc())).await;
    assert_eq!(refused.status, 502, "{}", refused.message());
    assert!(
        refused.message().contains("loopback"),
        "{}",
        refused.message()
    );
    assert!(
        proxy.tunnels()[asked..]
            .iter()
            .all(|t| t.target == format!("{REGISTRY}:443")),
        "{:?}",
        proxy.tunnels()
    );
    assert_nothing_committed(&other).await;

    // A registry with `connect_to` is reached directly, never through the proxy.
    let asked = proxy.tunnels().len();
    let pinned = TestMirror::start_with(&ca, &origin, behind_proxy(false)).await;
    origin.clear_faults();
    let direct = get(&client, &pinned.url(&version_doc())).await;
    assert_eq!(direct.status, 200, "{}", direct.message());
    assert_eq!(proxy.tunnels().len(), asked, "{:?}", proxy.tunnels());

    // Credentials the proxy refuses make a 502 naming the proxy, and nothing is cached.
    origin.clear_faults();
    proxy.require_authorization("Basic bm90OnRoaXM=");
    let reached = origin.total_requests();
    let third = TestMirror::start_with(&ca, &origin, behind_proxy(true)).await;
    let refused = get(&client, &third.url(&version_doc())).await;
    assert_eq!(refused.status, 502, "{}", refused.message());
    assert!(refused.message().contains("proxy"), "{}", refused.message());
    assert_eq!(
        origin.total_requests(),
        reached,
        "the proxy let nothing through"
    );
    assert_nothing_committed(&third).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_stay_with_their_host_and_client_headers_stay_home() {
    let (ca, origin) = setup().await;
    let extra = format!(
        "token = \"registry-secret-0123\"\n\n[upstream.hosts.\"{OTHER}\"]\nconnect_to = \"{}\"\n",
        origin.addr()
    );
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            allowed_hosts: &[OTHER],
            extra_toml: &extra,
            ..Default::default()
        },
    )
    .await;
    origin.set_fault(Fault::Redirect {
        kind: RequestKind::Archive,
        location: leak(format!(
            "https://{OTHER}/files/acme/foo/1.0.0/terraform-provider-foo_1.0.0_linux_amd64.zip"
        )),
    });
    let client = https_client(&ca, &[]);
    let url = mirror.url(&zip("foo", "linux_amd64"));
    let got = send(
        &url,
        client
            .get(&url)
            .bearer_auth("client-secret")
            .header("x-forwarded-host", "evil.example")
            .header("cookie", "session=client"),
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.body,
        origin.archive("acme", "foo", "1.0.0", "linux", "amd64")
    );

    let requests = origin.requests();
    let on_other: Vec<_> = requests
        .iter()
        .filter(|r| r.host.as_deref().is_some_and(|h| h.starts_with(OTHER)))
        .collect();
    assert_eq!(on_other.len(), 1, "{requests:#?}");
    assert_eq!(
        on_other[0].authorization, None,
        "the token did not follow the redirect"
    );
    for r in &requests {
        assert!(
            r.user_agent
                .as_deref()
                .is_some_and(|ua| ua.starts_with("provender/")),
            "{r:?}"
        );
        assert_ne!(r.authorization.as_deref(), Some("Bearer client-secret"));
        for forwarded in ["cookie", "x-forwarded-host"] {
            assert!(!r.header_names.iter().any(|h| h == forwarded), "{r:?}");
        }
        if r.host.as_deref().is_some_and(|h| h.starts_with(REGISTRY)) {
            assert_eq!(
                r.authorization.as_deref(),
                Some("Bearer registry-secret-0123"),
                "{r:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn endless_documents_and_archives_are_cut_off() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: "max_document_size = \"64 KiB\"\nmax_archive_size = \"1 MiB\"\nmax_discovery_size = \"16 KiB\"",
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    for kind in [RequestKind::Discovery, RequestKind::Versions] {
        origin.clear_faults();
        origin.set_fault(Fault::EndlessBody { kind });
        let got = get(&client, &at(&mirror, &index(REGISTRY))).await;
        assert_eq!(got.status, 502, "{kind:?}");
        assert!(
            got.message().contains("larger than"),
            "{kind:?}: {}",
            got.message()
        );
    }
    origin.clear_faults();
    assert_eq!(get(&client, &mirror.url(&version_doc())).await.status, 200);
    origin.set_fault(Fault::EndlessBody {
        kind: RequestKind::Archive,
    });
    let resp = within(
        "endless archive",
        client.get(mirror.url(&zip("foo", "linux_amd64"))).send(),
    )
    .await
    .unwrap();
    if resp.status() == 200 {
        assert!(
            within("endless archive body", resp.bytes()).await.is_err(),
            "an oversized archive never ends cleanly"
        );
    } else {
        assert_eq!(resp.status(), 502);
    }
    eventually("no staging file left", Duration::from_secs(5), || {
        mirror.staging_files().is_empty()
    })
    .await;
    assert!(mirror.cached_archives().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn zip_bombs_and_hostile_entries_are_not_cached() {
    let platforms = &[("linux", "amd64")];
    let (ca, origin) = setup_with(vec![
        ProviderSpec::new("acme", "bomb", &["1.0.0"], platforms)
            .with_entry("zeros.bin", Some(vec![0u8; 8 << 20])),
        ProviderSpec::new("acme", "escape", &["1.0.0"], platforms)
            .with_entry("../../escape.sh", Some(b"#!/bin/sh\n".to_vec())),
        ProviderSpec::new("acme", "many", &["1.0.0"], platforms)
            .with_entry("a", Some(b"1".to_vec()))
            .with_entry("b", Some(b"2".to_vec()))
            .with_entry("c", Some(b"3".to_vec())),
        ProviderSpec::new("acme", "dirdata", &["1.0.0"], platforms)
            .with_entry("docs/", None)
            .with_entry("docs/x", Some(b"x".to_vec())),
    ])
    .await;
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: "max_unpacked_size = \"1 MiB\"\nmax_zip_entries = 3",
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    for (n, ty) in ["bomb", "escape", "many"].iter().enumerate() {
        let _ = get(&client, &mirror.url(&zip(ty, "linux_amd64"))).await;
        wait_for_metric(
            &client,
            &mirror,
            &format!(
                "provender_verification_failures_total{{reason=\"unusable_zip\"}} {}",
                n + 1
            ),
        )
        .await;
        let doc = get(
            &client,
            &mirror.url(&format!("{REGISTRY}/acme/{ty}/1.0.0.json")),
        )
        .await
        .json();
        let hashes = doc["archives"]["linux_amd64"]["hashes"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(hashes.len(), 1, "{ty}: no h1 is ever published: {hashes:?}");
    }
    assert!(
        mirror.cached_archives().is_empty(),
        "{:?}",
        mirror.cached_archives()
    );
    // Within the limits and well-formed: cached (directory entries are fine without data).
    let ok = get(&client, &mirror.url(&zip("dirdata", "linux_amd64"))).await;
    assert_eq!(ok.status, 200);
    wait_for_archives(&mirror, 1).await;
    // The zip is in the store a moment before its h1 reaches the version record.
    let url = mirror.url(&format!("{REGISTRY}/acme/dirdata/1.0.0.json"));
    let published = poll(Duration::from_secs(10), async || {
        let doc = get(&client, &url).await.json();
        let hashes = doc["archives"]["linux_amd64"]["hashes"].clone();
        hashes
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h.as_str().unwrap().starts_with("h1:"))
            .then_some(())
    })
    .await;
    assert!(published.is_some(), "its h1 is published");
}

/// The real CLI with a `credentials` block installs through an authenticating mirror (its API
/// calls carry the token, its archive download the signed URL); without credentials it fails.
#[tokio::test(flavor = "multi_thread")]
async fn terraform_installs_through_an_authenticating_mirror() {
    let (ca, origin) = setup_with(vec![ProviderSpec::new(
        "acme",
        "foo",
        &["1.0.0"],
        &[local_platform()],
    )])
    .await;
    let mirror = start_with_auth(&ca, &origin, "").await;
    let host = format!("localhost:{}", mirror.url.port().unwrap());
    let installation = tf_config::network_mirror(mirror.url.as_str());

    let dir = tf_config::root_module(tf_config::FOO);
    Terraform::new(&ca, &installation)
        .init(dir.path())
        .await
        .assert_failure();
    assert_eq!(origin.total_requests(), 0);

    let with_token =
        format!("{installation}credentials \"{host}\" {{\n  token = \"{TOKEN}\"\n}}\n");
    init_fresh(&ca, &with_token, tf_config::FOO).await;
    assert_eq!(origin.count(RequestKind::Archive), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_registry_facade_signs_what_the_cli_fetches_without_credentials() {
    let (ca, origin) = setup().await;
    let mirror = start_with_auth(&ca, &origin, "").await;
    let client = https_client(&ca, &[]);
    let doc_url = mirror.url(&format!(
        "v1/providers/{REGISTRY}/acme/foo/1.0.0/download/linux/amd64"
    ));
    assert_eq!(get(&client, &doc_url).await.status, 401);
    let doc = get_with(&client, &doc_url, Some(TOKEN)).await.json();
    let resolve = |u: &Value| {
        url::Url::parse(&doc_url)
            .unwrap()
            .join(u.as_str().unwrap())
            .unwrap()
    };
    for (field, want) in [
        ("shasums_url", origin.shasums("acme", "foo", "1.0.0")),
        (
            "shasums_signature_url",
            origin.shasums_signature("acme", "foo", "1.0.0"),
        ),
        (
            "download_url",
            origin.archive("acme", "foo", "1.0.0", "linux", "amd64"),
        ),
    ] {
        let signed = resolve(&doc[field]);
        assert!(
            signed.query().is_some_and(|q| q.contains("sig=")),
            "{field}: {signed}"
        );
        let got = get(&client, signed.as_str()).await;
        assert_eq!(got.status, 200, "{field}");
        assert_eq!(got.body, want, "{field}");
        let mut unsigned = signed.clone();
        unsigned.set_query(None);
        assert_eq!(get(&client, unsigned.as_str()).await.status, 401, "{field}");
        let mut other = signed.clone();
        other.set_query(Some(&signed.query().unwrap().replace("exp=", "exp=1")));
        assert_eq!(get(&client, other.as_str()).await.status, 403, "{field}");
    }
    // A signature for one SHA256SUMS file does not open its signature file.
    let sums = resolve(&doc["shasums_url"]);
    let mut moved = resolve(&doc["shasums_signature_url"]);
    moved.set_query(sums.query());
    assert_eq!(get(&client, moved.as_str()).await.status, 403);
}

#[tokio::test(flavor = "multi_thread")]
async fn corrupted_cache_entries_are_quarantined_on_schedule() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_cache: "reverify_interval = \"200ms\"",
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let url = mirror.url(&zip("foo", "linux_amd64"));
    let genuine = origin.archive("acme", "foo", "1.0.0", "linux", "amd64");
    assert_eq!(get(&client, &url).await.body, genuine);
    // A sound archive beside it, which every pass checks too.
    let sound = mirror.url(&zip("foo", "darwin_arm64"));
    assert_eq!(get(&client, &sound).await.status, 200);
    wait_for_archives(&mirror, 2).await;
    let failures = r#"provender_verification_failures_total{reason="cached_archive_mismatch"}"#;
    let damage = || {
        let path = mirror
            .cached_archives()
            .into_iter()
            .find(|p| p.to_string_lossy().ends_with("_linux_amd64.zip"))
            .expect("the linux archive is cached");
        let mut bytes = std::fs::read(&path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
    };

    damage();
    wait_for_metric(&client, &mirror, &format!("{failures} 1")).await;
    assert_eq!(mirror.cached_archives().len(), 1, "taken out of service");
    let kept = files_under(&mirror.cache_dir.join("quarantine"));
    assert!(!kept.is_empty(), "the bad copy is kept for inspection");

    let again = get(&client, &url).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, genuine, "a fresh, verified copy");
    assert_eq!(origin.count(RequestKind::Archive), 3);

    // The fresh copy, damaged in turn, can only be found by a pass that listed the store after
    // it was stored, so the pass that found the first one is over: the sound archive went
    // through it (and any before) and is still there.
    wait_for_archives(&mirror, 2).await;
    damage();
    wait_for_metric(&client, &mirror, &format!("{failures} 2")).await;
    let m = mirror.metrics(&client).await;
    assert_eq!(
        crate::support::sample(&m, failures),
        2,
        "a sound archive passes: {m}"
    );
    let left = mirror.cached_archives();
    assert!(
        left.len() == 1 && left[0].to_string_lossy().ends_with("_darwin_arm64.zip"),
        "{left:?}"
    );
}

/// Sends `GET <target>` exactly as given, over TLS, and returns the status and body.
async fn raw_get(ca: &TestCa, mirror: &TestMirror, target: &str) -> (u16, String) {
    use rustls::pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    crate::support::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.ca_pem().as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let addr = format!(
        "{}:{}",
        mirror.url.host_str().unwrap(),
        mirror.url.port().unwrap()
    );
    let tcp = within("connect", tokio::net::TcpStream::connect(&addr))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = within("handshake", connector.connect(name, tcp))
        .await
        .unwrap();
    let mut request = Vec::new();
    request.extend_from_slice(b"GET ");
    request.extend_from_slice(target.as_bytes());
    request.extend_from_slice(b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    tls.write_all(&request).await.unwrap();
    let mut response = Vec::new();
    let _ = within("response", tls.read_to_end(&mut response)).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_string();
    (status, body)
}

#[tokio::test(flavor = "multi_thread")]
async fn path_traversal_in_every_segment_is_refused() {
    let (ca, origin) = setup().await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let long = "a".repeat(300);
    let payloads = [
        "..",
        "%2e%2e",
        "%2E%2e",
        ".%2e",
        ".",
        "%2e",
        "a%2fb",
        "%2f",
        "a%5cb",
        "a\\b",
        "a%00b",
        "%00",
        "a%0ab",
        "%ff",
        long.as_str(),
        "",
    ];
    let base = mirror.url.path().to_string();
    let segments = |i: usize, p: &str| {
        let mut parts = [
            REGISTRY.to_string(),
            "acme".into(),
            "foo".into(),
            "terraform-provider-foo_1.0.0_linux_amd64.zip".into(),
        ];
        parts[i] = p.to_string();
        parts.join("/")
    };
    let mut targets = Vec::new();
    for p in payloads {
        for i in 0..4 {
            targets.push(format!("{base}{}", segments(i, p)));
        }
        targets.push(format!("{base}{REGISTRY}/acme/foo/{p}.json"));
        targets.push(format!(
            "{base}{REGISTRY}/acme/foo/terraform-provider-foo_1.0.0_{p}_amd64.zip"
        ));
        targets.push(format!("{base}v1/providers/{REGISTRY}/{p}/foo/versions"));
        targets.push(format!(
            "{base}v1/providers/{REGISTRY}/acme/foo/{p}/download/linux/amd64"
        ));
        targets.push(format!(
            "{base}v1/providers/{REGISTRY}/acme/foo/1.0.0/SHA256SUMS/{p}"
        ));
    }
    targets.push(format!("{base}..%2f..%2f..%2fetc%2fpasswd"));
    targets.push(format!(
        "{base}{REGISTRY}/acme/foo/..%2f..%2f..%2fetc%2fpasswd.json"
    ));
    for target in &targets {
        let (status, body) = raw_get(&ca, &mirror, target).await;
        assert!(
            status == 400 || status == 404,
            "{target:?} answered {status}: {body}"
        );
        // hyper itself refuses some bytes in a request target before any routing (no body);
        // everything that reaches the router gets the JSON error body.
        if !body.is_empty() {
            let v: Value = serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("{target:?}: not JSON ({e}): {body}"));
            assert_eq!(v["error"]["status"], status, "{target:?}");
        }
    }
    assert_eq!(origin.total_requests(), 0, "nothing reached the origin");
    assert!(mirror.cached_archives().is_empty());
    let written = files_under(&mirror.cache_dir.join("metadata"));
    assert!(written.is_empty(), "{written:?}");
}

/// A mirror that serves only clients presenting [`TOKEN`], with `extra` keys for `[auth]`.
async fn start_with_auth(ca: &TestCa, origin: &FakeOrigin, extra: &str) -> TestMirror {
    let toml = format!(
        "[auth]\ntokens = [\"{TOKEN}\"]\nurl_signing_key = \"{}\"\n{extra}\n",
        "k".repeat(40)
    );
    let opts = MirrorOptions {
        extra_toml: &toml,
        ..Default::default()
    };
    TestMirror::start_with(ca, origin, opts).await
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_need_a_valid_bearer_token() {
    let (ca, origin) = setup().await;
    let mirror = start_with_auth(&ca, &origin, "").await;
    let client = https_client(&ca, &[]);
    let url = at(&mirror, &index(REGISTRY));
    for token in [None, Some("wrong-token-0123456789"), Some("")] {
        let got = get_with(&client, &url, token).await;
        assert_eq!(got.status, 401, "{token:?}");
        assert_eq!(got.code(), "unauthorized");
        assert_eq!(
            got.headers["www-authenticate"],
            "Bearer realm=\"provender\""
        );
        assert!(!got.message().contains("wrong-token"));
    }
    for path in [
        version_doc(),
        zip("foo", "linux_amd64"),
        format!("v1/providers/{REGISTRY}/acme/foo/versions"),
    ] {
        assert_eq!(get(&client, &mirror.url(&path)).await.status, 401, "{path}");
    }
    // The start page sends people to sign in (every page is checked in `pages.rs`).
    let start = get(&https_client_no_redirects(&ca), &mirror.url("")).await;
    assert_eq!(start.status, 303);
    assert!(
        start.headers["location"]
            .to_str()
            .unwrap()
            .contains("-/sign-in")
    );
    assert_eq!(
        origin.total_requests(),
        0,
        "refused clients cause no origin traffic"
    );
    assert!(mirror.cached_archives().is_empty());

    assert_eq!(get_with(&client, &url, Some(TOKEN)).await.status, 200);
    assert_eq!(get(&client, &mirror.root_url("/healthz")).await.status, 200);
    assert_eq!(get(&client, &mirror.root_url("/metrics")).await.status, 401);
    assert_eq!(
        get_with(&client, &mirror.root_url("/metrics"), Some(TOKEN))
            .await
            .status,
        200
    );

    let flipped = start_with_auth(
        &ca,
        &origin,
        "protect_health = true\nprotect_metrics = false",
    )
    .await;
    assert_eq!(
        get(&client, &flipped.root_url("/healthz")).await.status,
        401
    );
    assert_eq!(get(&client, &flipped.root_url("/readyz")).await.status, 401);
    assert_eq!(
        get(&client, &flipped.root_url("/metrics")).await.status,
        200
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn archive_urls_are_signed_and_checked() {
    let (ca, origin) = setup().await;
    let mirror = start_with_auth(&ca, &origin, "").await;
    let client = https_client(&ca, &[]);
    let doc_url = mirror.url(&version_doc());
    let doc = get_with(&client, &doc_url, Some(TOKEN)).await.json();
    let signed = doc["archives"]["linux_amd64"]["url"]
        .as_str()
        .unwrap()
        .to_string();
    let (file, query) = signed.split_once('?').expect("a signed URL");
    assert_eq!(file, "terraform-provider-foo_1.0.0_linux_amd64.zip");
    assert!(
        query.starts_with("exp=") && query.contains("&sig="),
        "{query}"
    );

    // The CLI resolves the relative URL against the document's and sends no credentials.
    let archive_url = url::Url::parse(&doc_url).unwrap().join(&signed).unwrap();
    let got = get(&client, archive_url.as_str()).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.body,
        origin.archive("acme", "foo", "1.0.0", "linux", "amd64")
    );
    let downloads = origin.count(RequestKind::Archive);

    let (head, sig) = query.split_once("&sig=").unwrap();
    let flipped = if sig.starts_with('A') { "B" } else { "A" };
    let tampered = [
        format!("{file}?{head}&sig={flipped}{}", &sig[1..]),
        format!("{file}?exp=99999999999&sig={sig}"),
        format!("terraform-provider-foo_1.0.0_darwin_arm64.zip?{query}"),
        format!("{file}?{head}"),
    ];
    for bad in &tampered {
        let url = url::Url::parse(&doc_url).unwrap().join(bad).unwrap();
        let got = get(&client, url.as_str()).await;
        assert_eq!(got.status, 403, "{bad}");
        assert_eq!(got.code(), "forbidden", "{bad}");
    }
    assert_eq!(origin.count(RequestKind::Archive), downloads);
    wait_for_archives(&mirror, 1).await;

    let short = start_with_auth(&ca, &origin, "url_ttl = \"1s\"").await;
    let doc_url = short.url(&version_doc());
    let doc = get_with(&client, &doc_url, Some(TOKEN)).await.json();
    let signed = doc["archives"]["darwin_arm64"]["url"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let url = url::Url::parse(&doc_url).unwrap().join(&signed).unwrap();
    let got = get(&client, url.as_str()).await;
    assert_eq!(got.status, 403);
    assert!(got.message().contains("expired"), "{}", got.message());
    assert!(short.cached_archives().is_empty());
}
