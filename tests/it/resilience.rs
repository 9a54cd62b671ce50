//! Resilience: one upstream fetch per artifact, streaming misses, outages and crashes.
//! - 100 concurrent cold requests for one archive: one upstream download, 100 identical bodies;
//! - joiners receive bytes before the download completes; a leader hanging up doesn't stop it;
//! - a checksum mismatch found at the end fails every client's download, nothing is cached;
//! - retries honour `Retry-After`, 501 is not retried; the circuit breaker fails fast, recovers;
//! - stale version lists while the origin is down (`terraform init` still works); offline mode;
//! - `cache.max_size` evicts the least recently used archives;
//! - SIGTERM lets downloads in progress finish; `kill -9` during downloads never leaves an entry
//!   that is served wrong.

use std::time::{Duration, Instant};

use provender::hash::sha256_hex;
use reqwest::StatusCode;

use crate::support::http::{get, send_lenient};
use crate::support::origin::{FakeOrigin, Fault, ProviderSpec, RequestKind};
use crate::support::pki::TestCa;
use crate::support::provender::{
    MirrorOptions, REGISTRY, ServerProcess, TestMirror, files_under, write_config,
};
use crate::support::throttle::Throttle;
use crate::support::{eventually, https_client, init_fresh, sample, tf_config, within};

const MIB: usize = 1 << 20;
const BIG: &[(&str, &str)] = &[
    ("linux", "amd64"),
    ("darwin", "arm64"),
    ("windows", "amd64"),
];

async fn origin_with_big_archives(ca: &TestCa) -> FakeOrigin {
    FakeOrigin::start(
        ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new("acme", "big", &["1.0.0", "2.0.0"], BIG).with_payload(2 * MIB),
            ProviderSpec::new("acme", "foo", &["1.0.0"], &[("linux", "amd64")]),
        ],
    )
    .await
}

/// A CA, [`origin_with_big_archives`], a mirror in front of it configured by `opts`, and a
/// client trusting the CA.
async fn start(opts: MirrorOptions<'_>) -> (TestCa, FakeOrigin, TestMirror, reqwest::Client) {
    let ca = TestCa::new();
    let origin = origin_with_big_archives(&ca).await;
    let mirror = TestMirror::start_with(&ca, &origin, opts).await;
    let client = https_client(&ca, &[]);
    (ca, origin, mirror, client)
}

/// Like [`start`] with default options, but the mirror reaches the origin through a
/// [`Throttle`] passing `rate` bytes a second (keep it alive as long as the mirror).
async fn start_throttled(rate: u64) -> (TestCa, FakeOrigin, Throttle, TestMirror, reqwest::Client) {
    let ca = TestCa::new();
    let origin = origin_with_big_archives(&ca).await;
    let throttle = Throttle::start(origin.addr()).await;
    throttle.set_rate(rate);
    let opts = MirrorOptions {
        connect_to: Some(throttle.addr()),
        ..Default::default()
    };
    let mirror = TestMirror::start_with(&ca, &origin, opts).await;
    let client = https_client(&ca, &[]);
    (ca, origin, throttle, mirror, client)
}

fn big_zip(version: &str, platform: &str) -> String {
    format!("{REGISTRY}/acme/big/terraform-provider-big_{version}_{platform}.zip")
}

/// How long [`eventually`] waits here: commits follow a streamed download.
const SETTLE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn hundred_concurrent_cold_requests_share_one_download() {
    let (_ca, origin, _throttle, mirror, client) = start_throttled(8 * MIB as u64).await;
    let url = mirror.url(&big_zip("1.0.0", "linux_amd64"));
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (client, url) = (client.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let resp = client.get(&url).send().await.unwrap();
            assert_eq!(resp.status(), 200);
            resp.bytes().await.unwrap()
        }));
    }
    let expected = origin.archive("acme", "big", "1.0.0", "linux", "amd64");
    for task in tasks {
        let body = within("a concurrent download", task).await.unwrap();
        assert!(body == expected, "every body is the origin's archive");
    }
    assert_eq!(
        origin.count(RequestKind::Archive),
        1,
        "exactly one upstream download"
    );
    let m = mirror.metrics(&client).await;
    let lookups = |r: &str| {
        sample(
            &m,
            &format!("provender_cache_lookups_total{{kind=\"archive\",result=\"{r}\"}}"),
        )
    };
    assert_eq!(lookups("miss"), 1, "{m}");
    assert_eq!(
        lookups("miss") + lookups("joined") + lookups("hit"),
        100,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn joiners_receive_bytes_before_the_download_completes() {
    // ~2 s for the archive
    let (_ca, origin, _throttle, mirror, client) = start_throttled(MIB as u64).await;
    let url = mirror.url(&big_zip("1.0.0", "darwin_arm64"));

    let mut first = within("leader", client.get(&url).send()).await.unwrap();
    let mut first_body = within("leader's first bytes", first.chunk())
        .await
        .unwrap()
        .unwrap()
        .to_vec();
    let mut second = within("joiner", client.get(&url).send()).await.unwrap();
    let second_start = within("joiner's first bytes", second.chunk())
        .await
        .unwrap()
        .unwrap();
    assert!(!second_start.is_empty());
    assert!(
        mirror.cached_archives().is_empty(),
        "the joiner got bytes while the download was still running"
    );
    let m = mirror.metrics(&client).await;
    assert_eq!(
        sample(
            &m,
            r#"provender_cache_lookups_total{kind="archive",result="joined"}"#
        ),
        1,
        "the second request joined the download: {m}"
    );
    let expected_len = origin
        .archive("acme", "big", "1.0.0", "darwin", "arm64")
        .len();
    assert_eq!(
        second.headers()["content-length"],
        expected_len.to_string().as_str(),
        "the size is announced while streaming"
    );

    let mut second_body = second_start.to_vec();
    while let Some(chunk) = within("leader's rest", first.chunk()).await.unwrap() {
        first_body.extend_from_slice(&chunk);
    }
    while let Some(chunk) = within("joiner's rest", second.chunk()).await.unwrap() {
        second_body.extend_from_slice(&chunk);
    }
    let expected = origin.archive("acme", "big", "1.0.0", "darwin", "arm64");
    assert!(first_body == expected && second_body == expected);
    assert_eq!(origin.count(RequestKind::Archive), 1);
    eventually("the archive is committed", SETTLE, || {
        mirror.cached_archives().len() == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_hanging_up_does_not_stop_the_download() {
    let (_ca, origin, _throttle, mirror, client) = start_throttled(4 * MIB as u64).await;
    let url = mirror.url(&big_zip("2.0.0", "linux_amd64"));
    {
        let mut resp = within("leader", client.get(&url).send()).await.unwrap();
        let _ = within("first bytes", resp.chunk()).await.unwrap();
        // Dropped here: the client hangs up mid-download.
    }
    eventually(
        "the download finishes and is committed anyway",
        SETTLE,
        || mirror.cached_archives().len() == 1,
    )
    .await;
    let got = get(&client, &url).await;
    assert!(got.body == origin.archive("acme", "big", "2.0.0", "linux", "amd64"));
    assert_eq!(origin.count(RequestKind::Archive), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mismatch_found_mid_stream_fails_every_client() {
    let (_ca, origin, _throttle, mirror, client) = start_throttled(4 * MIB as u64).await;
    origin.set_fault(Fault::TamperArchive);
    let url = mirror.url(&big_zip("1.0.0", "windows_amd64"));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (client, url) = (client.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let resp = client.get(&url).send().await.unwrap();
            assert_eq!(
                resp.status(),
                200,
                "headers go out before the bytes are checked"
            );
            resp.bytes().await
        }));
    }
    for task in tasks {
        let body = within("a tampered download", task).await.unwrap();
        assert!(body.is_err(), "every client sees a failed download");
    }
    assert_eq!(origin.count(RequestKind::Archive), 1);
    eventually("the staging file is gone", SETTLE, || {
        mirror.staging_files().is_empty()
    })
    .await;
    assert!(mirror.cached_archives().is_empty(), "nothing was cached");
}

#[tokio::test(flavor = "multi_thread")]
async fn retries_honour_retry_after_and_skip_501() {
    let (_ca, origin, mirror, client) = start(MirrorOptions::default()).await;

    origin.set_fault(Fault::Flaky {
        kind: RequestKind::Versions,
        status: 503,
        times: 2,
        retry_after: Some(1),
    });
    let started = Instant::now();
    let got = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/big/index.json")),
    )
    .await;
    assert_eq!(got.status, 200, "the third attempt succeeds");
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "waited as Retry-After asked: {:?}",
        started.elapsed()
    );
    assert_eq!(origin.count(RequestKind::Versions), 3);

    origin.set_fault(Fault::Flaky {
        kind: RequestKind::Versions,
        status: 501,
        times: 1,
        retry_after: None,
    });
    let got = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/index.json")),
    )
    .await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY);
    assert_eq!(
        origin.count(RequestKind::Versions),
        4,
        "501 Not Implemented is not retried"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_circuit_breaker_fails_fast_then_recovers() {
    let (_ca, origin, mirror, client) = start(MirrorOptions {
        extra_upstream: "retries = 0\nbreaker_failures = 2\nbreaker_cooldown = \"1s\"",
        ..Default::default()
    })
    .await;
    let index = |ty: &str| mirror.url(&format!("{REGISTRY}/acme/{ty}/index.json"));
    let circuit_open = format!("provender_upstream_circuit_open{{host=\"{REGISTRY}\"}}");
    origin.set_fault(Fault::Status {
        kind: RequestKind::Versions,
        status: 500,
    });
    for ty in ["a", "b"] {
        assert_eq!(get(&client, &index(ty)).await.status, 502);
    }
    assert_eq!(origin.count(RequestKind::Versions), 2);
    let fast = get(&client, &index("c")).await;
    assert_eq!(
        fast.status, 503,
        "an open circuit: the origin is unavailable for now"
    );
    let body = fast.text();
    assert!(body.contains("circuit breaker"), "{body}");
    assert_eq!(fast.headers["retry-after"], "5", "when to come back");
    assert_eq!(
        origin.count(RequestKind::Versions),
        2,
        "the open circuit made no request"
    );
    let m = mirror.metrics(&client).await;
    assert_eq!(sample(&m, &circuit_open), 1, "{m}");

    origin.clear_faults();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        get(&client, &index("foo")).await.status,
        200,
        "the probe went through and closed the circuit"
    );
    let m = mirror.metrics(&client).await;
    assert_eq!(sample(&m, &circuit_open), 0, "{m}");
}

#[tokio::test(flavor = "multi_thread")]
async fn terraform_init_works_while_the_origin_is_down() {
    let (ca, origin, mirror, client) = start(MirrorOptions {
        extra_cache: "index_ttl = \"1s\"",
        ..Default::default()
    })
    .await;
    let cli = tf_config::network_mirror(mirror.url.as_str());
    init_fresh(&ca, &cli, tf_config::FOO).await;

    for kind in RequestKind::ALL {
        origin.set_fault(Fault::Status { kind, status: 503 });
    }
    tokio::time::sleep(Duration::from_millis(1200)).await; // the version list is now stale
    init_fresh(&ca, &cli, tf_config::FOO).await;
    let m = mirror.metrics(&client).await;
    assert!(
        sample(
            &m,
            "provender_cache_lookups_total{kind=\"index\",result=\"stale\"}"
        ) >= 1,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn offline_mode_serves_only_the_cache() {
    let (ca, origin, mut mirror, client) = start(MirrorOptions::default()).await;
    // Only statuses count here: a body cut short reads as empty.
    let status = async |url: String| send_lenient(&url, client.get(&url)).await.status;
    let zip = format!("{REGISTRY}/acme/foo/terraform-provider-foo_1.0.0_linux_amd64.zip");
    for path in [
        format!("{REGISTRY}/acme/foo/index.json"),
        format!("{REGISTRY}/acme/foo/1.0.0.json"),
        zip.clone(),
    ] {
        assert_eq!(status(mirror.url(&path)).await, 200);
    }
    mirror.stop().await;
    origin.reset_counts();
    let sealed = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: "offline = true",
            cache_dir: Some(&mirror.cache_dir),
            ..Default::default()
        },
    )
    .await;
    for path in [
        format!("{REGISTRY}/acme/foo/index.json"),
        format!("{REGISTRY}/acme/foo/1.0.0.json"),
        zip,
    ] {
        assert_eq!(status(sealed.url(&path)).await, 200, "{path}");
    }
    for path in [
        format!("{REGISTRY}/acme/big/index.json"),
        big_zip("1.0.0", "linux_amd64"),
    ] {
        assert_eq!(status(sealed.url(&path)).await, 404, "{path}");
    }
    assert_eq!(
        origin.total_requests(),
        0,
        "offline mode never contacts the origin"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn max_size_evicts_the_least_recently_used() {
    let (_ca, _origin, mirror, client) = start(MirrorOptions {
        extra_cache: "max_size = \"5 MiB\"",
        ..Default::default()
    })
    .await;
    let fetch = async |platform: &str| {
        let got = get(&client, &mirror.url(&big_zip("1.0.0", platform))).await;
        assert_eq!(got.status, 200);
    };
    let names = || -> Vec<String> {
        let mut n: Vec<String> = mirror
            .cached_archives()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    };
    let file = |p: &str| format!("terraform-provider-big_1.0.0_{p}.zip");
    fetch("linux_amd64").await;
    eventually("first stored", SETTLE, || names().len() == 1).await;
    fetch("darwin_arm64").await;
    eventually("second stored", SETTLE, || names().len() == 2).await;
    fetch("linux_amd64").await; // linux is now more recent than darwin
    fetch("windows_amd64").await;
    eventually("darwin evicted", SETTLE, || {
        names() == vec![file("linux_amd64"), file("windows_amd64")]
    })
    .await;
    // The files go first, the bookkeeping right after: wait for the counters to say so.
    let deadline = Instant::now() + SETTLE;
    loop {
        let m = mirror.metrics(&client).await;
        let evictions = sample(&m, "provender_cache_evictions_total");
        let archives = sample(&m, "provender_cache_archives");
        if (evictions, archives) == (1, 2) {
            break;
        }
        assert!(
            Instant::now() < deadline && evictions <= 1,
            "expected 1 eviction and 2 archives: {m}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A configuration file for running the provender binary against `throttle`, in a fresh
/// directory (returned to keep it alive) with the cache below it.
fn process_config(
    ca: &TestCa,
    throttle: &Throttle,
) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(ca, dir.path(), throttle.addr(), &MirrorOptions::default());
    let cache = dir.path().join("cache");
    (dir, cache, config)
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_downloads_in_progress_finish() {
    let ca = TestCa::new();
    let origin = origin_with_big_archives(&ca).await;
    let throttle = Throttle::start(origin.addr()).await;
    throttle.set_rate(MIB as u64);
    let (_dir, cache, config) = process_config(&ca, &throttle);
    let mut server = ServerProcess::spawn(&config);
    let client = https_client(&ca, &[]);
    let url = server.url(&big_zip("2.0.0", "darwin_arm64"));
    let mut resp = within("download", client.get(&url).send()).await.unwrap();
    let mut body = within("first bytes", resp.chunk())
        .await
        .unwrap()
        .unwrap()
        .to_vec();
    server.signal("TERM");
    while let Some(chunk) = within("the rest after SIGTERM", resp.chunk())
        .await
        .unwrap()
    {
        body.extend_from_slice(&chunk);
    }
    assert!(
        body == origin.archive("acme", "big", "2.0.0", "darwin", "arm64"),
        "the response finished intact"
    );
    let status = tokio::task::spawn_blocking(move || {
        let status = server.wait();
        (status, server.log())
    })
    .await
    .unwrap();
    assert!(status.0.success(), "clean exit: {}\n{}", status.0, status.1);
    let archives = files_under(&cache.join("archives"));
    assert!(
        archives
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "zip")),
        "the download was committed before exit"
    );
    assert!(files_under(&cache.join("tmp")).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_during_downloads_never_leaves_a_wrong_entry() {
    let ca = TestCa::new();
    let origin = origin_with_big_archives(&ca).await;
    let throttle = Throttle::start(origin.addr()).await;
    // Fast enough that later rounds complete downloads (all six may share one HTTP/2
    // connection: ~1 s in all), slow enough that early rounds are cut mid-download.
    throttle.set_rate(12 * MIB as u64);
    let (_dir, cache, config) = process_config(&ca, &throttle);
    let client = https_client(&ca, &[]);
    let archives: Vec<(&str, &str, &str)> = ["1.0.0", "2.0.0"]
        .iter()
        .flat_map(|v| BIG.iter().map(move |(os, arch)| (*v, *os, *arch)))
        .collect();

    let mut interrupted = 0;
    for round in 0..8 {
        let server = ServerProcess::spawn(&config);
        for (version, os, arch) in &archives {
            let (client, url) = (
                client.clone(),
                server.url(&big_zip(version, &format!("{os}_{arch}"))),
            );
            tokio::spawn(async move {
                if let Ok(resp) = client.get(&url).send().await {
                    let _ = resp.bytes().await;
                }
            });
        }
        // Kill at a different point of the downloads each round (they take ~1 s in all). The
        // last round waits until an archive is committed, however loaded the machine is, so
        // the cache surely holds entries written just before a crash.
        if round == 7 {
            let committed = || {
                files_under(&cache.join("archives"))
                    .iter()
                    .any(|p| p.extension().is_some_and(|e| e == "zip"))
            };
            crate::support::eventually(
                "an archive is committed",
                Duration::from_secs(30),
                committed,
            )
            .await;
        } else {
            tokio::time::sleep(Duration::from_millis(100 + 150 * round)).await;
        }
        server.signal("KILL");
        drop(server);
        if !files_under(&cache.join("tmp")).is_empty() {
            interrupted += 1;
        }
    }
    assert!(
        interrupted > 0,
        "at least one kill landed in the middle of a download"
    );

    // After the last crash: a clean start, no throttle needed, then check everything served.
    throttle.set_rate(0);
    let server = ServerProcess::spawn(&config);
    assert!(
        files_under(&cache.join("tmp")).is_empty(),
        "leftovers removed at start"
    );
    let cached = files_under(&cache.join("archives"));
    let cached_zips = cached
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "zip"))
        .count();
    assert!(
        cached_zips > 0,
        "some downloads completed across the rounds"
    );
    for (version, os, arch) in &archives {
        let got = get(
            &client,
            &server.url(&big_zip(version, &format!("{os}_{arch}"))),
        )
        .await;
        assert_eq!(got.status, 200);
        assert_eq!(
            sha256_hex(&got.body),
            origin.sha256_hex("acme", "big", version, os, arch),
            "{version} {os}_{arch}"
        );
    }
    for version in ["1.0.0", "2.0.0"] {
        let url = server.url(&format!("{REGISTRY}/acme/big/{version}.json"));
        let doc = get(&client, &url).await.json();
        for (os, arch) in BIG {
            for h in doc["archives"][format!("{os}_{arch}")]["hashes"]
                .as_array()
                .unwrap()
            {
                let h = h.as_str().unwrap();
                let expected = if h.starts_with("h1:") {
                    origin.h1_zip("acme", "big", version, os, arch)
                } else {
                    format!("zh:{}", origin.sha256_hex("acme", "big", version, os, arch))
                };
                assert_eq!(h, expected, "{version} {os}_{arch}");
            }
        }
    }
}

/// A small tmpfs mounted for one test (needs root, as CI has), unmounted on drop.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(path: &std::path::Path, size: &str) -> SmallDisk {
        std::fs::create_dir_all(path).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "this test mounts a small tmpfs to fill a disk: run it as root"
        );
        SmallDisk(path.to_path_buf())
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_still_serves_the_client_and_caches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let _disk = SmallDisk::mount(&cache, "1m"); // the archive is 2 MiB
    let (_ca, origin, mirror, client) = start(MirrorOptions {
        cache_dir: Some(&cache),
        ..Default::default()
    })
    .await;
    // `get` panics unless the client is served in full.
    let got = get(&client, &mirror.url(&big_zip("1.0.0", "linux_amd64"))).await;
    assert_eq!(got.status, 200);
    assert!(got.body == origin.archive("acme", "big", "1.0.0", "linux", "amd64"));
    eventually("the staging file is removed", SETTLE, || {
        mirror.staging_files().is_empty()
    })
    .await;
    assert!(
        mirror.cached_archives().is_empty(),
        "nothing torn is left behind"
    );
    let m = mirror.metrics(&client).await;
    assert_eq!(sample(&m, "provender_cache_write_errors_total"), 1, "{m}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_holds_no_more_than_max_fill_memory() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let _disk = SmallDisk::mount(&cache, "1m"); // the archive is 2 MiB
    let (_ca, origin, mirror, client) = start(MirrorOptions {
        cache_dir: Some(&cache),
        extra_cache: "max_fill_memory = \"256 KiB\"",
        ..Default::default()
    })
    .await;
    let url = mirror.url(&big_zip("2.0.0", "linux_amd64"));
    let got = send_lenient(&url, client.get(&url)).await;
    let size = origin
        .archive("acme", "big", "2.0.0", "linux", "amd64")
        .len();
    assert!(
        got.status == 507 || (got.status == 200 && got.body.len() < size),
        "the download fails once more than cache.max_fill_memory would be held: {} {} bytes",
        got.status,
        got.body.len()
    );
    if got.status == 507 {
        assert!(
            got.message().contains("cache.max_fill_memory"),
            "{}",
            got.text()
        );
    }
    eventually("the staging file is removed", SETTLE, || {
        mirror.staging_files().is_empty()
    })
    .await;
    assert!(mirror.cached_archives().is_empty(), "nothing was cached");
}
