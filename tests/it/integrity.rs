//! Nothing unverified leaves the mirror while an archive streams in:
//! - an origin that alters the last bytes of an archive (its signed SHA256SUMS and `shasum`
//!   genuine) never gets a complete copy to any client: not to the leader, not to joiners, not
//!   over HTTP/1.1 (a short body on a closed connection) nor HTTP/2 (a reset stream), for an
//!   archive just above the 64 KiB response-head threshold and for one of several MiB;
//! - `curl`, which checks `Content-Length`, reports the transfer as failed over both protocols;
//! - the same holds for the OCI mirror's layer blobs, which are the same archives;
//! - nothing is cached and no staging file is left.

use std::time::Duration;

use reqwest::Version as HttpVersion;

use crate::support::origin::{FakeOrigin, Fault, ProviderSpec, RequestKind};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror};
use crate::support::throttle::Throttle;
use crate::support::{eventually, install_crypto_provider, sample, within};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// What one client saw of a download.
#[derive(Debug)]
pub(crate) struct Seen {
    pub(crate) status: u16,
    pub(crate) received: usize,
    /// The body ended cleanly (the client took it as complete).
    pub(crate) clean_end: bool,
}

pub(crate) fn client(ca: &TestCa, http: HttpVersion) -> reqwest::Client {
    install_crypto_provider();
    let root = reqwest::Certificate::from_pem(ca.ca_pem().as_bytes()).unwrap();
    let builder = reqwest::Client::builder()
        .tls_certs_only([root])
        .no_proxy()
        .timeout(Duration::from_secs(60));
    let builder = if http == HttpVersion::HTTP_2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    };
    builder.build().unwrap()
}

/// GETs `url` and reads the response to its end, counting the bytes that arrived before any
/// error. A request that fails before its head (an HTTP/2 stream reset before the head was
/// sent, a connection closed before it) is a failed download that received nothing.
pub(crate) async fn download(client: &reqwest::Client, url: &str, http: HttpVersion) -> Seen {
    let mut resp = match within(url, client.get(url).send()).await {
        Ok(resp) => resp,
        Err(_) => {
            return Seen {
                status: 0,
                received: 0,
                clean_end: false,
            };
        }
    };
    assert_eq!(
        resp.version(),
        http,
        "the client speaks the protocol under test"
    );
    let status = resp.status().as_u16();
    let mut received = 0;
    loop {
        match within("reading a body", resp.chunk()).await {
            Ok(Some(chunk)) => received += chunk.len(),
            Ok(None) => {
                return Seen {
                    status,
                    received,
                    clean_end: true,
                };
            }
            Err(_) => {
                return Seen {
                    status,
                    received,
                    clean_end: false,
                };
            }
        }
    }
}

/// `curl` (which checks `Content-Length` and HTTP/2 stream ends) downloading `url`: its exit
/// code and how many bytes it wrote.
pub(crate) async fn curl(
    ca_file: &std::path::Path,
    url: &str,
    http2: bool,
) -> (Option<i32>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("body");
    let status = within(
        "curl",
        tokio::process::Command::new("curl")
            .args(["--silent", "--show-error", "--fail", "--max-time", "60"])
            .arg(if http2 { "--http2" } else { "--http1.1" })
            .arg("--cacert")
            .arg(ca_file)
            .arg("--output")
            .arg(&out)
            .arg(url)
            .status(),
    )
    .await
    .expect("run curl (install it: CI does)");
    let written = std::fs::metadata(&out)
        .map(|m| m.len() as usize)
        .unwrap_or(0);
    (status.code(), written)
}

/// Which of the mirror's ways to an archive the clients take.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    /// The network mirror's archive URL.
    NetworkMirror,
    /// The OCI mirror's layer blob (the tag resolved first, as OCI clients do).
    Oci,
}

/// How many times the origin was asked for an archive's bytes (`HEAD`s for sizes aside).
fn archive_downloads(origin: &FakeOrigin) -> usize {
    origin
        .requests()
        .iter()
        .filter(|r| r.kind == Some(RequestKind::Archive) && r.method == "GET")
        .count()
}

/// The URL of the linux_amd64 layer blob of `acme/<ty>` 1.0.0, found as OCI clients find it.
async fn oci_blob_url(mirror: &TestMirror, c: &reqwest::Client, ty: &str) -> String {
    let repo = format!("{REGISTRY}/acme/{ty}");
    let json = async |path: String| -> serde_json::Value {
        let resp = within("OCI document", c.get(mirror.root_url(&path)).send())
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap()
    };
    let index = json(format!("/v2/{repo}/manifests/1.0.0")).await;
    let manifest = index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let manifest = json(format!("/v2/{repo}/manifests/{manifest}")).await;
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    mirror.root_url(&format!("/v2/{repo}/blobs/{layer}"))
}

/// The origin alters the last 10 bytes of `acme/<ty>` archives of `payload` bytes; the mirror
/// reaches it through a throttle passing `rate` bytes a second, so that joiners join.
async fn tampered_tail_reaches_no_client(
    ty: &str,
    payload: usize,
    rate: u64,
    http: HttpVersion,
    via: Via,
) {
    let ca = TestCa::new();
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new("acme", ty, &["1.0.0"], &[("linux", "amd64")]).with_payload(payload),
        ],
    )
    .await;
    origin.set_fault(Fault::TamperTail);
    let size = origin.archive("acme", ty, "1.0.0", "linux", "amd64").len();
    assert!(size > 64 * KIB, "above the response-head threshold");
    let throttle = Throttle::start(origin.addr()).await;
    throttle.set_rate(rate);
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            connect_to: Some(throttle.addr()),
            ..Default::default()
        },
    )
    .await;
    let http2 = http == HttpVersion::HTTP_2;
    let c = client(&ca, http);
    let url = match via {
        Via::NetworkMirror => mirror.url(&format!(
            "{REGISTRY}/acme/{ty}/terraform-provider-{ty}_1.0.0_linux_amd64.zip"
        )),
        Via::Oci => oci_blob_url(&mirror, &c, ty).await,
    };

    let ca_dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_ca(ca_dir.path());

    let leader = {
        let (c, url) = (c.clone(), url.clone());
        tokio::spawn(async move { download(&c, &url, http).await })
    };
    eventually(
        "the leader's download reaches the origin",
        Duration::from_secs(10),
        || archive_downloads(&origin) == 1,
    )
    .await;
    let mut joiners = Vec::new();
    for _ in 0..3 {
        let (c, url) = (c.clone(), url.clone());
        joiners.push(tokio::spawn(async move { download(&c, &url, http).await }));
    }
    let curl_joiner = {
        let (ca_file, url) = (ca_file.clone(), url.clone());
        tokio::spawn(async move { curl(&ca_file, &url, http2).await })
    };
    let mut seen = vec![within("the leader", leader).await.unwrap()];
    for j in joiners {
        seen.push(within("a joiner", j).await.unwrap());
    }
    if size > 2 * MIB {
        assert!(
            seen.iter().any(|s| s.status == 200 && s.received > 0),
            "a large archive streams before its verdict: {seen:?}"
        );
    }
    for (i, s) in seen.iter().enumerate() {
        let who = if i == 0 { "the leader" } else { "a joiner" };
        assert!(
            !(s.status == 200 && s.clean_end),
            "{who} over {http:?} took a tampered archive as complete: {s:?}"
        );
        assert!(
            s.received <= size - 10,
            "{who} over {http:?} received the altered tail: {s:?} of {size}"
        );
    }
    let (code, written) = within("curl", curl_joiner).await.unwrap();
    assert_ne!(
        code,
        Some(0),
        "curl over {http:?} reports a failed transfer"
    );
    assert!(written <= size - 10, "curl wrote {written} of {size} bytes");

    assert_eq!(archive_downloads(&origin), 1, "one download, shared");
    let m = mirror.metrics(&c).await;
    assert!(
        sample(
            &m,
            r#"provender_cache_lookups_total{kind="archive",result="joined"}"#
        ) >= 3,
        "the later requests joined the download: {m}"
    );
    assert_eq!(
        sample(
            &m,
            r#"provender_verification_failures_total{reason="archive_checksum"}"#
        ),
        1,
        "{m}"
    );
    eventually(
        "the staging file is removed",
        Duration::from_secs(10),
        || mirror.staging_files().is_empty(),
    )
    .await;
    assert!(mirror.cached_archives().is_empty(), "nothing was cached");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_tail_just_above_the_head_threshold_fails_over_http1() {
    tampered_tail_reaches_no_client(
        "edge",
        66 * KIB,
        24 * KIB as u64,
        HttpVersion::HTTP_11,
        Via::NetworkMirror,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_tail_just_above_the_head_threshold_fails_over_http2() {
    tampered_tail_reaches_no_client(
        "edge",
        66 * KIB,
        24 * KIB as u64,
        HttpVersion::HTTP_2,
        Via::NetworkMirror,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_tail_of_several_mib_fails_over_http1() {
    tampered_tail_reaches_no_client(
        "large",
        4 * MIB,
        2 * MIB as u64,
        HttpVersion::HTTP_11,
        Via::NetworkMirror,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_tail_of_several_mib_fails_over_http2() {
    tampered_tail_reaches_no_client(
        "large",
        4 * MIB,
        2 * MIB as u64,
        HttpVersion::HTTP_2,
        Via::NetworkMirror,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oci_layer_with_a_tampered_tail_fails_over_http1() {
    tampered_tail_reaches_no_client(
        "large",
        4 * MIB,
        2 * MIB as u64,
        HttpVersion::HTTP_11,
        Via::Oci,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oci_layer_with_a_tampered_tail_fails_over_http2() {
    tampered_tail_reaches_no_client(
        "large",
        4 * MIB,
        2 * MIB as u64,
        HttpVersion::HTTP_2,
        Via::Oci,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_small_oci_layer_with_a_tampered_tail_is_refused_over_http2() {
    tampered_tail_reaches_no_client(
        "edge",
        66 * KIB,
        24 * KIB as u64,
        HttpVersion::HTTP_2,
        Via::Oci,
    )
    .await;
}
